"""The inference handler's decisions that need no engine: a busy machine is a retry, not a failure."""

from __future__ import annotations

import json
import sys

from adapters.memory_store import MemoryStore
from core.runtime import Delayed
from measuring.launcher import MachineBusy, MeasurementFailed
from schemas import keys
from schemas.combos import Combo, ModelRef, reference_key
from schemas.events import ComboFailed, Envelope, ModelConverted
from services.inference.handlers import InferenceDeps, on_model_converted

MODEL = ModelRef(sha256="ab" * 32, size_bytes=1, format="onnx", workload="image_classification", input_size=[32, 32])
COMBO = Combo(hardware="intel", optimizer="onnx", batch_size=1, memory_mb=1769)


def converted_event(store: MemoryStore) -> Envelope:
    store.put_bytes(keys.artifact_file("a", "model.onnx"), b"onnx")
    store.put_bytes(keys.reference(reference_key(MODEL, 1)), b"npz")
    payload = ModelConverted(
        model=MODEL, combo=COMBO, combo_key="k", artifact_key="a", artifact_file="model.onnx", conversion_s=1.0
    )
    return Envelope.wrap(payload, run_id="r", producer="converter")


def deps_raising(store: MemoryStore, exc: Exception) -> InferenceDeps:
    def measure(spec, python_command):
        raise exc

    return InferenceDeps(store=store, measure=measure, runtime_for=lambda hardware: ([sys.executable], False))


def test_a_busy_machine_postpones_the_measurement():
    store = MemoryStore()
    event = converted_event(store)
    (out,) = on_model_converted(
        event, deps_raising(store, MachineBusy("the machine's measurement lock was busy for 900 s"))
    )
    assert isinstance(out, Delayed) and out.payload == event.payload


def test_a_measurement_that_fails_fails_its_combination():
    store = MemoryStore()
    (out,) = on_model_converted(
        converted_event(store), deps_raising(store, MeasurementFailed("out of memory at 1769 MB (peak 2100 MB)"))
    )
    assert isinstance(out, ComboFailed) and out.reason.startswith("out of memory")


def test_a_requested_profile_runs_on_the_stored_result_and_its_failure_fails_nothing():
    from schemas.events import ProfileRequested
    from services.inference.handlers import on_profile_requested
    from tests.conftest import measured_result

    store = MemoryStore()
    result = measured_result("intel/onnx/b1/1769MB", p99=5.0, cost=0.4)
    store.put_bytes(keys.result_version(result["combo_key"], "r0"), json.dumps(result).encode())
    profiled = []

    def profile(store_, stored):
        profiled.append(stored["combo_key"])
        raise MeasurementFailed("out of memory at 1769 MB (peak 1800 MB)")

    deps = InferenceDeps(store=store, profile=profile)
    asked = ProfileRequested(
        combo=COMBO, combo_key=result["combo_key"], result_key=keys.result_version(result["combo_key"], "r0")
    )
    assert on_profile_requested(Envelope.wrap(asked, run_id="r0", producer="request"), deps) == []
    assert profiled == [result["combo_key"]]
    gone = ProfileRequested(combo=COMBO, combo_key="k", result_key=keys.result_version("k", "r9"))
    assert on_profile_requested(Envelope.wrap(gone, run_id="r9", producer="request"), deps) == [] and profiled == [
        result["combo_key"]
    ]
