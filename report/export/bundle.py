"""A measured combination written out as a deployable AWS Lambda function (`ayci export`, the
API's `GET /runs/{id}/export`).

```
OUT/
  README.md          what was measured, how to deploy and call it
  template.yaml      AWS SAM: memory, architecture, ephemeral storage, timeout, SnapStart or
                     provisioned concurrency, an HTTP API route and a function URL (both IAM)
  export.json        every decision and its reason (`Deployment`)
  function/          the function's code (SAM's CodeUri)
    handler.py       loads the artifact once at init; answers API Gateway / function URL events
    model_runner.py  the engine's runner (runner_onnx.py, runner_tvm.py or runner_torch.py, copied)
    npy_reader.py    bounded .npy/.npz reading (AYCI's `workloads/array_files.py`, copied)
    deployment.json  the signature, the session settings, the input limit, the measured figures
    requirements.txt the engine's runtime alone, pinned as measured
    model.onnx       the artifact, its bytes as measured (model.so for tvm, model.pt2 for base on a .pt2)
    Dockerfile       only when the function is over 250 MB unzipped (an image)
  check/               not deployed:
    reference.npz    the run's example inputs and base's outputs on them
    invoke.py        calls the handler with Lambda's event and context shapes: agreement, bad
                     requests, cold start and warm latency
```

The artifact's bytes are copied from the store; nothing here loads the model.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import structlog

from core.ports import NotFound, ObjectStore
from report.export.deployment import PIP_OPTIONS, RUNNERS, Deployment, ExportError, chosen_result, deployment_of
from schemas import keys
from schemas.combos import reference_key
from schemas.documents import ArtifactManifest, ModelInfo, RunSummary, SummaryResult
from workloads import array_files

log = structlog.get_logger()

FUNCTION_DIR = Path(__file__).parent / "function"
CHECK_DIR = Path(__file__).parent / "check"
LAMBDA_SYNC_PAYLOAD_BYTES = 6 * 2**20  # a synchronous invocation's request, at most


def export_run(store: ObjectStore, run_id: str, out_dir: Path, combination: str | None = None) -> Deployment:
    """Write the function of run `run_id`'s `combination` (label or key; default: its balanced
    pick) into `out_dir` (new or empty). `ExportError` says why it cannot be."""
    try:
        summary = RunSummary.read(store.get_bytes(keys.summary(run_id)))
    except NotFound:
        raise ExportError(f"no archived run {run_id}: a run is exported once it has finished") from None
    result = chosen_result(summary, combination)
    artifact_key = getattr(result, "artifact_key", None) or (result.model_extra or {}).get("artifact_key")
    if not artifact_key or result.model is None:
        raise ExportError(f"{result.label}: the stored result names no artifact")
    manifest = ArtifactManifest.read(store.get_bytes(keys.manifest(artifact_key)))
    info = ModelInfo.read(store.get_bytes(keys.model_info(result.model.sha256)))
    if info.signature is None:
        raise ExportError("the model was stored before AYCI read signatures: submit it again to export it")
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ExportError(f"{out_dir} is not empty")
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        deployment = _write(store, summary, result, artifact_key, manifest, info, out_dir, run_id)
    except BaseException:
        for child in out_dir.iterdir():  # it was empty: leave nothing half-written
            shutil.rmtree(child) if child.is_dir() else child.unlink()
        raise
    log.info(
        "exported",
        run_id=run_id,
        combination=deployment.combination,
        packaging=deployment.packaging,
        serving=deployment.serving.option,
        unzipped_mb=round(deployment.unzipped_bytes / 2**20, 1),
    )
    return deployment


def _write(
    store: ObjectStore,
    summary: RunSummary,
    result: SummaryResult,
    artifact_key: str,
    manifest: ArtifactManifest,
    info: ModelInfo,
    out_dir: Path,
    run_id: str,
) -> Deployment:
    function = out_dir / "function"
    function.mkdir(parents=True, exist_ok=True)
    artifact = function / manifest.artifact_file
    store.get_file(keys.artifact_file(artifact_key, manifest.artifact_file), artifact)
    deployment = deployment_of(summary, result, manifest.artifact_file, artifact.stat().st_size)
    if artifact.suffix == ".pt2":
        _portable(artifact)
    reference = out_dir / "check" / "reference.npz"
    reference.parent.mkdir()
    store.get_file(keys.reference(reference_key(result.model, result.combo.batch_size)), reference)
    example_shapes = _example_shapes(reference, info.signature.inputs)

    shutil.copyfile(FUNCTION_DIR / "handler.py", function / "handler.py")
    shutil.copyfile(FUNCTION_DIR / RUNNERS[deployment.runtime], function / "model_runner.py")
    shutil.copyfile(CHECK_DIR / "invoke.py", out_dir / "check" / "invoke.py")
    shutil.copyfile(array_files.__file__, function / "npy_reader.py")
    example_bytes = sum(
        header.nbytes for name, header in _reference_headers(reference).items() if name.startswith("input:")
    )
    settings = result.engine_settings or {
        # base on an ONNX model: ONNX Runtime unoptimized, as measured (engines/base_engine.py)
        "graph_optimization": "disabled" if deployment.optimizer == "base" else "all",
        "intra_op_threads": result.threads or 1,
        "memory_arena": True,
        "execution_mode": "sequential",
    }
    (function / "deployment.json").write_text(
        json.dumps(
            {
                "artifact_file": manifest.artifact_file,
                "signature": info.signature.model_dump(mode="json"),
                "session_settings": settings,
                "example_shapes": example_shapes,
                "max_input_bytes": max(LAMBDA_SYNC_PAYLOAD_BYTES, 2 * example_bytes),
                "snapstart": deployment.serving.snapstart,
                "measured": measured_figures(result, run_id),
            },
            indent=1,
        )
    )
    (function / "requirements.txt").write_text(requirements_text(deployment))
    if deployment.packaging == "image":
        (function / "Dockerfile").write_text(dockerfile(deployment))
    (out_dir / "template.yaml").write_text(sam_template(deployment))
    (out_dir / "export.json").write_text(json.dumps(deployment.as_dict(), indent=1))
    (out_dir / "README.md").write_text(
        readme(deployment, result, run_id, [spec.name for spec in info.signature.inputs])
    )
    return deployment


def _portable(artifact: Path) -> None:
    """A `.pt2` as AYCI's measurement loaded it: a program exported from a library's model names
    that library's output classes, read as plain tuples of the same tensors, so the function
    needs torch alone (`engines.model_files`); the archive is unchanged when nothing names one."""
    import tempfile

    from engines.model_files import _portable_archive

    try:
        import torch.utils._pytree  # noqa: F401  (the names of the types torch reads)
    except ImportError:  # a process without torch (a slim API image): the archive as stored
        log.warning("export_pt2_not_made_portable", artifact=artifact.name, reason="torch is not installed here")
        return
    with tempfile.TemporaryDirectory(prefix="ayci-export-") as tmp:
        portable = _portable_archive(artifact, Path(tmp))
        if portable != artifact:
            shutil.copyfile(portable, artifact)


def write_folder_zip(folder: Path, archive_path: Path) -> Path:
    """`folder`'s files zipped into `archive_path` (paths relative to `folder`), streamed from disk."""
    with zipfile.ZipFile(archive_path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(folder).as_posix())
    return archive_path


