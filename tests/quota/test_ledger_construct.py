"""QuotaLedger, the construct: the table a user gets (on-demand, encrypted, TTL, PITR), the grants each
consumer receives (exact actions, this quota's item only, the key through DynamoDB only), an existing
table accepted or refused by its schema, every prop checked by name, and the environment a consumer's
processes read (QuotaPacer.from_environment)."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Annotations, Match
from genai_pacer import BedrockModel, ModelQuota, QuotaLedger
from genai_pacer.quota.ledger import LEDGER_ENVIRONMENT, LEDGER_TTL_ATTRIBUTE
from helpers import names_prop, new_stack, only, policy_statements, refused, resources, template_of

NOVA = BedrockModel.from_id("us.amazon.nova-lite-v1:0")


def quota(stack: cdk.Stack, **props) -> ModelQuota:
    drawn = ModelQuota(stack, "Quota", **{"model": NOVA, "tpm_quota": 400_000, "burndown": 5, **props})
    profile = drawn.profile(input_tokens=2_500, output_tokens=300, max_tokens=440)
    drawn.share("Interactive", profile, fraction=0.5, call_seconds=6, executions=4)
    drawn.share("Batch", profile, fraction=0.25, call_seconds=6)
    return drawn


def role(stack: cdk.Stack, name: str = "Worker") -> iam.Role:
    return iam.Role(stack, name, assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))


def warnings_of(stack: cdk.Stack) -> list[str]:
    return [str(m.entry.data) for m in Annotations.from_stack(stack).find_warning("*", Match.any_value())]


def test_the_default_table_is_on_demand_encrypted_recoverable_with_ttl_on_holds():
    stack = new_stack()
    QuotaLedger(stack, "Ledger", quota=quota(stack))
    table = only(template_of(stack), "AWS::DynamoDB::Table")
    props = table["Properties"]
    assert props["KeySchema"] == [{"AttributeName": "pk", "KeyType": "HASH"}]
    assert props["AttributeDefinitions"] == [{"AttributeName": "pk", "AttributeType": "S"}]
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["SSESpecification"] == {"SSEEnabled": True}  # AWS-managed KMS
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["TimeToLiveSpecification"] == {"AttributeName": LEDGER_TTL_ATTRIBUTE, "Enabled": True}
    assert table["DeletionPolicy"] == "Delete"  # a minute of window state: nothing worth keeping


def test_a_customer_managed_key_encrypts_the_table_and_is_granted_through_dynamodb_only():
    stack = new_stack()
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    ledger = QuotaLedger(stack, "Ledger", quota=quota(stack), encryption_key=key)
    ledger.grant_use(role(stack))
    template = template_of(stack)
    sse = only(template, "AWS::DynamoDB::Table")["Properties"]["SSESpecification"]
    assert sse["SSEType"] == "KMS" and sse["KMSMasterKeyId"] == {"Fn::GetAtt": [stack.get_logical_id(key.node.default_child), "Arn"]}
    kms_statement = [s for s in policy_statements(template) if any(a.startswith("kms:") for a in s["Action"])]
    assert kms_statement == [{
        "Action": ["kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKey"],
        "Condition": {"StringEquals": {"kms:ViaService": "dynamodb.us-east-1.amazonaws.com"}},
        "Effect": "Allow",
        "Resource": {"Fn::GetAtt": [stack.get_logical_id(key.node.default_child), "Arn"]},
    }]


@pytest.mark.parametrize(("method", "actions"), [
    ("grant_use", ["dynamodb:UpdateItem", "dynamodb:GetItem"]),
    ("grant_read", ["dynamodb:GetItem"]),
])
def test_a_grant_gives_exactly_its_actions_on_this_quotas_item_only(method, actions):
    stack = new_stack()
    ledger = QuotaLedger(stack, "Ledger", quota=quota(stack))
    getattr(ledger, method)(role(stack))
    table_id = stack.get_logical_id(ledger.table.node.default_child)
    assert policy_statements(template_of(stack)) == [{
        "Action": actions if len(actions) > 1 else actions[0],
        "Condition": {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["quota#us.amazon.nova-lite-v1:0"]}},
        "Effect": "Allow",
        "Resource": {"Fn::GetAtt": [table_id, "Arn"]},
    }]


def test_two_quotas_share_one_table_each_consumer_granted_its_own_item():
    stack = new_stack()
    shared = dynamodb.Table(stack, "Shared", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
                            time_to_live_attribute=LEDGER_TTL_ATTRIBUTE)
    first = QuotaLedger(stack, "First", quota=quota(stack), table=shared)
    other = ModelQuota(stack, "Other", model=BedrockModel.from_id("amazon.nova-pro-v1:0"), tpm_quota=100_000)
    second = QuotaLedger(stack, "Second", quota=other, table=shared)
    first.grant_use(role(stack, "A"))
    second.grant_use(role(stack, "B"))
    template = template_of(stack)
    assert len(resources(template, "AWS::DynamoDB::Table")) == 1
    keys = sorted(s["Condition"]["ForAllValues:StringEquals"]["dynamodb:LeadingKeys"][0] for s in policy_statements(template))
    assert keys == ["quota#amazon.nova-pro-v1:0", "quota#us.amazon.nova-lite-v1:0"]
    assert [m for m in warnings_of(stack) if "ledger" in m or "table" in m] == []


def test_an_existing_table_with_another_key_schema_is_refused_naming_the_table():
    stack = new_stack()
    wrong = dynamodb.Table(stack, "Wrong", partition_key=dynamodb.Attribute(name="id", type=dynamodb.AttributeType.STRING),
                           sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.NUMBER))
    problems = refused(lambda: QuotaLedger(stack, "Ledger", quota=quota(stack), table=wrong))
    assert any("partition key 'id' (a string) and sort key 'sk'" in p and "'pk'" in p for p in problems), problems


def test_an_existing_table_whose_pk_is_a_number_is_refused_saying_its_type():
    """The name is right and the type is not: the refusal says which (as AnswerStore's does)."""
    stack = new_stack()
    wrong = dynamodb.TableV2(stack, "Wrong", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.NUMBER))
    problems = refused(lambda: QuotaLedger(stack, "Ledger", quota=quota(stack), table=wrong))
    assert any("has partition key 'pk' (a number); the ledger keys each quota's item by a string partition key "
               "named 'pk' and no sort key" in p for p in problems), problems


