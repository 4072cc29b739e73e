"""What a deployment of one measured combination is: decided from its stored result alone.

`deployment_of(summary, result)` answers, each with its reason: the function's memory size and
architecture (the combination's), its timeout (from the measured cold start and p99), its
ephemeral storage, its Python runtime, how it is served (on demand, provisioned concurrency or
SnapStart: the cheapest way the request's traffic, if the run named one, was served within its
SLO), the requirements (the engine's runtime alone, pinned to the versions the result was
measured with) and the packaging (a zip when it fits Lambda's 250 MB unzipped, else an image).
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from importlib import metadata
from typing import Any

from schemas.documents import RunSummary, SummaryResult
from schemas.lambda_limits import load_limits

# Lambda's rules, from the one dated data file every answer is checked against (data/lambda_limits.json)
ZIP_LIMIT_BYTES = load_limits().deployment.zip_unzipped_bytes  # a function and its layers, unzipped
EPHEMERAL_DEFAULT_MB = load_limits().ephemeral_storage_mb.default  # Lambda's default /tmp
SNAPSTART_MIN_PYTHON = tuple(int(part) for part in load_limits().snapstart.python_min.split("."))
LAMBDA_PYTHONS = ((3, 10), (3, 11), (3, 12), (3, 13))
TIMEOUT_MIN_S, TIMEOUT_MAX_S = 10, 900
RUNTIME_MARGIN = 1.02
CODE_BYTES = 64 * 1024  # handler.py, npy_reader.py, deployment.json: generously

# the engines whose artifact ONNX Runtime runs, and the distributions that runtime needs
ONNX_RUNTIME = ("onnxruntime", "numpy")
EXPORTABLE = ("onnx", "onnx_int8")


class ExportError(ValueError):
    """The combination cannot be exported: the message says why."""


@dataclass(frozen=True)
class Requirement:
    name: str
    version: str
    measured: bool  # the result's environment names this version (else: the installed one, for the runtime's own deps)
    installed_bytes: int | None  # its installed size here, when this version is installed here

    def line(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class Serving:
    option: str  # "on demand", "provisioned concurrency", "SnapStart"
    provisioned: int = 0
    snapstart: bool = False
    reason: str = ""


@dataclass(frozen=True)
class Deployment:
    run_id: str
    combination: str
    combo_key: str
    optimizer: str
    hardware: str
    architecture: str  # x86_64 | arm64
    memory_mb: int
    batch_size: int
    timeout_s: int
    timeout_reason: str
    ephemeral_storage_mb: int
    python: str  # "3.11"
    python_reason: str
    serving: Serving
    requirements: list[Requirement]
    artifact_file: str
    artifact_bytes: int
    unzipped_bytes: int  # code + artifact + the installed requirements (an x86_64 estimate)
    packaging: str  # "zip" | "image"
    packaging_reason: str
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def chosen_result(summary: RunSummary, combination: str | None) -> SummaryResult:
    """The row to export: the one labelled (or keyed) `combination`, else the balanced pick."""
    measured = [r for r in summary.results if not r.predicted]
    if combination:
        for row in measured:
            if combination in (row.label, row.combo_key):
                return row
        if any(combination in (r.label, r.combo_key) for r in summary.results):
            raise ExportError(f"{combination} was predicted, not measured: there is no artifact to export")
        labels = ", ".join(r.label for r in measured) or "none"
        raise ExportError(f"run {summary.run_id} has no measured combination {combination} (measured: {labels})")
    pick = summary.recommendation.balanced if summary.recommendation else None
    if pick is None:
        raise ExportError(
            f"run {summary.run_id} recommends no combination (nothing met its criteria): name one with --combination"
        )
    return next(r for r in measured if r.label == pick)


def deployment_of(summary: RunSummary, result: SummaryResult, artifact_file: str, artifact_bytes: int) -> Deployment:
    """The deployment of `result` (a measured row of `summary`) whose artifact is `artifact_file`
    of `artifact_bytes`; `ExportError` if its engine cannot be shipped."""
    combo = result.combo
    optimizer = combo.optimizer.value
    if optimizer not in EXPORTABLE and not (optimizer == "base" and artifact_file.endswith(".onnx")):
        raise ExportError(
            f"{result.label}: export ships ONNX Runtime functions (onnx, onnx_int8, base on an ONNX model); "
            f"{optimizer} is not exported yet: pick one of those with --combination"
        )
    if result.emulated:
        raise ExportError(f"{result.label} was measured under emulation: its figures are not Lambda's to ship")
    notes = []
    architecture = "arm64" if combo.hardware.value == "arm" else "x86_64"
    python, python_reason = _python(result)
    serving = _serving(summary, result)
    if serving.snapstart and tuple(int(p) for p in python.split(".")) < SNAPSTART_MIN_PYTHON:
        python_reason = (
            f"SnapStart needs python{SNAPSTART_MIN_PYTHON[0]}.{SNAPSTART_MIN_PYTHON[1]} or later; "
            f"measured on Python {python}: the runtime is newer than the measurement's"
        )
        python = f"{SNAPSTART_MIN_PYTHON[0]}.{SNAPSTART_MIN_PYTHON[1]}"
        notes.append(python_reason)
    requirements = runtime_requirements(result)
    installed = [r.installed_bytes for r in requirements]
    # installed here, plus a margin: another pip writes other metadata and compiles other .pyc files
    runtime_bytes = math.ceil(sum(b for b in installed if b) * RUNTIME_MARGIN) if all(installed) else None
    unzipped = CODE_BYTES + artifact_bytes + (runtime_bytes or 0)
    if runtime_bytes is None:
        notes.append("a pinned version is not installed here: the package size counts the artifact and code only")
    if unzipped <= ZIP_LIMIT_BYTES and runtime_bytes is not None:
        packaging, packaging_reason = "zip", f"{_mb(unzipped)} unzipped fits Lambda's 250 MB"
    else:
        packaging = "image"
        packaging_reason = (
            f"{_mb(unzipped)} unzipped is over Lambda's 250 MB for a zip: a container image (up to 10 GB)"
            if runtime_bytes is not None
            else "the runtime's installed size is unknown here: a container image is safe"
        )
        if serving.snapstart:
            serving = Serving("on demand", reason=f"{serving.reason}; but SnapStart does not take container images")
            notes.append(serving.reason)
    timeout_s, timeout_reason = _timeout(result)
    if architecture == "arm64":
        notes.append("the package size is x86_64's; arm64 wheels are of a similar size")
    return Deployment(
        run_id=summary.run_id,
        combination=result.label,
        combo_key=result.combo_key or "",
        optimizer=optimizer,
        hardware=combo.hardware.value,
        architecture=architecture,
        memory_mb=combo.memory_mb,
        batch_size=combo.batch_size,
        timeout_s=timeout_s,
        timeout_reason=timeout_reason,
        ephemeral_storage_mb=EPHEMERAL_DEFAULT_MB,
        python=python,
        python_reason=python_reason,
        serving=serving,
        requirements=requirements,
        artifact_file=artifact_file,
        artifact_bytes=artifact_bytes,
        unzipped_bytes=unzipped,
        packaging=packaging,
        packaging_reason=packaging_reason,
        notes=notes,
    )


def _python(result: SummaryResult) -> tuple[str, str]:
    measured = (result.environment.python if result.environment else None) or ""
    parts = tuple(int(p) for p in measured.split(".")[:2] if p.isdigit())
    if parts in LAMBDA_PYTHONS:
        return f"{parts[0]}.{parts[1]}", f"the Python the result was measured with ({measured})"
    newest = LAMBDA_PYTHONS[-1]
    return f"{newest[0]}.{newest[1]}", f"measured with Python {measured or 'unknown'}, not a Lambda runtime: the newest"


def _timeout(result: SummaryResult) -> tuple[int, str]:
    """Room for a cold start and a slow request, three times over, at least 10 s."""
    cold = result.cold_start_ms.total if result.cold_start_ms else 0.0
    p99 = result.latency_ms.p99
    seconds = min(TIMEOUT_MAX_S, max(TIMEOUT_MIN_S, math.ceil(3 * (cold + p99) / 1000)))
    return seconds, f"3 x (cold start {cold:.0f} ms + p99 {p99:.1f} ms), at least {TIMEOUT_MIN_S} s"


def _serving(summary: RunSummary, result: SummaryResult) -> Serving:
    """The cheapest way of serving the request's traffic (within its SLO) for this combination."""
    from core.lambda_model.traffic import Traffic, TrafficError, combination_under_traffic

    profile = summary.request.get("traffic")
    if not profile:
        return Serving("on demand", reason="the run named no traffic: on demand (rerun with --traffic-rps to choose)")
    slo = summary.request.get("slo_p99_ms")
    try:
        row = combination_under_traffic(result.model_dump(mode="json"), Traffic(**profile))
    except (TrafficError, KeyError, TypeError) as exc:
        return Serving("on demand", reason=f"the traffic could not be simulated ({exc}): on demand")
    meeting = [o for o in row["options"] if slo is None or o["p99_ms"] <= slo]
    best = min(meeting or row["options"], key=lambda o: (o["bill_usd"], o["p99_ms"]))
    why = (
        f"the cheapest way{' meeting the p99 SLO' if meeting and slo else ''} of serving "
        f"{profile['rps']:g} req/s ({profile['pattern']}): {best['option']}, ${best['bill_usd']:.2f} "
        f"over {profile['duration_s'] / 86400:g} days, p99 {best['p99_ms']:.1f} ms with cold starts"
    )
    if not meeting and slo:
        why += f" (no way meets the SLO of {slo:g} ms)"
    if best["option"].startswith("provisioned"):
        return Serving("provisioned concurrency", provisioned=int(best["option"].split()[-1]), reason=why)
    if best["option"].startswith("SnapStart"):
        return Serving("SnapStart", snapstart=True, reason=why)
    return Serving("on demand", reason=why)


