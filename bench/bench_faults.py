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
- restart mid-run: every service process SIGKILLed at once while runs convert and measure, then
  all started again (nothing of theirs survives but what SQS and S3 hold)
- a dead-lettered archiving event: the archiver's EventBridge unreachable (its endpoint a closed
  port; LocalStack accepts PutEvents to any bus name, so a bad bus name fails nothing here), so the
  run's summary is written but `RunArchived` fails three times and the `InferenceDone` that
  archived it is dead-lettered; the archiver then restarted reachable: exactly one email
- raced limits (`python -m services.request` processes): 12 concurrent `POST /runs` of one owner
  against 2 runs in flight accept exactly 2; 40 concurrent posts of 5 combinations against a daily
  10 accept exactly 2; the accepted runs complete
- bombs (hostile uploads to the request service): an `.npz` of 1 GB of deflated zeros to `PUT
  /inputs`, a `.tar.xz` of 300,000 empty members, an ONNX zip bomb (2 GB of zeros) and a `.pt2`
  with a pickled constant as models: each answered 4xx with its reason, never 5xx

For each: runs ended (runs lost: not ended), results lost (an `InferenceDone` in the run's log
whose result is not in its summary), duplicate results (a combination measured twice in one run),
emails per run (SES's own record), conversions per artifact (from the converters' logs), runs
accepted over a limit and answers 5xx. The totals: 0 runs lost, 0 accepted over a limit, 0 answers
5xx, exactly 1 email per run.

    .venv/bin/python bench/bench_faults.py --scenarios restart,dead-archiving,limits,bombs
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import lzma
import os
import signal
import socket
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import boto3
import httpx

from ayci.bootstrap import aws
from ayci.settings import Settings
from infra import localstack as cloud
from infra.stack import DEFAULT_SENDER, delete_stack
from schemas import keys
from schemas.combos import Matrix, combo_key
from schemas.events import RequestSubmitted, RunPlanned
from services.request.submission import new_run, store_model
from tests.hostile_models import many_empty_members

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
REPO = Path(__file__).resolve().parents[1]
IMAGE_SIZE = [32, 32]
UNREACHABLE = "http://127.0.0.1:9"  # nothing listens on the discard port: every call fails to connect
SCENARIOS = (
    "x3",
    "poison",
    "kills",
    "dead-plan",
    "all-failed",
    "concurrent",
    "restart",
    "dead-archiving",
    "limits",
    "bombs",
)


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
        self.extra: dict = {}  # what the scenario under way adds to its row (over limit, 5xx, answers)

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
                "runs lost": len(run_ids) - len(ended),
                "lost": lost,
                "duplicates": duplicates,
                "emails per run": f"{min(per_run)}-{max(per_run)}" if per_run else "-",
                "one email each": all(n == 1 for n in per_run),
                "conversions per artifact": max(converted.values()) if converted else 0,
                "over limit": 0,
                "5xx": 0,
                "answers": "",
                **self.extra,
            }
        )
        print(self.rows[-1], flush=True)

    def scenario(self, name: str, run, extra_env: dict | None = None, settings: Settings | None = None) -> None:
        self.extra = {}
        processes = self.processes(name.replace(" ", "-"), extra_env)
        try:
            wiring = aws(settings or Settings())
            run_ids = run(wiring, processes)
            self.wait(wiring.store, run_ids, processes)
            self.measure(name, wiring.store, run_ids, processes)
        finally:
            processes.stop_all()

    def emails_for(self, run_id: str) -> int:
        sent = json.loads(
            urllib.request.urlopen(
                f"{cloud.LOCALSTACK_ENV['AWS_ENDPOINT_URL']}/_aws/ses?email={DEFAULT_SENDER}", timeout=10
            ).read()
        )["messages"]
        return sum(run_id[:8] in message["Subject"] for message in sent)

    def request_service(self, processes: cloud.ServiceProcesses, name: str, env: dict) -> str:
        """`python -m services.request` on a free port with `env` added; its URL once it answers."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        with_env(processes, env, lambda: processes.start(name, "request", ["--port", str(port)]))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/openapi.json", timeout=5).status_code == 200:
                    return url
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or processes.processes[name].poll() is not None:
                raise RuntimeError(f"the request service did not start: {processes.log_text(name)[-3000:]}")
            time.sleep(0.5)


def with_env(processes: cloud.ServiceProcesses, env: dict, start):
    """Start a process with `env` added to the processes' environment (restored after)."""
    kept = processes.env
    processes.env = {**kept, **env}
    try:
        return start()
    finally:
        processes.env = kept


