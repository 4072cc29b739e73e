"""engines.tvm on tiny models: convert (tuned with a few trials), load, agree with base;
stored tuning records reused; arm cross-compilation; the detector's NMS; ONNX input; a clear
ConversionError for an operator TVM cannot import."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from engines import ConversionError, ConversionJob, base_engine
from engines import tvm as tvm_engine
from engines.tvm import build as tvm_build
from engines.tvm import importer as tvm_importer
from engines.tvm import race as tvm_race
from engines.tvm import records as tvm_records
from engines.tvm import search as tvm_search
from engines.tvm import target as tvm_target
from engines.tvm import tuning as tvm_tuning
from schemas.combos import ModelRef
from tests.conftest import import_or_skip_unless_required
from workloads import workload_module

TRIALS = 8
AARCH64 = 183


@pytest.fixture(autouse=True)
def _tvm_installed():
    """Without Apache TVM these tests skip, or fail when AYCI_REQUIRE_TVM is set (scripts/test.sh
    sets it). AYCI's own TVM engine is imported plainly above: a broken import fails."""
    import_or_skip_unless_required("tvm", "AYCI_REQUIRE_TVM")


def _model_ref(path: Path, workload: str, input_size: list[int], fmt: str = "pt2") -> ModelRef:
    return ModelRef(
        sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        size_bytes=path.stat().st_size,
        format=fmt,
        workload=workload,
        input_size=input_size,
    )


def _job(
    model: ModelRef,
    path: Path,
    out: Path,
    hardware: str = "intel",
    batch: int = 1,
    trials: int = 0,
    tuning_dir: Path | None = None,
    messages=None,
    time_limit_s: float | None = None,
) -> ConversionJob:
    out.mkdir(parents=True, exist_ok=True)
    cpu = _host_cpu() if hardware == "intel" else "neoverse-n1"
    return ConversionJob(
        model=model,
        model_path=path,
        hardware=hardware,
        batch_size=batch,
        target_cpu=cpu,
        out_dir=out,
        tuning_trials=trials,
        tuning_dir=tuning_dir,
        tuning_time_limit_s=time_limit_s,
        progress=(messages.append if messages is not None else (lambda m: None)),
    )


def _searched_what_was_asked(details: dict, asked: int) -> bool:
    """With no time limit a search is asked `asked` trials and measures some; MetaSchedule's last
    batch may take it past `asked` (50 of 48 has been seen), so the count measured is not exact."""
    return details["trials_asked"] == asked and details["trials"] > 0 and details["time_limit_reached"] is False


_CPU: list[str] = []


def _host_cpu() -> str:
    if not _CPU:
        _CPU.append(tvm_engine.host_cpu_name())
    return _CPU[0]


def _elf_machine(path: Path) -> int:
    header = path.read_bytes()[:20]
    assert header[:4] == b"\x7fELF"
    return int.from_bytes(header[18:20], "little")


def test_host_cpu_name_is_a_valid_llvm_cpu():
    import tvm

    name = tvm_engine.host_cpu_name()
    assert name and name != "generic"
    assert (
        tvm.target.codegen.llvm_is_valid_cpu(name, "x86_64-linux-gnu")
        if hasattr(tvm.target.codegen, "llvm_is_valid_cpu")
        else True
    )


@pytest.fixture(scope="module")
def conv_model(tmp_path_factory) -> Path:
    """A small image model with ResNet's kinds of kernels (3x3 stride-1 convolutions, which are
    built both direct and Winograd, a strided one, ReLU, pooling, a dense head), exported at
    32x32 with a dynamic batch as the example models are: a tuned build of it takes seconds where
    ResNet-18's takes minutes on 2 cores."""
    return _export_small_conv(_small_conv(), tmp_path_factory.mktemp("models") / "small-conv-32.pt2")


def _small_conv():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, stride=2, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(32, 100),
    ).eval()


def _export_small_conv(model, path: Path) -> Path:
    import torch

    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(model, (torch.zeros(2, 3, 32, 32),), dynamic_shapes=({0: batch},))
    torch.export.save(program, str(path))
    return path


SHARED_TRIALS = 2 * TRIALS  # two tasks' worth (MIN_TRIALS_PER_TASK each)


