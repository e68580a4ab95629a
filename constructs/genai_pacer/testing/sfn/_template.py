"""Read a synthesized template: find its state machines and resolve their definitions' tokens.

A DefinitionString is usually an Fn::Join whose parts are Refs and GetAtts (bucket names, role
ARNs, the partition). Offline there is no deployment to answer them, so each gets a stable fake
value of the right form (a bucket Ref becomes a valid bucket name, a role GetAtt Arn an IAM role
ARN), and the runner creates the buckets and tables those names point at in moto.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._errors import OfflineExecutionError

STATE_MACHINE_TYPES = ("AWS::StepFunctions::StateMachine",)
BUCKET_TYPES = ("AWS::S3::Bucket",)
TABLE_TYPES = ("AWS::DynamoDB::Table", "AWS::DynamoDB::GlobalTable")

# Ref of these types returns a name (or id) rather than an ARN.
_NAME_PROPERTY = {
    "AWS::S3::Bucket": "BucketName",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::DynamoDB::GlobalTable": "TableName",
    "AWS::IAM::Role": "RoleName",
    "AWS::Lambda::Function": "FunctionName",
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::SQS::Queue": "QueueName",
    "AWS::SNS::Topic": "TopicName",
    "AWS::StepFunctions::StateMachine": "StateMachineName",
    "AWS::Events::EventBus": "Name",
}


@dataclass(frozen=True)
class Environment:
    """Where the offline stack "is deployed": values for the pseudo parameters."""

    region: str = "us-east-1"
    account: str = "123456789012"  # moto's default account, so ARNs moto builds agree
    partition: str = "aws"
    stack_name: str = "Stack"

    @property
    def url_suffix(self) -> str:
        return "amazonaws.com.cn" if self.partition == "aws-cn" else "amazonaws.com"


@dataclass
class StateMachineSpec:
    """One AWS::StepFunctions::StateMachine of a template, its definition resolved to ASL."""

    logical_id: str
    path: str | None
    definition: dict[str, Any]
    role_arn: str
    name: str
    type: str = "STANDARD"

    def describe(self) -> str:
        return f"{self.logical_id} ({self.path})" if self.path else self.logical_id


@dataclass
class Template:
    """A CloudFormation template with the values its tokens resolve to offline."""

    body: dict[str, Any]
    env: Environment = field(default_factory=Environment)
    values: Mapping[str, Any] = field(default_factory=dict)
    paths: Mapping[str, str] = field(default_factory=dict)  # logical id -> construct path, when known

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        return dict(self.body.get("Resources") or {})

    def of_type(self, *types: str) -> dict[str, dict[str, Any]]:
        return {lid: res for lid, res in self.resources.items() if res.get("Type") in types}

    # ---- names of resources the runner creates ------------------------------------------------
    def physical_name(self, logical_id: str) -> str:
        """What Ref returns for a resource: its explicit name, or a stable fake one."""
        if logical_id in self.values:
            return str(self.values[logical_id])
        resource = self.resources[logical_id]
        kind = resource.get("Type", "")
        prop = _NAME_PROPERTY.get(kind)
        explicit = (resource.get("Properties") or {}).get(prop) if prop else None
        if explicit is not None:
            value = self.resolve(explicit, where=f"{logical_id}.{prop}")
            if isinstance(value, str):
                return value
        if kind in BUCKET_TYPES:
            return _bucket_name(f"{self.env.stack_name}-{logical_id}")
        return f"{self.env.stack_name}-{logical_id}"

    def ref(self, logical_id: str, where: str) -> str:
        env = self.env
        pseudo = {
            "AWS::Partition": env.partition,
            "AWS::Region": env.region,
            "AWS::AccountId": env.account,
            "AWS::URLSuffix": env.url_suffix,
            "AWS::StackName": env.stack_name,
            "AWS::StackId": f"arn:{env.partition}:cloudformation:{env.region}:{env.account}:stack/{env.stack_name}/offline",
        }
        if logical_id in pseudo:
            return pseudo[logical_id]
        if logical_id in self.values:
            return str(self.values[logical_id])
        parameters = self.body.get("Parameters") or {}
        if logical_id in parameters:
            if "Default" in parameters[logical_id]:
                return str(parameters[logical_id]["Default"])
            raise OfflineExecutionError(
                f"{where}: parameter {logical_id!r} has no Default; pass values={{{logical_id!r}: ...}} "
                "to StateMachineRunner"
            )
        if logical_id not in self.resources:
            raise OfflineExecutionError(
                f"{where}: Ref {logical_id!r} names no resource, parameter or pseudo parameter of this template"
            )
        kind = self.resources[logical_id].get("Type", "")
        name = self.physical_name(logical_id)
        if kind == "AWS::SQS::Queue":
            return f"https://sqs.{env.region}.{env.url_suffix}/{env.account}/{name}"
        if kind in ("AWS::SNS::Topic", "AWS::StepFunctions::StateMachine"):
            return self.arn(logical_id)
        return name

    def arn(self, logical_id: str) -> str:
        env = self.env
        kind = self.resources[logical_id].get("Type", "")
        name = self.physical_name(logical_id)
        p, r, a = env.partition, env.region, env.account
        known = {
            "AWS::S3::Bucket": f"arn:{p}:s3:::{name}",
            "AWS::DynamoDB::Table": f"arn:{p}:dynamodb:{r}:{a}:table/{name}",
            "AWS::DynamoDB::GlobalTable": f"arn:{p}:dynamodb:{r}:{a}:table/{name}",
            "AWS::IAM::Role": f"arn:{p}:iam::{a}:role/{name}",
            "AWS::Lambda::Function": f"arn:{p}:lambda:{r}:{a}:function:{name}",
            "AWS::SQS::Queue": f"arn:{p}:sqs:{r}:{a}:{name}",
            "AWS::SNS::Topic": f"arn:{p}:sns:{r}:{a}:{name}",
            "AWS::StepFunctions::StateMachine": f"arn:{p}:states:{r}:{a}:stateMachine:{name}",
            "AWS::Logs::LogGroup": f"arn:{p}:logs:{r}:{a}:log-group:{name}:*",
            "AWS::KMS::Key": f"arn:{p}:kms:{r}:{a}:key/{name}",
        }
        if kind in known:
            return known[kind]
        service = kind.split("::")[1].lower() if kind.count("::") == 2 else "unknown"
        return f"arn:{p}:{service}:{r}:{a}:{name}"

    def get_att(self, logical_id: str, attribute: str, where: str) -> str:
        key = f"{logical_id}.{attribute}"
        if key in self.values:
            return str(self.values[key])
        if logical_id not in self.resources:
            raise OfflineExecutionError(f"{where}: Fn::GetAtt {key!r} names no resource of this template")
        if attribute == "Arn" or attribute.endswith(".Arn"):
            return self.arn(logical_id)
        kind = self.resources[logical_id].get("Type", "")
        name = self.physical_name(logical_id)
        env = self.env
        if kind in BUCKET_TYPES and attribute in ("DomainName", "RegionalDomainName"):
            infix = "" if attribute == "DomainName" else f".{env.region}"
            return f"{name}.s3{infix}.{env.url_suffix}"
        if kind == "AWS::SQS::Queue" and attribute == "QueueUrl":
            return self.ref(logical_id, where)
        if attribute.endswith("Name"):
            return name
        if kind in TABLE_TYPES and attribute == "StreamArn":
            return f"{self.arn(logical_id)}/stream/offline"
        return f"{name}-{attribute}"

    # ---- intrinsic functions ----------------------------------------------------------------
    def resolve(self, value: Any, where: str) -> Any:
        """Evaluate the CloudFormation intrinsics in `value` with this template's offline values."""
        if isinstance(value, list):
            return [self.resolve(item, where) for item in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (key, arg), = value.items()
            if key == "Ref":
                return self.ref(arg, where)
            if key == "Fn::GetAtt":
                logical_id, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
                return self.get_att(logical_id, attribute, where)
            if key == "Fn::Join":
                delimiter, parts = arg
                return delimiter.join(str(self.resolve(part, where)) for part in self.resolve(parts, where))
            if key == "Fn::Sub":
                return self._sub(arg, where)
            if key == "Fn::Select":
                index, items = arg
                return self.resolve(items, where)[int(self.resolve(index, where))]
            if key == "Fn::Split":
                delimiter, text = arg
                return str(self.resolve(text, where)).split(delimiter)
            if key == "Fn::ImportValue":
                name = self.resolve(arg, where)
                if name in self.values:
                    return self.values[name]
                raise OfflineExecutionError(
                    f"{where}: Fn::ImportValue {name!r} comes from another stack; pass values={{{name!r}: ...}} "
                    "to StateMachineRunner"
                )
            if key == "Fn::GetAZs":
                return [f"{self.env.region}{suffix}" for suffix in "abc"]
            if key.startswith("Fn::") or key == "Condition":
                raise OfflineExecutionError(
                    f"{where}: the intrinsic {key} is not resolved offline; pass the value it stands for with "
                    "values={...} or simplify the definition"
                )
        return {key: self.resolve(item, where) for key, item in value.items()}

    def _sub(self, arg: Any, where: str) -> str:
        text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])
        resolved = {name: self.resolve(v, where) for name, v in variables.items()}

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in resolved:
                return str(resolved[name])
            if "." in name:
                logical_id, attribute = name.split(".", 1)
                return self.get_att(logical_id, attribute, where)
            return self.ref(name, where)

        return re.sub(r"\$\{([^}]+)\}", replace, text)

    # ---- state machines -----------------------------------------------------------------------
    def state_machines(self) -> list[StateMachineSpec]:
        return [self._state_machine(lid, res) for lid, res in self.of_type(*STATE_MACHINE_TYPES).items()]

    def _state_machine(self, logical_id: str, resource: dict[str, Any]) -> StateMachineSpec:
        props = resource.get("Properties") or {}
        where = f"state machine {logical_id}"
        if "DefinitionS3Location" in props:
            raise OfflineExecutionError(
                f"{where}: its definition is in S3 (DefinitionS3Location), which the runner cannot read; "
                "synthesize it inline (DefinitionBody.from_chainable or from_string)"
            )
        if "DefinitionString" in props:
            text = self.resolve(props["DefinitionString"], where)
            if not isinstance(text, str):
                raise OfflineExecutionError(f"{where}: DefinitionString resolved to {type(text).__name__}, not text")
        elif "Definition" in props:
            text = json.dumps(self.resolve(props["Definition"], where))
        else:
            raise OfflineExecutionError(f"{where}: it has neither DefinitionString nor Definition")
        for name, value in (props.get("DefinitionSubstitutions") or {}).items():
            text = text.replace("${" + name + "}", str(self.resolve(value, where)))
        try:
            definition = json.loads(text)
        except ValueError as error:
            raise OfflineExecutionError(f"{where}: its resolved definition is not JSON ({error})") from None
        role = props.get("RoleArn")
        role_arn = (
            self.resolve(role, where)
            if role is not None
            else f"arn:{self.env.partition}:iam::{self.env.account}:role/{logical_id}Role"
        )
        path = (resource.get("Metadata") or {}).get("aws:cdk:path") or self.paths.get(logical_id)
        return StateMachineSpec(
            logical_id=logical_id,
            path=path,
            definition=definition,
            role_arn=str(role_arn),
            name=_state_machine_name(self.physical_name(logical_id)),
            type=str(props.get("StateMachineType") or "STANDARD"),
        )


