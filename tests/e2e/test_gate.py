"""`ayci gate` on real measurements (the example ResNet-18, ONNX Runtime, confined): the same
model at a larger input size exits 1 naming the combination and what differs; `--confirm 2`
re-measures a regressed combination through every service (a forced replay) and judges the
median; the gate measuring the run itself from run options (the unchanged model: its stored
result) passes. Whether identical re-runs stay within noise is a rate on this host, not one
run's outcome: `bench/bench_gate.py` measures it."""

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

    assert cli_main(["gate", "--baseline", small, large, "--confirm", "2", "--format", "json", *data]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["gate"]["confirmations"] == 2
    assert all("confirmed on the median of this run and 2" in r["reason"] for r in document["gate"]["regressions"])
    key = document["combinations"][0]["key_b"]
    versions = [k for k in app.store.list_keys(f"results/{key}/") if k.endswith(".json") and k.count(".") == 1]
    assert len(versions) == 3  # the run's measurement and two re-measurements, each kept
    assert "B: the median of 3 measurements" in document["combinations"][0]["figures"]["p99_ms"]["noise_basis"]

    # the run measured by the gate itself, from run options: the 32x32 model again is answered
    # from its stored result (nothing measured twice) and passes against its own baseline
    options = ["--model", str(tiny_image_model), "--input-size", "32,32", "--matrix", "intel=onnx", "--memory", "1769"]
    assert cli_main(["gate", "--baseline", small, *options, "--format", "json", *data]) == 0
    passed = json.loads(capsys.readouterr().out)
    assert passed["gate"]["passed"] and passed["run_b"] not in (small, large)
    assert passed["combinations"][0]["combination"] == LABEL
