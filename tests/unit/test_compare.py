"""Two runs compared and gated (`report/compare.py`, `ayci compare|baseline|gate`,
`GET /runs/{a}/compare/{b}`), on stored summaries and result versions written with the real
document models into a folder store: nothing is measured."""

from __future__ import annotations

import functools
import json

import pytest

from adapters.local_store import LocalFolderStore
from ayci.cli.app import main
from report.compare import Thresholds, compare, gate, stored_history
from schemas import keys
from schemas.documents import MeasuredResult, RunRecord, RunSummary, SummaryResult
from tests.unit.test_request_api import ALICE, BOB, client, deps  # noqa: F401

LABELS = ("intel/onnx/b1/1769MB", "intel/onnx/b1/3538MB", "arm/base/b1/1769MB")
SHA_V1, SHA_V2 = "ab" * 32, "cd" * 32
ENVIRONMENT = {"cpu_model": "test CPU", "python": "3.11.7", "libraries": {"torch": "2.13.0", "onnxruntime": "1.31.1"}}


def combo_of(label: str) -> dict:
    hardware, optimizer, batch, memory = label.split("/")
    return {"hardware": hardware, "optimizer": optimizer, "batch_size": int(batch[1:]), "memory_mb": int(memory[:-2])}


def model_of(sha: str, input_size: tuple[int, int]) -> dict:
    return {"sha256": sha, "size_bytes": 1000, "format": "pt2", "workload": "image_classification",
            "input_size": list(input_size)}  # fmt: skip


def key_of(sha: str, input_size: tuple[int, int], label: str) -> str:
    return f"{sha[:6]}-{input_size[0]}-{label.replace('/', '-')}"


def measured(
    run_id: str,
    label: str,
    *,
    p50: float,
    sha: str = SHA_V1,
    input_size: tuple[int, int] = (224, 224),
    agreement: float = 1.0,
    at: str = "2026-12-01T00:00:00+00:00",
    environment: dict | None = None,
    interval: float = 0.015,
    p99_interval: float = 0.04,
) -> MeasuredResult:
    """A measured result as the inference service stores it: p99 = 1.5 x p50, cost and cold start
    proportional to it, 95 % intervals of +-`interval` (p50) and +-`p99_interval` (p99)."""
    p99 = 1.5 * p50
    return MeasuredResult.model_validate(
        {
            "combo_key": key_of(sha, input_size, label),
            "combo": combo_of(label),
            "model": model_of(sha, input_size),
            "measurement_version": "m5",
            "measured_at": at,
            "run_id": run_id,
            "conversion_s": 1.0,
            "artifact_key": f"artifact-{label.replace('/', '-')}",
            "cold_start_ms": {
                "process_start": 50.0,
                "imports": 300.0,
                "model_load": 100.0,
                "first_inference": p50 * 3,
                "total": 450.0 + p50 * 3,
            },  # fmt: skip
            "latency_ms": {
                "p50": p50,
                "p90": 1.2 * p50,
                "p99": p99,
                "mean": p50,
                "min": 0.9 * p50,
                "max": 2 * p50,
                "ci95_low": p50 * (1 - interval),
                "ci95_high": p50 * (1 + interval),
                "p99_ci95_low": p99 * (1 - p99_interval),
                "p99_ci95_high": p99 * (1 + p99_interval),
                "cv": 0.05,
                "iterations": 300,
                "converged": True,
                "billed_ms_mean": p50 + 0.5,
            },  # fmt: skip
            "warmup_iterations": 20,
            "agreement": {"score": agreement, "metric": "top1", "samples": 32, "inputs": "synthetic"},
            "peak_rss_mb": 300.0,
            "cost": {"per_million_inferences_usd": 0.03 * (p50 + 0.5)},
            "environment": environment or ENVIRONMENT,
        }
    )