@pytest.fixture(scope="module")
def tuned_conv(conv_model, tmp_path_factory) -> tuple:
    """The small convolutional model tuned at batch 2 with SHARED_TRIALS from no records: one
    tuned conversion checked by `test_tuned_conversion_loads_agrees_and_reuses_records` and whose
    records another model takes in `test_a_model_with_the_same_kernels_takes_their_schedules_from_the_others_records`
    (neither writes to them). (conversion, its progress messages, tuning folder, artifact folder)."""
    root = tmp_path_factory.mktemp("tvm-tuned")
    messages: list[str] = []
    model = _model_ref(conv_model, "image_classification", [32, 32])
    conversion = tvm_engine.convert(
        _job(
            model,
            conv_model,
            root / "a",
            batch=2,
            trials=SHARED_TRIALS,
            tuning_dir=root / "tuning",
            messages=messages,
        )
    )
    return conversion, messages, root / "tuning", root / "a"


def test_tuned_conversion_loads_agrees_and_reuses_records(conv_model, tuned_conv, tmp_path):
    size = [32, 32]
    model = _model_ref(conv_model, "image_classification", size)
    first, messages, tuning, artifact_dir = tuned_conv
    assert first.artifact_file == "model.so" and sorted(p.name for p in artifact_dir.iterdir()) == ["model.so"]
    assert first.tuning_s > 0 and first.conversion_s > 0
    assert (
        _searched_what_was_asked(first.details, SHARED_TRIALS)
        and first.details["records_reused"] is False
        and first.details["tuned"] is True
    )
    assert first.details["target"]["mcpu"] == _host_cpu()
    assert any("tuned" in m for m in messages), messages
    assert (tuning / "database_tuning_record.json").stat().st_size > 0
    # 3x3 convolutions (as ResNet's): direct and Winograd both tuned and timed, the faster shipped.
    timed = first.details["variants_p50_ms"]
    assert set(timed) == {"nhwc", "nhwc-winograd"} and all(ms > 0 for ms in timed.values())
    assert first.details["variant"] == min(timed, key=timed.get)
    assert any("fastest" in m for m in messages), messages

    module = workload_module("image_classification")
    inputs = module.example_inputs(2, size)
    reference = base_engine.load(conv_model, 2)(inputs)
    outputs = tvm_engine.load(artifact_dir / "model.so", 2)(inputs)
    agreement = module.agreement(reference, outputs)
    assert agreement.score == 1.0 and agreement.details["max_abs_diff"] < 1e-3

    records = (tuning / "database_tuning_record.json").read_bytes()
    second_messages: list[str] = []
    second = tvm_engine.convert(
        _job(
            model,
            conv_model,
            tmp_path / "b",
            batch=2,
            trials=SHARED_TRIALS,
            tuning_dir=tuning,
            messages=second_messages,
        )
    )
    # the stored records answer every kernel: no trial is measured again, no record added (not timed:
    # wall-clock comparisons fail on a shared machine)
    assert second.details["records_reused"] is True
    assert not any(m.startswith("tvm: tuned") for m in second_messages), second_messages
    assert (tuning / "database_tuning_record.json").read_bytes() == records
    again = tvm_engine.load(tmp_path / "b" / "model.so", 1)(inputs)
    assert module.agreement(reference, again).score == 1.0


