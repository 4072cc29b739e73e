"""Binding a workload's inputs to a model's inputs, as the model's signature names them.

Each model input is bound, in this order of preference:
1. by name: a workload input of the same name;
2. by role: token ids, attention mask, token type ids, position ids, the image tensor,
   recognised from the model input's name, dtype and rank; roles the workload can make up
   (token type ids = zeros, position ids = 0..seq-1) are made when the model asks for them;
3. by position: the model's still unbound inputs take the workload's unused inputs in order.
A model input left over is an error naming it (`BindingError`): the model is refused at intake.

`bind` decides from shapes and dtypes alone (the plan uses it before any input exists);
`bound_arrays` applies it to arrays. Values are cast to the dtype the model declares.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from schemas.signature import ModelSignature, TensorSpec

TOKEN_IDS, ATTENTION_MASK, TOKEN_TYPE_IDS, POSITION_IDS, IMAGE = (
    "token ids",
    "attention mask",
    "token type ids",
    "position ids",
    "image",
)
# roles a workload can make up from the token ids when the model asks for them
MADE_UP_ROLES = (TOKEN_TYPE_IDS, POSITION_IDS)


class BindingError(ValueError):
    """The model's inputs cannot be fed from the workload's inputs; the message names them."""


@dataclass(frozen=True)
class Source:
    """Where a model input's values come from: a workload input, or a role made up from one."""

    provided: str  # the workload input's name
    made_up: str | None = None  # a MADE_UP_ROLES role computed from `provided` (the token ids)


def role_of(spec: TensorSpec) -> str | None:
    """What a model input is, from its name, dtype and rank."""
    name = spec.name.lower()
    integer = spec.dtype.startswith(("int", "uint"))
    if re.search(r"token_?type|segment", name):
        return TOKEN_TYPE_IDS
    if re.search(r"position|pos_ids", name):
        return POSITION_IDS
    if "mask" in name:
        return ATTENTION_MASK
    if integer and re.search(r"ids|token|input|word", name):
        return TOKEN_IDS
    floats = spec.dtype.startswith(("float", "bfloat")) and (spec.dims is None or len(spec.dims) == 4)
    if floats and (
        re.search(r"pixel|image|img|input|^x$|^data$", name) or (spec.dims is not None and len(spec.dims) == 4)
    ):
        return IMAGE
    return None


def bind(
    signature: ModelSignature | None,
    provided: dict[str, tuple[tuple[int, ...], str]],
    roles: dict[str, str],
    *,
    workload: str = "the workload",
) -> dict[str, Source]:
    """Model input name -> its source, for workload inputs given as name -> (shape, dtype) with
    their roles. Without a signature the workload's inputs are fed as they are."""
    if signature is None:
        return {name: Source(name) for name in provided}
    if signature.problems:
        raise BindingError("; ".join(signature.problems))
    sources: dict[str, Source] = {}
    unused = list(provided)
    for spec in signature.inputs:  # 1. by name
        if spec.name in unused:
            sources[spec.name] = Source(spec.name)
            unused.remove(spec.name)
    for spec in signature.inputs:  # 2. by role
        if spec.name in sources:
            continue
        role = role_of(spec)
        match = next((name for name in unused if roles.get(name) == role), None) if role else None
        if match is not None:
            sources[spec.name] = Source(match)
            unused.remove(match)
        elif role in MADE_UP_ROLES:
            ids = next((name for name, r in roles.items() if r == TOKEN_IDS and name in provided), None)
            if ids is not None:
                sources[spec.name] = Source(ids, made_up=role)
    for spec in signature.inputs:  # 3. by position
        if spec.name not in sources and unused:
            sources[spec.name] = Source(unused.pop(0))
    unbound = [spec for spec in signature.inputs if spec.name not in sources]
    if unbound:
        described = ", ".join(f"{s.name} ({s.dtype} {s.shape_text()})" for s in unbound)
        raise BindingError(
            f"the model's input{'s' if len(unbound) > 1 else ''} {described} match{'' if len(unbound) > 1 else 'es'} "
            "none of "
            f"{workload}'s inputs ({', '.join(provided) or 'none'}) by name, role or position; "
            "give your own example inputs (--inputs FILE.npz, one array per model input)"
        )
    return {spec.name: sources[spec.name] for spec in signature.inputs}


def bound_shapes(
    sources: dict[str, Source], provided: dict[str, tuple[tuple[int, ...], str]]
) -> dict[str, tuple[int, ...]]:
    return {name: tuple(provided[source.provided][0]) for name, source in sources.items()}


def bound_arrays(
    signature: ModelSignature | None, sources: dict[str, Source], arrays: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """The model's inputs, in its order, from the workload's arrays."""
    out: dict[str, np.ndarray] = {}
    for name, source in sources.items():
        value = arrays[source.provided]
        if source.made_up == TOKEN_TYPE_IDS:
            value = np.zeros_like(value)
        elif source.made_up == POSITION_IDS:
            value = np.broadcast_to(np.arange(value.shape[-1], dtype=value.dtype), value.shape).copy()
        spec = signature.input(name) if signature else None
        if spec is not None and spec.index_bound and source.made_up is None and np.issubdtype(value.dtype, np.integer):
            value = value % spec.index_bound  # token ids the model's vocabulary holds
        if (
            spec is not None
            and spec.dtype != str(value.dtype)
            and not spec.dtype.startswith(("onnx:", "torch:", "string"))
        ):
            value = value.astype(spec.dtype)
        out[name] = np.ascontiguousarray(value)
    return out
