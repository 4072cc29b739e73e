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


def test_the_template_cloudformation_gets_is_the_yaml_within_its_size_limit():
    """CloudFormation takes a TemplateBody of at most 51,200 bytes: the YAML (with its comments)
    is sent as compact JSON, the same template."""
    import json

    from cfnlint.decode import decode

    from infra.stack import TEMPLATE, TEMPLATE_BODY_MAX_BYTES, template_body

    body = template_body()
    assert len(body.encode()) <= TEMPLATE_BODY_MAX_BYTES
    decoded, errors = decode(str(TEMPLATE))
    assert not errors
    assert json.loads(body) == json.loads(json.dumps(decoded, default=str))
    assert json.loads(body)["Resources"]["RequestFunctionRole"]["Properties"]["Policies"][0]["PolicyDocument"][
        "Statement"
    ][0] == {"Effect": "Allow", "Action": "events:PutEvents", "Resource": {"Fn::GetAtt": ["Bus", "Arn"]}}