def _reference_headers(reference: Path) -> dict:
    """The reference's array headers (inputs, outputs, and the extra batches agreement is judged on)."""
    return array_files.read_headers(reference, max_bytes=2**40, max_arrays=100_000)


def _example_shapes(reference: Path, inputs: list) -> list[list[int]]:
    """The example inputs' shapes in the signature's order (by name, else by position)."""
    headers = _reference_headers(reference)
    by_name = {name.split(":", 1)[1]: h.shape for name, h in headers.items() if name.startswith("input:")}
    names = [spec.name for spec in inputs]
    if set(by_name) == set(names):
        return [list(by_name[name]) for name in names]
    if len(by_name) != len(names):
        raise ExportError(
            f"the run's example inputs ({', '.join(by_name)}) do not match the model's ({', '.join(names)})"
        )
    return [list(shape) for shape in by_name.values()]


def measured_figures(result: SummaryResult, run_id: str) -> dict:
    """What the run measured of this combination, for the function to say (GET) and the README."""
    cold = result.cold_start_ms
    return {
        "run_id": run_id,
        "combination": result.label,
        "memory_mb": result.combo.memory_mb,
        "batch_size": result.combo.batch_size,
        "p50_ms": result.latency_ms.p50,
        "p90_ms": result.latency_ms.p90,
        "p95_ms": result.latency_ms.p95,
        "p99_ms": result.latency_ms.p99,
        "cold_start_ms": cold.model_dump(mode="json") if cold else None,
        "peak_rss_mb": result.peak_rss_mb,
        "agreement": result.agreement.model_dump(mode="json") if result.agreement else None,
        "per_million_inferences_usd": result.cost.per_million_inferences_usd if result.cost else None,
        "confined": result.confined,
    }


