"""An exported function, checked where it will run: a tiny run on the embedded default (intel,
onnx, batch 1, one memory size), `ayci export`, a fresh virtual environment made from the
exported requirements alone, the handler invoked through awslambdaric's runtime interface (on
its own path, as Lambda's runtime provides it) with API Gateway, function URL and direct events:
its outputs agree with base's on the run's example inputs, bad requests are 4xx with the reason,
the package is under the size it claims and the template passes cfn-lint.

`tvm` and `base` (a `.pt2`, torch) are checked the same way except for the fresh environment:
installing apache-tvm or torch there takes minutes of CI's time, so their handlers run in the
project's environment with nothing of AYCI importable (the script's folder, the function's and
awslambdaric's alone on the path, outside the repository), and the report says which runtimes
the process loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest

from ayci.cli import main as cli_main
from tests.conftest import TINY_IMAGE_SIZE, disturbed_away
from tests.e2e.test_embedded_run import app, request_for, run  # noqa: F401 - app is a fixture

PIP = ["--disable-pip-version-check", "--quiet"]


def fresh_venv(where: Path, requirements: Path) -> Path:
    """A virtual environment with `requirements` installed and nothing else; its python."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=120)
    python = where / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", *PIP, "-r", str(requirements)], check=True, timeout=600)
    return python


def lambda_runtime(where: Path, python: Path) -> Path:
    """awslambdaric (Lambda's Python runtime interface) in its own folder, as the runtime puts it
    beside the function, not in its requirements."""
    version = metadata.version("awslambdaric") if _installed("awslambdaric") else "4.2.2"
    subprocess.run(
        [str(python), "-m", "pip", "install", *PIP, "--target", str(where), f"awslambdaric=={version}"],
        check=True,
        timeout=300,
    )
    return where


def _installed(name: str) -> bool:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def installed_bytes(python: Path, names: list[str]) -> int:
    """What `names` take installed in the environment of `python` (their RECORD's files)."""
    script = (
        "import json, os, sys\nfrom importlib import metadata\ntotal = 0\n"
        "for name in json.loads(sys.argv[1]):\n"
        "    dist = metadata.distribution(name)\n"
        "    total += sum(os.path.getsize(dist.locate_file(f)) for f in dist.files or [] "
        "if os.path.exists(dist.locate_file(f)))\n"
        "print(total)\n"
    )
    return int(subprocess.check_output([str(python), "-c", script, json.dumps(names)], text=True))


@pytest.fixture(scope="module")
def awslambdaric_dir(tmp_path_factory) -> Path:
    """awslambdaric for the project's Python, in a folder of its own (installed once)."""
    return lambda_runtime(tmp_path_factory.mktemp("awslambdaric"), Path(sys.executable))


