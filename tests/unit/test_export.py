"""`ayci export` / `GET /runs/{id}/export` on a stored run of a real (two-input) ONNX model: what
is written, the deployment's decisions, the SAM templates cfn-lint checks, the handler answering
Lambda events in process, and the API's zip."""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import shutil
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from adapters.local_store import LocalFolderStore
from adapters.uploads import LocalUploader
from ayci.bootstrap import request_limits
from ayci.cli import main as cli_main
from ayci.settings import Settings
from report.export import ExportError, export_run
from report.export import deployment as deployment_module
from report.export.bundle import sam_template
from schemas import keys
from schemas.combos import ModelRef, reference_key
from schemas.documents import ArtifactManifest, ModelInfo
from schemas.signature import ModelSignature
from services.request.app import RequestDeps, create_app, parse_api_keys
from tests.conftest import archived_summary, measured_result
from tests.fakes import RecordingPublisher

RUN_ID = "11111111-2222-4333-8444-555555555555"
ALICE = {"X-API-Key": "alice-key-123"}
BOB = {"X-API-Key": "bob-key-4567"}
SIGNATURE = {
    "format": "onnx",
    "inputs": [
        {"name": "x", "dtype": "float32", "dims": ["N", 3, 4]},
        {"name": "y", "dtype": "float32", "dims": ["N", 3, 4]},
    ],
    "outputs": [{"name": "sum", "dtype": "float32", "dims": ["N", 3, 4]}, {"name": "max", "dtype": "float32"}],
    "dim_ranges": {"N": {"min": 1, "max": 8}},
}


def two_input_model() -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "y"], ["sum"]), helper.make_node("Max", ["x", "y"], ["max"])],
        "two",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 3, 4]) for n in ("x", "y")],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 3, 4]) for n in ("sum", "max")],
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def environment() -> dict:
    from importlib import metadata

    return {
        "python": f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}",
        "cpu_model": "test CPU",
        "libraries": {name: metadata.version(name) for name in ("onnxruntime", "numpy", "torch")},
    }


def store_run(store: LocalFolderStore, *, request: dict | None = None, owner: str = "alice") -> dict:
    """A finished run of two measured combinations of the two-input model, with their artifact and reference."""
    model = ModelRef(
        sha256="cd" * 32, size_bytes=100, format="onnx", workload="custom", input_size=[4], inputs_sha256="ef" * 32
    )
    store.put_bytes(
        keys.model_info(model.sha256),
        ModelInfo(sha256=model.sha256, size_bytes=100, format="onnx", signature=ModelSignature(**SIGNATURE)).to_bytes(),
    )
    rows = []
    for label, p99, cost in (("intel/onnx/b2/1769MB", 4.0, 0.5), ("intel/onnx_int8/b2/1769MB", 3.0, 0.4)):
        row = measured_result(label, p99=p99, cost=cost)
        artifact_key = row["artifact_key"]
        store.put_bytes(keys.artifact_file(artifact_key, "model.onnx"), two_input_model())
        manifest = ArtifactManifest(
            artifact_file="model.onnx",
            optimizer=label.split("/")[1],
            hardware="intel",
            target_cpu="x",
            conversion_s=1.0,
        )
        store.put_bytes(keys.manifest(artifact_key), manifest.to_bytes())
        row.update(
            model=model.model_dump(mode="json"),
            environment=environment(),
            threads=1,
            engine_settings={"graph_optimization": "all", "intra_op_threads": 1, "memory_arena": False},
        )
        rows.append(row)
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((2, 3, 4)).astype(np.float32) for _ in range(2))
    buffer = io.BytesIO()
    np.savez(buffer, **{"input:x": x, "input:y": y, "output:0": x + y, "output:1": np.maximum(x, y)})
    store.put_bytes(keys.reference(reference_key(model, 2)), buffer.getvalue())
    summary = archived_summary(RUN_ID, "complete", rows, [], input_size=[4])
    summary["model"] = model.model_dump(mode="json")
    summary["request"] = request or {}
    store.put_bytes(keys.summary(RUN_ID), json.dumps(summary).encode())
    store.put_bytes(keys.run_record(RUN_ID), json.dumps({"run_id": RUN_ID, "owner": owner}).encode())
    return summary


@pytest.fixture
def store(tmp_path):
    store = LocalFolderStore(tmp_path / "data")
    store_run(store)
    return store


