"""Measuring Lambda functions of every memory size, made on demand (the `MeasuringFunctions` port).

One measuring function per architecture is deployed (`MeasureIntelFunction`,
`MeasureArmFunction` in `infra/template.yaml`: x86_64 for intel, arm64 for arm). A combination
of memory size M whose artifact needs S MB of ephemeral storage is measured through the
function's alias `mem-M` (`mem-M-tmp-S` when it needs more than the default 512 MB of /tmp),
which points at a published version configured with exactly M and S. This is AWS Lambda Power
Tuning's pattern (update the configuration, publish a version, an alias per size, invoke the
alias), made safe for concurrent runs:

- A version is immutable: once an alias points at it, nothing another run does to the
  function's `$LATEST` changes what the alias invokes.
- Update-then-publish is serialized per function by a lease in the bucket
  (`lambda-sizes/{function}/lock.json`, taken by a conditional write, `If-None-Match: *`;
  an expired lease is taken over with `If-Match` on its ETag, so two takers cannot both win:
  `core/lease.py`, the converter's lease too).
- The publish itself is conditional on the revision that carries our configuration
  (`PublishVersion(RevisionId=...)`), and the published version is read back: an alias is only
  ever pointed at a version whose memory size and ephemeral storage are the ones asked for.
- An alias that already points at such a version (same code and settings as `$LATEST`) is
  reused without the lock. Each use stamps `lambda-sizes/{function}/aliases/{alias}.json`;
  aliases idle for longer than `keep_idle_s` (at least the function's timeout, so no
  invocation can still run through them) are deleted with their versions, under the lease.

Refused before anything is created or invoked (`MeasurementRefused`, the combination fails
with the reason): staged objects that cannot fit in 10,240 MB of /tmp, a memory size the
account or region is not offered (Lambda rejects the configuration update; `$LATEST` is
unchanged). The function's own failures (out of memory, timeout) are the combination's too.
Throttling and other transient errors propagate: the queue delivers the event again.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog
from botocore.config import Config
from botocore.exceptions import ClientError

from adapters.aws import S3Store, client
from core.lease import Lease
from core.ports import MeasurementRefused
from schemas import keys

log = structlog.get_logger()

ARCHITECTURES = {"intel": "x86_64", "arm": "arm64"}
MIB = 1 << 20
LAMBDA_DEFAULT_EPHEMERAL_MB = 512
LAMBDA_MAX_EPHEMERAL_MB = 10240
# ephemeral storage is billed above 512 MB: a few sizes, so aliases are shared between artifacts
EPHEMERAL_TIERS_MB = (512, 1024, 2048, 4096, 6144, 8192, 10240)
STAGING_HEADROOM_MB = 128  # the measuring process's own files in /tmp (its spec, output, the lock)
ALIAS_PREFIX = "mem-"
LAMBDA_MAX_TIMEOUT_S = 900  # no invocation runs longer: an alias idle for more is in no one's use
# a synchronous invoke waits for the whole measurement (a function runs at most 900 s)
_INVOKE_CONFIG = Config(read_timeout=960, connect_timeout=10, retries={"max_attempts": 3, "mode": "standard"})


def ephemeral_storage_mb(staged_bytes: int) -> int:
    """The ephemeral storage (MB) a function needs to hold `staged_bytes` in /tmp, rounded up to
    a tier; `MeasurementRefused` if it cannot fit in Lambda's 10,240 MB."""
    needed = math.ceil(staged_bytes / MIB) + STAGING_HEADROOM_MB
    for tier in EPHEMERAL_TIERS_MB:
        if needed <= tier:
            return tier
    raise MeasurementRefused(
        f"the artifact and its reference outputs are {staged_bytes / MIB:,.0f} MB: "
        "with the measuring process's files they need "
        f"{needed:,} MB of ephemeral storage (/tmp), "
        f"more than the {LAMBDA_MAX_EPHEMERAL_MB:,} MB a Lambda function can have"
    )


@dataclass(frozen=True)
class FunctionSize:
    memory_mb: int
    ephemeral_mb: int = LAMBDA_DEFAULT_EPHEMERAL_MB

    @property
    def alias(self) -> str:
        """`mem-1769`, or `mem-1769-tmp-2048` with more than the default /tmp."""
        if self.ephemeral_mb == LAMBDA_DEFAULT_EPHEMERAL_MB:
            return f"{ALIAS_PREFIX}{self.memory_mb}"
        return f"{ALIAS_PREFIX}{self.memory_mb}-tmp-{self.ephemeral_mb}"


class LockBusy(RuntimeError):
    """Another run held the function's lease for too long: the event is delivered again later."""