def test_after_a_first_round_over_both_builds_the_rest_of_the_budget_goes_to_the_one_estimated_fastest(
    tmp_path, monkeypatch
):
    """A model with 3x3 convolutions is built direct and Winograd; the first round tunes every
    kernel of both, then a build behind the best by more than the race's margin (0 here) gets
    no more trials."""
    import torch
    import tvm
    from tvm.s_tir import meta_schedule as ms

    class OneConvolution(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 32, 3, padding=1)
            self.head = torch.nn.Linear(32, 10)

        def forward(self, pixels):
            return self.head(torch.relu(self.conv(pixels)).mean((2, 3)))

    size = [32, 32]
    inputs = {
        name: torch.from_numpy(value)
        for name, value in workload_module("image_classification").example_inputs(1, size).items()
    }
    path = tmp_path / "one-convolution.pt2"
    torch.export.save(torch.export.export(OneConvolution().eval(), (), inputs), str(path))
    tvm_tuning.register_cpu_tensor_intrinsics_only()
    program = tvm_importer.import_pt2(path, {k: v.numpy() for k, v in inputs.items()})
    variants = tvm_build.prepare(program, tvm_target.target_spec("intel", _host_cpu()), True)
    tasks, uses = tvm_tuning.extract_tasks(
        variants, tvm.target.Target(tvm_target.tuning_target_spec("intel", _host_cpu()))
    )
    trials = tvm_records.MIN_TRIALS_PER_TASK * len(tasks)  # every kernel in the first round
    per_round = max(4, trials // len(tasks) // 2)
    messages: list[str] = []
    monkeypatch.setattr(tvm_race, "RACE_MARGIN", 0.0)

    conversion = tvm_engine.convert(
        _job(
            _model_ref(path, "image_classification", size),
            path,
            tmp_path / "out",
            trials=trials,
            tuning_dir=tmp_path / "tuning",
            messages=messages,
        )
    )

    estimated = conversion.details["variants_estimated_ms"]
    assert set(estimated) == {"nhwc", "nhwc-winograd"} and all(value > 0 for value in estimated.values())
    # the build the rest of the budget went to is the one estimated fastest (to the 4 significant digits kept: a
    # tiny model's builds, 0.06706 and 0.0671 ms, once rounded to 0.067 both, and the first of them was taken)
    went_to = [m.rsplit("kernels that matter of ", 1)[1] for m in messages if "kernels that matter of " in m]
    fastest = went_to[-1] if went_to else None
    assert fastest in estimated and estimated[fastest] == min(estimated.values()), (went_to, estimated, messages)
    database = ms.database.JSONDatabase(work_dir=str(tmp_path / "tuning"), module_equality=tvm_records.MODULE_EQUALITY)

    def records(kernel) -> int:
        return len(database.get_top_k(database.commit_workload(kernel), 10_000)) if database.has_workload(kernel) else 0

    [other] = set(estimated) - {fastest}
    theirs = [
        kernel
        for kernel, _ in uses[other]
        if not any(tvm_records.same_kernel(kernel, mine) for mine, _ in uses[fastest])
    ]
    mine = [kernel for kernel, _ in uses[fastest]]
    assert theirs and all(1 <= records(kernel) <= per_round for kernel in theirs), [records(k) for k in theirs]
    assert sum(records(kernel) for kernel in mine) > per_round * len(mine)  # the second stage's trials went there
    assert _searched_what_was_asked(conversion.details, trials)


def test_a_model_with_the_same_kernels_takes_their_schedules_from_the_others_records(tuned_conv, tmp_path):
    """A fine-tuned copy (other weights, same operators and shapes) needs no search for the
    kernels another model's records hold, searched at least as deeply."""
    import torch

    model = _small_conv()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(1.01)
    copy = _export_small_conv(model, tmp_path / "fine-tuned.pt2")
    size = [32, 32]
    first, _, others_records, _ = tuned_conv  # the other model: tuned at batch 2 with SHARED_TRIALS
    assert first.details["kernels_from_other_models"] == 0 and first.details["tasks"] == 2

    # another model's records that TVM cannot read back: passed over, not a failed conversion
    unreadable = tmp_path / "tuning-unreadable"
    unreadable.mkdir()
    (unreadable / "database_workload.json").write_text('["not a workload"]\n')
    (unreadable / "database_tuning_record.json").write_text('[0, {"x": 1}]\n')
    shutil.copy(others_records / "ayci_tuning.json", unreadable / "ayci_tuning.json")

    messages: list[str] = []
    job = _job(
        _model_ref(copy, "image_classification", size),
        copy,
        tmp_path / "b",
        batch=2,
        trials=SHARED_TRIALS,
        tuning_dir=tmp_path / "tuning-b",
        messages=messages,
    )
    job.shared_tuning_dirs = [unreadable, others_records]
    second = tvm_engine.convert(job)
    assert second.details["kernels_from_other_models"] == 2, second.details
    assert any("tuned for other models" in m for m in messages), messages
    assert second.details["kernels_tuned"] >= first.details["kernels_tuned"]


def test_stored_records_that_do_not_load_are_searched_again(conv_model, tmp_path):
    tuning = tmp_path / "tuning"
    tuning.mkdir()
    (tuning / "database_workload.json").write_text('["not a workload"]\n')
    (tuning / "database_tuning_record.json").write_text('[0, {"x": 1}]\n')
    target = tvm_target.tuning_target_spec("intel", _host_cpu())
    (tuning / "ayci_tuning.json").write_text(json.dumps({"target": target, "trials": 1000, "tasks": 1}))
    messages: list[str] = []
    size = [32, 32]
    conversion = tvm_engine.convert(
        _job(
            _model_ref(conv_model, "image_classification", size),
            conv_model,
            tmp_path / "out",
            trials=TRIALS,
            tuning_dir=tuning,
            messages=messages,
        )
    )
    assert any("do not load" in m for m in messages), messages
    assert conversion.details["records_reused"] is False and _searched_what_was_asked(conversion.details, TRIALS)
    assert json.loads((tuning / "ayci_tuning.json").read_text())["trials"] == conversion.details["trials"]


def test_stored_records_that_lack_some_kernels_have_those_searched(tmp_path):
    """Records stored before the model's kernels changed (another TVM, another lowering) are
    applied where they fit; the kernels they lack are searched, not left as untuned loops. (A
    budget too small for every kernel leaves some out on purpose: those records are applied as
    they are, `test_tuned_conversion_loads_agrees_and_reuses_records`.)"""
    import torch

    def export(layers: list, name: str) -> Path:
        program = torch.export.export(
            torch.nn.Sequential(torch.nn.Flatten(), *layers).eval(), (torch.zeros(1, 3, 8, 8),)
        )
        path = tmp_path / f"{name}.pt2"
        torch.export.save(program, str(path))
        return path

    torch.manual_seed(0)
    hidden = [torch.nn.Linear(192, 32), torch.nn.ReLU()]
    before, after = export(hidden, "before"), export([*hidden, torch.nn.Linear(32, 10)], "after")
    tuning = tmp_path / "tuning"
    trials = 3 * tvm_records.MIN_TRIALS_PER_TASK  # a budget that covers every kernel of both models
    tvm_engine.convert(
        _job(
            _model_ref(before, "image_classification", [8, 8]), before, tmp_path / "a", trials=trials, tuning_dir=tuning
        )
    )
    stored = json.loads((tuning / "ayci_tuning.json").read_text())

    messages: list[str] = []
    conversion = tvm_engine.convert(
        _job(
            _model_ref(after, "image_classification", [8, 8]),
            after,
            tmp_path / "b",
            trials=trials,
            tuning_dir=tuning,
            messages=messages,
        )
    )
    lacking = [re.search(r"lack (\d+) of (\d+) kernels", m) for m in messages]
    ((lacked, kernels),) = [(int(found[1]), int(found[2])) for found in lacking if found]
    assert 0 < lacked < kernels  # the shared layer's kernel came from the records
    assert conversion.details["records_reused"] is False
    assert conversion.details["kernels_tuned"] == conversion.details["kernels"] == kernels, conversion.details
    meta = json.loads((tuning / "ayci_tuning.json").read_text())
    assert meta["tasks"] == stored["tasks"] + lacked and meta["trials"] > stored["trials"]


def test_the_time_limit_ends_a_search_that_its_trials_would_not_and_its_records_answer_the_trials_asked(
    conv_model, tmp_path
):
    """A budget of trials the limit cannot reach: the search ends at the limit with the trials it
    measured recorded and applied (every kernel it reached tuned), says so, and a conversion
    asking the same trials applies those records instead of searching again. (The small
    convolutional model: ResNet-18's import and builds added a minute and nothing to check.)"""
    size, asked = [32, 32], 5000
    model = _model_ref(conv_model, "image_classification", size)
    tuning = tmp_path / "tuning"
    messages: list[str] = []
    first = tvm_engine.convert(
        _job(model, conv_model, tmp_path / "a", trials=asked, tuning_dir=tuning, messages=messages, time_limit_s=20)
    )
    ended = [m for m in messages if "time limit" in m]
    assert ended and "of 5000 trials" in ended[0], messages
    measured = first.details["trials"]
    assert (
        0 < measured < asked and first.details["time_limit_reached"] is True and first.details["trials_asked"] == asked
    )
    assert first.details["kernels_tuned"] > 0 and first.details["tuned"] is True
    meta = json.loads((tuning / "ayci_tuning.json").read_text())
    assert meta["trials"] == measured and meta["trials_asked"] == asked

    again: list[str] = []
    second = tvm_engine.convert(
        _job(model, conv_model, tmp_path / "b", trials=asked, tuning_dir=tuning, messages=again, time_limit_s=20)
    )
    assert second.details["records_reused"] is True and second.details["trials"] == measured, second.details
    assert not any(m.startswith("tvm: tuned") for m in again), again


def test_a_batch_that_comes_back_empty_ends_its_task_and_starts_no_trials():
    """The search strategy's wrapper (`_time_limited`) called through TVM's FFI as the task
    scheduler calls it: an empty batch (the task's search space is measured) is the end of the
    task (None), and the pace counts the trials actually started."""
    import tvm
    from tvm import te
    from tvm.s_tir import meta_schedule as ms

    values = te.placeholder((4,), name="values")
    func = te.create_prim_func([values, te.compute((4,), lambda i: values[i] + 1.0, name="plus_one")])
    candidate = ms.MeasureCandidate(
        tvm.s_tir.Schedule(tvm.IRModule({"main": func})), ms.arg_info.ArgInfo.from_prim_func(func)
    )

    class Batches:  # the search strategy wrapped: hands out these batches in turn
        def __init__(self, batches: list) -> None:
            self.batches = batches

        def generate_measure_candidates(self):
            return self.batches.pop(0)

    limit = tvm_search.TimeLimit(None, started=0.0)
    strategy = tvm_search.time_limited(Batches([[candidate, candidate], [], [candidate]]), limit)
    strategy.batch = 4
    assert len(strategy.generate_measure_candidates()) == 2
    assert strategy.generate_measure_candidates() is None
    assert limit.started_trials == 2


def test_winograd_convolutions_compute_what_direct_ones_do():
    """3x3 stride-1 convolutions at sizes that do and do not divide into 4x4 tiles, with and
    without padding, followed by other convolutions Winograd does not take (stride 2, 1x1)."""
    import torch
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 16, 3, padding=0),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, stride=2, padding=1),
        torch.nn.Conv2d(16, 8, 1),
        torch.nn.Conv2d(8, 8, 3, padding=1),
    ).eval()
    x = torch.randn(2, 3, 15, 13)
    expected = model(x).detach().numpy()
    program = from_exported_program(torch.export.export(model, (x,)), keep_params_as_input=False)
    spec = tvm_target.target_spec("intel", _host_cpu())
    lowered = tvm_build.lower(program, spec, nhwc=True, winograd=True)
    assert tvm_build.winograd_kernels(lowered) == 3
    vm = relax.VirtualMachine(tvm.compile(lowered, target=tvm.target.Target(spec)), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x.numpy()))[0].numpy()
    assert got.shape == expected.shape
    assert np.max(np.abs(got - expected)) < 1e-4 * max(1.0, float(np.max(np.abs(expected))))