class Lab:
    """A folder store holding runs and every version of their results."""

    def __init__(self, root) -> None:
        self.root = root
        self.store = LocalFolderStore(root)

    def keep(self, result: MeasuredResult) -> MeasuredResult:
        self.store.put_bytes(keys.result_version(result.combo_key, result.run_id), result.to_bytes())
        self.store.put_bytes(keys.result(result.combo_key), result.to_bytes())
        return result

    def archive(self, run_id: str, results: list[MeasuredResult], min_agreement: float = 0.99) -> RunSummary:
        first = results[0]
        summary = RunSummary(
            run_id=run_id,
            status="complete",
            archived_at="2026-12-05T00:00:00+00:00",
            closed_at_deadline=False,
            model=first.model,
            request={"min_agreement": min_agreement},
            results=[SummaryResult.model_validate({**r.to_dict(), "reused": False}) for r in results],
            failures=[],
        )
        self.store.put_bytes(keys.summary(run_id), summary.to_bytes())
        self.store.put_bytes(keys.run_record(run_id), RunRecord(run_id=run_id, owner="alice").to_bytes())
        return summary

    def run(self, run_id: str, factor: float = 1.0, **options) -> RunSummary:
        base = {"intel/onnx/b1/1769MB": 10.0, "intel/onnx/b1/3538MB": 6.0, "arm/base/b1/1769MB": 25.0}
        results = [self.keep(measured(run_id, label, p50=base[label] * factor, **options)) for label in LABELS]
        return self.archive(run_id, results)

    def cli(self, *argv: str) -> int:
        return main([*argv, "--data-dir", str(self.root)])


@pytest.fixture
def lab(tmp_path):
    return Lab(tmp_path / "data")


def verdicts(comparison, figure: str = "p99_ms") -> set[str]:
    return {c.figures[figure].verdict for c in comparison.combinations}


def test_the_same_run_measured_again_is_within_noise_and_the_gate_passes(lab, capsys):
    lab.run("run-0", at="2026-11-01T00:00:00+00:00")
    lab.run("run-1", factor=1.02, at="2026-11-02T00:00:00+00:00")
    lab.run("run-a", factor=0.99, at="2026-12-01T00:00:00+00:00")
    lab.run("run-b", factor=1.01, at="2026-12-02T00:00:00+00:00")  # forced: the same keys, a new version each

    assert lab.cli("compare", "run-a", "run-b", "--format", "json") == 0
    document = json.loads(capsys.readouterr().out)
    assert len(document["combinations"]) == 3 and document["differences"] == []
    for combination in document["combinations"]:
        assert combination["verdict"] == "within noise"
        assert {f["verdict"] for f in combination["figures"].values()} == {"within noise"}
        # the noise comes from the two other versions of the combination, not from run-a and run-b themselves
        assert "history of 2" in combination["figures"]["p50_ms"]["noise_basis"]

    assert lab.cli("gate", "--baseline", "run-a", "run-b") == 0
    assert "gate passed: none of 3 combinations regresses" in capsys.readouterr().out


def test_a_larger_input_size_slower_everywhere_fails_the_gate_naming_each_combination(lab, capsys):
    lab.run("run-a")
    lab.run("run-b", factor=1.3, input_size=(320, 320))
    assert lab.cli("gate", "--baseline", "run-a", "run-b", "--format", "markdown") == 1
    out = capsys.readouterr().out
    assert "❌ **6 regression(s)**" in out  # p99 and cost of each of the three
    for label in LABELS:
        assert f"- `{label}`: p99 ms " in out and f"- `{label}`: $ per million " in out
    assert "+30.0 %" in out and "| input size | 224x224 | 320x320 |" in out

    assert lab.cli("compare", "run-a", "run-b", "--format", "json") == 0
    document = json.loads(capsys.readouterr().out)
    assert {c["verdict"] for c in document["combinations"]} == {"slower"}
    assert {c["figures"]["cost_per_million_usd"]["verdict"] for c in document["combinations"]} == {"costlier"}


def test_a_regression_under_the_threshold_passes(lab, capsys):
    lab.run("run-a")
    lab.run("run-b", factor=1.3)
    assert lab.cli("gate", "--baseline", "run-a", "run-b", "--max-p99-regression", "40%",
                   "--max-cost-regression", "40") == 0  # fmt: skip
    assert "gate passed" in capsys.readouterr().out


def test_agreement_below_the_minimum_fails_the_gate(lab, capsys):
    lab.run("run-a")
    lab.run("run-b", agreement=0.95)
    assert lab.cli("gate", "--baseline", "run-a", "run-b") == 1  # the run's own min_agreement, 0.99
    out = capsys.readouterr().out
    assert "agreement 0.9500 is below the minimum 0.99 (baseline 1.0000)" in out
    assert lab.cli("gate", "--baseline", "run-a", "run-b", "--min-agreement", "0.9") == 0


def test_a_3_percent_difference_inside_the_intervals_is_within_noise(lab):
    a, b = lab.run("run-a"), lab.run("run-b", factor=1.03)
    comparison = compare(a, b, stored_history(lab.store, [a, b]))
    assert verdicts(comparison, "p50_ms") == verdicts(comparison, "p99_ms") == {"within noise"}
    assert gate(comparison, Thresholds(max_p99_regression_pct=1, max_cost_regression_pct=1)).passed


