"""`ayci plan`: what a run of these options would do (reused, to measure, impossible and
why), without doing it."""

from __future__ import annotations

import argparse

from ayci.cli.common import build_request, checked_inputs, model_path_of, plan_of, settings_of, workload_and_size
from ayci.cli.console import terminal
from ayci.cli.options import DATA_DIR_HELP, add_request_options


def register(sub) -> argparse.ArgumentParser:
    plan = sub.add_parser(
        "plan", help="what a run with these options would do (reused, to measure, impossible and why), without running"
    )
    plan.add_argument("--json", action="store_true", help="the plan as JSON")
    plan.add_argument("--data-dir", help=DATA_DIR_HELP)
    plan.add_argument("--force", action="store_true", help="as `run --force`: nothing reused")
    plan.set_defaults(func=cmd_plan)
    return plan


def finish_options(plan: argparse.ArgumentParser) -> None:
    add_request_options(plan)


def cmd_plan(args: argparse.Namespace) -> int:
    from ayci.bootstrap import local_store
    from report.terminal import plan_view
    from schemas.combos import ModelFormat, ModelRef
    from services.request.submission import model_facts, sha256_of

    settings = settings_of(args)
    workload, input_size = workload_and_size(args)
    inputs_path = checked_inputs(args)
    model_path = model_path_of(args, settings, workload, input_size)
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
    plan = plan_of(request, model_path, inputs_path, local_store(settings))
    if args.json:
        terminal.print_json(plan.as_dict(), indent=2)
        return 0
    console = terminal.out(150)
    for part in plan_view(plan, f"plan: {model_path.name}, {workload.value} {'x'.join(map(str, input_size))}"):
        console.print(part)
    console.print(estimate_basis(plan), markup=False)
    return 0


def estimate_basis(plan) -> str:
    """What the time estimate rests on, and what racing is expected to save (`core.planning.racing_s`)."""
    from core.racing import QUICK_TIME_CAP_SHARE

    totals = plan.as_dict()["totals"]
    basis = plan.as_dict()["estimates"]["from"]
    saves = totals["estimated_racing_saves_s"]
    exact, racing = totals["estimated_wall_s_exact"] / 60, totals["estimated_wall_s_racing"] / 60
    costs = plan.costs
    tvm = (
        f"none of its batch sizes: {costs.tvm_skipped};"
        if costs.tvm_skipped
        else f"{costs.tvm_tuned_share:.0%} of its batch sizes:"
    )
    return (
        f"estimates {basis}; racing (`--precision quick`: a quick pass at {QUICK_TIME_CAP_SHARE:.0%} of the timing, "
        f"then {costs.refined_share:.0%} of the combinations measured fully and TVM tuned at {tvm} "
        f"{costs.racing_source()}) {racing:.1f} min, "
        f"everything to full precision (`--precision exact`) {exact:.1f} min: racing "
        + (f"saves {saves / 60:.1f} min" if saves >= 0 else f"costs {-saves / 60:.1f} min more here")
    )
