"""Hostile model files against every way into AYCI: where each is refused or contained.

    .venv/bin/python bench/bench_hostile.py [--only NAME,...] [--ways cli,api,endpoint]

The corpus (`tests/hostile_models.py`): `.pt2` archives with `opaque_obj_` / `custom_obj_`
constants, a pickled legacy `.pt`, path-traversal and symlink bundles, zip and tar bombs, the
n^3 constant-folding ONNX, the int8 calibration blow-up, an endless `Loop`, external data in a
subgraph. Each file goes in by
- `cli`: `python -m ayci run --model FILE` (the CLI's process is the long-lived one);
- `api`: uploaded to one `ayci serve` (upload, verify, `POST /runs`, followed to its end) while
  another thread asks `GET /runs/{id}` of a finished run every 0.2 s (how long the API was held);
- `endpoint`: `ayci endpoint RUN_ID` on the API run of the file, when that run exists, and one
  inference through it.
One table: file x way -> where it was refused or contained, the reason, the long-lived
process's peak memory growth, seconds. Then the goals: no payload ran (no marker file), every
refusal a 4xx with its reason, growth <= 100 MB, no file holds the API more than 1 s.
Conversions here are limited to 60 s and 2,048 MB (`AYCI_CONVERSION_*`), references to 30 s.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e.test_web_page import free_port  # noqa: E402
from tests.hostile_models import CORPUS, IMAGE_SIZE  # noqa: E402

MARKERS = Path(tempfile.gettempdir()) / "ayci-hostile-markers"
API_KEY = "hostile-bench-key-0001"
LIMITS_ENV = {
    "AYCI_CONVERSION_TIMEOUT_S": "60",
    "AYCI_CONVERSION_MEMORY_MB": "2048",
    "AYCI_REFERENCE_TIMEOUT_S": "30",
    "AYCI_MEASURE_TIME_CAP_S": "1",
    "AYCI_MEASURE_MIN_ITERATIONS": "5",
    "PYTHONPATH": str(REPO),
}


def rss_mb(pid: int, field: str = "VmRSS") -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class PeakWatcher:
    """The peak resident memory of process `pid`, sampled every 50 ms while `with`-ed."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mb(self.pid) or 0.0)
            time.sleep(0.05)

    def __enter__(self) -> PeakWatcher:
        self.peak = rss_mb(self.pid) or 0.0
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def matrix_for(name: str) -> str:
    return "onnx_int8" if "int8" in name else "onnx"


def summary_reasons(data_dir: Path) -> tuple[str, list[str]]:
    """The status and failure reasons of the one run stored under `data_dir`."""
    summaries = sorted(data_dir.glob("runs/*/summary.json"))
    if not summaries:
        return "no run", []
    summary = json.loads(summaries[-1].read_text())
    reasons = [f.get("reason", "") for f in summary.get("failures", [])]
    return summary.get("status", "?"), reasons


