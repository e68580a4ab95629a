"""One KMS key per construct, not one per log group (issue 34.13).

A customer managed key costs $1 a month while it exists (AWS KMS pricing page, quoted beside
`_secure.KEY_MONTHLY_PRICE_USD`), and the keys genai-pacer creates are retained on delete
(`_secure.KEY_REMOVAL_POLICY`), so every key a construct adds is billed until someone schedules its
deletion. For every public construct, built with the library's defaults (the nag matrix's builders,
tests/nag_matrix_cases.py, with each option at its default), this checks:

- how many keys it creates: at most one;
- that each of its log groups, and each resource it encrypts with a customer managed key, uses that key;
- that the key's policy lets CloudWatch Logs use it for each of those log groups (one statement, its
  `kms:EncryptionContext:aws:logs:arn` condition covering this account's and Region's log groups:
  naming each group's ARN is impossible, see `_secure.log_key`), and a key with no log group to serve
  is not opened to CloudWatch Logs at all;
- that the user's own key replaces it: no key created, every reference is the user's.

And, over the reference app (app.py), how many keys each stack creates, before and after this change,
with no construct owning more than one.
"""

from __future__ import annotations

import fnmatch
import tempfile
from collections import Counter
from collections.abc import Iterator
from typing import Any

import aws_cdk as cdk
import nag_matrix_cases as m
import pytest
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Template
from genai_pacer import retrieval
from genai_pacer._internal import secure as _secure
from helpers import resources

from constructs import Construct

#: Each construct's options for a build with the library's defaults, where an option's first value is
#: not that: (options, the keys the construct creates then).
DEFAULTS: dict[str, tuple[dict[str, str], int]] = {
    "AnswerStore": ({}, 0),  # AWS-managed encryption (DynamoDB): no key of its own
    "AnswerRouter": ({}, 1),
    "QueuedInference": ({}, 1),
    "ScheduledPrecompute": ({}, 1),
    "BatchPrecompute": ({}, 1),
    "BoundedMap": ({}, 1),
    "BoundedDistributedMap": ({"items_bucket": "imported"}, 1),
    "ParallelPrompts": ({}, 1),
    # the state machine the URL runs has the user's key, so only the URL's own key is counted
    "SyncExecutionUrl": ({"state_machine_options": "key:imported"}, 1),
    # an instance type with an EBS volume, which gets the construct's key (local NVMe gets none)
    "LlmEndpoint": ({"model_data_bucket": "imported", "instance_type": "ml.p3.2xlarge"}, 1),
    "EndpointScaling": ({"endpoint": "name"}, 0),
    "ModelInvocationLogging": ({"cloudwatch_logs": "on", "s3_delivery": "on"}, 1),
    "LatencyDashboard": ({}, 0),
    "ModelQuota": ({}, 0),
    "QuotaLedger": ({}, 0),  # AWS-managed encryption (DynamoDB): no key of its own
    "PromptExperiment": ({}, 1),
    # its own prompts bucket imported by name; the results bucket S3-managed, so the logs' key alone
    "LoadReplay": ({"prompts_bucket": "imported"}, 1),
    "HybridSearchPipeline": ({}, 1),  # the stack's shared search handler's log group
    "VectorIndexSettings": ({"target": "domain-imported"}, 1),  # the same shared handler
    "RuntimeLayer": ({}, 0),
}

#: The option that takes the user's own key instead of the construct's, and its value.
OWN_KEY: dict[str, tuple[str, str]] = {
    "AnswerStore": ("encryption_key", "imported"),
    "QuotaLedger": ("encryption_key", "imported"),
    "AnswerRouter": ("encryption_key", "imported"),
    "QueuedInference": ("encryption_key", "imported"),
    "ScheduledPrecompute": ("state_machine_options", "key:imported"),
    "BatchPrecompute": ("encryption_key_for_logs", "imported"),
    "BoundedMap": ("log_key", "imported"),
    "BoundedDistributedMap": ("state_machine_options", "key:imported"),
    "ParallelPrompts": ("state_machine_options", "key:imported"),
    "SyncExecutionUrl": ("encryption_key", "imported"),
    "LlmEndpoint": ("volume_encryption_key", "imported"),
    "ModelInvocationLogging": ("encryption_key", "imported"),
    "PromptExperiment": ("encryption_key", "imported"),
    "HybridSearchPipeline": ("encryption_key", "imported"),
    "VectorIndexSettings": ("encryption_key", "imported"),
}

