"""Measuring on AWS, as far as this machine allows: the inference handler hands a combination
to the measuring function of its size (moto's Lambda control plane makes the alias and the
version), the function's handler runs in this process with a real Lambda event and context
(`tests/lambda_emulation.py`) on the tiny model with ONNX Runtime, and the result says
`confined: true` "by the Lambda function itself". Every AWS action both sides called is granted
to their role by `infra/template.yaml`."""

from __future__ import annotations

import dataclasses

import boto3
import pytest
from moto import mock_aws

from adapters.aws import S3Store
from adapters.aws_calls import CALLER_ENV, ENV, iam_action, recorded, recorded_calls
from adapters.lambda_sizes import LambdaSizes
from ayci.lambda_entry import make_measuring_handler
from core.runtime import Delayed
from infra.stack import TEMPLATE
from schemas import keys
from schemas.combos import Combo, combo_key, reference_key
from schemas.documents import ArtifactManifest, CombinationProfile, MeasuredResult
from schemas.events import ComboFailed, Envelope, InferenceDone, ModelConverted, ProfileRequested
from services.inference.handlers import (
    DISTURBED_MEASURED_AGAIN,
    InferenceDeps,
    on_model_converted,
    on_profile_requested,
)
from tests.iam_roles import Deployment, not_granted
from tests.lambda_emulation import LambdaContext, fill_moto_gaps, run_invocations_in_process

BUCKET = "ayci-data-123456789012"
INTEL, ARM = "ayci-measure-intel", "ayci-measure-arm"


@pytest.fixture(scope="module")
def converted(tiny_onnx) -> dict:
    """The tiny model converted for ONNX Runtime and the base model's reference outputs."""
    return {"model": tiny_onnx.model, "artifact": tiny_onnx.onnx_path, "reference": tiny_onnx.reference_path}


