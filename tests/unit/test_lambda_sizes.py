"""The measuring functions' memory sizes on moto's Lambda control plane (no Docker): an alias per
size on a version configured with it, reused, re-made after a deploy, refused when Lambda
refuses the size or /tmp cannot hold the artifact, idle ones deleted, and two runs needing
different sizes at once never reconfiguring the function under each other."""

from __future__ import annotations

import json
import threading
import time

import boto3
import pytest
from moto import mock_aws

from adapters.lambda_sizes import FunctionSize, LambdaSizes, LockBusy, answer_of, ephemeral_storage_mb
from core.ports import MeasurementRefused
from schemas import keys
from tests.lambda_emulation import fill_moto_gaps

REGION = "us-east-1"
BUCKET = "ayci-data-123456789012"
INTEL, ARM = "ayci-measure-intel", "ayci-measure-arm"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/ayci-images:{}"


@pytest.fixture
def aws(monkeypatch):
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AYCI_RECORD_AWS_CALLS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    fill_moto_gaps(monkeypatch, max_memory_mb=10240)
    with mock_aws():
        boto3.client("s3").create_bucket(Bucket=BUCKET)
        yield make_functions()


def make_functions() -> object:
    role = boto3.client("iam").create_role(RoleName="measure", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    lam = boto3.client("lambda")
    for name, arch in ((INTEL, "x86_64"), (ARM, "arm64")):
        lam.create_function(
            FunctionName=name,
            Role=role,
            PackageType="Image",
            Code={"ImageUri": IMAGE.format(arch)},
            Architectures=[arch],
            MemorySize=1769,
            Timeout=900,
            Environment={"Variables": {"AYCI_BUCKET": BUCKET}},
        )
    return lam


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def sizes(clock: Clock | None = None, **options) -> LambdaSizes:
    clock = clock or Clock()
    return LambdaSizes(
        {"intel": INTEL, "arm": ARM},
        BUCKET,
        lambda_client=boto3.client("lambda"),
        s3_client=boto3.client("s3"),
        clock=clock,
        sleep=clock.sleep,
        **options,
    )


def version_config(lam, function: str, alias: str) -> dict:
    return lam.get_function_configuration(FunctionName=function, Qualifier=alias)


def published_versions(lam, function: str) -> list[str]:
    return [
        v["Version"]
        for v in lam.list_versions_by_function(FunctionName=function)["Versions"]
        if v["Version"] != "$LATEST"
    ]


def test_a_memory_size_gets_an_alias_on_a_version_configured_with_it_and_reuses_it(aws):
    lam, functions = aws, sizes()
    assert functions.serves("intel") and functions.serves("arm")
    assert functions.alias_for(INTEL, FunctionSize(1024)) == "mem-1024"
    config = version_config(lam, INTEL, "mem-1024")
    assert config["MemorySize"] == 1024 and config["EphemeralStorage"]["Size"] == 512 and config["Version"] != "$LATEST"
    assert functions.alias_for(ARM, FunctionSize(3538, 2048)) == "mem-3538-tmp-2048"
    arm = version_config(lam, ARM, "mem-3538-tmp-2048")
    assert (arm["MemorySize"], arm["EphemeralStorage"]["Size"], arm["Architectures"]) == (3538, 2048, ["arm64"])
    before = published_versions(lam, INTEL)
    assert functions.alias_for(INTEL, FunctionSize(1024)) == "mem-1024"
    assert published_versions(lam, INTEL) == before  # reused: nothing published again
    assert json.loads(
        boto3.client("s3").get_object(Bucket=BUCKET, Key=keys.lambda_size_use(INTEL, "mem-1024"))["Body"].read()
    )["last_used"]


def test_a_deploy_that_changes_the_function_gets_a_new_version_behind_the_same_alias(aws):
    lam, functions = aws, sizes()
    functions.alias_for(INTEL, FunctionSize(2048))
    old = version_config(lam, INTEL, "mem-2048")["Version"]
    lam.update_function_configuration(
        FunctionName=INTEL, Environment={"Variables": {"AYCI_BUCKET": BUCKET, "AYCI_LOG_FORMAT": "json"}}
    )
    functions.alias_for(INTEL, FunctionSize(2048))
    new = version_config(lam, INTEL, "mem-2048")
    assert new["Version"] != old and new["MemorySize"] == 2048
    assert new["Environment"]["Variables"]["AYCI_LOG_FORMAT"] == "json"


def test_two_runs_needing_different_sizes_at_once_never_reconfigure_the_function_under_each_other(aws):
    """Each run's update-then-publish holds the function's lease: between one run's update and
    its publish no other update lands, and each alias ends on a version of its own size."""
    log, guard = [], threading.Lock()

    class Slow:
        """The Lambda client, slow between update and publish (a real update takes seconds)."""

        def __init__(self, who: str) -> None:
            self.who, self.real = who, boto3.client("lambda")

        def __getattr__(self, name):
            return getattr(self.real, name)

        def update_function_configuration(self, **kwargs):
            with guard:
                log.append((self.who, "update", kwargs["MemorySize"]))
            answer = self.real.update_function_configuration(**kwargs)
            time.sleep(0.3)  # the other run tries to reconfigure meanwhile
            return answer

        def publish_version(self, **kwargs):
            answer = self.real.publish_version(**kwargs)
            with guard:
                log.append((self.who, "publish", answer["MemorySize"]))
            return answer

    def run(who: str, memory: int, errors: list) -> None:
        try:
            LambdaSizes(
                {"intel": INTEL}, BUCKET, lambda_client=Slow(who), s3_client=boto3.client("s3"), poll_s=0.05
            ).alias_for(INTEL, FunctionSize(memory))
        except Exception as exc:
            errors.append(exc)

    errors: list = []
    threads = [
        threading.Thread(target=run, args=(who, memory, errors))
        for who, memory in (("a", 1769), ("b", 3538), ("c", 5307))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    for memory in (1769, 3538, 5307):
        assert version_config(aws, INTEL, f"mem-{memory}")["MemorySize"] == memory
    # serialized: every update is followed by the same run's publish, of the size it set
    assert len(log) == 6
    for (who, step, memory), (next_who, next_step, published) in zip(log[::2], log[1::2], strict=True):
        assert (step, next_step, who, memory) == ("update", "publish", next_who, published), log


def test_a_memory_size_the_account_is_not_offered_is_refused_and_nothing_is_made(aws, monkeypatch):
    fill_moto_gaps(monkeypatch, max_memory_mb=3008)  # a new account's limit
    functions = sizes()
    with pytest.raises(MeasurementRefused, match=r"does not offer 4096 MB .* in us-east-1: .*3008"):
        functions.alias_for(INTEL, FunctionSize(4096))
    assert published_versions(aws, INTEL) == []
    assert aws.list_aliases(FunctionName=INTEL)["Aliases"] == []


def test_ephemeral_storage_is_sized_from_the_artifact_and_refused_past_10240_mb():
    mib = 1 << 20
    assert ephemeral_storage_mb(40 * mib) == 512
    assert ephemeral_storage_mb(800 * mib) == 1024
    assert ephemeral_storage_mb(900 * mib) == 2048  # 900 MB + the process's own files
    assert ephemeral_storage_mb(3000 * mib) == 4096
    assert ephemeral_storage_mb(10_000 * mib) == 10240
    with pytest.raises(
        MeasurementRefused, match=r"11,000 MB: .* 11,128 MB of ephemeral storage \(/tmp\), more than the 10,240 MB"
    ):
        ephemeral_storage_mb(11_000 * mib)


def test_an_artifact_too_large_for_tmp_is_refused_before_anything_is_invoked_or_made(aws):
    s3 = boto3.client("s3")
    s3.put_object(Bucket=BUCKET, Key="artifacts/a/model.onnx", Body=b"x")
    functions = sizes()
    functions._object_bytes = lambda key: 11 * (1 << 30)  # 11 GiB: not worth uploading to show
    with pytest.raises(MeasurementRefused, match="more than the 10,240 MB"):
        functions.measure(
            hardware="intel", memory_mb=1769, request={"run_id": "r"}, staged_keys=["artifacts/a/model.onnx"]
        )
    assert published_versions(aws, INTEL) == []


def test_idle_aliases_are_deleted_with_their_versions_and_recent_ones_kept(aws):
    clock = Clock()
    functions = sizes(clock, keep_idle_s=3600)
    functions.alias_for(INTEL, FunctionSize(1024))
    clock.now += 7200
    functions.alias_for(INTEL, FunctionSize(2048))  # used now; making it prunes the idle ones
    aliases = {a["Name"] for a in aws.list_aliases(FunctionName=INTEL)["Aliases"]}
    assert aliases == {"mem-2048"}
    assert published_versions(aws, INTEL) == [version_config(aws, INTEL, "mem-2048")["Version"]]
    clock.now += 600  # within the idle time (and the longest invocation): kept
    assert functions.prune(INTEL) == []
    clock.now += 3600
    assert functions.prune(INTEL) == ["mem-2048"]


def test_a_held_lease_waits_and_an_expired_one_is_taken_over(aws):
    clock = Clock()
    holder = sizes(clock, lease_s=300, lock_wait_s=120)
    other = sizes(clock, lease_s=300, lock_wait_s=120)
    lease = keys.lambda_sizes_lock(INTEL)
    assert holder._lease_on(INTEL).take()
    assert not other._lease_on(INTEL).take()
    with pytest.raises(LockBusy, match="stayed taken for 120 s"):
        other.alias_for(INTEL, FunctionSize(1024))
    clock.now += 301  # the holder died: its lease expired
    assert other.alias_for(INTEL, FunctionSize(1024)) == "mem-1024"
    released = json.loads(boto3.client("s3").get_object(Bucket=BUCKET, Key=lease)["Body"].read())
    assert released["holder"] is None  # released: the next taker need not wait
    assert holder._lease_on(INTEL).take()


@pytest.mark.parametrize(
    "response, reason",
    [
        (
            {
                "FunctionError": "Unhandled",
                "Payload": b'{"errorType": "Runtime.OutOfMemory", '
                b'"errorMessage": "Runtime exited with error: signal: killed"}',
            },
            "out of memory at 1769 MB (the measuring Lambda function was killed",
        ),
        (
            {
                "FunctionError": "Unhandled",
                "Payload": b'{"errorType": "Sandbox.Timedout", "errorMessage": "Task timed out after 900.00 seconds"}',
            },
            "the measuring Lambda function timed out (Task timed out after 900.00 seconds)",
        ),
        (
            {"FunctionError": None, "Payload": b'{"failed": "out of memory at 1769 MB (peak 1900 MB)"}'},
            "out of memory at 1769 MB (peak 1900 MB)",
        ),
        (
            {"FunctionError": None, "Payload": b"null"},
            "the measuring Lambda function answered something that is not a report",
        ),
    ],
)
def test_what_a_measuring_function_answers_becomes_a_report_or_the_reason(response, reason):
    with pytest.raises(MeasurementRefused) as refused:
        answer_of(response, FunctionSize(1769))
    assert refused.value.reason.startswith(reason)
    assert answer_of({"FunctionError": None, "Payload": b'{"report": {"peak_rss_mb": 1}}'}, FunctionSize(1769)) == {
        "peak_rss_mb": 1
    }