def test_noise_is_not_one_run_s_sampling_error_alone(lab):
    """Tight intervals (+-0.2 %) and no history: a 4 % change is still within the assumed
    between-run variation; a stored history that varies by 8 % hides a 10 % change; one that
    varies by 0.5 % reveals a 5 % change (the floor of 1 % applies)."""
    tight = {"interval": 0.002, "p99_interval": 0.002}
    a = lab.archive("run-a", [lab.keep(measured("run-a", LABELS[0], p50=10.0, **tight))])
    b = lab.archive("run-b", [lab.keep(measured("run-b", LABELS[0], p50=10.4, **tight))])
    assert verdicts(compare(a, b), "p50_ms") == {"within noise"}

    for run_id, p50 in (("h1", 9.0), ("h2", 10.6), ("h3", 10.0), ("h4", 11.2)):
        lab.keep(measured(run_id, LABELS[0], p50=p50, **tight))
    b = lab.archive("run-b", [lab.keep(measured("run-b", LABELS[0], p50=11.0, **tight))])
    noisy = compare(a, b, stored_history(lab.store, [a, b]))
    assert (
        verdicts(noisy, "p50_ms") == {"within noise"}
        and "history of 4" in noisy.combinations[0].figures["p50_ms"].noise_basis
    )

    quiet = Lab(lab.root.parent / "quiet")
    for run_id, p50 in (("h1", 10.0), ("h2", 10.05), ("h3", 9.95)):
        quiet.keep(measured(run_id, LABELS[0], p50=p50, **tight))
    a = quiet.archive("run-a", [quiet.keep(measured("run-a", LABELS[0], p50=10.0, **tight))])
    b = quiet.archive("run-b", [quiet.keep(measured("run-b", LABELS[0], p50=10.5, **tight))])
    assert verdicts(compare(a, b, stored_history(quiet.store, [a, b])), "p50_ms") == {"slower"}
    assert verdicts(compare(a, b), "p50_ms") == {"within noise"}  # the same change without history: assumed


def test_environment_differences_and_unmatched_combinations_are_named(lab):
    a = lab.run("run-a")
    upgraded = {**ENVIRONMENT, "libraries": {"torch": "2.14.0", "onnxruntime": "1.31.1"}, "cpu_model": "other CPU"}
    results = [lab.keep(measured("run-b", label, p50=10.0, sha=SHA_V2, environment=upgraded)) for label in LABELS[:2]]
    b = lab.archive("run-b", results)
    comparison = compare(a, b)
    named = {d.what: (d.a, d.b) for d in comparison.differences}
    assert named["model sha256"] == (SHA_V1[:12], SHA_V2[:12])
    assert named["torch"] == ("2.13.0", "2.14.0") and named["CPU"] == ("test CPU", "other CPU")
    assert "onnxruntime" not in named
    assert comparison.only_in_a == ["arm/base/b1/1769MB"] and len(comparison.combinations) == 2


def test_a_pinned_baseline_file_gates_without_the_baseline_run_in_the_store(lab, tmp_path, capsys):
    lab.run("run-0", at="2026-11-01T00:00:00+00:00")
    lab.run("run-a")
    baseline = tmp_path / "ci" / "baseline.json"
    assert lab.cli("baseline", "run-a", "--out", str(baseline)) == 0
    pinned = json.loads(baseline.read_text())
    assert pinned["kind"] == "ayci-baseline" and len(pinned["history"]) == 3

    ci = Lab(tmp_path / "ci-data")  # a CI job's store: only the new run
    ci.run("run-b", factor=1.3, input_size=(320, 320))
    assert ci.cli("gate", "--baseline", str(baseline), "run-b") == 1
    assert "gate failed: 6 regression(s)" in capsys.readouterr().out
    ci.run("run-c", factor=1.0)
    assert ci.cli("gate", "--baseline", str(baseline), "run-c", "--format", "json") == 0
    assert json.loads(capsys.readouterr().out)["gate"]["passed"] is True


def test_errors_exit_2(lab, tmp_path, capsys):
    lab.run("run-a")
    assert lab.cli("gate", "--baseline", "run-a", "no-such-run") == 2
    assert "no archived run no-such-run" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{}")
    assert lab.cli("gate", "--baseline", str(tmp_path / "bad.json"), "run-a") == 2
    other = lab.archive("run-x", [lab.keep(measured("run-x", "intel/tvm/b1/1769MB", p50=5.0))])
    assert other.results and lab.cli("gate", "--baseline", "run-a", "run-x") == 2  # nothing measured in both
    assert "nothing to gate" in capsys.readouterr().err


