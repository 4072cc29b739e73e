"""The archiver's handlers on an in-memory store: every run ends, the announcement is never
lost, one bad result fails only its combination, and an arrival costs a bounded number of
store calls whatever the run's size."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from adapters.memory_store import MemoryStore
from core.runtime import WithId, dead_letter_failure
from schemas import keys
from schemas.combos import Matrix, ModelRef, combo_key
from schemas.events import (
    ComboFailed,
    Envelope,
    FailureStage,
    InferenceDone,
    RequestSubmitted,
    RunArchived,
    RunDeadlineReached,
    RunPlanned,
)
from services.archiver.handlers import (
    ArchiverDeps,
    announcement_id,
    on_combo_failed,
    on_deadline_reached,
    on_inference_done,
    on_run_planned,
)
from tests.conftest import measured_result

MODEL = ModelRef(sha256="ab" * 32, size_bytes=1000, format="pt2", workload="image_classification", input_size=[32, 32])
RUN = "run-1"


def request(batches=(1, 2), email="user@example.com") -> RequestSubmitted:
    matrix = Matrix(optimizers={"intel": ["base", "onnx"]}, batch_sizes=list(batches), memory_sizes_mb=[1769])
    return RequestSubmitted(model=MODEL, matrix=matrix, email=email)


def planned(req: RequestSubmitted) -> Envelope:
    combos = {combo_key(MODEL, c, req.tuning): c for c in req.matrix.combos()}
    plan = RunPlanned(model=MODEL, combos=combos, deadline=datetime.now(UTC) + timedelta(hours=1), request=req)
    return Envelope.wrap(plan, run_id=RUN, producer="dedup")


def done(store: MemoryStore, key: str, combo) -> Envelope:
    result = measured_result(combo.label, p99=2.0, cost=0.1)
    store.objects[keys.result(key)] = json.dumps({**result, "combo_key": key, "cost": None}).encode()
    return Envelope.wrap(
        InferenceDone(combo=combo, combo_key=key, result_key=keys.result(key), p50_ms=1.0, p99_ms=2.0),
        run_id=RUN,
        producer="inference",
    )


def announcements(out) -> list[RunArchived]:
    """The announcements among a handler's outputs (each under the run's one id, `WithId`)."""
    assert not [p for p in out if isinstance(p, RunArchived)], "an announcement without the run's id"
    found = [p for p in out if isinstance(p, WithId) and isinstance(p.payload, RunArchived)]
    assert all(p.event_id == announcement_id(RUN) for p in found)
    return [p.payload for p in found]


def test_a_run_ends_when_its_last_combination_arrives_and_is_announced_once():
    store = MemoryStore()
    deps = ArchiverDeps(store)
    plan = planned(request())
    on_run_planned(plan, deps)
    arrivals = [done(store, k, c) for k, c in plan.payload.combos.items()]
    outs = [on_inference_done(e, deps) for e in arrivals]
    assert [len(announcements(o)) for o in outs] == [0, 0, 0, 1]
    assert json.loads(store.objects[keys.summary(RUN)])["status"] == "complete"
    # a late duplicate announces again under the same id until the notifier records the
    # announcement (consumers drop the duplicate), then nothing
    assert len(announcements(on_inference_done(arrivals[0], deps))) == 1
    store.objects[keys.email(RUN)] = json.dumps({"state": "sent"}).encode()
    assert announcements(on_inference_done(arrivals[0], deps)) == []


def test_the_archiving_event_redelivered_announces_again_so_the_email_is_not_lost():
    """The worker wrote the summary and died before publishing RunArchived: SQS delivers the
    same event again; it sees the summary it wrote and announces (the notifier sends once)."""
    store = MemoryStore()
    deps = ArchiverDeps(store)
    plan = planned(request(batches=(1,)))
    on_run_planned(plan, deps)
    first, last = [done(store, k, c) for k, c in plan.payload.combos.items()]
    on_inference_done(first, deps)
    (announced,) = announcements(on_inference_done(last, deps))
    (again,) = announcements(on_inference_done(last, deps))
    assert again == announced and again.email == "user@example.com"


def test_a_dead_lettered_request_ends_its_run_with_the_reason():
    store = MemoryStore()
    req = request(batches=(1,))
    submitted = Envelope.wrap(req, run_id=RUN, producer="request")
    closing = dead_letter_failure(submitted, "ValueError: dedup broke")
    assert isinstance(closing.payload, RunDeadlineReached)
    out = on_deadline_reached(Envelope.parse(closing.to_json()), ArchiverDeps(store))
    (announced,) = announcements(out)
    summary = json.loads(store.objects[keys.summary(RUN)])
    assert summary["status"] == "failed" and announced.status == "failed" and len(summary["failures"]) == 2
    assert all(f["stage"] == "dead_letter" and "dedup broke" in f["reason"] for f in summary["failures"])


def test_a_dead_lettered_plan_ends_its_run_keeping_what_arrived():
    store = MemoryStore()
    deps = ArchiverDeps(store)
    plan = planned(request(batches=(1,)))
    (key, combo), _ = plan.payload.combos.items()
    on_inference_done(done(store, key, combo), deps)  # arrived before the plan could be kept
    out = on_deadline_reached(dead_letter_failure(plan, "AccessDenied: sqs:GetQueueUrl"), deps)
    summary = json.loads(store.objects[keys.summary(RUN)])
    assert announcements(out) and summary["status"] == "partial" and len(summary["results"]) == 1
    assert "AccessDenied" in summary["failures"][0]["reason"]
    # a closing that itself dead-letters is not closed again (no loop)
    assert dead_letter_failure(dead_letter_failure(plan, "x"), "y") is None


def test_one_corrupt_result_fails_its_combination_not_the_run():
    store = MemoryStore()
    deps = ArchiverDeps(store)
    plan = planned(request(batches=(1,)))
    (k1, c1), (k2, c2) = plan.payload.combos.items()
    on_run_planned(plan, deps)
    on_inference_done(done(store, k1, c1), deps)
    broken = done(store, k2, c2)
    store.objects[keys.result(k2)] = b"{not json"
    assert announcements(on_inference_done(broken, deps))
    summary = json.loads(store.objects[keys.summary(RUN)])
    assert summary["status"] == "partial" and "cannot be read" in summary["failures"][0]["reason"]


@pytest.mark.parametrize("order", ["plan", "reverse"])
def test_an_arrival_costs_a_bounded_number_of_store_calls(order):
    store = MemoryStore()
    deps = ArchiverDeps(store)
    req = RequestSubmitted(
        model=MODEL,
        matrix=Matrix(
            optimizers={"intel": ["base", "onnx", "tvm"]},
            batch_sizes=list(range(1, 17)),
            memory_sizes_mb=[512, 1024, 1769, 3538],
        ),
    )
    plan = planned(req)
    on_run_planned(plan, deps)
    arrivals = [done(store, k, c) for k, c in plan.payload.combos.items()]
    per_arrival = []
    for event in arrivals if order == "plan" else arrivals[::-1]:
        before = store.call_count
        on_inference_done(event, deps)
        per_arrival.append(store.call_count - before)
    assert len(arrivals) == 192 and max(per_arrival[:-1]) <= 3
    assert sum(per_arrival) <= 5 * len(arrivals) + 10


def test_a_failure_arrival_counts_like_a_result():
    store = MemoryStore()
    deps = ArchiverDeps(store)
    plan = planned(request(batches=(1,)))
    on_run_planned(plan, deps)
    for key, combo in plan.payload.combos.items():
        out = on_combo_failed(
            Envelope.wrap(
                ComboFailed(combo=combo, combo_key=key, stage=FailureStage.converter, reason="no"),
                run_id=RUN,
                producer="converter",
            ),
            deps,
        )
    assert announcements(out)[0].status == "failed"


def test_a_combination_skipped_because_it_cannot_change_the_answer_leaves_the_run_complete():
    """TVM's tuning skipped with the evidence (stage `skipped`) is not a failure: the run is complete,
    the email's headline and the table say skipped, and a real failure beside it still makes it partial."""
    from report.render import email_message
    from report.table import summary_rows
    from schemas.documents import RunSummary

    for failing, status in ((False, "complete"), (True, "partial")):
        store = MemoryStore()
        deps = ArchiverDeps(store)
        plan = planned(request(batches=(1, 2)))
        on_run_planned(plan, deps)
        (first, combo1), (second, combo2) = sorted(plan.payload.combos.items(), key=lambda kv: kv[1].label)[:2]
        others = [(k, c) for k, c in plan.payload.combos.items() if k not in (first, second)]
        on_combo_failed(
            Envelope.wrap(
                ComboFailed(combo=combo1, combo_key=first, stage=FailureStage.skipped, reason="tuning skipped: why"),
                run_id=RUN,
                producer="converter",
            ),
            deps,
        )
        stage = FailureStage.inference if failing else FailureStage.skipped
        out = on_combo_failed(
            Envelope.wrap(
                ComboFailed(combo=combo2, combo_key=second, stage=stage, reason="out of memory"),
                run_id=RUN,
                producer="inference",
            ),
            deps,
        )
        for key, combo in others:
            out = on_inference_done(done(store, key, combo), deps)
        assert announcements(out)[0].status == status
        summary = RunSummary.read(store.objects[keys.summary(RUN)])
        statuses = {row.combination: row.status for row in summary_rows(summary)}
        assert statuses[combo1.label] == "skipped"
        assert statuses[combo2.label] == ("failed" if failing else "skipped")
        email = email_message(summary, "http://x")["text"]
        skipped_count = 1 if failing else 2
        assert f"{1 if failing else 0} failed, {skipped_count} skipped (they cannot change the answer)." in email
        assert "Skipped combinations (they cannot change the answer):" in email


