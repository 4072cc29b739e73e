"""Following a run to its end with its progress shown: on the embedded default (driving the
in-process bus, with a tuning bar while TVM tunes), or on the real path (LocalStack, one
process per service), reading the store."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ayci.cli.console import UsageError, err
from ayci.cli.runlog import listening
from ayci.settings import Settings
from core.ports import NotFound
from core.racing import answer_lines, fingerprint, is_shown
from schemas import keys
from schemas.documents import RunSummary

TUNING_PROGRESS = "tvm.tuning.progress"  # structlog event of the TVM engine: trials_done, trials_total, best_ms
EXIT_STATUS = {"complete": 0, "partial": 0, "failed": 2}


def progress_bar() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[note]}"),
        TimeElapsedColumn(),
        console=err,
    )


class TuningBar:
    """A bar of the tuning under way: trials done of those asked, the best latency so far.
    Fed by `tvm.tuning.progress` events; a search that starts over (fewer trials done) is a new one."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task = None
        self.done = 0

    def update(self, event: dict) -> None:
        done, total, best = event.get("trials_done") or 0, event.get("trials_total"), event.get("best_ms")
        what = event.get("combination") or event.get("label") or event.get("task") or ""
        description = f"  tuning {what}".rstrip()
        note = f"best {best:.3f} ms" if isinstance(best, int | float) else ""
        if self.task is None or done < self.done:
            if self.task is not None:
                self.progress.remove_task(self.task)
            self.task = self.progress.add_task(description, total=total, note=note)
        self.done = done
        self.progress.update(self.task, completed=done, total=total, description=description, note=note)


class RunningAnswer:
    """Prints a racing run's running answer (`runs/{id}/answer.json`) above the bars: from the first
    (provisional) answer on, and again whenever its stage or a pick changes (`core/racing.fingerprint`)."""

    def __init__(self, store, run_id: str, progress: Progress) -> None:
        self.store, self.run_id, self.progress = store, run_id, progress
        self.shown: tuple | None = None

    def check(self) -> dict | None:
        try:
            answer = json.loads(self.store.get_bytes(keys.answer(self.run_id)))
        except NotFound:
            return None
        if answer.get("stage") == "final" or not is_shown(answer):  # the report shows the final one
            return answer
        seen = fingerprint(answer)
        if seen != self.shown:
            self.shown = seen
            for line in answer_lines(answer):
                self.progress.console.print(line, highlight=False, soft_wrap=True)
        return answer


def follow_embedded(app, run_id: str, total: int, what: str) -> RunSummary:
    """Drive the run whose first events are published on the embedded default, with progress
    shown; returns its summary."""
    err.print(f"run {run_id}: {total} combinations of {what}", highlight=False, soft_wrap=True)
    with progress_bar() as progress:
        task = progress.add_task("planning", total=total, note="")
        answer = RunningAnswer(app.store, run_id, progress)

        def observe(queue: str, event) -> None:
            answer.check()  # the event delivered before may have changed it (the first answer, a refinement)
            combo = getattr(event.payload, "combo", None)
            if event.type == "ComboPending":
                progress.update(task, description=f"converting {combo.label}")
            elif event.type == "ModelConverted":
                refine = getattr(event.payload, "refine", False)
                progress.update(task, description=f"{'refining' if refine else 'measuring'} {combo.label}")
            elif event.type in ("InferenceDone", "ComboFailed", "CombosReused") and queue == "archiver":
                count = len(event.payload.results) if event.type == "CombosReused" else 1
                done = progress.tasks[0].completed + count
                # a predicted pick being checked adds one
                progress.update(task, advance=count, total=max(progress.tasks[0].total, done))

        app.bus.observers.append(observe)
        with listening(TUNING_PROGRESS, TuningBar(progress).update):
            app.bus.run_until_idle()
    return RunSummary.read(app.store.get_bytes(keys.summary(run_id)))


@contextlib.contextmanager
def localstack_services(stack: str, settings: Settings) -> Iterator[tuple]:
    """Start LocalStack, deploy the stack, start one process per service; yields the AWS
    wiring to submit with (settings naming the stack, passed explicitly: the environment is
    left alone), and stops the processes afterwards."""
    from ayci.bootstrap import aws
    from infra import localstack as cloud

    err.print("starting LocalStack and deploying the stack")
    cloud.start_localstack()
    outputs = cloud.deploy(stack)
    extra = {"AYCI_INTEL_CPU": settings.intel_cpu} if settings.intel_cpu else None
    processes = cloud.ServiceProcesses(
        env=cloud.service_env(outputs, stack, extra), log_dir=settings.data_dir.parent / "logs"
    )
    # an arm worker too: on x86 it measures arm combinations as emulated aarch64 code
    processes.start_all(inference_hardware=("intel", "arm"))
    try:
        yield aws(stack_settings(settings, outputs, stack), cloud.LOCALSTACK), processes
    finally:
        processes.stop_all()
        err.print(f"service logs: {processes.log_dir}")
        if processes.restarts:
            err.print(f"restarted after dying: {', '.join(f'{n} x{c}' for n, c in processes.restarts.items())}")
        err.print(
            f"LocalStack is still running ({cloud.LOCALSTACK_ENV['AWS_ENDPOINT_URL']}, stack {stack!r}, "
            "kept for the next run): stop it with `scripts/localstack.sh stop`"
        )


def stack_settings(settings: Settings, outputs, stack: str) -> Settings:
    """`settings` pointed at a deployed stack (its bucket, bus and queues)."""
    return settings.model_copy(update={"bucket": outputs.bucket, "bus_name": outputs.bus_name, "queue_prefix": stack})


def follow_store(store, run_id: str, combo_keys: list[str], timeout_s: float, processes=None) -> RunSummary:
    """Wait for a run on the real path, showing its progress (one listing of its outcomes a
    second); returns its summary. A service process that dies is restarted."""
    err.print(f"run {run_id}: {len(combo_keys)} combinations", highlight=False, soft_wrap=True)
    deadline = time.monotonic() + timeout_s
    with progress_bar() as progress:
        task = progress.add_task("running on LocalStack", total=len(combo_keys), note="")
        answer = RunningAnswer(store, run_id, progress)
        while not store.exists(keys.summary(run_id)):
            answer.check()
            if time.monotonic() > deadline:
                raise UsageError(f"run {run_id} did not end within --timeout {timeout_s:.0f} s")
            progress.update(task, completed=keys.outcomes_in(store.list_keys(keys.outcomes_prefix(run_id))))
            for name in processes.restart_dead() if processes is not None else []:
                err.print(f"[yellow]{name} died: restarted it (log: {processes.log_dir / (name + '.log')})[/yellow]")
            time.sleep(1)
        progress.update(task, completed=len(combo_keys))
    return RunSummary.read(store.get_bytes(keys.summary(run_id)))
