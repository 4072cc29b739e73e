"""Models as people export them, through every engine on the embedded default: a positional
`.pt2` whose inputs are named unlike the workload's, a keyword export with a fixed batch (the
plan stops the batch it cannot run before any worker sees it), and the user's own inputs."""

import json

import numpy as np
import pytest
import torch

from ayci.bootstrap import embedded
from ayci.cli import main as cli_main
from ayci.settings import Settings
from schemas import keys
from schemas.combos import Matrix
from schemas.events import RequestSubmitted
from services.request.submission import new_run, store_inputs, store_model
from tests.unit.test_model_signature import export


@pytest.fixture
def app(tmp_path):
    return embedded(Settings(data_dir=tmp_path / "data", measure_time_cap_s=1.0, measure_min_iterations=5))


def run(app, request):
    envelope = new_run(request)
    app.publisher.publish([envelope])
    app.bus.run_until_idle()
    return json.loads(app.store.get_bytes(keys.summary(envelope.run_id)))


def test_a_positional_export_runs_on_every_engine(app, tmp_path):
    model = store_model(app.store, export(tmp_path, "pos.pt2", positional=True, dynamic=True), "nlp", [6])
    matrix = Matrix(optimizers={"intel": ["base", "onnx", "tvm"]}, batch_sizes=[1, 2], memory_sizes_mb=[1769])
    # exact: a race would skip untuned TVM (never seen ahead of ONNX Runtime, `core.tuning_stakes.never_ahead`)
    summary = run(app, RequestSubmitted(model=model, matrix=matrix, tuning_trials=0, precision="exact"))
    assert not summary["failures"], summary["failures"]
    assert len(summary["results"]) == 6
    assert all(r["agreement"]["score"] > 0.999 for r in summary["results"])


def test_a_fixed_batch_is_stopped_by_the_plan_with_the_reason(app, tmp_path):
    model = store_model(app.store, export(tmp_path, "kw.pt2", positional=False, dynamic=False), "nlp", [6])
    matrix = Matrix(optimizers={"intel": ["base", "onnx"]}, batch_sizes=[2, 4], memory_sizes_mb=[1769])
    summary = run(app, RequestSubmitted(model=model, matrix=matrix))
    assert sorted(r["combo"]["batch_size"] for r in summary["results"]) == [2, 2]
    assert len(summary["failures"]) == 2
    for failure in summary["failures"]:
        assert failure["stage"] == "plan" and failure["combo"]["batch_size"] == 4
        assert failure["reason"].startswith(
            "ids, mask and token_type_ids have a fixed batch of 2: batch 4 cannot run; "
            "export with a dynamic batch dimension"
        )
    # no worker saw them: nothing converted or measured for batch 4
    assert not any("/b4/" in k for k in app.store.list_keys("processed/inference/"))


def test_your_own_inputs_drive_reference_agreement_and_timing(app, tmp_path):
    inputs = tmp_path / "inputs.npz"
    rng = np.random.default_rng(1)
    np.savez(
        inputs,
        ids=rng.integers(0, 50, (3, 6)),
        mask=np.ones((3, 6), np.int64),
        token_type_ids=np.zeros((3, 6), np.int64),
    )
    sha = store_inputs(app.store, inputs)
    model = store_model(
        app.store, export(tmp_path, "pos.pt2", positional=True, dynamic=True), "custom", [1], inputs_sha256=sha
    )
    matrix = Matrix(optimizers={"intel": ["base", "onnx"]}, batch_sizes=[2], memory_sizes_mb=[1769])
    summary = run(app, RequestSubmitted(model=model, matrix=matrix))
    assert not summary["failures"] and len(summary["results"]) == 2
    for result in summary["results"]:
        assert result["agreement"]["metric"] == "per_output" and result["agreement"]["score"] > 0.999
        assert result["agreement"]["output1_exact"] == 1.0  # the integer output, compared exactly


def test_cli_plan_and_inspect(tmp_path, capsys):
    model = export(tmp_path, "kw.pt2", positional=False, dynamic=False)
    assert cli_main(["inspect", str(model), "--json"]) == 0
    signature = json.loads(capsys.readouterr().out)
    assert [i["name"] for i in signature["inputs"]] == ["ids", "mask", "token_type_ids"]
    code = cli_main(
        [
            "plan",
            "--json",
            "--data-dir",
            str(tmp_path / "data"),
            "--model",
            str(model),
            "--workload",
            "nlp",
            "--input-size",
            "6",
            "--batch",
            "2,4",
            "--memory",
            "128,1769",
            "--matrix",
            "intel=base,onnx",
        ]
    )
    assert code == 0
    plan = json.loads(capsys.readouterr().out)
    states = {c["label"]: c["state"] for c in plan["combinations"]}
    assert states["intel/onnx/b2/1769MB"] == "measure" and states["intel/onnx/b4/1769MB"] == "impossible"
    assert states["intel/base/b2/128MB"] == "impossible"  # torch alone needs more than 128 MB
    assert plan["totals"]["impossible"] == 5 and plan["totals"]["to_measure"] == 3
    unbound = tmp_path / "unbound.pt2"

    class TwoImages(torch.nn.Module):
        def forward(self, pixels, boxes):
            return pixels.mean() + boxes.mean()

    torch.export.save(torch.export.export(TwoImages(), (torch.ones(1, 3, 8, 8), torch.ones(1, 4))), str(unbound))
    assert cli_main(["plan", "--model", str(unbound), "--input-size", "8,8", "--data-dir", str(tmp_path / "data")]) == 2
    assert "boxes (float32 [1, 4]) matches none of the image_classification workload's inputs" in " ".join(
        capsys.readouterr().err.split()
    )
