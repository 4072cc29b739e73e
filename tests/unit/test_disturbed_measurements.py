"""A disturbed measurement (other work took cores it needed, or the host ran slower than its own reference:
`measuring/host_speed.py`) is measured again later, twice at most; the last is kept, disturbed, and never
recommended, with the reason. The host's reference and the judgement of a slow host."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import structlog

from adapters.memory_store import MemoryStore
from measuring import host_speed
from measuring.host_speed import LOG_KEEP, MIN_REFERENCE_PROBES, REFERENCE_WINDOW_S, SLOW_HOST_RATIO, SpeedLog
from measuring.machine_load import LoadSample, load_report
from schemas.documents import MachineLoad
from schemas.events import Envelope, ModelConverted
from services.inference.handlers import DISTURBED_MEASURED_AGAIN, InferenceDeps, measure_again_later
from tests.fakes import embedded_with_fakes
from tests.unit.test_pipeline import Fakes, request, run

SLOW_HOST = {
    "host_cores": 2,
    "other_busy_cores": 0.02,
    "other_work_limit_cores": 1.25,
    "host_slowdown": 1.5,
    "disturbed": True,
}
QUIET = {**SLOW_HOST, "host_slowdown": 1.01, "disturbed": False}

CONVERTED = ModelConverted.model_validate(
    {
        "model": {"sha256": "ab" * 32, "size_bytes": 1, "format": "onnx", "workload": "nlp", "input_size": [8]},
        "combo": {"hardware": "intel", "optimizer": "onnx", "batch_size": 1, "memory_mb": 1769},
        "combo_key": "k",
        "artifact_key": "a",
        "artifact_file": "model.onnx",
        "conversion_s": 1.0,
    }
)


class DisturbedFakes(Fakes):
    """Measurements on a host that ran slow for the first `slow[(optimizer, memory)]` of them."""

    def __init__(self) -> None:
        super().__init__()
        self.slow: dict[tuple[str, int], int] = {}

    def measure(self, spec, python_command) -> dict:
        report = super().measure(spec, python_command)
        key = (spec.optimizer, spec.memory_mb)
        slow = self.slow.get(key, 0) > 0
        self.slow[key] = self.slow.get(key, 0) - 1
        return {**report, "load": dict(SLOW_HOST if slow else QUIET)}


@pytest.fixture
def fakes() -> DisturbedFakes:
    return DisturbedFakes()


@pytest.fixture
def app(tmp_path, fakes):
    return embedded_with_fakes(tmp_path, fakes, MemoryStore())


def test_a_measurement_on_a_slow_host_is_measured_again_and_the_quiet_one_kept(app, fakes):
    fakes.slow = {("onnx", 1769): 1}
    summary = run(app, request(app))
    assert fakes.measurements[("onnx", 1769)] == 2 and fakes.measurements[("onnx", 3538)] == 1
    row = next(r for r in summary["results"] if r["combo"]["memory_mb"] == 1769)
    assert not row["load"]["disturbed"] and row["load"]["host_slowdown"] == pytest.approx(1.01)
    assert summary["status"] == "complete" and "intel/onnx/b1/1769MB" in summary["recommendation"]["candidates"]


def test_a_host_slow_every_time_keeps_the_last_measurement_disturbed_and_says_why(app, fakes):
    fakes.slow = {("onnx", 1769): 10}
    summary = run(app, request(app))
    assert fakes.measurements[("onnx", 1769)] == 1 + DISTURBED_MEASURED_AGAIN
    row = next(r for r in summary["results"] if r["combo"]["memory_mb"] == 1769)
    assert row["load"]["disturbed"]
    reason = summary["recommendation"]["excluded"]["intel/onnx/b1/1769MB"]
    assert reason.startswith("disturbed: the host ran 1.50x slower than its own reference")
    assert summary["recommendation"]["cheapest"] == "intel/onnx/b1/3538MB"  # the run still answers


def test_a_quick_pass_keeps_its_disturbed_measurement_for_the_race_to_measure_again():
    payload = CONVERTED
    deps, log = InferenceDeps(store=MemoryStore()), structlog.get_logger()
    report = {"load": SLOW_HOST}
    assert measure_again_later(payload, report, deps, log, quick=True) is None
    (again,) = measure_again_later(payload, report, deps, log, quick=False)
    assert again.payload.measured_again == 1 and again.when > datetime.now(UTC) + timedelta(seconds=60)
    spent = payload.model_copy(update={"measured_again": DISTURBED_MEASURED_AGAIN})
    assert measure_again_later(spent, report, deps, log, quick=False) is None
    assert measure_again_later(payload, {"load": QUIET}, deps, log, quick=False) is None


def test_a_model_converted_of_version_2_reads_as_never_measured_again():
    envelope = Envelope.wrap(CONVERTED, run_id="r", producer="converter")
    data = envelope.model_dump(mode="json")
    data["schema_version"] = 2
    del data["payload"]["measured_again"]
    assert Envelope.parse(data).payload.measured_again == 0


# the host's reference ------------------------------------------------------------------------------


def test_the_reference_is_the_fastest_probe_of_the_last_hour_once_there_are_enough(tmp_path):
    log, now = SpeedLog(tmp_path / "speed"), 1_000_000.0
    assert log.reference_ms(now) is None  # a fresh host
    for i in range(MIN_REFERENCE_PROBES - 1):
        log.add(5.0 + i, at=now - i)
    assert log.reference_ms(now) is None
    log.add(4.0, at=now - REFERENCE_WINDOW_S - 1)  # too old to count
    log.add(6.0, at=now)
    assert log.reference_ms(now) == 5.0
    with (tmp_path / "speed").open("a") as f:
        f.write("12.5\n")  # a line cut short by a concurrent trim
    assert log.reference_ms(now) == 5.0


def test_the_log_keeps_its_newest_probes(tmp_path):
    log = SpeedLog(tmp_path / "speed")
    for i in range(2 * LOG_KEEP + 10):
        log.add(5.0, at=1_000_000.0 + i)
    lines = (tmp_path / "speed").read_text().splitlines()
    assert LOG_KEEP <= len(lines) <= 2 * LOG_KEEP and lines[-1].startswith(f"{1_000_000.0 + 2 * LOG_KEEP + 9:.3f}")


def test_the_probe_lives_beside_the_measurement_lock(monkeypatch, tmp_path):
    monkeypatch.setenv("AYCI_MEASUREMENT_LOCK", str(tmp_path / "lock"))
    assert host_speed.speed_log_path() == tmp_path / "lock.speed"
    assert host_speed.probe_ms(loop=1000, repeats=2) > 0


def test_a_host_slower_than_its_reference_disturbs_the_measurement():
    assert host_speed.slowdown(5.0, 7.5, 5.0) == 1.5
    assert host_speed.slowdown(None, 5.5, 5.0) == pytest.approx(1.1)
    assert host_speed.slowdown(5.0, 5.0, None) is None
    sample = LoadSample(at=0.0, loadavg_1m=0.1, cpu_pressure_avg10=None, busy_cpu_s=10.0)
    after = LoadSample(at=10.0, loadavg_1m=0.1, cpu_pressure_avg10=None, busy_cpu_s=20.2)
    quiet = load_report(sample, after, own_cpu_s=10.0, host_slowdown=SLOW_HOST_RATIO - 0.01)
    slow = load_report(sample, after, own_cpu_s=10.0, host_slowdown=SLOW_HOST_RATIO + 0.01)
    assert not quiet["disturbed"] and slow["disturbed"]
    assert MachineLoad.model_validate(slow).disturbance.startswith("the host ran 1.26x slower")
    busy = MachineLoad.model_validate({"other_busy_cores": 1.6, "other_work_limit_cores": 1.25, "disturbed": True})
    assert busy.disturbance == "other work used 1.6 cores while it was measured"
    older = MachineLoad.model_validate({"other_busy_cores": 1.6, "disturbed": True})  # stored before the probe
    assert older.disturbance == "other work used 1.6 cores while it was measured"
    assert MachineLoad.model_validate(quiet).disturbance is None
