"""Workloads: what the example inputs look like and how agreement with `base` is judged.

Each workload module provides `example_inputs(batch, input_size)`, `build_example_model(input_size)`,
`dynamic_shapes(...)` and `agreement(reference, outputs)`. Importing this package stays light
(numpy only); torch is imported only where a model is built.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from schemas.combos import Workload

_MODULES = {
    Workload.image_classification: "workloads.image_classification",
    Workload.nlp: "workloads.nlp",
    Workload.object_detection: "workloads.object_detection",
    Workload.custom: "workloads.custom",
}


def workload_module(workload: Workload | str) -> ModuleType:
    """The module that defines `workload`."""
    return importlib.import_module(_MODULES[Workload(workload)])
