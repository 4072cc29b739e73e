"""The one wiring point: services, their handlers and deps, and the transport they run on.

`embedded(settings)` is the default: every service in this process, an in-process bus and a
local-folder store. The AWS path (`adapters.aws`) wires the same services to
EventBridge + SQS, S3 and SES.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from adapters.inprocess_bus import InProcessBus
from adapters.local_store import LocalFolderStore
from ayci.settings import Settings
from core.ports import Mailer, ObjectStore
from core.runtime import LoggedPublisher, Service, ServiceRunner
from core.topology import SERVICES
from services.archiver import handlers as archiver
from services.converter import handlers as converter
from services.dedup import handlers as dedup
from services.inference import handlers as inference
from services.notifier import handlers as notifier

# service name -> the queues it consumes (from the topology)
QUEUES: dict[str, tuple[str, ...]] = {spec.name: spec.queues for spec in SERVICES}


def build_service(
    name: str, store: ObjectStore, settings: Settings, mailer: Mailer | None = None, now=None, parts: dict | None = None
) -> Service:
    """One service with its handlers and the deps they need. `parts` replaces deps by name
    (tests pass fakes: `{"inference": {"measure": fake}}`)."""
    if name == "dedup":
        deps = dedup.DedupDeps(store=store, target_cpu=settings.target_cpu)
    elif name == "converter":
        deps = converter.ConverterDeps(
            store=store,
            reference_timeout_s=settings.reference_timeout_s,
            reference_memory_mb=settings.reference_memory_mb,
        )
    elif name == "inference":
        deps = inference.InferenceDeps(
            store=store, time_cap_s=settings.measure_time_cap_s, min_iterations=settings.measure_min_iterations
        )
    elif name == "archiver":
        deps = archiver.ArchiverDeps(store=store, target_cpu=settings.target_cpu, **({"now": now} if now else {}))
    elif name == "notifier":
        deps = notifier.NotifierDeps(store=store, mailer=mailer, results_url=settings.results_url)
    else:
        raise ValueError(f"unknown service {name!r}")
    handlers = {
        "dedup": dedup,
        "converter": converter,
        "inference": inference,
        "archiver": archiver,
        "notifier": notifier,
    }[name].HANDLERS
    return Service(name, handlers, replace(deps, **(parts or {}).get(name, {})))


@dataclass
class EmbeddedApp:
    store: ObjectStore
    bus: InProcessBus
    publisher: LoggedPublisher
    runners: dict[str, ServiceRunner]


def embedded(
    settings: Settings, mailer: Mailer | None = None, *, store: ObjectStore | None = None, parts: dict | None = None
) -> EmbeddedApp:
    """Every service in this process on the in-process bus. Its real parts can be replaced:
    `store` (e.g. `adapters.memory_store.MemoryStore`), `mailer`, and any service dep by
    `parts` (the converter's `convert` and `compute_reference`, inference's `measure` and
    `runtime_for`, dedup's `target_cpu`...): the pipeline then runs in milliseconds
    (`tests/unit/test_pipeline.py`). The clock is the bus's (`bus.now`)."""
    store = store if store is not None else LocalFolderStore(settings.data_dir)
    bus = InProcessBus()
    publisher = LoggedPublisher(store, bus)
    bus.on_dead_letter = publisher.publish
    runners = {}
    for name, queues in QUEUES.items():
        runner = ServiceRunner(build_service(name, store, settings, mailer, now=bus.now, parts=parts), store, publisher)
        runners[name] = runner
        for queue in queues:
            bus.subscribe(queue, runner)
    return EmbeddedApp(store=store, bus=bus, publisher=publisher, runners=runners)


@dataclass
class AwsWiring:
    store: ObjectStore
    publisher: LoggedPublisher


def aws(settings: Settings) -> AwsWiring:
    """The real path: S3 for objects, EventBridge (+ SQS for delayed events) for events."""
    from adapters.aws import EventBridgePublisher, S3Store

    store = S3Store(settings.bucket)
    return AwsWiring(
        store=store,
        publisher=LoggedPublisher(
            store, EventBridgePublisher(settings.bus_name, settings.queue_prefix, copies=settings.publish_copies)
        ),
    )


def aws_runner(name: str, settings: Settings, wiring: AwsWiring | None = None) -> ServiceRunner:
    """One service wired to AWS (its queue worker or Lambda handler drives it)."""
    wiring = wiring or aws(settings)
    mailer = None
    if name == "notifier":
        from adapters.ses import SesMailer

        mailer = SesMailer(settings.sender_email)
    parts = {"inference": {"functions": measuring_functions(settings)}} if name == "inference" else None
    return ServiceRunner(
        build_service(name, wiring.store, settings, mailer, parts=parts), wiring.store, wiring.publisher
    )


def measuring_functions(settings: Settings):
    """The measuring Lambda functions the settings name (`AYCI_MEASURE_FUNCTION_INTEL` /
    `_ARM`), or None: then inference measures in its own worker, as locally."""
    functions = {"intel": settings.measure_function_intel, "arm": settings.measure_function_arm}
    if not any(functions.values()):
        return None
    from adapters.lambda_sizes import LambdaSizes

    return LambdaSizes(functions, settings.bucket, keep_idle_s=settings.measure_alias_keep_idle_s)
