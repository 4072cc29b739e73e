"""The command line: `python -m ayci run` measures a matrix on a model (the example
ResNet-18 by default) on the embedded default and prints the table.

Bad input (unknown hardware or optimizer, an empty matrix, a file that is not a model, a
memory size outside Lambda's range, an SLO that is not a positive number, an unknown price
region) is a clear error naming the field before any work starts.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import sys
from pathlib import Path

from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ayci.settings import Settings
from core.logs import configure_logging
from core.run_plan import measured_combos
from engines.model_files import NotAModelError
from report import print_report
from schemas import keys
from schemas.combos import Matrix, Workload, parse_memory_sizes
from schemas.documents import RunSummary
from schemas.events import DEFAULT_TUNING_TRIALS, RequestSubmitted
from services.inference.profiling import PROFILE_RUNS

err = Console(stderr=True)


class UsageError(Exception):
    pass


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
        **({"price_region": args.price_region} if getattr(args, "price_region", None) else {}),
    )


def example_model_path(settings: Settings, workload: Workload, input_size: list[int]) -> Path:
    from workloads.examples import export_example

    path = settings.data_dir.parent / "examples" / f"{workload.value}-{'x'.join(map(str, input_size))}.pt2"
    if not path.exists():
        err.print(f"building the example {workload.value} model ({path})")
        export_example(workload, input_size, path)
    return path


@functools.cache
def warn_if_unconfined() -> None:
    """Say once, before a run, when measurements cannot be confined to their memory sizes."""
    from measuring.confinement import unavailable_reason

    reason = unavailable_reason()
    if reason:
        err.print(
            f"warning: measurements will not be confined to their memory sizes ({reason}); results say confined: false"
        )


def _workload_and_size(args: argparse.Namespace) -> tuple[Workload, list[int]]:
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


def _checked_inputs(args: argparse.Namespace) -> Path | None:
    """The user's example inputs, checked before any work (`--inputs FILE.npz`)."""
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


def _plan_of(request: RequestSubmitted, model_path: Path, inputs_path: Path | None, store):
    """The run's plan, refusing a model whose inputs nothing binds to (a UsageError naming them)."""
    from core.planning import plan_run, refuse_unbindable, request_shapes
    from engines.signature import read_signature
    from workloads.binding import BindingError

    signature = read_signature(model_path, request.model.format)
    shapes = request_shapes(store, request, inputs_path)
    try:
        refuse_unbindable(signature, request, shapes)
    except BindingError as exc:
        raise UsageError(f"--model {model_path.name}: {exc}") from None
    return plan_run(request, signature, store, shapes)


def cmd_run(args: argparse.Namespace) -> int:
    from ayci.bootstrap import embedded
    from schemas.combos import ModelRef
    from services.request.submission import new_run, store_inputs, store_model

    settings = Settings(data_dir=args.data_dir) if args.data_dir else Settings()
    workload, input_size = _workload_and_size(args)
    inputs_path = _checked_inputs(args)
    # validate the matrix before touching the model (an error here loses nothing)
    placeholder = ModelRef(
        sha256="0" * 64,
        size_bytes=1,
        format="pt2",
        workload=workload,
        input_size=input_size,
        inputs_sha256="0" * 64 if inputs_path else None,
    )
    build_request(args, placeholder)
    model_path = Path(args.model) if args.model else example_model_path(settings, workload, input_size)
    if not model_path.is_file():
        raise UsageError(f"--model {model_path}: no such file")
    warn_if_unconfined()

    if args.localstack:
        return run_on_localstack(args, settings, model_path, workload, input_size, inputs_path)
    app = embedded(settings)
    inputs_sha = store_inputs(app.store, inputs_path) if inputs_path else None
    model = store_model(app.store, model_path, workload, input_size, inputs_sha)
    request = build_request(args, model)
    say_impossible(_plan_of(request, model_path, inputs_path, app.store))
    envelope = new_run(request)
    status = follow_embedded(
        app, [envelope], len(measured_combos(request)), settings, f"{model_path.name} (sha256 {model.sha256[:12]})"
    )
    if args.profile:  # measured combinations were profiled after their measurement; reused ones are now
        profile_run(app.store, settings, envelope.run_id, None, runs=PROFILE_RUNS, only_missing=True)
    return status


def say_impossible(plan) -> None:
    impossible = plan.impossible()
    if impossible:
        err.print(
            f"[yellow]{len(impossible)} of {len(plan.combos)} combinations cannot run and will not be measured:[/yellow]"
        )
        for planned in impossible.values():
            err.print(f"  {planned.combo.label}: {planned.reason}", markup=False)


