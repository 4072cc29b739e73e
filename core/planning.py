"""A plan before the run: for each combination, reused (a stored result), to measure (with its
estimated time), or impossible (with the reason), and the totals.

Impossible is decided from what intake read of the model without running it (its signature,
`schemas/signature.py`) and its size: inputs that bind to none of the model's inputs, a fixed
batch dim, an input size against static dims or outside a dynamic range, a memory size below
the model's weights plus the runtime's floor. Dedup records impossible combinations as failed
at stage `plan` (they never reach a worker); `ayci plan`, `POST /plans` and the page show the
same plan before anything runs.

Every possible combination is also checked against Lambda's rules (`core.lambda_rules`): its
payload per batch (request from the inputs, response from the signature's outputs) against 6 MB,
and its deployment form (zip or container image, by the runtime's and the model's sizes). One
that breaks a rule is still measured (its figures feed predictions) but marked, and never
recommended.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from core.lambda_rules import LambdaFit, lambda_fit, output_shapes
from core.plan_costs import EngineCosts, sampling_s, stored_costs, stored_results
from core.ports import NotFound, ObjectStore
from core.results import reused_result
from core.run_plan import MAX_CHECKS, measured_and_predicted, runtime_floor_mb
from core.tuning_stakes import never_tuned
from schemas import keys
from schemas.combos import Combo, Hardware, Optimizer, combo_key
from schemas.cost import load_prices
from schemas.documents import ModelInfo
from schemas.events import TUNING_TIME_LIMIT_S, RequestSubmitted
from schemas.signature import ModelSignature
from workloads import workload_module
from workloads.binding import BindingError, bind, bound_shapes
from workloads.custom import check_npz

# the AWS deployment (infra/template.yaml): the converter function's memory, and the inference
# function's, which waits for the measuring function of each combination's size
AWS_CONVERTER_MB = 3008
AWS_INFERENCE_MB = 256

Shapes = dict[str, tuple[tuple[int, ...], str]]


def model_signature(store: ObjectStore, sha256: str) -> ModelSignature | None:
    """The signature intake read of a stored model (None for a model kept before signatures)."""
    try:
        return ModelInfo.read(store.get_bytes(keys.model_info(sha256))).signature
    except NotFound:
        return None


def request_shapes(
    store: ObjectStore | None, request: RequestSubmitted, inputs_path: Path | None = None
) -> Callable[[int], Shapes]:
    """The shapes of the inputs a run feeds its model at a batch size: the workload's, or those
    of the user's own `.npz` (from `inputs_path`, else from the store)."""
    model = request.model
    if model.inputs_sha256 is None:
        module = workload_module(model.workload)
        return lambda batch: module.input_shapes(batch, list(model.input_size))
    if inputs_path is None:
        with tempfile.TemporaryDirectory(prefix="ayci-inputs-") as tmp:
            local = Path(tmp) / "inputs.npz"
            store.get_file(keys.inputs(model.inputs_sha256), local)
            per_file = check_npz(local)
    else:
        per_file = check_npz(inputs_path)
    return lambda batch: {name: ((batch, *shape[1:]), dtype) for name, (shape, dtype) in per_file.items()}


def impossible_reason(
    signature: ModelSignature | None, request: RequestSubmitted, combo: Combo, shapes: Callable[[int], Shapes]
) -> str | None:
    """Why `combo` cannot run, as far as the model's file tells; None if it may."""
    model = request.model
    weights_mb = model.size_bytes / (1 << 20)
    floor = runtime_floor_mb(combo.optimizer, model.format)
    if weights_mb + floor > combo.memory_mb:
        return (
            f"certain out of memory: the model's weights take {weights_mb:.0f} MB and {combo.optimizer.value}'s "
            f"runtime at least {floor} MB; {combo.memory_mb} MB cannot hold them"
        )
    if signature is None:
        return None
    provided = shapes(combo.batch_size)
    module = workload_module(model.workload)
    try:
        sources = bind(
            signature, provided, getattr(module, "INPUT_ROLES", {}), workload=f"the {model.workload.value} workload"
        )
    except BindingError as exc:
        return str(exc)
    problems = signature.shape_problems(bound_shapes(sources, provided), combo.batch_size)
    return "; ".join(problems) or None


def planned_fit(
    signature: ModelSignature | None, request: RequestSubmitted, combo: Combo, shapes: Callable[[int], Shapes]
) -> LambdaFit:
    """`combo` against Lambda's rules before measuring: its payload from the inputs the run feeds
    and the outputs the signature declares, its deployment form from the model's size."""
    inputs = shapes(combo.batch_size)
    return lambda_fit(request.model, combo, inputs=inputs, outputs=output_shapes(signature, combo.batch_size, inputs))


def refuse_unbindable(
    signature: ModelSignature | None, request: RequestSubmitted, shapes: Callable[[int], Shapes]
) -> None:
    """`BindingError` naming the model's inputs that nothing the run feeds can bind to."""
    module = workload_module(request.model.workload)
    bind(
        signature,
        shapes(request.matrix.batch_sizes[0]),
        getattr(module, "INPUT_ROLES", {}),
        workload=f"the {request.model.workload.value} workload",
    )


