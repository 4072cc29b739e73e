"""A request's body as the model's inputs, checked against the signature stored with the model.

Bodies: JSON `{"inputs": {"NAME": [[...]]}}` (or `{"inputs": [[...]]}` for a model of one
input), or binary: one `.npy` array (a model of one input) or an `.npz` with one array per
input, read without pickles. Inputs are bound to the model's by name, else by role or position
(`workloads/binding.py`), then checked: the dtype (binary: exactly the model's; JSON: numbers
the dtype holds, cast to it) and the dims (`ModelSignature.shape_problems`). Every refusal is a
`BadTensor` with its HTTP status (400 unreadable, 422 not what the model takes) naming the input.
"""

from __future__ import annotations

import io
import json

import numpy as np

from schemas.signature import ModelSignature
from workloads.binding import BindingError, bind, bound_arrays

NPY_MAGIC, NPZ_MAGIC = b"\x93NUMPY", b"PK\x03\x04"


class BadTensor(ValueError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def decode(body: bytes, content_type: str) -> tuple[dict[str, np.ndarray], bool]:
    """The arrays of a body by name (`""`: the one unnamed input), and whether they came as
    JSON (whose numbers are cast to the model's dtypes) rather than typed binary."""
    if body.startswith(NPY_MAGIC) or body.startswith(NPZ_MAGIC):
        try:
            loaded = np.load(io.BytesIO(body), allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise BadTensor(400, f"the body is not a readable .npy/.npz: {exc}") from None
        if isinstance(loaded, np.ndarray):
            return {"": loaded}, False
        with loaded:
            return {name: loaded[name] for name in loaded.files}, False
    if "json" not in content_type and not body.lstrip().startswith(b"{"):
        raise BadTensor(415 if body else 400, 'send JSON {"inputs": ...} or a binary .npy/.npz body')
    try:
        document = json.loads(body)
        inputs = document["inputs"]
    except (ValueError, TypeError, KeyError):
        raise BadTensor(
            400, 'the body is not JSON of the form {"inputs": {"NAME": [...]}} or {"inputs": [...]}'
        ) from None
    named = inputs if isinstance(inputs, dict) else {"": inputs}
    arrays = {}
    for name, value in named.items():
        try:
            array = np.asarray(value)
        except ValueError:
            raise BadTensor(
                422, f"input {name or '(the one input)'}: the nested lists are ragged, not a tensor"
            ) from None
        if array.dtype == object or array.dtype.kind not in "biuf":
            raise BadTensor(422, f"input {name or '(the one input)'}: not a tensor of numbers")
        arrays[name] = array
    return arrays, True


def model_inputs(
    arrays: dict[str, np.ndarray], from_json: bool, signature: ModelSignature | None, fixed_batch: int | None = None
) -> dict[str, np.ndarray]:
    """The model's inputs, in its order and dtypes, from a request's arrays; `BadTensor` 422
    naming the input that does not fit."""
    if signature is None:
        raise BadTensor(422, "the model's signature is not stored: its inputs cannot be checked")
    if "" in arrays:
        if len(signature.inputs) != 1:
            raise BadTensor(
                422,
                f"the model takes {len(signature.inputs)} inputs ({', '.join(s.name for s in signature.inputs)}): name them",
            )
        arrays = {signature.inputs[0].name: arrays[""]}
    if len(arrays) > len(signature.inputs):
        extra = [n for n in arrays if signature.input(n) is None] or list(arrays)[len(signature.inputs) :]
        raise BadTensor(
            422,
            f"input {', '.join(extra)}: the model has no such input (it takes {', '.join(s.name for s in signature.inputs)})",
        )
    try:
        sources = bind(signature, {k: (v.shape, str(v.dtype)) for k, v in arrays.items()}, {}, workload="the request")
    except BindingError as exc:
        raise BadTensor(422, str(exc)) from None
    for model_name, source in sources.items():
        _check_dtype(model_name, arrays[source.provided], signature.input(model_name).dtype, from_json)
    bound = bound_arrays(signature, sources, arrays)
    batch = next(iter(bound.values())).shape[0] if bound and next(iter(bound.values())).ndim else 0
    if batch < 1:
        raise BadTensor(422, f"input {next(iter(bound))}: a batch of at least 1 along the first axis")
    problems = signature.shape_problems({k: v.shape for k, v in bound.items()}, batch)
    if fixed_batch is not None and batch != fixed_batch:
        problems.insert(0, f"{next(iter(bound))}: this artifact was compiled for batch {fixed_batch}, got {batch}")
    if problems:
        raise BadTensor(422, "; ".join(problems))
    return bound


def _check_dtype(name: str, array: np.ndarray, declared: str, from_json: bool) -> None:
    try:
        target = np.dtype(declared)
    except TypeError:
        return  # a dtype numpy has no name for (the engine checks it)
    if not from_json:
        if array.dtype != target:
            raise BadTensor(422, f"input {name}: dtype {array.dtype}, the model takes {declared}")
        return
    if target.kind in "iub" and array.dtype.kind == "f":
        raise BadTensor(422, f"input {name}: numbers with fractions, the model takes {declared}")
    if target.kind == "b" and array.dtype.kind != "b":
        raise BadTensor(422, f"input {name}: numbers, the model takes booleans")
