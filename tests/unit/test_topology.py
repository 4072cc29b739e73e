"""The topology is declared once (`core/topology.py`): the routes, each service's handlers and
the template's EventBridge rules, queues and dead-letter consumers must all agree with it."""

from __future__ import annotations

import importlib

import pytest
from cfnlint.decode import decode

from core.routing import ROUTES
from core.topology import HARDWARE, SERVICES, every_queue
from infra.stack import TEMPLATE


@pytest.fixture(scope="module")
def template() -> dict:
    decoded, errors = decode(str(TEMPLATE))
    assert not errors, errors
    return decoded


def queue_name(template: dict, arn) -> str:
    """The queue name (without the prefix) a `!GetAtt XQueue.Arn` points at."""
    logical = arn["Fn::GetAtt"][0] if isinstance(arn["Fn::GetAtt"], list) else arn["Fn::GetAtt"].split(".")[0]
    name = template["Resources"][logical]["Properties"]["QueueName"]["Fn::Sub"]
    return name.removeprefix("${Prefix}-")


def test_each_service_handles_exactly_what_the_topology_says_it_consumes():
    for spec in SERVICES:
        handlers = importlib.import_module(f"services.{spec.name}.handlers").HANDLERS
        assert set(handlers) == set(spec.consumes), spec.name


def test_the_template_s_rules_are_the_routes(template):
    declared = set()
    for resource in template["Resources"].values():
        if resource["Type"] != "AWS::Events::Rule":
            continue
        pattern = resource["Properties"]["EventPattern"]
        (event_type,) = pattern["detail-type"]
        for target in resource["Properties"]["Targets"]:
            declared.add((event_type, queue_name(template, target["Arn"])))
    routed = {
        (event, queue.format(hardware=hw)) for event, queues in ROUTES.items() for queue in queues for hw in HARDWARE
    }
    assert declared == routed


def test_every_queue_has_a_dlq_and_every_dlq_is_consumed_on_lambda(template):
    resources = template["Resources"]
    names = {
        r["Properties"]["QueueName"]["Fn::Sub"].removeprefix("${Prefix}-")
        for r in resources.values()
        if r["Type"] == "AWS::SQS::Queue"
    }
    assert names == set(every_queue()) | {f"{q}-dlq" for q in every_queue()}
    dead_letter_sources = {
        queue_name(template, r["Properties"]["EventSourceArn"])
        for r in resources.values()
        if r["Type"] == "AWS::Lambda::EventSourceMapping"
        and r["Properties"]["FunctionName"] == {"Ref": "DeadLetterFunction"}
    }
    assert dead_letter_sources == {f"{q}-dlq" for q in every_queue()}


def test_every_service_runs_as_processes_of_its_own():
    names = [name for spec in SERVICES for name, _ in spec.processes()]
    assert names == ["dedup", "converter", "inference-intel", "inference-arm", "archiver", "notifier"]