@dataclass
class PlannedCombo:
    key: str
    combo: Combo
    state: str  # reused | measure | predict | impossible
    reason: str | None = None
    conversion_s: float = 0.0  # the artifact's conversion and tuning, counted once per artifact
    measurement_s: float = 0.0  # end to end: the measuring process and what surrounds it (`core.plan_costs`)
    sampling_s: float = 0.0  # of which timing samples
    quick_measurement_s: float = 0.0  # in a racing run's quick pass: its shorter session tuning and sampling
    lambda_fit: LambdaFit | None = None  # Lambda's rules, as far as they are known before measuring

    def as_dict(self) -> dict:
        return {
            "combination_key": self.key,
            "label": self.combo.label,
            "combo": self.combo.model_dump(mode="json"),
            "state": self.state,
            "reason": self.reason,
            "estimated_conversion_s": round(self.conversion_s, 1),
            "estimated_measurement_s": round(self.measurement_s, 1),
            "lambda": self.lambda_fit.as_dict() if self.lambda_fit else None,
        }


@dataclass
class Plan:
    combos: list[PlannedCombo] = field(default_factory=list)
    checks_s: float = 0.0  # with `predict`: the predicted picks measured before the run closes
    costs: EngineCosts = field(default_factory=EngineCosts)  # what the estimates rest on
    precision: str = "exact"  # the request's: `quick` races (`core/racing.py`)
    benchmark_cost_usd: float = 0.0  # what measuring would cost as Lambda invocations
    # the run on the AWS deployment: the measuring functions (the above), the inference
    # functions waiting for them and the converter function (requests, S3, SQS: cents per thousand)
    aws_run_cost_usd: float = 0.0

    def count(self, state: str) -> int:
        return sum(c.state == state for c in self.combos)

    @property
    def wall_s(self) -> float:
        """The run's wall time as requested: racing (`quick`) or everything to full precision."""
        return self.racing_wall_s if self.precision == "quick" else self.exact_wall_s

    @property
    def exact_wall_s(self) -> float:
        return sum(c.conversion_s + c.measurement_s for c in self.combos) + self.checks_s

    @property
    def racing_wall_s(self) -> float:
        """The run's wall time if it races (`racing_s`)."""
        return racing_s(self.combos, self.costs, self.checks_s)

    def impossible(self) -> dict[str, PlannedCombo]:
        return {c.key: c for c in self.combos if c.state == "impossible"}

    def as_dict(self) -> dict:
        return {
            "combinations": [c.as_dict() for c in self.combos],
            "totals": {
                "to_measure": self.count("measure"),
                "reused": self.count("reused"),
                "impossible": self.count("impossible"),
                "predicted": self.count("predict"),
                "breaking_lambda_rules": sum(bool(c.lambda_fit and c.lambda_fit.broken) for c in self.combos),
                "estimated_wall_s": round(self.wall_s, 1),
                "estimated_wall_s_exact": round(self.exact_wall_s, 1),
                "estimated_wall_s_racing": round(self.racing_wall_s, 1),
                "estimated_racing_saves_s": round(self.exact_wall_s - self.racing_wall_s, 1),
                "estimated_benchmark_cost_usd": round(self.benchmark_cost_usd, 6),
            },
            # what the time estimates rest on, and whether `estimated_wall_s` races (`quick`)
            "estimates": {
                "from": self.costs.source(),
                "precision": self.precision,
                # what the racing estimate assumes the race will do (`racing_s`)
                "racing": {
                    "refined_share": round(self.costs.refined_share, 3),
                    "tvm_tuned_share": round(self.costs.tvm_tuned_share, 3),
                    "tvm_skipped": self.costs.tvm_skipped,
                    "from": self.costs.racing_source(),
                },
            },
        }