def test_an_existing_table_without_ttl_warns_and_an_imported_one_says_what_to_check():
    stack = new_stack()
    drawn = quota(stack)
    no_ttl = dynamodb.Table(stack, "NoTtl", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING))
    QuotaLedger(stack, "Own", quota=drawn, table=no_ttl)
    imported = QuotaLedger(stack, "Imported", quota=drawn, ledger_id="second",
                           table=dynamodb.Table.from_table_name(stack, "Theirs", "their-ledger"))
    imported.grant_use(role(stack))
    messages = warnings_of(stack)
    assert any("genai-pacer:ledger-ttl" in m and "no TTL" in m and "expires_at" in m for m in messages), messages
    assert any("genai-pacer:table-unverified" in m and "'pk'" in m for m in messages), messages
    assert resources(template_of(stack), "AWS::DynamoDB::Table").keys() == {stack.get_logical_id(no_ttl.node.default_child)}


@pytest.mark.parametrize(("props", "prop"), [
    ({"quota": "not a quota"}, "quota"),
    ({"table": "my-table"}, "table"),
    ({"encryption_key": "alias/mine"}, "encryption_key"),
    ({"ledger_id": ""}, "ledger_id"),
    ({"ledger_id": "x" * 201}, "ledger_id"),
    ({"clock_skew": cdk.Duration.seconds(31)}, "clock_skew"),
    ({"clock_skew": 1}, "clock_skew"),
])
def test_a_bad_prop_is_refused_by_name(props, prop):
    stack = new_stack()
    problems = refused(lambda: QuotaLedger(stack, "Ledger", **{"quota": quota(stack), **props}))
    assert names_prop(prop, problems), problems