# Each output element e of the activations below (inputs N(0, 6^2), outputs from 5e-12 to 1e13)
# must satisfy |e - torch float64| <= atol + rtol * |torch float64|. Measured with these inputs (the
# largest relative error of any element): exp 1.0e-7 (docs/tvm.md: 3.1e-7 over [-87, 88]), erf
# 3.2e-7, tanh 2.5e-7, sigmoid 1.5e-7, SiLU 1.7e-7, softmax 2.5e-6 (at its smallest values, 1e-19);
# float32's own rounding is 6e-8. exp is held to 1e-6 relative with no absolute floor; GELU
# cancels where its output nears 0 (x * (0.5 + 0.5 erf(x / sqrt 2)) for x < -3), so it has an
# absolute floor: its largest absolute error there is 9e-7.
ACTIVATION_TOLERANCE = {"exp": (1e-6, 0.0), "gelu": (1e-5, 2e-6), "gelu tanh": (1e-5, 2e-6)}


def test_exp_erf_tanh_and_what_uses_them_are_computed_by_polynomials_that_agree_with_torch():
    """GELU (both forms), softmax, sigmoid, SiLU, tanh, exp and erf lower to TOPI's polynomial
    approximations (plain arithmetic that vectorizes), not to the C library's scalar `expf`,
    `erff`, `tanhf` (TIR's `T.exp`, `T.erf`, `T.tanh`, `T.sigmoid`), and agree with torch in float64,
    every element to a relative tolerance (`ACTIVATION_TOLERANCE`)."""
    import torch
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    class Activations(torch.nn.Module):
        def forward(self, x):
            functional = torch.nn.functional
            return (
                functional.gelu(x),
                functional.gelu(x, approximate="tanh"),
                torch.softmax(x, -1),
                torch.sigmoid(x),
                functional.silu(x),
                torch.tanh(x),
                torch.exp(x.clamp(max=80.0)),
                torch.erf(x),
            )

    x = torch.randn(4, 64, 96, generator=torch.Generator().manual_seed(0)) * 6
    program = from_exported_program(torch.export.export(Activations(), (x,)), keep_params_as_input=False)
    spec = tvm_target.target_spec("intel", _host_cpu())
    lowered = tvm_build.lower(program, spec, nhwc=False, winograd=False)
    kernels = "\n".join(func.script() for _, func in lowered.functions_items() if isinstance(func, tvm.tirx.PrimFunc))
    for scalar_call in ("T.exp(", "T.erf(", "T.tanh(", "T.sigmoid("):
        assert scalar_call not in kernels, scalar_call
    vm = relax.VirtualMachine(tvm.compile(lowered, target=tvm.target.Target(spec)), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x.numpy()))
    expected = Activations()(x.double())
    for name, value, reference in zip(
        ["gelu", "gelu tanh", "softmax", "sigmoid", "silu", "tanh", "exp", "erf"], got, expected, strict=True
    ):
        rtol, atol = ACTIVATION_TOLERANCE.get(name, (1e-5, 0.0))
        np.testing.assert_allclose(value.numpy(), reference.numpy(), rtol=rtol, atol=atol, err_msg=name)