def run_cli(path: Path, name: str, work: Path) -> dict:
    data_dir = work / f"cli-{path.stem}"
    command = [
        sys.executable,
        "-m",
        "ayci",
        "run",
        "--model",
        str(path),
        "--workload",
        "image_classification",
        "--input-size",
        ",".join(map(str, IMAGE_SIZE)),
        "--matrix",
        f"intel={matrix_for(name)}",
        "--batch",
        "1",
        "--memory",
        "1769",
        "--data-dir",
        str(data_dir),
    ]
    started = time.monotonic()
    child = subprocess.Popen(
        command, cwd=REPO, env={**os.environ, **LIMITS_ENV}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    peak, output = 0.0, []
    reader = threading.Thread(target=lambda: output.append(child.stdout.read().decode(errors="replace")), daemon=True)
    reader.start()
    while child.poll() is None:
        peak = max(peak, rss_mb(child.pid, "VmHWM") or 0.0)
        time.sleep(0.05)
    reader.join()
    seconds = time.monotonic() - started
    text = "".join(output)
    status, reasons = summary_reasons(data_dir)
    if status == "no run":
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        refusal = next((line for line in reversed(lines) if "not an accepted" in line or "rror" in line), lines[-1:])
        where = f"refused at intake (exit {child.returncode})"
        reason = refusal if isinstance(refusal, str) else " ".join(refusal)
    else:
        where = f"run {status}"
        reason = "; ".join(reasons) or "measured (in the sandbox)"
    return {"where": where, "reason": reason, "peak_mb": peak, "seconds": seconds}


class Api:
    """One `ayci serve` for the whole corpus, with a prober asking a finished run's progress."""

    def __init__(self, work: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.headers = {"X-API-Key": API_KEY}
        self.log = open(work / "serve.log", "wb")  # noqa: SIM115  (closed in stop)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ayci", "serve", "--port", str(self.port), "--data-dir", str(work / "api-data")],
            cwd=REPO,
            env={**os.environ, **LIMITS_ENV, "AYCI_API_KEYS": f"{API_KEY}:bench"},
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.data_dir = work / "api-data"
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(f"{self.url}/openapi.json", timeout=2)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError((work / "serve.log").read_text()[-2000:]) from None
                time.sleep(0.3)
        self.probe_run: str | None = None
        self.slowest = 0.0
        self._probing = threading.Event()
        threading.Thread(target=self._probe, daemon=True).start()

    def _probe(self) -> None:
        while True:
            self._probing.wait()
            if self.probe_run:
                asked = time.monotonic()
                with contextlib.suppress(httpx.HTTPError):
                    httpx.get(f"{self.url}/runs/{self.probe_run}", headers=self.headers, timeout=60)
                self.slowest = max(self.slowest, time.monotonic() - asked)
            time.sleep(0.2)

    def submit(self, data: bytes, matrix: str) -> dict:
        """Upload, verify and run `data`; where it ended, the reason, the run id."""
        sha = hashlib.sha256(data).hexdigest()
        offer = httpx.post(
            f"{self.url}/models/uploads", json={"sha256": sha, "size_bytes": len(data)}, headers=self.headers
        )
        if offer.status_code >= 300:
            return {"where": f"refused at upload offer ({offer.status_code})", "reason": _detail(offer), "run": None}
        upload = offer.json()["upload"]
        target = upload["url"] if upload["url"].startswith("http") else f"{self.url}/{upload['url'].lstrip('/')}"
        sent = httpx.request(
            upload["method"], target, content=data, headers={**self.headers, **upload.get("headers", {})}, timeout=300
        )
        if sent.status_code >= 300:
            return {"where": f"refused at upload ({sent.status_code})", "reason": _detail(sent), "run": None}
        verified = httpx.post(
            f"{self.url}/models/{sha}/verify", json={"size_bytes": len(data)}, headers=self.headers, timeout=300
        )
        if verified.status_code != 201:
            return {"where": f"refused at verify ({verified.status_code})", "reason": _detail(verified), "run": None}
        body = {
            "model": {"sha256": sha, "size_bytes": len(data)},
            "workload": "image_classification",
            "input_size": IMAGE_SIZE,
            "matrix": {"intel": [matrix]},
            "batch_sizes": [1],
            "memory_sizes_mb": [1769],
        }
        created = httpx.post(f"{self.url}/runs", json=body, headers=self.headers, timeout=60)
        if created.status_code != 201:
            return {"where": f"refused at POST /runs ({created.status_code})", "reason": _detail(created), "run": None}
        run_id = created.json()["run_id"]
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            progress = httpx.get(f"{self.url}/runs/{run_id}", headers=self.headers, timeout=60).json()
            if progress["status"] != "running":
                reasons = [c.get("reason") for c in progress.get("combinations", []) if c.get("reason")]
                return {
                    "where": f"run {progress['status']}",
                    "reason": "; ".join(reasons) or "measured (in the sandbox)",
                    "run": run_id if progress.get("measured") else None,
                }
            time.sleep(0.5)
        return {"where": "run still running after 900 s", "reason": "", "run": None}

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except ValueError:
        return response.text[:300]
    return detail if isinstance(detail, str) else json.dumps(detail)[:300]


def run_endpoint(api: Api, run_id: str, work: Path) -> dict:
    port = free_port()
    started = time.monotonic()
    log = open(work / f"endpoint-{run_id}.log", "wb")  # noqa: SIM115
    child = subprocess.Popen(
        [sys.executable, "-m", "ayci", "endpoint", run_id, "--port", str(port), "--data-dir", str(api.data_dir)],
        cwd=REPO,
        env={**os.environ, **LIMITS_ENV},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                models = httpx.get(f"{url}/models", timeout=2).json()
                break
            except httpx.HTTPError:
                if child.poll() is not None or time.monotonic() > deadline:
                    text = (work / f"endpoint-{run_id}.log").read_text().strip().splitlines()
                    return {
                        "where": "refused at start",
                        "reason": text[-1] if text else "",
                        "peak_mb": 0.0,
                        "seconds": time.monotonic() - started,
                    }
                time.sleep(0.3)
        baseline = rss_mb(child.pid) or 0.0
        name = next(iter(models.get("models", {})), None) if isinstance(models.get("models"), dict) else None
        if name is None and isinstance(models.get("models"), list) and models["models"]:
            name = models["models"][0].get("name")
        pixels = [[[[0.5] * IMAGE_SIZE[1]] * IMAGE_SIZE[0]] * 3]
        with PeakWatcher(child.pid) as watcher:
            answer = httpx.post(f"{url}/invocations/{name}", json={"inputs": {"pixels": pixels}}, timeout=300)
        return {
            "where": f"served ({answer.status_code}) by a sandboxed worker",
            "reason": _detail(answer) if answer.status_code >= 300 else "answered",
            "peak_mb": watcher.peak - baseline,
            "seconds": time.monotonic() - started,
        }
    finally:
        child.terminate()
        try:
            child.wait(timeout=20)
        except subprocess.TimeoutExpired:
            child.kill()
        log.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="names (substrings) of the corpus's files to try")
    parser.add_argument("--ways", default="cli,api,endpoint")
    args = parser.parse_args()
    ways = args.ways.split(",")
    MARKERS.mkdir(exist_ok=True)
    MARKERS.chmod(0o1777)  # a payload running as the sandbox's user could create its marker: we would see it
    for old in MARKERS.iterdir():
        old.unlink()
    corpus = [h for h in CORPUS if not args.only or any(o.strip() in h.name for o in args.only.split(","))]
    rows: list[tuple[str, str, dict]] = []
    with tempfile.TemporaryDirectory(prefix="bench-hostile-") as tmp:
        work = Path(tmp)
        files = {}
        for hostile in corpus:
            started = time.monotonic()
            files[hostile.name] = hostile.build(work, MARKERS / hostile.name.replace(" ", "_").replace("/", "_"))
            size = files[hostile.name].stat().st_size
            print(f"built {hostile.name}: {size:,} bytes in {time.monotonic() - started:.1f} s")
        from workloads.examples import export_example

        normal = export_example("image_classification", IMAGE_SIZE, work / "normal.pt2")
        if "cli" in ways:
            baseline = run_cli(normal, "normal", work)
            print(f"cli baseline (a normal model): peak {baseline['peak_mb']:.0f} MB, {baseline['seconds']:.0f} s")
            for hostile in corpus:
                row = run_cli(files[hostile.name], hostile.name, work)
                row["peak_mb"] -= baseline["peak_mb"]
                rows.append((hostile.name, "cli", row))
                print(f"  cli {hostile.name}: {row['where']} ({row['seconds']:.0f} s)")
        api_runs: dict[str, str | None] = {}
        if "api" in ways or "endpoint" in ways:
            api = Api(work)
            try:
                warm = api.submit(normal.read_bytes(), "onnx")
                api.probe_run = warm["run"]
                api._probing.set()
                time.sleep(1)
                baseline = rss_mb(api.process.pid) or 0.0
                print(f"api baseline after a normal run: {baseline:.0f} MB ({warm['where']})")
                for hostile in corpus:
                    api.slowest = 0.0
                    started = time.monotonic()
                    with PeakWatcher(api.process.pid) as watcher:
                        row = api.submit(files[hostile.name].read_bytes(), matrix_for(hostile.name))
                    row.update(peak_mb=watcher.peak - baseline, seconds=time.monotonic() - started)
                    row["held_s"] = api.slowest
                    api_runs[hostile.name] = row.pop("run")
                    rows.append((hostile.name, "api", row))
                    print(
                        f"  api {hostile.name}: {row['where']} ({row['seconds']:.0f} s, GET held {row['held_s']:.2f} s)"
                    )
                if "endpoint" in ways:
                    for hostile in corpus:
                        run_id = api_runs.get(hostile.name)
                        if run_id is None:
                            row = {
                                "where": "never reaches it",
                                "reason": "no measured run to serve (refused or failed before)",
                                "peak_mb": 0.0,
                                "seconds": 0.0,
                            }
                        else:
                            row = run_endpoint(api, run_id, work)
                        rows.append((hostile.name, "endpoint", row))
            finally:
                api.stop()
    markers = sorted(p.name for p in MARKERS.iterdir())
    print()
    print(f"{'file':<28} {'way':<9} {'where':<34} {'growth MB':>9} {'s':>6} {'API held s':>10}  reason")
    for name, way, row in rows:
        held = f"{row['held_s']:.2f}" if "held_s" in row else ""
        reason = " ".join(str(row["reason"]).split())[:160]
        figures = f"{row['peak_mb']:>9.0f} {row['seconds']:>6.1f} {held:>10}"
        print(f"{name:<28} {way:<9} {row['where'][:34]:<34} {figures}  {reason}")
    refusals = [(n, r) for n, w, r in rows if w == "api" and r["where"].startswith("refused")]
    not_4xx = [n for n, r in refusals if not any(f"({c}" in r["where"] for c in range(400, 500))]
    growth = max((r["peak_mb"] for _, _, r in rows), default=0.0)
    held = max((r.get("held_s", 0.0) for _, _, r in rows), default=0.0)
    print()
    print(f"payloads run (marker files): {len(markers)} {markers if markers else ''}")
    print(f"refusals not a 4xx with a reason: {not_4xx or 'none'}")
    print(f"largest growth of a long-lived process: {growth:.0f} MB (goal <= 100)")
    print(f"longest GET /runs/{{id}} while a hostile file was in: {held:.2f} s (goal <= 1)")
    return 0 if not markers and not not_4xx and growth <= 100 and held <= 1 else 1


if __name__ == "__main__":
    sys.exit(main())