def _code(error: ClientError) -> str:
    return error.response.get("Error", {}).get("Code", "")


class LambdaSizes:
    """The measuring functions of a deployment: `functions` maps hardware ("intel", "arm") to a
    function name; `bucket` holds the objects they download and the leases and use stamps."""

    def __init__(
        self,
        functions: dict[str, str],
        bucket: str,
        *,
        lambda_client=None,
        invoke_client=None,
        s3_client=None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        lease_s: float = 300.0,
        lock_wait_s: float = 600.0,
        keep_idle_s: float = 3600.0,
        poll_s: float = 1.0,
    ) -> None:
        self.functions = {hardware: name for hardware, name in functions.items() if name}
        unknown = set(self.functions) - set(ARCHITECTURES)
        if unknown:
            raise ValueError(
                f"measuring functions for unknown hardware {sorted(unknown)}; known: {sorted(ARCHITECTURES)}"
            )
        self.bucket = bucket
        self.lam = lambda_client or client("lambda")
        self.invoker = invoke_client or lambda_client or _invoke_client()
        self.s3 = s3_client or client("s3")
        self.leases = S3Store(bucket, self.s3)
        self.clock, self.sleep = clock, sleep
        self.lease_s, self.lock_wait_s, self.poll_s = lease_s, lock_wait_s, poll_s
        self.keep_idle_s = max(keep_idle_s, LAMBDA_MAX_TIMEOUT_S + 60)
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._held: dict[str, list] = {}  # function -> [its lease, when last renewed], while this process holds it

    # ---------------------------------------------------------------- the port

    def serves(self, hardware: str) -> bool:
        return hardware in self.functions

    def measure(self, *, hardware: str, memory_mb: int, request: dict, staged_keys: list[str]) -> dict:
        function = self.functions[hardware]
        size = FunctionSize(memory_mb, ephemeral_storage_mb(sum(self._object_bytes(key) for key in staged_keys)))
        bound = log.bind(
            run_id=request.get("run_id"), combo_key=request.get("combo_key"), function=function, alias=size.alias
        )
        alias = self.alias_for(function, size)
        bound.info("measuring_function_invoked", memory_mb=size.memory_mb, ephemeral_mb=size.ephemeral_mb)
        try:
            response = self._invoke(function, alias, request)
        except ClientError as error:
            if _code(error) != "ResourceNotFoundException":
                raise
            # the alias was deleted as idle between our check and the call: make it again, once
            bound.info("measuring_alias_gone", reason=str(error))
            alias = self.alias_for(function, size)
            response = self._invoke(function, alias, request)
        return answer_of(response, size)

    # ---------------------------------------------------------------- aliases and versions

    def alias_for(self, function: str, size: FunctionSize) -> str:
        """The alias of `function` that invokes a version configured with `size`, made if needed."""
        if self._alias_ready(function, size):
            self._stamp_use(function, size.alias)
            return size.alias
        with self._lease(function):
            if not self._alias_ready(function, size):  # another run may have made it while we waited
                version = self._publish(function, size)
                self._point_alias(function, size.alias, version)
            self._stamp_use(function, size.alias)
            self._prune_locked(function, keep={size.alias})
        return size.alias

    def prune(self, function: str) -> list[str]:
        """Delete the size aliases of `function` idle for longer than `keep_idle_s`, and the
        versions no alias points at any more; the aliases deleted."""
        with self._lease(function):
            return self._prune_locked(function, keep=set())

    def _alias_ready(self, function: str, size: FunctionSize) -> bool:
        try:
            version = self.lam.get_alias(FunctionName=function, Name=size.alias)["FunctionVersion"]
        except ClientError as error:
            if _code(error) == "ResourceNotFoundException":
                return False
            raise
        published = self.lam.get_function_configuration(FunctionName=function, Qualifier=version)
        latest = self.lam.get_function_configuration(FunctionName=function)
        return (
            published.get("State", "Active") == "Active"
            and _configured(published, size)
            and _same_deployment(published, latest)
        )

    def _publish(self, function: str, size: FunctionSize, attempts: int = 3) -> str:
        """Configure `$LATEST` with `size`, publish it, and the version (read back: exactly `size`)."""
        for _ in range(attempts):
            try:
                self.lam.update_function_configuration(
                    FunctionName=function,
                    MemorySize=size.memory_mb,
                    EphemeralStorage={"Size": size.ephemeral_mb},
                )
            except ClientError as error:
                if _code(error) == "InvalidParameterValueException":
                    region = self.lam.meta.region_name
                    raise MeasurementRefused(
                        f"Lambda does not offer {size.memory_mb} MB with {size.ephemeral_mb} MB of /tmp "
                        f"to this account in {region}: "
                        f"{error.response['Error'].get('Message', error)}"
                    ) from error
                if _code(error) != "ResourceConflictException":  # an update still in progress: wait, try again
                    raise
                self._wait_updated(function)
                continue
            latest = self._wait_updated(function)
            if not _configured(latest, size):
                continue  # someone else's update landed in between (only if a lease expired): again
            try:
                # only if $LATEST is still the revision we read (AWS always has one; moto does not)
                revision = {"RevisionId": latest["RevisionId"]} if latest.get("RevisionId") else {}
                version = self.lam.publish_version(FunctionName=function, Description=f"ayci {size.alias}", **revision)[
                    "Version"
                ]
            except ClientError as error:
                if _code(error) in ("PreconditionFailedException", "ResourceConflictException"):
                    continue  # $LATEST changed after we read it: again
                raise
            published = self._wait_active(function, version)
            if _configured(published, size):
                log.info("measuring_version_published", function=function, version=version, alias=size.alias)
                return version
        raise LockBusy(
            f"{function}: could not publish a version with {size.memory_mb} MB "
            f"({attempts} attempts; is something else reconfiguring it?)"
        )

    def _point_alias(self, function: str, alias: str, version: str) -> None:
        try:
            self.lam.create_alias(
                FunctionName=function, Name=alias, FunctionVersion=version, Description="ayci memory size"
            )
        except ClientError as error:
            if _code(error) not in ("ResourceConflictException", "ConflictException"):
                raise
            self.lam.update_alias(FunctionName=function, Name=alias, FunctionVersion=version)

    def _wait_updated(self, function: str) -> dict:
        deadline = self.clock() + 300
        while True:
            config = self.lam.get_function_configuration(FunctionName=function)
            status = config.get("LastUpdateStatus", "Successful")
            if status == "Successful":
                return config
            if status == "Failed":
                raise RuntimeError(f"{function}: configuration update failed: {config.get('LastUpdateStatusReason')}")
            if self.clock() > deadline:
                raise LockBusy(f"{function}: configuration update still {status} after 300 s")
            self._keep_lease(function)
            self.sleep(self.poll_s)

    def _wait_active(self, function: str, version: str) -> dict:
        deadline = self.clock() + 300
        while True:
            config = self.lam.get_function_configuration(FunctionName=function, Qualifier=version)
            state = config.get("State", "Active")
            if state == "Active":
                return config
            if state == "Failed":
                raise RuntimeError(f"{function}:{version} failed to become active: {config.get('StateReason')}")
            if self.clock() > deadline:
                raise LockBusy(f"{function}:{version} still {state} after 300 s")
            self._keep_lease(function)
            self.sleep(self.poll_s)

    def _prune_locked(self, function: str, keep: set[str]) -> list[str]:
        aliases = []
        for page in self.lam.get_paginator("list_aliases").paginate(FunctionName=function):
            aliases.extend(page["Aliases"])
        now, deleted = self.clock(), []
        for alias in aliases:
            name = alias["Name"]
            if not name.startswith(ALIAS_PREFIX) or name in keep:
                continue
            last_used = self._last_used(function, name)
            if last_used is not None and now - last_used < self.keep_idle_s:
                continue
            self.lam.delete_alias(FunctionName=function, Name=name)
            deleted.append(name)
        if deleted:
            pointed = {alias["FunctionVersion"] for alias in self.lam.list_aliases(FunctionName=function)["Aliases"]}
            for alias in aliases:
                version = alias["FunctionVersion"]
                if alias["Name"] in deleted and version not in pointed and version != "$LATEST":
                    pointed.add(version)  # once
                    try:
                        self.lam.delete_function(FunctionName=function, Qualifier=version)
                    except ClientError as error:
                        if _code(error) != "ResourceNotFoundException":
                            raise
            log.info("measuring_aliases_pruned", function=function, aliases=deleted)
        return deleted

    # ---------------------------------------------------------------- the lease and use stamps

    def _lease_on(self, function: str) -> Lease:
        """The function's lease, held by this process (`core/lease.py`: created with
        `If-None-Match: *`, taken over when expired with `If-Match` on its ETag)."""
        return Lease(
            self.leases,
            keys.lambda_sizes_lock(function),
            self.holder,
            self.lease_s,
            now=lambda: datetime.fromtimestamp(self.clock(), UTC),
        )

    @contextmanager
    def _lease(self, function: str) -> Iterator[None]:
        """Hold the function's lease: one reconfiguration at a time, across every process."""
        lease = self._lease_on(function)
        deadline = self.clock() + self.lock_wait_s
        while not lease.take():
            if self.clock() > deadline:
                raise LockBusy(f"the lease on {function} stayed taken for {self.lock_wait_s:.0f} s")
            self.sleep(self.poll_s)
        self._held[function] = [lease, self.clock()]
        try:
            yield
        finally:
            self._held.pop(function, None)
            try:
                lease.release()
            except ClientError as error:  # it expires on its own
                log.warning("measuring_lease_not_released", function=function, reason=str(error))

    def _keep_lease(self, function: str) -> None:
        """Renew the function's lease while a wait holds it (an update and a publish may each wait
        300 s, past the lease's `lease_s`): every third of its duration. `LockBusy` if it was lost
        (it expired and another took it over): this reconfiguration stops rather than race it."""
        held = self._held.get(function)
        if held is None or self.clock() - held[1] < self.lease_s / 3:
            return
        if not held[0].renew():
            raise LockBusy(f"the lease on {function} was lost while it waited: another process took it over")
        held[1] = self.clock()

    def _stamp_use(self, function: str, alias: str) -> None:
        self.s3.put_object(
            Bucket=self.bucket,
            Key=keys.lambda_size_use(function, alias),
            Body=json.dumps({"last_used": self.clock()}).encode(),
        )

    def _last_used(self, function: str, alias: str) -> float | None:
        try:
            return float(
                json.loads(
                    self.s3.get_object(Bucket=self.bucket, Key=keys.lambda_size_use(function, alias))["Body"].read()
                )["last_used"]
            )
        except ClientError as error:
            if _code(error) in ("NoSuchKey", "404"):
                return None  # never stamped (made by hand, or its stamp is gone): idle
            raise
        except (ValueError, KeyError, TypeError):
            return None

    def _object_bytes(self, key: str) -> int:
        return int(self.s3.head_object(Bucket=self.bucket, Key=key)["ContentLength"])

    def _invoke(self, function: str, alias: str, request: dict) -> dict:
        response = self.invoker.invoke(FunctionName=function, Qualifier=alias, Payload=json.dumps(request).encode())
        payload = response.get("Payload")
        body = payload.read() if hasattr(payload, "read") else (payload or b"")
        return {"FunctionError": response.get("FunctionError"), "Payload": body}