def test_a_key_for_an_existing_table_is_refused():
    stack = new_stack()
    table = dynamodb.Table(stack, "T", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING))
    problems = refused(lambda: QuotaLedger(stack, "Ledger", quota=quota(stack), table=table,
                                           encryption_key=kms.Key(stack, "Key", enable_key_rotation=True)))
    assert any("encrypt your table yourself" in p for p in problems), problems


def test_the_environment_gives_each_consumer_its_floor_burst_and_fallback():
    stack = new_stack()
    ledger = QuotaLedger(stack, "Ledger", quota=quota(stack, keep_free=0.1))
    env = ledger.environment("Interactive", burst_tpm=300_000)
    assert stack.resolve(env["GENAI_PACER_LEDGER_TABLE"]) == {"Ref": stack.get_logical_id(ledger.table.node.default_child)}
    batch = ledger.environment("Batch")  # both shares are the ledger's consumers: none is held outside it
    # the minute and the burst cap are tokens resolved at synth (QuotaLedger.shared_tpm: none outside here)
    assert {k: stack.resolve(env[k]) for k in LEDGER_ENVIRONMENT[1:]} == {
        "GENAI_PACER_LEDGER_ID": "us.amazon.nova-lite-v1:0",
        "GENAI_PACER_LEDGER_CONSUMER": "Interactive",
        "GENAI_PACER_LEDGER_QUOTA_TPM": "360000",  # 400,000 less keep_free
        "GENAI_PACER_LEDGER_FLOOR_TPM": "200000",  # the share (half the quota), every process of it together
        "GENAI_PACER_LEDGER_BURST_TPM": "300000",
        "GENAI_PACER_LEDGER_SKEW_SECONDS": "1",
        "GENAI_PACER_LEDGER_DAILY_TOKENS": str(360_000 * 1_440),  # the day, less keep_free too
    }
    assert env["GENAI_PACER_TPM"] == "50000"  # the static per-process share: the fallback (4 executions)
    assert stack.resolve(batch["GENAI_PACER_LEDGER_BURST_TPM"]) == "360000"  # default: the whole quota


def test_every_consumer_keeps_a_want_past_a_state_machines_longest_wait_and_the_clock_skew():
    """GENAI_PACER_LEDGER_WANT_SECONDS: the longest wait (8 s) + the whole second + the skew + 2 s."""
    stack = new_stack()
    default = QuotaLedger(stack, "Ledger", quota=quota(stack))
    assert default.environment("Batch")["GENAI_PACER_LEDGER_WANT_SECONDS"] == "12"
    stack = new_stack()
    skewed = QuotaLedger(stack, "Ledger", quota=quota(stack), clock_skew=cdk.Duration.seconds(5))
    assert skewed.environment("Batch")["GENAI_PACER_LEDGER_WANT_SECONDS"] == "16" and skewed.want_seconds == 16


@pytest.mark.parametrize(("share", "burst", "needle"), [
    ("Nobody", None, "not a share of ModelQuota Quota; drawn: Interactive, Batch"),
    ("Interactive", 100_000, "burst_tpm"),
    ("Interactive", 500_000, "burst_tpm"),
])
def test_the_environment_refuses_an_unknown_share_and_a_burst_cap_outside_floor_and_quota(share, burst, needle):
    stack = new_stack()
    ledger = QuotaLedger(stack, "Ledger", quota=quota(stack))
    problems = refused(lambda: ledger.environment(share, burst_tpm=burst))
    assert any(needle in p for p in problems), problems


