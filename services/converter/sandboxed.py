"""A conversion in the sandbox (`measuring/sandbox.py`): every step of it (torch export, ONNX
Runtime's graph optimization, int8 calibration, TVM's import, tuning and compilation) reads and
runs the user's model, so none of it runs in the converter's own process (in `ayci serve`, the
API server's).

`convert_in_sandbox(optimizer, job, ...)` brings the model, the example inputs and the tuning
records into a workspace, calls `convert_here` there under the conversion's limits, relays its
progress (the lease stays alive), and copies back the artifact and the tuning records, taken
only as regular files. A conversion that runs past its time, memory or CPU time fails with the
reason (`ConversionError`); the converter goes on.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from engines import Conversion, ConversionError, ConversionJob
from measuring import sandbox


def conversion_limits(optimizer: str, job: ConversionJob, timeout_s: float, memory_mb: int) -> sandbox.SandboxLimits:
    """A conversion's limits: `timeout_s` (plus the tuning's own time limit for TVM), a memory
    cgroup of `memory_mb` where the machine has one, and twice that as address space."""
    tuning_s = (job.tuning_time_limit_s or 0.0) if optimizer == "tvm" and job.tuning_trials else 0.0
    return sandbox.SandboxLimits(
        wall_s=timeout_s + tuning_s,
        memory_mb=memory_mb,
        address_space_mb=2 * memory_mb,
        threads=None,  # the libraries' own thread pools, as a conversion in the converter's process had
    )


def convert_in_sandbox(optimizer, job: ConversionJob, *, timeout_s: float, memory_mb: int) -> Conversion:
    """Run `engines.module(optimizer).convert(job)` in the sandbox; write the artifact into
    `job.out_dir` (and the tuning records back into `job.tuning_dir`). `ConversionError` with
    the reason on any failure: the engine's own, or the child's death."""
    name = getattr(optimizer, "value", optimizer)
    limits = conversion_limits(name, job, timeout_s, memory_mb)
    with sandbox.Workspace.create(prefix="convert-") as workspace:
        tuning = None
        if job.tuning_dir is not None:
            tuning = workspace.path / "tuning"
            shutil.copytree(job.tuning_dir, tuning)  # copied, not linked: the child writes to them
            workspace.folder("tuning")
        kwargs = {
            "optimizer": name,
            "model_json": job.model.model_dump_json(),
            "model_path": str(workspace.bring(job.model_path, f"model{job.model_path.suffix}")),
            "hardware": getattr(job.hardware, "value", job.hardware),
            "batch_size": job.batch_size,
            "target_cpu": job.target_cpu,
            "out_dir": str(workspace.folder("artifact")),
            "tuning_trials": job.tuning_trials,
            "tuning_time_limit_s": job.tuning_time_limit_s,
            "tuning_dir": str(tuning) if tuning else None,
            "shared_tuning_dirs": [
                str(workspace.bring(d, f"shared-tuning/{i}")) for i, d in enumerate(job.shared_tuning_dirs)
            ],
            "inputs_path": str(workspace.bring(job.inputs_path, "inputs.npz")) if job.inputs_path else None,
            "min_agreement": job.min_agreement,
            "int8_recipe": job.int8_recipe,
            "int8_recipe_batch": job.int8_recipe_batch,
        }
        result = sandbox.call(
            "services.converter.sandboxed:convert_here",
            kwargs,
            limits,
            workspace,
            raise_as=ConversionError,
            expected=("ConversionError", "NotAModelError"),
            on_progress=job.progress,
            what=f"the {name} conversion",
        )
        conversion = Conversion(**result)
        try:
            artifact = workspace.take(Path("artifact") / conversion.artifact_file)
        except sandbox.SandboxFailed as exc:
            raise ConversionError(exc.reason) from None
        shutil.copyfile(artifact, job.out_dir / conversion.artifact_file)
        if tuning is not None and job.tuning_dir is not None:
            for record in sorted(tuning.iterdir()):
                if record.is_file() and not record.is_symlink():
                    shutil.copyfile(workspace.take(record), job.tuning_dir / record.name)
    return conversion


def convert_here(
    optimizer: str,
    model_json: str,
    model_path: str,
    hardware: str | None,
    batch_size: int,
    target_cpu: str,
    out_dir: str,
    tuning_trials: int,
    tuning_time_limit_s: float | None,
    tuning_dir: str | None,
    shared_tuning_dirs: list[str],
    inputs_path: str | None,
    min_agreement: float = 0.99,
    int8_recipe: str | None = None,
    int8_recipe_batch: int | None = None,
) -> dict:
    """In the sandbox: the engine's conversion; what it reports (`Conversion`'s fields)."""
    from dataclasses import asdict

    import engines
    from schemas.combos import Hardware, ModelRef

    job = ConversionJob(
        model=ModelRef.model_validate_json(model_json),
        model_path=Path(model_path),
        hardware=Hardware(hardware) if hardware else None,
        batch_size=batch_size,
        target_cpu=target_cpu,
        out_dir=Path(out_dir),
        tuning_trials=tuning_trials,
        tuning_time_limit_s=tuning_time_limit_s,
        tuning_dir=Path(tuning_dir) if tuning_dir else None,
        shared_tuning_dirs=[Path(d) for d in shared_tuning_dirs],
        inputs_path=Path(inputs_path) if inputs_path else None,
        min_agreement=min_agreement,
        int8_recipe=int8_recipe,
        int8_recipe_batch=int8_recipe_batch,
        progress=sandbox.progress,
    )
    return asdict(engines.module(optimizer).convert(job))


def export_onnx_in_sandbox(model_path: Path, out_path: Path, *, timeout_s: float, memory_mb: int) -> None:
    """`model_path` (a `.pt2`) exported to ONNX (`engines.onnx_engine.export_to_onnx`: torch's dynamo
    exporter, dynamic axes kept) in the sandbox, under a conversion's limits, written to `out_path`;
    `ConversionError` with the reason on any failure."""
    limits = sandbox.SandboxLimits(wall_s=timeout_s, memory_mb=memory_mb, address_space_mb=2 * memory_mb, threads=None)
    with sandbox.Workspace.create(prefix="export-") as workspace:
        sandbox.call(
            "engines.onnx_engine:export_to_onnx",
            {
                "pt2_path": str(workspace.bring(model_path, "model.pt2")),
                "onnx_path": str(workspace.path / "exported.onnx"),
            },
            limits,
            workspace,
            raise_as=ConversionError,
            expected=("ConversionError", "NotAModelError"),
            what="the ONNX export",
        )
        try:
            exported = workspace.take("exported.onnx")
        except sandbox.SandboxFailed as exc:
            raise ConversionError(exc.reason) from None
        shutil.copyfile(exported, out_path)
