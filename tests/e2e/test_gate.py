"""`ayci gate` on real measurements (the example ResNet-18, ONNX Runtime, confined): the same
model at a larger input size exits 1 naming the combination and what differs, and `--confirm 6`
confirms it by measuring both artifacts side by side; a baseline whose stored figures were
artificially good fails the gate until `--confirm` measures it beside the run; the gate
measuring the run itself from run options (the unchanged model: its stored result) passes.
Whether identical re-runs stay within noise is a rate on this host, not one run's outcome:
`bench/bench_gate.py` measures it."""

from __future__ import annotations

import json

from ayci.bootstrap import embedded
from ayci.cli import main as cli_main
from ayci.settings import Settings
from schemas import keys
from schemas.combos import Matrix
from schemas.events import RequestSubmitted
from services.request.submission import new_run, store_model
from tests.conftest import SMALL_IMAGE_SIZE, TINY_IMAGE_SIZE

LABEL = "intel/onnx/b1/1769MB"


def measured(app, model_path, input_size, force=False) -> str:
    model = store_model(app.store, model_path, "image_classification", input_size)
    matrix = Matrix(optimizers={"intel": ["onnx"]}, batch_sizes=[1], memory_sizes_mb=[1769])
    envelope = new_run(RequestSubmitted(model=model, matrix=matrix, force=force, min_agreement=0.99))
    app.publisher.publish([envelope])
    app.bus.run_until_idle()
    assert json.loads(app.store.get_bytes(keys.summary(envelope.run_id)))["status"] == "complete"
    return envelope.run_id


def key_of(app, run_id: str) -> str:
    """The combination key of the one row a run measured."""
    (row,) = json.loads(app.store.get_bytes(keys.summary(run_id)))["results"]
    return row["combo_key"]


def test_a_larger_input_fails_the_gate_and_confirm_re_measures_it(
    tmp_path, tiny_image_model, small_image_model, capsys
):
    settings = Settings(data_dir=tmp_path / "data", measure_time_cap_s=2.0)
    app = embedded(settings)
    small = measured(app, tiny_image_model, TINY_IMAGE_SIZE)  # 32x32
    large = measured(app, small_image_model, SMALL_IMAGE_SIZE)  # 128x128: 16 times the pixels
    data = ["--data-dir", str(settings.data_dir)]

    assert cli_main(["gate", "--baseline", small, large, "--format", "markdown", *data]) == 1
    out = capsys.readouterr().out
    assert f"- `{LABEL}`: p99 ms " in out and "| input size | 32x32 | 128x128 |" in out

    stored_before = {k: app.store.get_bytes(k) for k in app.store.list_keys("results/")}
    assert any(k.startswith(f"results/{key_of(app, large)}/{large}.") for k in stored_before)  # the run's own
    confirm = ["--confirm", "6", "--confirm-time-cap", "0.3"]
    assert cli_main(["gate", "--baseline", small, large, *confirm, "--format", "json", *data]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["gate"]["confirmations"] == 6 and document["gate"]["paired"][0]["combination"] == LABEL
    p99 = next(r for r in document["gate"]["regressions"] if r["figure"] == "p99_ms")
    assert "; confirmed by 6 paired rounds: x" in p99["reason"] and p99["change_pct"] > 100  # 16 times the pixels
    assert document["combinations"][0]["key_b"] == key_of(app, large)
    # measured side by side, not stored as a result: every stored result is as it was, and none is new
    # (whether the run's own measurement is a refined version or a quick one its race kept)
    assert {k: app.store.get_bytes(k) for k in app.store.list_keys("results/")} == stored_before

    # the run measured by the gate itself, from run options: the 32x32 model again is answered
    # from its stored result (nothing measured twice) and passes against its own baseline
    options = ["--model", str(tiny_image_model), "--input-size", "32,32", "--matrix", "intel=onnx", "--memory", "1769"]
    assert cli_main(["gate", "--baseline", small, *options, "--format", "json", *data]) == 0
    passed = json.loads(capsys.readouterr().out)
    assert passed["gate"]["passed"] and passed["run_b"] not in (small, large)
    assert passed["combinations"][0]["combination"] == LABEL


def test_the_paired_confirmation_clears_a_baseline_that_was_measured_in_a_lucky_moment(
    tmp_path, tiny_image_model, capsys
):
    """The same model measured again against a baseline whose stored figures are half than
    it measures (a pinned file, its latencies, cost and history scaled by 0.5: a quiet moment the
    run cannot repeat): judged on the stored figures it regresses; measured side by side with the
    baseline's artifact, now, the ratio is about 1 and the gate passes, naming what it cleared."""
    settings = Settings(data_dir=tmp_path / "data", measure_time_cap_s=2.0)
    app = embedded(settings)
    first = measured(app, tiny_image_model, TINY_IMAGE_SIZE)
    again = measured(app, tiny_image_model, TINY_IMAGE_SIZE, force=True)
    data = ["--data-dir", str(settings.data_dir)]
    pinned = tmp_path / "baseline.json"
    assert cli_main(["baseline", first, "--out", str(pinned), *data]) == 0
    document = json.loads(pinned.read_text())
    for row in document["summary"]["results"]:
        latency = row["latency_ms"]
        for name in ("p50", "p90", "p95", "p99", "mean", "min", "max", "ci95_low", "ci95_high", "p99_ci95_low",
                     "p99_ci95_high", "billed_ms_mean"):  # fmt: skip
            if latency.get(name) is not None:
                latency[name] *= 0.5
        row["cost"]["per_million_inferences_usd"] *= 0.5
    for points in document["history"].values():
        for point in points:
            for name in ("p50_ms", "p99_ms", "billed_ms_mean"):
                if point.get(name) is not None and point["run_id"] == first:
                    point[name] *= 0.5
    pinned.write_text(json.dumps(document))
    capsys.readouterr()

    assert cli_main(["gate", "--baseline", str(pinned), again, "--format", "json", *data]) == 1
    judged = json.loads(capsys.readouterr().out)["gate"]
    assert {r["figure"] for r in judged["regressions"]} >= {"p99_ms"}

    confirm = ["--confirm", "6", "--confirm-time-cap", "0.3"]
    assert cli_main(["gate", "--baseline", str(pinned), again, *confirm, "--format", "json", *data]) == 0
    cleared = json.loads(capsys.readouterr().out)["gate"]
    assert cleared["passed"] and cleared["confirmations"] == 6
    p50 = cleared["paired"][0]["figures"]["p50_ms"]
    assert 0.85 < p50["ratio"] < 1.15 and p50["low"] < 1.05  # the same artifact on both sides
    assert {r["figure"] for r in cleared["unconfirmed"]} >= {"p99_ms"}
    assert all("not confirmed by 6 paired rounds: x" in r["reason"] for r in cleared["unconfirmed"])