def load_handler(folder: Path):
    """The exported handler, imported from its folder as Lambda would (its own `npy_reader` beside it)."""
    sys.path.insert(0, str(folder / "function"))
    try:
        for name in ("handler", "npy_reader", "model_runner"):
            sys.modules.pop(name, None)
        spec = importlib.util.spec_from_file_location("handler", folder / "function" / "handler.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(folder / "function"))
        sys.modules.pop("npy_reader", None)
        sys.modules.pop("model_runner", None)


def http_event(body, *, b64=False, content_type="application/json", method="POST"):
    return {
        "version": "2.0",
        "headers": {"content-type": content_type},
        "requestContext": {"http": {"method": method, "path": "/infer"}},
        "body": body,
        "isBase64Encoded": b64,
    }


def npz_body(**arrays) -> str:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return base64.b64encode(buffer.getvalue()).decode()


def test_export_writes_the_balanced_pick_with_its_runtime_alone(store, tmp_path):
    out = tmp_path / "out"
    deployment = export_run(store, RUN_ID, out)
    assert deployment.combination == "intel/onnx_int8/b2/1769MB"  # the balanced pick: faster and cheaper
    files = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert files == {
        "README.md",
        "template.yaml",
        "export.json",
        "function/handler.py",
        "function/model_runner.py",
        "function/npy_reader.py",
        "function/deployment.json",
        "function/requirements.txt",
        "function/model.onnx",
        "check/reference.npz",
        "check/invoke.py",
    }
    assert (out / "function/model.onnx").read_bytes() == two_input_model()
    requirements = (out / "function/requirements.txt").read_text()
    pins = dict(line.split("==") for line in requirements.splitlines() if line and not line.startswith("#"))
    assert pins["onnxruntime"] == environment()["libraries"]["onnxruntime"]
    assert pins["numpy"] == environment()["libraries"]["numpy"]
    assert "torch" not in pins and "sympy" not in pins
    assert deployment.memory_mb == 1769 and deployment.architecture == "x86_64" and deployment.packaging == "zip"
    assert deployment.serving.option == "on demand" and not deployment.serving.snapstart
    assert 0 < deployment.unzipped_bytes < 250 * 2**20
    readme = (out / "README.md").read_text()
    assert "p99 3.00 ms" in readme and "sam build" in readme and '"x": [...]' in readme
    # the handler is AYCI-free: it imports only numpy, onnxruntime and its own reader
    for name in ("handler.py", "npy_reader.py", "model_runner.py"):
        source = (out / "function" / name).read_text()
        assert "from workloads" not in source and "import report" not in source and "schemas" not in source


def test_the_named_combination_and_refusals(store, tmp_path):
    assert export_run(store, RUN_ID, tmp_path / "a", "intel/onnx/b2/1769MB").optimizer == "onnx"
    assert export_run(store, RUN_ID, tmp_path / "b", "key-intel/onnx/b2/1769MB").optimizer == "onnx"
    with pytest.raises(ExportError, match="no measured combination intel/tvm"):
        export_run(store, RUN_ID, tmp_path / "c", "intel/tvm/b2/1769MB")
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").iterdir())
    with pytest.raises(ExportError, match="not empty"):
        export_run(store, RUN_ID, tmp_path / "a")
    with pytest.raises(ExportError, match="no archived run"):
        export_run(store, "00000000-0000-4000-8000-000000000000", tmp_path / "d")


def test_handler_answers_lambda_events_and_refuses_bad_input_with_the_reason(store, tmp_path):
    export_run(store, RUN_ID, tmp_path / "out")
    handler = load_handler(tmp_path / "out")
    context = type("Context", (), {"aws_request_id": "r1"})()
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    y = np.ones((2, 3, 4), dtype=np.float32)

    answer = handler.lambda_handler(http_event(json.dumps({"inputs": {"x": x.tolist(), "y": y.tolist()}})), context)
    assert answer["statusCode"] == 200
    outputs = json.loads(answer["body"])["outputs"]
    assert list(outputs) == ["sum", "max"] and np.array_equal(outputs["sum"], x + y)

    answer = handler.lambda_handler(http_event(npz_body(x=x, y=y), b64=True, content_type="application/x-npz"), context)
    assert answer["statusCode"] == 200 and answer["isBase64Encoded"]
    back = np.load(io.BytesIO(base64.b64decode(answer["body"])), allow_pickle=False)
    assert sorted(back.files) == ["max", "sum"] and np.array_equal(back["max"], np.maximum(x, y))

    rest = {"httpMethod": "POST", "headers": None, "body": json.dumps({"inputs": {"x": x.tolist(), "y": y.tolist()}})}
    assert handler.lambda_handler(rest, context)["statusCode"] == 200
    assert "outputs" in handler.lambda_handler({"inputs": {"x": x.tolist(), "y": y.tolist()}}, context)

    def refused(event) -> tuple[int, str]:
        answer = handler.lambda_handler(event, context)
        return answer["statusCode"], json.loads(answer["body"])["error"]

    assert refused(http_event(json.dumps({"inputs": {"x": x.tolist()}}))) == (422, "the model takes x, y: missing y")
    status, why = refused(http_event(npz_body(x=x, y=y.astype(np.float64)), b64=True))
    assert status == 422 and "y takes float32" in why
    status, why = refused(http_event(npz_body(x=x, y=y[:1]), b64=True))
    assert status == 422 and "dim N is 1" in why
    status, why = refused(
        http_event(npz_body(x=np.zeros((9, 3, 4), np.float32), y=np.zeros((9, 3, 4), np.float32)), b64=True)
    )
    assert status == 422 and "accepts 1..8" in why
    status, why = refused(http_event(npz_body(x=x[..., :3], y=y[..., :3]), b64=True))
    assert status == 422 and "fixed size 4 on axis 2" in why
    one = io.BytesIO()
    np.save(one, x)
    status, why = refused(http_event(base64.b64encode(one.getvalue()).decode(), b64=True))
    assert status == 400 and "send an .npz" in why
    assert refused(http_event("!!!", b64=True))[0] == 400
    assert refused(http_event("<x/>", content_type="application/xml"))[0] == 415
    assert refused(http_event(json.dumps({"inputs": {"x": "abc", "y": 1}})))[0] in (400, 422)
    status, why = refused(http_event(npz_body(x=np.array([{}], dtype=object), y=y), b64=True))
    assert status == 400 and "object arrays" in why
    status, _ = refused(http_event(json.dumps({}), method="DELETE"))
    assert status == 405
    signature = json.loads(handler.lambda_handler(http_event(None, method="GET"), context)["body"])
    assert [i["name"] for i in signature["signature"]["inputs"]] == ["x", "y"]


def cfn_lint(template: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(sys.executable).with_name("cfn-lint")), str(template)], capture_output=True, text=True, timeout=300
    )


