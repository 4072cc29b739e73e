"""The Locust side of `ayci loadtest` (run headless by `loadtest.py`, never on its own):
users that each send a stored request body to one of the endpoint's models at `PER_USER_RPS`
on average (exponential gaps, so the users together arrive as Poisson traffic), as many users
as the shape's rate asks at each moment (`loadtest.rate_at`: steady, or spiky with bursts),
and one line per request (sent at, model, status, latency, cold load) in the log it is given.
Bounded: the shape stops at the duration, the runner quits past the request limit."""

import csv
import os
import random
from pathlib import Path

from locust import FastHttpUser, LoadTestShape, events, task

from serving.loadtest import LoadPlan, users_at

PLAN = LoadPlan.from_env(os.environ)
SPAWN_RATE = 1000  # users started or stopped a second: a burst begins and ends at once
BODIES = {path.stem: path.read_bytes() for path in sorted(Path(os.environ["AYCI_LOAD_BODIES"]).glob("*.npz"))}
_log_file = open(os.environ["AYCI_LOAD_LOG"], "w", newline="")  # noqa: SIM115 (open while Locust runs)
_log = csv.writer(_log_file)
_log.writerow(["sent_at", "model", "status", "latency_ms", "cold"])
_sent = 0


@events.request.add_listener
def _record(
    request_type,
    name,
    response_time,
    response_length,
    response=None,
    context=None,
    exception=None,
    start_time=None,
    **_,
):
    global _sent
    _sent += 1
    status = getattr(response, "status_code", 0) or 0
    cold = (response.headers.get("x-cold-load") == "1") if response is not None and response.headers else False
    _log.writerow([f"{start_time:.6f}", name.rsplit("/", 1)[-1], status, f"{response_time:.3f}", int(cold)])
    if _sent >= PLAN.max_requests and context is not None:
        context["runner"].quit()


@events.quitting.add_listener
def _close(**_):
    _log_file.flush()
    _log_file.close()


class EndpointUser(FastHttpUser):
    def wait_time(self):
        return random.expovariate(PLAN.per_user_rps)

    def on_start(self):
        self.wait()  # a user's first request comes after a gap too: spawned together, users do not arrive together

    def context(self) -> dict:
        return {"runner": self.environment.runner}

    @task
    def invoke(self):
        model = random.choice(list(BODIES))
        with self.client.post(
            f"/invocations/{model}",
            data=BODIES[model],
            headers={"content-type": "application/x-npz"},
            catch_response=True,
        ) as response:
            if response.status_code == 200:
                response.success()
            else:
                response.failure(f"HTTP {response.status_code}")


class TrafficShape(LoadTestShape):
    def tick(self):
        users = users_at(PLAN, self.get_run_time())
        return None if users is None else (users, SPAWN_RATE)