@pytest.fixture(scope="module")
def untuned_tiny(conv_model, tmp_path_factory) -> Path:
    """The small convolutional model built untuned for this CPU at batch 1 (`model.so`): one
    build shared by the tests that only load, run or profile it."""
    out = tmp_path_factory.mktemp("tvm-untuned")
    model = _model_ref(conv_model, "image_classification", [32, 32])
    conversion = tvm_engine.convert(_job(model, conv_model, out))
    assert conversion.artifact_file == "model.so" and conversion.details["tuned"] is False
    return out / conversion.artifact_file


def test_load_does_not_import_torch(untuned_tiny):
    import subprocess
    import sys

    code = (
        "import sys, numpy as np; from pathlib import Path; from engines import tvm as tvm_engine; "
        f"run = tvm_engine.load(Path({str(untuned_tiny)!r}), 1); "
        "out = run({'pixels': np.zeros((1, 3, 32, 32), np.float32)}); "
        "assert out[0].shape == (1, 100), out[0].shape; "
        "assert 'torch' not in sys.modules, 'torch imported'; print('ok')"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-2000:]


def test_arm_cross_compiles_to_aarch64(conv_model, tmp_path):
    if shutil.which(tvm_engine.ARM_CC) is None:
        if os.environ.get("AYCI_REQUIRE_ARM") == "1":
            pytest.fail(f"{tvm_engine.ARM_CC} missing (scripts/arm-sysroot.sh installs it)")
        pytest.skip(f"{tvm_engine.ARM_CC} missing")
    model = _model_ref(conv_model, "image_classification", [32, 32])
    conversion = tvm_engine.convert(_job(model, conv_model, tmp_path, hardware="arm"))
    assert _elf_machine(tmp_path / conversion.artifact_file) == AARCH64
    assert conversion.details["target"]["mtriple"] == "aarch64-linux-gnu"
    assert conversion.details["target"]["mcpu"] == "neoverse-n1"
    assert conversion.details["tuned"] is False and conversion.details["tuning_note"]


