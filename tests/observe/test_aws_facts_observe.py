"""The AWS facts PromptExperiment, ModelInvocationLogging and LatencyDashboard rely on, checked against
the botocore service models and cfn-lint's CloudFormation schemas the dev tools install (issue 21.4).
Facts only a document states (AppConfig's rollback states, EventBridge's condition keys, the
AWS/Bedrock/Batch metric names) are named constants with their URL beside them."""

from __future__ import annotations

import gzip
import json
import re
from functools import cache
from pathlib import Path

import botocore
import cfnlint
from aws_cdk.assertions import Template
from genai_pacer.experiments import prompt_experiment
from genai_pacer.observe import dashboard as observability
from genai_pacer.observe import invocation_logging
from helpers import new_stack, resources

BOTOCORE = Path(botocore.__file__).parent / "data"
SCHEMAS = Path(cfnlint.__file__).parent / "data" / "schemas"


@cache
def model(service: str) -> dict:
    (path,) = sorted(BOTOCORE.glob(f"{service}/*/service-2.json*"))[-1:]
    return json.loads(gzip.open(path).read() if path.suffix == ".gz" else path.read_text())


@cache
def schema(type_name: str) -> dict:
    providers = json.loads((SCHEMAS / "providers" / "us-east-1.json").read_text())
    return json.loads((SCHEMAS / "resources" / f"{providers[type_name]}.json").read_text())


def text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))


# ---- CloudWatch: new alarms, their states, DescribeAlarms ------------------------------------------------


def test_cloudwatch_creates_alarms_in_the_state_the_guard_wait_waits_out():
    cloudwatch = model("cloudwatch")
    for operation in ("PutMetricAlarm", "PutCompositeAlarm"):
        assert (f"the alarm state is immediately set to {prompt_experiment.CREATED_ALARM_STATE}"
                in text(cloudwatch["operations"][operation]["documentation"])), operation
    states = cloudwatch["shapes"]["StateValue"]["enum"]
    assert prompt_experiment.CREATED_ALARM_STATE in states
    assert set(prompt_experiment.APPCONFIG_ROLLBACK_STATES) <= set(states)


def test_describe_alarms_takes_at_most_100_names_and_both_alarm_types():
    shapes = model("cloudwatch")["shapes"]
    names = shapes["DescribeAlarmsInput"]["members"]["AlarmNames"]["shape"]
    assert shapes[names]["max"] == prompt_experiment.DESCRIBE_ALARMS_MAX_NAMES
    alarm_types = shapes[shapes["DescribeAlarmsInput"]["members"]["AlarmTypes"]["shape"]]["member"]["shape"]
    assert {"MetricAlarm", "CompositeAlarm"} <= set(shapes[alarm_types]["enum"])
    output = shapes["DescribeAlarmsOutput"]["members"]
    assert {"MetricAlarms", "CompositeAlarms"} <= set(output)
    assert "StateValue" in shapes["MetricAlarm"]["members"] and "StateValue" in shapes["CompositeAlarm"]["members"]


def test_a_composite_rules_alarm_function_is_true_only_in_alarm():
    """The composite monitor (more than 2 variants) is OK while its guards are INSUFFICIENT_DATA."""
    rule = text(model("cloudwatch")["shapes"]["PutCompositeAlarmInput"]["members"]["AlarmRule"]["documentation"])
    assert 'ALARM("alarm-name or alarm-ARN") is TRUE if the named alarm is in ALARM state' in rule


def test_the_guard_wait_reads_what_describe_alarms_returns():
    source = prompt_experiment.GUARD_WAIT_SOURCE
    for name in ("describe_alarms", "AlarmNames", "AlarmTypes", "MetricAlarms", "CompositeAlarms", "AlarmName", "StateValue"):
        assert name in source, name


# ---- AppConfig ------------------------------------------------------------------------------------------


