"""Where a measurement runs: a child process of its own, one at a time on this machine.

`measure(spec)` starts `services.inference.measure` with the combination's thread count and
returns its report, or raises `MeasurementFailed` with a reason (out of memory, crash,
timeout). Isolation lives here; the measuring code does not know about it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import structlog

REPO_ROOT = Path(__file__).resolve().parents[2]
LAMBDA_MB_PER_VCPU = 1769

log = structlog.get_logger()


class MeasurementFailed(Exception):
    def __init__(self, reason: str, peak_rss_mb: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.peak_rss_mb = peak_rss_mb


@dataclass
class MeasureSpec:
    optimizer: str
    workload: str
    artifact_path: Path
    reference_path: Path
    memory_mb: int
    time_cap_s: float = 20.0
    min_iterations: int = 10
    timeout_s: float = 900.0
    extra: dict = field(default_factory=dict)

    @property
    def vcpus(self) -> float:
        """Lambda gives about 1 vCPU per 1,769 MB."""
        return self.memory_mb / LAMBDA_MB_PER_VCPU

    @property
    def threads(self) -> int:
        return max(1, min(os.cpu_count() or 1, int(self.vcpus)))


def measure(spec: MeasureSpec, python_command: list[str] | None = None, env_extra: dict | None = None) -> dict:
    """Run one measurement in a fresh process; its report (see `measure.py`) plus the
    settings it ran under."""
    with tempfile.TemporaryDirectory(prefix="measure-") as tmp:
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(
            json.dumps(
                {
                    "optimizer": spec.optimizer, "workload": spec.workload,
                    "artifact_path": str(spec.artifact_path), "reference_path": str(spec.reference_path),
                    "threads": spec.threads, "time_cap_s": spec.time_cap_s, "min_iterations": spec.min_iterations,
                }
            )
        )
        threads = str(spec.threads)
        env = {
            **os.environ, "OMP_NUM_THREADS": threads, "TVM_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
            "PYTHONPATH": str(REPO_ROOT), "TVM_USE_RUNTIME_LIB": "1", **(env_extra or {}),
        }
        command = [*(python_command or [sys.executable]), "-m", "services.inference.measure", str(spec_path), repr(time.time())]
        try:
            done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=spec.timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise MeasurementFailed(f"measurement timed out after {spec.timeout_s:.0f} s") from exc
    marker = "@@RESULT@@"
    if done.returncode != 0 or marker not in done.stdout:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        raise MeasurementFailed(f"measuring process exited with {done.returncode}: {tail}")
    report = json.loads(done.stdout.rsplit(marker, 1)[1])
    if report["peak_rss_mb"] > spec.memory_mb:
        raise MeasurementFailed(f"out of memory at {spec.memory_mb} MB (peak {report['peak_rss_mb']:.0f} MB)", report["peak_rss_mb"])
    report["threads"] = spec.threads
    report["vcpus"] = spec.vcpus
    return report
