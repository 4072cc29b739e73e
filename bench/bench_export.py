"""Does an exported function behave as its run measured? Cold start and warm p50 of the exported
handler against the run's figures.

    .venv/bin/python bench/bench_export.py RUN_ID [--combination KEY] [--data-dir DIR] [--repeat 5] [--warm 300]

Exports the run's pick (`report/export`), makes a fresh virtual environment from the exported
requirements alone, then runs the export's own check (`check/invoke.py`) `--repeat` times, each a
new process confined like AYCI's measurements (`measuring/confinement.py`: the combination's
memory size as a hard cap and its vCPU share; under the measurement lock, one at a time): the
cold start is from the spawn to the first answer (imports, the session built at init, the first
request through the handler), warm p50 over `--warm` requests through the handler (API Gateway
event in, answer out) and the session alone. Prints each beside the run's figure and the ratio;
`--json` for the numbers.

`--python PATH` runs the check with that interpreter instead of a fresh venv (e.g. the project's
for `tvm` or `base` on a `.pt2`, whose runtimes take minutes to install): the export's folder is
outside the repository and PYTHONPATH is cleared, so nothing of AYCI is importable; the report
lists the runtimes the process loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ayci.bootstrap import local_store
from ayci.settings import Settings
from core import measurement_lock
from measuring.confinement import ConfinementUnavailable, Limits, MeasurementGroup
from report.export import export_run
from schemas import keys
from schemas.documents import RunSummary


def confined_check(python: Path, folder: Path, memory_mb: int, warm: int) -> tuple[dict, bool, str | None]:
    """One run of `check/invoke.py` in a new process, confined to `memory_mb` when cgroups allow."""
    command = [str(python), str(folder / "check" / "invoke.py"), "--warm", str(warm)]
    try:
        group = MeasurementGroup.create(Limits.for_memory(memory_mb))
    except ConfinementUnavailable as exc:
        group, why = None, str(exc)
    else:
        why = None
    try:
        started = time.time()
        wrapped = group.wrap(command) if group else command
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing of AYCI importable
        done = subprocess.run(
            [*wrapped, "--spawned-at", str(started)], capture_output=True, text=True, timeout=600, cwd=folder, env=env
        )
        if done.returncode != 0:
            raise RuntimeError(f"check/invoke.py failed ({done.returncode}): {done.stderr[-2000:]}")
        return json.loads(done.stdout.splitlines()[-1]), group is not None, why
    finally:
        if group:
            group.remove()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_id")
    parser.add_argument("--combination")
    parser.add_argument("--data-dir", default=".ayci/data")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--warm", type=int, default=300)
    parser.add_argument("--venv", help="reuse this virtual environment (made from the exported requirements)")
    parser.add_argument("--python", help="run the check with this interpreter (no venv made): see above")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    store = local_store(Settings(data_dir=Path(args.data_dir)))
    with tempfile.TemporaryDirectory(prefix="ayci-bench-export-") as tmp:
        folder = Path(tmp) / "export"
        deployment = export_run(store, args.run_id, folder, args.combination)
        python = Path(args.venv) / "bin" / "python" if args.venv else Path(tmp) / "venv" / "bin" / "python"
        if args.python:
            python = Path(args.python)
        elif not args.venv:
            subprocess.run([sys.executable, "-m", "venv", str(Path(tmp) / "venv")], check=True)
            subprocess.run(
                [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r"]
                + [str(folder / "function" / "requirements.txt")],
                check=True,
            )
        runs, confined, why = [], True, None
        for _ in range(args.repeat):
            with measurement_lock.exclusive(timeout_s=1800):
                report, confined_now, why_now = confined_check(python, folder, deployment.memory_mb, args.warm)
            runs.append(report)
            confined, why = confined and confined_now, why or why_now
    summary = RunSummary.read(store.get_bytes(keys.summary(args.run_id)))
    measured = next(r for r in summary.results if r.label == deployment.combination)
    figures = {
        "combination": deployment.combination,
        "confined": confined,
        "confinement_reason": why,
        "repeat": args.repeat,
        "warm_requests": args.warm,
        "run_cold_start_ms": measured.cold_start_ms.total if measured.cold_start_ms else None,
        "export_cold_start_ms": statistics.median(r["cold_start_ms"] for r in runs),
        "run_p50_ms": measured.latency_ms.p50,
        "export_handler_p50_ms": statistics.median(r["warm_p50_ms"] for r in runs),
        "export_session_p50_ms": statistics.median(r["session_p50_ms"] for r in runs),
        "loaded": sorted({name for r in runs for name in r.get("loaded", [])}),
        "agreement_max_abs_diff": max(
            a["max_abs_diff"] for r in runs for a in r["agreement"].values() if a.get("max_abs_diff") is not None
        ),
    }
    if args.json:
        print(json.dumps(figures, indent=1))
        return 0
    print(
        f"{deployment.combination} exported, {args.repeat} processes "
        f"{'confined to ' + str(deployment.memory_mb) + ' MB' if confined else 'NOT confined: ' + str(why)}"
    )
    for what, export_key, run_key in (
        ("cold start", "export_cold_start_ms", "run_cold_start_ms"),
        ("warm p50 (handler)", "export_handler_p50_ms", "run_p50_ms"),
        ("warm p50 (session)", "export_session_p50_ms", "run_p50_ms"),
    ):
        ratio = figures[export_key] / figures[run_key] if figures[run_key] else float("nan")
        print(f"  {what:<20} export {figures[export_key]:8.2f} ms   run {figures[run_key]:8.2f} ms   x{ratio:.2f}")
    print(f"  outputs vs base: max abs diff {figures['agreement_max_abs_diff']:.2e}")
    print(f"  loaded: {', '.join(figures['loaded']) or 'none of torch, onnxruntime, tvm'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