def test_the_deadline_follows_the_run_s_size():
    from core.deadlines import DEFAULT_DEADLINE_S, run_deadline_s

    small = request(batches=(1,))
    assert run_deadline_s(small) == DEFAULT_DEADLINE_S  # a small run keeps the hour
    large = RequestSubmitted(
        model=MODEL,
        tuning_trials=500,
        matrix=Matrix(
            optimizers={"intel": ["base", "onnx", "tvm"]},
            batch_sizes=list(range(1, 17)),
            memory_sizes_mb=[512, 1024, 1769, 3538],
        ),
    )
    assert run_deadline_s(large) > 2 * 192 * 60  # 192 measurements and 32 tuned TVM artifacts take hours
    assert run_deadline_s(large.model_copy(update={"deadline_s": 60})) == 60  # a deadline the user named is kept


def test_a_tvm_conversion_is_estimated_at_its_trials_never_past_the_tuning_time_limit():
    from core.deadlines import CONVERSION_ESTIMATE_S, TUNING_TRIAL_ESTIMATE_S, conversion_estimate_s
    from schemas.combos import Optimizer
    from schemas.events import TUNING_TIME_LIMIT_S

    tvm = CONVERSION_ESTIMATE_S[Optimizer.tvm]
    assert conversion_estimate_s(Optimizer.tvm, 100) == tvm + 100 * TUNING_TRIAL_ESTIMATE_S
    assert conversion_estimate_s(Optimizer.tvm, 20000) == tvm + TUNING_TIME_LIMIT_S
    assert conversion_estimate_s(Optimizer.onnx, 20000) == CONVERSION_ESTIMATE_S[Optimizer.onnx]


