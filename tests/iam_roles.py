"""The IAM roles of `infra/template.yaml`, resolved for one deployment (prefix, region,
account), and whether a role allows a recorded AWS call (`adapters/aws_calls.py`): the
action on the resource it acted on, evaluated by moto's IAM policy engine. LocalStack and
moto do not enforce IAM, so this is where a call a role does not grant is caught."""

from __future__ import annotations

import json
import re
from functools import cache

from adapters.aws_calls import Call
from infra.stack import TEMPLATE


@cache
def template() -> dict:
    from cfnlint.decode import decode

    decoded, errors = decode(str(TEMPLATE))
    assert not errors, errors
    return json.loads(json.dumps(decoded, default=str))


class Deployment:
    """Names and ARNs of the stack's resources, as CloudFormation would make them."""

    def __init__(
        self, prefix: str, region: str, account: str, partition: str = "aws", made: dict | None = None
    ) -> None:
        self.prefix, self.region, self.account, self.partition = prefix, region, account, partition
        self.bucket = f"{prefix}-data-{account}"
        self.made = made or {}  # logical id -> (Ref, Arn) of resources made elsewhere (a secret's random suffix)

    def _physical(self, logical: str) -> tuple[str, str]:
        """(Ref, Arn) of a resource of the template."""
        if logical in self.made:
            return self.made[logical]
        resource = template()["Resources"][logical]
        kind, props = resource["Type"], resource.get("Properties", {})
        head = f"arn:{self.partition}:{{}}:{self.region}:{self.account}"
        if kind == "AWS::S3::Bucket":
            return self.bucket, f"arn:{self.partition}:s3:::{self.bucket}"
        if kind == "AWS::Events::EventBus":
            name = self.sub(props["Name"]["Fn::Sub"])
            return name, f"{head.format('events')}:event-bus/{name}"
        if kind == "AWS::SQS::Queue":
            name = self.sub(props["QueueName"]["Fn::Sub"])
            return f"https://sqs.{self.region}.amazonaws.com/{self.account}/{name}", f"{head.format('sqs')}:{name}"
        if kind == "AWS::Lambda::Function":
            name = self.sub(props["FunctionName"]["Fn::Sub"])
            return name, f"{head.format('lambda')}:function:{name}"
        if kind == "AWS::SecretsManager::Secret":
            arn = f"{head.format('secretsmanager')}:secret:{self.sub(props['Name']['Fn::Sub'])}-AbCdEf"
            return arn, arn
        raise AssertionError(f"no physical name for {logical} ({kind})")

    def sub(self, text: str) -> str:
        def one(match: re.Match) -> str:
            name = match.group(1)
            pseudo = {
                "Prefix": self.prefix,
                "AWS::Partition": self.partition,
                "AWS::Region": self.region,
                "AWS::AccountId": self.account,
                "AWS::URLSuffix": "amazonaws.com",
            }
            if name in pseudo:
                return pseudo[name]
            logical, _, attribute = name.partition(".")
            ref, arn = self._physical(logical)
            return arn if attribute == "Arn" else ref

        return re.sub(r"\$\{([^}]+)\}", one, text)

    def resolve(self, value):
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, dict):
            return value
        if "Fn::Sub" in value:
            return self.sub(value["Fn::Sub"])
        if "Fn::GetAtt" in value:
            logical, attribute = value["Fn::GetAtt"]
            assert attribute == "Arn", value
            return self._physical(logical)[1]
        if "Ref" in value:
            name = value["Ref"]
            if name == "SenderEmail":
                return template()["Parameters"]["SenderEmail"]["Default"]
            return self.sub("${" + name + "}")
        return {k: self.resolve(v) for k, v in value.items()}

    def statements(self, role: str) -> list[dict]:
        """The role's policy statements (its inline policies), resolved."""
        properties = template()["Resources"][role]["Properties"]
        return [
            self.resolve(statement)
            for policy in properties.get("Policies", [])
            for statement in policy["PolicyDocument"]["Statement"]
        ]

    def allows(self, roles: list[str], call: Call) -> bool:
        """Whether one of `roles` allows `call` (its action on its resource)."""
        from moto.iam.access_control import IAMPolicy, PermissionResult

        conditions = {"ses:FromAddress": call.resource} if call.service in ("ses", "sesv2") else None
        arn = call.arn(self.region, self.account, self.partition)
        for role in roles:
            document = json.dumps({"Version": "2012-10-17", "Statement": self.statements(role)})
            result = IAMPolicy(document).is_action_permitted(call.action, arn, incoming_condition_values=conditions)
            if result == PermissionResult.PERMITTED:
                return True
        return False


def function_roles() -> dict[str, str]:
    """Each function's short name (its FunctionName without "<prefix>-") -> its role's logical id."""
    roles = {}
    for resource in template()["Resources"].values():
        if resource["Type"] == "AWS::Lambda::Function":
            properties = resource["Properties"]
            name = properties["FunctionName"]["Fn::Sub"].removeprefix("${Prefix}-")
            roles[name] = properties["Role"]["Fn::GetAtt"][0]
    return roles


def roles_of(caller: str) -> list[str]:
    """The role of the function named `caller` (a local process says which function it stands
    for: `infra/localstack.py`; the archiver's dead-letter watcher acts as `dead-letters`)."""
    roles = function_roles()
    assert caller in roles, f"{caller}: no such function in the template ({sorted(roles)})"
    return [roles[caller]]


def not_granted(deployment: Deployment, calls: set[Call], ignore: tuple[str, ...] = ("test",)) -> list[str]:
    """The recorded calls the caller's own role does not allow, as readable lines."""
    refused = []
    for call in sorted(calls):
        if call.caller in ignore:
            continue
        assert call.caller, f"a call recorded without its caller: {call}"
        if not deployment.allows(roles_of(call.caller), call):
            refused.append(f"{call.caller}: {call.action} on {call.arn(deployment.region, deployment.account)}")
    return refused
