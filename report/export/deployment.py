"""What a deployment of one measured combination is: decided from its stored result alone.

`deployment_of(summary, result)` answers, each with its reason: the function's memory size and
architecture (the combination's), its timeout (from the measured cold start and p99), its
ephemeral storage, its Python runtime, how it is served (on demand, provisioned concurrency or
SnapStart: the cheapest way the request's traffic, if the run named one, was served within its
SLO), the requirements (the engine's runtime alone, pinned to the versions the result was
measured with) and the packaging: a zip or an image as `core.lambda_rules.lambda_fit` decides
(the engine's runtime at its size in data/lambda_limits.json plus the artifact, against Lambda's
250 MB unzipped): the one estimate every answer of AYCI gives, not a second one made here.

The engine's runtime, by what the artifact needs (`core.lambda_rules.engine_runtime`):
ONNX Runtime for `onnx`, `onnx_int8` and `base` on an ONNX model; TVM's runtime for `tvm` (the
apache-tvm wheel: PyPI has no runtime-only TVM, so the function imports its runtime library
alone); torch (CPU wheels) for `base` on a `.pt2` program.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from importlib import metadata
from typing import Any

from core.lambda_rules import engine_runtime, lambda_fit
from schemas.documents import RunSummary, SummaryResult
from schemas.lambda_limits import load_limits

# Lambda's rules, from the one dated data file every answer is checked against (data/lambda_limits.json)
LIMITS = load_limits()
EPHEMERAL_DEFAULT_MB = LIMITS.ephemeral_storage_mb.default  # Lambda's default /tmp
SNAPSTART_MIN_PYTHON = tuple(int(part) for part in LIMITS.snapstart.python_min.split("."))
LAMBDA_PYTHONS = ((3, 10), (3, 11), (3, 12), (3, 13))
TIMEOUT_MIN_S, TIMEOUT_MAX_S = 10, 900
CODE_BYTES = 64 * 1024  # handler.py, the runner, npy_reader.py, deployment.json: generously
MB = 2**20

# each runtime (a key of data/lambda_limits.json's `runtimes`): the distributions pinned to the
# result's versions (their own requirements follow at the versions installed here), the runner
# the function loads the artifact with (report/export/function/), and pip's options for them
RUNTIME_DISTRIBUTIONS = {
    "onnxruntime": ("onnxruntime", "numpy"),
    "tvm": ("apache-tvm", "numpy"),
    "torch": ("torch", "numpy"),
}
RUNNERS = {"onnxruntime": "runner_onnx.py", "tvm": "runner_tvm.py", "torch": "runner_torch.py"}
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # torch's CPU-only wheels (`+cpu` versions)
PIP_OPTIONS = {"torch": [f"--extra-index-url {TORCH_CPU_INDEX}"]}
EXPORTABLE = ("onnx", "onnx_int8", "tvm", "base")


class ExportError(ValueError):
    """The combination cannot be exported: the message says why."""


@dataclass(frozen=True)
class Requirement:
    name: str
    version: str
    measured: bool  # the result's environment names this version (else: the installed one, for the runtime's own deps)

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
    runtime: str  # "onnxruntime" | "tvm" | "torch": what runs the artifact (`core.lambda_rules.engine_runtime`)
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
    runtime_mb: float  # the runtime's installed size (data/lambda_limits.json, x86_64 wheels)
    unzipped_bytes: int  # code + artifact + the runtime: the size `core.lambda_rules.lambda_fit` decides on
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
    if optimizer not in EXPORTABLE:
        raise ExportError(f"{result.label}: {optimizer} is not exported: pick one of {', '.join(EXPORTABLE)}")
    if result.emulated:
        raise ExportError(f"{result.label} was measured under emulation: its figures are not Lambda's to ship")
    if result.model is None:
        raise ExportError(f"{result.label}: the stored result names no model")
    runtime = engine_runtime(optimizer, "pt2" if artifact_file.endswith(".pt2") else "onnx")
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
    requirements = runtime_requirements(result, runtime)
    # the size and the form every answer of AYCI gives (the plan, the table, the recommendation)
    fit = lambda_fit(result.model, combo, inputs=None, artifact_bytes=artifact_bytes, limits=LIMITS)
    unzipped = CODE_BYTES + artifact_bytes + math.ceil(fit.runtime_mb * MB)
    zip_limit = LIMITS.deployment.zip_unzipped_bytes
    runtime_size = f"{runtime} {fit.runtime_mb:,.0f} MB installed (data/lambda_limits.json) + the artifact"
    if fit.deployment == "zip":
        packaging, packaging_reason = "zip", f"{_mb(unzipped)} unzipped ({runtime_size}) fits Lambda's 250 MB"
    elif fit.deployment == "image":
        packaging = "image"
        packaging_reason = (
            f"{_mb(unzipped)} unzipped ({runtime_size}) is over Lambda's {zip_limit / MB:.0f} MB for a zip: "
            "a container image (up to 10 GB)"
        )
        if serving.snapstart:
            serving = Serving("on demand", reason=f"{serving.reason}; but SnapStart does not take container images")
            notes.append(serving.reason)
    else:
        raise ExportError(f"{result.label}: {'; '.join(fit.broken) or 'no deployment form fits'}")
    timeout_s, timeout_reason = _timeout(result)
    if architecture == "arm64":
        notes.append("the package size is x86_64's; arm64 wheels are of a similar size")
    if runtime == "tvm":
        notes.append(
            "PyPI has no runtime-only TVM: the apache-tvm wheel ships, and the function imports its runtime "
            "library alone (TVM_USE_RUNTIME_LIB=1: no compiler, no torch), as AYCI measured it"
        )
    return Deployment(
        run_id=summary.run_id,
        combination=result.label,
        combo_key=result.combo_key or "",
        optimizer=optimizer,
        hardware=combo.hardware.value,
        runtime=runtime,
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
        runtime_mb=fit.runtime_mb,
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
    from core.lambda_model.arrivals import Traffic, TrafficError
    from core.lambda_model.traffic import combination_under_traffic

    profile = summary.request.get("traffic")
    if not profile:
        return Serving("on demand", reason="the run named no traffic: on demand (rerun with --traffic-rps to choose)")
    slo = summary.request.get("slo_p99_ms")
    try:
        row = combination_under_traffic(result, Traffic(**profile))
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


def runtime_requirements(result: SummaryResult, runtime: str = "onnxruntime") -> list[Requirement]:
    """The runtime's distributions at the versions the result names, and everything they require
    (not their extras) at the versions installed here; never torch unless the runtime is torch."""
    libraries = result.environment.libraries if result.environment else {}
    pinned: dict[str, Requirement] = {}
    for name in RUNTIME_DISTRIBUTIONS[runtime]:
        version = libraries.get(name) or _installed_version(name)
        if version is None:
            raise ExportError(f"the result names no {name} version and none is installed here: nothing to pin")
        pinned[name] = Requirement(name, version, bool(libraries.get(name)))
    queue = list(RUNTIME_DISTRIBUTIONS[runtime])
    while queue:
        for name in _required_by(queue.pop(0)):
            if name in pinned:
                continue
            version = _installed_version(name)
            if version is None:
                raise ExportError(f"{runtime} needs {name}, which is not installed here: cannot pin it")
            pinned[name] = Requirement(name, version, False)
            queue.append(name)
    if runtime != "torch" and "torch" in pinned:
        raise ExportError(f"{runtime}'s requirements pull in torch: the function would not be the runtime alone")
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


def _mb(size: int) -> str:
    return f"{size / 2**20:,.1f} MB"
