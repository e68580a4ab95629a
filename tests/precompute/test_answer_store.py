"""AnswerStore: the answers table every writer and reader shares, its checks of your own table, its grants."""

from __future__ import annotations

import math

import aws_cdk as cdk
import pytest
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Annotations, Match
from genai_pacer import AnswerStore, InvalidPropsError
from genai_pacer.precompute.store import PARTITION_KEY, TTL_ATTRIBUTE
from helpers import new_stack, only, policy_statements, template_of


def _id(template: dict, prefix: str) -> str:
    (found,) = [k for k in template["Resources"] if k.startswith(prefix)]
    return found


def test_the_schema_constants_match_the_handlers_side():
    from pacer_runtime import answers

    assert (PARTITION_KEY, TTL_ATTRIBUTE) == (answers.PARTITION_KEY, answers.TTL_ATTRIBUTE)


def test_a_new_store_is_on_demand_recoverable_retained_and_ages_answers_out():
    stack = new_stack()
    store = AnswerStore(stack, "Store")
    table = only(template_of(stack).to_json(), "AWS::DynamoDB::Table")
    assert table["Properties"]["KeySchema"] == [{"AttributeName": "pk", "KeyType": "HASH"}]
    assert table["Properties"]["BillingMode"] == "PAY_PER_REQUEST"
    assert table["Properties"]["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert table["Properties"]["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert table["Properties"]["SSESpecification"] == {"SSEEnabled": True}
    assert table["DeletionPolicy"] == "Retain"
    assert cdk.Stack.of(store).resolve(store.environment()) == {
        "ANSWER_TABLE": {"Ref": _id(template_of(stack).to_json(), "StoreTable")},
        "ANSWER_TTL_SECONDS": str(30 * 24 * 3600),
    }


def test_no_ttl_keeps_answers_and_a_customer_key_encrypts_the_table():
    stack = new_stack()
    key = kms.Key(stack, "TableKey", enable_key_rotation=True)
    store = AnswerStore(stack, "Store", encryption_key=key, answer_ttl=None)
    template = template_of(stack).to_json()
    assert only(template, "AWS::DynamoDB::Table")["Properties"]["SSESpecification"] == {
        "KMSMasterKeyId": {"Fn::GetAtt": [_id(template, "TableKey"), "Arn"]}, "SSEEnabled": True, "SSEType": "KMS",
    }
    assert store.environment()["ANSWER_TTL_SECONDS"] == ""


@pytest.fixture(scope="module")
def granted():
    stack = new_stack()
    key = kms.Key(stack, "TableKey", enable_key_rotation=True)
    table = dynamodb.Table(
        stack, "Mine", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
        encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED, encryption_key=key,
    )
    store = AnswerStore(stack, "Store", table=table)
    reader = iam.Role(stack, "Reader", assumed_by=iam.AccountRootPrincipal())
    writer = iam.Role(stack, "Writer", assumed_by=iam.AccountRootPrincipal())
    putter = iam.Role(stack, "Putter", assumed_by=iam.AccountRootPrincipal())
    store.grant_read(reader)
    store.grant_write(writer)
    store.grant_put(putter)
    return store, table, template_of(stack).to_json()


def actions_of(template: dict, role_prefix: str, resource: dict) -> list[str]:
    statements = [
        s for name, policy in template["Resources"].items()
        if name.startswith(role_prefix) and policy["Type"] == "AWS::IAM::Policy"
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if resource in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])
    ]
    return sorted(a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"]))


def test_readers_get_item_putters_put_and_writers_also_delete_on_that_table_and_key_only(granted):
    store, table, template = granted
    assert store.table is table
    table_arn = {"Fn::GetAtt": [_id(template, "Mine"), "Arn"]}
    key_arn = {"Fn::GetAtt": [_id(template, "TableKey"), "Arn"]}
    assert actions_of(template, "Reader", table_arn) == ["dynamodb:GetItem"]
    # grant_put (the router) writes answers and overwrites its per-key claims, but deletes nothing:
    # neither the worker's claims nor the pre-computation's run lock.
    assert actions_of(template, "Putter", table_arn) == ["dynamodb:GetItem", "dynamodb:PutItem"]
    assert actions_of(template, "Writer", table_arn) == ["dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem"]
    assert actions_of(template, "Reader", key_arn) == ["kms:Decrypt", "kms:DescribeKey"]
    write_key = ["kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKey"]
    assert actions_of(template, "Putter", key_arn) == write_key == actions_of(template, "Writer", key_arn)
    assert not any(s["Resource"] == "*" for s in policy_statements(template))
    # Every key statement holds only through DynamoDB in the table's Region (no direct Decrypt).
    key_statements = [s for s in policy_statements(template) if s["Resource"] == key_arn]
    assert len(key_statements) == 3 and all(
        s["Condition"] == {"StringEquals": {"kms:ViaService": "dynamodb.us-east-1.amazonaws.com"}}  # new_stack's Region
        for s in key_statements
    )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda s: dynamodb.Table(s, "T", partition_key=dynamodb.Attribute(name="id", type=dynamodb.AttributeType.STRING)),
            "table Test/T has partition key 'id' (a string); answers are read and written by a string partition key named 'pk'",
        ),
        (
            lambda s: dynamodb.Table(s, "T", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.NUMBER)),
            "table Test/T has partition key 'pk' (a number)",
        ),
        (
            lambda s: dynamodb.Table(
                s, "T", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
                sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.STRING),
            ),
            "table Test/T has partition key 'pk' (a string) and sort key 'sk'",
        ),
        (
            lambda s: dynamodb.TableV2(s, "T", partition_key=dynamodb.Attribute(name="id", type=dynamodb.AttributeType.NUMBER)),
            "table Test/T has partition key 'id' (a number)",
        ),
    ],
)
def test_an_existing_table_without_a_string_pk_is_refused(make, message):
    stack = new_stack()
    with pytest.raises(InvalidPropsError, match="no sort key") as caught:
        AnswerStore(stack, "Store", table=make(stack))
    assert message in str(caught.value)


