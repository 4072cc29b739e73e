"""The base model's outputs on the workload's example inputs, computed in the sandbox
(`measuring/sandbox.py`): the user's model never runs in a long-lived process (the converter
worker, or the API server's process in `ayci serve`).

`compute_reference(...)` calls `reference_outputs` in a sandboxed child under a time limit, an
address-space cap and (where the machine has one) a memory cgroup of `memory_mb`. A model that
hangs (an ONNX `Loop` with a huge trip count), an input size too large to allocate, or a crash
fails that combination with the reason; the worker goes on.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from measuring import sandbox


class ReferenceFailed(Exception):
    """The base model did not run on the workload's inputs (the reason is the user's to read)."""


REASON_LIMIT = 4000  # a failure's reason is kept whole up to this many characters


def compute_reference(
    model_path: Path,
    model_json: str,
    workload: str,
    input_size: list[int],
    batch: int,
    out_path: Path,
    *,
    timeout_s: float,
    memory_mb: int,
    inputs_path: Path | None = None,
    more_batches: dict[int, Path] | None = None,
) -> None:
    """Write `out_path` (npz: `input:{name}` in the model's input order, and `output:{i}`
    arrays) or raise `ReferenceFailed`. `more_batches` (batch -> path): the same for the run's other
    batch sizes, from the same child (one torch import and model load for all; `timeout_s` each)."""
    more_batches = more_batches or {}
    limits = sandbox.SandboxLimits(
        wall_s=timeout_s * (1 + len(more_batches)), memory_mb=memory_mb, address_space_mb=memory_mb, threads=1
    )
    with sandbox.Workspace.create(prefix="reference-") as workspace:
        kwargs = {
            "model_path": str(workspace.bring(model_path, f"model{Path(model_path).suffix}")),
            "model_json": model_json,
            "batch": batch,
            "out_path": str(workspace.path / "reference.npz"),
            "inputs_path": str(workspace.bring(inputs_path, "inputs.npz")) if inputs_path else None,
            **(
                {"more": {str(b): str(workspace.path / f"reference-b{b}.npz") for b in more_batches}}
                if more_batches
                else {}
            ),
        }
        try:
            sandbox.call(
                "services.converter.reference:reference_outputs", kwargs, limits, workspace, what="the base model"
            )
        except sandbox.SandboxFailed as exc:
            if exc.kind == "time":
                reason = f"the base model did not finish on the workload's inputs within {timeout_s:.0f} s"
            elif exc.kind == "memory":
                tail = exc.reason.partition(" MB")[2].strip(" ()")
                reason = f"out of memory computing the reference within {memory_mb} MB" + (f" ({tail})" if tail else "")
            else:
                reason = exc.reason
            raise ReferenceFailed(reason[:REASON_LIMIT]) from None
        shutil.copyfile(workspace.take("reference.npz"), out_path)
        for other, path in more_batches.items():
            shutil.copyfile(workspace.take(f"reference-b{other}.npz"), path)


def reference_outputs(
    model_path: str,
    model_json: str,
    batch: int,
    out_path: str,
    inputs_path: str | None = None,
    more: dict[str, str] | None = None,
) -> None:
    """In the sandbox: the base model run on the workload's (or the user's) inputs for `batch`,
    saved to `out_path`: the batch the measurement times, and as many more batches
    (`check{j}:input:`/`check{j}:output:`) as agreement needs to rest on at least
    `AGREEMENT_SAMPLES` samples, with what they are (`basis:inputs`, `basis:samples`). `more` (batch ->
    path): the same for other batch sizes, by the same loaded model."""
    import tempfile

    import engines
    from engines import ConversionJob
    from schemas.combos import ModelRef, Optimizer

    model = ModelRef.model_validate_json(model_json)
    user_inputs = Path(inputs_path) if inputs_path else None
    with tempfile.TemporaryDirectory(prefix="reference-base-") as tmp:
        base = engines.module(Optimizer.base)
        job = ConversionJob(
            model=model,
            model_path=Path(model_path),
            hardware=None,
            batch_size=batch,
            target_cpu="",
            out_dir=Path(tmp),
        )
        conversion = base.convert(job)
        run = base.load(Path(tmp) / conversion.artifact_file, threads=1)
        for size, path in [(batch, out_path), *((int(b), p) for b, p in (more or {}).items())]:
            _write_reference(run, model, Path(model_path), size, path, user_inputs)


def _write_reference(run, model, model_path: Path, batch: int, out_path: str, user_inputs: Path | None) -> None:
    """One batch size's reference (`reference_outputs`) from the loaded base model `run`."""
    import numpy as np

    from engines.inputs import model_inputs
    from workloads.agreement import SYNTHETIC, batches_for
    from workloads.custom import inputs_kind

    inputs = model_inputs(model, model_path, batch, user_inputs=user_inputs)
    outputs = run(inputs)
    # agreement rests on at least AGREEMENT_SAMPLES samples: more batches (`check{j}:`) beside the timed one
    checks = {}
    for j in range(1, batches_for(batch)):
        more = model_inputs(model, model_path, batch, user_inputs=user_inputs, sample=j)
        checks |= {f"check{j}:input:{k}": v for k, v in more.items()}
        checks |= {f"check{j}:output:{i}": np.asarray(o) for i, o in enumerate(run(more))}
    samples = batches_for(batch) * batch
    kind = inputs_kind(user_inputs) if user_inputs is not None else SYNTHETIC
    if user_inputs is not None:
        with np.load(user_inputs, allow_pickle=False) as npz:
            samples = min(samples, int(npz[npz.files[0]].shape[0]))
    with open(out_path, "wb") as out:
        np.savez(
            out,
            **{f"input:{k}": v for k, v in inputs.items()},
            **{f"output:{i}": np.asarray(o) for i, o in enumerate(outputs)},
            **checks,
            **{"basis:inputs": np.array(kind), "basis:samples": np.array(samples)},
        )
