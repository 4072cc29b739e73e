"""The request service's app, wired for each host:

- `embedded_server(settings)`: the embedded default (`python -m ayci serve`): every service in
  this process, the in-process bus driven by a worker thread, a local folder, uploads to the
  app itself;
- `aws_request_deps(settings)`: the real path (`python -m services.request` against LocalStack,
  and the Lambda behind API Gateway): S3, EventBridge, presigned S3 POST uploads.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from adapters.background_bus import BackgroundBus
from adapters.uploads import LocalUploader, S3PresignedUploader
from ayci.bootstrap import EmbeddedApp, embedded
from ayci.settings import Settings
from core.runtime import LoggedPublisher
from services.request.app import RequestDeps, RequestLimits, create_app, parse_api_keys


def api_keys_or_new(settings: Settings) -> tuple[dict[str, str], str | None]:
    """The configured API keys, or one new key for the owner `local` (returned second, to
    print) when none is configured."""
    keys = parse_api_keys(settings.api_keys)
    if keys:
        return keys, None
    key = secrets.token_urlsafe(18)
    return {key: "local"}, key


def request_limits(settings: Settings) -> RequestLimits:
    """The request service's limits and links, from the settings."""
    return RequestLimits(
        max_body_bytes=settings.max_body_bytes,
        max_model_bytes=settings.max_model_bytes,
        max_combinations=settings.max_combinations,
        results_url=settings.results_url,
        max_runs_in_flight=settings.max_runs_in_flight,
        max_combinations_per_day=settings.max_combinations_per_day,
        email_allowed=tuple(e.strip() for e in settings.email_allowed.split(",") if e.strip()),
    )


def mailer_for(settings: Settings):
    if settings.mailer == "ses":
        from adapters.ses import SesMailer

        return SesMailer(settings.sender_email)
    if settings.mailer != "none":
        raise ValueError(f"AYCI_MAILER must be none or ses, got {settings.mailer!r}")
    return None


@dataclass
class EmbeddedServer:
    app: object  # the FastAPI app
    services: EmbeddedApp
    driver: BackgroundBus
    new_key: str | None  # the API key made up because none was configured

    def stop(self) -> None:
        self.driver.stop()


def embedded_server(settings: Settings) -> EmbeddedServer:
    services = embedded(settings, mailer_for(settings))
    driver = BackgroundBus(services.bus).start()
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
    from ayci.bootstrap import aws

    wiring = aws(settings)
    keys = parse_api_keys(settings.api_keys)
    if not keys:
        raise ValueError("AYCI_API_KEYS is empty: the request service needs at least one KEY:OWNER")
    return RequestDeps(
        store=wiring.store,
        publisher=wiring.publisher,
        api_keys=keys,
        uploader=S3PresignedUploader(settings.bucket),
        limits=request_limits(settings),
    )


def serve_embedded(host: str, port: int, data_dir: str | None = None) -> int:
    """`python -m ayci serve`: the page and the API on the embedded default, until Ctrl-C."""
    import os

    import uvicorn
    from rich.console import Console

    url = f"http://{host}:{port}"
    settings = Settings(
        **({"data_dir": data_dir} if data_dir else {}),
        **({} if "AYCI_RESULTS_URL" in os.environ else {"results_url": url}),
    )
    server = embedded_server(settings)
    hint = (
        f"/#key={server.new_key}   (a new API key for owner 'local'; set AYCI_API_KEYS=KEY:OWNER to keep one)"
        if server.new_key
        else "/"
    )
    Console(stderr=True).print(f"AYCI serving {url}{hint}", highlight=False, soft_wrap=True)
    try:
        uvicorn.run(server.app, host=host, port=port, log_level="warning")
    finally:
        server.stop()
    return 0
