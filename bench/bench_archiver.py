"""Store calls the archiver makes per arrival and per run, on an in-memory store that counts
calls as S3 bills them (a listing costs one call per 1,000 keys).

    .venv/bin/python bench/bench_archiver.py

For N = 192, 512 and 1,536 combinations, arrivals in plan, random and reverse order: calls per
arrival (max over all but the closing arrival, and the closing one) and per run, against the
budget of 5 N + c. The last line is the max over every arrival of the N = 1,536 runs.
"""

from __future__ import annotations

import json
import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.memory_store import MemoryStore
from schemas import keys
from schemas.combos import Combo, Matrix, ModelRef, Tuning, combo_key
from schemas.events import Envelope, InferenceDone, RequestSubmitted, RunPlanned
from services.archiver.handlers import ArchiverDeps, on_inference_done, on_run_planned
from tests.conftest import measured_result

MODEL = ModelRef(sha256="ab" * 32, size_bytes=1000, format="pt2", workload="image_classification", input_size=[32, 32])
MEMORY = [128 * i for i in range(1, 81)]
TUNING = Tuning(trials=0)  # the requests' budget is beside the point: only the archiver's work is timed


def plan_of(n: int) -> dict[str, Combo]:
    combos = {}
    for hardware in ("intel", "arm"):
        for optimizer in ("base", "onnx", "tvm"):
            for batch in (1, 2, 4, 8):
                for memory in MEMORY:
                    combo = Combo(hardware=hardware, optimizer=optimizer, batch_size=batch, memory_mb=memory)
                    combos[combo_key(MODEL, combo, TUNING)] = combo
                    if len(combos) == n:
                        return combos
    raise ValueError(n)


def run(n: int, order: str) -> tuple[list[int], int]:
    store = MemoryStore()
    deps = ArchiverDeps(store)
    combos = plan_of(n)
    request = RequestSubmitted(
        model=MODEL, matrix=Matrix(optimizers={"intel": ["base"]}, batch_sizes=[1], memory_sizes_mb=[1769])
    )
    plan = RunPlanned(model=MODEL, combos=combos, deadline=datetime.now(UTC) + timedelta(hours=1), request=request)
    arrivals = []
    for key, combo in combos.items():
        store.objects[keys.result(key)] = json.dumps(
            {**measured_result(combo.label, p99=2.0, cost=0.1), "combo_key": key, "cost": None}
        ).encode()
        done = InferenceDone(combo=combo, combo_key=key, result_key=keys.result(key), p50_ms=1.0, p99_ms=2.0)
        arrivals.append(Envelope.wrap(done, run_id="r", producer="inference"))
    if order == "random":
        random.Random(n).shuffle(arrivals)
    elif order == "reverse":
        arrivals.reverse()
    store.calls.clear()
    on_run_planned(Envelope.wrap(plan, run_id="r", producer="dedup"), deps)
    per_arrival = []
    for event in arrivals:
        before = store.call_count
        on_inference_done(event, deps)
        per_arrival.append(store.call_count - before)
    assert json.loads(store.objects[keys.summary("r")])["status"] == "complete"
    return per_arrival, store.call_count


def main() -> None:
    print(f"{'N':>6} {'order':>8} {'max/arrival':>12} {'closing':>8} {'per run':>9} {'5N+c':>7}")
    worst = 0
    for n in (192, 512, 1536):
        for order in ("plan", "random", "reverse"):
            per_arrival, total = run(n, order)
            print(f"{n:>6} {order:>8} {max(per_arrival[:-1]):>12} {per_arrival[-1]:>8} {total:>9} {5 * n:>7}")
            if n == 1536:
                worst = max(worst, max(per_arrival))
    print(f"max store calls per arrival: {worst}")


if __name__ == "__main__":
    main()
