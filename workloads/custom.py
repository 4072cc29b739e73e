"""Custom: the user's own example inputs, an `.npz` with one array per model input (batch first),
loaded with `allow_pickle=False`. Bound to the model's inputs by name, then by position.

For batch B the first B samples are used (repeated in order when the file holds fewer).
Agreement is judged per output: floats by cosine similarity per sample (the score is the
lowest) and max abs diff; integers and booleans by exact match (the share of equal elements).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from workloads.agreement import TOKENIZED, USER, Agreement, max_abs_diff
from workloads.array_files import ArrayFileError, read_headers
from workloads.tokenized import TOKENIZED_MARKER

INPUT_NAMES: list[str] = []
INPUT_ROLES: dict[str, str] = {}
DEFAULT_INPUT_SIZE = [1]
MAX_ARRAYS = 64
MAX_BYTES = 256 << 20  # uncompressed, all arrays together


class BadInputs(ValueError):
    """The `.npz` cannot be used as example inputs; the message says why."""


def check_npz(path: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """Each array's shape and dtype, or `BadInputs`: not an npz, object arrays, no batch axis,
    batch axes that differ, too many or too large arrays."""
    try:  # the headers only, their sizes summed against the limit: no array is decoded here
        arrays = read_headers(path, max_bytes=MAX_BYTES, max_arrays=MAX_ARRAYS, npz_only=True)
    except ArrayFileError as exc:
        raise BadInputs(f"not a usable .npz of example inputs: {exc}") from exc
    if not arrays:
        raise BadInputs("the .npz holds no arrays")
    batches = set()
    for name, value in arrays.items():
        if value.dtype.kind not in "biuf":
            raise BadInputs(f"array {name} has dtype {value.dtype}: only numbers and booleans are accepted")
        if value.ndim == 0 or value.shape[0] == 0:
            raise BadInputs(
                f"array {name} has shape {list(value.shape)}: "
                "each array needs a batch axis (axis 0) with at least one sample"
            )
        batches.add(value.shape[0])
    if len(batches) > 1:
        raise BadInputs(
            f"the arrays' batch axes differ ({sorted(batches)}): axis 0 must be the same sample count in every array"
        )
    return {name: (tuple(value.shape), str(value.dtype)) for name, value in arrays.items() if name != TOKENIZED_MARKER}


def inputs_kind(path: Path) -> str:
    """What the `.npz`'s inputs are: `TOKENIZED` (the shipped sentences, made by `--tokenizer`:
    they hold `TOKENIZED_MARKER`) or `USER` (the user's own)."""
    try:
        names = read_headers(path, max_bytes=MAX_BYTES, max_arrays=MAX_ARRAYS, npz_only=True)
    except ArrayFileError as exc:
        raise BadInputs(f"not a usable .npz of example inputs: {exc}") from exc
    return TOKENIZED if TOKENIZED_MARKER in names else USER


def sample_shapes(path: Path, batch: int) -> dict[str, tuple[tuple[int, ...], str]]:
    return {name: ((batch, *shape[1:]), dtype) for name, (shape, dtype) in check_npz(path).items()}


def inputs_from_npz(path: Path, batch: int, start: int = 0) -> dict[str, np.ndarray]:
    check_npz(path)
    with np.load(path, allow_pickle=False) as npz:
        arrays = {name: npz[name] for name in npz.files if name != TOKENIZED_MARKER}
    rows = (start + np.arange(batch)) % next(iter(arrays.values())).shape[0]
    return {name: np.ascontiguousarray(value[rows]) for name, value in arrays.items()}


def example_inputs(batch: int, input_size: list[int], seed: int = 0) -> dict[str, np.ndarray]:
    raise BadInputs("the custom workload runs on your own example inputs (--inputs FILE.npz)")


def input_shapes(batch: int, input_size: list[int]) -> dict[str, tuple[tuple[int, ...], str]]:
    raise BadInputs("the custom workload's shapes are its .npz's (sample_shapes)")


def _cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a.reshape(a.shape[0] if a.ndim else 1, -1).astype(np.float64)
    b = b.reshape(b.shape[0] if b.ndim else 1, -1).astype(np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    dots = np.sum(a * b, axis=1)
    return np.where(norms > 0, dots / np.maximum(norms, 1e-300), np.where(np.all(a == b, axis=1), 1.0, 0.0))


def agreement(reference: list[np.ndarray], outputs: list[np.ndarray]) -> Agreement:
    if len(outputs) != len(reference) or any(
        np.shape(r) != np.shape(o) for r, o in zip(reference, outputs, strict=False)
    ):
        return Agreement(0.0, "per_output", {"shape_mismatch": 1.0})
    scores: dict[str, float] = {}
    for index, (ref, out) in enumerate(zip(reference, outputs, strict=True)):
        ref, out = np.asarray(ref), np.asarray(out)
        if ref.dtype.kind in "biu":
            scores[f"output{index}_exact"] = float(np.mean(ref == out)) if ref.size else 1.0
        else:
            cosine = _cosine_rows(ref, out)
            scores[f"output{index}_min_cosine"] = float(np.clip(np.min(cosine), 0.0, 1.0)) if cosine.size else 1.0
    score = min(scores.values()) if scores else 1.0
    numeric = [(r, o) for r, o in zip(reference, outputs, strict=True) if np.asarray(r).dtype.kind in "biuf"]
    details = {
        **scores,
        "max_abs_diff": max_abs_diff([r for r, _ in numeric], [o for _, o in numeric]) if numeric else 0.0,
    }
    return Agreement(score, "per_output", details)