def cmd_plan(args: argparse.Namespace) -> int:
    """What a run of these options would do, without doing it."""
    import json

    from adapters.local_store import LocalFolderStore
    from schemas.combos import ModelFormat, ModelRef
    from services.request.submission import model_facts, sha256_of

    settings = Settings(data_dir=args.data_dir) if args.data_dir else Settings()
    workload, input_size = _workload_and_size(args)
    inputs_path = _checked_inputs(args)
    model_path = Path(args.model) if args.model else example_model_path(settings, workload, input_size)
    if not model_path.is_file():
        raise UsageError(f"--model {model_path}: no such file")
    info = model_facts(model_path, sha256_of(model_path))
    model = ModelRef(
        sha256=info.sha256,
        size_bytes=info.size_bytes,
        format=ModelFormat(info.format),
        workload=workload,
        input_size=input_size,
        inputs_sha256=sha256_of(inputs_path) if inputs_path else None,
    )
    request = build_request(args, model)
    plan = _plan_of(request, model_path, inputs_path, LocalFolderStore(settings.data_dir))
    if args.json:
        print(json.dumps(plan.as_dict(), indent=2))
        return 0
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"plan: {model_path.name}, {workload.value} {'x'.join(map(str, input_size))}")
    for column in ("combination", "state", "conversion s", "measuring s", "reason"):
        table.add_column(column, overflow="fold")
    for c in plan.combos:
        table.add_row(
            c.combo.label,
            c.state,
            f"{c.conversion_s:.0f}" if c.state == "measure" else "",
            f"{c.measurement_s:.0f}" if c.state == "measure" else "",
            escape(c.reason or ""),
        )
    console = Console(width=max(Console().width, 150))
    console.print(table)
    totals = plan.as_dict()["totals"]
    predicted = f", predicted {totals['predicted']} (a predicted pick is measured too)" if totals["predicted"] else ""
    console.print(
        f"to measure {totals['to_measure']}, reused {totals['reused']}, impossible {totals['impossible']}{predicted}; "
        f"estimated wall time {totals['estimated_wall_s'] / 60:.1f} min; "
        f"measuring as Lambda invocations ≈ ${totals['estimated_benchmark_cost_usd']:.4f}"
    )
    console.print(
        f"on the AWS deployment (python -m infra deploy), this run ≈ ${plan.aws_run_cost_usd:.4f} "
        "(measuring functions, the inference functions waiting for them, conversions)"
    )
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    """A model's signature as its file declares it, read without running it."""
    from engines.signature import read_signature

    path = Path(args.model)
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    try:
        signature = read_signature(path)
    except NotAModelError as exc:
        raise UsageError(f"{path}: not an accepted model (a torch.export .pt2 or ONNX file): {exc}") from None
    if args.json:
        print(signature.model_dump_json(indent=2))
        return 0
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"{path.name}: {signature.format}{', external data' if signature.external_data else ''}")
    for column in ("", "name", "dtype", "dims", "passed"):
        table.add_column(column)
    for side, specs in (("input", signature.inputs), ("output", signature.outputs)):
        for spec in specs:
            table.add_row(side, escape(spec.name), spec.dtype, escape(spec.shape_text()), spec.kind or "")
    console = Console()
    console.print(table)
    for name, allowed in signature.dim_ranges.items():
        console.print(f"dynamic dim {name}: {allowed.text()}")
    for problem in signature.problems:
        console.print(problem, style="yellow", markup=False)
    return 0


def follow_embedded(app, envelopes: list, total: int, settings: Settings, what: str) -> int:
    """Publish `envelopes` on the embedded default, drive the run with progress shown, print
    the table."""
    run_id = envelopes[0].run_id
    err.print(f"run {run_id}: {total} combinations of {what}")
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err
    ) as progress:
        task = progress.add_task("planning", total=total)

        def observe(queue: str, event) -> None:
            combo = getattr(event.payload, "combo", None)
            if event.type == "ComboPending":
                progress.update(task, description=f"converting {combo.label}")
            elif event.type == "ModelConverted":
                progress.update(task, description=f"measuring {combo.label}")
            elif event.type in ("InferenceDone", "ComboFailed", "CombosReused") and queue == "archiver":
                count = len(event.payload.results) if event.type == "CombosReused" else 1
                done = progress.tasks[0].completed + count
                progress.update(
                    task, advance=count, total=max(progress.tasks[0].total, done)
                )  # a predicted pick being checked adds one

        app.bus.observers.append(observe)
        app.publisher.publish(envelopes)
        app.bus.run_until_idle()
    summary = RunSummary.read(app.store.get_bytes(keys.summary(run_id))).to_dict()
    print_report(summary, Console(width=max(Console().width, 170)))
    err.print(f"results: {settings.data_dir / keys.summary(run_id)}")
    return {"complete": 0, "partial": 0, "failed": 2}[summary["status"]]


