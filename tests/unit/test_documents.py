"""The stored documents and their keys: versioned, upcast on read, one place for each key."""

from __future__ import annotations

import inspect
import re
from datetime import UTC, datetime

import pytest

from schemas import keys
from schemas.documents import ArtifactManifest, Document, MeasuredResult, Outcome, RunSummary
from schemas.events import SchemaError
from tests.conftest import archived_summary, measured_result


def test_a_document_written_before_versioning_reads_as_version_1_and_is_written_with_its_version():
    outcome = Outcome.read(b'{"status": "done", "result_key": "results/k.json", "reused": true}')
    assert outcome.reused and outcome.result_key == "results/k.json"
    assert outcome.to_dict() == {
        "status": "done",
        "result_key": "results/k.json",
        "reused": True,
        "document_version": 1,
    }


def test_an_unknown_version_or_a_document_that_does_not_fit_is_refused_with_the_reason():
    with pytest.raises(SchemaError, match="unknown version 7 of Outcome"):
        Outcome.read({"status": "done", "document_version": 7})
    with pytest.raises(SchemaError, match="Outcome v1 does not fit"):
        Outcome.read({"status": "maybe"})


def test_an_older_version_is_upcast_by_the_class_s_own_upcasters():
    class Manifest2(ArtifactManifest):  # as a next version would declare it
        VERSION = 2
        UPCASTERS = {1: lambda old: {**old, "details": {**old.get("details", {}), "upcast": True}}}

    old = ArtifactManifest(artifact_file="m.onnx", optimizer="onnx", hardware="intel", target_cpu="x", conversion_s=1.0)
    assert Manifest2.read(old.to_bytes()).details == {"upcast": True}


def test_fields_a_reader_does_not_know_survive_a_round_trip():
    stored = {**measured_result("intel/onnx/b1/1769MB", p99=2.0, cost=0.1), "written_by_a_newer_version": {"x": 1}}
    assert MeasuredResult.read(stored).to_dict() == stored


def test_a_stored_result_and_a_manifest_build_their_events_in_one_place():
    result = MeasuredResult.read(measured_result("intel/onnx/b4/1769MB", p99=8.0, cost=0.1))
    done = result.inference_done(result_key="results/x.json", reused=True)
    assert (done.p50_ms, done.p99_ms, done.reused, done.combo.batch_size) == (4.0, 8.0, True, 4)
    manifest = ArtifactManifest(
        artifact_file="m.so", optimizer="tvm", hardware="intel", target_cpu="x", conversion_s=2.0, tuning_s=5.0
    )
    converted = manifest.model_converted(
        model=result.model, combo=result.combo, combo_key="k", artifact_key="a", reused=True
    )
    assert (converted.artifact_file, converted.tuning_s, converted.artifact_reused) == ("m.so", 5.0, True)


def test_the_test_summary_builder_writes_what_the_archiver_writes():
    summary = archived_summary(
        "r1",
        "partial",
        [measured_result("intel/onnx/b1/1769MB", p99=2.0, cost=0.1)],
        [{"label": "intel/base/b1/128MB", "stage": "inference", "reason": "x"}],
    )
    assert RunSummary.read(summary).failures[0].combo.memory_mb == 128


def test_every_key_function_is_in_the_layout_and_no_service_spells_a_key():
    functions = [
        name
        for name, f in inspect.getmembers(keys, inspect.isfunction)
        if f.__module__ == keys.__name__ and f.__annotations__.get("return") == "str"
    ]
    layout = keys.__doc__
    for name in functions:
        parameters = inspect.signature(getattr(keys, name)).parameters
        arguments = {"input_size": [1, 2], "archived_at": datetime(2026, 1, 1, tzinfo=UTC), "count": 3}
        example = getattr(keys, name)(*[arguments.get(p, "x") for p in parameters])
        top = example.split("/")[0]
        assert f"\n{top}/" in layout, f"{name} ({example}) is not in the layout"
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    # store keys, not the API's URLs (`runs/{id}` is also a URL path)
    spelled = re.compile(
        r"""["'](runs/[^"']*(\.json|/events/)|(models|results|artifacts|references|tuning|processed|failures|dead-letters)/)"""
    )
    offenders = [
        str(path.relative_to(root))
        for folder in ("services", "core", "adapters", "ayci", "engines", "report")
        for path in (root / folder).rglob("*.py")
        if spelled.search(path.read_text())
    ]
    assert offenders == [], f"keys spelled outside schemas/keys.py: {offenders}"


def test_every_document_class_is_versioned():
    import schemas.documents as documents

    classes = [
        c for _, c in inspect.getmembers(documents, inspect.isclass) if issubclass(c, Document) and c is not Document
    ]
    assert len(classes) >= 6 and all(isinstance(c.VERSION, int) and c.VERSION >= 1 for c in classes)
