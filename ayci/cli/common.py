"""What the commands share: reading their options into a request, the example model, the
confinement warning, the plan's impossible combinations, a finished run's summary."""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

from pydantic import ValidationError

from ayci.cli.console import UsageError, err
from ayci.settings import Settings
from core.ports import NotFound, ObjectStore
from schemas import keys
from schemas.combos import Matrix, ModelRef, Workload, parse_memory_sizes
from schemas.documents import RunSummary
from schemas.events import RequestSubmitted


def settings_of(args: argparse.Namespace) -> Settings:
    """The settings (`AYCI_*`), with the command's `--data-dir` and `--target-cpu` if given
    (passed on to the service processes a run on LocalStack starts: `follow.localstack_services`)."""
    given = {"data_dir": getattr(args, "data_dir", None), "intel_cpu": getattr(args, "target_cpu", None)}
    return Settings(**{name: value for name, value in given.items() if value})


def parse_matrix(specs: list[str]) -> dict[str, list[str]]:
    """`["intel=base,onnx", "arm=tvm"]` -> `{"intel": ["base", "onnx"], "arm": ["tvm"]}`."""
    matrix: dict[str, list[str]] = {}
    for spec in specs:
        hardware, sep, optimizers = spec.partition("=")
        if not sep or not hardware:
            raise UsageError(f"--matrix takes HARDWARE=OPT[,OPT...], got {spec!r}")
        matrix.setdefault(hardware.strip(), []).extend(o.strip() for o in optimizers.split(",") if o.strip())
    return matrix