def test_a_share_name_that_cannot_be_an_attribute_name_is_refused():
    stack = new_stack()
    drawn = quota(stack)
    drawn.share("a#b", drawn.profile(input_tokens=100, output_tokens=10, max_tokens=20), fraction=0.1, call_seconds=1)
    problems = refused(lambda: QuotaLedger(stack, "Ledger", quota=drawn).environment("a#b"))
    assert any("no '#'" in p for p in problems), problems


def test_a_deploy_time_model_id_keys_the_item_by_the_quotas_path():
    stack = new_stack()
    model_id = cdk.CfnParameter(stack, "ModelId").value_as_string
    drawn = ModelQuota(stack, "Quota", model=BedrockModel.foundation(model_id), tpm_quota=100_000)
    ledger = QuotaLedger(stack, "Ledger", quota=drawn)
    assert ledger.ledger_id == cdk.Names.unique_id(drawn) and not cdk.Token.is_unresolved(ledger.ledger_id)


def test_an_alarm_on_the_fallbacks_counts_what_a_function_publishes_inside_lambda(capsys, monkeypatch):
    """QuotaLedger.metric_fallbacks is the LedgerId-only series; a function's QuotaPacer publishes that set
    beside its FunctionName one (CloudWatch keeps each dimension set as a metric of its own)."""
    import json

    from aws_cdk import aws_cloudwatch as cloudwatch
    from pacer_runtime import metrics

    stack = new_stack()
    ledger = QuotaLedger(stack, "Ledger", quota=quota(stack))
    cloudwatch.Alarm(stack, "Fallbacks", metric=ledger.metric_fallbacks(), threshold=1, evaluation_periods=1,
                     comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD)
    (alarm,) = resources(template_of(stack), "AWS::CloudWatch::Alarm").values()
    assert {k: alarm["Properties"][k] for k in ("Namespace", "MetricName", "Dimensions", "Statistic", "Period")} == {
        "Namespace": "GenaiPacer", "MetricName": "LedgerFallbacks", "Statistic": "Sum", "Period": 300,
        "Dimensions": [{"Name": "LedgerId", "Value": NOVA.model_id}]}

    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "worker-fn")
    metrics.emit_ledger_fallback(NOVA.model_id)
    line = json.loads(capsys.readouterr().out)
    (published,) = line["_aws"]["CloudWatchMetrics"]
    assert (published["Namespace"], published["Metrics"]) == ("GenaiPacer", [{"Name": "LedgerFallbacks", "Unit": "Count"}])
    assert published["Dimensions"] == [["LedgerId"], ["FunctionName", "LedgerId"]]
    assert (line["LedgerId"], line["FunctionName"], line["LedgerFallbacks"]) == (NOVA.model_id, "worker-fn", 1)


def test_with_a_reservation_the_fallbacks_alarm_adds_the_reservation_items():
    """A Reserved tier reservation's fallbacks are published by its own item's id (<ledger id>#reserved)."""
    from aws_cdk import aws_cloudwatch as cloudwatch

    stack = new_stack()
    ledger = QuotaLedger(stack, "Ledger", quota=quota(stack, reserved_input_tpm=1_000, reserved_output_tpm=300))
    cloudwatch.Alarm(stack, "Fallbacks", metric=ledger.metric_fallbacks(), threshold=1, evaluation_periods=1)
    (alarm,) = resources(template_of(stack), "AWS::CloudWatch::Alarm").values()
    queries = {q["Id"]: q for q in alarm["Properties"]["Metrics"]}
    dimensions = {q["Id"]: q["MetricStat"]["Metric"]["Dimensions"] for q in queries.values() if "MetricStat" in q}
    assert dimensions == {"shared": [{"Name": "LedgerId", "Value": NOVA.model_id}],
                          "reserved": [{"Name": "LedgerId", "Value": NOVA.model_id + "#reserved"}]}
    assert [q["Expression"] for q in queries.values() if "Expression" in q] == ["FILL(shared, 0) + FILL(reserved, 0)"]
    assert {q["MetricStat"]["Stat"] for q in queries.values() if "MetricStat" in q} == {"Sum"}