def test_a_table_v2_with_a_string_pk_is_accepted_and_an_imported_table_is_flagged():
    stack = new_stack()
    table = dynamodb.TableV2(stack, "T", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING))
    assert AnswerStore(stack, "A", table=table).table is table
    AnswerStore(stack, "B", table=dynamodb.Table.from_table_name(stack, "Imported", "answers"))
    Annotations.from_stack(stack).has_warning(
        "/Test/B", Match.string_like_regexp("table Test/Imported is imported, so its key schema cannot be read")
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(table="answers"), "table='answers' is a str; pass a dynamodb.Table"),
        (dict(encryption_key="alias/k"), "encryption_key='alias/k' is a str; pass a kms.Key"),
        (dict(answer_ttl=3600), "answer_ttl=3600 is an int; pass a cdk.Duration"),
        (dict(answer_ttl=cdk.Duration.seconds(10)), "answer_ttl=10 seconds is below the minimum of 1 minute"),
        (dict(answer_ttl=cdk.Duration.days(4000)), "answer_ttl=4000 days exceeds the maximum of 3650 days"),
        (dict(answer_ttl=math.nan), "answer_ttl=nan is a float"),
    ],
)
def test_bad_props_are_refused(kwargs, message):
    with pytest.raises(InvalidPropsError, match=message):
        AnswerStore(new_stack(), "Store", **kwargs)


def test_a_key_for_an_existing_table_is_refused_not_ignored():
    stack = new_stack()
    table = dynamodb.Table(stack, "T", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING))
    with pytest.raises(InvalidPropsError, match="encryption_key configures a new table, but table is an existing one"):
        AnswerStore(stack, "Store", table=table, encryption_key=kms.Key(stack, "K"))


def test_an_environment_agnostic_stack_conditions_the_key_on_its_deploy_region():
    stack = cdk.Stack(cdk.App(), "Agnostic")
    store = AnswerStore(stack, "Store", encryption_key=kms.Key(stack, "TableKey", enable_key_rotation=True))
    store.grant_read(iam.Role(stack, "Reader", assumed_by=iam.AccountRootPrincipal()))
    (statement,) = [s for s in policy_statements(template_of(stack).to_json()) if "kms:Decrypt" in s["Action"]]
    assert statement["Condition"] == {"StringEquals": {"kms:ViaService": {
        "Fn::Join": ["", ["dynamodb.", {"Ref": "AWS::Region"}, ".amazonaws.com"]]}}}