def parse_ints(text: str, name: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise UsageError(f"--{name} takes comma-separated integers, got {text!r}") from exc


def parse_memory(text: str) -> list[int]:
    try:
        return parse_memory_sizes(text)
    except ValueError as exc:
        raise UsageError(f"--memory: {exc}") from exc


def validation_message(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        field = ".".join(str(p) for p in error["loc"]) or "request"
        parts.append(f"{field}: {error['msg']}")
    return "; ".join(parts)


def build_request(args: argparse.Namespace, model) -> RequestSubmitted:
    """The contract's request for the options of `run` / `plan` (`ValidationError` naming the field)."""
    matrix = Matrix(
        optimizers=parse_matrix(args.matrix),
        batch_sizes=parse_ints(args.batch, "batch"),
        memory_sizes_mb=parse_memory(args.memory),
    )
    return RequestSubmitted(
        model=model,
        matrix=matrix,
        slo_p99_ms=args.slo,
        min_agreement=args.min_agreement,
        tuning_trials=args.trials,
        email=args.email,
        force=args.force,
        predict=getattr(args, "predict", False),
        traffic={"rps": args.traffic_rps, "pattern": args.traffic_pattern}
        if getattr(args, "traffic_rps", None)
        else None,
        balance_weight=getattr(args, "balance_weight", 0.5),
        profile=getattr(args, "profile", False),
        precision=getattr(args, "precision", "quick"),
        **({"price_region": args.price_region} if getattr(args, "price_region", None) else {}),
    )


def workload_and_size(args: argparse.Namespace) -> tuple[Workload, list[int]]:
    try:
        workload = Workload(args.workload)
    except ValueError:
        raise UsageError(f"--workload must be one of {', '.join(w.value for w in Workload)}") from None
    from workloads import workload_module

    if workload == Workload.custom and not args.inputs:
        raise UsageError("--workload custom runs on your own example inputs: give --inputs FILE.npz")
    input_size = (
        parse_ints(args.input_size, "input-size") if args.input_size else workload_module(workload).DEFAULT_INPUT_SIZE
    )
    return workload, input_size


def checked_inputs(args: argparse.Namespace) -> Path | None:
    """The user's example inputs, checked before any work (`--inputs FILE.npz`), or the shipped
    sentences tokenized by their `--tokenizer DIR`."""
    if getattr(args, "tokenizer", None):
        from ayci.cli.tokenized import tokenized_inputs

        return tokenized_inputs(args)
    if not getattr(args, "inputs", None):
        return None
    from workloads.custom import BadInputs, check_npz

    path = Path(args.inputs)
    if not path.is_file():
        raise UsageError(f"--inputs {path}: no such file")
    try:
        check_npz(path)
    except BadInputs as exc:
        raise UsageError(f"--inputs {path}: {exc}") from None
    return path


def model_path_of(args: argparse.Namespace, settings: Settings, workload: Workload, input_size: list[int]) -> Path:
    """`--model`, or the workload's example model (built once)."""
    path = Path(args.model) if args.model else example_model_path(settings, workload, input_size)
    if not path.is_file():
        raise UsageError(f"--model {path}: no such file")
    return path


def example_model_path(settings: Settings, workload: Workload, input_size: list[int]) -> Path:
    from workloads.examples import export_example

    path = settings.data_dir.parent / "examples" / f"{workload.value}-{'x'.join(map(str, input_size))}.pt2"
    if not path.exists():
        err.print(f"building the example {workload.value} model ({path})", highlight=False, soft_wrap=True)
        export_example(workload, input_size, path)
    return path


@functools.cache
def warn_if_unconfined() -> None:
    """Say once, before a run, when measurements cannot be confined to their memory sizes."""
    from measuring.confinement import unavailable_reason

    reason = unavailable_reason()
    if reason:
        err.print(
            f"warning: measurements will not be confined to their memory sizes ({reason}); results say confined: false:"
            ' each is measured with one thread and its memory size estimated from it, marked "estimated, unconfined" '
            "with its interval"
        )


def plan_of(request: RequestSubmitted, model_path: Path, inputs_path: Path | None, store: ObjectStore):
    """The run's plan (`services/request/submission.checked_plan`, as for the API), refusing a
    model whose inputs nothing binds to (a UsageError naming them)."""
    from engines.signature import read_signature
    from services.request.submission import checked_plan
    from workloads.binding import BindingError

    signature = read_signature(model_path, request.model.format)
    try:
        plan = checked_plan(store, request, signature, inputs_path)
    except BindingError as exc:
        raise UsageError(f"--model {model_path.name}: {exc}") from None
    return plan()


def say_impossible(plan) -> None:
    impossible = plan.impossible()
    if impossible:
        err.print(
            f"[yellow]{len(impossible)} of {len(plan.combos)} combinations cannot run "
            "and will not be measured:[/yellow]"
        )
        for planned in impossible.values():
            err.print(f"  {planned.combo.label}: {planned.reason}", markup=False)


def estimate_line(plan) -> str | None:
    """The plan's time for the run as it is submitted (`ayci plan` shows what the estimate rests on); None when
    nothing is measured."""
    measured = plan.count("measure")
    if not measured:
        return None
    from core.racing import duration_text

    how = "racing: a quick pass, then what can still be an answer" if plan.precision == "quick" else "each"
    skipped = plan.costs.tvm_skipped if plan.precision == "quick" else None
    return (
        f"plan: about {duration_text(plan.wall_s)} to measure {measured} combination{'s' if measured > 1 else ''} "
        f"({how} to full precision; `ayci plan` shows what the estimate rests on)"
        + (f"; TVM's tuning will be skipped: {skipped} (`--precision exact` measures it)" if skipped else "")
    )


def submit(
    store: ObjectStore,
    publisher,
    args: argparse.Namespace,
    run_id: str,
    model_path: Path,
    workload: Workload,
    input_size: list[int],
    inputs_path: Path | None,
) -> tuple[ModelRef, RequestSubmitted]:
    """Submit the run the options describe: store its inputs and model, build the request, say
    which combinations cannot run, publish it. The stored model and the request."""
    from services.request.submission import store_inputs, store_model, submit_run

    inputs_sha = store_inputs(store, inputs_path) if inputs_path else None
    model = store_model(store, model_path, workload, input_size, inputs_sha)
    request = build_request(args, model)
    plan = plan_of(request, model_path, inputs_path, store)
    say_impossible(plan)
    if line := estimate_line(plan):
        err.print(line, highlight=False, soft_wrap=True)
    submit_run(store, publisher, request, run_id)
    return model, request


def archived_summary(store: ObjectStore, run_id: str, settings: Settings) -> RunSummary:
    """A finished run's summary (a UsageError if there is none)."""
    try:
        return RunSummary.read(store.get_bytes(keys.summary(run_id)))
    except NotFound:
        raise UsageError(f"no archived run {run_id} under {settings.data_dir}") from None