@contextlib.contextmanager
def localstack_services(stack: str, settings: Settings):
    """Start LocalStack, deploy the stack, start one process per service; yields the AWS
    wiring to submit with, and stops the processes afterwards."""
    from ayci.bootstrap import aws
    from infra import localstack as cloud

    err.print("starting LocalStack and deploying the stack")
    cloud.start_localstack()
    outputs = cloud.deploy(stack)
    processes = cloud.ServiceProcesses(env=cloud.service_env(outputs, stack), log_dir=settings.data_dir.parent / "logs")
    # an arm worker too: on x86 it measures arm combinations as emulated aarch64 code
    processes.start_all(inference_hardware=("intel", "arm"))
    try:
        os.environ.update(
            {"AYCI_BUCKET": outputs.bucket, "AYCI_BUS_NAME": outputs.bus_name, "AYCI_QUEUE_PREFIX": stack}
        )
        yield aws(Settings()), processes
    finally:
        processes.stop_all()
        err.print(f"service logs: {processes.log_dir}")
        if processes.restarts:
            err.print(f"restarted after dying: {', '.join(f'{n} x{c}' for n, c in processes.restarts.items())}")
        err.print(
            f"LocalStack is still running ({cloud.LOCALSTACK_ENV['AWS_ENDPOINT_URL']}, stack {stack!r}, kept for the next run): "
            "stop it with `scripts/localstack.sh stop`"
        )


def run_on_localstack(
    args: argparse.Namespace,
    settings: Settings,
    model_path: Path,
    workload: Workload,
    input_size: list[int],
    inputs_path: Path | None = None,
) -> int:
    from schemas.combos import combo_key
    from services.request.submission import new_run, store_inputs, store_model

    with localstack_services(args.stack, settings) as (wiring, processes):
        inputs_sha = store_inputs(wiring.store, inputs_path) if inputs_path else None
        model = store_model(wiring.store, model_path, workload, input_size, inputs_sha)
        request = build_request(args, model)
        say_impossible(_plan_of(request, model_path, inputs_path, wiring.store))
        envelope = new_run(request)
        wiring.publisher.publish([envelope])
        return follow_store(
            wiring.store,
            envelope.run_id,
            [combo_key(model, c) for c in measured_combos(request)],
            args.timeout,
            processes,
        )


def follow_store(store, run_id: str, combo_keys: list[str], timeout_s: float, processes=None) -> int:
    """Wait for a run on the real path, showing its progress (one listing of its outcomes a
    second), and print the table. A service process that dies is restarted."""
    import time

    err.print(f"run {run_id}: {len(combo_keys)} combinations")
    deadline = time.monotonic() + timeout_s
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err
    ) as progress:
        task = progress.add_task("running on LocalStack", total=len(combo_keys))
        while not store.exists(keys.summary(run_id)):
            if time.monotonic() > deadline:
                raise UsageError(f"run {run_id} did not end within --timeout {timeout_s:.0f} s")
            progress.update(task, completed=keys.outcomes_in(store.list_keys(keys.outcomes_prefix(run_id))))
            for name in processes.restart_dead() if processes is not None else []:
                err.print(f"[yellow]{name} died: restarted it (log: {processes.log_dir / (name + '.log')})[/yellow]")
            time.sleep(1)
        progress.update(task, completed=len(combo_keys))
    summary = RunSummary.read(store.get_bytes(keys.summary(run_id))).to_dict()
    print_report(summary, Console(width=max(Console().width, 170)))
    return {"complete": 0, "partial": 0, "failed": 2}[summary["status"]]


def cmd_replay(args: argparse.Namespace) -> int:
    from ayci.bootstrap import embedded
    from schemas.combos import combo_key
    from services.request.replay import ReplayError, replay

    settings = Settings(data_dir=args.data_dir) if args.data_dir else Settings()

    def replayed(store) -> tuple[list, list[str]]:
        try:
            envelopes = replay(store, args.run_id, args.from_type, force=args.force)
        except ReplayError as exc:
            raise UsageError(str(exc)) from exc
        planned = next((e.payload for e in envelopes if e.type == "RunPlanned"), None)
        if planned is not None:
            return envelopes, list(planned.combos)
        request = envelopes[0].payload
        return envelopes, [combo_key(request.model, c) for c in measured_combos(request)]

    if args.localstack:
        with localstack_services(args.stack, settings) as (wiring, processes):
            envelopes, combo_keys = replayed(wiring.store)
            wiring.publisher.publish(envelopes)
            return follow_store(wiring.store, envelopes[0].run_id, combo_keys, args.timeout, processes)
    app = embedded(settings)
    envelopes, combo_keys = replayed(app.store)
    return follow_embedded(
        app, envelopes, len(combo_keys), settings, f"a replay of run {args.run_id} from {args.from_type}"
    )