def test_templates_pass_cfn_lint_for_every_way_of_serving_and_packaging(store, tmp_path):
    if shutil.which("cfn-lint", path=str(Path(sys.executable).parent)) is None:
        pytest.fail("cfn-lint is not installed (requirements-dev.txt)")
    deployment = export_run(store, RUN_ID, tmp_path / "out")
    variants = {
        "zip": deployment,
        "snapstart": replace(deployment, python="3.12", serving=replace(deployment.serving, snapstart=True)),
        "provisioned": replace(deployment, serving=replace(deployment.serving, option="provisioned", provisioned=3)),
        "image-arm": replace(deployment, packaging="image", architecture="arm64"),
    }
    for name, variant in variants.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(sam_template(variant))
        linted = cfn_lint(path)
        assert linted.returncode == 0, f"{name}: {linted.stdout}{linted.stderr}"
    text = (tmp_path / "snapstart.yaml").read_text()
    assert "SnapStart:" in text and "python3.12" in text
    assert "ProvisionedConcurrentExecutions: 3" in (tmp_path / "provisioned.yaml").read_text()
    image = (tmp_path / "image-arm.yaml").read_text()
    assert "PackageType: Image" in image and "arm64" in image and "CodeUri" not in image
    broken = tmp_path / "broken.yaml"
    broken.write_text(sam_template(replace(deployment, memory_mb=99_999)))
    assert cfn_lint(broken).returncode != 0  # the check can fail