class FlakyBus:
    """The transport in front of an in-process bus whose `PutEvents` fails for `RunArchived`
    the first `fails` times (then works)."""

    def __init__(self, bus, fails: int) -> None:
        self.bus, self.fails, self.announced = bus, fails, []

    def publish(self, envelopes) -> None:
        if any(e.type == "RunArchived" for e in envelopes) and self.fails:
            self.fails -= 1
            raise ConnectionError("PutEvents failed")
        self.announced += [e for e in envelopes if e.type == "RunArchived"]
        self.bus.publish(envelopes)

    def publish_at(self, envelope, when) -> None:
        self.bus.publish_at(envelope, when)


class Mailer:
    def __init__(self) -> None:
        self.sent = []

    def send(self, *, to, subject, text, html) -> str:
        self.sent.append(to)
        return f"msg-{len(self.sent)}"


def test_a_dead_lettered_archiving_event_is_announced_by_the_next_arrival_with_the_same_id():
    """The event that archives the run cannot publish `RunArchived` (three failed PutEvents):
    it is dead-lettered. The next arrival (here the dead letter's own `ComboFailed`) finds a
    summary without an announcement record and announces, under the run's one id; later
    arrivals (a duplicate, the deadline) announce nothing more: one email."""
    from adapters.inprocess_bus import InProcessBus
    from core.runtime import LoggedPublisher, Service, ServiceRunner
    from services.archiver import handlers as archiver
    from services.notifier import handlers as notifier

    store = MemoryStore()
    bus = InProcessBus(max_receives=3)
    flaky = FlakyBus(bus, fails=3)
    publisher = LoggedPublisher(store, flaky)
    bus.on_dead_letter = publisher.publish
    mailer = Mailer()
    bus.subscribe(
        "archiver", ServiceRunner(Service("archiver", archiver.HANDLERS, ArchiverDeps(store)), store, publisher)
    )
    bus.subscribe(
        "notifier",
        ServiceRunner(Service("notifier", notifier.HANDLERS, notifier.NotifierDeps(store, mailer)), store, publisher),
    )
    plan = planned(request(batches=(1,)))
    arrivals = [done(store, k, c) for k, c in plan.payload.combos.items()]
    publisher.publish([plan, *arrivals])
    bus.run_until_idle()
    assert [e.type for _, e, _ in bus.dead_letters] == ["InferenceDone"]  # the archiving event
    assert store.exists(keys.summary(RUN))
    assert [e.event_id for e in flaky.announced] == [announcement_id(RUN)]
    assert mailer.sent == ["user@example.com"]
    # a late duplicate (another event id) and the deadline arrive: nothing more is announced
    publisher.publish([Envelope.wrap(arrivals[0].payload, run_id=RUN, producer="inference")])
    bus.run_until_idle()
    assert len(flaky.announced) == 1 and mailer.sent == ["user@example.com"]


