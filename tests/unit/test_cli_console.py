"""What the CLI shows: the results table (labels whole, empty columns left out), the run's log
taking everything but AYCI's progress off the terminal, the tuning bar, the environment left alone."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from rich.console import Console

from ayci.cli import main as cli_main
from ayci.cli.follow import TUNING_PROGRESS, TuningBar
from ayci.cli.runlog import listening, run_log
from report.terminal import results_table
from tests.conftest import archived_summary, measured_result
from tests.fakes import tiny_onnx_model

REPO = Path(__file__).resolve().parents[2]
LONG = "intel/onnx_int8/b16/10240MB"


def rendered(renderable, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def test_results_table_leaves_out_empty_columns_and_keeps_labels_whole():
    results = [measured_result(LONG, p99=12.0, cost=0.5), measured_result("arm/onnx/b1/1769MB", p99=30.0, cost=0.9)]
    summary = archived_summary(
        "r1", "complete", results, [{"label": "intel/tvm/b1/512MB", "stage": "converter", "reason": "y"}]
    )
    for width in (200, 90, 60):  # however narrow the console, the label stays on one line
        text = rendered(results_table(summary), width)
        assert LONG in text, text
        assert "predicted ~95% interval" not in text  # nothing predicted: no interval column
        assert "$ / cold start" not in " ".join(text.split())  # no result has a cold start's cost
        assert "agreement" in text or width < 200  # narrow, the other headers fold
    predicted = measured_result("intel/onnx/b1/3538MB", p99=8.0, cost=0.4)
    predicted |= {"predicted": True, "interval": {"p50": [3.0, 5.0], "p99": [7.0, 9.0]}}
    text = rendered(results_table(archived_summary("r2", "complete", [*results, predicted], [])), 250)
    assert "predicted ~95% interval" in text and "p50 3.00-5.00, p99 7.00-9.00" in text


def test_tuning_bar_follows_tuning_events_logged_during_a_run(tmp_path):
    import structlog

    from ayci.cli.console import terminal
    from ayci.cli.follow import progress_bar

    progress = progress_bar()  # not started: nothing drawn, the tasks are what is checked
    bar = TuningBar(progress)
    log = structlog.get_logger()
    with run_log(tmp_path / "run.log", terminal), listening(TUNING_PROGRESS, bar.update):
        log.info(TUNING_PROGRESS, trials_done=64, trials_total=256, best_ms=3.25)
        log.info(TUNING_PROGRESS, trials_done=128, trials_total=256, best_ms=2.5)
        (task,) = progress.tasks
        assert (task.completed, task.total, task.fields["note"]) == (128, 256, "best 2.500 ms")
        log.info(TUNING_PROGRESS, trials_done=16, trials_total=64)  # another search: a bar of its own
    (task,) = progress.tasks
    assert (task.completed, task.total, task.fields["note"]) == (16, 64, "")
    logged = [json.loads(line) for line in (tmp_path / "run.log").read_text().splitlines()]
    assert [e["trials_done"] for e in logged if e["event"] == TUNING_PROGRESS] == [64, 128, 16]


QUIET_SCRIPT = textwrap.dedent(
    """
    import logging, subprocess, sys, warnings
    from pathlib import Path
    import structlog
    from ayci.cli.console import terminal
    from ayci.cli.runlog import run_log

    with run_log(Path(sys.argv[1]), terminal) as log:
        terminal.err.print("AYCI progress")
        warnings.warn("a library's FutureWarning", FutureWarning)
        logging.getLogger("torch.onnx").warning("torchvision is not installed. Skipping torchvision::nms")
        structlog.get_logger().warning("service_event", combo="intel/onnx/b1/1769MB")
        print("a library printing to stdout")
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('child stderr\\\\n'); print('child out')"])
        terminal.out().print("the table")
    terminal.err.print(log.where(), soft_wrap=True)
    """
)


def test_run_log_takes_warnings_logs_and_children_output_off_the_terminal(tmp_path):
    log_file = tmp_path / "logs" / "run.log"
    done = subprocess.run(
        [sys.executable, "-c", QUIET_SCRIPT, str(log_file)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["the", "table"]
    assert done.stderr.splitlines() == ["AYCI progress", f"log: {log_file} (3 warnings)"]
    logged = log_file.read_text()
    for line in ("FutureWarning", "Skipping torchvision::nms", "a library printing", "child stderr", "child out"):
        assert line in logged
    event = next(json.loads(line) for line in logged.splitlines() if "service_event" in line)
    assert event["level"] == "warning" and event["combo"] == "intel/onnx/b1/1769MB"


def test_the_cli_does_not_change_the_environment(tmp_path, monkeypatch):
    """Settings are passed explicitly: neither a run nor `cancel` on a stack sets `AYCI_*`."""
    import ayci.bootstrap
    from core.ports import NotFound
    from infra import localstack, stack

    outputs = stack.StackOutputs("s1", bus_name="s1-bus", bucket="s1-bucket", queue_urls={}, queue_arns={}, dlq_urls={})
    monkeypatch.setattr(stack, "read_stack", lambda name, *a, **k: outputs)

    class NoRuns:
        def get_bytes(self, key: str) -> bytes:
            raise NotFound(key)

    wired = []
    monkeypatch.setattr(
        ayci.bootstrap,
        "aws",
        lambda settings, endpoint=None: wired.append((settings, endpoint)) or ayci.bootstrap.AwsWiring(NoRuns(), None),
    )
    model = tmp_path / "tiny.onnx"
    model.write_bytes(tiny_onnx_model())
    before = dict(os.environ)
    assert cli_main(["inspect", str(model), "--json"]) == 0
    assert cli_main(["plan", "--model", str(model), "--input-size", "8,8", "--data-dir", str(tmp_path / "d")]) == 0
    assert cli_main(["run", "--matrix", "quantum=base", "--data-dir", str(tmp_path / "d")]) == 2
    assert cli_main(["run", "--matrix", "quantum=base", "--target-cpu", "host", "--data-dir", str(tmp_path / "d")]) == 2
    assert cli_main(["traffic", "nope", "--rps", "1", "--data-dir", str(tmp_path / "d")]) == 2
    assert cli_main(["cancel", "some-run", "--localstack", "--stack", "s1"]) == 2
    assert dict(os.environ) == before
    assert [(s.bucket, s.bus_name, s.queue_prefix, e) for s, e in wired] == [
        ("s1-bucket", "s1-bus", "s1", localstack.LOCALSTACK)
    ]


def test_a_note_every_row_has_is_said_once_under_the_table():
    from report.terminal import shared_notes
    from schemas.documents import TableRow

    rows = [
        TableRow(
            combination="intel/onnx/b1/1769MB",
            combo_key="a",
            status="measured",
            note="agreement on 32 synthetic samples, reused",
        ),
        TableRow(
            combination="intel/base/b1/1769MB",
            combo_key="b",
            status="measured",
            note="agreement on 32 synthetic samples",
        ),
    ]
    assert shared_notes(rows) == ["agreement on 32 synthetic samples"]
    assert shared_notes(rows[:1]) == []