def test_the_table_shows_each_combination_and_its_verdict(lab, capsys):
    lab.run("run-a")
    lab.run("run-b", factor=1.3)
    assert lab.cli("compare", "run-a", "run-b") == 0
    out = capsys.readouterr().out
    assert all(label in out for label in LABELS) and "slower" in out and "+30.0 %" in out


def test_the_api_compares_two_of_the_caller_s_runs(client, deps):  # noqa: F811
    lab = Lab(deps.store.root)
    lab.run("00000000-0000-0000-0000-00000000000a")
    lab.run("00000000-0000-0000-0000-00000000000b", factor=1.3)
    path = "/runs/00000000-0000-0000-0000-00000000000a/compare/00000000-0000-0000-0000-00000000000b"
    answer = client.get(path, headers=ALICE)
    assert answer.status_code == 200, answer.text
    assert {c["verdict"] for c in answer.json()["combinations"]} == {"slower"}
    markdown = client.get(path + "?format=markdown", headers=ALICE)
    assert markdown.headers["content-type"].startswith("text/markdown") and "**slower**" in markdown.text
    assert client.get(path, headers=BOB).status_code == 404  # another owner's runs
    lab.store.put_bytes(
        keys.run_record("00000000-0000-0000-0000-00000000000c"),
        RunRecord(run_id="00000000-0000-0000-0000-00000000000c", owner="alice").to_bytes(),
    )
    running = client.get(path.replace("0000000b", "0000000c"), headers=ALICE)
    assert running.status_code == 409


class Measuring:
    """The measuring process faked: p50 proportional to `slowdown` (the rest as measured), for
    runs driven through every service on the embedded bus (`embedded(parts=)`)."""

    def __init__(self) -> None:
        from tests.unit.test_pipeline import Fakes

        self.fakes = Fakes()
        self.slowdown = 1.0

    def measure(self, spec, python_command) -> dict:
        report = self.fakes.measure(spec, python_command)
        for name in ("p50", "p90", "p99", "mean", "min", "max", "ci95_low", "ci95_high", "billed_ms_mean"):
            report["latency_ms"][name] *= self.slowdown
        return report

    def parts(self, work_dir) -> dict:
        import sys

        return {
            "dedup": {"target_cpu": lambda hardware, optimizer: "fake-cpu"},
            "archiver": {"target_cpu": lambda hardware, optimizer: "fake-cpu"},
            "converter": {
                "convert": self.fakes.convert,
                "compute_reference": self.fakes.compute_reference,
                "work_dir": work_dir,
            },
            "inference": {
                "measure": self.measure,
                "runtime_for": lambda hardware: ([sys.executable], False),
                "work_dir": work_dir,
            },  # fmt: skip
        }


