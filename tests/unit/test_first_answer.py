"""A racing run's first answer (issue 38, "a first answer early"): the order the work is done in
(dedup's telling order, the embedded bus's stages), the provisional answer's content, and a run
through every service (fakes for the engines) whose running answer is shown before the run ends."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from adapters.inprocess_bus import InProcessBus
from adapters.memory_store import MemoryStore
from core.racing import Figures, answer_lines, first_pass, is_shown, leads, telling_order, with_outcome
from core.run_plan import measured_combos
from core.runtime import Delayed
from schemas import keys
from schemas.combos import Matrix, ModelRef, combo_key
from schemas.events import ComboPending, Envelope, RequestSubmitted, RunPlanned
from services.request.submission import new_run
from tests.fakes import embedded_with_fakes
from tests.unit.test_pipeline import stored_model
from tests.unit.test_racing import fig as racing_fig
from tests.unit.test_racing_runs import FULL_CAP_S, RacingFakes

MODEL = ModelRef(sha256="ab" * 32, size_bytes=1000, format="pt2", workload="image_classification", input_size=[32, 32])
ISSUE_MATRIX = Matrix(
    optimizers={"intel": ["base", "onnx", "tvm", "onnx_int8"]},
    batch_sizes=[1, 2, 4, 8],
    memory_sizes_mb=[512, 1024, 1769, 2048, 3008, 3538],
)


def issue_combos() -> dict:
    request = RequestSubmitted(model=MODEL, matrix=ISSUE_MATRIX, predict=True)
    return {combo_key(MODEL, c, request.tuning): c for c in measured_combos(request)}


def test_every_engine_s_lead_goes_first_then_by_batch():
    combos = issue_combos()
    assert len(combos) == 48  # the issue's 96 with predict: three anchors per family
    order = [combos[k].label for k in telling_order(combos)]
    assert order[:4] == [f"intel/{o}/b1/1769MB" for o in ("base", "onnx", "onnx_int8", "tvm")]
    assert {combos[k].label for k in leads(combos).values()} == set(order[:4])
    batches = [int(label.split("/")[2][1:]) for label in order[4:]]
    assert batches == sorted(batches)  # then batch 1's other sizes, then batch 2...
    assert sorted(order) == sorted(c.label for c in combos.values())  # every combination, once


def fig(label: str, p99: float, cost: float, spread: float = 0.1) -> Figures:
    """A quick-pass figure (`tests/unit/test_racing.fig`'s, of precision quick)."""
    return racing_fig(label, p99, cost, spread, precision="quick")


def gathering(tuned: set[str] | None = None) -> tuple[dict, dict]:
    combos = issue_combos()
    criteria = {"balance_weight": 0.5, "slo_p99_ms": None, "min_agreement": 0.99, "price_region": "us-east-1"}
    doc = first_pass(combos, tuned=tuned if tuned is not None else {"intel/tvm"}, criteria=criteria)
    by_label = {c.label: k for k, c in combos.items()}
    return doc, by_label


def add(doc: dict, by_label: dict, label: str, ended: int, **entry) -> dict:
    return with_outcome(doc, combo_key=by_label[label], label=label, ended=ended, **entry)


def test_the_first_answer_waits_for_every_engine_s_lead_and_shows_intervals_and_what_is_pending():
    doc, by_label = gathering()
    assert doc["stage"] == "gathering" and not is_shown(doc) and answer_lines(doc) == []
    doc = add(doc, by_label, "intel/base/b1/1769MB", 1, figures=fig("intel/base/b1/1769MB", 40, 6.0))
    # another size of an engine already measured does not make the answer: its other engines are missing
    doc = add(doc, by_label, "intel/base/b1/512MB", 2, figures=fig("intel/base/b1/512MB", 120, 5.0))
    doc = add(doc, by_label, "intel/onnx/b1/1769MB", 3, figures=fig("intel/onnx/b1/1769MB", 12, 2.0))
    assert doc["stage"] == "gathering"
    doc = add(doc, by_label, "intel/onnx_int8/b1/1769MB", 4, figures=fig("intel/onnx_int8/b1/1769MB", 8, 2.4))
    assert doc["stage"] == "provisional" and is_shown(doc)  # tuned TVM is not waited for
    assert doc["picks"]["cheapest"] == "intel/onnx/b1/1769MB"
    assert doc["picks"]["fastest"] == "intel/onnx_int8/b1/1769MB"
    # base at 1769 MB is beaten on both p99 and cost with 95 % confidence: it leaves the rows, named
    assert doc["dominated"]["intel/base/b1/1769MB"]["by"] in ("intel/onnx/b1/1769MB", "intel/onnx_int8/b1/1769MB")
    assert "intel/base/b1/1769MB" not in doc["rows"]
    lines = answer_lines(doc)
    assert lines[0] == ("first answer, provisional: 4 of 48 combinations measured (quick pass); picks may change:")
    fastest = next(line for line in lines if line.strip().startswith("fastest:"))
    assert "[7.2-8.8]" in fastest and "[2.16-2.64]" in fastest  # its intervals
    assert "the next, intel/onnx/b1/1769MB, has a p99 50 % ± " in fastest  # its margin
    assert "  intel/tvm: not measured yet (its tuning waits for the other engines' figures)" in lines


def test_a_tvm_the_run_will_skip_is_not_waited_for_and_the_answer_says_why():
    """At 64 trials (or untuned) TVM has never been seen ahead of ONNX Runtime, which the run measures
    at each of TVM's sizes: its tuning will be skipped (`core.tuning_stakes.never_tuned`), so the first
    answer neither waits for it nor says it waits for the other engines' figures. At 600 trials the
    figures decide: it says it waits."""
    from services.archiver.racing import start_first_pass

    def started(trials: int) -> dict:
        store = MemoryStore()
        request = RequestSubmitted(model=MODEL, matrix=ISSUE_MATRIX, predict=True, tuning_trials=trials)
        plan = RunPlanned(
            model=MODEL,
            combos={combo_key(MODEL, c, request.tuning): c for c in measured_combos(request)},
            deadline=datetime.now(UTC) + timedelta(hours=1),
            request=request,
        )
        start_first_pass("run-1", plan, type("Deps", (), {"store": store})())
        return json.loads(store.get_bytes(keys.answer("run-1")))

    for trials in (64, 0):
        tvm = started(trials)["leads"]["intel/tvm"]
        assert not tvm["required"]
        assert tvm["why"].startswith(f"its tuning will be skipped: TVM tuned with {trials} trials has never been seen")
        assert tvm["why"].endswith("and ONNX Runtime has a figure at each of TVM's sizes")
    tuned = started(600)["leads"]["intel/tvm"]
    assert not tuned["required"] and "why" not in tuned
    doc, by_label = gathering()
    doc = {
        **doc,
        "leads": {**doc["leads"], "intel/tvm": {**doc["leads"]["intel/tvm"], "why": "its tuning will be skipped: x"}},
    }
    for i, engine in enumerate(("base", "onnx", "onnx_int8")):
        label = f"intel/{engine}/b1/1769MB"
        doc = add(doc, by_label, label, i + 1, figures=fig(label, 10 + i, 2.0 + i))
    assert "  intel/tvm: not measured yet (its tuning will be skipped: x)" in answer_lines(doc)


def test_an_untuned_tvm_is_waited_for_and_a_failed_lead_counts_with_its_reason():
    doc, by_label = gathering(tuned=set())
    for i, engine in enumerate(("base", "onnx", "onnx_int8")):
        label = f"intel/{engine}/b1/1769MB"
        doc = add(doc, by_label, label, i + 1, figures=fig(label, 10 + i, 2.0 + i))
    assert doc["stage"] == "gathering"
    doc = add(doc, by_label, "intel/tvm/b1/1769MB", 4, failed="converter: the build failed")
    assert doc["stage"] == "provisional"
    assert "  intel/tvm/b1/1769MB: failed: converter: the build failed" in answer_lines(doc)


def test_the_same_outcome_twice_gives_the_same_answer_and_a_dominated_row_stays_out():
    doc, by_label = gathering()
    rows = [
        ("intel/onnx_int8/b1/1769MB", 8, 1.5),
        ("intel/base/b1/1769MB", 40, 6.0),
        ("intel/onnx/b1/1769MB", 12, 2.0),
    ]
    for i, (label, p99, cost) in enumerate(rows):
        doc = add(doc, by_label, label, i + 1, figures=fig(label, p99, cost))
    again = add(doc, by_label, "intel/base/b1/1769MB", 3, figures=fig("intel/base/b1/1769MB", 40, 6.0))
    assert again == doc
    assert "intel/base/b1/1769MB" in doc["dominated"] and "intel/base/b1/1769MB" not in doc["rows"]
    # int8 dominates both others: its margins are held against the best of what it dominates, named so
    assert list(doc["rows"]) == ["intel/onnx_int8/b1/1769MB"]
    assert doc["margins"]["fastest"].startswith(
        "fastest: intel/onnx_int8/b1/1769MB; the next, intel/onnx/b1/1769MB (dominated), has a p99 50 % ± "
    )
    assert "the next, intel/onnx/b1/1769MB (dominated), costs 33 % ± " in doc["margins"]["cheapest"]


def test_above_the_slo_or_disagreeing_a_lead_is_out_and_not_a_pick():
    doc, by_label = gathering()
    doc["slo_p99_ms"] = 20.0
    doc = add(doc, by_label, "intel/base/b1/1769MB", 1, figures=fig("intel/base/b1/1769MB", 40, 6.0))
    doc = add(doc, by_label, "intel/onnx/b1/1769MB", 2, figures=fig("intel/onnx/b1/1769MB", 12, 2.0))
    doc = add(doc, by_label, "intel/onnx_int8/b1/1769MB", 3, out="agreement 0.95 with base (below 0.99)")
    assert doc["stage"] == "provisional"
    assert "above the SLO" in doc["out"]["intel/base/b1/1769MB"]
    assert doc["leads"]["intel/base"]["state"] == "out"
    assert set(doc["picks"].values()) == {"intel/onnx/b1/1769MB"}


# The embedded bus's order ------------------------------------------------------------------------


class Recorder:
    def __init__(self, name: str, log: list, fail_first: int = 0) -> None:
        self.name, self.log, self.fail_first = name, log, fail_first

    def handle(self, envelope: Envelope) -> None:
        self.log.append((self.name, envelope.run_id, envelope.payload.combo.label))
        if self.fail_first:
            self.fail_first -= 1
            raise RuntimeError("once")


def pending(run_id: str, label: str) -> Envelope:
    hardware, optimizer, batch, memory = label.split("/")
    from schemas.combos import Combo

    combo = Combo(hardware=hardware, optimizer=optimizer, batch_size=int(batch[1:]), memory_mb=int(memory[:-2]))
    payload = ComboPending(model=MODEL, combo=combo, combo_key=label, artifact_key=label, target_cpu="x")
    return Envelope.wrap(payload, run_id=run_id, producer="dedup")


def converted(run_id: str, label: str) -> Envelope:
    from schemas.events import ModelConverted

    p = pending(run_id, label).payload
    payload = ModelConverted(
        model=MODEL, combo=p.combo, combo_key=label, artifact_key=label, artifact_file="a", conversion_s=0.0
    )
    return Envelope.wrap(payload, run_id=run_id, producer="converter")


class Converter(Recorder):
    """Converts: its output (a measurement) is published on the bus."""

    def __init__(self, log: list, bus: InProcessBus) -> None:
        super().__init__("converter", log)
        self.bus = bus

    def handle(self, envelope: Envelope) -> None:
        super().handle(envelope)
        self.bus.publish([converted(envelope.run_id, envelope.payload.combo.label)])


def test_the_bus_measures_a_combination_before_the_next_conversion_and_runs_take_turns():
    bus, log = InProcessBus(), []
    bus.subscribe("converter", Converter(log, bus))
    bus.subscribe("inference-intel", Recorder("inference", log))
    labels = ["intel/base/b1/1769MB", "intel/onnx/b1/1769MB"]
    bus.publish([pending("a", label) for label in labels])
    bus.publish([pending("b", label) for label in labels])
    bus.run_until_idle()
    assert log == [
        ("converter", "a", labels[0]),
        ("inference", "a", labels[0]),
        ("converter", "b", labels[0]),
        ("inference", "b", labels[0]),
        ("converter", "a", labels[1]),
        ("inference", "a", labels[1]),
        ("converter", "b", labels[1]),
        ("inference", "b", labels[1]),
    ]


def test_a_retried_event_goes_to_the_back_of_its_line_and_is_dead_lettered_after_its_receives():
    bus, log = InProcessBus(max_receives=2), []
    bus.subscribe("inference-intel", Recorder("inference", log, fail_first=3))
    bus.publish([converted("a", "intel/base/b1/1769MB"), converted("a", "intel/onnx/b1/1769MB")])
    bus.run_until_idle()
    assert [label for _, _, label in log] == [
        "intel/base/b1/1769MB",  # fails
        "intel/onnx/b1/1769MB",  # fails
        "intel/base/b1/1769MB",  # fails again: dead-lettered
        "intel/onnx/b1/1769MB",  # succeeds
    ]
    assert [e.payload.combo.label for _, e, _ in bus.dead_letters] == ["intel/base/b1/1769MB"]


class Waiting(Recorder):
    """A converter that delays its first combination once (as TVM's tuning waits for the others)."""

    def __init__(self, log: list, bus: InProcessBus) -> None:
        super().__init__("converter", log)
        self.bus, self.waited = bus, False

    def handle(self, envelope: Envelope) -> None:
        super().handle(envelope)
        if not self.waited:
            self.waited = True
            self.bus.publish_at(envelope, datetime.now(UTC) - timedelta(seconds=1))  # due at once
        elif envelope.payload.combo.memory_mb == 1024:  # new work, queued after the delayed one came back
            self.bus.publish([pending(envelope.run_id, "intel/base/b1/2048MB")])


def test_delayed_work_comes_back_when_due_and_a_deadline_waits_for_idleness():
    bus, log = InProcessBus(), []
    bus.subscribe("converter", Waiting(log, bus))
    deadlines = []

    class Archiver:
        def handle(self, envelope: Envelope) -> None:
            deadlines.append(len(log))

    bus.subscribe("archiver", Archiver())
    from schemas.events import RunDeadlineReached

    deadline = Envelope.wrap(RunDeadlineReached(deadline=datetime.now(UTC)), run_id="a", producer="archiver")
    bus.publish_at(deadline, datetime.now(UTC) - timedelta(seconds=1))  # due, but the run is being worked on
    labels = [f"intel/base/b1/{m}MB" for m in (512, 1024, 1769)]
    bus.publish([pending("a", label) for label in labels])
    bus.run_until_idle()
    # the delayed conversion came back as soon as it was due (at the back of its line), not once the queue emptied
    assert [label for *_, label in log] == [labels[0], labels[1], labels[2], labels[0], "intel/base/b1/2048MB"]
    assert deadlines == [5]  # delivered once nothing else was queued
    assert Delayed  # (the handlers' way to ask for it, core/runtime)


# A run through every service ---------------------------------------------------------------------


@pytest.fixture(autouse=True)
def own_lock(tmp_path, monkeypatch):
    """The fakes measure nothing: their own measurement lock, not the machine's (other processes' benches)."""
    monkeypatch.setenv("AYCI_MEASUREMENT_LOCK", str(tmp_path / "measurement.lock"))


@pytest.fixture
def fakes() -> RacingFakes:
    return RacingFakes()


@pytest.fixture
def app(tmp_path, fakes):
    return embedded_with_fakes(tmp_path, fakes, MemoryStore(), time_cap_s=FULL_CAP_S)


def test_a_racing_run_shows_its_first_answer_before_its_quick_pass_ends(app, fakes):
    matrix = Matrix(
        optimizers={"intel": ["base", "onnx", "onnx_int8"]}, batch_sizes=[1, 2], memory_sizes_mb=[1024, 1769]
    )
    request = RequestSubmitted(model=stored_model(app), matrix=matrix, precision="quick", force=True)
    envelope = new_run(request)
    first: list[tuple[int, dict]] = []  # (measurements done when it was first shown, the answer)

    def observe(queue: str, event: Envelope) -> None:
        if first:
            return
        try:
            doc = json.loads(app.store.get_bytes(keys.answer(envelope.run_id)))
        except Exception:
            return
        if is_shown(doc):
            first.append((len(fakes.caps), doc))

    app.bus.observers.append(observe)
    app.publisher.publish([envelope])
    app.bus.run_until_idle()
    summary = json.loads(app.store.get_bytes(keys.summary(envelope.run_id)))
    assert summary["status"] == "complete"
    measured, doc = first[0]
    assert measured == 3  # the three engines' leads, measured first (b1 at 1769 MB), nothing else yet
    assert [label for _, _, label in fakes.caps[:0]] == []
    assert [(o, m) for o, m, _ in fakes.caps[:3]] == [("base", 1769), ("onnx", 1769), ("onnx_int8", 1769)]
    assert doc["stage"] == "provisional" and doc["ended"] == 3 and doc["total"] == 12
    compared = set(doc["rows"]) | set(doc["dominated"]) | set(doc["out"])
    assert compared == {f"intel/{o}/b1/1769MB" for o in ("base", "onnx", "onnx_int8")}
    assert doc["picks"]["cheapest"] == "intel/onnx_int8/b1/1769MB"
    final = json.loads(app.store.get_bytes(keys.answer(envelope.run_id)))
    assert final["stage"] == "final"
    assert final["picks"] == {k: summary["recommendation"][k] for k in ("fastest", "cheapest", "balanced")}


def test_an_exact_run_has_no_running_answer(app, fakes):
    matrix = Matrix(optimizers={"intel": ["base", "onnx"]}, batch_sizes=[1], memory_sizes_mb=[1769])
    request = RequestSubmitted(model=stored_model(app), matrix=matrix, precision="exact", force=True)
    envelope = new_run(request)
    app.publisher.publish([envelope])
    app.bus.run_until_idle()
    assert not app.store.exists(keys.answer(envelope.run_id))


def test_a_plan_that_arrives_after_outcomes_still_gathers_them(app, fakes):
    """On the real path the plan may come after the first outcomes: whoever finds no running answer
    builds it from every outcome arrived so far."""
    from schemas.events import InferenceDone
    from services.archiver.handlers import ArchiverDeps, on_inference_done, on_run_planned
    from tests.conftest import measured_result

    store = MemoryStore()
    deps = ArchiverDeps(store)
    matrix = Matrix(optimizers={"intel": ["base", "onnx"]}, batch_sizes=[1], memory_sizes_mb=[1769])
    request = RequestSubmitted(model=MODEL, matrix=matrix)
    combos = {combo_key(MODEL, c, request.tuning): c for c in matrix.combos()}
    plan = RunPlanned(model=MODEL, combos=combos, deadline=datetime.now(UTC) + timedelta(hours=1), request=request)
    arrivals = []
    for key, combo in combos.items():
        result = {**measured_result(combo.label, p99=2.0, cost=0.1), "combo_key": key, "precision": "quick"}
        store.objects[keys.result(key)] = json.dumps(result).encode()
        done = InferenceDone(
            combo=combo, combo_key=key, result_key=keys.result(key), p50_ms=1.0, p99_ms=2.0, precision="quick"
        )
        arrivals.append(Envelope.wrap(done, run_id="r", producer="inference"))
    on_inference_done(arrivals[0], deps)  # before the plan: kept as an outcome, no answer yet
    assert not store.exists(keys.answer("r"))
    on_run_planned(Envelope.wrap(plan, run_id="r", producer="dedup"), deps)
    doc = json.loads(store.objects[keys.answer("r")])
    assert doc["stage"] == "gathering" and doc["ended"] == 1
    assert len(doc["rows"]) + len(doc["out"]) == 1  # the arrival before the plan is in it (a figure or why not)
    assert [lead["state"] != "pending" for lead in doc["leads"].values()] == [True, False]
    on_inference_done(arrivals[1], deps)  # the last quick outcome: the race decides, the answer is rebuilt
    doc = json.loads(store.objects[keys.answer("r")])
    assert doc["stage"] in ("quick", "final")


def test_the_cli_prints_the_first_answer_once_and_again_when_a_pick_changes():
    from rich.console import Console
    from rich.progress import Progress

    from ayci.cli.follow import RunningAnswer

    store = MemoryStore()
    console = Console(record=True, width=200)
    shown = RunningAnswer(store, "r", Progress(console=console))
    doc, by_label = gathering()
    store.put_bytes(keys.answer("r"), json.dumps(doc).encode())
    shown.check()
    assert console.export_text(clear=False) == ""  # still gathering: nothing to show
    for i, (engine, p99, cost) in enumerate((("base", 40, 6.0), ("onnx", 12, 2.0), ("onnx_int8", 8, 2.4))):
        label = f"intel/{engine}/b1/1769MB"
        doc = add(doc, by_label, label, i + 1, figures=fig(label, p99, cost))
    store.put_bytes(keys.answer("r"), json.dumps(doc).encode())
    shown.check()
    shown.check()
    text = console.export_text(clear=False)
    assert text.count("first answer, provisional: 3 of 48") == 1 and "fastest: intel/onnx_int8/b1/1769MB" in text
    label = "intel/onnx_int8/b1/3538MB"  # cheaper still: a pick changes, printed again
    doc = add(doc, by_label, label, 4, figures=fig(label, 7, 1.0))
    store.put_bytes(keys.answer("r"), json.dumps(doc).encode())
    shown.check()
    assert console.export_text(clear=False).count("first answer, provisional: ") == 2


def test_a_skipped_tvm_is_out_of_the_running_answer_with_its_reason_not_failed():
    from schemas.events import FailureStage
    from services.archiver.racing import _not_measured

    doc, by_label = gathering()
    reason = "tuning skipped: even TVM's largest gain seen leaves it dominated"
    doc = add(doc, by_label, "intel/tvm/b1/1769MB", 1, **_not_measured(FailureStage.skipped, reason))
    assert doc["out"]["intel/tvm/b1/1769MB"] == reason and doc["leads"]["intel/tvm"]["state"] == "out"
    assert _not_measured(FailureStage.inference, "killed") == {"failed": "inference: killed"}
