"""`tvm`: Apache TVM (Relax) compiled ahead of time for one CPU and one batch size, tuned with MetaSchedule.

One module per job: `target` (what is compiled for and tuned under), `importer` (torch or ONNX
into Relax), `build` (the builds, compiled and the fastest shipped), `records` and `tuning`
(MetaSchedule's records, what is searched), `search` (the first round, the time limit) and
`race` (the builds racing for the rest of the budget), `conversion` (`convert`, the pipeline),
`runtime` (`load` and `profile`, TVM's runtime alone), `logs` (TVM's output to a log file, the
tuning's progress as structlog events). docs/tvm.md tells the measurements behind the choices.

Loading and running need TVM's runtime alone (an aarch64 root under emulation, a Lambda
function): `convert` and the logging it brings are imported on first use only.
"""

from __future__ import annotations

from engines.tvm.runtime import import_runtime, load, profile
from engines.tvm.target import ARM_CC, host_cpu_name

ARTIFACT = "model.so"
PROGRESS_EVENT = "tvm.tuning.progress"
_ON_FIRST_USE = {"convert": "engines.tvm.conversion", "send_output_to": "engines.tvm.logs"}


def __getattr__(name: str):
    if name in _ON_FIRST_USE:
        import importlib

        return getattr(importlib.import_module(_ON_FIRST_USE[name]), name)
    raise AttributeError(f"module 'engines.tvm' has no attribute {name!r}")


__all__ = [
    "ARM_CC",
    "ARTIFACT",
    "PROGRESS_EVENT",
    "convert",
    "host_cpu_name",
    "import_runtime",
    "load",
    "profile",
    "send_output_to",
]