def invoke(out: Path, python: Path, runtime: Path, cwd: Path, warm: int = 20) -> dict:
    """`check/invoke.py` of the export in `out`, run by `python` with awslambdaric on its path: its report."""
    checked = subprocess.run(
        [str(python), str(out / "check" / "invoke.py"), "--warm", str(warm), "--spawned-at", str(time.time())],
        capture_output=True,
        text=True,
        timeout=300,
        env={**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PYTHONPATH": str(runtime)},
        cwd=cwd,
    )
    assert checked.returncode == 0, checked.stderr
    return json.loads(checked.stdout.splitlines()[-1])


def test_exported_function_answers_in_a_fresh_venv_like_base(app, tiny_image_model, tmp_path):  # noqa: F811
    summary, run_id = run(app, request_for(app, tiny_image_model, ["onnx"], input_size=TINY_IMAGE_SIZE))
    assert summary["status"] == "complete", summary["failures"]
    out = tmp_path / "export"
    data_dir = str(tmp_path / "data")  # the app fixture's store
    if disturbed_away(
        summary["recommendation"], "intel/onnx/b1/1769MB"
    ):  # a busy host: no pick, the function exported by name
        assert summary["recommendation"]["balanced"] is None
        chosen = ["--combination", "intel/onnx/b1/1769MB"]
    else:
        assert summary["recommendation"]["balanced"] == "intel/onnx/b1/1769MB"
        chosen = []
    assert cli_main(["export", run_id, "--out", str(out), "--data-dir", data_dir, *chosen]) == 0
    deployment = json.loads((out / "export.json").read_text())
    assert deployment["combination"] == "intel/onnx/b1/1769MB"

    requirements = out / "function" / "requirements.txt"
    pins = dict(line.split("==") for line in requirements.read_text().splitlines() if not line.startswith("#"))
    assert pins["onnxruntime"] == summary["results"][0]["environment"]["libraries"]["onnxruntime"]
    assert "torch" not in pins
    python = fresh_venv(tmp_path / "venv", requirements)
    frozen = subprocess.check_output([str(python), "-m", "pip", "freeze", *PIP], text=True)
    installed = {line.split("==")[0].lower() for line in frozen.splitlines() if "==" in line}
    assert installed == {name.lower() for name in pins}  # the requirements alone: no torch, no AYCI

    # the package is under the size it claims (and a zip fits Lambda's 250 MB)
    code = sum(p.stat().st_size for p in (out / "function").rglob("*") if p.is_file())
    actual = code + installed_bytes(python, list(pins))
    assert actual <= deployment["unzipped_bytes"], (actual, deployment["unzipped_bytes"])
    assert deployment["packaging"] == "zip" and deployment["unzipped_bytes"] <= 250 * 2**20

    runtime = lambda_runtime(tmp_path / "runtime", python)
    checked = subprocess.run(
        [str(python), str(out / "check" / "invoke.py"), "--warm", "20", "--spawned-at", str(time.time())],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(runtime)},
        cwd=tmp_path,
    )
    assert checked.returncode == 0, checked.stderr
    report = json.loads(checked.stdout.splitlines()[-1])
    assert report["runtime_interface"] == "awslambdaric"
    assert set(report["agreement"]) == {"rest_json", "http_npy", "function_url_npz", "direct_json"}
    for kind, answer in report["agreement"].items():
        assert answer["status"] == 200 and answer["outputs"] == 1, (kind, answer)
        assert answer["max_abs_diff"] is not None and answer["max_abs_diff"] < 1e-3, (kind, answer)
    bad = report["bad_requests"]
    assert all(400 <= case["status"] < 500 and case["error"] for case in bad.values()), bad
    assert bad["declares_40_gb"]["status"] == 413 and bad["pickled_npy"]["status"] == 400
    assert "pixels" in bad["wrong_name"]["error"] and "float32" in bad["wrong_dtype_npy"]["error"]
    assert report["cold_start_ms"] > 0 and report["warm_p50_ms"] > 0

    linted = subprocess.run(
        [str(Path(sys.executable).with_name("cfn-lint")), str(out / "template.yaml")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_exported_tvm_and_base_answer_like_base_with_their_runtime_alone(
    finished_base_onnx_tvm,
    tmp_path,
    awslambdaric_dir,
):
    _, data, summary, run_id = finished_base_onnx_tvm  # base, onnx and tvm (untuned) at b1, 1769 MB
    assert summary["status"] == "complete", summary["failures"]
    data_dir = str(data)
    work = tmp_path / "elsewhere"  # outside the repository: `import report` or `engines` cannot resolve
    work.mkdir()
    for optimizer, runtime, pinned, excluded in (
        ("tvm", "tvm", "apache-tvm", {"torch", "onnxruntime"}),
        ("base", "torch", "torch", {"tvm", "onnxruntime"}),
    ):
        combination = f"intel/{optimizer}/b1/1769MB"
        result = next(r for r in summary["results"] if r["combo"]["optimizer"] == optimizer)
        out = tmp_path / optimizer
        assert (
            cli_main(["export", run_id, "--combination", combination, "--out", str(out), "--data-dir", data_dir]) == 0
        )
        deployment = json.loads((out / "export.json").read_text())
        assert deployment["runtime"] == runtime and deployment["packaging"] == "image"  # over 250 MB: an image
        pins = dict(
            line.split("==")
            for line in (out / "function/requirements.txt").read_text().splitlines()
            if line and not line.startswith(("#", "-"))
        )
        assert pins[pinned] == result["environment"]["libraries"][pinned] and not excluded & set(pins)

        report = invoke(out, Path(sys.executable), awslambdaric_dir, work)
        assert report["runtime_interface"] == "awslambdaric"
        assert runtime in report["loaded"] and not (excluded | {"report", "engines"}) & set(report["loaded"])
        for kind, answer in report["agreement"].items():
            assert answer["status"] == 200 and answer["outputs"] == 1, (optimizer, kind, answer)
            assert answer["max_abs_diff"] is not None and answer["max_abs_diff"] < 1e-3, (optimizer, kind, answer)
        bad = report["bad_requests"]
        assert all(400 <= case["status"] < 500 and case["error"] for case in bad.values()), (optimizer, bad)
        assert report["cold_start_ms"] > 0 and report["warm_p50_ms"] > 0
