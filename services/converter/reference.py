"""The base model's outputs on the workload's example inputs, computed in a child process of
their own: the user's model never runs in a long-lived process (the converter worker, or the
API server's process in `ayci serve`).

`compute_reference(...)` runs `python -m services.converter.reference SPEC` under a time limit
and an address-space cap (`ulimit -v` in the `/bin/sh` that `exec`s Python: no `preexec_fn`
in a process with threads). A model that hangs (an ONNX `Loop` with a huge trip count), an
input size too large to allocate, or a crash fails that combination with the reason; the
worker goes on.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
FAILURE_MARK = "@@REFERENCE-FAILED@@"


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
) -> None:
    """Write `out_path` (npz: `input:{name}` in the model's input order, and `output:{i}`
    arrays) or raise `ReferenceFailed`."""
    with tempfile.TemporaryDirectory(prefix="reference-") as tmp:
        spec = Path(tmp) / "spec.json"
        spec.write_text(
            json.dumps(
                {
                    "model_path": str(model_path),
                    "model": model_json,
                    "workload": workload,
                    "input_size": input_size,
                    "batch": batch,
                    "out_path": str(out_path),
                    "inputs_path": str(inputs_path) if inputs_path else None,
                }
            )
        )
        python = " ".join(
            shlex.quote(part) for part in [sys.executable, "-m", "services.converter.reference", str(spec)]
        )
        command = ["/bin/sh", "-c", f"ulimit -v {memory_mb * 1024} && exec {python}"]
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
        child = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            text=True,
        )
        try:
            _, stderr = child.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
            raise ReferenceFailed(
                f"the base model did not finish on the workload's inputs within {timeout_s:.0f} s"
            ) from None
    if child.returncode != 0:
        marked = stderr.rsplit(FAILURE_MARK, 1)
        if len(marked) == 2:
            reason = marked[1].strip()
        else:  # died without saying why (killed, out of memory in native code)
            lines = [line for line in stderr.strip().splitlines() if line.strip()]
            reason = lines[-1] if lines else f"exit status {child.returncode}"
        if child.returncode < 0 or "MemoryError" in reason or "bad_alloc" in reason or "Cannot allocate" in reason:
            reason = f"out of memory computing the reference within {memory_mb} MB ({reason})"
        raise ReferenceFailed(reason[:REASON_LIMIT])


def _main(spec_path: str) -> None:
    import numpy as np

    import engines
    from engines import ConversionJob
    from engines.inputs import model_inputs
    from schemas.combos import ModelRef, Optimizer

    spec = json.loads(Path(spec_path).read_text())
    model = ModelRef.model_validate_json(spec["model"])
    user_inputs = Path(spec["inputs_path"]) if spec.get("inputs_path") else None
    inputs = model_inputs(model, Path(spec["model_path"]), spec["batch"], user_inputs=user_inputs)
    with tempfile.TemporaryDirectory(prefix="reference-base-") as tmp:
        base = engines.module(Optimizer.base)
        job = ConversionJob(
            model=model,
            model_path=Path(spec["model_path"]),
            hardware=None,
            batch_size=spec["batch"],
            target_cpu="",
            out_dir=Path(tmp),
        )
        conversion = base.convert(job)
        outputs = base.load(Path(tmp) / conversion.artifact_file, threads=1)(inputs)
    with open(spec["out_path"], "wb") as out:
        np.savez(
            out,
            **{f"input:{k}": v for k, v in inputs.items()},
            **{f"output:{i}": np.asarray(o) for i, o in enumerate(outputs)},
        )


if __name__ == "__main__":
    try:
        _main(sys.argv[1])
    except Exception as exc:  # the user's model on the workload's inputs: any failure is theirs, said whole
        print(
            f"{FAILURE_MARK}{type(exc).__name__}: {str(exc).strip()}"[: REASON_LIMIT + len(FAILURE_MARK)],
            file=sys.stderr,
        )
        sys.exit(1)