def cmd_traffic(args: argparse.Namespace) -> int:
    """A finished run's combinations under a traffic profile (`core/lambda_model/traffic.py`): cold-start
    share, p50/p99/p99.9 with cold starts, peak instances, the bill; and the cheapest meeting
    the SLO."""
    import json

    from rich.table import Table

    from adapters.local_store import LocalFolderStore
    from core.lambda_model.traffic import Traffic, TrafficError, parse_duration, traffic_report
    from core.ports import NotFound

    settings = Settings(data_dir=args.data_dir) if args.data_dir else Settings()
    try:
        traffic = Traffic(
            rps=args.rps,
            pattern=args.pattern,
            idle_timeout_s=parse_duration(args.idle_timeout, "idle-timeout"),
            duration_s=parse_duration(args.duration, "duration"),
        )
        summary = RunSummary.read(LocalFolderStore(settings.data_dir).get_bytes(keys.summary(args.run_id))).to_dict()
        report = traffic_report(summary, traffic, args.slo)
    except NotFound:
        raise UsageError(f"no archived run {args.run_id} under {settings.data_dir}") from None
    except TrafficError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    days = traffic.duration_s / 86400
    table = Table(
        title=f"run {args.run_id} under {traffic.rps:g} req/s ({traffic.pattern}), idle timeout {traffic.idle_timeout_s:g} s, {days:g} days"
    )
    for title in (
        "combination",
        "served",
        "cold share",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
        "peak instances",
        f"bill ({days:g} d) $",
        "note",
    ):
        table.add_column(title)
    for row in report["rows"]:
        for i, option in enumerate(row["options"]):
            note = ", ".join(
                (["predicted"] if row["predicted"] else [])
                + (row["notes"] if i == 0 else [])
                + ([option["assumption"]] if "assumption" in option else [])
            )
            table.add_row(
                row["combination"] if i == 0 else "",
                option["option"],
                f"{option['cold_share']:.2%}",
                f"{option['p50_ms']:.1f}",
                f"{option['p99_ms']:.1f}",
                f"{option['p999_ms']:.1f}",
                str(option["peak_instances"]),
                f"{option['bill_usd']:.2f}",
                note,
            )
    Console(width=max(Console().width, 150)).print(table)
    slo = f"p99 with cold starts within {args.slo:g} ms" if args.slo else "no SLO given"
    print(f"cheapest ({slo}): {report['recommended'] or 'none meets it'}")
    return 0


def cmd_coldstart(args: argparse.Namespace) -> int:
    """Cold-start levers for a finished run's measured `onnx` and `base` combinations, each
    variant measured confined to the combination's memory size (`measuring/levers.py`)."""
    import json
    import tempfile

    from rich.table import Table

    from adapters.local_store import LocalFolderStore
    from core.ports import NotFound
    from measuring.levers import base_variants, measure_levers, onnx_variants
    from report.recommendation import label as combination_label
    from schemas.combos import ModelRef
    from services.inference.profiling import fetch_measured

    settings = Settings(data_dir=args.data_dir) if args.data_dir else Settings()
    store = LocalFolderStore(settings.data_dir)
    try:
        summary = RunSummary.read(store.get_bytes(keys.summary(args.run_id))).to_dict()
    except NotFound:
        raise UsageError(f"no archived run {args.run_id} under {settings.data_dir}") from None
    chosen = [
        r
        for r in summary["results"]
        if not r.get("predicted")
        and not r.get("emulated")
        and r["combo"]["optimizer"] in ("onnx", "base")
        and not (r["combo"]["optimizer"] == "base" and r["model"]["format"] == "onnx")
    ]
    if not chosen:
        raise UsageError(f"run {args.run_id} has no natively measured onnx or base (.pt2) combination to try levers on")
    warn_if_unconfined()
    report = {}
    for result in chosen:
        combo, model, label = result["combo"], ModelRef.model_validate(result["model"]), combination_label(result)
        err.print(f"{label}: preparing the variants ...")
        with tempfile.TemporaryDirectory(prefix="ayci-levers-") as tmp:
            work = Path(tmp)
            artifact, reference = fetch_measured(store, result, work)
            threads = result.get("threads") or 1
            variants = (
                onnx_variants(artifact, threads, work)
                if combo["optimizer"] == "onnx"
                else base_variants(artifact, work)
            )
            err.print(f"{label}: measuring {len(variants)} variants x {args.repeat} cold starts ...")
            report[label] = measure_levers(
                variants,
                workload=model.workload.value,
                reference=reference,
                memory_mb=combo["memory_mb"],
                repeat=args.repeat,
            )
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    console = Console(width=max(Console().width, 150))
    for label, rows in report.items():
        table = Table(title=f"{label}: cold-start levers (medians of {args.repeat})")
        for title in (
            "variant",
            "cold start ms",
            "saved ms",
            "process",
            "imports",
            "model load",
            "first inference",
            "peak MB",
            "p50 ms",
            "note",
        ):
            table.add_column(title)
        for row in rows:
            if "failed" in row:
                table.add_row(row["variant"], "-", "-", "-", "-", "-", "-", "-", "-", f"failed: {row['failed']}")
                continue
            cold = row["cold_start_ms"]
            note = f"made in {row['prepare_s']:.1f} s at conversion" if row["prepare_s"] else ""
            table.add_row(
                row["variant"],
                f"{cold['total']:.0f}",
                f"{row['cold_start_saved_ms']:+.0f}",
                f"{cold['process_start']:.0f}",
                f"{cold['imports']:.0f}",
                f"{cold['model_load']:.0f}",
                f"{cold['first_inference']:.0f}",
                f"{row['peak_mb']:.0f}",
                f"{row['p50_ms']:.2f}",
                note,
            )
        console.print(table)
    return 0