def answer_of(response: dict, size: FunctionSize) -> dict:
    """The report in a measuring function's response; `MeasurementRefused` with the reason if
    it failed (its `{"failed": reason}`, or Lambda's own error: out of memory, timeout)."""
    try:
        body = json.loads(response["Payload"] or b"null")
    except ValueError:
        body = None
    if response.get("FunctionError"):
        error = body if isinstance(body, dict) else {}
        kind, message = str(error.get("errorType", response["FunctionError"])), str(error.get("errorMessage", ""))
        if "OutOfMemory" in kind or "signal: killed" in message:
            raise MeasurementRefused(
                f"out of memory at {size.memory_mb} MB (the measuring Lambda function was killed: {kind})"
            )
        if "Timedout" in kind or "timed out" in message:
            raise MeasurementRefused(f"the measuring Lambda function timed out ({message.strip() or kind})")
        raise MeasurementRefused(f"the measuring Lambda function failed: {kind}: {message}".rstrip(": "))
    if not isinstance(body, dict):
        raise MeasurementRefused(
            f"the measuring Lambda function answered something that is not a report: {str(body)[:200]}"
        )
    if body.get("failed"):
        raise MeasurementRefused(str(body["failed"]))
    if not isinstance(body.get("report"), dict):
        raise MeasurementRefused("the measuring Lambda function answered without a report")
    return body["report"]


def _configured(config: dict, size: FunctionSize) -> bool:
    return (
        config.get("MemorySize") == size.memory_mb
        and (config.get("EphemeralStorage") or {}).get("Size", LAMBDA_DEFAULT_EPHEMERAL_MB) == size.ephemeral_mb
    )


def _same_deployment(published: dict, latest: dict) -> bool:
    """A published version still runs what the stack deploys: same image, role, timeout and
    environment as `$LATEST` (a deploy changes `$LATEST`; old versions keep the old)."""
    fields = ("CodeSha256", "Role", "Timeout", "Architectures")
    env = lambda config: (config.get("Environment") or {}).get("Variables") or {}
    return all(published.get(f) == latest.get(f) for f in fields) and env(published) == env(latest)


def _invoke_client():
    import boto3

    from adapters.aws_calls import record_calls

    made = boto3.session.Session().client("lambda", config=_INVOKE_CONFIG)
    record_calls(made)
    return made