def test_traffic_decides_the_serving_and_snapstart_moves_to_a_runtime_that_has_it(tmp_path, monkeypatch):
    store = LocalFolderStore(tmp_path / "data")
    traffic = {"rps": 0.01, "pattern": "steady", "idle_timeout_s": 600, "duration_s": 86400}
    store_run(store, request={"traffic": traffic, "slo_p99_ms": None})
    deployment = export_run(store, RUN_ID, tmp_path / "out")
    assert "0.01 req/s" in deployment.serving.reason and deployment.serving.option in (
        "on demand",
        "provisioned concurrency",
        "SnapStart",
    )

    def snapstart_wins(result, traffic, **_):
        return {
            "options": [
                {"option": "on demand", "bill_usd": 2.0, "p99_ms": 900.0},
                {"option": "SnapStart (estimate)", "bill_usd": 1.0, "p99_ms": 400.0},
            ]
        }

    monkeypatch.setattr("core.lambda_model.traffic.combination_under_traffic", snapstart_wins)
    snap = export_run(store, RUN_ID, tmp_path / "snap")
    assert snap.serving.snapstart and snap.python == "3.12" and "SnapStart needs python3.12" in snap.python_reason
    deployment_json = json.loads((tmp_path / "snap/function/deployment.json").read_text())
    assert deployment_json["snapstart"] is True and "SnapStart:" in (tmp_path / "snap/template.yaml").read_text()

    limits = deployment_module.LIMITS
    small_zip = limits.deployment.model_copy(update={"zip_unzipped_bytes": 1000})
    monkeypatch.setattr(deployment_module, "LIMITS", limits.model_copy(update={"deployment": small_zip}))
    # over the zip limit: an image, no SnapStart
    image = export_run(store, RUN_ID, tmp_path / "image")
    assert image.packaging == "image" and not image.serving.snapstart
    dockerfile = (tmp_path / "image/function/Dockerfile").read_text()
    assert "public.ecr.aws/lambda/python:" in dockerfile and "requirements.txt" in dockerfile


def test_cli_export(store, tmp_path, capsys):
    data = str(tmp_path / "data")
    assert cli_main(["export", RUN_ID, "--out", str(tmp_path / "cli"), "--data-dir", data]) == 0
    assert (tmp_path / "cli/template.yaml").exists()
    assert cli_main(["export", RUN_ID, "--out", str(tmp_path / "x"), "--data-dir", data, "--combination", "nope"]) == 2
    assert "no measured combination nope" in capsys.readouterr().err


def test_api_serves_the_folder_zipped_to_its_owner(tmp_path):
    settings = Settings(data_dir=tmp_path / "data")
    store = LocalFolderStore(settings.data_dir)
    store_run(store)
    deps = RequestDeps(
        store=store,
        publisher=RecordingPublisher(),
        api_keys=parse_api_keys("alice-key-123:alice,bob-key-4567:bob"),
        uploader=LocalUploader(tmp_path / "uploads"),
        limits=request_limits(settings),
    )
    client = TestClient(create_app(deps))
    answer = client.get(f"/runs/{RUN_ID}/export", headers=ALICE)
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/zip"
    assert "ayci-intel-onnx_int8-b2-1769MB.zip" in answer.headers["content-disposition"]
    names = zipfile.ZipFile(io.BytesIO(answer.content)).namelist()
    assert {"template.yaml", "function/handler.py", "function/model.onnx", "README.md"} <= set(names)
    chosen = client.get(f"/runs/{RUN_ID}/export", params={"combination": "intel/onnx/b2/1769MB"}, headers=ALICE)
    assert (
        "intel/onnx/b2/1769MB"
        in json.loads(zipfile.ZipFile(io.BytesIO(chosen.content)).read("export.json"))["combination"]
    )
    assert client.get(f"/runs/{RUN_ID}/export", headers=BOB).status_code == 404
    unknown = client.get(f"/runs/{RUN_ID}/export", params={"combination": "nope"}, headers=ALICE)
    assert unknown.status_code == 422 and "no measured combination nope" in unknown.text
    (tmp_path / "data" / keys.summary(RUN_ID)).unlink()  # no summary: the run is still going
    assert client.get(f"/runs/{RUN_ID}/export", headers=ALICE).status_code == 409


class TwoInputs:
    """The two-input model as a torch.export program (`base` on a `.pt2`)."""

    @staticmethod
    def save(path: Path) -> Path:
        import torch

        class Model(torch.nn.Module):
            def forward(self, x, y):
                return x + y, torch.maximum(x, y)

        example = (torch.zeros(2, 3, 4), torch.zeros(2, 3, 4))
        batch = torch.export.Dim("N", min=1, max=8)
        program = torch.export.export(Model(), example, dynamic_shapes=({0: batch}, {0: batch}))
        torch.export.save(program, str(path))
        return path