def kill_all_at_once(processes: cloud.ServiceProcesses) -> int:
    """SIGKILL every service process (and its children) before waiting for any: the host
    crashed. How many were killed."""
    alive = [p for p in processes.processes.values() if p.poll() is None]
    for process in alive:
        os.killpg(process.pid, signal.SIGKILL)
    for process in alive:
        process.wait(timeout=30)
    return len(alive)


def wait_for(condition, timeout_s: float, what: str) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            print(f"  gave up waiting ({timeout_s:.0f} s) for {what}", flush=True)
            return False
        time.sleep(1)
    return True


class Client:
    """One owner of the request service over HTTP; counts every answer 5xx."""

    def __init__(self, url: str, key: str) -> None:
        self.url = url
        self.headers = {"X-API-Key": key}
        self.statuses: list[int] = []
        self._lock = threading.Lock()

    def call(self, method: str, path: str, **kwargs) -> httpx.Response:
        answer = httpx.request(method, f"{self.url}{path}", headers=self.headers, timeout=300, **kwargs)
        with self._lock:
            self.statuses.append(answer.status_code)
        return answer

    @property
    def answers_5xx(self) -> int:
        return sum(status >= 500 for status in self.statuses)

    def upload_model(self, data: bytes) -> httpx.Response:
        """Offer, presigned S3 POST, verify: the verify's answer (or the first refusal)."""
        sha = hashlib.sha256(data).hexdigest()
        offer = self.call("POST", "/models/uploads", json={"sha256": sha, "size_bytes": len(data)})
        if offer.status_code >= 300:
            return offer
        upload = offer.json()["upload"]
        if upload is None:  # already this owner's
            return offer
        sent = httpx.post(upload["url"], data=upload["fields"], files={"file": ("model", data)}, timeout=300)
        if sent.status_code >= 300:
            return sent
        return self.call("POST", f"/models/{sha}/verify", json={"size_bytes": len(data)})

    def post_run(self, data: bytes, batch_sizes: list[int], email: str) -> httpx.Response:
        body = {
            "model": {"sha256": hashlib.sha256(data).hexdigest(), "size_bytes": len(data)},
            "workload": "image_classification",
            "input_size": IMAGE_SIZE,
            "matrix": {"intel": ["onnx"]},
            "batch_sizes": batch_sizes,
            "memory_sizes_mb": [1769],
            "email": email,
        }
        return self.call("POST", "/runs", json=body)


