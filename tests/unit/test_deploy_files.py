"""The deployment files name only things that exist."""

import importlib.util
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_compose_services_run_modules_that_exist():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    modules = [s["command"][2] for s in compose["services"].values() if s.get("command", [None])[0] == "python"]
    assert "services.inference" in modules and "services.request" in modules
    for module in modules:
        spec = importlib.util.find_spec(module)
        runnable = spec.submodule_search_locations is None or importlib.util.find_spec(f"{module}.__main__") is not None
        assert spec is not None and runnable, module


def test_template_lambda_handlers_exist_and_template_lints():
    from cfnlint.decode import decode

    template, errors = decode(str(ROOT / "infra/template.yaml"))
    assert not errors, errors
    functions = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
    # container images: the handler is the image's command
    handlers = [f.get("Handler") or f["ImageConfig"]["Command"][0] for f in functions]
    assert len(handlers) >= 6 and "services.inference.measuring_lambda.handler" in handlers
    for handler in handlers:
        module, _, name = handler.rpartition(".")
        assert importlib.util.find_spec(module) is not None, handler
    lint = subprocess.run(
        [str(Path(ROOT / ".venv/bin/cfn-lint")), str(ROOT / "infra/template.yaml")], capture_output=True, text=True
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