def store_engine_run(store: LocalFolderStore, label: str, artifact_file: str, artifact: bytes, model_format: str):
    """A finished run whose one measured row is `label`, its artifact `artifact_file` holding `artifact`."""
    model = ModelRef(
        sha256="cd" * 32,
        size_bytes=100,
        format=model_format,
        workload="custom",
        input_size=[4],
        inputs_sha256="ef" * 32,
    )
    signature = {**SIGNATURE, "format": model_format}
    store.put_bytes(
        keys.model_info(model.sha256),
        ModelInfo(
            sha256=model.sha256, size_bytes=100, format=model_format, signature=ModelSignature(**signature)
        ).to_bytes(),
    )
    row = measured_result(label, p99=4.0, cost=0.5)
    store.put_bytes(keys.artifact_file(row["artifact_key"], artifact_file), artifact)
    manifest = ArtifactManifest(
        artifact_file=artifact_file, optimizer=label.split("/")[1], hardware="intel", target_cpu="x", conversion_s=1.0
    )
    store.put_bytes(keys.manifest(row["artifact_key"]), manifest.to_bytes())
    libraries = {**environment()["libraries"], "apache-tvm": "0.27.0.post1"}
    row.update(model=model.model_dump(mode="json"), environment={**environment(), "libraries": libraries}, threads=1)
    rng = np.random.default_rng(1)
    x, y = (rng.standard_normal((2, 3, 4)).astype(np.float32) for _ in range(2))
    buffer = io.BytesIO()
    np.savez(buffer, **{"input:x": x, "input:y": y, "output:0": x + y, "output:1": np.maximum(x, y)})
    store.put_bytes(keys.reference(reference_key(model, 2)), buffer.getvalue())
    summary = archived_summary(RUN_ID, "complete", [row], [], input_size=[4])
    summary["model"] = model.model_dump(mode="json")
    store.put_bytes(keys.summary(RUN_ID), json.dumps(summary).encode())
    store.put_bytes(keys.run_record(RUN_ID), json.dumps({"run_id": RUN_ID, "owner": "alice"}).encode())


def pins_of(folder: Path) -> dict[str, str]:
    lines = (folder / "function/requirements.txt").read_text().splitlines()
    return dict(line.split("==") for line in lines if line and not line.startswith(("#", "-")))


def test_the_package_size_and_form_are_core_lambda_rules_estimate(store, tmp_path):
    """One estimate of one thing: the export's size and zip-or-image are `lambda_fit`'s (the
    runtime's size in data/lambda_limits.json plus the artifact), for every runtime."""
    from core.lambda_rules import lambda_fit
    from schemas.documents import RunSummary

    deployment = export_run(store, RUN_ID, tmp_path / "onnx")
    result = next(
        r for r in RunSummary.read(store.get_bytes(keys.summary(RUN_ID))).results if r.label == deployment.combination
    )
    fit = lambda_fit(result.model, result.combo, inputs=None, artifact_bytes=deployment.artifact_bytes)
    assert deployment.runtime == "onnxruntime" and deployment.runtime_mb == fit.runtime_mb
    assert deployment.packaging == fit.deployment == "zip"
    runtime_bytes = deployment.unzipped_bytes - deployment_module.CODE_BYTES - deployment.artifact_bytes
    assert abs(runtime_bytes - fit.runtime_mb * 2**20) < 1
    assert f"{fit.runtime_mb:,.0f} MB installed (data/lambda_limits.json)" in deployment.packaging_reason


