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
from aws_cdk import aws_iam as iam

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


#: The child aws-cdk-lib's Role.addToPrincipalPolicy creates on a role of the app (aws-iam/lib/role.ts).
ROLE_DEFAULT_POLICY_ID = "DefaultPolicy"
#: The id prefix of the policy aws-cdk-lib's ImportedRole.addToPrincipalPolicy creates on an imported role
#: (aws-iam/lib/private/imported-role.ts, aws-cdk-lib 2.275): "Policy" alone, or, under the feature flag
#: IMPORTED_ROLE_STACK_SAFE_POLICY_NAME_FLAG (which `cdk init` writes into cdk.json), "Policy" followed by
#: the role's unique id (Names.uniqueId, e.g. PolicySRunner748FE86C); Role.fromRoleArn(..., {defaultPolicyName})
#: names it anything. Hence the policy is found by what it is, not by its id.
IMPORTED_ROLE_POLICY_PREFIX = "Policy"
#: cx-api's IAM_IMPORTED_ROLE_STACK_SAFE_DEFAULT_POLICY_NAME (aws-cdk-lib 2.275 recommended-feature-flags.json).
IMPORTED_ROLE_STACK_SAFE_POLICY_NAME_FLAG = "@aws-cdk/aws-iam:importedRoleStackSafeDefaultPolicyName"


def principal_policy(role: IConstruct) -> IConstruct | None:
    """Where aws-cdk-lib puts a role's added statements: `DefaultPolicy` on a role of the app; on an
    imported one (iam.Role.from_role_arn), the iam.Policy child attached to that role, whatever its id
    (`Policy`, `Policy<Stack><Role><hash>` under IMPORTED_ROLE_STACK_SAFE_POLICY_NAME_FLAG, or the role's
    default_policy_name). Of several such children (a user's own policy created in the role's scope),
    one with aws-cdk-lib's id prefix wins, then the first created. None: nothing was added to the role."""
    default = role.node.try_find_child(ROLE_DEFAULT_POLICY_ID)
    if default is not None:
        return default
    stack = cdk.Stack.of(role)
    role_name = json.dumps(stack.resolve(getattr(role, "role_name", None)), sort_keys=True)
    attached: list[iam.Policy] = []
    for child in role.node.children:
        if not isinstance(child, iam.Policy):
            continue
        cfn = child.node.default_child
        roles = stack.resolve(cfn.roles) if isinstance(cfn, iam.CfnPolicy) else None
        if any(json.dumps(name, sort_keys=True) == role_name for name in roles or []):
            attached.append(child)
    named = [p for p in attached if p.node.id.startswith(IMPORTED_ROLE_POLICY_PREFIX)]
    return next(iter(named or attached), None)
