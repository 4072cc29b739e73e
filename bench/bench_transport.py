"""The real path's transport and overhead, measured side by side in one run on LocalStack.

1. Events per second through EventBridge -> SQS (PutEvents in batches of 10, one rule, one
   queue) and the hop latency PutEvents -> message received, p50/p99.
2. The wall time of the same small run (tiny ResNet-18, intel onnx b1+b2, forced) on LocalStack
   with one process per service (started and polling first, as deployed workers are) against
   the embedded default, `--repeats` times each in turns: the ratio of the medians (goal <= 1.25).
3. A resubmitted 1,536-combination matrix whose every result is stored (seeded from the small
   run's result): the time from submission to the summary, embedded and on LocalStack (goals:
   <= 1 s and <= 3 s).

    .venv/bin/python bench/bench_transport.py [--events 300] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import boto3

from infra import localstack as cloud
from infra.stack import delete_stack
from schemas import keys


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def bench_events(prefix: str, outputs, count: int) -> dict:
    events, sqs = boto3.client("events"), boto3.client("sqs")
    url = outputs.queue_urls["archiver"]
    sent_at: dict[str, float] = {}
    started = time.perf_counter()
    for start in range(0, count, 10):
        entries = []
        for i in range(start, min(count, start + 10)):
            event_id = f"bench-{i}"
            sent_at[event_id] = time.time()
            detail = {
                "event_id": event_id,
                "type": "RunDeadlineReached",
                "schema_version": 1,
                "run_id": "bench",
                "time": "2026-01-01T00:00:00Z",
                "producer": "bench",
                "payload": {"deadline": "2026-01-01T00:00:00Z"},
            }
            entries.append(
                {
                    "Source": "ayci",
                    "DetailType": "RunDeadlineReached",
                    "Detail": json.dumps(detail),
                    "EventBusName": outputs.bus_name,
                }
            )
        events.put_events(Entries=entries)
    put_s = time.perf_counter() - started
    latencies, received = [], 0
    started = time.perf_counter()
    while received < count and time.perf_counter() - started < 120:
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
        now = time.time()
        for m in messages:
            detail = json.loads(m["Body"])["detail"]
            latencies.append((now - sent_at[detail["event_id"]]) * 1000)
        if messages:
            sqs.delete_message_batch(
                QueueUrl=url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)],
            )
        received += len(messages)
    receive_s = time.perf_counter() - started
    # the hop latency of single events, not queued behind a burst
    hop = []
    for i in range(30):
        event_id = f"hop-{i}"
        detail = {
            "event_id": event_id,
            "type": "RunDeadlineReached",
            "schema_version": 1,
            "run_id": "bench",
            "time": "2026-01-01T00:00:00Z",
            "producer": "bench",
            "payload": {"deadline": "2026-01-01T00:00:00Z"},
        }
        t0 = time.time()
        events.put_events(
            Entries=[
                {
                    "Source": "ayci",
                    "DetailType": "RunDeadlineReached",
                    "Detail": json.dumps(detail),
                    "EventBusName": outputs.bus_name,
                }
            ]
        )
        while True:
            messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, WaitTimeSeconds=5).get("Messages", [])
            if messages:
                hop.append((time.time() - t0) * 1000)
                sqs.delete_message(QueueUrl=url, ReceiptHandle=messages[0]["ReceiptHandle"])
                break
    return {
        "events": count,
        "put_events_per_s": count / put_s,
        "received": received,
        "receive_per_s": received / receive_s,
        "hop_ms_p50": statistics.median(hop),
        "hop_ms_p99": percentile(hop, 99),
        "burst_latency_ms_p50": statistics.median(latencies),
        "burst_latency_ms_p99": percentile(latencies, 99),
    }


def small_run_wall_times(prefix: str, outputs, model_paths: list[Path]) -> dict:
    """The same small run on each path in turns (embedded, then LocalStack), once per model of
    `model_paths`, with the service processes started and polling before the first: the ratio
    of the medians. Each pair has a model of its own, so neither path reuses the reference
    outputs or artifacts an earlier run stored."""
    import os

    from ayci.bootstrap import aws, embedded
    from ayci.settings import Settings
    from schemas.combos import Matrix
    from schemas.events import RequestSubmitted
    from services.request.submission import new_run, store_model

    def request(store, model_path: Path):
        model = store_model(store, model_path, "image_classification", [32, 32])
        return RequestSubmitted(
            model=model,
            matrix=Matrix(optimizers={"intel": ["onnx"]}, batch_sizes=[1, 2], memory_sizes_mb=[1769]),
            force=True,
        )

    def embedded_s(model_path: Path) -> float:
        with tempfile.TemporaryDirectory() as tmp:
            app = embedded(Settings(data_dir=Path(tmp), measure_time_cap_s=2, measure_min_iterations=10))
            envelope = new_run(request(app.store, model_path))
            started = time.perf_counter()
            app.publisher.publish([envelope])
            app.bus.run_until_idle()
            elapsed = time.perf_counter() - started
            assert json.loads(app.store.get_bytes(keys.summary(envelope.run_id)))["status"] == "complete"
            return elapsed

    def localstack_s(wiring, model_path: Path) -> tuple[float, dict]:
        envelope = new_run(request(wiring.store, model_path))
        started = time.perf_counter()
        wiring.publisher.publish([envelope])
        while not wiring.store.exists(keys.summary(envelope.run_id)):
            time.sleep(0.2)
        elapsed = time.perf_counter() - started
        summary = json.loads(wiring.store.get_bytes(keys.summary(envelope.run_id)))
        assert summary["status"] == "complete", summary["failures"]
        return elapsed, summary

    caps = {"AYCI_MEASURE_TIME_CAP_S": "2", "AYCI_MEASURE_MIN_ITERATIONS": "10"}
    env = cloud.service_env(outputs, prefix, caps)
    processes = cloud.ServiceProcesses(env=env, log_dir=Path(tempfile.mkdtemp()))
    processes.start_all()
    embedded_runs, localstack_runs = [], []
    try:
        os.environ.update(
            {"AYCI_BUCKET": outputs.bucket, "AYCI_BUS_NAME": outputs.bus_name, "AYCI_QUEUE_PREFIX": prefix}
        )
        wiring = aws(Settings())
        processes.wait_started()  # every worker imported (the converter warmed up) and polling
        for model_path in model_paths:
            embedded_runs.append(embedded_s(model_path))
            elapsed, summary = localstack_s(wiring, model_path)
            localstack_runs.append(elapsed)
            print(
                f"  small run: embedded {embedded_runs[-1]:.1f} s, LocalStack {elapsed:.1f} s",
                file=sys.stderr,
                flush=True,
            )
        resubmitted_localstack_s = resubmission_s(
            wiring.store, wiring.publisher, model_paths[0], summary["results"][0], poll=0.05
        )
    finally:
        processes.stop_all()
    with tempfile.TemporaryDirectory() as tmp:
        app = embedded(Settings(data_dir=Path(tmp)))
        resubmitted_embedded_s = resubmission_s(
            app.store, app.publisher, model_paths[0], summary["results"][0], drive=app.bus.run_until_idle
        )
    embedded_median, localstack_median = statistics.median(embedded_runs), statistics.median(localstack_runs)
    return {
        "embedded_runs": embedded_runs,
        "localstack_runs": localstack_runs,
        "embedded_s": embedded_median,
        "localstack_s": localstack_median,
        "ratio": localstack_median / embedded_median,
        "resubmitted_embedded_s": resubmitted_embedded_s,
        "resubmitted_localstack_s": resubmitted_localstack_s,
    }


RESUBMITTED_MATRIX = {
    "optimizers": {"intel": ["base", "onnx", "tvm"], "arm": ["base", "onnx", "tvm"]},
    "batch_sizes": list(range(1, 17)),
    "memory_sizes_mb": list(range(1024, 2048, 64)),
}  # 6 x 16 x 16 = 1,536


def resubmission_s(store, publisher, model_path: Path, example: dict, drive=None, poll: float = 0.01) -> float:
    """Seed a stored result for each of 1,536 combinations (copies of `example`) and the pack
    the run that measured them would have left, submit the matrix without force, and time it
    to its summary."""
    from concurrent.futures import ThreadPoolExecutor
    from datetime import UTC, datetime

    from core.results import pack_results
    from schemas.combos import Matrix, combo_key
    from schemas.events import RequestSubmitted
    from services.request.submission import new_run, store_model

    model = store_model(store, model_path, "image_classification", [32, 32])
    matrix = Matrix.model_validate(RESUBMITTED_MATRIX)
    seed_run = f"seed-{uuid.uuid4().hex[:8]}"

    def seed(combo) -> tuple[str, dict]:
        key = combo_key(model, combo)
        document = {**example, "combo": combo.model_dump(mode="json"), "combo_key": key, "run_id": seed_run}
        store.put_bytes(keys.result_version(key, seed_run), json.dumps(document).encode())
        store.put_bytes(keys.result(key), json.dumps(document).encode())
        return keys.result_version(key, seed_run), document

    with ThreadPoolExecutor(max_workers=16) as pool:
        seeded = dict(pool.map(seed, matrix.combos()))
    # as the archiver leaves an archived run that measured them: its pack of results
    pack_results(store, model.sha256, seed_run, datetime.now(UTC), seeded)
    envelope = new_run(RequestSubmitted(model=model, matrix=matrix))
    started = time.perf_counter()
    publisher.publish([envelope])
    if drive is not None:
        drive()
    while not store.exists(keys.summary(envelope.run_id)):
        time.sleep(poll)
    elapsed = time.perf_counter() - started
    summary = json.loads(store.get_bytes(keys.summary(envelope.run_id)))
    assert (
        summary["status"] == "complete"
        and len(summary["results"]) == 1536
        and all(r["reused"] for r in summary["results"])
    )
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3, help="small runs on each path, in turns")
    args = parser.parse_args()
    cloud.use_localstack()
    cloud.start_localstack()
    prefix = f"bench{uuid.uuid4().hex[:4]}"
    outputs = cloud.deploy(prefix)
    try:
        transport = bench_events(prefix, outputs, args.events)
        from workloads.examples import export_example

        folder = Path(tempfile.mkdtemp())
        # distinct models doing the same work: the example ResNet-18 with 1000, 999, ... classes
        models = [
            export_example("image_classification", [32, 32], folder / f"tiny-{i}.pt2", num_classes=1000 - i)
            for i in range(args.repeats)
        ]
        walls = small_run_wall_times(prefix, outputs, models)
    finally:
        delete_stack(prefix, empty_bucket=True)
    print(
        f"EventBridge -> SQS: {transport['put_events_per_s']:.0f} events/s put, {transport['receive_per_s']:.0f} "
        f"msg/s received ({transport['received']}/{transport['events']})"
    )
    print(
        f"hop PutEvents -> received (single events): p50 {transport['hop_ms_p50']:.1f} ms, p99 "
        f"{transport['hop_ms_p99']:.1f} ms"
    )
    print(
        f"latency within a burst of {transport['events']}: p50 {transport['burst_latency_ms_p50']:.0f} ms, p99 "
        f"{transport['burst_latency_ms_p99']:.0f} ms"
    )
    runs = ", ".join(
        f"{e:.1f}/{ls:.1f}" for e, ls in zip(walls["embedded_runs"], walls["localstack_runs"], strict=True)
    )
    print(
        f"same small run, {len(walls['embedded_runs'])} times each in turns (embedded/LocalStack s: {runs}): "
        f"median LocalStack {walls['localstack_s']:.1f} s vs embedded {walls['embedded_s']:.1f} s -> ratio "
        f"{walls['ratio']:.2f}x"
    )
    print(
        f"resubmitted 1,536-combination matrix, everything stored: embedded {walls['resubmitted_embedded_s']:.2f} s "
        "(goal <= 1), "
        f"LocalStack {walls['resubmitted_localstack_s']:.2f} s (goal <= 3)"
    )
    verdict = "transport overhead small" if walls["ratio"] <= 1.25 else "transport overhead significant"
    print(f"verdict: {verdict} (ratio {walls['ratio']:.2f}, goal <= 1.25)")


if __name__ == "__main__":
    main()
