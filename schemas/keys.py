"""The whole object-store layout: every key and prefix AYCI reads or writes, in one place.

The same keys on the local folder (`.ayci/data`) and on S3. Content keys (combination,
artifact, reference) are hashes computed in `schemas/combos.py`; this module only places them.

```
models/{sha256}                              the user's model (.pt2 or ONNX), stored once
models/{sha256}.json                         what intake learned about it (format, size)
models/{sha256}.owners/{owner}               empty: this owner uploaded these bytes (only they see the model)
inputs/{sha256}.npz                          a user's own example inputs (one array per model input)
inputs/{sha256}.owners/{owner}               empty: this owner uploaded these inputs (only they may name them)
artifacts/{artifact key}/{file}              a converted artifact
artifacts/{artifact key}/manifest.json       written last, once: the artifact is complete
references/{reference key}.npz               the base model's outputs on the example inputs
exports/{sha256}-torch{version}.onnx        a .pt2 model exported to ONNX once (dynamic axes), where its `onnx`
                                             and `onnx_int8` conversions start
artifacts/{artifact key}/lease.json          who converts it now, until when (one conversion per artifact: a lease,
                                             `core/lease.py`)
tuning/{target cpu}/{sha256}-b{batch}-{HxW}.tar.gz  TVM MetaSchedule records (one archive), reused by later conversions
                                             (of this model; other models take the kernels they share)
results/{combination key}.json               the latest measurement of a combination (what later runs reuse)
results/{combination key}/{run id}.json      each measurement, written once: summaries name these
results/{combination key}/{run id}.quick.json    a racing run's quick measurement: never the latest, never reused
results/{combination key}/{run id}.profile.json  a profiled pass of the combination's result, for that run (the run
                                             that measured it, or one that reused it: each run its own, never
                                             another's): operator table, names the trace
results/{combination key}/{run id}.trace.json    that pass's Chrome trace (Perfetto opens it), bounded
results/{combination key}/{run id}.profile-requested  when that run asked for the pass (one pass at a time per run)
result-packs/{sha256}/{archived at}-{run id}.json  the results a run measured, in one object (a resubmission
                                             reads these)
runs/{run id}/run.json                       the run record: owner, request, time
runs/{run id}/events/{seq}-{type}-{id}.json  the run's event log (replay reads it)
runs/{run id}/plan.json                      the combinations the run waits for
runs/{run id}/outcomes/{combination key}.json  each combination's end: measured, reused or failed
runs/{run id}/outcomes/expected-{N}          empty; N = how many outcomes the plan waits for (the largest marker counts)
runs/{run id}/outcomes/reused-{N}-{event id}.json  the ends of N reused combinations at once (one `CombosReused`)
runs/{run id}/reused/{part}.json             the stored results dedup read for a run's reuse, one object per
                                             `CombosReused`
runs/{run id}/outcomes/{combination key}.exact.json  a quick-measured combination's refined (full precision) end
results/{combination key}.quick.json         the latest quick measurement (a later quick run's quick pass)
runs/{run id}/racing.json                    what a racing run's quick pass decided: refined, dominated (evidence)
runs/{run id}/answer.json                    a racing run's running answer with intervals and margins
runs/{run id}/checks.json                    predicted picks the archiver measures before it closes the run (--predict)
runs/{run id}/summary.json                   the archived run (written once, conditionally)
runs/{run id}/email.json                     the notifier's record of the email it sent
owners/{owner}/days/{YYYY-MM-DD}/{run id}    a run an owner submitted that day (its combinations)
owners/{owner}/limits.json                   the owner's reservations: runs in flight, combinations today (written
                                             with compare-and-put, `services/request/limits.py`)
processed/{service}/{event id}               idempotency markers (a handled event)
failures/{service}/{event id}.json           the last error of a failing event (for the DLQ report)
dead-letters/{queue}/{message id}.json       what reached a dead-letter queue, with its reason
lambda-sizes/{function}/lock.json            who reconfigures a measuring Lambda function now, until when (AWS only;
                                             the same lease)
lambda-sizes/{function}/aliases/{alias}.json when a memory-size alias of it was last used (idle ones are deleted)
```

Everything is found by key (GET/HEAD), except three listings: replay lists a run's event log,
the archiver lists a run's outcomes (one page per 1,000) to know whether the run is complete,
and dedup lists a model's result packs (a resubmitted matrix: a few reads, not one per combination).
"""

from __future__ import annotations

from datetime import UTC, datetime


def model(sha256: str) -> str:
    return f"models/{sha256}"


def model_info(sha256: str) -> str:
    return f"models/{sha256}.json"


def model_owner(sha256: str, owner: str) -> str:
    return f"models/{sha256}.owners/{owner}"


def inputs(sha256: str) -> str:
    return f"inputs/{sha256}.npz"


def inputs_owner(sha256: str, owner: str) -> str:
    return f"inputs/{sha256}.owners/{owner}"


def artifact_file(artifact_key: str, file_name: str) -> str:
    return f"artifacts/{artifact_key}/{file_name}"


def manifest(artifact_key: str) -> str:
    return artifact_file(artifact_key, "manifest.json")


def reference(reference_key: str) -> str:
    return f"references/{reference_key}.npz"


def onnx_export(sha256: str, exporter: str) -> str:
    """A `.pt2` model exported to ONNX once (dynamic axes: every batch size), by `exporter` (torch's version):
    the `onnx` and `onnx_int8` conversions start from it (`services/converter/handlers.py`)."""
    return f"exports/{sha256}-{exporter}.onnx"


def conversion_lease(artifact_key: str) -> str:
    return artifact_file(artifact_key, "lease.json")


