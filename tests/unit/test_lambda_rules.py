"""Lambda's rules in every answer: the dated limits file, a batch's payload against 6 MB (JSON
and base64 .npy), the init phase against 10 s, the deployment form (zip or container image) by
the runtime's installed size, SnapStart's eligibility; the plan marks them, the table shows
them and the recommendation never picks a combination that breaks one."""

from __future__ import annotations

import datetime as dt

from core.lambda_rules import engine_runtime, fit_of_row, lambda_fit, output_shapes, payload, workload_input_shapes
from core.planning import plan_run
from report.recommendation import recommend
from report.table import summary_rows
from schemas.combos import Combo, ModelRef
from schemas.documents import RunSummary, SummaryResult
from schemas.events import Matrix, RequestSubmitted
from schemas.lambda_limits import load_limits
from schemas.signature import ModelSignature

SIX_MB = 6 * 2**20


def image_model(size_bytes: int = 45 * 2**20, fmt: str = "pt2", size=(224, 224)) -> ModelRef:
    return ModelRef(
        sha256="b" * 64, size_bytes=size_bytes, format=fmt, workload="image_classification", input_size=list(size)
    )


def row(optimizer: str, batch: int, *, model: ModelRef, p99: float, cost: float, init_ms: float = 800.0) -> dict:
    return {
        "combo": {"hardware": "intel", "optimizer": optimizer, "batch_size": batch, "memory_mb": 1769},
        "model": model.model_dump(mode="json"),
        "latency_ms": {"p50": p99 * 0.8, "p90": p99 * 0.9, "p99": p99},
        "cold_start_ms": {"total": init_ms + 50.0, "first_inference": 50.0},
        "agreement": {"metric": "top1", "score": 1.0},
        "cost": {"per_million_inferences_usd": cost},
    }


def test_the_limits_file_is_dated_and_sourced():
    limits = load_limits()
    dt.date.fromisoformat(limits.date)
    assert limits.sync_payload.request_bytes == limits.sync_payload.response_bytes == SIX_MB
    assert limits.init_phase_s.value == 10
    assert limits.deployment.zip_unzipped_bytes == 250 * 2**20 and limits.deployment.container_image_bytes == 10 * 2**30
    assert (limits.ephemeral_storage_mb.default, limits.ephemeral_storage_mb.max) == (512, 10240)
    assert limits.snapstart.python_min == "3.12" and limits.snapstart.max_ephemeral_storage_mb == 512
    assert (limits.concurrency.account_default, limits.concurrency.scaling_per_10_s) == (1000, 1000)
    for part in (limits.sync_payload, limits.init_phase_s, limits.deployment, limits.snapstart, limits.concurrency):
        assert part.source.startswith("https://docs.aws.amazon.com/lambda/")
    assert limits.runtime_mb("torch") > 250 > limits.runtime_mb("onnxruntime")


def test_a_batch_of_eight_224_images_breaks_the_payload_rule_and_one_image_does_not():
    model = image_model()
    eight = payload(workload_input_shapes(model, 8))
    assert eight.json_bytes > SIX_MB and eight.binary_bytes > SIX_MB  # 4.6 MB raw: 6.1 MB as base64, 24 MB JSON
    fit = lambda_fit(
        model,
        Combo(hardware="intel", optimizer="onnx", batch_size=8, memory_mb=1769),
        inputs=workload_input_shapes(model, 8),
    )
    assert fit.broken and "request over Lambda's 6 MB payload" in fit.broken[0]
    one = lambda_fit(
        model,
        Combo(hardware="intel", optimizer="onnx", batch_size=1, memory_mb=1769),
        inputs=workload_input_shapes(model, 1),
    )
    assert one.broken == [] and one.request.json_bytes < SIX_MB
    # four images fit as binary, not as JSON: a note (send binary), not a broken rule
    four = lambda_fit(
        model,
        Combo(hardware="intel", optimizer="onnx", batch_size=4, memory_mb=1769),
        inputs=workload_input_shapes(model, 4),
    )
    assert four.broken == [] and any("as JSON" in n and "send .npy" in n for n in four.notes)


def test_the_response_is_checked_from_the_signature_outputs():
    signature = ModelSignature(
        format="onnx",
        inputs=[{"name": "input_ids", "dtype": "int64", "dims": ["batch", "seq"]}],
        outputs=[{"name": "hidden", "dtype": "float32", "dims": ["batch", "seq", 1024]}],
    )
    inputs = {"input_ids": ((16, 512), "int64")}
    outputs = output_shapes(signature, 16, inputs)
    assert outputs == {"hidden": ((16, 512, 1024), "float32")}
    model = ModelRef(sha256="c" * 64, size_bytes=2**20, format="onnx", workload="nlp", input_size=[512])
    fit = lambda_fit(
        model, Combo(hardware="intel", optimizer="onnx", batch_size=16, memory_mb=1769), inputs=inputs, outputs=outputs
    )
    assert len(fit.broken) == 1 and fit.broken[0].startswith("response over")