def plan_run(
    request: RequestSubmitted,
    signature: ModelSignature | None,
    store: ObjectStore | None,
    shapes: Callable[[int], Shapes] | None = None,
) -> Plan:
    """The plan of `request`: reused where a result is stored (unless `force`), impossible where
    the model cannot run the combination, predicted from measured sizes (`predict`), else to
    measure with estimates."""
    shapes = shapes or request_shapes(store, request)
    prices = load_prices().region(request.price_region)
    kept = stored_results(store) if store is not None else []
    workload = request.model.workload.value
    plan = Plan(
        costs=stored_costs(store, request.model.sha256, workload, kept, request.tuning_trials),
        precision=request.precision,
    )
    costs = plan.costs
    converted: set[tuple] = set()  # artifacts (hardware, optimizer, batch) this plan converts
    measured, predicted = measured_and_predicted(request)
    for combo in [*measured, *predicted]:
        key = combo_key(request.model, combo, request.tuning)
        reason = impossible_reason(signature, request, combo, shapes)
        if reason is not None:
            plan.combos.append(PlannedCombo(key, combo, "impossible", reason))
            continue
        fit = planned_fit(signature, request, combo, shapes)
        if combo in predicted:
            plan.combos.append(
                PlannedCombo(
                    key,
                    combo,
                    "predict",
                    "predicted from the measured sizes of its hardware, optimizer and batch",
                    lambda_fit=fit,
                )
            )
            continue
        if store is not None and not request.force and reused_result(store, key) is not None:
            plan.combos.append(PlannedCombo(key, combo, "reused", lambda_fit=fit))
            continue
        artifact = (combo.hardware, combo.optimizer, None if combo.optimizer == Optimizer.base else combo.batch_size)
        conversion = 0.0
        if artifact not in converted:
            converted.add(artifact)
            stored = costs.stored_artifact(request.model.sha256, combo, request.tuning_trials)
            if stored is None or store is None or not store.exists(keys.manifest(stored)):  # else reused
                # a next batch size of an engine starts from what its first made (the ONNX export, the int8 recipe)
                after_first = any(a[:2] == artifact[:2] for a in converted - {artifact})
                conversion = conversion_s(costs, combo.optimizer, request.tuning_trials, after_first)
        measurement = costs.combination_s(request.model.sha256, combo)
        plan.combos.append(
            PlannedCombo(
                key,
                combo,
                "measure",
                conversion_s=conversion,
                measurement_s=measurement,
                sampling_s=sampling_s(costs.expected_p50_ms(request.model.sha256, combo)),
                quick_measurement_s=costs.combination_s(request.model.sha256, combo, quick=True),
                lambda_fit=fit,
            )
        )
        measuring = measurement * combo.memory_mb / 1024 * prices.per_gb_second(combo.hardware)
        plan.benchmark_cost_usd += measuring
        plan.aws_run_cost_usd += (
            measuring
            + measurement * AWS_INFERENCE_MB / 1024 * prices.per_gb_second(combo.hardware)
            + conversion * AWS_CONVERTER_MB / 1024 * prices.per_gb_second(Hardware.intel)
        )
    if skipped := tvm_skipped(plan.combos, kept, workload, request.tuning_trials):
        costs.tvm_skipped, costs.tvm_tuned_share = skipped, 0.0
    checked = [c for c in plan.combos if c.state == "predict"][:MAX_CHECKS]
    plan.checks_s = sum(costs.combination_s(request.model.sha256, c.combo) for c in checked)
    return plan


def tvm_skipped(combos: list[PlannedCombo], stored: list[dict], workload: str, tuning_trials: int) -> str | None:
    """Why a race will tune TVM at none of its batch sizes (`core.tuning_stakes.never_tuned`: ONNX
    Runtime measured, reused or predicted at each size TVM is to be measured at, and a budget at which
    TVM has never been seen ahead of it). None where the race decides from the figures it gets
    (`Plan.costs.tvm_tuned_share` then expects what stored races did)."""
    return never_tuned(
        [c.combo for c in combos if c.state == "measure" and c.combo.optimizer == Optimizer.tvm],
        [
            c.combo
            for c in combos
            if c.combo.optimizer == Optimizer.onnx and c.state in ("measure", "reused", "predict")
        ],
        stored,
        workload,
        tuning_trials,
    )


def conversion_s(costs: EngineCosts, optimizer: Optimizer, tuning_trials: int, after_first: bool = False) -> float:
    """One artifact's conversion as stored results tell (`after_first`: a next batch size of the
    model's engine on that hardware); TVM's with its tuning (ended by its time limit)."""
    tuning = min(tuning_trials * costs.trial_s, TUNING_TIME_LIMIT_S) if optimizer == Optimizer.tvm else 0.0
    return (costs.next_conversion_s if after_first else costs.conversion_s)[optimizer] + tuning


def racing_s(combos: list[PlannedCombo], costs: EngineCosts, checks_s: float = 0.0) -> float:
    """A racing run's wall time: every artifact converted, every combination timed in a quick
    pass (its quick overhead and its samples within QUICK_TIME_CAP_SHARE of the cap), and
    `costs.refined_share` of them timed to full precision after it (a measurement of its own:
    overhead and sampling again). TVM's artifacts, their quick pass and refinements count at
    `costs.tvm_tuned_share`: the rest of its batch sizes are expected skipped, their tuning unable
    to change the answer (`core/tuning_stakes.py`). Both shares are what the stored racing runs
    did, else priors (`core.plan_costs`)."""

    def expected(c: PlannedCombo) -> float:  # the share of runs in which this combination is measured at all
        return costs.tvm_tuned_share if c.combo.optimizer == Optimizer.tvm else 1.0

    measured = [c for c in combos if c.state == "measure"]
    quick = sum(expected(c) * (c.conversion_s + c.quick_measurement_s) for c in measured)
    refined = costs.refined_share * sum(expected(c) * c.measurement_s for c in measured)
    return quick + refined + checks_s