def test_duplicate_announcements_before_the_notifier_records_send_one_email():
    """Two arrivals announce before the notifier has handled either: the same event id twice,
    which the notifier's runner drops the second time."""
    from core.runtime import LoggedPublisher, Service, ServiceRunner
    from services.notifier import handlers as notifier

    store = MemoryStore()
    deps = ArchiverDeps(store)
    plan = planned(request(batches=(1,)))
    on_run_planned(plan, deps)
    arrivals = [done(store, k, c) for k, c in plan.payload.combos.items()]
    outs = [on_inference_done(e, deps) for e in arrivals] + [on_inference_done(arrivals[0], deps)]
    ids = [p.event_id for out in outs for p in out if isinstance(p, WithId)]
    assert ids == [announcement_id(RUN)] * 2
    mailer = Mailer()
    runner = ServiceRunner(
        Service("notifier", notifier.HANDLERS, notifier.NotifierDeps(store, mailer)),
        store,
        LoggedPublisher(store, FlakyBus(None, 0)),
    )
    for out in outs:
        for p in out:
            if isinstance(p, WithId):
                runner.handle(Envelope.wrap(p.payload, run_id=RUN, producer="archiver", event_id=p.event_id))
    assert mailer.sent == ["user@example.com"]


class RacingStore(MemoryStore):
    """Both archivers checked for the summary before either wrote it (the race's window)."""

    def exists(self, key: str) -> bool:
        return False if key.endswith("/summary.json") else super().exists(key)