def test_appconfig_watches_at_most_five_monitors_and_bakes_at_most_a_day():
    appconfig = model("appconfig")["shapes"]
    monitors = appconfig["CreateEnvironmentRequest"]["members"]["Monitors"]["shape"]
    assert appconfig[monitors]["max"] == prompt_experiment.MAX_MONITORS
    assert schema("AWS::AppConfig::Environment")["properties"]["Monitors"]["maxItems"] == prompt_experiment.MAX_MONITORS
    bake = appconfig["CreateDeploymentStrategyRequest"]["members"]["FinalBakeTimeInMinutes"]["shape"]
    assert (appconfig[bake]["min"], appconfig[bake]["max"]) == (0, prompt_experiment._MAX_MINUTES)
    assert set(appconfig["Monitor"]["members"]) == {"AlarmArn", "AlarmRoleArn"}


# ---- EventBridge: the fallback rule's name, as its role's trust condition builds the ARN ----------------


def test_the_fallback_rule_name_fits_the_schema_that_its_arn_is_built_from():
    """prefix-<stack UUID>-<8 characters of the construct address>, at most 64 characters of the pattern."""
    name_schema = schema("AWS::Events::Rule")["properties"]["Name"]
    example_stack_id = "arn:aws:cloudformation:us-west-2:123456789012:stack/teststack/51af3dc0-da77-11e4-872e-1234567db123"
    uuid = example_stack_id.split("/")[prompt_experiment.STACK_ID_UUID_INDEX]
    assert len(uuid) == prompt_experiment.STACK_UUID_LENGTH
    longest = "-".join([prompt_experiment.RULE_NAME_PREFIX, uuid, "c8" * 4])
    assert len(longest) <= name_schema["maxLength"] and re.match(name_schema["pattern"], longest)
    assert prompt_experiment.EVENTS_SOURCE_ARN_KEY == "aws:SourceArn"
    assert prompt_experiment.EVENTS_SOURCE_ACCOUNT_KEY == "aws:SourceAccount"


# ---- S3 lifecycle of the invocation-log bucket ------------------------------------------------------------


def test_s3_lifecycle_days_are_positive_integers_and_delete_markers_need_a_rule_of_their_own():
    shapes = model("s3")["shapes"]
    for shape, member in (("LifecycleExpiration", "Days"), ("NoncurrentVersionExpiration", "NoncurrentDays")):
        assert "must be a non-zero positive integer" in text(shapes[shape]["members"][member]["documentation"])
    assert invocation_logging.NONCURRENT_DAYS >= invocation_logging.MIN_LIFECYCLE_DAYS == 1
    rule = schema("AWS::S3::Bucket")["definitions"]["Rule"]["properties"]
    assert rule["ExpirationInDays"]["type"] == "integer"
    assert "cannot be specified with ``ExpirationInDays``" in rule["ExpiredObjectDeleteMarker"]["description"]


def test_the_default_bucket_retention_is_the_default_log_groups_month():
    from aws_cdk import aws_logs as logs

    stack = new_stack()
    logs.LogGroup(stack, "G", retention=logs.RetentionDays.ONE_MONTH)
    (group,) = resources(Template.from_stack(stack).to_json(), "AWS::Logs::LogGroup").values()
    assert group["Properties"]["RetentionInDays"] == invocation_logging.DEFAULT_BUCKET_RETENTION_DAYS


def test_the_guard_wait_is_inline_code_cloudformation_puts_in_index():
    code = schema("AWS::Lambda::Function")["definitions"]["Code"]["properties"]["ZipFile"]["description"]
    assert "the first part of the handler identifier must be ``index``" in code
    stack = new_stack()
    prompt_experiment.PromptExperiment(stack, "Exp", variants=[
        prompt_experiment.ExperimentVariant(n, observability.BedrockModel.from_id("amazon.nova-lite-v1:0"), 50,
                                            prompt_experiment.TextPrompt("q")) for n in ("a", "b")])
    (function,) = [f["Properties"] for k, f in resources(Template.from_stack(stack).to_json(), "AWS::Lambda::Function").items()
                   if k.startswith("ExpGuardWait")]
    assert function["Handler"].split(".")[0] == "index" and function["Code"]["ZipFile"] == prompt_experiment.GUARD_WAIT_SOURCE
