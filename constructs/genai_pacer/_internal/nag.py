"""Acknowledge cdk-nag findings precisely, without importing cdk-nag.

cdk-nag names a wildcard finding after the flattened resource (`AwsSolutions-IAM5[Resource::...]`)
and matches acknowledgments by that exact string. `flatten_reference` reproduces its flattening
(cdk-nag 3 utils/flatten-cfn-reference) so a construct can acknowledge exactly the wildcard it
must grant, and nothing broader.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import aws_cdk as cdk
import jsii

from constructs import IConstruct, IValidation


def flatten_reference(node: Any) -> str:
    if node is None:
        return ""
    if isinstance(node, str):
        return node.replace("${", "<").replace("}", ">")
    if isinstance(node, dict):
        if "Fn::Join" in node:
            delimiter, items = node["Fn::Join"]
            return delimiter.join(flatten_reference(item) for item in items)
        if "Fn::Sub" in node:
            return flatten_reference(node["Fn::Sub"])
        if "Fn::GetAtt" in node:
            resource, attribute = node["Fn::GetAtt"]
            return f"<{flatten_reference(resource)}.{flatten_reference(attribute)}>"
        if "Fn::ImportValue" in node:
            return flatten_reference(node["Fn::ImportValue"])
        if "Ref" in node:
            return f"<{flatten_reference(node['Ref'])}>"
    return json.dumps(node, separators=(",", ":"))


def acknowledge_wildcard_resources(
    policy: IConstruct, *, matches: Callable[[str], bool], reason: str
) -> list[str]:
    """Acknowledge AwsSolutions-IAM5 on each wildcard resource of `policy` that `matches` accepts.

    Returns the finding ids acknowledged, so a test can see exactly what was waived.
    """
    cfn = policy.node.default_child if policy.node.default_child is not None else policy
    document = cdk.Stack.of(policy).resolve(cfn.policy_document)  # type: ignore[attr-defined]
    acknowledged: list[str] = []
    for statement in document.get("Statement", []):
        resources = statement.get("Resource", [])
        for resource in resources if isinstance(resources, list) else [resources]:
            flat = flatten_reference(resource)
            if "*" in flat and matches(flat):
                finding = f"AwsSolutions-IAM5[Resource::{flat}]"
                cdk.Validations.of(policy).acknowledge(cdk.Acknowledgment(id=finding, reason=reason))
                acknowledged.append(finding)
    return acknowledged


def flattened(scope: IConstruct, value: Any) -> str:
    """`value` (an ARN, maybe with tokens) as cdk-nag names it in a finding, resolved in `scope`'s stack."""
    return flatten_reference(cdk.Stack.of(scope).resolve(value))


def acknowledge_exact_resources(policy: IConstruct, *, resources: list[str], reason: str) -> list[str]:
    """Acknowledge AwsSolutions-IAM5 only on wildcards equal to one of `resources` (flattened ARNs).

    For grants the library makes on a role it does not own (the user's StateMachineOptions(role=...)):
    a wildcard the user granted on that role themselves differs from these strings and stays reported.
    """
    exact = frozenset(resources)
    return acknowledge_wildcard_resources(policy, matches=exact.__contains__, reason=reason)


def acknowledge_exact_resources_at_validation(
    policy: IConstruct, *, resources: Callable[[], list[str]], reason: str
) -> None:
    """As acknowledge_exact_resources, computed when the app validates, after aws-cdk-lib has turned a
    reference to another stack's resource (a user's bucket there) into Fn::ImportValue, the form cdk-nag
    names the finding by. `resources` is called then, so it flattens the same import."""
    policy.node.add_validation(_AcknowledgeAtValidation(policy, resources, reason))


@jsii.implements(IValidation)
class _AcknowledgeAtValidation:
    def __init__(self, policy: IConstruct, resources: Callable[[], list[str]], reason: str) -> None:
        self._policy, self._resources, self._reason = policy, resources, reason

    def validate(self) -> list[str]:
        acknowledge_exact_resources(self._policy, resources=self._resources(), reason=self._reason)
        return []


def principal_policy(role: IConstruct) -> IConstruct | None:
    """Where aws-cdk-lib puts a role's added statements: `DefaultPolicy` on a role of the app,
    `Policy` on an imported one (iam.Role.from_role_arn)."""
    return role.node.try_find_child("DefaultPolicy") or role.node.try_find_child("Policy")