def profile_run(
    store,
    settings: Settings,
    run_id: str,
    combo_key: str | None,
    *,
    runs: int,
    as_json: bool = False,
    only_missing: bool = False,
) -> None:
    """Profile a finished run's combinations (all, or `combo_key`; with `only_missing`, those
    not profiled yet), each confined as it was measured (`services/inference/profiling.py`),
    and print them side by side."""
    import json

    from core.ports import NotFound
    from core.results import stored_profile
    from measuring.launcher import MeasurementFailed
    from report.profiles import NotProfilable, chosen_results, print_profile_tables, profile_tables
    from services.inference.profiling import profile_result

    try:
        summary = RunSummary.read(store.get_bytes(keys.summary(run_id))).to_dict()
        chosen = chosen_results(summary, combo_key)
    except NotFound:
        raise UsageError(f"no archived run {run_id} under {settings.data_dir}") from None
    except NotProfilable as exc:
        raise UsageError(str(exc)) from None
    warn_if_unconfined()
    profiles = []
    for result in chosen:
        stored = stored_profile(store, result) if only_missing else None
        if stored is not None:
            profiles.append(stored.to_dict())
            continue
        err.print(f"profiling {result['combo_key']} ({runs} inferences) ...")
        try:
            profiles.append(profile_result(store, result, runs=runs).to_dict())
        except MeasurementFailed as exc:
            err.print(f"[yellow]{result['combo_key']}: profiling failed: {exc.reason}[/yellow]")
    tables = profile_tables(profiles, trace_url=lambda p: str(settings.data_dir / p["trace_key"]))
    if as_json:
        print(json.dumps({"profiles": profiles, "tables": tables}, indent=1))
    else:
        print_profile_tables(tables, Console(width=max(Console().width, 170)))


def cmd_profile(args: argparse.Namespace) -> int:
    """Where the time goes in a finished run: each combination profiled (Chrome trace, operator
    table), the optimizers side by side per hardware, batch and memory size."""
    from adapters.local_store import LocalFolderStore

    settings = Settings(data_dir=args.data_dir) if args.data_dir else Settings()
    profile_run(
        LocalFolderStore(settings.data_dir), settings, args.run_id, args.combination, runs=args.runs, as_json=args.json
    )
    return 0


def build_endpoint(args: argparse.Namespace, work_dir: Path):
    """The endpoint of `ayci endpoint` / `ayci loadtest`: each run's pick (or chosen
    combination), refused with the reason when a run cannot be served."""
    import psutil

    from adapters.local_store import LocalFolderStore
    from serving.endpoint import Endpoint
    from serving.models import NotServable, served_models
    from serving.scaling import ScalingPolicy

    settings = Settings(data_dir=args.data_dir) if args.data_dir else Settings()
    specs = [s.strip() for s in args.runs.split(",") if s.strip()]
    if not specs:
        raise UsageError("name at least one run: RUN_ID[:COMBINATION][,RUN_ID...]")
    try:
        models = served_models(LocalFolderStore(settings.data_dir), specs, work_dir)
        budget = args.memory_budget or int(psutil.virtual_memory().available / 2**20 * 0.8)
        return Endpoint(
            models,
            budget_mb=budget,
            policy=ScalingPolicy(max_workers=args.max_workers, idle_s=args.idle_time),
            max_queue=args.max_queue,
            work_dir=work_dir,
        )
    except (NotServable, ValueError) as exc:
        raise UsageError(str(exc)) from None


def cmd_endpoint(args: argparse.Namespace) -> int:
    """Serve runs' picks behind one HTTP endpoint (`serving/`) until interrupted."""
    import tempfile

    import uvicorn

    from serving.app import create_app

    with tempfile.TemporaryDirectory(prefix="ayci-endpoint-") as tmp:
        endpoint = build_endpoint(args, Path(tmp))
        warn_if_unconfined()
        for model in endpoint.models.values():
            err.print(
                f"{model.name}: run {model.run_id}, {model.label} ({model.chosen_by}) at POST /invocations/{model.name}"
            )
        err.print(
            f"serving http://{args.host}:{args.port} (budget {endpoint.budget.budget_mb} MB, up to {args.max_workers} workers a model; "
            "GET /models, GET /metrics)"
        )
        endpoint.start()
        try:
            uvicorn.run(
                create_app(endpoint, max_body_bytes=int(args.max_body_mb * 2**20)),
                host=args.host,
                port=args.port,
                log_level="warning",
            )
        finally:
            endpoint.close()
    return 0


