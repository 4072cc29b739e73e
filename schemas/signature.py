"""A model's signature: its inputs and outputs as the file declares them, read at intake
without running the model (`engines/signature.py` reads it; this module is the data and what
can be decided from it alone).

A dim is a number (fixed) or a symbol's name (dynamic; its range in `dim_ranges` when the file
says). `.pt2` inputs say how the program was exported to be called: `positional` or `keyword`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Dim = int | str


class DimRange(BaseModel):
    model_config = ConfigDict(extra="allow")
    min: int | None = None
    max: int | None = None

    def holds(self, value: int) -> bool:
        return (self.min is None or value >= self.min) and (self.max is None or value <= self.max)

    def text(self) -> str:
        return f"{'' if self.min is None else self.min}..{'' if self.max is None else self.max}"


class TensorSpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    dtype: str  # numpy's name: float32, int64, bool, ...
    dims: list[Dim] | None = None  # None: the file does not say the rank
    kind: Literal["positional", "keyword"] | None = None  # how a .pt2 program takes it
    index_bound: int | None = None  # indexes an embedding table of this many rows: values must be below it

    def shape_text(self) -> str:
        return "[?]" if self.dims is None else "[" + ", ".join(str(d) for d in self.dims) + "]"


class ModelSignature(BaseModel):
    model_config = ConfigDict(extra="allow")
    format: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec] = []
    dim_ranges: dict[str, DimRange] = {}
    external_data: bool = False  # ONNX weights in files beside the model
    problems: list[str] = Field(default_factory=list)  # what no engine can feed (nested or non-tensor inputs)

    def input(self, name: str) -> TensorSpec | None:
        return next((spec for spec in self.inputs if spec.name == name), None)

    def shape_problems(self, shapes: dict[str, tuple[int, ...]], batch: int) -> list[str]:
        """Why inputs of these shapes cannot run (empty: they can, as far as the file says):
        a fixed dim that differs, a dynamic dim outside its range, a rank that differs."""
        problems: list[str] = []
        fixed_batch: dict[int, list[str]] = {}  # a fixed batch is said once, naming every input that has it
        for spec in self.inputs:
            shape = shapes.get(spec.name)
            if shape is None or spec.dims is None:
                continue
            if len(shape) != len(spec.dims):
                problems.append(
                    f"{spec.name} has {len(spec.dims)} dims {spec.shape_text()}; "
                    f"the inputs have {len(shape)} {list(shape)}"
                )
                continue
            for axis, (dim, size) in enumerate(zip(spec.dims, shape, strict=True)):
                if axis == 0 and size == batch and isinstance(dim, int) and dim != size:
                    fixed_batch.setdefault(dim, []).append(spec.name)
                    continue
                problem = self._dim_problem(spec, axis, dim, size, batch)
                if problem:
                    problems.append(problem)
        for dim, names in fixed_batch.items():
            who = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
            problems.insert(
                0,
                f"{who} {'has' if len(names) == 1 else 'have'} a fixed batch of {dim}: batch {batch} cannot run; "
                "export with a dynamic batch dimension",
            )
        return problems

    def _dim_problem(self, spec: TensorSpec, axis: int, dim: Dim, size: int, batch: int) -> str | None:
        batch_axis = axis == 0 and size == batch
        if isinstance(dim, int):
            if dim == size:
                return None
            if batch_axis:
                return (
                    f"{spec.name} has a fixed batch of {dim}: batch {batch} cannot run; "
                    "export with a dynamic batch dimension"
                )
            return f"{spec.name} has a fixed size {dim} on axis {axis} {spec.shape_text()}: the input size gives {size}"
        allowed = self.dim_ranges.get(dim)
        if allowed is None or allowed.holds(size):
            return None
        what = f"batch {batch}" if batch_axis else f"size {size} on axis {axis}"
        return f"{spec.name}'s dynamic dim {dim} accepts {allowed.text()}: {what} is outside it"
