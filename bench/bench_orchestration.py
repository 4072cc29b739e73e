"""Orchestration overhead: a run's wall time against the time spent measuring and converting,
on the embedded default (every service in this process, in-process bus, local folder store).

Runs ResNet-18 (224x224) on intel base+onnx at batch 1 and two memory sizes in a fresh store
(nothing reused), then compares the run's wall time (from storing the model to the archived
summary) with the sum of its measurements (each measuring process's wall time) and of its
conversions (the converter's work on each combination: the engine's conversion, once per
artifact, and the base model's reference outputs the measurements are judged against). The
rest is orchestration: events, storage, copying artifacts, starting the measuring processes.
Time spent waiting for the machine's measurement lock while other processes measure is
queueing, not orchestration: it is shown and left out of the verdict. Goal <= 10 %.

    .venv/bin/python bench/bench_orchestration.py [--memory 1769,3538] [--time-cap 20]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from resnet_artifact import INPUT_SIZE, resnet18_onnx

from ayci.bootstrap import embedded
from ayci.settings import Settings
from schemas import keys
from schemas.combos import Matrix
from schemas.events import ComboPending, RequestSubmitted
from services.request.submission import new_run, store_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--matrix", default="base,onnx")
    parser.add_argument("--memory", default="1769,3538")
    parser.add_argument("--time-cap", type=float, default=Settings().measure_time_cap_s)
    args = parser.parse_args()
    model_path = resnet18_onnx().model_path  # the exported example model (built once, outside the timing)
    with tempfile.TemporaryDirectory(prefix="bench-orchestration-") as tmp:
        app = embedded(Settings(data_dir=Path(tmp) / "data", measure_time_cap_s=args.time_cap))
        converter_s = time_handler(app.runners["converter"].service, ComboPending)
        started = time.perf_counter()
        model = store_model(app.store, model_path, "image_classification", INPUT_SIZE)
        matrix = Matrix(
            optimizers={"intel": args.matrix.split(",")},
            batch_sizes=[1],
            memory_sizes_mb=[int(m) for m in args.memory.split(",")],
        )
        envelope = new_run(RequestSubmitted(model=model, matrix=matrix))
        app.publisher.publish([envelope])
        app.bus.run_until_idle()
        wall_s = time.perf_counter() - started
        summary = json.loads(app.store.get_bytes(keys.summary(envelope.run_id)))
    results = summary["results"]
    measuring_s = sum(r["measurement_s"] for r in results)
    lock_wait_s = sum(r.get("lock_wait_s", 0) for r in results)
    engine_s = sum({r["artifact_key"]: r["conversion_s"] + r.get("tuning_s", 0) for r in results}.values())
    conversion_s = sum(converter_s)
    work_s = measuring_s + conversion_s
    overhead_s = wall_s - work_s - lock_wait_s
    for r in results:
        print(
            f"  {r['combo']['optimizer']:>5} {r['combo']['memory_mb']:>5} MB: measuring {r['measurement_s']:6.1f} s "
            f"(p50 {r['latency_ms']['p50']:.1f} ms, {r['latency_ms']['iterations']} it.), conversion "
            f"{r['conversion_s']:5.1f} s, "
            f"other work {r['load']['other_busy_cores']:.2f} cores"
        )
    for f in summary["failures"]:
        print(f"  failed {f['label']}: {f['reason']}")
    print(
        json.dumps(
            {
                "status": summary["status"],
                "wall_s": round(wall_s, 1),
                "measuring_s": round(measuring_s, 1),
                "conversion_s": round(conversion_s, 1),
                "of_which_engine_s": round(engine_s, 1),
                "waiting_for_other_measurements_s": round(lock_wait_s, 1),
                "overhead_s": round(overhead_s, 1),
                "overhead_ratio": round(overhead_s / work_s, 3),
                "wall_over_work_with_waiting": round(wall_s / work_s, 3),
            }
        )
    )
    verdict = "within" if overhead_s / work_s <= 0.10 else "ABOVE"
    print(
        f"verdict: (wall {wall_s:.1f} s - waiting {lock_wait_s:.1f} s) / (measuring {measuring_s:.1f} s + conversion "
        f"{conversion_s:.1f} s) "
        f"= {(wall_s - lock_wait_s) / work_s:.3f}: orchestration overhead {overhead_s / work_s:.1%}, {verdict} the "
        "goal <= 10 %"
    )


def time_handler(service, event_type: type) -> list[float]:
    """Wrap `service`'s handler of `event_type` (a payload class: handlers are keyed by class);
    the returned list fills with each call's seconds."""
    seconds: list[float] = []
    handler = service.handlers[event_type]

    def timed(event, deps):
        started = time.perf_counter()
        try:
            return handler(event, deps)
        finally:
            seconds.append(time.perf_counter() - started)

    service.handlers = {**service.handlers, event_type: timed}  # not the module's own table
    return seconds


if __name__ == "__main__":
    main()
