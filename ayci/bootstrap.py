"""The one wiring point: services, their handlers and deps, and the transport they run on.

`embedded(settings)` is the default: every service in this process, an in-process bus and a
local-folder store. The AWS path (`adapters.aws`) wires the same services to
EventBridge + SQS, S3 and SES.
"""

from __future__ import annotations

from dataclasses import dataclass

from adapters.inprocess_bus import InProcessBus
from adapters.local_store import LocalFolderStore
from core.ports import Mailer, ObjectStore
from core.runtime import LoggedPublisher, Service, ServiceRunner
from core.topology import SERVICES
from ayci.settings import Settings
from services.archiver import handlers as archiver
from services.converter import handlers as converter
from services.dedup import handlers as dedup
from services.inference import handlers as inference
from services.notifier import handlers as notifier

# service name -> the queues it consumes (from the topology)
QUEUES: dict[str, tuple[str, ...]] = {spec.name: spec.queues for spec in SERVICES}


def build_service(name: str, store: ObjectStore, settings: Settings, mailer: Mailer | None = None, now=None) -> Service:
    """One service with its handlers and the deps they need."""
    if name == "dedup":
        return Service(name, dedup.HANDLERS, dedup.DedupDeps(store=store, target_cpu=settings.target_cpu))
    if name == "converter":
        return Service(name, converter.HANDLERS, converter.ConverterDeps(store=store, reference_timeout_s=settings.reference_timeout_s, reference_memory_mb=settings.reference_memory_mb))
    if name == "inference":
        return Service(name, inference.HANDLERS, inference.InferenceDeps(store=store, time_cap_s=settings.measure_time_cap_s, min_iterations=settings.measure_min_iterations))
    if name == "archiver":
        return Service(name, archiver.HANDLERS, archiver.ArchiverDeps(store=store, **({"now": now} if now else {})))
    if name == "notifier":
        return Service(name, notifier.HANDLERS, notifier.NotifierDeps(store=store, mailer=mailer, results_url=settings.results_url))
    raise ValueError(f"unknown service {name!r}")


@dataclass
class EmbeddedApp:
    store: LocalFolderStore
    bus: InProcessBus
    publisher: LoggedPublisher
    runners: dict[str, ServiceRunner]


def embedded(settings: Settings, mailer: Mailer | None = None) -> EmbeddedApp:
    store = LocalFolderStore(settings.data_dir)
    bus = InProcessBus()
    publisher = LoggedPublisher(store, bus)
    bus.on_dead_letter = publisher.publish
    runners = {}
    for name, queues in QUEUES.items():
        runner = ServiceRunner(build_service(name, store, settings, mailer, now=bus.now), store, publisher)
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
    return AwsWiring(store=store, publisher=LoggedPublisher(store, EventBridgePublisher(settings.bus_name, settings.queue_prefix, copies=settings.publish_copies)))


def aws_runner(name: str, settings: Settings, wiring: AwsWiring | None = None) -> ServiceRunner:
    """One service wired to AWS (its queue worker or Lambda handler drives it)."""
    wiring = wiring or aws(settings)
    mailer = None
    if name == "notifier":
        from adapters.ses import SesMailer

        mailer = SesMailer(settings.sender_email)
    return ServiceRunner(build_service(name, wiring.store, settings, mailer), wiring.store, wiring.publisher)