@pytest.fixture
def aws(monkeypatch, tmp_path, converted):
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    calls = {"inference": tmp_path / "inference-calls", "measuring": tmp_path / "measuring-calls"}
    for folder in calls.values():
        folder.mkdir()
    monkeypatch.setenv(ENV, str(calls["inference"]))
    monkeypatch.setenv(CALLER_ENV, "inference-intel")  # the calls of the inference function, checked against its role
    fill_moto_gaps(monkeypatch, max_memory_mb=3008)  # an account limited to 3,008 MB, as new ones are
    with mock_aws():
        boto3.client("s3").create_bucket(Bucket=BUCKET)
        role = boto3.client("iam").create_role(RoleName="measure", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        for name, arch in ((INTEL, "x86_64"), (ARM, "arm64")):
            boto3.client("lambda").create_function(
                FunctionName=name,
                Role=role,
                PackageType="Image",
                Code={"ImageUri": f"123456789012.dkr.ecr.us-east-1.amazonaws.com/ayci:{arch}"},
                Architectures=[arch],
                MemorySize=1769,
                Timeout=840,
                Environment={"Variables": {"AYCI_BUCKET": BUCKET, "AYCI_LOG_FORMAT": "json"}},
            )
        store = S3Store(BUCKET)
        model = converted["model"]
        # the test's own setup, not the inference function's calls (boto3 uploads in threads of its own)
        monkeypatch.setenv(CALLER_ENV, "test")
        store.put_file(keys.artifact_file("art1", "model.onnx"), converted["artifact"])
        store.put_file(keys.reference(reference_key(model, 1)), converted["reference"])
        manifest = ArtifactManifest(
            artifact_file="model.onnx", optimizer="onnx", hardware="intel", target_cpu="x86_64", conversion_s=1.0
        )
        store.put_bytes(keys.manifest("art1"), manifest.to_bytes())
        monkeypatch.setenv(CALLER_ENV, "inference-intel")
        functions = LambdaSizes({"intel": INTEL, "arm": ARM}, BUCKET)
        deps = InferenceDeps(
            store=store,
            time_cap_s=0.5,
            min_iterations=5,
            functions=functions,
            runtime_for=lambda hardware: pytest.fail("measured in the inference worker, not in a measuring function"),
        )
        # the measuring function records its own calls: it has a role of its own
        with run_invocations_in_process(
            functions.invoker,
            make_measuring_handler(),
            boto3.client("lambda"),
            extra_env={ENV: str(calls["measuring"]), CALLER_ENV: "measure-intel"},
        ):
            yield {"deps": deps, "store": store, "model": model, "calls": calls}


def converted_event(model, memory_mb: int, hardware: str = "intel") -> Envelope:
    combo = Combo(hardware=hardware, optimizer="onnx", batch_size=1, memory_mb=memory_mb)
    payload = ModelConverted(
        model=model,
        combo=combo,
        combo_key=combo_key(model, combo),
        artifact_key="art1",
        artifact_file="model.onnx",
        conversion_s=1.0,
    )
    return Envelope.wrap(payload, run_id="r1", producer="converter")


def measured(event: Envelope, deps: InferenceDeps) -> list:
    """What the handler emits for `event`, following its measurements again: a busy host disturbs a measurement,
    and the handler asks for it again later (`measure_again_later`), at most DISTURBED_MEASURED_AGAIN times; the
    test takes the retry at once rather than waiting for it."""
    for _ in range(DISTURBED_MEASURED_AGAIN + 1):
        out = on_model_converted(event, deps)
        if not (len(out) == 1 and isinstance(out[0], Delayed)):
            return out
        event = Envelope.wrap(out[0].payload, run_id=event.run_id, producer="converter")
    pytest.fail(f"measured again more than {DISTURBED_MEASURED_AGAIN} times")


def role_actions(role: str) -> set[str]:
    from cfnlint.decode import decode

    template, errors = decode(str(TEMPLATE))
    assert not errors, errors
    granted = set()
    for policy in template["Resources"][role]["Properties"]["Policies"]:
        for statement in policy["PolicyDocument"]["Statement"]:
            actions = statement["Action"]
            granted.update([actions] if isinstance(actions, str) else actions)
    return granted


def test_each_size_is_measured_in_a_function_of_that_size_and_every_call_is_granted(aws):
    lam = boto3.client("lambda")
    for memory in (1769, 3008):
        (done,) = measured(converted_event(aws["model"], memory), aws["deps"])
        assert isinstance(done, InferenceDone), done
        result = MeasuredResult.read(aws["store"].get_bytes(done.result_key))
        assert result.confined is True and result.confinement_reason == f"by the Lambda function itself ({memory} MB)"
        assert result.host_limited is False and result.cost is not None and not result.emulated
        assert result.agreement.score == 1.0 and result.latency_ms.iterations >= 5
        assert result.model_extra["function_handler_rss_mb"] > 0
        version = lam.get_function_configuration(FunctionName=INTEL, Qualifier=f"mem-{memory}")
        assert version["MemorySize"] == memory and version["Version"] != "$LATEST"
    # the inference side: the Lambda control plane and S3 (artifact sizes, the lease, use stamps)
    inference = {iam_action(*call) for call in recorded_calls(aws["calls"]["inference"])}
    assert {
        "lambda:UpdateFunctionConfiguration",
        "lambda:PublishVersion",
        "lambda:CreateAlias",
        "lambda:InvokeFunction",
        "lambda:GetFunctionConfiguration",
        "lambda:ListAliases",
        "s3:PutObject",
    } <= inference, inference
    assert "s3:DeleteObject" not in inference  # the lease is released by a conditional write (core/lease.py)
    assert sorted(inference - role_actions("InferenceIntelFunctionRole")) == []
    # the measuring function reads the artifact and the reference, nothing else
    measuring = {iam_action(*call) for call in recorded_calls(aws["calls"]["measuring"])}
    assert measuring == {"s3:GetObject"} and measuring <= role_actions("MeasureFunctionRole")
    # each call on its resource, allowed by the caller's own role (the template's, for this account)
    deployment = Deployment("ayci", "us-east-1", "123456789012")
    for folder in aws["calls"].values():
        assert not_granted(deployment, recorded(folder)) == []
    assert {call.caller for call in recorded(aws["calls"]["measuring"])} == {"measure-intel"}
    assert keys.artifact_file("a", "f").startswith("artifacts/") and keys.reference("r").startswith(
        "references/"
    )  # its granted prefixes


def test_the_profiled_pass_runs_in_the_measuring_function_and_every_call_is_granted(aws):
    """The profile pass runs the user's model: in the measuring function of its size, as its
    measurement did, never in the 256 MB inference function (whose role cannot write a trace
    anyway); the measuring function stores the profile and the trace next to the result."""
    (done,) = measured(converted_event(aws["model"], 1769), aws["deps"])
    result = MeasuredResult.read(aws["store"].get_bytes(done.result_key))
    deps = dataclasses.replace(aws["deps"], profile=lambda *_, **__: pytest.fail("profiled in the inference function"))
    requested = ProfileRequested(combo=result.combo, combo_key=result.combo_key, result_key=done.result_key)
    assert on_profile_requested(Envelope.wrap(requested, run_id="r2", producer="request"), deps) == []
    profile = CombinationProfile.read(aws["store"].get_bytes(keys.profile(result.combo_key, "r2")))
    assert profile.runs > 0 and profile.operators and profile.confined
    assert aws["store"].exists(profile.trace_key)
    measuring = recorded(aws["calls"]["measuring"])
    writes = {c.resource.split("/", 1)[1] for c in measuring if c.action == "s3:PutObject"}
    assert writes == {
        keys.profile(result.combo_key, "r2"),
        keys.profile_trace(result.combo_key, "r2"),
    }
    inference = recorded(aws["calls"]["inference"])
    assert not any(
        c.resource.endswith((".profile.json", ".trace.json")) for c in inference if c.action == "s3:PutObject"
    )
    deployment = Deployment("ayci", "us-east-1", "123456789012")
    assert not_granted(deployment, measuring | inference) == []


def test_a_size_the_account_is_not_offered_fails_its_combination_before_anything_is_made(aws):
    (failed,) = measured(converted_event(aws["model"], 4096), aws["deps"])
    assert isinstance(failed, ComboFailed) and failed.stage == "inference"
    assert "Lambda does not offer 4096 MB" in failed.reason and "3008" in failed.reason
    assert boto3.client("lambda").list_aliases(FunctionName=INTEL)["Aliases"] == []


def test_the_measuring_handler_refuses_a_request_for_another_size_and_a_bad_event(aws, monkeypatch):
    monkeypatch.setenv("AYCI_BUCKET", BUCKET)  # the function's environment (invoked directly here)
    handler = make_measuring_handler()
    event = converted_event(aws["model"], 3008)
    request = {
        "run_id": "r1",
        "combo_key": event.payload.combo_key,
        "combo_label": "intel/onnx/b1/3008MB",
        "optimizer": "onnx",
        "workload": "image_classification",
        "artifact_object": keys.artifact_file("art1", "model.onnx"),
        "artifact_file": "model.onnx",
        "reference_object": keys.reference(reference_key(aws["model"], 1)),
        "memory_mb": 3008,
        "time_cap_s": 0.5,
        "min_iterations": 5,
    }
    context = LambdaContext(INTEL, "7", 1769, f"arn:aws:lambda:us-east-1:123456789012:function:{INTEL}:mem-1769")
    assert handler(request, context) == {
        "failed": "this measuring function has 1769 MB, the combination asks for 3008 MB"
    }
    answer = handler(
        {**request, "memory_mb": 3008, "artifact_object": "artifacts/missing/model.onnx"},
        LambdaContext(INTEL, "8", 3008, "arn"),
    )
    assert answer == {
        "failed": "artifacts/missing/model.onnx is not in the bucket (the artifact or the reference outputs)"
    }
    assert handler({"hello": "world"}, context)["failed"].startswith("not a measuring request")