def cmd_loadtest(args: argparse.Namespace) -> int:
    """Start the endpoint, drive it with Locust (`serving/loadtest.py`) and print what it
    did beside the traffic simulation's prediction for the same arrivals."""
    import json
    import tempfile
    from datetime import UTC, datetime

    from rich.table import Table

    from core.lambda_model.traffic import TrafficError, parse_duration
    from serving.app import create_app
    from serving.loadtest import TOLERANCE, LoadPlan, run_loadtest

    try:
        plan = LoadPlan(rps=args.rps, duration_s=parse_duration(args.duration, "duration"), pattern=args.pattern)
    except (TrafficError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    out = Path(args.out) if args.out else Path(".ayci") / "loadtest" / datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    with tempfile.TemporaryDirectory(prefix="ayci-endpoint-") as tmp:
        endpoint = build_endpoint(args, Path(tmp))
        warn_if_unconfined()
        err.print(
            f"load test: {plan.pattern}, {plan.rps:g} req/s for {plan.duration_s:g} s against {', '.join(endpoint.models)} ..."
        )
        endpoint.start()
        try:
            report = run_loadtest(
                endpoint, plan, out, create_app(endpoint, max_body_bytes=int(args.max_body_mb * 2**20))
            )
        finally:
            endpoint.close()
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    console = Console(width=max(Console().width, 150))
    for name, row in report["models"].items():
        seen, guess = row["observed"], row["predicted"] or {}
        table = Table(title=f"{name}: {row['combination']} of run {row['run_id']}")
        for title in (
            "",
            "requests",
            "errors",
            "p50 ms",
            "p99 ms",
            "cold share",
            "cold loads",
            "evictions",
            "peak workers",
        ):
            table.add_column(title)
        errors = ", ".join(f"{n} x {code}" for code, n in seen["errors"].items()) or "0"
        loads = ", ".join(f"{n} {kind}" for kind, n in seen["loads"].items()) or "0"
        table.add_row(
            "load test",
            str(seen["requests"]),
            errors,
            f"{seen['p50_ms']:.1f}",
            f"{seen['p99_ms']:.1f}",
            f"{seen['cold_share']:.2%}",
            loads,
            str(seen["evictions"]),
            str(seen["peak_workers"]),
        )
        note = f"{seen['waited_for_load']} requests waited for a cold load ({seen['waited_share']:.2%})"
        if guess:
            table.add_row(
                f"simulated, at most {args.max_workers} workers",
                str(guess["simulated_requests"]),
                "-",
                f"{guess['p50_ms']:.1f}",
                f"{guess['p99_ms']:.1f}",
                f"{guess['cold_share']:.2%}",
                str(guess["cold_starts"]),
                "-",
                f"{guess['peak_instances']}",
            )
            lam = guess["lambda"]
            table.add_row(
                "simulated Lambda pool",
                str(guess["simulated_requests"]),
                "-",
                f"{lam['p50_ms']:.1f}",
                f"{lam['p99_ms']:.1f}",
                f"{lam['cold_share']:.2%}",
                "-",
                "-",
                f"{lam['peak_instances']} instances",
            )
        console.print(table)
        console.print(note, highlight=False)
        comparison = row["comparison"]
        if guess:
            verdict = {True: "within", False: "outside", None: "not compared"}
            console.print(
                f"p99 {verdict[comparison['p99_within']]} ±{TOLERANCE:.0%} of the prediction (at most {args.max_workers} workers), "
                "cold-start share "
                f"{verdict[comparison['cold_share_within']]}",
                highlight=False,
            )
        for reason in comparison["explained"]:
            console.print(f"  - {reason}", highlight=False)
    samples = json.loads((out / "samples.json").read_text())
    for name in report["models"]:
        per_second = [
            s["models"][name]["workers"] + s["models"][name]["starting"] for s in samples[::4] if name in s["models"]
        ]
        console.print(f"{name} workers, each second: {' '.join(map(str, per_second))}", highlight=False)
    console.print(
        f"plot: {report['plot']}  requests: {out / 'requests.csv'}  report: {out / 'report.json'}", highlight=False
    )
    if report["locust"]["exit_code"] not in (0, 1):  # 1: some requests failed, which the table shows
        err.print(f"locust exited with {report['locust']['exit_code']}: {report['locust']['tail'][-500:]}")
        return 1
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    """Cancel a run on the real path (a deployed stack: AYCI_BUCKET, AYCI_BUS_NAME, or
    --stack on LocalStack); `ayci serve`'s runs are cancelled from its page or API."""
    from datetime import UTC, datetime

    from ayci.bootstrap import aws
    from schemas.documents import RunRecord
    from services.request.runs import cancel_run

    if args.localstack:
        from infra import localstack as cloud
        from infra.stack import read_stack

        cloud.use_localstack()
        outputs = read_stack(args.stack)
        os.environ.update(
            {"AYCI_BUCKET": outputs.bucket, "AYCI_BUS_NAME": outputs.bus_name, "AYCI_QUEUE_PREFIX": args.stack}
        )
    wiring = aws(Settings())
    try:
        record = RunRecord.read(wiring.store.get_bytes(keys.run_record(args.run_id))).to_dict()
    except Exception:
        raise UsageError(f"no run {args.run_id} in this stack") from None
    closing = cancel_run(wiring.store, record, datetime.now(UTC))
    if closing is None:
        raise UsageError(f"run {args.run_id} has ended already")
    wiring.publisher.publish([closing])
    err.print(
        f"run {args.run_id}: cancelled; its pending combinations fail as cancelled and it is archived with what was measured"
    )
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from ayci.serve import serve_embedded

    url = f"http://{args.host}:{args.port}"
    settings = Settings(**({"data_dir": args.data_dir} if args.data_dir else {}))
    if "results_url" not in settings.model_fields_set:  # the links in emails point at this server
        settings = settings.model_copy(update={"results_url": url})
    return serve_embedded(settings, args.host, args.port)


def cmd_example_model(args: argparse.Namespace) -> int:
    from workloads import workload_module
    from workloads.examples import export_example

    workload = Workload(args.workload)
    size = (
        parse_ints(args.input_size, "input-size") if args.input_size else workload_module(workload).DEFAULT_INPUT_SIZE
    )
    print(export_example(workload, size, Path(args.out)))
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="ayci", description="All You Can Inference: which compiler, hardware, batch and Lambda memory size?"
    )
    top.add_argument("-v", "--verbose", action="store_true", help="log every event")
    sub = top.add_subparsers(dest="command", required=True)
    executing = argparse.ArgumentParser(add_help=False)  # options of every command that executes a run
    executing.add_argument("--force", action="store_true", help="measure again even where results are stored")
    executing.add_argument("--data-dir", help="the local object store (default .ayci/data)")
    executing.add_argument(
        "--localstack", action="store_true", help="on the real path: LocalStack, the stack, one process per service"
    )
    executing.add_argument("--stack", default="ayci", help="stack name and resource prefix (with --localstack)")
    executing.add_argument(
        "--timeout", type=float, default=3600, help="seconds to wait for the run (with --localstack)"
    )
    run = sub.add_parser(
        "run", parents=[executing], help="measure a matrix on the embedded default and print the table"
    )
    plan = sub.add_parser(
        "plan", help="what a run with these options would do (reused, to measure, impossible and why), without running"
    )
    plan.add_argument("--json", action="store_true", help="the plan as JSON")
    plan.add_argument("--data-dir", help="the local object store (default .ayci/data)")
    plan.add_argument("--force", action="store_true", help="as `run --force`: nothing reused")
    plan.set_defaults(func=cmd_plan)
    inspect = sub.add_parser(
        "inspect", help="a model's signature (inputs, outputs, dynamic dims), read without running it"
    )
    inspect.add_argument("model")
    inspect.add_argument("--json", action="store_true")
    inspect.set_defaults(func=cmd_inspect)
    for command in (run, plan):
        command.add_argument(
            "--model", help="a .pt2 (torch.export) or .onnx file; default: the example model of the workload"
        )
        command.add_argument(
            "--workload", default="image_classification", help="image_classification | nlp | object_detection | custom"
        )
        command.add_argument(
            "--inputs",
            help="your own example inputs: an .npz with one array per model input, batch first (required by --workload custom)",
        )
        command.add_argument("--input-size", help="H,W for images and detection; sequence length for nlp")
        command.add_argument(
            "--matrix",
            nargs="+",
            default=["intel=base,onnx"],
            help="HARDWARE=OPT[,OPT] ... (OPT: base, onnx, tvm, onnx_int8) e.g. intel=base,onnx,tvm arm=onnx",
        )
        command.add_argument("--batch", default="1", help="batch sizes, e.g. 1,4")
        command.add_argument(
            "--memory",
            default="1769",
            help="Lambda memory sizes in MB, e.g. 1024,1769,3538, or a range: 128-10240 "
            "(Lambda's common sizes within it)",
        )
        command.add_argument(
            "--predict",
            action="store_true",
            help="measure at most 3 memory sizes per hardware, optimizer and "
            "batch, and predict the others with an interval (needs at least 4 sizes)",
        )
        command.add_argument(
            "--trials",
            type=int,
            default=DEFAULT_TUNING_TRIALS,
            help=f"TVM tuning trials per model (MetaSchedule; default {DEFAULT_TUNING_TRIALS})",
        )
        command.add_argument("--slo", type=float, help="p99 SLO in ms")
        command.add_argument("--min-agreement", type=float, default=0.99)
        command.add_argument(
            "--balance-weight", type=float, default=0.5, help="weight of cost against p99 in the balanced pick, 0..1"
        )
        command.add_argument("--price-region", help="Lambda price region (default: the price table's, us-east-1)")
        command.add_argument("--email")
        command.add_argument(
            "--traffic-rps",
            type=float,
            help="price the results under this many requests/s in the email (see `ayci traffic`)",
        )
        command.add_argument("--traffic-pattern", default="steady", choices=["steady", "spiky"])
    run.add_argument(
        "--profile", action="store_true", help="after measuring, profile each combination (see `ayci profile`)"
    )
    run.set_defaults(func=cmd_run)
    replay = sub.add_parser(
        "replay", parents=[executing], help="re-run a stored run from one stage, as a new run linked to it"
    )
    replay.add_argument("run_id")
    replay.add_argument(
        "--from", dest="from_type", default="ModelConverted", help="RequestSubmitted | ComboPending | ModelConverted"
    )
    replay.set_defaults(func=cmd_replay)
    cancel = sub.add_parser("cancel", help="cancel a run on the real path (LocalStack with --localstack, or AWS)")
    cancel.add_argument("run_id")
    cancel.add_argument("--localstack", action="store_true", help="the stack on LocalStack")
    cancel.add_argument("--stack", default="ayci", help="stack name and resource prefix (with --localstack)")
    cancel.set_defaults(func=cmd_cancel)
    traffic = sub.add_parser(
        "traffic", help="a finished run's combinations under a traffic profile: cold starts, tail latency, the bill"
    )
    traffic.add_argument("run_id")
    traffic.add_argument("--rps", type=float, required=True, help="requests per second (the base rate for spiky)")
    traffic.add_argument(
        "--pattern",
        default="steady",
        help="steady | spiky (10x bursts of 30 s every 10 min) | a CSV of arrival times or minute,count",
    )
    traffic.add_argument("--idle-timeout", default="10m", help="how long an idle instance is kept, e.g. 5m")
    traffic.add_argument("--duration", default="30d", help="the period billed, e.g. 30d")
    traffic.add_argument("--slo", type=float, help="p99 in ms, cold starts included")
    traffic.add_argument("--data-dir", help="the local object store (default .ayci/data)")
    traffic.add_argument("--json", action="store_true")
    traffic.set_defaults(func=cmd_traffic)
    coldstart = sub.add_parser(
        "coldstart",
        help="cold-start levers (pre-optimized ONNX, ORT format, arena, AOTInductor) of a finished run, measured",
    )
    coldstart.add_argument("run_id")
    coldstart.add_argument("--repeat", type=int, default=3, help="cold starts per variant (the median is shown)")
    coldstart.add_argument("--data-dir", help="the local object store (default .ayci/data)")
    coldstart.add_argument("--json", action="store_true")
    coldstart.set_defaults(func=cmd_coldstart)
    profile = sub.add_parser(
        "profile", help="where the time goes: a finished run's combinations profiled (traces, operators side by side)"
    )
    profile.add_argument("run_id")
    profile.add_argument("--combination", help="the key of one combination (default: every measured one)")
    profile.add_argument("--runs", type=int, default=PROFILE_RUNS, help="profiled inferences per combination")
    profile.add_argument("--data-dir", help="the local object store (default .ayci/data)")
    profile.add_argument("--json", action="store_true")
    profile.set_defaults(func=cmd_profile)
    serving = argparse.ArgumentParser(add_help=False)  # options of the endpoint, and of the load test that starts one
    serving.add_argument(
        "runs",
        help="RUN_ID[:COMBINATION][,RUN_ID...]: each run's recommended combination, or the one named "
        "(e.g. RUN_ID:intel/onnx/b1/1769MB)",
    )
    serving.add_argument(
        "--memory-budget",
        type=int,
        help="MB the workers may reserve together (each its combination's memory size); "
        "default 80%% of the memory available",
    )
    serving.add_argument("--max-workers", type=int, default=2, help="workers per model at most")
    serving.add_argument(
        "--idle-time", type=float, default=30.0, help="seconds a worker may idle before it is stopped (one stays)"
    )
    serving.add_argument(
        "--max-queue", type=int, default=32, help="requests queued per model; beyond: 503 with Retry-After"
    )
    serving.add_argument("--max-body-mb", type=float, default=16.0, help="the largest request body (413 beyond)")
    serving.add_argument("--data-dir", help="the local object store (default .ayci/data)")
    endpoint = sub.add_parser(
        "endpoint",
        parents=[serving],
        help="serve runs' picks behind one HTTP endpoint (many models, LRU, scaling workers)",
    )
    endpoint.add_argument("--host", default="127.0.0.1")
    endpoint.add_argument("--port", type=int, default=8080)
    endpoint.set_defaults(func=cmd_endpoint)
    loadtest = sub.add_parser(
        "loadtest",
        parents=[serving],
        help="start the endpoint, drive it with Locust, compare with the traffic simulation",
    )
    loadtest.add_argument(
        "--rps", type=float, required=True, help="requests per second (the base rate for spiky), over all the models"
    )
    loadtest.add_argument("--duration", default="60s", help="how long to drive it, e.g. 90s, 5m")
    loadtest.add_argument(
        "--pattern", default="steady", choices=["steady", "spiky"], help="spiky: 10x bursts in the middle of each half"
    )
    loadtest.add_argument("--out", help="where the plot, the requests and the report go (default .ayci/loadtest/TIME)")
    loadtest.add_argument("--json", action="store_true")
    loadtest.set_defaults(func=cmd_loadtest)
    example = sub.add_parser("example-model", help="write an example model as .pt2")
    example.add_argument("--workload", default="image_classification")
    example.add_argument("--input-size")
    example.add_argument("--out", required=True)
    example.set_defaults(func=cmd_example_model)
    serve = sub.add_parser(
        "serve", help="the web page and HTTP API on the embedded default (every service in this process)"
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--data-dir", help="the local object store (default .ayci/data)")
    serve.set_defaults(func=cmd_serve)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    configure_logging("console", logging.INFO if args.verbose else logging.WARNING)
    try:
        return args.func(args)
    except UsageError as exc:
        err.print(f"error: {exc}")
        return 2
    except ValidationError as exc:
        err.print(f"error: {validation_message(exc)}")
        return 2
    except NotAModelError as exc:
        err.print(f"error: --model is not an accepted model: {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
