"""One conversion per artifact: the lease the converter takes before converting."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from adapters.memory_store import MemoryStore
from services.converter.handlers import ConverterDeps, conversion_lease


class Clock:
    def __init__(self) -> None:
        self.at = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.at


def take(deps: ConverterDeps, artifact_key: str, holder: str) -> bool:
    return conversion_lease(deps, artifact_key, holder).take()


def tvm_pending(sha: str, cpu: str = "znver4", batch: int = 1):
    """A `tvm` combination's `ComboPending` of the model whose SHA-256 is `sha` repeated, for `cpu`."""
    from schemas.combos import Combo, ModelRef
    from schemas.events import ComboPending

    model = ModelRef(sha256=sha * 32, size_bytes=1, format="pt2", workload="image_classification", input_size=[32, 32])
    return ComboPending(
        model=model,
        combo=Combo(hardware="intel", optimizer="tvm", batch_size=batch, memory_mb=1769),
        combo_key="k",
        artifact_key="a",
        target_cpu=cpu,
    )


def test_the_memory_sizes_of_one_artifact_wait_for_one_conversion():
    clock = Clock()
    deps = ConverterDeps(store=MemoryStore(), lease_s=900, now=clock)
    assert take(deps, "artifact-1", "event-1769MB")
    assert not take(deps, "artifact-1", "event-3538MB")  # waits
    assert take(deps, "artifact-2", "event-3538MB")  # another artifact: its own lease
    assert take(deps, "artifact-1", "event-1769MB")  # the holder's redelivery keeps it


def test_a_dead_holder_s_lease_expires_and_a_failed_conversion_releases_it():
    clock = Clock()
    deps = ConverterDeps(store=MemoryStore(), lease_s=900, now=clock)
    assert take(deps, "a", "first")
    clock.at += timedelta(seconds=901)  # the first worker died without finishing
    second = conversion_lease(deps, "a", "second")
    assert second.take()
    assert not take(deps, "a", "third")
    second.release()
    assert take(deps, "a", "third")


def test_progress_keeps_the_lease_and_a_holder_that_lost_it_neither_renews_nor_releases_it():
    clock = Clock()
    deps = ConverterDeps(store=MemoryStore(), lease_s=900, now=clock)
    slow = conversion_lease(deps, "a", "slow")
    assert slow.take()
    for _ in range(3):  # tuning longer than the lease, renewed at each step
        clock.at += timedelta(seconds=600)
        assert slow.renew()
    assert not take(deps, "a", "other")
    clock.at += timedelta(seconds=901)  # the slow worker stalled: its lease expired and was taken over
    assert take(deps, "a", "other")
    assert not slow.renew()
    slow.release()  # no longer its own: the other keeps it
    assert not take(deps, "a", "third")


def test_tuning_records_are_stored_as_one_object_and_come_back_whole(tmp_path):
    from schemas import keys
    from services.converter.handlers import _fetch_tuning_records, _store_tuning_records

    pending = tvm_pending("ab", "znver3", batch=2)
    records = tmp_path / "out" / "tuning"
    records.mkdir(parents=True)
    (records / "database_workload.json").write_text("w" * 100)
    (records / "database_tuning_record.json").write_text("r" * 1000)
    store = MemoryStore()
    _store_tuning_records(store, pending, records)
    assert list(store.objects) == [keys.tuning_records("ab" * 32, "znver3", 2, [32, 32])]  # one object, written at once
    (tmp_path / "in").mkdir()
    fetched, shared = _fetch_tuning_records(store, pending, tmp_path / "in")
    assert {p.name: p.read_text() for p in fetched.iterdir()} == {p.name: p.read_text() for p in records.iterdir()}
    assert shared == []  # its own records are not "another model's"


def test_other_models_tuning_records_for_the_same_cpu_come_along(tmp_path):
    from services.converter.handlers import SHARED_TUNING_RECORDS, _fetch_tuning_records, _store_tuning_records

    store = MemoryStore()
    for index in range(SHARED_TUNING_RECORDS + 2):
        records = tmp_path / f"out{index}"
        records.mkdir()
        (records / "database_tuning_record.json").write_text(f"records of model {index}")
        _store_tuning_records(store, tvm_pending(f"{index:02d}", "znver4"), records)
    _store_tuning_records(store, tvm_pending("ee", "neoverse-n1"), records)  # another CPU: never shared
    (tmp_path / "in").mkdir()
    own, shared = _fetch_tuning_records(store, tvm_pending("00", "znver4"), tmp_path / "in")
    assert (own / "database_tuning_record.json").read_text() == "records of model 0"
    texts = [(folder / "database_tuning_record.json").read_text() for folder in shared]
    assert len(texts) == SHARED_TUNING_RECORDS and "records of model 0" not in texts
    assert all(text.startswith("records of model ") for text in texts)


def test_the_same_model_s_records_at_other_batch_sizes_come_first_nearest_first(tmp_path):
    """They seed this batch size's search (`engines/tvm/seeding.py`): never crowded out by other models'."""
    from services.converter.handlers import SHARED_TUNING_RECORDS, _fetch_tuning_records, _store_tuning_records

    store = MemoryStore()
    stored = [("aa", 1), ("aa", 16), ("aa", 2), *((f"{index:02d}", 4) for index in range(SHARED_TUNING_RECORDS + 2))]
    for sha, batch in stored:
        records = tmp_path / f"out-{sha}-{batch}"
        records.mkdir()
        (records / "database_tuning_record.json").write_text(f"{sha} b{batch}")
        _store_tuning_records(store, tvm_pending(sha, batch=batch), records)
    (tmp_path / "in").mkdir()
    _, shared = _fetch_tuning_records(store, tvm_pending("aa", batch=4), tmp_path / "in")
    texts = [(folder / "database_tuning_record.json").read_text() for folder in shared]
    assert texts[:3] == ["aa b2", "aa b1", "aa b16"] and len(texts) == SHARED_TUNING_RECORDS