def test_racing_archivers_write_one_result_pack():
    store = RacingStore()
    clock = iter(datetime(2030, 1, 1, tzinfo=UTC) + timedelta(seconds=s) for s in range(100))
    deps = ArchiverDeps(store, now=lambda: next(clock))
    plan = planned(request(batches=(1,)))
    on_run_planned(plan, deps)
    arrivals = [done(store, k, c) for k, c in plan.payload.combos.items()]
    for e in arrivals:
        on_inference_done(e, deps)
    # the last arrival and a duplicate of it (another event id) both archive
    on_inference_done(Envelope.wrap(arrivals[-1].payload, run_id=RUN, producer="inference"), deps)
    packs = store.list_keys(keys.result_packs_prefix(MODEL.sha256))
    summary = json.loads(store.objects[keys.summary(RUN)])
    assert packs == [keys.result_pack(MODEL.sha256, datetime.fromisoformat(summary["archived_at"]), RUN)]


def test_a_run_archives_after_its_price_region_left_the_price_table(tmp_path, monkeypatch):
    """The request was accepted in us-east-1; the price table no longer has it when the run
    closes: the stored plan and events still read, the run is archived, each cost says why it
    is unavailable. Only a new request is refused."""
    from pydantic import ValidationError

    from schemas.cost import cost_block

    req = request(batches=(1,))  # us-east-1, accepted
    store = MemoryStore()
    deps = ArchiverDeps(store)
    plan = Envelope.parse(planned(req).to_json())
    on_run_planned(plan, deps)
    table = tmp_path / "prices.json"
    table.write_text(
        json.dumps(
            {
                "date": "2030-01-01",
                "default_region": "eu-test-1",
                "regions": {
                    "eu-test-1": {
                        "x86_64_per_gb_second_usd": 1e-5,
                        "arm64_per_gb_second_usd": 8e-6,
                        "per_million_requests_usd": 0.1,
                    }
                },
            }
        )
    )
    monkeypatch.setenv("AYCI_LAMBDA_PRICES", str(table))
    with pytest.raises(ValidationError, match="price_region"):
        RequestSubmitted(model=MODEL, matrix=req.matrix, price_region="us-east-1")
    outs = []
    for key, combo in plan.payload.combos.items():
        arrival = done(store, key, combo)
        result = json.loads(store.objects[keys.result(key)])
        result["cost"] = cost_block(
            billed_ms_per_request=2,
            cold_start_ms=900,
            memory_mb=1769,
            batch_size=1,
            hardware="intel",
            region="eu-test-1",
        ).model_dump(mode="json")  # measured under the new table's default region
        store.objects[keys.result(key)] = json.dumps(result).encode()
        outs += on_inference_done(Envelope.parse(arrival.to_json()), deps)
    assert announcements(outs)
    summary = json.loads(store.objects[keys.summary(RUN)])
    assert summary["status"] == "complete" and len(summary["results"]) == 2
    for row in summary["results"]:
        assert row["cost"] is None and "us-east-1" in row["cost_unavailable"]


def test_the_archiving_event_again_writes_a_missing_pack_with_the_kept_quick_measurements():
    """The archiver died between the summary and the pack; the archiving event, delivered again,
    writes the pack from the stored versions: a row a race kept at its quick figures is read
    from its quick version (`results/{key}/{run}.quick.json`), the only one it has."""
    store = MemoryStore()
    deps = ArchiverDeps(store)
    plan = planned(request(batches=(1,)))
    on_run_planned(plan, deps)
    arrivals = [done(store, k, c) for k, c in plan.payload.combos.items()]
    for e in arrivals:
        on_inference_done(e, deps)
    summary = json.loads(store.objects[keys.summary(RUN)])
    for row in summary["results"]:
        row["precision"] = "quick"
        stored = {**json.loads(store.objects[keys.result(row["combo_key"])]), "precision": "quick"}
        store.objects[keys.result_version(row["combo_key"], f"{row['run_id']}.quick")] = json.dumps(stored).encode()
    store.objects[keys.summary(RUN)] = json.dumps(summary).encode()
    (pack,) = store.list_keys(keys.result_packs_prefix(MODEL.sha256))
    del store.objects[pack]

    on_inference_done(arrivals[-1], deps)  # the archiving event again (its own event id)
    packed = json.loads(store.objects[pack])["results"]
    quick = sorted(keys.result_version(r["combo_key"], f"{r['run_id']}.quick") for r in summary["results"])
    assert len(quick) == 2 and sorted(packed) == quick
