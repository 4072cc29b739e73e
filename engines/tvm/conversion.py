"""`convert`: a model into `model.so` for one CPU and one batch size, tuned with MetaSchedule.

The pipeline: import the model at static shapes (`importer`), lower it into the builds worth
measuring (`build.prepare`), tune their kernels or apply stored records (`tuning`), compile and
ship the fastest build (`build.choose_variant`), and export one file holding the kernels, the VM
bytecode and the weights. `details` says what was tuned, raced and shipped.
"""

from __future__ import annotations

import time
from pathlib import Path

from engines import Conversion, ConversionError, ConversionJob
from engines.tvm import ARTIFACT, logs
from engines.tvm.build import choose_variant, prepare
from engines.tvm.importer import import_model
from engines.tvm.records import Tuning
from engines.tvm.target import (
    ARM_CC,
    ARM_PROXY_CPU,
    DEFAULT_ARM_CPU,
    check_arm_toolchain,
    target_spec,
    tuning_target_spec,
)
from engines.tvm.tuning import tune
from schemas.reasons import whole

LOG_FILE = "tvm.log"  # beside out_dir, unless the caller names the run's log (`logs.send_output_to`)


def convert(job: ConversionJob) -> Conversion:
    """Import, tune (or apply stored records) and compile `job.model_path` into `out_dir/model.so`."""
    started = time.perf_counter()
    hardware = str(getattr(job.hardware, "value", job.hardware))
    if hardware == "arm":
        check_arm_toolchain()
    target_cpu = job.target_cpu or (DEFAULT_ARM_CPU if hardware == "arm" else "")
    spec = target_spec(hardware, target_cpu)
    tune_spec = tuning_target_spec(hardware, target_cpu)

    with logs.captured(Path(job.out_dir).parent / LOG_FILE):
        tuning, chosen, scheduled = _build(job, hardware, spec, tune_spec)

    total = time.perf_counter() - started
    details = {
        "target": spec,
        "tuning_target": tune_spec,
        "trials": tuning.trials,  # measured (by this search and the stored records it extends)
        "trials_asked": job.tuning_trials,
        "tuning_time_limit_s": job.tuning_time_limit_s,
        "time_limit_reached": tuning.time_limited,  # the limit, not the trials, ended the search
        "tasks": tuning.tasks,
        "records_reused": tuning.reused,
        "kernels_from_other_models": tuning.borrowed,
        "kernels_seeded_from_other_batches": tuning.seeded,
        **chosen,
        **(
            {"variants_estimated_ms": {k: float(f"{v:.4g}") for k, v in tuning.estimates.items()}}
            if tuning.estimates
            else {}
        ),
        **scheduled,
        "tuned": (tuning.trials > 0 or tuning.borrowed > 0) and hardware != "arm",
    }
    if hardware == "arm":
        details["tuning_note"] = (
            "no aarch64 CPU to measure on (qemu does not time like hardware): kernels were tuned on the "
            f"x86 host under a 128-bit-vector proxy target ({ARM_PROXY_CPU}) and the schedules applied to aarch64"
            if tuning.trials > 0 or tuning.borrowed
            else "not tuned (tuning_trials = 0): kernels run as naive loops"
        )
    return Conversion(
        artifact_file=ARTIFACT, conversion_s=total - tuning.seconds, tuning_s=tuning.seconds, details=details
    )


def _build(job: ConversionJob, hardware: str, spec: dict, tune_spec: dict):
    """Import, tune and compile into `out_dir/model.so`: the tuning, the build shipped, its kernels."""
    job.progress("tvm: importing the model")
    import tvm  # noqa: F401  (the compiler: imported only on the conversion side)

    from engines.inputs import conversion_inputs

    examples = conversion_inputs(job)  # their shapes are compiled in
    variants = prepare(import_model(job, examples), spec, measured=job.tuning_trials > 0)

    tuning = tune(variants, job, tune_spec) if job.tuning_trials > 0 else Tuning()
    job.progress("tvm: compiling")
    try:
        chosen, executable, scheduled = choose_variant(variants, spec, tune_spec, tuning.database, examples, job)
        out = Path(job.out_dir) / ARTIFACT
        if hardware == "arm":
            from tvm.support.cc import cross_compiler

            executable.export_library(str(out), fcompile=cross_compiler(ARM_CC))
        else:
            executable.export_library(str(out))
    except ConversionError:
        raise
    except Exception as exc:
        raise ConversionError(f"TVM failed to compile the model: {whole(exc)}") from exc
    finally:
        tuning.close()
    return tuning, chosen, scheduled