def test_tvm_exports_its_compiled_library_with_tvm_runtime_alone_as_an_image(tmp_path):
    from core.lambda_rules import lambda_fit

    store = LocalFolderStore(tmp_path / "data")
    library = b"\x7fELF" + b"\0" * 2048  # the artifact's bytes are copied, never loaded here
    store_engine_run(store, "intel/tvm/b2/1769MB", "model.so", library, "onnx")
    out = tmp_path / "out"
    deployment = export_run(store, RUN_ID, out, "intel/tvm/b2/1769MB")
    assert deployment.runtime == "tvm" and deployment.optimizer == "tvm"
    assert (out / "function/model.so").read_bytes() == library
    runner = (out / "function/model_runner.py").read_text()
    assert runner == (Path(deployment_module.__file__).parent / "function/runner_tvm.py").read_text()
    assert "TVM_USE_RUNTIME_LIB" in runner and "import onnxruntime" not in runner
    pins = pins_of(out)
    assert pins["apache-tvm"] == "0.27.0.post1" and "numpy" in pins
    assert {"apache-tvm-ffi", "ml-dtypes", "typing-extensions"} <= set(pins)  # what apache-tvm requires, pinned
    assert not {"torch", "onnxruntime", "xgboost", "psutil"} & set(pins)  # no extras, no other runtime
    # TVM's runtime (378.7 MB in data/lambda_limits.json) is over a zip's 250 MB: an image, as the table says
    model = ModelRef(
        sha256="cd" * 32, size_bytes=100, format="onnx", workload="custom", input_size=[4], inputs_sha256="ef" * 32
    )
    fit = lambda_fit(model, _combo("intel/tvm/b2/1769MB"), inputs=None, artifact_bytes=len(library))
    assert deployment.packaging == fit.deployment == "image" and not deployment.serving.snapstart
    dockerfile = (out / "function/Dockerfile").read_text()
    assert "ENV TVM_USE_RUNTIME_LIB=1" in dockerfile and "model_runner.py" in dockerfile and "model.so" in dockerfile
    assert any("no runtime-only TVM" in note for note in deployment.notes)
    assert "PackageType: Image" in (out / "template.yaml").read_text()
    linted = cfn_lint(out / "template.yaml")
    assert linted.returncode == 0, linted.stdout + linted.stderr


def _combo(label: str):
    from schemas.combos import Combo

    hardware, optimizer, batch, memory = label.split("/")
    return Combo(hardware=hardware, optimizer=optimizer, batch_size=int(batch[1:]), memory_mb=int(memory[:-2]))


def test_base_on_a_pt2_ships_the_program_with_torch_cpu_in_an_image_and_answers_like_base(tmp_path):
    store = LocalFolderStore(tmp_path / "data")
    program = TwoInputs.save(tmp_path / "model.pt2").read_bytes()
    store_engine_run(store, "intel/base/b2/1769MB", "model.pt2", program, "pt2")
    out = tmp_path / "out"
    deployment = export_run(store, RUN_ID, out, "intel/base/b2/1769MB")
    assert deployment.runtime == "torch" and deployment.packaging == "image"
    assert deployment.unzipped_bytes > 250 * 2**20 and "over Lambda's 250 MB" in deployment.packaging_reason
    requirements = (out / "function/requirements.txt").read_text()
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in requirements  # torch's CPU wheels
    pins = pins_of(out)
    assert pins["torch"] == environment()["libraries"]["torch"] and "onnxruntime" not in pins
    assert {"sympy", "mpmath", "networkx", "jinja2", "markupsafe", "filelock", "fsspec"} <= set(pins)
    assert (out / "function/model_runner.py").read_text().count("import torch") == 1
    assert "model.pt2" in (out / "function/Dockerfile").read_text()

    handler = load_handler(out)  # the program loaded once, by torch, at import
    context = type("Context", (), {"aws_request_id": "r1"})()
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    y = np.full((2, 3, 4), 5.0, dtype=np.float32)
    answer = handler.lambda_handler(http_event(json.dumps({"inputs": {"x": x.tolist(), "y": y.tolist()}})), context)
    assert answer["statusCode"] == 200, answer
    outputs = json.loads(answer["body"])["outputs"]
    assert list(outputs) == ["sum", "max"]  # the signature's names on the program's unnamed outputs
    assert np.array_equal(outputs["sum"], x + y) and np.array_equal(outputs["max"], np.maximum(x, y))
    answer = handler.lambda_handler(http_event(npz_body(x=x[:1], y=y[:1]), b64=True), context)
    back = np.load(io.BytesIO(base64.b64decode(answer["body"])), allow_pickle=False)
    assert np.array_equal(back["sum"], x[:1] + y[:1])  # the program's dynamic batch
    refused = handler.lambda_handler(http_event(npz_body(x=x, y=y.astype(np.float64)), b64=True), context)
    assert refused["statusCode"] == 422 and "y takes float32" in json.loads(refused["body"])["error"]