def load_template(source: Any) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """The template of a cdk.Stack, a template dict, or a template file; what it says of its
    environment (region, account, stack name) where that is concrete; and the construct path of
    each resource where the template's metadata does not carry it."""
    if isinstance(source, Mapping):
        return dict(source), {}, {}
    if isinstance(source, str | Path):
        path = Path(source)
        try:
            return json.loads(path.read_text()), {"stack_name": path.name.split(".")[0]}, {}
        except (OSError, ValueError) as error:
            raise OfflineExecutionError(f"cannot read template {str(path)!r}: {error}") from None
    import aws_cdk as cdk
    from aws_cdk.assertions import Template as CdkTemplate

    if isinstance(source, cdk.Stack):
        env: dict[str, str] = {"stack_name": source.stack_name}
        for key, value in (("region", source.region), ("account", source.account)):
            if not cdk.Token.is_unresolved(value):
                env[key] = value
        paths = {
            str(source.resolve(source.get_logical_id(child))): child.node.path
            for child in source.node.find_all()
            if isinstance(child, cdk.CfnElement) and cdk.Stack.of(child) is source
        }
        return dict(CdkTemplate.from_stack(source).to_json()), env, paths
    raise OfflineExecutionError(
        f"cannot run state machines from {type(source).__name__}: pass a cdk.Stack, a template dict or the path "
        "of a synthesized template (cdk.out/<Stack>.template.json)"
    )


def _bucket_name(text: str) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return (name or "offline-bucket")[:63].rstrip("-").ljust(3, "0")


def _state_machine_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text)[:80]
