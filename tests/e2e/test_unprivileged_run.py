"""A pick from a machine without root: the CLI run by an unprivileged user (no cgroups can be set up)
on the embedded default still recommends, each memory size estimated from one unconfined thread
(`core/lambda_model/unconfined.py`), marked "estimated, unconfined" with its interval."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from core.lambda_model.unconfined import ESTIMATED_UNCONFINED

USER, GROUP = "nobody", "nogroup"


def _readable_python() -> str | None:
    """An interpreter of this minor version an unprivileged user may run (this venv's base may be under /root)."""
    for folder in ("/usr/bin", "/usr/local/bin"):
        candidate = Path(folder) / f"python{sys.version_info.major}.{sys.version_info.minor}"
        if candidate.is_file() and os.stat(candidate).st_mode & 0o001:
            return str(candidate)
    return None


@pytest.fixture
def unprivileged(tmp_path_factory):
    """A world-writable folder with a venv an unprivileged user can run: this venv's packages through a
    .pth, the repository on PYTHONPATH."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root (to become an unprivileged user) and setpriv")
    python = _readable_python()
    if python is None:
        pytest.skip("no interpreter of this Python version readable by an unprivileged user")
    folder = Path(tempfile.mkdtemp(prefix="ayci-unprivileged-", dir="/tmp"))
    folder.chmod(0o777)
    venv = folder / "venv"
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True)
    (next(venv.glob("lib/python*/site-packages")) / "ayci-deps.pth").write_text(site.getsitepackages()[0] + "\n")
    for item in [folder, *folder.rglob("*")]:
        item.chmod(item.stat().st_mode | 0o055)
    yield folder, venv / "bin" / "python"
    shutil.rmtree(folder, ignore_errors=True)


def test_an_unprivileged_user_gets_a_pick_estimated_from_one_unconfined_thread(unprivileged, tiny_image_model):
    folder, python = unprivileged
    model = folder / "model.pt2"
    shutil.copyfile(tiny_image_model, model)
    os.chown(model, *_ids())
    env = {
        "HOME": str(folder),
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "AYCI_MEASURE_TIME_CAP_S": "1",
        "AYCI_MEASURE_MIN_ITERATIONS": "5",
        "COLUMNS": "250",
    }
    command = [
        "setpriv",
        f"--reuid={USER}",
        f"--regid={GROUP}",
        "--clear-groups",
        str(python),
        "-m",
        "ayci",
        "run",
        "--model",
        str(model),
        "--workload",
        "image_classification",
        "--input-size",
        "32,32",
        "--matrix",
        "intel=onnx",
        "--memory",
        "884,1769",
        "--data-dir",
        str(folder / "data"),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, cwd=folder)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "not root" in done.stderr  # it could not confine, and said so
    (summary_path,) = (folder / "data").glob("runs/*/summary.json")
    summary = json.loads(summary_path.read_text())
    results = {r["combo"]["memory_mb"]: r for r in summary["results"]}
    assert set(results) == {884, 1769}
    for result in results.values():
        assert result["confined"] is False and result["threads"] == 1
        assert result["estimate"]["mark"] == ESTIMATED_UNCONFINED and result["confinement_reason"].startswith(
            ESTIMATED_UNCONFINED
        )
        low, high = result["interval"]["p50"]
        assert low < result["latency_ms"]["p50"] < high
    # half a vCPU: the one thread's work through the quota, never faster than the thread unthrottled
    half = results[884]
    assert (
        half["estimate"]["regime"] == "throttled_uncalibrated" and "CPU quota of 0.50 vCPU" in half["estimate"]["basis"]
    )
    assert half["latency_ms"]["p99"] >= half["estimate"]["measured"]["p99_ms"]
    assert half["cold_start_ms"]["total"] == pytest.approx(half["estimate"]["measured"]["cold_start_ms"] * 1769 / 884)
    # the table marks every row and shows its interval
    assert done.stdout.count("estimated,\u00a0unconfined") >= 2 and "p50 " in done.stdout
    recommendation = summary["recommendation"]
    excluded = recommendation.get("excluded") or {}
    if not recommendation.get("cheapest") and all("disturbed" in str(why) for why in excluded.values()):
        # a busy host (other work took the free core) excludes every row, as it would a confined one: then
        # nothing but that may stand in the way, the estimate's being unconfined least of all
        from report.recommendation import exclusion

        for result in results.values():
            quiet = {**result, "load": {**result["load"], "disturbed": False}}
            assert exclusion(quiet, slo_p99_ms=None, min_agreement=0.99) is None, result["combo"]
        return
    assert recommendation["cheapest"] in {f"intel/onnx/b1/{m}MB" for m in results}
    assert not any("unconfined" in str(why) for why in excluded.values())  # an estimate is never excluded for it
    assert "cheapest: intel/onnx/b1/" in done.stdout


def _ids() -> tuple[int, int]:
    import grp
    import pwd

    return pwd.getpwnam(USER).pw_uid, grp.getgrnam(GROUP).gr_gid
