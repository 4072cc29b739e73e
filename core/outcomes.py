"""A run's outcomes as the object store holds them (`runs/{run id}/outcomes/`, `schemas/keys.py`):
one object per combination that ended on its own (measured or failed), and one per batch of
reused combinations (`ReusedOutcomes`, with dedup's bundle of their results' documents). One
listing tells which are there; the archiver, the API's progress and the CLI read them here."""

from __future__ import annotations

from dataclasses import dataclass, field

import structlog

from core.ports import NotFound, ObjectStore
from schemas import keys
from schemas.documents import MeasuredResult, Outcome, ResultBundle, ReusedOutcomes
from schemas.events import FailureStage, SchemaError

log = structlog.get_logger()


@dataclass
class Arrived:
    """The outcomes of a run at one listing: the combinations with an outcome of their own (read
    on demand), the reused ones, and the reused results' documents as dedup read them."""

    store: ObjectStore
    run_id: str
    own: set[str] = field(default_factory=set)
    reused: dict[str, Outcome] = field(default_factory=dict)
    documents: dict[str, dict] = field(default_factory=dict)  # result key -> its document

    def outcome(self, combo_key: str) -> Outcome | None:
        if combo_key in self.own:
            try:
                return Outcome.read(self.store.get_bytes(keys.outcome(self.run_id, combo_key)))
            except NotFound:
                return None
            except SchemaError as exc:
                return Outcome(
                    status="failed", stage=FailureStage.inference, reason=f"its outcome cannot be read: {exc}"[:2000]
                )
        return self.reused.get(combo_key)

    def result(self, outcome: Outcome) -> MeasuredResult:
        """The result a `done` outcome names (`NotFound`, `SchemaError` if it cannot be read)."""
        document = self.documents.get(outcome.result_key)
        return MeasuredResult.read(document if document is not None else self.store.get_bytes(outcome.result_key))

    def result_document(self, outcome: Outcome) -> dict:
        """`result(outcome).to_dict()`, without validating again a document dedup validated and
        wrote in the current version (a resubmitted matrix: 1,536 of them)."""
        document = self.documents.get(outcome.result_key)
        if document is not None and document.get("document_version") == MeasuredResult.VERSION:
            return dict(document)
        return self.result(outcome).to_dict()

    def at_hand(self, combo_key: str) -> bool:
        """Whether the combination's outcome and result are here without reading the store
        (reused, its document read with its bundle)."""
        outcome = self.reused.get(combo_key)
        return outcome is not None and combo_key not in self.own and outcome.result_key in self.documents

    def __len__(self) -> int:
        return len(self.own) + len(self.reused)


def arrived_outcomes(store: ObjectStore, run_id: str) -> Arrived:
    """The run's outcomes: one listing, plus one read per batch of reused combinations and its bundle."""
    arrived = Arrived(store, run_id)
    for key in store.list_keys(keys.outcomes_prefix(run_id)):
        name = key.rsplit("/", 1)[-1]
        if name.startswith("expected-"):
            continue
        if not name.startswith(keys.REUSED_OUTCOMES):
            arrived.own.add(name.removesuffix(".json"))
            continue
        record = ReusedOutcomes.read(store.get_bytes(key))
        arrived.reused |= {
            k: Outcome(status="done", result_key=result_key, reused=True) for k, result_key in record.results.items()
        }
        if record.bundle is not None:
            try:
                arrived.documents |= ResultBundle.read(store.get_bytes(record.bundle)).results
            except (NotFound, SchemaError) as exc:  # its results are read one by one instead
                log.warning("reused_bundle_unreadable", run_id=run_id, bundle=record.bundle, reason=str(exc)[:200])
    return arrived
