"""Example models built in code with random weights, exported as torch.export `.pt2`
archives (graph + tensors, no code), so the main job needs no download."""

from __future__ import annotations

from pathlib import Path

from schemas.combos import Workload
from workloads import workload_module

EXPORT_BATCH = 2  # an example batch of 1 would specialize the batch dimension


def export_example(workload: Workload | str, input_size: list[int] | None, path: Path, **options) -> Path:
    """Build the workload's example model (`options` go to its `build_example_model`, e.g.
    `num_classes`) and save it as a `.pt2` with a dynamic batch axis."""
    import torch

    module = workload_module(workload)
    size = input_size or module.DEFAULT_INPUT_SIZE
    model = module.build_example_model(size, **options)
    inputs = {k: torch.from_numpy(v) for k, v in module.example_inputs(EXPORT_BATCH, size).items()}
    batch = torch.export.Dim("batch", min=1, max=4096)
    dynamic = {name: {0: batch} for name in inputs}
    program = torch.export.export(model, (), inputs, dynamic_shapes=dynamic)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.export.save(program, str(path))
    return path