def test_cdk_nag_finds_no_kms_wildcards_on_roles_granted_on_a_customer_managed_store():
    """Issue 27: every role granted on a customer-managed key used to get two IAM5 findings
    (Action::kms:ReEncrypt*, Action::kms:GenerateDataKey*). Each grant now names exact actions."""
    import contextlib
    import tempfile
    from pathlib import Path

    from cdk_nag import AwsSolutionsChecks
    from conftest import nag_violations
    from genai_pacer import BedrockModel, QueuedInference

    outdir = Path(tempfile.mkdtemp())
    app = cdk.App(outdir=str(outdir))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    stack = cdk.Stack(app, "Nag", env=cdk.Environment(account="123456789012", region="us-east-1"))
    store = AnswerStore(stack, "Store", encryption_key=kms.Key(stack, "TableKey", enable_key_rotation=True))
    QueuedInference(stack, "Q", model=BedrockModel.from_id("amazon.nova-lite-v1:0"), max_concurrency=2,
                    answer_store=store)
    for name, grant in (("Reader", store.grant_read), ("Putter", store.grant_put), ("Writer", store.grant_write)):
        grant(iam.Role(stack, name, assumed_by=iam.ServicePrincipal("lambda.amazonaws.com")))
    with contextlib.suppress(RuntimeError):
        app.synth()
    findings = nag_violations(outdir)
    assert [f for f in findings if "IAM5" in f] == [], findings
    key_findings = [f for f in findings if "kms" in f.lower() or "Store" in f or f.endswith(("Reader", "Putter", "Writer"))]
    assert key_findings == [], findings


# ---- a deploy-time TTL reaches every writer as a reference (issue 34.1) -----------------------------


def test_a_deploy_time_ttl_reaches_every_writer_as_a_reference_never_as_digits():
    """Router, worker, scheduled and batch pre-computation all write answers with the store's TTL: each
    gets ANSWER_TTL_SECONDS as the parameter's Ref (it was int() of the token's encoding, 290 digits)."""
    from aws_cdk import aws_scheduler as scheduler
    from aws_cdk import aws_stepfunctions as sfn
    from genai_pacer import AnswerRouter, BedrockModel, ConverseRequest, QueuedInference
    from genai_pacer.precompute.batch import BatchPrecompute
    from genai_pacer.precompute.scheduled import ScheduledPrecompute

    stack = new_stack()
    ttl = cdk.CfnParameter(stack, "TtlSeconds", type="Number")
    store = AnswerStore(stack, "Store", answer_ttl=cdk.Duration.seconds(ttl.value_as_number))
    model = BedrockModel.from_id("amazon.nova-lite-v1:0")
    AnswerRouter(stack, "Router", answer_store=store, model=model, prompts={"note#{ticker}": "A note on {ticker}"})
    QueuedInference(stack, "Queue", model=model, max_concurrency=4, answer_store=store)
    ScheduledPrecompute(
        stack, "Pre", answer_store=store, model=model, max_concurrency=2, items=[{"key": "note#aapl"}],
        request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.item.key"), max_tokens=100),
        schedule=scheduler.ScheduleExpression.cron(minute="0", hour="6"),
    )
    BatchPrecompute(stack, "Batch", model=model, max_tokens=100, answer_store=store)
    functions = template_of(stack).find_resources("AWS::Lambda::Function")
    ttls = {
        name: props["Properties"]["Environment"]["Variables"]["ANSWER_TTL_SECONDS"]
        for name, props in functions.items()
        if "ANSWER_TTL_SECONDS" in props["Properties"].get("Environment", {}).get("Variables", {})
    }
    writers = {prefix: [n for n in ttls if n.startswith(prefix)] for prefix in ("Router", "Queue", "Pre", "Batch")}
    assert all(writers.values()), writers  # each kind of writer has a function that writes answers
    assert ttls and all(value == {"Ref": "TtlSeconds"} for value in ttls.values()), ttls


@pytest.mark.parametrize("unit", ["minutes", "hours", "days"])
def test_a_deploy_time_ttl_in_another_unit_is_refused_naming_answer_ttl(unit):
    stack = new_stack()
    ttl = cdk.CfnParameter(stack, "TtlDays", type="Number").value_as_number
    with pytest.raises(InvalidPropsError, match=r"answer_ttl is a deploy-time Duration in another unit.*cdk\.Duration\.seconds"):
        AnswerStore(stack, "Store", answer_ttl=getattr(cdk.Duration, unit)(ttl))
