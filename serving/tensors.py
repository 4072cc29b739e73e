"""A request's body as the model's inputs, checked against the signature stored with the model.

Bodies: JSON `{"inputs": {"NAME": [[...]]}}` (or `{"inputs": [[...]]}` for a model of one
input), or binary: one `.npy` array (a model of one input) or an `.npz` with one array per
input, read without pickles. Inputs are bound to the model's by name, else by role or position
(`workloads/binding.py`), then checked: the dtype (binary: exactly the model's; JSON: numbers
the dtype holds, cast to it) and the dims (`ModelSignature.shape_problems`). Every refusal is a
`BadTensor` with its HTTP status (400 unreadable, 413 larger than the decode limit, 422 not what
the model takes) naming the input. Sizes are checked before anything is allocated
(`workloads/array_files.py`), so a small body cannot decode to gigabytes.
"""

from __future__ import annotations

import json

import numpy as np

from schemas.signature import ModelSignature
from workloads.array_files import NPY_MAGIC, NPZ_MAGIC, ArraysTooLarge, UnreadableArrays, read_arrays
from workloads.binding import BindingError, bind, bound_arrays

MAX_ARRAYS = 64  # arrays in one .npz body
MAX_JSON_VALUES = 1 << 21  # numbers and lists in one JSON body: ~64 MB of Python objects at most
MAX_RANK = 16  # axes of one JSON tensor


class BadTensor(ValueError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def decode(body: bytes, content_type: str, max_bytes: int) -> tuple[dict[str, np.ndarray], bool]:
    """The arrays of a body by name (`""`: the one unnamed input), and whether they came as
    JSON (whose numbers are cast to the model's dtypes) rather than typed binary. Nothing is
    allocated before its size is known to be under `max_bytes` (413): a binary body's headers
    are summed first, a JSON body's values are counted (an upper bound, from its commas and
    brackets) before it is parsed. Blocking: call it off the event loop."""
    if body.startswith(NPY_MAGIC) or body.startswith(NPZ_MAGIC):
        try:
            return read_arrays(body, max_bytes=max_bytes, max_arrays=MAX_ARRAYS), False
        except ArraysTooLarge as exc:
            raise BadTensor(413, f"the body's arrays are too large: {exc}") from None
        except UnreadableArrays as exc:
            raise BadTensor(400, f"the body is not a readable .npy/.npz: {exc}") from None
    if "json" not in content_type and not body.lstrip().startswith(b"{"):
        raise BadTensor(415 if body else 400, 'send JSON {"inputs": ...} or a binary .npy/.npz body')
    return _json_arrays(body, max_bytes), True


def _json_arrays(body: bytes, max_bytes: int) -> dict[str, np.ndarray]:
    # every value but the first follows a comma; every list or object opens with a bracket
    values = body.count(b",") + body.count(b"[") + body.count(b"{") + 1
    most = min(MAX_JSON_VALUES, max_bytes // 8)  # the numbers are read as float64 before the cast
    if values > most:
        raise BadTensor(413, f"the JSON body may hold up to {values:,} values; at most {most:,} (send .npy/.npz)")
    try:
        document = json.loads(body)
        inputs = document["inputs"]
    except RecursionError:
        raise BadTensor(400, f"the JSON body is nested too deep: a tensor has at most {MAX_RANK} axes") from None
    except (ValueError, TypeError, KeyError):
        raise BadTensor(
            400, 'the body is not JSON of the form {"inputs": {"NAME": [...]}} or {"inputs": [...]}'
        ) from None
    named = inputs if isinstance(inputs, dict) else {"": inputs}
    arrays = {}
    for name, value in named.items():
        label = name or "(the one input)"
        if _depth(value) > MAX_RANK:
            raise BadTensor(400, f"input {label}: nested deeper than {MAX_RANK} axes")
        try:
            array = np.asarray(value)
        except (ValueError, OverflowError):
            raise BadTensor(422, f"input {label}: the nested lists are ragged, not a tensor") from None
        if array.dtype == object or array.dtype.kind not in "biuf":
            raise BadTensor(422, f"input {label}: not a tensor of numbers")
        arrays[name] = array
    return arrays


def _depth(value: object) -> int:
    """How deep the first elements nest (a tensor's rank, if it is one): O(depth), no recursion."""
    depth = 0
    while isinstance(value, list):
        depth += 1
        if depth > MAX_RANK or not value:
            break
        value = value[0]
    return depth


def model_inputs(
    arrays: dict[str, np.ndarray], from_json: bool, signature: ModelSignature | None, fixed_batch: int | None = None
) -> dict[str, np.ndarray]:
    """The model's inputs, in its order and dtypes, from a request's arrays; `BadTensor` 422
    naming the input that does not fit."""
    if signature is None:
        raise BadTensor(422, "the model's signature is not stored: its inputs cannot be checked")
    if "" in arrays:
        if len(signature.inputs) != 1:
            names = ", ".join(s.name for s in signature.inputs)
            raise BadTensor(422, f"the model takes {len(signature.inputs)} inputs ({names}): name them")
        arrays = {signature.inputs[0].name: arrays[""]}
    if len(arrays) > len(signature.inputs):
        extra = [n for n in arrays if signature.input(n) is None] or list(arrays)[len(signature.inputs) :]
        takes = ", ".join(s.name for s in signature.inputs)
        raise BadTensor(422, f"input {', '.join(extra)}: the model has no such input (it takes {takes})")
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