@pytest.mark.parametrize(("confirmed_slowdown", "status"), [(1.0, 0), (1.3, 1)])
def test_confirm_re_measures_the_regressed_combinations_and_fails_only_if_they_repeat(
    tmp_path, monkeypatch, capsys, confirmed_slowdown, status
):
    """A run 30 % slower than its baseline fails the gate; `--confirm 2` measures its regressed
    combinations again (a forced replay through every service) and judges the median of the
    three: a one-off slowdown (the re-measurements as fast as the baseline) passes, a lasting
    one fails."""
    from ayci.bootstrap import embedded
    from ayci.cli import gate as gate_command
    from ayci.settings import Settings
    from schemas.combos import Matrix, ModelRef
    from schemas.events import RequestSubmitted
    from services.request.submission import new_run

    settings = Settings(data_dir=tmp_path / "data")
    measuring = Measuring()
    parts = measuring.parts(tmp_path)
    app = embedded(settings, parts=parts)
    app.store.put_bytes(keys.model("a" * 64), b"model bytes")
    model = ModelRef(sha256="a" * 64, size_bytes=11, format="onnx", workload="image_classification", input_size=[2, 2])

    def run(force: bool) -> str:
        matrix = Matrix(optimizers={"intel": ["onnx"]}, batch_sizes=[1], memory_sizes_mb=[1769, 3538])
        envelope = new_run(RequestSubmitted(model=model, matrix=matrix, force=force, min_agreement=0.99))
        app.publisher.publish([envelope])
        app.bus.run_until_idle()
        return envelope.run_id

    run_a = run(force=False)
    measuring.slowdown = 1.3
    run_b = run(force=True)
    lab = Lab(settings.data_dir)
    assert lab.cli("gate", "--baseline", run_a, run_b, "--format", "json") == 1
    first = json.loads(capsys.readouterr().out)["gate"]["regressions"]
    p99 = {("intel/onnx/b1/1769MB", "p99_ms"), ("intel/onnx/b1/3538MB", "p99_ms")}
    assert p99 <= {(r["combination"], r["figure"]) for r in first}  # and cost where the billed ms grew enough

    measuring.slowdown = confirmed_slowdown
    before = measuring.fakes.measurements[("onnx", 1769)]  # a and b (each measured quick, then refined)
    monkeypatch.setattr(gate_command, "remeasure", functools.partial(gate_command.remeasure, parts=parts))
    # the baseline's artifact cannot be measured side by side here: the fallback, the run re-measured alone
    monkeypatch.setattr(
        gate_command, "confirm_side_by_side", functools.partial(gate_command.confirm_side_by_side, measure=failing_pair)
    )
    assert lab.cli("gate", "--baseline", run_a, run_b, "--confirm", "2", "--format", "json") == status
    assert "not confirmed side by side (" in capsys.readouterr().err
    assert lab.cli("gate", "--baseline", run_a, run_b, "--confirm", "2", "--format", "json") == status
    result = json.loads(capsys.readouterr().out)["gate"]
    assert result["confirmations"] == 2
    if status:
        assert p99 <= {(r["combination"], r["figure"]) for r in result["regressions"]} and not result["unconfirmed"]
        assert all(
            "confirmed on the median of this run and 2 re-measurement(s)" in r["reason"] for r in result["regressions"]
        )
        assert all(r["change_pct"] == pytest.approx(30.0) for r in result["regressions"] if r["figure"] == "p99_ms")
    else:
        assert not result["regressions"] and p99 <= {(r["combination"], r["figure"]) for r in result["unconfirmed"]}
    assert measuring.fakes.measurements[("onnx", 1769)] - before == 4  # two confirmations each, twice


def failing_pair(a, b, memory_mb, rounds, side_time_s):
    from measuring.launcher import MeasurementFailed

    raise MeasurementFailed("no cgroup for the pair in this test")


def paired_rounds(ratio: float, rounds: int = 8, spread: float = 0.01):
    """A side-by-side measurement faked: B's figures `ratio` times A's in every round (+-`spread`)."""

    def measure(a, b, memory_mb, count, side_time_s):
        assert count == rounds and a.artifact_path.is_file() and b.artifact_path.is_file()
        found = []
        for n in range(count):
            wobble = 1 + spread * (n % 3 - 1)
            base = {"p50_ms": 10.0 * (1 + 0.05 * n), "p99_ms": 15.0 * (1 + 0.05 * n), "billed_ms_mean": 10.5}
            found.append(
                {
                    "order": "AB" if n % 2 == 0 else "BA",
                    "a": base,
                    "b": {k: v * ratio * wobble for k, v in base.items()},
                }
            )
        return {"rounds": found, "load": {"disturbed": False}, "confined": True}

    return measure


def test_paired_ratio_is_the_hodges_lehmann_estimate_with_its_wilcoxon_interval():
    from report.compare import paired_ratio

    found = paired_ratio([10.0] * 8, [11.0, 11.2, 10.8, 11.1, 10.9, 11.3, 10.7, 11.0])
    assert found.ratio == pytest.approx(1.10, abs=0.002) and found.rounds == 8
    assert found.confidence == pytest.approx(1 - 2 * 5 / 256)  # k = 4: P(W+ <= 3) = 5/256
    assert 1.07 < found.low < 1.09 and 1.11 < found.high < 1.13 and found.text().startswith("x1.1 [")
    # the drift the rounds share cancels: A and B both 40 % slower in the later rounds
    drifting = paired_ratio([10, 10, 14, 14, 10, 14], [11, 11, 15.4, 15.4, 11, 15.4])
    assert drifting.ratio == pytest.approx(1.1)
    assert drifting.low == pytest.approx(1.1 / 1.02) and drifting.high == pytest.approx(1.1 * 1.02)  # the floor
    few = paired_ratio([10.0] * 4, [11.0, 12.0, 10.5, 11.5])
    assert few.low == pytest.approx(1.05) and few.high == pytest.approx(1.2) and few.confidence == 0.875
    assert few.text().endswith("at 88 %")
    assert paired_ratio([None], [1.0]) is None