#: The ARN nag_matrix_cases gives every imported key.
IMPORTED_KEY_SUFFIX = ":key/1234abcd-12ab-34cd-56ef-1234567890ab"
DEFAULT_VALUES = ("default", "none", "inline", "int", "converse", "STANDARD", "Converse", "off")


def options_for(construct: str, **overrides: str) -> dict[str, str]:
    """The construct's options with each at the library's default (else its first value), then `overrides`."""
    dimensions = m.MATRIX_BY_NAME[construct].dimensions
    chosen = {name: next((v for v in values if v in DEFAULT_VALUES), values[0]) for name, values in dimensions.items()}
    chosen.update(DEFAULTS[construct][0])
    chosen.update(overrides)
    return chosen


def build(construct: str, options: dict[str, str]) -> tuple[cdk.Stack, dict]:
    """The construct in a stack of its own; the template holds only what the construct created (the
    stack's shared search handler included), not the user's resources the options add beside it."""
    app = cdk.App(outdir=tempfile.mkdtemp())
    stack = cdk.Stack(app, "Keys", env=m.ENV)
    cdk.CfnWaitConditionHandle(stack, "NotEmpty")  # a construct that creates nothing still makes a template
    built = m.MATRIX_BY_NAME[construct].build(stack, options, m.Resources(stack, lambda: stack))
    roots = [built] + [child for child in stack.node.children if child.node.id == retrieval.SEARCH_HANDLER_ID]
    owned = {
        stack.resolve(stack.get_logical_id(node))
        for root in roots
        for node in root.node.find_all()
        if isinstance(node, cdk.CfnElement)
    }
    template = Template.from_stack(stack).to_json()
    template["Resources"] = {name: body for name, body in template["Resources"].items() if name in owned}
    return stack, template


def kms_references(template: dict) -> Iterator[tuple[str, str, Any]]:
    """(resource, property path, value) of every property naming a KMS key, outside IAM and key policies."""

    def walk(value: Any, path: str) -> Iterator[tuple[str, Any]]:
        if isinstance(value, dict):
            for name, inner in value.items():
                lowered = name.lower()
                if "kms" in lowered and "key" in lowered:
                    yield f"{path}.{name}", inner
                else:
                    yield from walk(inner, f"{path}.{name}")
        elif isinstance(value, list):
            for index, inner in enumerate(value):
                yield from walk(inner, f"{path}[{index}]")

    for name, resource in template["Resources"].items():
        if resource["Type"] in ("AWS::IAM::Policy", "AWS::IAM::Role", "AWS::KMS::Key") or resource["Type"].endswith("Policy"):
            continue
        for path, value in walk(resource.get("Properties", {}), name):
            yield name, path, value


def refers_to(value: Any, logical_id: str) -> bool:
    return value in ({"Fn::GetAtt": [logical_id, "Arn"]}, {"Ref": logical_id})