def requirements_text(deployment: Deployment) -> str:
    measured = ", ".join(r.name for r in deployment.requirements if r.measured) or "none"
    lines = [
        f"# {deployment.combination}: the engine's runtime alone ({deployment.runtime}), pinned as measured",
        f"# ({measured}: the result's versions; what they require: the exporting machine's)",
        *PIP_OPTIONS.get(deployment.runtime, []),
    ]
    return "\n".join([*lines, *(r.line() for r in deployment.requirements)]) + "\n"


def dockerfile(deployment: Deployment) -> str:
    platform = "linux/arm64" if deployment.architecture == "arm64" else "linux/amd64"
    # TVM: its runtime library alone, as measured (the compiler is in the wheel, never loaded)
    env = "ENV TVM_USE_RUNTIME_LIB=1\n" if deployment.runtime == "tvm" else ""
    return (
        f"# {deployment.combination}: {deployment.packaging_reason}\n"
        f"FROM --platform={platform} public.ecr.aws/lambda/python:{deployment.python}\n"
        f"{env}"
        "COPY requirements.txt ${LAMBDA_TASK_ROOT}/\n"
        "RUN pip install --no-cache-dir -r ${LAMBDA_TASK_ROOT}/requirements.txt\n"
        "COPY handler.py model_runner.py npy_reader.py deployment.json "
        f"{deployment.artifact_file} ${{LAMBDA_TASK_ROOT}}/\n"
        'CMD ["handler.lambda_handler"]\n'
    )


def sam_template(deployment: Deployment) -> str:
    """The SAM template of `deployment` (YAML written here: every value is ours, quoted where it is text)."""
    d, serving = deployment, deployment.serving
    lines = [
        'AWSTemplateFormatVersion: "2010-09-09"',
        "Transform: AWS::Serverless-2016-10-31",
        f'Description: "{d.combination} exported by AYCI from run {d.run_id}"',
        "Resources:",
        "  InferenceFunction:",
        "    Type: AWS::Serverless::Function",
    ]
    if d.packaging == "image":
        lines += [
            "    Metadata:",
            "      Dockerfile: Dockerfile",
            "      DockerContext: ./function",
            f"      DockerTag: python{d.python}",
        ]
    lines += ["    Properties:"]
    if d.packaging == "image":
        lines += ["      PackageType: Image"]
    else:
        lines += [
            "      CodeUri: function/",
            "      Handler: handler.lambda_handler",
            f"      Runtime: python{d.python}",
        ]
    lines += [
        "      Architectures:",
        f"        - {d.architecture}",
        f"      MemorySize: {d.memory_mb}",
        "      EphemeralStorage:",
        f"        Size: {d.ephemeral_storage_mb}",
        f"      Timeout: {d.timeout_s}",
        "      AutoPublishAlias: live",
        "      LoggingConfig:",
        "        LogFormat: JSON",
    ]
    if serving.snapstart:
        lines += ["      SnapStart:", "        ApplyOn: PublishedVersions"]
    if serving.provisioned:
        lines += [
            "      ProvisionedConcurrencyConfig:",
            f"        ProvisionedConcurrentExecutions: {serving.provisioned}",
        ]
    lines += [
        "      FunctionUrlConfig:",
        "        AuthType: AWS_IAM",
        "      Events:",
        "        Infer:",
        "          Type: HttpApi",
        "          Properties:",
        "            Path: /infer",
        "            Method: ANY",
        "            Auth:",
        "              Authorizer: AWS_IAM",
        "Outputs:",
        "  HttpApiUrl:",
        '    Description: "POST the inputs here (IAM-signed)"',
        '    Value: !Sub "https://${ServerlessHttpApi}.execute-api.${AWS::Region}.${AWS::URLSuffix}/infer"',
        "  FunctionUrl:",
        '    Description: "the function URL (IAM-signed)"',
        "    Value: !GetAtt InferenceFunctionUrl.FunctionUrl",
    ]
    return "\n".join(lines) + "\n"