def test_the_paired_confirmation_judges_the_ratio_measured_side_by_side(lab):
    """A run 30 % slower than its stored baseline regresses; measured side by side now, a ratio
    of 1.00 clears it (the baseline had a lucky moment), one of 1.12 confirms it; a combination
    within the runs' noise but possibly beyond the threshold is suspected too."""
    from report.compare import PairedConfirmation, PairedRound, judged_side_by_side, suspected

    a, b = lab.run("run-a"), lab.run("run-b", factor=1.3)
    comparison = compare(a, b, stored_history(lab.store, [a, b]))
    thresholds = Thresholds(max_p99_regression_pct=10, max_cost_regression_pct=5)
    first = gate(comparison, thresholds)
    assert not first.passed and set(suspected(comparison, thresholds)) == set(LABELS)

    def confirmation(label: str, ratio: float) -> PairedConfirmation:
        rounds = [
            PairedRound(
                order="AB",
                a={"p50_ms": 10.0 + n, "p99_ms": 15.0 + n, "cost_per_million_usd": 0.3},
                b={
                    "p50_ms": (10.0 + n) * ratio,
                    "p99_ms": (15.0 + n) * ratio * (1 + 0.01 * (n % 2)),
                    "cost_per_million_usd": 0.3 * ratio,
                },
            )  # fmt: skip
            for n in range(8)
        ]
        return PairedConfirmation.of(label, rounds)

    cleared = judged_side_by_side(comparison, first, {label: confirmation(label, 1.0) for label in LABELS}, thresholds)
    assert cleared.passed and cleared.confirmations == 8
    assert {(r.combination, r.figure) for r in first.regressions} == {
        (r.combination, r.figure) for r in cleared.unconfirmed
    }
    assert all("not confirmed by 8 paired rounds: x1 [" in r.reason for r in cleared.unconfirmed)

    confirmed = judged_side_by_side(comparison, first, {LABELS[0]: confirmation(LABELS[0], 1.12)}, thresholds)
    assert not confirmed.passed
    mine = [r for r in confirmed.regressions if r.combination == LABELS[0]]
    assert {r.figure for r in mine} == {"p99_ms", "cost_per_million_usd"}
    assert all("; confirmed by 8 paired rounds: x1.1" in r.reason for r in mine)
    others = {r.combination for r in confirmed.regressions} - {LABELS[0]}
    assert others == set(LABELS[1:])  # not confirmed side by side: as first judged

    under = judged_side_by_side(comparison, first, {LABELS[0]: confirmation(LABELS[0], 1.08)}, thresholds)
    assert {r.figure for r in under.regressions if r.combination == LABELS[0]} == {"cost_per_million_usd"}

    unavailable = PairedConfirmation(combination=LABELS[0], unavailable="its artifact is not stored here")
    kept = judged_side_by_side(comparison, first, {LABELS[0]: unavailable}, thresholds)
    assert kept.regressions == first.regressions


@pytest.mark.parametrize(("ratio", "status"), [(1.0, 0), (1.3, 1)])
def test_confirm_measures_the_baseline_s_artifact_and_the_run_s_side_by_side(
    tmp_path, monkeypatch, capsys, ratio, status
):
    """`--confirm 8`: a run 30 % slower than its stored baseline is measured again beside the
    baseline's artifact (fetched from the store): a ratio of 1.00 passes (the stored runs' gap
    was the machine's drift), 1.30 fails, "confirmed by 8 paired rounds: x1.3 [...]"."""
    from ayci.bootstrap import embedded
    from ayci.cli import gate as gate_command
    from ayci.settings import Settings
    from schemas.combos import Matrix, ModelRef
    from schemas.events import RequestSubmitted
    from services.request.submission import new_run

    settings = Settings(data_dir=tmp_path / "data")
    measuring = Measuring()
    app = embedded(settings, parts=measuring.parts(tmp_path))
    app.store.put_bytes(keys.model("a" * 64), b"model bytes")
    model = ModelRef(sha256="a" * 64, size_bytes=11, format="onnx", workload="image_classification", input_size=[2, 2])
    runs = []
    for force in (False, True):
        matrix = Matrix(optimizers={"intel": ["onnx"]}, batch_sizes=[1], memory_sizes_mb=[1769])
        envelope = new_run(RequestSubmitted(model=model, matrix=matrix, force=force, min_agreement=0.99))
        app.publisher.publish([envelope])
        app.bus.run_until_idle()
        runs.append(envelope.run_id)
        measuring.slowdown = 1.3
    monkeypatch.setattr(
        gate_command,
        "confirm_side_by_side",
        functools.partial(gate_command.confirm_side_by_side, measure=paired_rounds(ratio)),
    )
    monkeypatch.setattr(gate_command, "remeasure", None)  # never the fallback: both artifacts are here
    lab = Lab(settings.data_dir)
    assert lab.cli("gate", "--baseline", runs[0], runs[1], "--confirm", "8", "--format", "json") == status
    result = json.loads(capsys.readouterr().out)["gate"]
    assert result["confirmations"] == 8 and result["paired"][0]["combination"] == "intel/onnx/b1/1769MB"
    if status:
        p99 = next(r for r in result["regressions"] if r["figure"] == "p99_ms")
        assert "confirmed by 8 paired rounds: x1.3 [" in p99["reason"] and p99["change_pct"] == pytest.approx(30, abs=1)
    else:
        assert (
            not result["regressions"] and "not confirmed by 8 paired rounds: x1 [" in result["unconfirmed"][0]["reason"]
        )