DETECTOR_SIZE = [64, 64]


@pytest.fixture(scope="module")
def detector(tmp_path_factory) -> Path:
    """The example detector exported at DETECTOR_SIZE, once for the two tests that read it."""
    from workloads.examples import export_example

    return export_example("object_detection", DETECTOR_SIZE, tmp_path_factory.mktemp("models") / "detector.pt2")


def test_detector_with_nms_converts_to_nhwc_and_agrees(detector, tmp_path):
    """Run as a measurement runs it: in a process with TVM's runtime only, where the NMS's
    `topk` (in `libtvm_runtime_extra`) was missing. Its convolutions go NHWC like any model's:
    TVM's layout conversion failed on the post-processing's `squeeze(-1)` (`std::bad_alloc`),
    which left the detector in NCHW."""
    import subprocess
    import sys

    size, path = DETECTOR_SIZE, detector
    model = _model_ref(path, "object_detection", size)
    conversion = tvm_engine.convert(_job(model, path, tmp_path / "out", batch=2))
    assert conversion.details["variant"] == "nhwc", conversion.details
    module = workload_module("object_detection")
    inputs = module.example_inputs(2, size)
    reference = base_engine.load(path, 2)(inputs)
    np.savez(tmp_path / "inputs.npz", **inputs)
    code = (
        "import sys, numpy as np; from pathlib import Path; from engines import tvm as tvm_engine; "
        f"inputs = dict(np.load({str(tmp_path / 'inputs.npz')!r})); "
        f"out = tvm_engine.load(Path({str(tmp_path / 'out' / conversion.artifact_file)!r}), 2)(inputs); "
        "assert 'torch' not in sys.modules and 'tvm.relax' not in sys.modules, 'more than the runtime imported'; "
        f"np.savez({str(tmp_path / 'outputs.npz')!r}, *out)"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    saved = np.load(tmp_path / "outputs.npz")
    outputs = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    assert [o.shape for o in outputs] == [r.shape for r in reference]
    assert outputs[2].dtype == np.int64
    agreement = module.agreement(reference, outputs)
    assert agreement.score > 0.99, agreement


def test_kernels_with_nothing_to_schedule_are_not_tuning_tasks(detector):
    """The detector's `topk` (its NMS's sort) is one call into the runtime: no loops for
    MetaSchedule's cost model to read, whose prediction then failed and with it the detector's
    tuning, once a budget of a few hundred trials reached `topk`. It is not a task; the
    convolutions and the post-processing's loops are."""
    import tvm

    size, path = DETECTOR_SIZE, detector
    program = tvm_importer.import_pt2(path, workload_module("object_detection").example_inputs(1, size))
    spec = tvm_target.target_spec("intel", _host_cpu())
    tvm_tuning.register_cpu_tensor_intrinsics_only()
    variants = tvm_build.prepare(program, spec, True)
    assert set(variants) == {"nhwc", "nhwc-winograd"}
    tasks, uses = tvm_tuning.extract_tasks(variants, tvm.target.Target(spec))
    names = [task.task_name for task in tasks]
    assert not [name for name in names if name.startswith("topk")], names
    assert any(name.startswith("conv2d") for name in names) and any("sigmoid" in name for name in names), names


def test_onnx_model_input(conv_model, tmp_path):
    from engines.onnx_engine import export_to_onnx

    onnx_path = tmp_path / "model.onnx"
    export_to_onnx(conv_model, onnx_path)
    model = _model_ref(onnx_path, "image_classification", [32, 32], fmt="onnx")
    conversion = tvm_engine.convert(_job(model, onnx_path, tmp_path / "out", batch=3))
    module = workload_module("image_classification")
    inputs = module.example_inputs(3, [32, 32])
    reference = base_engine.load(conv_model, 1)(inputs)
    outputs = tvm_engine.load(tmp_path / "out" / conversion.artifact_file, 1)(inputs)
    agreement = module.agreement(reference, outputs)
    assert agreement.score == 1.0 and agreement.details["max_abs_diff"] < 1e-3


def test_unsupported_operator_is_a_conversion_error(tmp_path):
    import torch

    class UsesAmax(torch.nn.Module):  # aten.amax has no converter in TVM 0.27's importer
        def forward(self, pixels):
            return pixels.amax(dim=(2, 3))

    program = torch.export.export(
        UsesAmax(), (torch.zeros(2, 3, 8, 8),), dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=64)},)
    )
    path = tmp_path / "amax.pt2"
    torch.export.save(program, str(path))
    model = _model_ref(path, "image_classification", [8, 8])
    with pytest.raises(ConversionError, match="amax"):
        tvm_engine.convert(_job(model, path, tmp_path / "out"))


