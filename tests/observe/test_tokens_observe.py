"""Every prop of PromptExperiment and LlmEndpoint (and of ModelInvocationLogging, LatencyDashboard and
the dashboard's TpmQuota, LatencyAlarms and WatchedModel) given an unresolved token of each kind (a CfnParameter's
value_as_number, value_as_string, a Duration of one, value_as_list): it reaches the template as a
reference with the construct's logic intact (an alarm threshold is the parameter, a description names it,
a gate sits inside the expression), or synth refuses it naming the prop (issue 23). Never a garbled
number (aws-cdk-lib's encoding of a number token, about -1.9e289) in the template, never a jsii error."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Annotations, Match, Template
from genai_pacer import BedrockModel, InvalidPropsError, LlmEndpoint
from genai_pacer.experiments.prompt_experiment import ExperimentVariant, PromptExperiment, TextPrompt
from genai_pacer.observe.dashboard import LatencyAlarms, LatencyDashboard, TpmQuota, WatchedModel
from genai_pacer.observe.invocation_logging import ModelInvocationLogging
from helpers import new_stack, resources, token_of

NOVA = BedrockModel.from_id("us.amazon.nova-lite-v1:0")
TGI = "763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-tgi-inference:2.7.0-tgi3.3.6-gpu-py311-cu124-ubuntu22.04"
KINDS = ("number", "string", "duration", "list")
REF = {"Ref": "Param"}
#: How a number token looks once formatted as text (aws-cdk-lib's encoding: -1.8881545897087...e+289).
GARBLED = ("1.888154", "1.88815e+289", "e+289")




def experiment(stack: cdk.Stack, **props: Any) -> PromptExperiment:
    return PromptExperiment(stack, "Exp", **{"variants": [
        ExperimentVariant("control", NOVA, 90, TextPrompt("Answer: {{question}}")),
        ExperimentVariant("treatment", NOVA, 10, TextPrompt("Answer briefly: {{question}}")),
    ], **props})


def endpoint(stack: cdk.Stack, **props: Any) -> LlmEndpoint:
    return LlmEndpoint(stack, "Llm", **{
        "instance_type": "ml.g5.2xlarge", "image_uri": TGI, "model_data_key": "llama/",
        "model_data_bucket": s3.Bucket.from_bucket_name(stack, "Models", "my-models"), **props})


#: The props that configure a new bucket, given with s3_delivery on so only the token decides.
_BUCKET_PROPS = ("key_prefix", "large_data_prefix", "bucket_retention", "server_access_logs_bucket")


def logging(stack: cdk.Stack, **props: Any) -> ModelInvocationLogging:
    on = {"s3_delivery": True} if set(props) & set(_BUCKET_PROPS) else {}
    return ModelInvocationLogging(stack, "Logging", **on, **props)


def dashboard(stack: cdk.Stack, **props: Any) -> LatencyDashboard:
    return LatencyDashboard(stack, "Dashboard", **props)


def quota(stack: cdk.Stack, **props: Any) -> LatencyDashboard:
    return dashboard(stack, models=[WatchedModel(NOVA, quota=TpmQuota(**{"tpm_quota": 400_000, **props}))])


def latency_alarms(stack: cdk.Stack, **props: Any) -> LatencyDashboard:
    return dashboard(stack, models=[WatchedModel(NOVA, alarms=LatencyAlarms(**props))])


def watched(stack: cdk.Stack, **props: Any) -> LatencyDashboard:
    return dashboard(stack, models=[WatchedModel(**{"model": NOVA, **props})])


BUILDERS: dict[str, Callable[..., Any]] = {
    "experiment": experiment, "endpoint": endpoint, "logging": logging, "dashboard": dashboard, "quota": quota,
    "alarms": latency_alarms, "watched": watched}
LOGGING_PROPS = ("cloudwatch_logs", "log_group", "s3_delivery", "bucket", "key_prefix", "large_data_prefix", "text_data",
                 "image_data", "embedding_data", "video_data", "encryption_key", "log_retention", "bucket_retention",
                 "server_access_logs_bucket", "keep_logging_on_delete", "bucket_key")
DASHBOARD_PROPS = ("models", "dashboard_name", "alarm_actions", "default_interval")
QUOTA_PROPS = ("tpm_quota", "alarm_fraction", "planned_tpm", "planned_reservation_tpm", "burndown")
ALARMS_PROPS = ("ttft_p90", "throttle_periods", "reservation_ratio", "latency_fallbacks", "evaluation_periods",
                "tier_downgrades")
WATCHED_PROPS = ("model", "quota", "burndown", "alarms", "label")
EXPERIMENT_PROPS = ("variants", "control", "experiment_name", "salt", "application", "deployment_strategy", "bake_time",
                    "max_error_rate_percent", "max_p90_latency", "guard_min_calls", "guard_period",
                    "guard_evaluation_periods", "fallback_on_alarm", "alarm_actions", "encryption_key", "log_retention")
ENDPOINT_PROPS = ("instance_type", "image_uri", "model_data_bucket", "model_data_key", "image_repository", "environment",
                  "initial_instance_count", "startup_health_check_timeout", "model_data_download_timeout",
                  "inference_component", "volume_encryption_key", "endpoint_name", "variant_name", "routing_strategy",
                  "network_isolation", "latency_alarm_threshold", "alarm_actions", "model_data_bucket_key")
#: (construct, prop, kind) -> the resource type whose properties hold the reference. Every other case is
#: refused, naming the prop.
PASSES = {
    ("experiment", "experiment_name", "string"): "AWS::CloudWatch::Alarm",  # the Experiment dimension
    ("experiment", "salt", "string"): "AWS::AppConfig::HostedConfigurationVersion",
    ("experiment", "max_error_rate_percent", "number"): "AWS::CloudWatch::Alarm",
    ("experiment", "max_p90_latency", "duration"): "AWS::CloudWatch::Alarm",
    ("experiment", "guard_min_calls", "number"): "AWS::CloudWatch::Alarm",
    ("experiment", "guard_evaluation_periods", "number"): "AWS::CloudWatch::Alarm",
    ("endpoint", "instance_type", "string"): "AWS::SageMaker::EndpointConfig",
    ("endpoint", "model_data_key", "string"): "AWS::SageMaker::Model",
    ("endpoint", "initial_instance_count", "number"): "AWS::SageMaker::EndpointConfig",
    ("endpoint", "startup_health_check_timeout", "duration"): "AWS::SageMaker::EndpointConfig",
    ("endpoint", "model_data_download_timeout", "duration"): "AWS::SageMaker::EndpointConfig",
    ("endpoint", "endpoint_name", "string"): "AWS::SageMaker::Endpoint",
    ("endpoint", "variant_name", "string"): "AWS::SageMaker::EndpointConfig",
    ("endpoint", "routing_strategy", "string"): "AWS::SageMaker::EndpointConfig",
    ("endpoint", "network_isolation", "string"): "AWS::SageMaker::Model",
    ("endpoint", "latency_alarm_threshold", "duration"): "AWS::CloudWatch::Alarm",
    ("logging", "key_prefix", "string"): "Custom::BedrockModelInvocationLogging",  # and the bucket policy's paths
    ("logging", "large_data_prefix", "string"): "Custom::BedrockModelInvocationLogging",
    ("dashboard", "dashboard_name", "string"): "AWS::CloudWatch::Dashboard",
    ("watched", "label", "string"): "AWS::CloudWatch::Dashboard",
}
#: Every construct (or props class) with every one of its props: the last test checks this is all of them.
TABLE = {"experiment": (PromptExperiment, EXPERIMENT_PROPS), "endpoint": (LlmEndpoint, ENDPOINT_PROPS),
         "logging": (ModelInvocationLogging, LOGGING_PROPS), "dashboard": (LatencyDashboard, DASHBOARD_PROPS),
         "quota": (TpmQuota, QUOTA_PROPS), "alarms": (LatencyAlarms, ALARMS_PROPS), "watched": (WatchedModel, WATCHED_PROPS)}
EVERY_TOKEN = [(construct, prop, kind) for construct, (_, props) in TABLE.items() for prop in props for kind in KINDS]


def synth(construct: str, **props: Any) -> dict:
    stack = new_stack()
    BUILDERS[construct](stack, **{name: token_of(stack, value) if value in KINDS else value for name, value in props.items()})
    return Template.from_stack(stack).to_json()


def assert_not_garbled(template: dict) -> None:
    text = json.dumps(template["Resources"])
    assert not any(mark in text for mark in GARBLED), [text[max(0, text.find(m) - 200):text.find(m) + 50] for m in GARBLED if m in text]


@pytest.mark.parametrize(("construct", "prop", "kind"), EVERY_TOKEN, ids=["-".join(case) for case in EVERY_TOKEN])
def test_every_prop_given_every_kind_of_token_reaches_the_template_or_is_refused_by_name(construct, prop, kind):
    if (construct, prop, kind) not in PASSES:
        with pytest.raises(InvalidPropsError) as refused:
            synth(construct, **{prop: kind})
        assert any(problem.startswith((prop, f"{prop}=")) for problem in refused.value.problems), refused.value.problems
        return
    template = synth(construct, **{prop: kind})
    holding = [r for r in resources(template, PASSES[construct, prop, kind]).values() if json.dumps(REF) in json.dumps(r)]
    assert holding, f"no {PASSES[construct, prop, kind]} holds the parameter"
    assert_not_garbled(template)


def test_the_passing_cases_name_props_of_the_table():
    """That the props are every prop of each signature is checked by tests/test_tokens_coverage.py."""
    for construct, prop, kind in PASSES:
        assert prop in TABLE[construct][1] and kind in KINDS, (construct, prop, kind)
    assert len(EVERY_TOKEN) == 4 * sum(len(props) for _, props in TABLE.values())


def test_a_deploy_time_dashboard_interval_is_refused_by_name_not_by_jsii():
    """Before: jsii "Duration must be specified as 'Duration.millis()' here" at synth."""
    with pytest.raises(InvalidPropsError, match="default_interval is a deploy-time value, but the dashboard's opening range"):
        synth("dashboard", default_interval="duration")


# ---- the logic each passing token keeps ----------------------------------------------------------------


def alarms(template: dict, suffix: str) -> list[dict]:
    return [a["Properties"] for k, a in resources(template, "AWS::CloudWatch::Alarm").items()
            if suffix in k and "FallbackFailed" not in k]


def expression(alarm: dict) -> Any:
    return next(q["Expression"] for q in alarm["Metrics"] if "Expression" in q)


def test_a_deploy_time_error_rate_is_each_error_guards_threshold_and_its_description_names_it():
    template = synth("experiment", max_error_rate_percent="number")
    for alarm in alarms(template, "ErrorRate"):
        assert alarm["Threshold"] == REF
        parts = alarm["AlarmDescription"]["Fn::Join"][1]
        assert parts[0].endswith("fails more than ") and parts[1] == REF and parts[2].startswith("% of its calls")
    assert {a["Threshold"] for a in alarms(template, "P90Latency")} == {10_000}  # the p90 guards keep milliseconds


def test_a_deploy_time_p90_limit_is_compared_in_seconds_since_cloudformation_cannot_scale_it():
    """Before: Threshold -1.9e292 (the token's encoding x 1000) and a description of a garbled Duration."""
    template = synth("experiment", max_p90_latency="duration")
    for alarm in alarms(template, "P90Latency"):
        assert alarm["Threshold"] == REF
        assert expression(alarm) == "IF(FILL(c, 0) >= 20, FILL(p, 0) / 1000, 0)"  # LatencyMs in seconds
        parts = alarm["AlarmDescription"]["Fn::Join"][1]
        assert parts[0].endswith("p90 latency is above ") and parts[1] == REF and parts[2].startswith(" seconds")


def test_a_deploy_time_call_gate_sits_inside_both_guards_expressions_and_synth_prints_no_warning():
    """Before (issue 34.8): the template was right, but the expression was built from the token's number
    encoding, so aws-cdk warned "Math expression ... -1.888e+289 ... references unknown identifiers: e"."""
    stack = new_stack()
    BUILDERS["experiment"](stack, guard_min_calls=token_of(stack, "number"))
    template = Template.from_stack(stack).to_json()
    for suffix in ("ErrorRate", "P90Latency"):
        for alarm in alarms(template, suffix):
            joined = expression(alarm)["Fn::Join"][1]
            assert REF in joined and joined[0].endswith(">= ")
    assert Annotations.from_stack(stack).find_warning("*", Match.any_value()) == []
    assert_not_garbled(template)


def test_a_deploy_time_evaluation_count_is_both_the_periods_and_the_datapoints_to_alarm():
    template = synth("experiment", guard_evaluation_periods="number")
    for alarm in alarms(template, "Exp"):
        assert alarm["EvaluationPeriods"] == alarm["DatapointsToAlarm"] == REF


def test_a_bake_time_in_minutes_reaches_the_strategy_and_one_in_seconds_is_refused():
    stack = new_stack()
    minutes = cdk.CfnParameter(stack, "Param", type="Number").value_as_number
    experiment(stack, bake_time=cdk.Duration.minutes(minutes))
    strategy = next(s["Properties"] for k, s in resources(Template.from_stack(stack).to_json(),
                                                           "AWS::AppConfig::DeploymentStrategy").items() if k.startswith("ExpStrategy"))
    assert strategy["FinalBakeTimeInMinutes"] == REF
    with pytest.raises(InvalidPropsError, match=r"bake_time is a deploy-time Duration in another unit.*cdk.Duration.minutes"):
        synth("experiment", bake_time="duration")


def test_a_deploy_time_control_is_refused_because_it_decides_the_fallback_document():
    """Before: accepted, and the fallback document gave every variant share 0."""
    with pytest.raises(InvalidPropsError, match="control is a deploy-time value, but the control variant's name decides"):
        synth("experiment", control="string")


def test_a_deploy_time_latency_alarm_threshold_is_the_alarms_threshold_in_seconds():
    template = synth("endpoint", latency_alarm_threshold="duration")
    (alarm,) = alarms(template, "ModelLatency")
    assert alarm["Threshold"] == REF
    assert expression(alarm) == "latency / 1000000"  # ModelLatency is in microseconds
    assert REF in alarm["AlarmDescription"]["Fn::Join"][1]


def test_a_deploy_time_image_uri_passes_with_its_repository():
    stack = new_stack()
    from aws_cdk import aws_ecr as ecr

    repository = ecr.Repository.from_repository_name(stack, "Repo", "tgi")
    endpoint(stack, image_uri=cdk.CfnParameter(stack, "Param").value_as_string, image_repository=repository)
    (model,) = resources(Template.from_stack(stack).to_json(), "AWS::SageMaker::Model").values()
    assert json.dumps(REF) in json.dumps(model["Properties"])
