"""The real path on this machine: LocalStack, the stack from `infra/template.yaml`, and one
process per service. Used by `python -m ayci run --localstack`, the integration tests and
`bench/`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from adapters.aws import AwsEndpoint
from adapters.aws_calls import CALLER_ENV
from core.topology import SERVICES
from infra.stack import StackOutputs, deploy_stack

REPO_ROOT = Path(__file__).resolve().parents[1]
LOCALSTACK_ENV = {
    "AWS_ENDPOINT_URL": "http://127.0.0.1:4566",
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def start_localstack() -> None:
    """Install (once) and start LocalStack; returns when it is ready."""
    subprocess.run([str(REPO_ROOT / "scripts/localstack.sh"), "install"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([str(REPO_ROOT / "scripts/localstack.sh"), "start"], check=True, stdout=subprocess.DEVNULL)


LOCALSTACK = AwsEndpoint(
    LOCALSTACK_ENV["AWS_ENDPOINT_URL"],
    LOCALSTACK_ENV["AWS_DEFAULT_REGION"],
    LOCALSTACK_ENV["AWS_ACCESS_KEY_ID"],
    LOCALSTACK_ENV["AWS_SECRET_ACCESS_KEY"],
)


def use_localstack() -> None:
    """Point this whole process at LocalStack through its environment (tests and benches; the
    CLI passes `LOCALSTACK` to its clients instead)."""
    for name, value in LOCALSTACK_ENV.items():
        os.environ.setdefault(name, value)


def service_env(outputs: StackOutputs, prefix: str, extra: dict | None = None) -> dict[str, str]:
    """The environment a service process needs to find its stack."""
    return {
        **os.environ,
        **LOCALSTACK_ENV,
        "AYCI_BUCKET": outputs.bucket,
        "AYCI_BUS_NAME": outputs.bus_name,
        "AYCI_QUEUE_PREFIX": prefix,
        "AYCI_LOG_FORMAT": "json",
        "PYTHONPATH": str(REPO_ROOT),
        **(extra or {}),
    }


@dataclass
class ServiceProcesses:
    """Service processes (`python -m services.<name>`) started and stopped together."""

    env: dict[str, str]
    log_dir: Path
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    specs: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)

    def start(self, name: str, service: str | None = None, args: list[str] | None = None) -> subprocess.Popen:
        service = service or name
        self.specs[name] = (service, list(args or []))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 (the service process writes to it all its life)
        # the function this process stands for on AWS, for the record of its AWS calls (adapters/aws_calls.py)
        args = list(args or [])
        caller = f"{service}-{args[args.index('--hardware') + 1]}" if "--hardware" in args else service
        process = subprocess.Popen(
            [sys.executable, "-m", f"services.{service}", *args],
            cwd=REPO_ROOT,
            env={**self.env, CALLER_ENV: caller},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes[name] = process
        return process

    def start_all(self, inference_hardware: tuple[str, ...] = ("intel",)) -> None:
        """Every service of the topology; a service per hardware once per `inference_hardware`."""
        for spec in SERVICES:
            for name, args in spec.processes(inference_hardware):
                self.start(name, spec.name, args)

    def wait_started(self, timeout: float = 120) -> None:
        """Until every process has started polling its queues (logged `worker_started`)."""
        deadline = time.monotonic() + timeout
        waiting = list(self.processes)
        while waiting:
            waiting = [name for name in waiting if "worker_started" not in self.log_text(name)]
            if waiting and time.monotonic() > deadline:
                raise TimeoutError(f"service processes not polling after {timeout:.0f} s: {', '.join(waiting)}")
            time.sleep(0.2)

    def restart_dead(self) -> list[str]:
        """Start again every process that exited (as docker-compose's restart policy does);
        the names restarted. Its message, if it was handling one, comes back from SQS."""
        restarted = []
        for name, process in list(self.processes.items()):
            if process.poll() is not None:
                service, args = self.specs[name]
                self.start(name, service, args)
                self.restarts[name] = self.restarts.get(name, 0) + 1
                restarted.append(name)
        return restarted

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        process = self.processes[name]
        os.killpg(process.pid, sig)
        process.wait(timeout=30)

    def stop_all(self, timeout: float = 30) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in self.processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def log_text(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""


def deploy(prefix: str = "ayci") -> StackOutputs:
    return deploy_stack(stack_name=prefix, prefix=prefix, endpoint_url=LOCALSTACK.url)