def test_an_onnx_export_with_a_dynamic_batch_imports_at_a_larger_batch(tmp_path):
    """A dynamic-batch ONNX export of a transformers encoder computes shapes at run time that
    TVM's importer cannot follow at batch 2 ("Reshape expects the input tensor to have known
    shape"); the graph is folded at the conversion's static shapes and imports."""
    import torch

    transformers = import_or_skip_unless_required("transformers", "AYCI_REQUIRE_TRANSFORMERS")
    torch.manual_seed(0)
    config = transformers.DistilBertConfig(
        n_layers=1, dim=32, n_heads=2, hidden_dim=64, vocab_size=100, max_position_embeddings=64
    )
    model = transformers.DistilBertModel(config).eval()
    path = tmp_path / "distilbert.onnx"
    batch = torch.export.Dim("batch", min=1, max=64)
    inputs = (torch.randint(0, 100, (2, 8)), torch.ones(2, 8, dtype=torch.long))
    torch.onnx.export(
        model,
        inputs,
        str(path),
        input_names=["input_ids", "attention_mask"],
        dynamo=True,
        dynamic_shapes=({0: batch}, {0: batch}),
        external_data=False,
        verbose=False,
    )
    for size in (1, 2):
        feeds = {"input_ids": np.zeros((size, 8), np.int64), "attention_mask": np.ones((size, 8), np.int64)}
        module = tvm_importer.import_onnx(path, feeds)
        assert "main" in [gv.name_hint for gv in module.get_global_vars()]


