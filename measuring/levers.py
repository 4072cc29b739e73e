"""Cold-start levers: variants of a measured combination's artifact, each measured as its own
confined cold start (the combination's memory size and vCPUs), side by side.

- `onnx`: the default (graph optimizations at load), the model pre-optimized for this CPU at
  conversion and loaded with nothing left to optimize, the same in the ORT format, and the
  memory arena off (peak memory as well as time);
- `base` on a `.pt2`: `torch.export.load` (the default) against an AOTInductor package
  compiled ahead of time for this CPU with the system compiler.
Making a variant optimizes or compiles the user's model: it is done in the sandbox
(`measuring/sandbox.py`), like the measurements. The imports are already trimmed to the
engine's runtime in every measurement (see `cold_start_ms.loaded_at_model_load`). Each
variant is measured `repeat` times; the medians are reported with the difference from the
default.
"""

from __future__ import annotations

import shutil
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

from measuring import sandbox
from measuring.launcher import MeasurementFailed, MeasureSpec, measure

log = structlog.get_logger()


@dataclass(frozen=True)
class Variant:
    name: str
    optimizer: str  # the engine module that loads it
    artifact: Path
    settings: dict | None = None
    prepare_s: float = 0.0  # what making it cost (at conversion)


LEVER_LIMITS = sandbox.SandboxLimits(wall_s=1800.0, memory_mb=10240, address_space_mb=20480, threads=None)


def _prepared(target: str, artifact: Path, out: Path, **kwargs) -> float:
    """A variant of `artifact` made in the sandbox (making one optimizes or compiles the user's
    model) and written to `out` (with what it writes beside it); the seconds it took there.
    `MeasurementFailed` if it failed."""
    with sandbox.Workspace.create(prefix="lever-") as workspace:
        made = workspace.folder("out") / out.name
        try:
            seconds = sandbox.call(
                target,
                {"artifact": str(workspace.bring(artifact)), "out": str(made), **kwargs},
                LEVER_LIMITS,
                workspace,
                what=f"making {out.name}",
            )
        except sandbox.SandboxFailed as exc:
            raise MeasurementFailed(exc.reason) from None
        workspace.take(made)
        for file in sorted(made.parent.iterdir()):  # e.g. the AOTInductor package's call convention
            if file.is_file() and not file.is_symlink():
                shutil.copyfile(workspace.take(file), out.parent / file.name)
    return seconds


def onnx_variants(artifact: Path, threads: int, work: Path) -> list[Variant]:
    from engines.onnx_engine import default_settings

    default = default_settings(threads)
    variants = [Variant("default: optimized at load", "onnx", artifact, default)]
    for name, file in (
        ("pre-optimized for this CPU", "optimized.onnx"),
        ("ORT format, pre-optimized", "optimized.ort"),
    ):
        seconds = _prepared("measuring.levers:optimize_onnx", artifact, work / file, ort_format=file.endswith(".ort"))
        variants.append(Variant(name, "onnx", work / file, {**default, "graph_optimization": "disabled"}, seconds))
    variants.append(Variant("memory arena off", "onnx", artifact, {**default, "memory_arena": False}))
    return variants


def optimize_onnx(artifact: str, out: str, ort_format: bool) -> float:
    """In the sandbox: `artifact` optimized by ONNX Runtime for this CPU, saved to `out`."""
    import onnxruntime as ort

    started = time.perf_counter()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = out
    if ort_format:
        options.add_session_config_entry("session.save_model_format", "ORT")
    ort.InferenceSession(artifact, options, providers=["CPUExecutionProvider"])
    return time.perf_counter() - started


def base_variants(artifact: Path, work: Path) -> list[Variant]:
    from engines.base_engine import AOTI_SUFFIX

    variants = [Variant("default: torch.export.load", "base", artifact)]
    package = work / f"model{AOTI_SUFFIX}"
    seconds = _prepared("measuring.levers:compile_package", artifact, package)
    variants.append(Variant("AOTInductor package", "base", package, prepare_s=seconds))
    return variants


def compile_package(artifact: str, out: str) -> float:
    """In the sandbox: `artifact` compiled ahead of time with AOTInductor, saved to `out`."""
    from engines.base_engine import compile_aoti

    started = time.perf_counter()
    compile_aoti(Path(artifact), Path(out))
    return time.perf_counter() - started


def measure_levers(
    variants: list[Variant], *, workload: str, reference: Path, memory_mb: int, repeat: int = 3, time_cap_s: float = 2.0
) -> list[dict]:
    """Each variant's median cold start (and split), peak memory and p50 over `repeat`
    confined measurements, with the difference from the first (the default)."""
    rows = []
    for variant in variants:
        reports, failure = [], None
        for _ in range(repeat):
            spec = MeasureSpec(
                optimizer=variant.optimizer,
                workload=workload,
                artifact_path=variant.artifact,
                reference_path=reference,
                memory_mb=memory_mb,
                time_cap_s=time_cap_s,
                min_iterations=5,
                engine_settings=variant.settings,
                tune=False,
            )
            try:
                reports.append(measure(spec))
            except MeasurementFailed as exc:
                failure = exc.reason
                break
        if not reports:
            rows.append({"variant": variant.name, "failed": failure})
            continue
        cold = {
            part: statistics.median(r["cold_start_ms"][part] for r in reports)
            for part in ("process_start", "imports", "model_load", "first_inference", "total")
        }
        rows.append(
            {
                "variant": variant.name,
                "cold_start_ms": cold,
                "peak_mb": statistics.median(r.get("cgroup_peak_mb") or r["peak_rss_mb"] for r in reports),
                "p50_ms": statistics.median(r["latency_ms"]["p50"] for r in reports),
                "agreement": min(r["agreement"]["score"] for r in reports),
                "artifact_bytes": reports[0]["cold_start_ms"].get("artifact_bytes"),
                "prepare_s": variant.prepare_s,
                "repeats": len(reports),
                "confined": all(r.get("confined") for r in reports),
            }
        )
        log.info("lever_measured", variant=variant.name, cold_start_ms=round(cold["total"]), repeats=len(reports))
    base = next((r for r in rows if "cold_start_ms" in r), None)
    for row in rows:
        if base is not None and "cold_start_ms" in row:
            row["cold_start_saved_ms"] = base["cold_start_ms"]["total"] - row["cold_start_ms"]["total"]
            row["peak_saved_mb"] = base["peak_mb"] - row["peak_mb"]
    return rows