def test_the_p50_is_gated_only_when_asked(lab, capsys):
    lab.run("run-a")
    lab.run("run-b", factor=1.3)
    assert lab.cli("gate", "--baseline", "run-a", "run-b", "--max-p99-regression", "50", "--max-cost-regression",
                   "50") == 0  # fmt: skip
    capsys.readouterr()
    assert lab.cli("gate", "--baseline", "run-a", "run-b", "--max-p99-regression", "50", "--max-cost-regression",
                   "50", "--max-p50-regression", "10%", "--format", "json") == 1  # fmt: skip
    regressions = json.loads(capsys.readouterr().out)["gate"]["regressions"]
    assert {r["figure"] for r in regressions} == {"p50_ms"} and len(regressions) == 3


def test_a_baseline_measured_several_times_is_judged_by_its_median(lab, tmp_path, capsys):
    """One baseline measurement can be an outlier: pinned after three earlier repeats, the
    baseline's figures are their median, and a run as fast as the repeats passes."""
    for run_id, p50, day in (("rep-1", 10.0, "01"), ("rep-2", 10.1, "02"), ("rep-3", 9.9, "03")):
        lab.keep(measured(run_id, LABELS[0], p50=p50, at=f"2026-11-{day}T00:00:00+00:00"))
    a = lab.archive("run-a", [lab.keep(measured("run-a", LABELS[0], p50=8.5))])  # a lucky moment
    b = lab.archive("run-b", [lab.keep(measured("run-b", LABELS[0], p50=10.0, at="2026-12-03T00:00:00+00:00"))])
    figure = compare(a, b, stored_history(lab.store, [a, b])).combinations[0].figures["p50_ms"]
    assert figure.a == pytest.approx(9.95) and figure.verdict == "within noise"
    assert "A: the median of 4 repeats" in figure.noise_basis
    assert compare(a, b).combinations[0].figures["p50_ms"].verdict == "slower"  # judged on the one measurement

    baseline = tmp_path / "baseline.json"
    assert lab.cli("baseline", "run-a", "--out", str(baseline)) == 0
    ci = Lab(tmp_path / "ci")
    ci.archive("run-b", [ci.keep(measured("run-b", LABELS[0], p50=10.0, at="2026-12-03T00:00:00+00:00"))])
    assert ci.cli("gate", "--baseline", str(baseline), "run-b", "--max-p50-regression", "5") == 0


def test_one_outlier_in_the_history_does_not_hide_a_real_change(lab):
    tight = {"interval": 0.002, "p99_interval": 0.002}
    for run_id, p50 in (("h1", 10.0), ("h2", 10.05), ("h3", 9.95), ("h4", 12.5), ("h5", 10.02)):  # h4: a busy moment
        lab.keep(measured(run_id, LABELS[0], p50=p50, **tight))
    a = lab.archive("run-a", [lab.keep(measured("run-a", LABELS[0], p50=10.0, **tight))])
    b = lab.archive("run-b", [lab.keep(measured("run-b", LABELS[0], p50=11.0, **tight))])
    assert verdicts(compare(a, b, stored_history(lab.store, [a, b])), "p50_ms") == {"slower"}


