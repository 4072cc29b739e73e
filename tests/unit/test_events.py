import json

import pytest
from pydantic import ValidationError

from schemas.combos import Combo, Matrix, ModelRef, Tuning, artifact_key, combo_key
from schemas.events import ComboFailed, Envelope, RequestSubmitted, RunPlanned, SchemaError

MODEL = ModelRef(sha256="a" * 64, size_bytes=10, format="pt2", workload="image_classification", input_size=[224, 224])
MATRIX = Matrix(optimizers={"intel": ["onnx", "base"], "arm": ["tvm"]}, batch_sizes=[4, 1], memory_sizes_mb=[1769])


def test_envelope_roundtrip_keeps_payload_and_ids():
    env = Envelope.wrap(RequestSubmitted(model=MODEL, matrix=MATRIX), run_id="run-1", producer="request")
    back = Envelope.parse(env.to_json())
    assert back == env
    assert back.payload.matrix.optimizers["intel"] == ["base", "onnx"]


def test_caused_ids_are_deterministic():
    env = Envelope.wrap(RequestSubmitted(model=MODEL, matrix=MATRIX), run_id="r", producer="request")
    c = Combo(hardware="intel", optimizer="base", batch_size=1, memory_mb=1769)
    failed = ComboFailed(combo=c, combo_key="k", stage="dedup", reason="x")
    assert (
        env.caused(failed, producer="dedup", index=0).event_id == env.caused(failed, producer="dedup", index=0).event_id
    )
    assert (
        env.caused(failed, producer="dedup", index=0).event_id != env.caused(failed, producer="dedup", index=1).event_id
    )


def test_v1_request_is_upcast_to_the_current_version():
    v1 = {
        "event_id": "e1",
        "type": "RequestSubmitted",
        "schema_version": 1,
        "run_id": "r1",
        "time": "2026-01-01T00:00:00Z",
        "producer": "request",
        "payload": {
            "model": MODEL.model_dump(mode="json"),
            "hardware": ["intel", "arm"],
            "optimizers": ["base", "onnx"],
            "batch_sizes": [1],
            "memory_mb": [1024, 2048],
        },
    }
    env = Envelope.parse(json.dumps(v1))
    assert env.schema_version == RequestSubmitted.VERSION == 8
    assert env.payload.matrix.optimizers == {"intel": ["base", "onnx"], "arm": ["base", "onnx"]}
    assert env.payload.matrix.memory_sizes_mb == [1024, 2048]
    assert env.payload.predict is False


def test_v1_plan_reads_with_nothing_predicted():
    request = RequestSubmitted(model=MODEL, matrix=MATRIX)
    v1 = json.loads(
        Envelope.wrap(
            RunPlanned(model=MODEL, combos={}, deadline="2026-01-01T00:00:00Z", request=request),
            run_id="r",
            producer="p",
        ).to_json()
    )
    v1["schema_version"] = 1
    v1["payload"].pop("predicted")
    v1["payload"]["request"].pop("predict")
    assert Envelope.parse(v1).payload.predicted == {}


def test_predict_needs_more_sizes_than_it_measures():
    with pytest.raises(ValueError, match=r"predict measures up to 3 memory sizes.*3 memory sizes \(1024, 1769, 3538\)"):
        RequestSubmitted(
            model=MODEL,
            matrix=Matrix(optimizers={"intel": ["onnx"]}, batch_sizes=[1], memory_sizes_mb=[1024, 1769, 3538]),
            predict=True,
        )
    four = Matrix(optimizers={"intel": ["onnx"]}, batch_sizes=[1], memory_sizes_mb=[512, 1024, 1769, 3538])
    assert RequestSubmitted(model=MODEL, matrix=four, predict=True).predict


@pytest.mark.parametrize(
    "mutation, message",
    [
        ({"type": "Nope"}, "unknown event type"),
        ({"schema_version": 9}, "unknown version"),
        ({"payload": {"model": 1}}, "does not fit"),
    ],
)
def test_unknown_type_version_or_bad_payload_is_a_clear_error(mutation, message):
    env = json.loads(Envelope.wrap(RequestSubmitted(model=MODEL, matrix=MATRIX), run_id="r", producer="p").to_json())
    env.update(mutation)
    with pytest.raises(SchemaError, match=message):
        Envelope.parse(env)


def test_not_json_is_a_schema_error():
    with pytest.raises(SchemaError, match="not JSON"):
        Envelope.parse(b"{nope")


def test_matrix_expands_every_combination():
    combos = MATRIX.combos()
    assert len(combos) == 3 * 2 * 1
    assert len({combo_key(MODEL, c, Tuning(trials=600, time_limit_s=900)) for c in combos}) == 6


def test_base_artifact_does_not_depend_on_batch_but_onnx_does():
    b1, b4 = (Combo(hardware="intel", optimizer="base", batch_size=b, memory_mb=1769) for b in (1, 4))
    assert artifact_key(MODEL, b1, "x86_64") == artifact_key(MODEL, b4, "x86_64")
    o1, o4 = (Combo(hardware="intel", optimizer="onnx", batch_size=b, memory_mb=m) for b, m in ((1, 1769), (4, 1769)))
    assert artifact_key(MODEL, o1, "x86_64") != artifact_key(MODEL, o4, "x86_64")
    # memory never changes an artifact, but it does change the result key
    o1_big = Combo(hardware="intel", optimizer="onnx", batch_size=1, memory_mb=3538)
    assert artifact_key(MODEL, o1, "x86_64") == artifact_key(MODEL, o1_big, "x86_64")
    assert combo_key(MODEL, o1) != combo_key(MODEL, o1_big)


@pytest.mark.parametrize(
    "matrix",
    [
        {"optimizers": {"quantum": ["base"]}, "batch_sizes": [1], "memory_sizes_mb": [1769]},
        {"optimizers": {"intel": ["tensorrt"]}, "batch_sizes": [1], "memory_sizes_mb": [1769]},
        {"optimizers": {"intel": []}, "batch_sizes": [1], "memory_sizes_mb": [1769]},
        {"optimizers": {}, "batch_sizes": [1], "memory_sizes_mb": [1769]},
        {"optimizers": {"intel": ["base"]}, "batch_sizes": [], "memory_sizes_mb": [1769]},
        {"optimizers": {"intel": ["base"]}, "batch_sizes": [1], "memory_sizes_mb": [127]},
        {"optimizers": {"intel": ["base"]}, "batch_sizes": [1], "memory_sizes_mb": [10241]},
    ],
)
def test_bad_matrix_is_rejected(matrix):
    with pytest.raises(ValidationError):
        Matrix.model_validate(matrix)


@pytest.mark.parametrize(
    "body",
    [
        "[]",
        "123",
        "null",
        '{"detail": []}',
        '"text"',
        # a v1 request missing the fields its upcaster reads
        '{"event_id": "e", "type": "RequestSubmitted", "schema_version": 1, "run_id": "r", '
        '"time": "2026-01-01T00:00:00Z", "producer": "x", "payload": {"model": {}}}',
    ],
)
def test_a_malformed_message_body_is_a_schema_error_never_a_crash(body):
    from adapters.aws import envelope_from_sqs_body

    with pytest.raises(SchemaError):
        envelope_from_sqs_body(body)