def tuning_records(sha256: str, target_cpu: str, batch_size: int, input_size: list[int] | tuple[int, ...]) -> str:
    shape = "x".join(str(dim) for dim in input_size)
    return f"{tuning_records_for(target_cpu)}{sha256}-b{batch_size}-{shape}.tar.gz"


def tuning_records_for(target_cpu: str) -> str:
    """The prefix of every model's tuning records for one target CPU."""
    return f"tuning/{target_cpu}/"


def results_prefix() -> str:
    """Every combination's results: latest copies, versions, profiles, traces."""
    return "results/"


def result(combo_key: str) -> str:
    return f"results/{combo_key}.json"


def result_version(combo_key: str, run_id: str) -> str:
    return f"{result_versions_prefix(combo_key)}{run_id}.json"


def result_versions_prefix(combo_key: str) -> str:
    """Every measurement of a combination kept (with its profiles and traces)."""
    return f"results/{combo_key}/"


def profile(combo_key: str, run_id: str) -> str:
    return f"results/{combo_key}/{run_id}.profile.json"


def profile_trace(combo_key: str, run_id: str) -> str:
    return f"results/{combo_key}/{run_id}.trace.json"


def profile_requested(combo_key: str, run_id: str) -> str:
    return f"results/{combo_key}/{run_id}.profile-requested"


def result_pack(model_sha256: str, archived_at: datetime, run_id: str) -> str:
    """Named by when the run was archived (UTC, to the microsecond): a listing is oldest first."""
    return f"{result_packs_prefix(model_sha256)}{archived_at.astimezone(UTC):%Y%m%dT%H%M%S%fZ}-{run_id}.json"


def result_packs_prefix(model_sha256: str) -> str:
    return f"result-packs/{model_sha256}/"


def run_prefix(run_id: str) -> str:
    return f"runs/{run_id}/"


def run_record(run_id: str) -> str:
    return f"runs/{run_id}/run.json"


def event_log_prefix(run_id: str) -> str:
    return f"runs/{run_id}/events/"


def event_log_entry(run_id: str, seq: str, event_type: str, event_id: str) -> str:
    return f"{event_log_prefix(run_id)}{seq}-{event_type}-{event_id}.json"


def plan(run_id: str) -> str:
    return f"runs/{run_id}/plan.json"


def outcome(run_id: str, combo_key: str) -> str:
    return f"{outcomes_prefix(run_id)}{combo_key}.json"


def outcomes_prefix(run_id: str) -> str:
    return f"runs/{run_id}/outcomes/"


def expected_outcomes(run_id: str, count: int) -> str:
    return f"{outcomes_prefix(run_id)}expected-{count}"


def expected_outcomes_in(listed: list[str]) -> int | None:
    """The count named by the `expected-{N}` markers among listed outcome keys: the largest, as
    checks of predicted picks add one (None: no plan yet)."""
    counts = [
        int(name.removeprefix("expected-"))
        for name in (key.rsplit("/", 1)[-1] for key in listed)
        if name.startswith("expected-")
    ]
    return max(counts) if counts else None


def reused_outcomes(run_id: str, event_id: str, count: int) -> str:
    return f"{outcomes_prefix(run_id)}{REUSED_OUTCOMES}{count}-{event_id}.json"


def reused_bundle(run_id: str, part: int) -> str:
    return f"runs/{run_id}/reused/{part}.json"


REUSED_OUTCOMES = "reused-"


def outcomes_in(listed: list[str]) -> int:
    """How many outcomes the listed outcome keys hold: one each, N for `reused-{N}-...` (not
    the `expected-{N}` markers)."""
    names = [key.rsplit("/", 1)[-1] for key in listed]
    return sum(
        int(name.removeprefix(REUSED_OUTCOMES).split("-", 1)[0]) if name.startswith(REUSED_OUTCOMES) else 1
        for name in names
        if not name.startswith("expected-")
    )


def pick_checks(run_id: str) -> str:
    return f"runs/{run_id}/checks.json"


def racing(run_id: str) -> str:
    """What a racing run's quick pass decided (`core/racing.py`): the refined and the dominated."""
    return f"runs/{run_id}/racing.json"


def answer(run_id: str) -> str:
    """A racing run's running answer (`core/racing.answer`), rewritten as refined results arrive."""
    return f"runs/{run_id}/answer.json"


REFINED = ".exact"


def quick_result(combo_key: str) -> str:
    """The latest quick measurement of a combination (racing's first pass): what a later quick
    run may reuse as its own quick pass, never as a full measurement."""
    return f"results/{combo_key}.quick.json"


def refined_outcome(run_id: str, combo_key: str) -> str:
    """The outcome of a combination's refined (full-precision) measurement, beside its quick one."""
    return outcome(run_id, f"{combo_key}{REFINED}")


def summary(run_id: str) -> str:
    return f"runs/{run_id}/summary.json"


def email(run_id: str) -> str:
    return f"runs/{run_id}/email.json"


def owner_day_prefix(owner: str, day: str) -> str:
    return f"owners/{owner}/days/{day}/"


def owner_run(owner: str, day: str, run_id: str) -> str:
    return f"{owner_day_prefix(owner, day)}{run_id}"


def owner_limits(owner: str) -> str:
    return f"owners/{owner}/limits.json"


def processed_marker(service: str, event_id: str) -> str:
    return f"processed/{service}/{event_id}"


def failure(service: str, event_id: str) -> str:
    return f"failures/{service}/{event_id}.json"


def dead_letter(queue: str, message_id: str) -> str:
    return f"dead-letters/{queue}/{message_id}.json"


def lambda_sizes_lock(function: str) -> str:
    return f"lambda-sizes/{function}/lock.json"


def lambda_size_use(function: str, alias: str) -> str:
    return f"lambda-sizes/{function}/aliases/{alias}.json"