def test_deployment_form_by_the_runtime_and_artifact_sizes():
    assert engine_runtime("base", "pt2") == "torch" and engine_runtime("base", "onnx") == "onnxruntime"
    assert engine_runtime("onnx_int8", "pt2") == "onnxruntime" and engine_runtime("tvm", "onnx") == "tvm"
    small = image_model(size_bytes=12 * 2**20)
    base = lambda_fit(small, Combo(hardware="intel", optimizer="base", batch_size=1, memory_mb=1769), inputs=None)
    assert base.deployment == "image" and base.package_mb > 250
    assert base.snapstart is False and "container image" in base.snapstart_reason
    onnx = lambda_fit(small, Combo(hardware="intel", optimizer="onnx", batch_size=1, memory_mb=1769), inputs=None)
    assert onnx.deployment == "zip" and onnx.package_mb < 250 and onnx.snapstart is True
    assert onnx.ephemeral_storage_mb == 512 and "python3.12" in onnx.snapstart_reason
    # an ONNX model of 200 MB with ONNX Runtime is over 250 MB unzipped: an image
    big = image_model(size_bytes=200 * 2**20, fmt="onnx")
    assert (
        lambda_fit(big, Combo(hardware="intel", optimizer="onnx", batch_size=1, memory_mb=3008), inputs=None).deployment
        == "image"
    )
    huge = image_model(size_bytes=11 * 2**30, fmt="onnx")
    over = lambda_fit(huge, Combo(hardware="intel", optimizer="onnx", batch_size=1, memory_mb=10240), inputs=None)
    assert over.deployment == "none" and "container image" in over.broken[0]


def test_init_over_ten_seconds_is_flagged_and_never_recommended():
    model = image_model(fmt="onnx")
    slow = SummaryResult.model_validate(row("onnx", 1, model=model, p99=5, cost=0.1, init_ms=12_000))
    fit = fit_of_row(slow)
    assert fit.init_s == 12.0 and any("init 12.0 s over Lambda's 10 s" in b for b in fit.broken)
    ok = row("onnx", 1, model=model, p99=9, cost=0.2)
    rec = recommend([slow, ok], slo_p99_ms=None, min_agreement=0.99)
    assert (
        rec.fastest == rec.cheapest == rec.balanced == "intel/onnx/b1/1769MB"
        and "intel/onnx/b1/1769MB" in rec.candidates
    )
    assert len(rec.candidates) == 1
    assert [why for why in rec.excluded.values()][0].startswith("breaks Lambda's rules: init 12.0 s")


def test_a_batch_of_eight_images_is_never_recommended_and_the_table_says_why():
    model = image_model(fmt="onnx")
    rows = [
        row("onnx", 8, model=model, p99=2.0, cost=0.01),  # fastest and cheapest per inference, but 8 images a request
        row("onnx", 1, model=model, p99=9.0, cost=0.5),
    ]
    rec = recommend(rows, slo_p99_ms=None, min_agreement=0.99)
    assert "intel/onnx/b8/1769MB" not in rec.candidates
    assert rec.balanced == rec.fastest == rec.cheapest == "intel/onnx/b1/1769MB"
    assert "request over Lambda's 6 MB payload" in rec.excluded["intel/onnx/b8/1769MB"]
    summary = RunSummary.model_validate(
        {
            "run_id": "r",
            "status": "complete",
            "archived_at": "2026-12-06T00:00:00+00:00",
            "closed_at_deadline": False,
            "model": model.model_dump(mode="json"),
            "request": {},
            "results": rows,
            "failures": [],
        }
    )
    table = {r.combination: r for r in summary_rows(summary)}
    assert "breaks Lambda's rule: request over Lambda's 6 MB payload" in table["intel/onnx/b8/1769MB"].note
    assert "breaks" not in table["intel/onnx/b1/1769MB"].note
    assert table["intel/onnx/b1/1769MB"].cell("lambda_deployment").startswith("zip ")
    rules = table["intel/onnx/b8/1769MB"].model_dump()["lambda_rules"]  # in the API's JSON
    assert rules["broken"] and rules["request"]["binary_bytes"] > SIX_MB and rules["snapstart"] is True


def test_the_plan_marks_the_rules_before_measuring():
    model = image_model(size_bytes=45 * 2**20)
    request = RequestSubmitted(
        model=model,
        matrix=Matrix(optimizers={"intel": ["base", "onnx"]}, batch_sizes=[1, 8], memory_sizes_mb=[1769]),
    )
    plan = plan_run(request, None, None)
    fits = {c.combo.label: c.as_dict()["lambda"] for c in plan.combos}
    assert fits["intel/onnx/b8/1769MB"]["broken"] and not fits["intel/onnx/b1/1769MB"]["broken"]
    assert fits["intel/base/b1/1769MB"]["deployment"] == "image" and fits["intel/onnx/b1/1769MB"]["deployment"] == "zip"
    assert plan.as_dict()["totals"]["breaking_lambda_rules"] == 2  # base and onnx at batch 8


def test_the_break_even_compares_against_the_fastest_untuned_row_that_could_be_recommended():
    """The issue's sentence encoder: tvm 14 % faster than onnx, but "never pays off" against an
    onnx_int8 row that agreed with base only 0.816 and was itself excluded."""
    from report.recommendation import with_break_even
    from tests.conftest import measured_result

    tvm = {**measured_result("intel/tvm/b1/1769MB", p99=8.6, cost=0.3), "tuning_s": 600.0}
    onnx = measured_result("intel/onnx/b1/1769MB", p99=10.0, cost=0.4)
    int8 = measured_result("intel/onnx_int8/b1/1769MB", p99=6.0, cost=0.2, agreement=0.816)
    payoff = {r.label: r for r in with_break_even([tvm, onnx, int8], "us-east-1")}["intel/tvm/b1/1769MB"].break_even
    assert payoff.against == "intel/onnx/b1/1769MB" and payoff.inferences is not None
    # at a threshold the int8 row meets, it is the yardstick (and tvm never pays off against it)
    lax = {r.label: r for r in with_break_even([tvm, onnx, int8], "us-east-1", min_agreement=0.8)}
    assert lax["intel/tvm/b1/1769MB"].break_even.against == "intel/onnx_int8/b1/1769MB"
    assert lax["intel/tvm/b1/1769MB"].break_even.inferences is None