def runtime_requirements(result: SummaryResult) -> list[Requirement]:
    """ONNX Runtime and numpy at the versions the result names, and ONNX Runtime's own required
    distributions (not its extras) at the versions installed here; never torch."""
    libraries = result.environment.libraries if result.environment else {}
    pinned: dict[str, Requirement] = {}
    for name in ONNX_RUNTIME:
        version = libraries.get(name) or _installed_version(name)
        if version is None:
            raise ExportError(f"the result names no {name} version and none is installed here: nothing to pin")
        pinned[name] = Requirement(name, version, bool(libraries.get(name)), _installed_bytes(name, version))
    for name in _required_by("onnxruntime"):
        if name in pinned:
            continue
        version = _installed_version(name)
        if version is None:
            raise ExportError(f"onnxruntime needs {name}, which is not installed here: cannot pin it")
        pinned[name] = Requirement(name, version, False, _installed_bytes(name, version))
    return list(pinned.values())


def _required_by(name: str) -> list[str]:
    """The distributions `name` requires (markers without extras), by their normalized names."""
    from packaging.requirements import Requirement as Spec

    found = []
    for text in metadata.requires(name) or []:
        spec = Spec(text)
        if spec.marker is not None and "extra" in str(spec.marker):
            continue
        if spec.marker is None or spec.marker.evaluate():
            found.append(spec.name.lower().replace("_", "-"))
    return found


def _installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _installed_bytes(name: str, version: str) -> int | None:
    """What `name` takes installed here (its RECORD's files), if `version` is the one installed."""
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None
    if dist.version != version:
        return None
    total = 0
    for file in dist.files or []:
        try:
            total += os.path.getsize(dist.locate_file(file))
        except OSError:
            continue
    return total


def _mb(size: int) -> str:
    return f"{size / 2**20:,.1f} MB"