def test_profile_times_every_kernel_the_relax_vm_calls(untuned_tiny, tmp_path):
    """`engines.tvm.profile`: the VM's instrument hook times each call of `runs` inferences; the
    kernels carry their operator type (`fused_conv2d1_add2_relu3` -> `conv2d_add_relu`), the
    convolutions are where a convolutional model's time goes, and the trace is a Chrome trace."""
    from core.profiles import operator_rows

    inputs = {"pixels": np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    trace, calls, run_ms = tvm_engine.profile(untuned_tiny, 1, inputs, 3, tmp_path)
    assert len(run_ms) == 3 and all(ms > 0 for ms in run_ms)
    assert trace["traceEvents"] and all(e["ph"] == "X" and e["dur"] >= 0 for e in trace["traceEvents"])
    rows = operator_rows(calls, 3)
    assert rows[0]["group"] == "conv" and not rows[0]["op_type"].startswith("fused_")
    assert not any(ch.isdigit() for ch in rows[0]["op_type"].replace("conv2d", ""))
    assert sum(ms for _, _, ms in calls) / 3 <= max(run_ms)  # the kernels' time fits in an inference


def test_tuning_output_goes_to_the_run_log_and_its_progress_comes_as_events(tmp_path, capfd):
    """MetaSchedule's task tables and `TaskScheduler picks Task` lines go to the log file the
    caller names (`send_output_to`), not to the terminal; the search's progress comes as
    `tvm.tuning.progress` events: trials done of those asked, the model's estimated time."""
    import torch
    from structlog.testing import capture_logs

    program = torch.export.export(
        torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(192, 32), torch.nn.ReLU()).eval(),
        (torch.zeros(1, 3, 8, 8),),
    )
    path = tmp_path / "linear.pt2"
    torch.export.save(program, str(path))
    run_log = tmp_path / "run.log"
    trials = 2 * tvm_records.MIN_TRIALS_PER_TASK
    capfd.readouterr()
    tvm_engine.send_output_to(run_log)
    try:
        with capture_logs() as events:
            conversion = tvm_engine.convert(
                _job(_model_ref(path, "image_classification", [8, 8]), path, tmp_path / "out", trials=trials)
            )
    finally:
        tvm_engine.send_output_to(None)
    out, err = capfd.readouterr()
    assert "TaskScheduler" not in out + err and "Total trials" not in out + err, (out + err)[-3000:]
    logged = run_log.read_text()
    assert "TaskScheduler picks Task #" in logged and "Total trials" in logged, logged[-3000:]
    progress = [event for event in events if event["event"] == tvm_engine.PROGRESS_EVENT]
    done = [event["trials_done"] for event in progress]
    assert len(progress) >= 2 and done == sorted(done), progress
    last = progress[-1]
    assert last["finished"] is True and last["trials_done"] == conversion.details["trials"] > 0
    assert last["trials_total"] == trials and last["best_ms"] > 0, last


def test_a_second_batch_size_starts_its_search_from_the_schedules_tuned_at_the_first(tmp_path, monkeypatch):
    """Batch 1's records seed batch 4's search (`engines/tvm/seeding.py`, off by default:
    `tuning.SEED_ACROSS_BATCHES`): up to half of each kernel's first batch of candidates is batch
    1's best schedules replayed on it, tiles refitted to the larger batch loop; they are measured
    and recorded like any candidate, and the model still agrees."""
    import torch

    monkeypatch.setattr(tvm_tuning, "SEED_ACROSS_BATCHES", True)

    torch.manual_seed(0)
    network = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(192, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)
    ).eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(network, (torch.zeros(2, 3, 8, 8),), dynamic_shapes=({0: batch},))
    path = tmp_path / "mlp.pt2"
    torch.export.save(program, str(path))
    model = _model_ref(path, "image_classification", [8, 8])
    trials = 2 * tvm_records.MIN_TRIALS_PER_TASK
    first = tvm_engine.convert(_job(model, path, tmp_path / "b1", trials=trials, tuning_dir=tmp_path / "tuning-b1"))
    assert first.details["kernels_seeded_from_other_batches"] == 0  # nothing to start from

    messages: list[str] = []
    job = _job(
        model, path, tmp_path / "b4", batch=4, trials=trials, tuning_dir=tmp_path / "tuning-b4", messages=messages
    )
    job.shared_tuning_dirs = [tmp_path / "tuning-b1"]
    second = tvm_engine.convert(job)
    assert second.details["kernels_seeded_from_other_batches"] >= 1, (second.details, messages)
    assert second.details["kernels_from_other_models"] == 0  # batch 4's kernels are not batch 1's: none taken whole
    assert second.details["tuned"] is True
    # the user's trials stay the cap (a seeded search may need fewer: `search.SEEDED_TRIAL_SHARE`)
    assert 0 < second.details["trials"] < trials + 4  # MetaSchedule's last batch may pass the budget by a few
    # the seeded search answers the trials asked: the next conversion of batch 4 applies its records
    again = tvm_engine.convert(
        _job(model, path, tmp_path / "b4-again", batch=4, trials=trials, tuning_dir=tmp_path / "tuning-b4")
    )
    assert again.details["records_reused"] is True

    inputs = {"pixels": np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32)}
    with torch.no_grad():
        expected = network(torch.from_numpy(inputs["pixels"])).numpy()
    (outputs,) = tvm_engine.load(tmp_path / "b4" / "model.so", 1)(inputs)
    np.testing.assert_allclose(outputs, expected, rtol=1e-4, atol=1e-5)
