"""Settings from the environment (prefix `AYCI_`), read once at the wiring point."""

from __future__ import annotations

from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

from engines.targets import native_hardware, target_cpu  # noqa: F401  (re-exported for the composition root)
from schemas.combos import Hardware, Optimizer


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AYCI_", extra="ignore")

    data_dir: Path = Path(".ayci/data")  # the local-folder object store of the embedded default
    intel_cpu: str | None = None  # LLVM CPU TVM compiles intel for: None = x86-64-v3 (portable), "host" = this one
    arm_cpu: str = "neoverse-n1"  # Graviton2
    arm_sysroot: Path = Path(".arm-sysroot")
    measure_time_cap_s: float = 12.0  # per combination, warm iterations (plus at most a quarter of it warming up)
    measure_min_iterations: int = 10
    # a disturbed measurement (other work took cores it needed, or the host ran slow) is measured again after this
    disturbed_retry_s: float = 90.0
    reference_timeout_s: float = 300.0  # the base model on the example inputs, in a child process
    reference_memory_mb: int = 10240  # its address-space cap
    conversion_timeout_s: float = 600.0  # a conversion in the sandbox (TVM: plus its tuning's time limit)
    conversion_memory_mb: int = 10240  # its memory cap (cgroup; twice it as address space)
    log_format: str = "console"  # console | json

    # the real path
    bus_name: str = "ayci-bus"
    bucket: str = "ayci-data"
    queue_prefix: str = "ayci"
    sender_email: str = "ayci@example.com"
    results_url: str = "http://127.0.0.1:8000"
    # at-least-once drills: publish every event this many times (consumers must not care)
    publish_copies: int = 1
    # AWS: the measuring Lambda functions (one per architecture) the inference service measures
    # in, configured per memory size on demand (adapters/lambda_sizes.py). Unset: measure in the
    # inference worker itself (confined by cgroups), as on the embedded default and LocalStack.
    measure_function_intel: str = ""
    measure_function_arm: str = ""
    measure_alias_keep_idle_s: float = 3600.0  # a memory-size alias unused for this long is deleted

    # the request service (HTTP API and web page)
    api_keys: str = ""  # "key1:owner1,key2:owner2"; every route but the page needs a key
    api_keys_secret: str = ""  # AWS: the Secrets Manager secret holding them instead (infra/template.yaml)
    max_body_bytes: int = 64 * 1024  # a JSON request body
    max_model_bytes: int = 1 << 30  # an uploaded model
    max_combinations: int = 512  # per run
    max_runs_in_flight: int = 20  # per owner (429 beyond)
    max_combinations_per_day: int = 5000  # per owner, per UTC day (429 beyond)
    # where run emails may go: addresses, "@domain" entries, or "*" (any: the local default;
    # the AWS template defaults to none, so a deployer names them)
    email_allowed: str = "*"
    mailer: str = "none"  # the embedded default's mailer: none | ses (SES at AWS_ENDPOINT_URL)

    def target_cpu(self, hardware: Hardware, optimizer: Optimizer) -> str:
        """What an artifact is built for, with this deployment's CPU overrides."""
        return target_cpu(hardware, optimizer, intel_cpu=self.intel_cpu, arm_cpu=self.arm_cpu)