def raced(client: Client, data: bytes, posts: int, batch_sizes: list[int], email: str) -> list[httpx.Response]:
    """`posts` concurrent `POST /runs`, released together."""
    gate = threading.Barrier(posts)

    def post(_):
        gate.wait()
        return client.post_run(data, batch_sizes, email)

    with ThreadPoolExecutor(posts) as pool:
        return list(pool.map(post, range(posts)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scenarios",
        default=",".join(SCENARIOS),
        help=f"comma-separated, of: {', '.join(SCENARIOS)} (default: all)",
    )
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.scenarios.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenarios: {', '.join(unknown)} (known: {', '.join(SCENARIOS)})")
    cloud.use_localstack()
    cloud.start_localstack()
    from workloads.examples import export_example

    work = Path(tempfile.mkdtemp(prefix="bench-faults-"))
    model = export_example("image_classification", IMAGE_SIZE, work / "tiny.pt2")
    suite = Suite(model, work)
    sqs = boto3.client("sqs")
    try:
        if "x3" in chosen:
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

        if "poison" in chosen:
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

        if "kills" in chosen:
            suite.scenario("SIGKILL of each service mid-run", kills)

        def dead_plan(wiring, processes):
            model = store_model(wiring.store, suite.model_path, "image_classification", IMAGE_SIZE)
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

        if "dead-plan" in chosen:
            suite.scenario("a dead-lettered RunPlanned", dead_plan)

        def all_failed(wiring, processes):
            model = store_model(wiring.store, suite.model_path, "image_classification", IMAGE_SIZE).model_copy(
                update={"sha256": "e" * 64}
            )
            return [suite.submit(wiring, email="allfailed@example.com", model=model)[0]]

        if "all-failed" in chosen:
            suite.scenario("an all-failed run", all_failed)

        def concurrent(wiring, processes):
            processes.start("converter-2", "converter")  # two converters: the lease keeps it to one conversion
            return [suite.submit(wiring, email=f"c{i}@example.com", batch=2, memory=(1769, 3538))[0] for i in range(20)]

        if "concurrent" in chosen:
            suite.scenario("20 concurrent runs of one model", concurrent)

        def restart(wiring, processes):
            # batch sizes of their own: fresh conversions and measurements for the crash to interrupt
            runs = [
                suite.submit(wiring, email=f"restart-{batch}@example.com", batch=batch, memory=(1769, 3538))[0]
                for batch in (8, 9)
            ]

            def under_way() -> bool:  # one combination converted (its measurement next), none archived
                logged = [k for r in runs for k in wiring.store.list_keys(keys.event_log_prefix(r))]
                return any("-ModelConverted-" in k for k in logged)

            wait_for(under_way, 300, "a conversion to finish")
            killed = kill_all_at_once(processes)
            archived = sum(wiring.store.exists(keys.summary(r)) for r in runs)
            print(f"  killed {killed} processes at once; {archived} of {len(runs)} runs archived before", flush=True)
            processes.restart_dead()
            suite.extra["answers"] = f"{killed} processes killed, {archived} runs ended before"
            return runs

        if "restart" in chosen:
            suite.scenario("restart mid-run (every process killed at once)", restart)

        def dead_archiving(wiring, processes):
            # the archiver again, its EventBridge unreachable: whatever it publishes fails (its
            # deadline, sent straight to SQS, does not)
            processes.kill("archiver")
            with_env(
                processes,
                {"AWS_ENDPOINT_URL_EVENTBRIDGE": UNREACHABLE},
                lambda: processes.start("archiver", "archiver"),
            )
            run_id, _ = suite.submit(wiring, email="deadarchive@example.com", batch=10)
            wait_for(lambda: wiring.store.exists(keys.summary(run_id)), RUN_TIMEOUT_S, "the summary")
            dead = wait_for(
                lambda: bool(wiring.store.list_keys("dead-letters/archiver/")), 300, "the archiving event's dead letter"
            )
            before = suite.emails_for(run_id)
            print(f"  summary written, archiving event dead-lettered: {dead}, emails so far: {before}", flush=True)
            processes.kill("archiver")  # restarted as it should be: its dead-letter watcher reports the letter
            processes.start("archiver", "archiver")
            wait_for(lambda: suite.emails_for(run_id) > 0, 300, "the email")
            suite.extra["answers"] = f"dead-lettered: {'yes' if dead else 'NO'}, emails before the restart: {before}"
            return [run_id]

        if "dead-archiving" in chosen:
            suite.scenario("a dead-lettered archiving event", dead_archiving)

        data = model.read_bytes()

        def limits(wiring, processes):
            keys_env = "inflight-key-0001:inflight,daily-key-00001:daily"
            in_flight_url = suite.request_service(
                processes,
                "request-in-flight",
                {"AYCI_API_KEYS": keys_env, "AYCI_MAX_RUNS_IN_FLIGHT": "2", "AYCI_MAX_COMBINATIONS_PER_DAY": "5000"},
            )
            daily_url = suite.request_service(
                processes,
                "request-daily",
                {"AYCI_API_KEYS": keys_env, "AYCI_MAX_RUNS_IN_FLIGHT": "100", "AYCI_MAX_COMBINATIONS_PER_DAY": "10"},
            )
            in_flight, daily = Client(in_flight_url, "inflight-key-0001"), Client(daily_url, "daily-key-00001")
            for client in (in_flight, daily):
                verified = client.upload_model(data)
                assert verified.status_code in (200, 201), verified.text
            first = raced(in_flight, data, 12, [1], "inflight@example.com")
            second = raced(daily, data, 40, [1, 2, 3, 4, 5], "daily@example.com")
            accepted = [[a for a in answers if a.status_code == 201] for answers in (first, second)]
            refused = [Counter(a.status_code for a in answers if a.status_code != 201) for answers in (first, second)]
            suite.extra.update(
                {
                    "over limit": max(0, len(accepted[0]) - 2) + max(0, len(accepted[1]) - 2),
                    "5xx": in_flight.answers_5xx + daily.answers_5xx,
                    "answers": (
                        f"2 in flight: {len(accepted[0])} of 12 accepted ({dict(refused[0])}); "
                        f"daily 10: {len(accepted[1])} of 40 x 5 accepted ({dict(refused[1])})"
                    ),
                }
            )
            print(f"  {suite.extra['answers']}", flush=True)
            return [a.json()["run_id"] for group in accepted for a in group]

        if "limits" in chosen:
            suite.scenario("raced limits", limits)

        def bombs(wiring, processes):
            url = suite.request_service(processes, "request-bombs", {"AYCI_API_KEYS": "bomber-key-00001:bomber"})
            client = Client(url, "bomber-key-00001")
            marker = work / "a-payload-ran"
            answers = {}
            npz_bomb = gzip.decompress((REPO / "tests/unit/fixtures/zeros_bomb.npz.gz").read_bytes())
            answers["npz bomb to PUT /inputs"] = client.call("PUT", "/inputs", content=npz_bomb)
            members = work / "many.tar.xz"
            if not members.exists():
                members.write_bytes(lzma.compress(many_empty_members(300_000), preset=1))
            answers["tar.xz of 300,000 members"] = client.upload_model(members.read_bytes())
            bombs_dir = work / "hostile"
            bombs_dir.mkdir(exist_ok=True)
            from tests.hostile_models import opaque_obj_pt2, zip_bomb

            answers["zip bomb (2 GB of zeros)"] = client.upload_model(
                zip_bomb(bombs_dir, marker, gigabytes=2).read_bytes()
            )
            answers["pickled .pt2 constant"] = client.upload_model(opaque_obj_pt2(bombs_dir, marker).read_bytes())
            for name, answer in answers.items():
                print(f"  {name}: {answer.status_code} {answer.text[:200]}", flush=True)
            not_4xx = sum(not 400 <= a.status_code < 500 for a in answers.values())
            suite.extra.update(
                {
                    "5xx": client.answers_5xx + sum(a.status_code >= 500 for a in answers.values()),
                    "answers": ", ".join(
                        f"{name} {a.status_code} in {a.elapsed.total_seconds():.1f} s" for name, a in answers.items()
                    )
                    + (f"; {not_4xx} not 4xx" if not_4xx else "")
                    + ("; A PAYLOAD RAN" if marker.exists() else ""),
                }
            )
            return []

        if "bombs" in chosen:
            suite.scenario("bombs (hostile uploads)", bombs)
    finally:
        delete_stack(suite.prefix, empty_bucket=True)
    columns = [
        "scenario",
        "runs",
        "ended",
        "lost",
        "duplicates",
        "emails per run",
        "conversions per artifact",
        "over limit",
        "5xx",
        "answers",
    ]
    print()
    print(" | ".join(columns))
    print(" | ".join("---" for _ in columns))
    for row in suite.rows:
        print(" | ".join(str(row[c]) for c in columns))
    totals = {
        "runs lost": sum(row["runs lost"] for row in suite.rows),
        "results lost": sum(row["lost"] for row in suite.rows),
        "accepted over a limit": sum(row["over limit"] for row in suite.rows),
        "answers 5xx": sum(row["5xx"] for row in suite.rows),
        "exactly 1 email per run": all(row["one email each"] for row in suite.rows),
    }
    print()
    print("totals: " + ", ".join(f"{name}: {value}" for name, value in totals.items()))
    good = (
        not totals["runs lost"]
        and not totals["accepted over a limit"]
        and not totals["answers 5xx"]
        and totals["exactly 1 email per run"]
    )
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
