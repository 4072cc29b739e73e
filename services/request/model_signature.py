"""Reading an uploaded model's signature in the sandbox (`measuring/sandbox.py`): parsing a
stranger's ONNX protobuf or `.pt2` program is work on the user's model, so it never happens in
the API server's process; a file that takes too long or too much memory to read is refused
with the reason, as a file that is not a model is (`NotAModelError`)."""

from __future__ import annotations

from pathlib import Path

from engines.model_files import NotAModelError
from measuring import sandbox
from schemas.combos import ModelFormat
from schemas.signature import ModelSignature

SIGNATURE_LIMITS = sandbox.SandboxLimits(wall_s=120.0, memory_mb=4096, address_space_mb=8192)


def read_signature_in_sandbox(path: Path, model_format: ModelFormat) -> ModelSignature:
    """The signature of the model in `path` (`engines.signature.read_signature`), read by a
    sandboxed child; `NotAModelError` with the reason if it is not a model or cannot be read
    within `SIGNATURE_LIMITS`."""
    with sandbox.Workspace.create(prefix="signature-") as workspace:
        document = sandbox.call(
            "engines.signature:signature_document",
            {"path": str(workspace.bring(path, f"model.{model_format.value}")), "model_format": model_format.value},
            SIGNATURE_LIMITS,
            workspace,
            raise_as=NotAModelError,
            expected=("NotAModelError",),
            what="reading the model's signature",
        )
    return ModelSignature.model_validate(document)
