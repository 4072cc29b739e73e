"""One conversion per artifact: the lease the converter takes before converting."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from adapters.memory_store import MemoryStore
from services.converter.handlers import ConverterDeps, _release_lease, _take_lease


class Clock:
    def __init__(self) -> None:
        self.at = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.at


def test_the_memory_sizes_of_one_artifact_wait_for_one_conversion():
    clock = Clock()
    deps = ConverterDeps(store=MemoryStore(), lease_s=900, now=clock)
    assert _take_lease(deps, "artifact-1", "event-1769MB")
    assert not _take_lease(deps, "artifact-1", "event-3538MB")  # waits
    assert _take_lease(deps, "artifact-2", "event-3538MB")  # another artifact: its own lease
    assert _take_lease(deps, "artifact-1", "event-1769MB")  # the holder's redelivery keeps it


def test_a_dead_holder_s_lease_expires_and_a_failed_conversion_releases_it():
    clock = Clock()
    deps = ConverterDeps(store=MemoryStore(), lease_s=900, now=clock)
    assert _take_lease(deps, "a", "first")
    clock.at += timedelta(seconds=901)  # the first worker died without finishing
    assert _take_lease(deps, "a", "second")
    _release_lease(deps, "a")
    assert _take_lease(deps, "a", "third")


def test_tuning_records_are_stored_as_one_object_and_come_back_whole(tmp_path):
    from schemas import keys
    from schemas.combos import Combo, ModelRef
    from schemas.events import ComboPending
    from services.converter.handlers import _fetch_tuning_records, _store_tuning_records

    model = ModelRef(sha256="ab" * 32, size_bytes=1, format="pt2", workload="image_classification", input_size=[32, 32])
    pending = ComboPending(model=model, combo=Combo(hardware="intel", optimizer="tvm", batch_size=2, memory_mb=1769), combo_key="k", artifact_key="a", target_cpu="znver3")
    records = tmp_path / "out" / "tuning"
    records.mkdir(parents=True)
    (records / "database_workload.json").write_text("w" * 100)
    (records / "database_tuning_record.json").write_text("r" * 1000)
    store = MemoryStore()
    _store_tuning_records(store, pending, records)
    assert list(store.objects) == [keys.tuning_records(model.sha256, "znver3", 2, [32, 32])]  # one object, written at once
    (tmp_path / "in").mkdir()
    fetched = _fetch_tuning_records(store, pending, tmp_path / "in")
    assert {p.name: p.read_text() for p in fetched.iterdir()} == {p.name: p.read_text() for p in records.iterdir()}