def text(value: Any) -> str:
    """A policy value as text, the partition filled in."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(text(part) for part in parts)
    if value == {"Ref": "AWS::Partition"}:
        return "aws"
    raise AssertionError(f"unexpected policy value {value!r}")


def logs_statements(key: dict) -> list[dict]:
    return [
        s for s in key["Properties"]["KeyPolicy"]["Statement"]
        if "Service" in s["Principal"] and text(s["Principal"]["Service"]).startswith("logs.")
    ]


def log_group_arn(stack: cdk.Stack, logical_id: str, group: dict) -> str:
    """The ARN a log group gets: its name, or one CloudFormation generates (stack-logical id-suffix)."""
    name = group["Properties"].get("LogGroupName", f"{stack.stack_name}-{logical_id}-A1B2C3D4E5F6")
    assert isinstance(name, str), f"{logical_id}: a deploy-time log group name; extend this test"
    return f"arn:aws:logs:{m.REGION}:{stack.account}:log-group:{name}"


CONSTRUCTS = sorted(DEFAULTS)


def test_every_public_construct_has_a_key_expectation():
    assert sorted(m.MATRIX_BY_NAME) == CONSTRUCTS, "a new construct: say how many keys it creates (DEFAULTS)"
    assert all(count <= 1 for _, count in DEFAULTS.values())


@pytest.fixture(scope="module", params=CONSTRUCTS)
def default_build(request) -> tuple[str, cdk.Stack, dict]:
    stack, template = build(request.param, options_for(request.param))
    return request.param, stack, template


def test_with_defaults_a_construct_creates_at_most_one_key(default_build):
    construct, _, template = default_build
    keys = sorted(resources(template, "AWS::KMS::Key"))
    assert len(keys) == DEFAULTS[construct][1], f"{construct} creates {keys}"


def test_every_log_group_and_encrypted_resource_uses_the_constructs_key(default_build):
    construct, _, template = default_build
    keys = resources(template, "AWS::KMS::Key")
    groups = resources(template, "AWS::Logs::LogGroup")
    if not keys:
        assert not groups, f"{construct}: log groups without a key: {sorted(groups)}"
        assert list(kms_references(template)) == []
        return
    assert len(keys) == 1, f"{construct} creates {sorted(keys)}"
    (key_id,) = keys
    for name, group in groups.items():
        assert refers_to(group["Properties"].get("KmsKeyId"), key_id), f"{construct}: {name} is not encrypted with {key_id}"
    references = list(kms_references(template))
    assert references, f"{construct}: nothing uses its key {key_id}"
    for _, path, value in references:
        assert refers_to(value, key_id), f"{construct}: {path} = {value!r}, not the construct's key {key_id}"
    assert keys[key_id]["DeletionPolicy"] == "Retain" and keys[key_id]["Properties"]["EnableKeyRotation"] is True


def test_the_key_lets_cloudwatch_logs_use_it_for_each_log_group_and_no_other_account(default_build):
    construct, stack, template = default_build
    keys = resources(template, "AWS::KMS::Key")
    if not keys:
        pytest.skip(f"{construct} creates no key")
    assert len(keys) == 1, f"{construct} creates {sorted(keys)}"
    ((key_id, key),) = keys.items()
    groups = resources(template, "AWS::Logs::LogGroup")
    statements = logs_statements(key)
    if not groups:  # LlmEndpoint's volume key: CloudWatch Logs has nothing to encrypt with it
        assert statements == [], f"{construct}: {key_id} lets CloudWatch Logs use it with no log group to serve"
        return
    assert len(statements) == 1, f"{construct}: one CloudWatch Logs statement for all {len(groups)} log groups"
    (statement,) = statements
    assert text(statement["Principal"]["Service"]) == f"logs.{m.REGION}.amazonaws.com"
    assert statement["Action"] == ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"]
    assert list(statement["Condition"]) == ["ArnLike"]
    pattern = text(statement["Condition"]["ArnLike"][_secure.LOGS_ARN_CONTEXT_KEY])
    assert pattern == f"arn:aws:logs:{m.REGION}:{stack.account}:log-group:*"
    for name, group in groups.items():
        arn = log_group_arn(stack, name, group)
        assert fnmatch.fnmatchcase(arn, pattern), f"{construct}: {key_id} does not let CloudWatch Logs encrypt {arn}"
    elsewhere = ["arn:aws:logs:us-west-2:111122223333:log-group:x", "arn:aws:logs:us-east-1:444455556666:log-group:x"]
    assert not any(fnmatch.fnmatchcase(arn, pattern) for arn in elsewhere)


@pytest.mark.parametrize("construct", sorted(OWN_KEY))
def test_the_users_own_key_replaces_the_constructs(construct):
    option, value = OWN_KEY[construct]
    _, template = build(construct, options_for(construct, **{option: value}))
    assert sorted(resources(template, "AWS::KMS::Key")) == [], f"{construct}({option}=...) still creates a key"
    for name, group in resources(template, "AWS::Logs::LogGroup").items():
        assert text(group["Properties"]["KmsKeyId"]).endswith(IMPORTED_KEY_SUFFIX), f"{construct}: {name}"
    for _, path, reference in kms_references(template):
        assert text(reference).endswith(IMPORTED_KEY_SUFFIX), f"{construct}: {path} = {reference!r}"


# --- the helper ---------------------------------------------------------------------------------------


def test_the_first_call_creates_the_key_and_every_later_one_returns_it():
    stack = cdk.Stack(cdk.App(), "S", env=m.ENV)
    scope = Construct(stack, "C")
    first = _secure.log_key(scope, "PrepareLogsKey", None)
    assert _secure.log_key(scope, "LogsKey", None) is first
    assert _secure.construct_key(scope, "VolumeKey", description="other") is first
    assert first.node.id == "PrepareLogsKey"  # the first caller's id: a construct's old key keeps its logical id
    own = kms.Key.from_key_arn(scope, "Own", f"arn:aws:kms:{m.REGION}:{m.ACCOUNT}{IMPORTED_KEY_SUFFIX}")
    assert _secure.log_key(scope, "LogsKey", own) is own
    assert _secure.log_key(Construct(stack, "Other"), "LogsKey", None) is not first  # one key per construct
    keys = resources(Template.from_stack(stack).to_json(), "AWS::KMS::Key")
    key = next(body for name, body in keys.items() if name.startswith("CPrepareLogsKey"))
    assert len(keys) == 2 and len(logs_statements(key)) == 1  # three calls, one statement
    assert key["DeletionPolicy"] == "Retain"


def test_only_the_helper_creates_keys():
    """A key made anywhere else would escape the one-per-construct rule and the retention decision."""
    from conftest import ROOT

    package = ROOT / "constructs" / "genai_pacer"
    creators = sorted(
        str(path.relative_to(package)) for path in package.rglob("*.py")
        if path.relative_to(package).as_posix() != "_internal/secure.py"
        and ("kms.Key(" in path.read_text() or "CfnKey(" in path.read_text())
    )
    assert creators == [], f"create keys with _internal.secure.construct_key / log_key instead: {creators}"


#: Where a construct's key prop is documented, when not in its own docstring.
DOCUMENTED_IN = {name: "StateMachineOptions" for name in ("BoundedMap", "BoundedDistributedMap", "ParallelPrompts",
                                                          "ScheduledPrecompute")} | {"VectorIndexSettings": "HybridSearchPipeline"}


@pytest.mark.parametrize("construct", sorted(name for name, (_, count) in DEFAULTS.items() if count))
def test_the_docs_of_a_construct_that_creates_a_key_say_what_it_costs_and_where_from(construct):
    import genai_pacer

    price = f"${_secure.KEY_MONTHLY_PRICE_USD:g} a month"
    doc = " ".join((getattr(genai_pacer, DOCUMENTED_IN.get(construct, construct)).__doc__ or "").split())
    assert price in doc and "AWS KMS pricing page" in doc and "retained on delete" in doc, construct


def test_the_security_page_states_the_price_with_its_source_and_what_retention_costs():
    from conftest import ROOT

    page = " ".join((ROOT / "docs" / "security.md").read_text().split())  # the README's Security section, moved
    assert "https://aws.amazon.com/kms/pricing/" in page
    assert f"${_secure.KEY_MONTHLY_PRICE_USD:g} a month" in page
    assert _secure.KEY_REMOVAL_POLICY == cdk.RemovalPolicy.RETAIN and "after `cdk destroy` each key still costs" in page
    readme = (ROOT / "README.md").read_text()
    assert "[docs/security.md](docs/security.md)" in readme  # the front door links it


# --- the reference app ----------------------------------------------------------------------------------

#: Keys per reference stack before issue 34.13 (main at 99ef241, counted from `make synth`'s templates:
#: AWS::KMS::Key resources per cdk.out/*.template.json).
BEFORE = {
    "GenaiPacerEndpointScaling": 0,
    "GenaiPacerExperiment": 1,
    "GenaiPacerObservability": 0,
    "GenaiPacerOrchestration": 4,
    "GenaiPacerPrecompute": 4,
    "GenaiPacerQueuedInference": 1,
    "GenaiPacerRetrieval": 1,
}
#: And now: one per construct that has log groups or a volume (ScheduledPrecompute's two became one). The
#: shared-quota stack came after: one each for the ledger's sweeper, the queue worker and the Map (its
#: assistant function's log group is the stack's own, on AWS-managed encryption).
AFTER = {**BEFORE, "GenaiPacerPrecompute": 3, "GenaiPacerSharedQuota": 3}


def test_keys_per_reference_stack(reference_templates):
    counted = {name: len(resources(template, "AWS::KMS::Key")) for name, template in reference_templates.items()}
    table = ", ".join(f"{name}: {BEFORE.get(name)} -> {counted[name]}" for name in sorted(counted))
    assert counted == AFTER, f"keys per reference stack (before issue 34.13 -> now): {table}; expected {AFTER}"
    assert sum(counted[name] for name in BEFORE) == sum(BEFORE.values()) - 1, table


def test_no_construct_of_the_reference_app_owns_more_than_one_key():
    from app import build_app

    app = build_app(outdir=tempfile.mkdtemp())
    owners = Counter(key.node.scope.node.path for key in app.node.find_all() if isinstance(key, kms.Key))  # type: ignore[union-attr]
    assert owners and max(owners.values()) == 1, owners
    assert sum(owners.values()) == sum(AFTER.values())
