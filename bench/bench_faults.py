"""The fault suite on LocalStack: every run ends, nothing is lost or done twice, one email per run.

    .venv/bin/python bench/bench_faults.py

One stack, one process per service (`python -m services.<name>`), a tiny ResNet-18 (ONNX
Runtime, batch 1, 1,769 MB unless said). Scenarios:
- every event delivered 3x (every publisher sends each event three times)
- poison messages (not JSON, `[]`, `null`, an unknown type, a v1 payload missing fields) in every queue, beside a run
- SIGKILL of each service process mid-run (restarted at once, as a supervisor would)
- a dead-lettered `RunPlanned` (its message put straight into the archiver's DLQ)
- an all-failed run (its model was never stored)
- 20 concurrent runs of one model (2 memory sizes each: one conversion, 2 measurements, the rest reused)

For each: runs ended, results lost (an `InferenceDone` in the run's log whose result is not in
its summary), duplicate results (a combination measured twice in one run), emails per run
(SES's own record), conversions per artifact (from the converters' logs).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import boto3

from ayci.bootstrap import aws
from ayci.settings import Settings
from infra import localstack as cloud
from infra.stack import DEFAULT_SENDER, delete_stack
from schemas import keys
from schemas.combos import Matrix, combo_key
from schemas.events import RequestSubmitted, RunPlanned
from services.request.submission import new_run, store_model

POISON = [
    "{not json",
    "[]",
    "null",
    json.dumps({"detail": {"type": "Mystery", "schema_version": 1}}),
    json.dumps(
        {
            "detail": {
                "event_id": "e",
                "type": "RequestSubmitted",
                "schema_version": 1,
                "run_id": "r",
                "time": "2026-01-01T00:00:00Z",
                "producer": "x",
                "payload": {"model": {}},
            }
        }
    ),
]
RUN_TIMEOUT_S = 600


class Suite:
    def __init__(self, model_path: Path, work: Path) -> None:
        self.prefix = f"f{uuid.uuid4().hex[:6]}"
        self.outputs = cloud.deploy(self.prefix)
        self.env = cloud.service_env(
            self.outputs, self.prefix, {"AYCI_MEASURE_TIME_CAP_S": "1", "AYCI_MEASURE_MIN_ITERATIONS": "5"}
        )
        for name in ("AYCI_BUCKET", "AYCI_BUS_NAME", "AYCI_QUEUE_PREFIX"):
            __import__("os").environ[name] = self.env[name]
        self.work = work
        self.model_path = model_path
        self.rows = []

    def processes(self, name: str, extra_env: dict | None = None) -> cloud.ServiceProcesses:
        processes = cloud.ServiceProcesses(env={**self.env, **(extra_env or {})}, log_dir=self.work / name)
        processes.start_all()
        return processes

    def submit(self, wiring, *, memory=(1769,), batch=1, email: str, model=None, force=False) -> tuple[str, list[str]]:
        model = model or store_model(wiring.store, self.model_path, "image_classification", [32, 32])
        request = RequestSubmitted(
            model=model,
            matrix=Matrix(optimizers={"intel": ["onnx"]}, batch_sizes=[batch], memory_sizes_mb=list(memory)),
            email=email,
            force=force,
        )
        envelope = new_run(request)
        wiring.publisher.publish([envelope])
        return envelope.run_id, [combo_key(model, c) for c in request.matrix.combos()]

    def wait(self, store, run_ids: list[str], processes: cloud.ServiceProcesses) -> None:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while time.monotonic() < deadline and not all(store.exists(keys.summary(r)) for r in run_ids):
            processes.restart_dead()
            time.sleep(1)

    def measure(self, scenario: str, store, run_ids: list[str], processes: cloud.ServiceProcesses) -> None:
        time.sleep(5)  # let the emails and any duplicates drain
        ended = [r for r in run_ids if store.exists(keys.summary(r))]
        lost = duplicates = 0
        for run_id in ended:
            summary = json.loads(store.get_bytes(keys.summary(run_id)))
            in_summary = {r["combo_key"] for r in summary["results"]}
            done = {
                json.loads(store.get_bytes(k))["payload"]["combo_key"]
                for k in store.list_keys(keys.event_log_prefix(run_id))
                if "-InferenceDone-" in k
            }
            lost += len(done - in_summary)
        measured, converted = Counter(), Counter()
        for log in processes.log_dir.glob("*.log"):
            for line in log.read_text(errors="replace").splitlines():
                if '"measurement_done"' in line:
                    entry = json.loads(line)
                    measured[(entry.get("run_id"), entry.get("combo_key"))] += 1
                if '"conversion_done"' in line:
                    converted[json.loads(line).get("artifact_key")] += 1
        duplicates = sum(n - 1 for (run_id, _), n in measured.items() if run_id in run_ids and n > 1)
        emails = Counter()
        sent = json.loads(
            urllib.request.urlopen(
                f"{cloud.LOCALSTACK_ENV['AWS_ENDPOINT_URL']}/_aws/ses?email={DEFAULT_SENDER}", timeout=10
            ).read()
        )["messages"]
        for message in sent:
            for run_id in run_ids:
                if run_id[:8] in message["Subject"]:
                    emails[run_id] += 1
        per_run = [emails[r] for r in run_ids]
        self.rows.append(
            {
                "scenario": scenario,
                "runs": len(run_ids),
                "ended": len(ended),
                "lost": lost,
                "duplicates": duplicates,
                "emails per run": f"{min(per_run)}-{max(per_run)}" if per_run else "-",
                "conversions per artifact": max(converted.values()) if converted else 0,
            }
        )
        print(self.rows[-1], flush=True)

    def scenario(self, name: str, run, extra_env: dict | None = None, settings: Settings | None = None) -> None:
        processes = self.processes(name.replace(" ", "-"), extra_env)
        try:
            wiring = aws(settings or Settings())
            run_ids = run(wiring, processes)
            self.wait(wiring.store, run_ids, processes)
            self.measure(name, wiring.store, run_ids, processes)
        finally:
            processes.stop_all()


def main() -> None:
    cloud.use_localstack()
    cloud.start_localstack()
    from workloads.examples import export_example

    work = Path(tempfile.mkdtemp(prefix="bench-faults-"))
    model = export_example("image_classification", [32, 32], work / "tiny.pt2")
    suite = Suite(model, work)
    sqs = boto3.client("sqs")
    try:
        suite.scenario(
            "every event delivered 3x",
            lambda w, p: [suite.submit(w, email="x3@example.com", force=True)[0]],
            {"AYCI_PUBLISH_COPIES": "3"},
            Settings(publish_copies=3),
        )

        def poison(wiring, processes):
            for url in suite.outputs.queue_urls.values():
                for body in POISON:
                    sqs.send_message(QueueUrl=url, MessageBody=body)
            return [suite.submit(wiring, email="poison@example.com", force=True)[0]]

        suite.scenario("poison messages", poison)

        def kills(wiring, processes):
            runs = []
            for batch, victim in enumerate(("dedup", "converter", "inference-intel", "archiver", "notifier"), start=3):
                # a batch size of its own: a fresh conversion and measurements for the kill to interrupt
                run_id, _ = suite.submit(wiring, email=f"kill-{victim}@example.com", batch=batch, memory=(1769, 3538))
                time.sleep(4)
                processes.kill(victim)
                processes.restart_dead()
                runs.append(run_id)
            return runs

        suite.scenario("SIGKILL of each service mid-run", kills)

        def dead_plan(wiring, processes):
            model = store_model(wiring.store, suite.model_path, "image_classification", [32, 32])
            request = RequestSubmitted(
                model=model,
                matrix=Matrix(optimizers={"intel": ["onnx"]}, batch_sizes=[1], memory_sizes_mb=[1769]),
                email="deadplan@example.com",
            )
            start = new_run(request)
            from datetime import UTC, datetime, timedelta

            plan = RunPlanned(
                model=model,
                combos={combo_key(model, c): c for c in request.matrix.combos()},
                deadline=datetime.now(UTC) + timedelta(hours=1),
                request=request,
            )
            body = json.dumps(
                {
                    "detail-type": "RunPlanned",
                    "detail": json.loads(start.caused(plan, producer="dedup", index=0).to_json()),
                }
            )
            dlq = sqs.get_queue_url(QueueName=f"{suite.prefix}-archiver-dlq")["QueueUrl"]
            sqs.send_message(
                QueueUrl=dlq,
                MessageBody=body,
                MessageAttributes={"reason": {"DataType": "String", "StringValue": "AccessDenied: sqs:GetQueueUrl"}},
            )
            return [start.run_id]

        suite.scenario("a dead-lettered RunPlanned", dead_plan)

        def all_failed(wiring, processes):
            model = store_model(wiring.store, suite.model_path, "image_classification", [32, 32]).model_copy(
                update={"sha256": "e" * 64}
            )
            return [suite.submit(wiring, email="allfailed@example.com", model=model)[0]]

        suite.scenario("an all-failed run", all_failed)

        def concurrent(wiring, processes):
            processes.start("converter-2", "converter")  # two converters: the lease keeps it to one conversion
            return [suite.submit(wiring, email=f"c{i}@example.com", batch=2, memory=(1769, 3538))[0] for i in range(20)]

        suite.scenario("20 concurrent runs of one model", concurrent)
    finally:
        delete_stack(suite.prefix, empty_bucket=True)
    columns = ["scenario", "runs", "ended", "lost", "duplicates", "emails per run", "conversions per artifact"]
    print()
    print(" | ".join(columns))
    print(" | ".join("---" for _ in columns))
    for row in suite.rows:
        print(" | ".join(str(row[c]) for c in columns))


if __name__ == "__main__":
    main()
