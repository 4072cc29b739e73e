"""The one wiring point: services, their handlers and deps, the transport they run on, the
mailer, and the request service's deps.

`embedded(settings)` is the default: every service in this process, an in-process bus and a
local-folder store; `embedded_server(settings)` adds the request service's app on it (driven
by a worker thread). The AWS path (`aws`, `aws_runner`, `aws_request_deps`) wires the same
services to EventBridge + SQS, S3 and SES. Hosts (`ayci/serve.py`, `ayci/worker.py`,
`ayci/lambda_entry.py`, the CLI) only start what is built here.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:  # the request service's app (FastAPI) is imported by its hosts only, not by every worker
    from adapters.aws import AwsEndpoint
    from adapters.background_bus import BackgroundBus
    from services.request.app import RequestDeps, RequestLimits

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
            conversion_timeout_s=settings.conversion_timeout_s,
            conversion_memory_mb=settings.conversion_memory_mb,
        )
    elif name == "inference":
        deps = inference.InferenceDeps(
            store=store,
            time_cap_s=settings.measure_time_cap_s,
            min_iterations=settings.measure_min_iterations,
            disturbed_retry_s=settings.disturbed_retry_s,
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


def local_store(settings: Settings) -> ObjectStore:
    """The embedded default's store: the local folder `AYCI_DATA_DIR` (what the CLI reads finished runs from)."""
    return LocalFolderStore(settings.data_dir)


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
    store = store if store is not None else local_store(settings)
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


def aws(settings: Settings, endpoint: AwsEndpoint | None = None) -> AwsWiring:
    """The real path: S3 for objects, EventBridge (+ SQS for delayed events) for events; at
    `endpoint` (LocalStack) when given, else where the environment says."""
    from adapters.aws import EventBridgePublisher, S3Store, client

    store = S3Store(settings.bucket, client("s3", endpoint))
    publisher = EventBridgePublisher(
        settings.bus_name,
        settings.queue_prefix,
        copies=settings.publish_copies,
        events=client("events", endpoint),
        sqs=client("sqs", endpoint),
    )
    return AwsWiring(store=store, publisher=LoggedPublisher(store, publisher))


def aws_runner(name: str, settings: Settings, wiring: AwsWiring | None = None) -> ServiceRunner:
    """One service wired to AWS (its queue worker or Lambda handler drives it)."""
    wiring = wiring or aws(settings)
    mailer = ses_mailer(settings) if name == "notifier" else None
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


def ses_mailer(settings: Settings) -> Mailer:
    """The mailer on SES, sending from `AYCI_SENDER_EMAIL` (the one place it is built)."""
    from adapters.ses import SesMailer

    return SesMailer(settings.sender_email)


def mailer_for(settings: Settings) -> Mailer | None:
    """The embedded default's mailer: none, or SES (`AYCI_MAILER=ses`, at `AWS_ENDPOINT_URL`)."""
    if settings.mailer == "ses":
        return ses_mailer(settings)
    if settings.mailer != "none":
        raise ValueError(f"AYCI_MAILER must be none or ses, got {settings.mailer!r}")
    return None


def request_limits(settings: Settings) -> RequestLimits:
    """The request service's limits and links, from the settings."""
    from services.request.app import RequestLimits

    return RequestLimits(
        max_body_bytes=settings.max_body_bytes,
        max_model_bytes=settings.max_model_bytes,
        max_combinations=settings.max_combinations,
        results_url=settings.results_url,
        max_runs_in_flight=settings.max_runs_in_flight,
        max_combinations_per_day=settings.max_combinations_per_day,
        email_allowed=tuple(e.strip() for e in settings.email_allowed.split(",") if e.strip()),
    )


def api_keys_or_new(settings: Settings) -> tuple[dict[str, str], str | None]:
    """The configured API keys, or one new key for the owner `local` (returned second, to
    print) when none is configured."""
    from services.request.app import parse_api_keys

    keys = parse_api_keys(settings.api_keys)
    if keys:
        return keys, None
    key = secrets.token_urlsafe(18)
    return {key: "local"}, key


@dataclass
class EmbeddedServer:
    app: object  # the request service's FastAPI app
    services: EmbeddedApp
    driver: BackgroundBus
    new_key: str | None  # the API key made up because none was configured

    def stop(self) -> None:
        self.driver.stop()


def embedded_server(settings: Settings) -> EmbeddedServer:
    """`python -m ayci serve`: every service in this process, the in-process bus driven by a
    worker thread, a local folder, uploads to the app itself."""
    from adapters.background_bus import BackgroundBus
    from adapters.uploads import LocalUploader
    from services.archiver.recovery import recover
    from services.request.app import RequestDeps, create_app

    services = embedded(settings, mailer_for(settings))
    driver = BackgroundBus(services.bus).start()
    recover(services.store, LoggedPublisher(services.store, driver))  # a restart loses no run: re-drive the unfinished
    keys, new_key = api_keys_or_new(settings)
    deps = RequestDeps(
        store=services.store,
        publisher=LoggedPublisher(services.store, driver),
        api_keys=keys,
        uploader=LocalUploader(settings.data_dir.parent / "uploads"),
        limits=request_limits(settings),
    )
    return EmbeddedServer(app=create_app(deps), services=services, driver=driver, new_key=new_key)


def aws_request_deps(settings: Settings) -> RequestDeps:
    """The request service on the real path (`python -m services.request` against LocalStack,
    the Lambda behind API Gateway): S3, EventBridge, presigned S3 POST uploads."""
    from adapters.uploads import S3PresignedUploader
    from services.request.app import RequestDeps, parse_api_keys

    wiring = aws(settings)
    text = settings.api_keys
    if not text and settings.api_keys_secret:  # on AWS: out of the environment, read once at the start
        from adapters.secrets import secret_text

        text = secret_text(settings.api_keys_secret)
    keys = parse_api_keys(text)
    if not keys:
        raise ValueError(
            "AYCI_API_KEYS (or the secret AYCI_API_KEYS_SECRET names) is empty: "
            "the request service needs at least one KEY:OWNER"
        )
    return RequestDeps(
        store=wiring.store,
        publisher=wiring.publisher,
        api_keys=keys,
        uploader=S3PresignedUploader(settings.bucket),
        limits=request_limits(settings),
    )


def serving_endpoint(
    settings: Settings,
    specs: list[str],
    work_dir,
    *,
    budget_mb: int | None,
    max_workers: int,
    idle_s: float,
    max_queue: int,
    lambda_like: bool = False,
):
    """The endpoint of `ayci endpoint` / `ayci loadtest` (`serving/`): each run's pick (or the
    combination named) from the local store; `budget_mb` None: 80 % of the memory available.
    `NotServable` or `ValueError` naming why a run cannot be served."""
    import psutil

    from serving.endpoint import Endpoint
    from serving.models import served_models
    from serving.scaling import ScalingPolicy

    models = served_models(local_store(settings), specs, work_dir)
    return Endpoint(
        models,
        budget_mb=budget_mb or int(psutil.virtual_memory().available / 2**20 * 0.8),
        policy=ScalingPolicy(max_workers=max_workers, idle_s=idle_s, lambda_like=lambda_like),
        max_queue=max_queue,
        work_dir=work_dir,
    )
