"""The inputs a model is run on: the workload's example inputs (or the user's own, `.npz`, or
the shipped sentences tokenized by the user's tokenizer: `workloads/tokenized.py`),
bound to the model's inputs by its signature (`workloads/binding.py`) and checked against the
dims it declares. The reference, every engine's conversion and every measurement use these."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engines.signature import read_signature
from schemas.combos import ModelRef
from schemas.signature import ModelSignature
from workloads import workload_module
from workloads.agreement import TOKENIZED
from workloads.binding import ATTENTION_MASK, TOKEN_IDS, TOKEN_TYPE_IDS, bind, bound_arrays


class InputsDoNotFit(ValueError):
    """The inputs cannot run on this model (a fixed dim, a range, a rank); the message says which."""


def model_inputs(
    model: ModelRef,
    model_path: Path,
    batch: int,
    *,
    user_inputs: Path | None = None,
    signature: ModelSignature | None = None,
    sample: int = 0,
) -> dict[str, np.ndarray]:
    """The model's inputs at `batch`, named and ordered as its signature declares them. `sample`
    picks another batch of them: the workload's examples of that seed, or the user's rows from
    `sample * batch` on (cycling)."""
    signature = signature or read_signature(model_path, model.format)
    module = workload_module(model.workload)
    if user_inputs is not None:
        from workloads.custom import inputs_from_npz, inputs_kind

        arrays, roles = inputs_from_npz(user_inputs, batch, start=sample * batch), {}
        if inputs_kind(user_inputs) == TOKENIZED:  # tokenized sentences: the model takes what its signature asks
            roles = {"input_ids": TOKEN_IDS, "attention_mask": ATTENTION_MASK, "token_type_ids": TOKEN_TYPE_IDS}
    else:
        arrays, roles = module.example_inputs(batch, list(model.input_size), seed=sample), module.INPUT_ROLES
    sources = bind(
        signature,
        {k: (v.shape, str(v.dtype)) for k, v in arrays.items()},
        roles,
        workload=f"the {model.workload.value} workload",
    )
    bound = bound_arrays(signature, sources, arrays)
    problems = signature.shape_problems({k: v.shape for k, v in bound.items()}, batch)
    if problems:
        raise InputsDoNotFit("; ".join(problems))
    return bound


def conversion_inputs(job) -> dict[str, np.ndarray]:
    """`model_inputs` of a conversion job (at its batch, the user's own inputs if any); a
    `ConversionError` naming what does not fit."""
    from engines import ConversionError
    from workloads.binding import BindingError

    try:
        return model_inputs(job.model, Path(job.model_path), job.batch_size, user_inputs=job.inputs_path)
    except (BindingError, InputsDoNotFit) as exc:
        raise ConversionError(str(exc)) from exc