def readme(deployment: Deployment, result: SummaryResult, run_id: str, input_names: list[str]) -> str:
    d, figures = deployment, measured_figures(result, run_id)
    cold = figures["cold_start_ms"] or {}
    env = result.environment
    agreement = figures["agreement"] or {}
    cost = figures["per_million_inferences_usd"]
    requirements = ", ".join(r.line() for r in d.requirements)
    deploy = (
        "sam build && sam deploy --guided"
        if d.packaging == "zip"
        else "sam build && sam deploy --guided --resolve-image-repos"
    )
    nan = float("nan")
    cold_text = (
        f"{cold.get('total', nan):.0f} ms (imports {cold.get('imports', nan):.0f} ms, model load "
        f"{cold.get('model_load', nan):.0f} ms, first inference {cold.get('first_inference', nan):.0f} ms)"
    )
    confined = "confined to the memory size" if result.confined else f"NOT confined: {result.confinement_reason}"
    where = f"{env.cpu_model if env else '?'}, Python {env.python if env else '?'}, {confined}"
    built = (
        f"zip (it installs `function/requirements.txt` for {d.architecture})"
        if d.packaging == "zip"
        else "image from `function/Dockerfile`"
    )
    return f"""# {d.combination}, exported by AYCI

Run `{run_id}` measured this combination ({d.optimizer} on {d.hardware}, batch {d.batch_size},
{d.memory_mb} MB) and this folder deploys it as an AWS Lambda function.

## What was measured

| | |
|---|---|
| warm latency | {_warm_latency(figures)} |
| cold start | {cold_text} |
| peak memory | {figures["peak_rss_mb"] or float("nan"):.0f} MB of {d.memory_mb} MB |
| agreement with base | {agreement.get("score", float("nan")):.4f} ({agreement.get("metric", "?")}) |
| cost | {"n/a" if cost is None else f"${cost:.4f}"} per million inferences |
| measured on | {where} |

## What is deployed

- `function/{d.artifact_file}` ({d.artifact_bytes / 2**20:.1f} MB): the artifact as measured,
  loaded once at init by `function/handler.py` with the session settings the measurement used.
- Requirements: {requirements} (the engine's runtime alone).
- `template.yaml` (AWS SAM): {d.memory_mb} MB, {d.architecture}, {d.ephemeral_storage_mb} MB of
  ephemeral storage, timeout {d.timeout_s} s ({d.timeout_reason}), Python {d.python}
  ({d.python_reason}).
- Serving: **{d.serving.option}**{f" ({d.serving.provisioned} instances)" if d.serving.provisioned else ""}:
  {d.serving.reason}.
- Packaging: **{d.packaging}**: {d.packaging_reason}.
{"".join(f"- Note: {note}." + chr(10) for note in d.notes)}
## Deploy

```bash
{deploy}
```

SAM builds the {built}.
The HTTP API route (`POST /infer`) and the function URL both require IAM-signed requests; change
`Auth`/`AuthType` in `template.yaml` to open them.

## Call it

JSON in, JSON out:

```json
{{"inputs": {{{", ".join(f'"{name}": [...]' for name in input_names)}}}}}
```

A base64 `.npy` (a one-input model) or `.npz` (one array per input name) body, with
`Content-Type: application/octet-stream`, is answered with a base64 `.npy` (one output) or
`.npz`. Names, shapes and dtypes are checked against the model's signature (`GET` returns it);
a bad request is answered 4xx with `{{"error": "why"}}`. Your own pre- and post-processing go
in `preprocess` and `postprocess` in `function/handler.py`.

## Check it before deploying

`check/reference.npz` holds the run's example inputs (`input:NAME`) and base's outputs on them
(`output:N`). `check/invoke.py` calls `handler.lambda_handler` with API Gateway, function URL and
direct events on them, and with bad requests, in a virtual environment made from the function's
requirements alone, and prints what it answered, its cold start and warm latency:

```bash
python{d.python} -m venv venv && venv/bin/pip install -r function/requirements.txt
venv/bin/python check/invoke.py --warm 200
```
"""


def _warm_latency(figures: dict) -> str:
    """The exported README's warm latency: p50, p90, p95 (none for a result measured before the p95 was kept), p99."""
    kept = [q for q in ("p50", "p90", "p95", "p99") if figures.get(f"{q}_ms") is not None]
    return ", ".join(f"{q} {figures[f'{q}_ms']:.2f} ms" for q in kept)