def test_confirmation_judges_the_median_of_the_run_and_its_re_measurements(lab):
    from report.compare import confirmed

    tight = {"interval": 0.002, "p99_interval": 0.002}
    for run_id, p50, day in (("rep-1", 10.0, "01"), ("rep-2", 10.05, "02")):
        lab.keep(measured(run_id, LABELS[0], p50=p50, at=f"2026-11-{day}T00:00:00+00:00", **tight))
    a = lab.archive("run-a", [lab.keep(measured("run-a", LABELS[0], p50=9.95, **tight))])
    thresholds = Thresholds(max_p50_regression_pct=5)

    def judged(run_id: str, p50s: list[float]):
        runs = []
        for n, p50 in enumerate(p50s):
            name = run_id if n == 0 else f"{run_id}-confirm-{n}"
            at = f"2026-12-0{2 + n}T00:00:00+00:00"
            runs.append(lab.archive(name, [lab.keep(measured(name, LABELS[0], p50=p50, at=at, **tight))]))
        return confirmed(a, runs[0], runs[1:], stored_history(lab.store, [a, *runs]), thresholds)

    lasting = judged("slow", [11.0, 11.05, 10.95])  # 10 % slower, three times
    assert not lasting.passed and {r.figure for r in lasting.regressions} >= {"p50_ms"}
    one_off = judged("busy", [12.0, 10.0, 10.05])  # one busy moment
    assert one_off.passed and {r.figure for r in one_off.unconfirmed} >= {"p50_ms"}


def test_gate_measures_the_run_itself_from_run_options(tmp_path, monkeypatch, capsys):
    """`ayci gate --baseline RUN --model FILE (run options)`: the run is submitted and followed
    (every service on the embedded bus, the measuring process faked), then gated; stdout holds
    the comparison alone. The same model again is answered from the stored result and passes; a
    forced re-measurement 30 % slower fails naming the combination; RUN_ID and run options
    together, or a run that measured nothing, are errors (2)."""
    from ayci.bootstrap import embedded
    from ayci.cli import gate as gate_command
    from ayci.settings import Settings
    from schemas.combos import Matrix
    from schemas.events import RequestSubmitted
    from services.request.submission import new_run, store_model
    from tests.fakes import tiny_onnx_model

    settings = Settings(data_dir=tmp_path / "data")
    measuring = Measuring()
    parts = measuring.parts(tmp_path)
    model_file = tmp_path / "model.onnx"
    model_file.write_bytes(tiny_onnx_model())
    app = embedded(settings, parts=parts)
    model = store_model(app.store, model_file, "image_classification", [8, 8])
    matrix = Matrix(optimizers={"intel": ["onnx"]}, batch_sizes=[1], memory_sizes_mb=[1769])
    envelope = new_run(RequestSubmitted(model=model, matrix=matrix, min_agreement=0.99))
    app.publisher.publish([envelope])
    app.bus.run_until_idle()
    baseline = envelope.run_id
    measured = measuring.fakes.measurements[("onnx", 1769)]
    monkeypatch.setattr(gate_command, "measure_run", functools.partial(gate_command.measure_run, parts=parts))
    lab = Lab(settings.data_dir)
    options = ["--model", str(model_file), "--input-size", "8,8", "--matrix", "intel=onnx", "--memory", "1769"]

    assert lab.cli("gate", "--baseline", baseline, *options, "--format", "json") == 0
    passed = json.loads(capsys.readouterr().out)  # JSON alone on stdout: the run's progress went to stderr
    assert passed["gate"]["passed"] and passed["gate"]["compared"] == 1
    judged = passed["run_b"]
    assert judged != baseline and judged in {k.split("/")[1] for k in lab.store.list_keys("runs/")}
    assert measuring.fakes.measurements[("onnx", 1769)] == measured  # the unchanged model: its stored result

    measuring.slowdown = 1.3
    assert lab.cli("gate", "--baseline", baseline, *options, "--force", "--format", "json") == 1
    failed = json.loads(capsys.readouterr().out)["gate"]
    assert ("intel/onnx/b1/1769MB", "p99_ms") in {(r["combination"], r["figure"]) for r in failed["regressions"]}
    assert measuring.fakes.measurements[("onnx", 1769)] > measured

    assert lab.cli("gate", baseline, "--baseline", baseline, *options) == 2
    assert "a run id or run options" in capsys.readouterr().err
    measuring.fakes.out_of_memory_below_mb = 10_000  # every measurement fails: nothing to gate
    assert lab.cli("gate", "--baseline", baseline, *options, "--force") == 2
    assert "measured nothing to gate" in capsys.readouterr().err
