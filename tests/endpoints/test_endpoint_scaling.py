"""EndpointScaling, PeakWindow and LlmEndpoint: every prop path read from the synthesized template,
every refused configuration with its message, cdk-nag and cfn-lint on what they create, and the
reference stack."""

from __future__ import annotations

import ast
import contextlib
import json
import math
import re
import subprocess
import sys
import tempfile
from datetime import UTC, datetime, time, timedelta
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Annotations, Match
from genai_pacer import InvalidPropsError, capacity
from genai_pacer.endpoints.llm_endpoint import (
    InferenceComponentOptions,
    LlmEndpoint,
    has_local_storage,
    is_accelerated,
)
from genai_pacer.endpoints.scaling import EndpointScaling, PeakWindow
from helpers import kms_statements, new_stack, only, policy_statements, resources, template_of

NAN, INF = math.nan, math.inf
TGI = "763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-tgi-inference:2.7.0-tgi3.3.6-gpu-py311-cu124-ubuntu22.04"
SLR = (
    ":iam::111122223333:role/aws-service-role/sagemaker.application-autoscaling.amazonaws.com/"
    "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
)
WEEKDAY_MORNING = dict(capacity=6, start="08:00", end="11:00", days="MON-FRI", time_zone="Europe/Berlin")


def a_string_token() -> str:
    return cdk.Token.as_string(cdk.Fn.ref("SomeParameter"))


def joined(value) -> str:
    """An Fn::Join as text, pseudo parameters named."""
    if isinstance(value, str):
        return value
    return "".join(p if isinstance(p, str) else "<" + p.get("Ref", "?") + ">" for p in value["Fn::Join"][1])


def scaling_of(build) -> tuple[cdk.Stack, dict]:
    stack = new_stack()
    build(stack)
    return stack, template_of(stack).to_json()


def target_of(template: dict) -> dict:
    return only(template, "AWS::ApplicationAutoScaling::ScalableTarget")["Properties"]


def tracking_of(template: dict) -> dict:
    policies = [
        p["Properties"]
        for p in resources(template, "AWS::ApplicationAutoScaling::ScalingPolicy").values()
        if p["Properties"]["PolicyType"] == "TargetTrackingScaling"
    ]
    assert len(policies) == 1
    return policies[0]["TargetTrackingScalingPolicyConfiguration"]


def actions_of(template: dict) -> dict[str, tuple[str, int, str]]:
    return {
        a["ScheduledActionName"]: (a["Schedule"], a["ScalableTargetAction"]["MinCapacity"], a["Timezone"])
        for a in target_of(template).get("ScheduledActions", [])
    }


def llm(stack: cdk.Stack, id: str = "Llm", **overrides) -> LlmEndpoint:
    props = dict(
        instance_type="ml.g5.2xlarge",
        image_uri=TGI,
        model_data_bucket=s3.Bucket.from_bucket_name(stack, f"{id}Models", "my-models"),
        model_data_key="llama/",
    )
    props.update(overrides)
    return LlmEndpoint(stack, id, **props)


def by_name(stack: cdk.Stack, **overrides) -> EndpointScaling:
    props = dict(endpoint="my-endpoint", target_concurrency=6.4, max_capacity=12)
    props.update(overrides)
    return EndpointScaling(stack, "Scaling", **props)


# --- target tracking ----------------------------------------------------------------------------


def test_a_variant_by_name_tracks_concurrent_requests_per_model_with_load_aware_cooldowns():
    stack, template = scaling_of(by_name)
    target = target_of(template)
    assert target["ResourceId"] == "endpoint/my-endpoint/variant/AllTraffic"
    assert target["ScalableDimension"] == "sagemaker:variant:DesiredInstanceCount"
    assert target["ServiceNamespace"] == "sagemaker"
    assert (target["MinCapacity"], target["MaxCapacity"]) == (1, 12)
    assert joined(target["RoleARN"]).endswith(SLR)
    assert not resources(template, "AWS::IAM::Role")  # the service-linked role, not a new one
    assert tracking_of(template) == {
        "PredefinedMetricSpecification": {
            "PredefinedMetricType": "SageMakerVariantConcurrentRequestsPerModelHighResolution"
        },
        "TargetValue": 6.4,
        "ScaleOutCooldown": 600,  # an endpoint by name: load time unknown, 10 minutes
        "ScaleInCooldown": 900,
    }


def test_an_inference_component_by_name_tracks_concurrent_requests_per_copy():
    _, template = scaling_of(lambda s: by_name(s, inference_component_name="my-model-ic", target_concurrency=3))
    target = target_of(template)
    assert target["ResourceId"] == "inference-component/my-model-ic"
    assert target["ScalableDimension"] == "sagemaker:inference-component:DesiredCopyCount"
    assert tracking_of(template)["PredefinedMetricSpecification"] == {
        "PredefinedMetricType": "SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution"
    }
    assert tracking_of(template)["TargetValue"] == 3


def test_a_named_variant_and_every_tracking_prop_reach_the_template():
    _, template = scaling_of(
        lambda s: by_name(
            s,
            variant_name="Blue",
            min_capacity=2,
            max_capacity=20,
            target_concurrency=capacity.target_concurrency(sustained_requests_per_minute=30, latency_seconds=12),
            scale_out_cooldown=cdk.Duration.minutes(4),
            scale_in_cooldown=cdk.Duration.minutes(30),
            disable_scale_in=True,
        )
    )
    target = target_of(template)
    assert target["ResourceId"] == "endpoint/my-endpoint/variant/Blue"
    assert (target["MinCapacity"], target["MaxCapacity"]) == (2, 20)
    tracking = tracking_of(template)
    assert tracking["TargetValue"] == 4.8  # 30/min x 12 s = 6 in flight, less 20%
    assert (tracking["ScaleOutCooldown"], tracking["ScaleInCooldown"], tracking["DisableScaleIn"]) == (240, 1800, True)


def test_a_deploy_time_endpoint_name_and_target_are_accepted():
    def build(stack):
        config = sagemaker.CfnEndpointConfig(
            stack, "Config",
            production_variants=[sagemaker.CfnEndpointConfig.ProductionVariantProperty(
                variant_name="AllTraffic", model_name="m", instance_type="ml.g5.xlarge", initial_instance_count=1)],
        )
        endpoint = sagemaker.CfnEndpoint(stack, "Endpoint", endpoint_config_name=config.attr_endpoint_config_name)
        target = cdk.CfnParameter(stack, "Target", type="Number").value_as_number
        EndpointScaling(stack, "Scaling", endpoint=endpoint.attr_endpoint_name, endpoint_config=config,
                        target_concurrency=target, max_capacity=4)

    _, template = scaling_of(build)
    resource_id = target_of(template)["ResourceId"]
    assert resource_id["Fn::Join"][1][1] == {"Fn::GetAtt": ["Endpoint", "EndpointName"]}
    assert tracking_of(template)["TargetValue"] == {"Ref": "Target"}


def test_deploy_time_names_and_keys_are_accepted_where_valid():
    def build(stack):
        component = cdk.CfnParameter(stack, "Component").value_as_string
        by_name(stack, inference_component_name=component)
        key = cdk.CfnParameter(stack, "WeightsKey").value_as_string
        llm(stack, model_data_key=key, endpoint_name=cdk.CfnParameter(stack, "Name").value_as_string)

    _, template = scaling_of(build)
    assert target_of(template)["ResourceId"] == {"Fn::Join": ["", ["inference-component/", {"Ref": "Component"}]]}
    container = only(template, "AWS::SageMaker::Model")["Properties"]["PrimaryContainer"]
    assert container["ModelDataUrl"] == {"Fn::Join": ["", ["s3://my-models/", {"Ref": "WeightsKey"}]]}
    assert only(template, "AWS::SageMaker::Endpoint")["Properties"]["EndpointName"] == {"Ref": "Name"}


def test_an_llm_endpoint_is_scaled_after_it_is_in_service_and_its_load_time_sets_the_cooldown():
    def build(stack):
        endpoint = llm(stack, startup_health_check_timeout=cdk.Duration.minutes(12))
        EndpointScaling(stack, "Scaling", endpoint=endpoint, target_concurrency=6.4, max_capacity=8)

    _, template = scaling_of(build)
    (endpoint_id,) = resources(template, "AWS::SageMaker::Endpoint")
    (target,) = resources(template, "AWS::ApplicationAutoScaling::ScalableTarget").values()
    assert endpoint_id in target["DependsOn"]
    assert target["Properties"]["ResourceId"].startswith("endpoint/Test-Llm-")
    assert tracking_of(template)["ScaleOutCooldown"] == 720


def test_an_llm_endpoints_inference_component_is_the_scaled_resource():
    def build(stack):
        endpoint = llm(stack, inference_component=InferenceComponentOptions(min_memory_mb=20_000, max_instances=4))
        EndpointScaling(stack, "Scaling", endpoint=endpoint, target_concurrency=4, max_capacity=8)

    _, template = scaling_of(build)
    (component_id, component), = resources(template, "AWS::SageMaker::InferenceComponent").items()
    target = only(template, "AWS::ApplicationAutoScaling::ScalableTarget")
    assert component_id in target["DependsOn"]
    assert target["Properties"]["ResourceId"] == f"inference-component/{component['Properties']['InferenceComponentName']}"


# --- peaks --------------------------------------------------------------------------------------


def test_a_weekday_peak_raises_the_minimum_20_minutes_ahead_and_restores_it_at_the_end():
    _, template = scaling_of(lambda s: by_name(s, peaks=[PeakWindow(**WEEKDAY_MORNING)]))
    assert actions_of(template) == {
        "peak1-raise": ("cron(40 7 ? * MON,TUE,WED,THU,FRI *)", 6, "Europe/Berlin"),
        "peak1-restore": ("cron(0 11 ? * MON,TUE,WED,THU,FRI *)", 1, "Europe/Berlin"),
    }
    assert (target_of(template)["MinCapacity"], target_of(template)["MaxCapacity"]) == (1, 12)


def test_a_lead_across_midnight_raises_the_day_before_and_an_overnight_peak_ends_the_next_day():
    window = PeakWindow(capacity=4, start=time(0, 10), end=time(2, 0), days=["MON", "FRI"], time_zone="UTC", name="night")
    overnight = PeakWindow(capacity=4, start="22:00", end="01:00", days="SAT", time_zone="UTC", name="late")
    _, template = scaling_of(lambda s: by_name(s, peaks=[window, overnight], lead_time=cdk.Duration.minutes(30)))
    actions = actions_of(template)
    assert actions["night-raise"][0] == "cron(40 23 ? * THU,SUN *)"
    assert actions["night-restore"][0] == "cron(0 2 ? * MON,FRI *)"
    assert actions["late-raise"][0] == "cron(30 21 ? * SAT *)"
    assert actions["late-restore"][0] == "cron(0 1 ? * SUN *)"


def test_every_day_is_a_star_and_a_peak_capacity_plan_sets_the_minimum():
    target = capacity.target_concurrency(sustained_requests_per_minute=120, latency_seconds=4)
    peak = capacity.capacity_for_peak(target_concurrency=target, requests_per_minute=900, latency_seconds=4)
    window = PeakWindow(capacity=peak, start="12:00", end="14:00", time_zone="America/New_York", name="lunch")
    _, template = scaling_of(lambda s: by_name(s, target_concurrency=target, peaks=[window], min_capacity=2))
    assert actions_of(template) == {
        "lunch-raise": ("cron(40 11 ? * * *)", 10, "America/New_York"),
        "lunch-restore": ("cron(0 14 ? * * *)", 2, "America/New_York"),
    }


def test_a_one_off_peak_uses_at_schedules_in_its_time_zone():
    launch = PeakWindow(capacity=8, start=datetime(2999, 3, 1, 0, 15), end=datetime(2999, 3, 1, 6, 0),
                        time_zone="Asia/Tokyo", name="launch")
    aware = PeakWindow(capacity=8, start=datetime(2999, 6, 1, 12, 0, tzinfo=UTC),
                       end=datetime(2999, 6, 1, 15, 0, tzinfo=UTC), time_zone="Europe/Berlin", name="sale")
    stack, template = scaling_of(lambda s: by_name(s, peaks=[launch, aware], lead_time=cdk.Duration.minutes(30)))
    assert actions_of(template) == {
        "launch-raise": ("at(2999-02-28T23:45:00)", 8, "Asia/Tokyo"),
        "launch-restore": ("at(2999-03-01T06:00:00)", 1, "Asia/Tokyo"),
        "sale-raise": ("at(2999-06-01T13:30:00)", 8, "Europe/Berlin"),  # 12:00 UTC is 14:00 CEST
        "sale-restore": ("at(2999-06-01T17:00:00)", 1, "Europe/Berlin"),
    }
    assert not Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("before this synth"))


def test_a_one_off_peak_already_over_is_a_warning_not_an_error():
    past = PeakWindow(capacity=8, start=datetime(2001, 3, 1, 8), end=datetime(2001, 3, 1, 9), time_zone="UTC")
    stack, template = scaling_of(lambda s: by_name(s, peaks=[past]))
    assert actions_of(template)["peak1-raise"][0] == "at(2001-03-01T07:40:00)"
    Annotations.from_stack(stack).has_warning(
        "/Test/Scaling", Match.string_like_regexp("peak 'peak1' ended at 2001-03-01T09:00:00 \\(UTC\\).*never run")
    )


def test_a_cron_peak_is_raised_lead_time_ahead_even_across_midnight():
    monthly = PeakWindow(capacity=5, start="cron(0 9 1 * ? *)", end="cron(0 12 1 * ? *)", time_zone="UTC", name="close")
    sunday = PeakWindow(capacity=5, start="cron(5 0 ? * 1 *)", end="cron(0 3 ? * 1 *)", time_zone="UTC", name="batch")
    stack, template = scaling_of(lambda s: by_name(s, peaks=[monthly, sunday]))
    actions = actions_of(template)
    assert actions["close-raise"][0] == "cron(40 8 1 * ? *)"
    assert actions["close-restore"][0] == "cron(0 12 1 * ? *)"
    assert actions["batch-raise"][0] == "cron(45 23 ? * SAT *)"
    Annotations.from_stack(stack).has_warning(
        "/Test/Scaling", Match.string_like_regexp("'close', 'batch' are cron expressions, whose overlap")
    )


def test_the_lead_time_covers_the_llm_endpoints_load_time_or_is_refused_with_the_numbers():
    def build(stack, lead):
        endpoint = llm(stack, startup_health_check_timeout=cdk.Duration.minutes(25))
        EndpointScaling(stack, "Scaling", endpoint=endpoint, target_concurrency=6, max_capacity=8,
                        peaks=[PeakWindow(**WEEKDAY_MORNING)], lead_time=lead)

    with pytest.raises(InvalidPropsError, match=(
        r"lead_time=20 minutes is shorter than the model load time \(25 minutes\).*still loading.*"
        r"cdk.Duration.minutes\(25\)"
    )):
        build(new_stack(), None)
    build(new_stack(), cdk.Duration.minutes(25))  # equal is enough
    by_name(new_stack(), lead_time=cdk.Duration.minutes(5))  # no peaks: nothing to check


def test_the_readmes_lead_time_is_taken_as_capacity_lead_time_returns_it():
    """docs/endpoints.md: lead_time=capacity.lead_time(15 * 60); it was refused as 'a LeadTime; pass a cdk.Duration'."""
    lead = capacity.lead_time(15 * 60)  # ceil(15 x 1.25) = 19 minutes
    _, template = scaling_of(lambda s: by_name(s, lead_time=lead, peaks=[PeakWindow(**WEEKDAY_MORNING)],
                                               model_load_time=cdk.Duration.minutes(15)))
    assert actions_of(template)["peak1-raise"][0] == "cron(41 7 ? * MON,TUE,WED,THU,FRI *)"
    with pytest.raises(InvalidPropsError, match=r"^LeadTime: \[LeadTime\.[\w.-]+\] minutes=5 is shorter than load_seconds x"):
        capacity.LeadTime(load_seconds=900, margin=0.25, minutes=5)  # a hand-built one is checked as it is built


# (props that are refused, the prop the suggested cdk.Duration is for)
SUGGESTING = [
    (dict(lead_time=30), "lead_time"),  # the shared check used to suggest cdk.Duration.seconds(30), itself refused
    (dict(lead_time=0.5), "lead_time"),
    (dict(lead_time=10**9), "lead_time"),
    (dict(lead_time="20m"), "lead_time"),
    (dict(lead_time=cdk.Duration.seconds(90)), "lead_time"),
    (dict(lead_time=cdk.Duration.seconds(1439 * 60 + 1)), "lead_time"),  # rounds up to exactly a day
    (dict(model_load_time=cdk.Duration.hours(1)), "lead_time"),  # longer than the 20-minute lead
    (dict(lead_time=cdk.Duration.minutes(5), model_load_time=cdk.Duration.seconds(721)), "lead_time"),
    (dict(scale_out_cooldown=1.5), "scale_out_cooldown"),
    (dict(scale_out_cooldown=-5), "scale_out_cooldown"),
    (dict(scale_in_cooldown=10**7), "scale_in_cooldown"),
    (dict(scale_in_cooldown=INF), "scale_in_cooldown"),
    (dict(scale_in_cooldown=cdk.Duration.millis(1500)), "scale_in_cooldown"),
    (dict(model_load_time=0.5), "model_load_time"),
    (dict(model_load_time=9000), "model_load_time"),
]


@pytest.mark.parametrize(("bad", "prop"), SUGGESTING)
def test_every_suggested_duration_is_one_that_passes(bad, prop):
    """Each cdk.Duration a refusal suggests is tried in place of the value: it must pass."""
    props = dict(peaks=[PeakWindow(**{**WEEKDAY_MORNING, "days": "MON"})], **bad)  # a week apart: any lead fits
    with pytest.raises(InvalidPropsError) as refused:
        by_name(new_stack(), **props)
    suggested = re.findall(r"cdk\.Duration\.(seconds|minutes)\((\d+)\)", str(refused.value))
    assert suggested, str(refused.value)
    for unit, amount in suggested:
        by_name(new_stack(), **{**props, prop: getattr(cdk.Duration, unit)(int(amount))})


# (props that are refused, the prop the quoted examples are for, the text after which they are listed)
PEAK_SUGGESTING = [
    (dict(start="8am"), "start", "e.g."),
    (dict(end="11:60"), "end", "e.g."),
    (dict(time_zone="CEST"), "time_zone", "such as"),
    (dict(days="MON-FRY"), "days", "use day names MON..SUN:"),
    (dict(days=5), "days", "use day names MON..SUN:"),
    (dict(start="cron(0 9 ? * MON-FRI)", end="cron(0 12 ? * MON-FRI *)", days=None), "start", "e.g."),
]


@pytest.mark.parametrize(("bad", "prop", "marker"), PEAK_SUGGESTING)
def test_every_example_a_peak_window_refusal_gives_passes(bad, prop, marker):
    with pytest.raises(InvalidPropsError) as refused:
        PeakWindow(**{**WEEKDAY_MORNING, **bad})
    listed = str(refused.value).split(marker, 1)[1].split(" (", 1)[0]
    examples = [ast.literal_eval(e) for e in re.findall(r"\[[^\]]*\]|'[^']*'", listed)]
    assert examples, str(refused.value)
    for example in examples:
        PeakWindow(**{**WEEKDAY_MORNING, **bad, prop: example})


def test_a_declared_load_time_is_checked_for_an_endpoint_by_name_too():
    with pytest.raises(InvalidPropsError, match="lead_time=20 minutes is shorter than the model load time \\(30 minutes\\)"):
        by_name(new_stack(), peaks=[PeakWindow(**WEEKDAY_MORNING)], model_load_time=cdk.Duration.minutes(30))


@pytest.mark.parametrize(
    ("windows", "message"),
    [
        (
            [dict(start="08:00", end="10:00"), dict(start="09:00", end="12:00")],
            r"peaks 'peak1' \(MON-FRI 08:00-10:00 Europe/Berlin\) and 'peak2' \(MON-FRI 09:00-12:00 Europe/Berlin\) "
            r"overlap.*merge them",
        ),
        # back to back: the second peak's minimum rises at 09:40, and the first one's end at 10:00 drops it
        ([dict(start="08:00", end="10:00"), dict(start="10:00", end="12:00")], "overlap once each minimum rises 20 minutes early"),
        # an overnight window and a morning one on the next day
        ([dict(start="22:00", end="08:10", days="SUN"), dict(start="08:00", end="09:00", days="MON")], "overlap"),
        # the same wall-clock hour apart in two time zones: 09:30 London is 10:30 Berlin
        ([dict(start="10:00", end="11:00"), dict(start="09:30", end="10:30", time_zone="Europe/London")], "overlap"),
        # a one-off inside a weekly window's span
        (
            [dict(start="08:00", end="11:00"),
             dict(start=datetime(2999, 1, 7, 10), end=datetime(2999, 1, 7, 12), days=None)],  # a Monday
            "2999-01-07T10:00:00 to 2999-01-07T12:00:00 Europe/Berlin",
        ),
        (
            [dict(start=datetime(2999, 5, 1, 9), end=datetime(2999, 5, 1, 12), days=None),
             dict(start=datetime(2999, 5, 1, 11), end=datetime(2999, 5, 1, 13), days=None)],
            "overlap",
        ),
    ],
)
def test_overlapping_peaks_are_refused(windows, message):
    peaks = [PeakWindow(**{**WEEKDAY_MORNING, **w}) for w in windows]
    with pytest.raises(InvalidPropsError, match=message):
        by_name(new_stack(), peaks=peaks)


def test_a_daily_window_that_reaches_its_own_next_occurrence_is_refused():
    almost_all_day = PeakWindow(capacity=4, start="06:00", end="05:50", time_zone="UTC", name="always")
    with pytest.raises(InvalidPropsError, match=(
        "peak 'always' .* lasts 1430 minutes and rises 20 minutes early, so it reaches its own next occurrence 1 day"
    )):
        by_name(new_stack(), peaks=[almost_all_day])
    # the same window on Mondays only, or with a lead that fits, is fine
    by_name(new_stack(), peaks=[PeakWindow(**{**almost_all_day.__dict__, "days": "MON"})])
    by_name(new_stack(), peaks=[almost_all_day], lead_time=cdk.Duration.minutes(10))


def test_peaks_that_only_look_alike_are_not_overlaps():
    peaks = [
        PeakWindow(**{**WEEKDAY_MORNING, "start": "08:00", "end": "10:00"}),
        PeakWindow(**{**WEEKDAY_MORNING, "start": "10:20", "end": "12:00"}),  # raised at 10:00, as the first ends
        PeakWindow(**{**WEEKDAY_MORNING, "days": "SAT-SUN"}),  # other days
        # the same weekday and hour a week apart, one-off: no overlap between them
        PeakWindow(**{**WEEKDAY_MORNING, "days": None, "start": datetime(2999, 5, 4, 14), "end": datetime(2999, 5, 4, 16)}),
        PeakWindow(**{**WEEKDAY_MORNING, "days": None, "start": datetime(2999, 5, 11, 14), "end": datetime(2999, 5, 11, 16)}),
    ]
    _, template = scaling_of(lambda s: by_name(s, peaks=peaks))
    assert len(actions_of(template)) == 10


# --- scale to zero ------------------------------------------------------------------------------


def test_scale_to_zero_sets_min_zero_and_adds_the_way_back_from_zero():
    def build(stack):
        by_name(stack, inference_component_name="my-ic", scale_to_zero=True,
                alarm_actions=[cloudwatch_actions.SnsAction(sns.Topic(stack, "Pager"))])

    stack, template = scaling_of(build)
    assert target_of(template)["MinCapacity"] == 0
    (step_id, step), = [
        (k, v) for k, v in resources(template, "AWS::ApplicationAutoScaling::ScalingPolicy").items()
        if v["Properties"]["PolicyType"] == "StepScaling"
    ]
    assert step["Properties"]["StepScalingPolicyConfiguration"] == {
        "AdjustmentType": "ChangeInCapacity",
        "Cooldown": 60,
        "MetricAggregationType": "Maximum",
        "StepAdjustments": [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}],
    }
    alarm = next(
        a["Properties"] for a in resources(template, "AWS::CloudWatch::Alarm").values()
        if a["Properties"]["MetricName"] == "NoCapacityInvocationFailures"
    )
    assert alarm["Namespace"] == "AWS/SageMaker"
    assert alarm["Dimensions"] == [{"Name": "InferenceComponentName", "Value": "my-ic"}]
    assert (alarm["Statistic"], alarm["Threshold"], alarm["ComparisonOperator"]) == (
        "Sum", 1, "GreaterThanOrEqualToThreshold"
    )
    assert {"Ref": step_id} in alarm["AlarmActions"] and len(alarm["AlarmActions"]) == 2
    Annotations.from_stack(stack).has_warning(
        "/Test/Scaling", Match.string_like_regexp("requests fail \\(NoCapacityInvocationFailures\\) until a new copy")
    )


def test_scale_to_zero_on_an_llm_endpoint_needs_its_instances_to_go_too():
    options = dict(min_memory_mb=20_000, max_instances=4)
    with pytest.raises(InvalidPropsError, match="keeps at least 1 instance.*InferenceComponentOptions\\(min_instances=0\\)"):
        stack = new_stack()
        EndpointScaling(stack, "Scaling", endpoint=llm(stack, inference_component=InferenceComponentOptions(**options)),
                        target_concurrency=4, max_capacity=4, scale_to_zero=True)

    def build(stack):
        endpoint = llm(stack, inference_component=InferenceComponentOptions(**options, min_instances=0))
        EndpointScaling(stack, "Scaling", endpoint=endpoint, target_concurrency=4, max_capacity=4, scale_to_zero=True)

    _, template = scaling_of(build)
    variant = only(template, "AWS::SageMaker::EndpointConfig")["Properties"]["ProductionVariants"][0]
    assert variant["ManagedInstanceScaling"] == {"Status": "ENABLED", "MinInstanceCount": 0, "MaxInstanceCount": 4}
    assert target_of(template)["MinCapacity"] == 0


# --- metrics other than concurrency -------------------------------------------------------------


def test_invocations_are_refused_as_the_llm_signal_unless_overridden_with_a_warning():
    with pytest.raises(InvalidPropsError, match="metric='invocations' as the signal for an LLM endpoint.*counts as one invocation"):
        by_name(new_stack(), metric="invocations", target_concurrency=None, target_value=70)
    stack, template = scaling_of(lambda s: by_name(
        s, metric="invocations", target_concurrency=None, target_value=70, allow_non_concurrency_metric=True
    ))
    tracking = tracking_of(template)
    assert tracking["PredefinedMetricSpecification"] == {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"}
    assert tracking["TargetValue"] == 70
    Annotations.from_stack(stack).has_warning("/Test/Scaling", Match.string_like_regexp("lags LLM load"))
    assert not any(  # no concurrency alarm for a policy that does not track concurrency
        "Concurrent" in a["Properties"]["MetricName"] for a in resources(template, "AWS::CloudWatch::Alarm").values()
    )


def test_invocations_per_copy_for_an_inference_component():
    _, template = scaling_of(lambda s: by_name(
        s, inference_component_name="ic", metric="invocations", target_concurrency=None, target_value=5,
        allow_non_concurrency_metric=True,
    ))
    assert tracking_of(template)["PredefinedMetricSpecification"] == {
        "PredefinedMetricType": "SageMakerInferenceComponentInvocationsPerCopy"
    }


@pytest.mark.parametrize(
    ("extra", "namespace", "metric_name", "dimensions"),
    [
        ({}, "/aws/sagemaker/Endpoints", "CPUUtilization",
         [{"Name": "EndpointName", "Value": "my-endpoint"}, {"Name": "VariantName", "Value": "AllTraffic"}]),
        ({"inference_component_name": "ic"}, "/aws/sagemaker/InferenceComponents", "CPUUtilizationNormalized",
         [{"Name": "InferenceComponentName", "Value": "ic"}]),
    ],
)
def test_cpu_tracking_uses_the_instance_metric(extra, namespace, metric_name, dimensions):
    _, template = scaling_of(lambda s: by_name(
        s, metric="cpu", target_concurrency=None, target_value=60, allow_non_concurrency_metric=True, **extra
    ))
    custom = tracking_of(template)["CustomizedMetricSpecification"]
    assert (custom["Namespace"], custom["MetricName"], custom["Statistic"]) == (namespace, metric_name, "Average")
    assert sorted(custom["Dimensions"], key=lambda d: d["Name"]) == dimensions


# --- alarms -------------------------------------------------------------------------------------


def test_concurrency_above_target_longer_than_a_scale_out_raises_an_alarm():
    _, template = scaling_of(lambda s: by_name(s, model_load_time=cdk.Duration.minutes(12)))
    (alarm,) = [a["Properties"] for a in resources(template, "AWS::CloudWatch::Alarm").values()]
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"]) == (
        "AWS/SageMaker", "ConcurrentRequestsPerModel", "Minimum"  # published for Minimum and Maximum only
    )
    assert (alarm["Threshold"], alarm["EvaluationPeriods"], alarm["Period"]) == (6.4, 17, 60)
    assert "at max_capacity (12)" in alarm["AlarmDescription"]


# --- refused configurations ---------------------------------------------------------------------


def serverless_config(stack: cdk.Stack) -> sagemaker.CfnEndpointConfig:
    return sagemaker.CfnEndpointConfig(
        stack, "Serverless",
        production_variants=[sagemaker.CfnEndpointConfig.ProductionVariantProperty(
            variant_name="AllTraffic", model_name="m",
            serverless_config=sagemaker.CfnEndpointConfig.ServerlessConfigProperty(max_concurrency=5, memory_size_in_mb=6144),
        )],
    )


def gpu_config(stack: cdk.Stack) -> sagemaker.CfnEndpointConfig:
    return sagemaker.CfnEndpointConfig(
        stack, "Gpu",
        production_variants=[sagemaker.CfnEndpointConfig.ProductionVariantProperty(
            variant_name="Blue", model_name="m", instance_type="ml.g5.xlarge", initial_instance_count=1)],
    )


SCRATCH = cdk.Stack(cdk.App(), "Scratch")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # endpoint
        (dict(endpoint=None), "endpoint is required"),
        (dict(endpoint=42), "endpoint=42 is an int; pass a string; an LlmEndpoint"),
        (dict(endpoint=""), "endpoint='' is empty"),
        (dict(endpoint="my_endpoint"), "endpoint='my_endpoint' is not a SageMaker endpoint name"),
        (dict(variant_name="Blue", inference_component_name="ic"), "variant_name and inference_component_name are both set"),
        (dict(variant_name="a b"), "variant_name='a b' is not a SageMaker name"),
        (dict(inference_component_name=""), "inference_component_name='' is empty"),
        (dict(endpoint_config=serverless_config(SCRATCH)), "serverless variant: SageMaker Serverless Inference has no GPUs"),
        (dict(endpoint_config=gpu_config(SCRATCH)), "variant_name='AllTraffic' is not a variant of the endpoint config \\(it has Blue\\)"),
        (dict(endpoint_config="config"), "endpoint_config='config' is a str; pass the sagemaker.CfnEndpointConfig"),
        # target_concurrency
        (dict(target_concurrency=None), "target_concurrency is required.*capacity.target_concurrency"),
        (dict(target_concurrency=0), "target_concurrency=0 must be greater than 0"),
        (dict(target_concurrency=-3), "target_concurrency=-3 must be greater than 0"),
        (dict(target_concurrency=NAN), "target_concurrency=nan is not a finite number"),
        (dict(target_concurrency=INF), "target_concurrency=inf is not a finite number"),
        (dict(target_concurrency=True), "target_concurrency=True is a bool"),
        (dict(target_concurrency="8"), "target_concurrency='8' is a str"),
        (dict(target_concurrency=20_000), "target_concurrency=20000 exceeds the maximum of 10,000"),
        (dict(target_value=8), "target_value is for the 'invocations' and 'cpu' metrics"),
        # metric
        (dict(metric="gpu"), "metric='gpu' must be one of 'concurrency', 'invocations', 'cpu'"),
        (dict(metric="cpu", target_concurrency=None, target_value=50), "metric='cpu' as the signal for an LLM endpoint"),
        (dict(metric="cpu", target_value=50, allow_non_concurrency_metric=True), "target_concurrency is for the concurrency metric"),
        (dict(metric="cpu", target_concurrency=None, target_value=150, inference_component_name="ic", allow_non_concurrency_metric=True), "target_value=150 exceeds the maximum of 100.*of its reservation"),
        (dict(metric="cpu", target_concurrency=None, target_value=30_000, allow_non_concurrency_metric=True), "target_value=30000 exceeds the maximum of 25,600.*summed over vCPUs"),
        (dict(metric="cpu", target_concurrency=None, allow_non_concurrency_metric=True), "target_value is required"),
        (dict(metric="invocations", target_concurrency=None, target_value=0, allow_non_concurrency_metric=True), "target_value=0 must be greater than 0"),
        (dict(allow_non_concurrency_metric="yes"), "allow_non_concurrency_metric='yes' is a str"),
        # capacities
        (dict(max_capacity=None), "max_capacity is required"),
        (dict(max_capacity=0), "max_capacity=0 is below the minimum of 1"),
        (dict(max_capacity=-1), "max_capacity=-1 is below the minimum of 1"),
        (dict(max_capacity=2.5), "max_capacity=2.5 is not a whole number"),
        (dict(max_capacity=NAN), "max_capacity=nan is not a finite number"),
        (dict(max_capacity=INF), "max_capacity=inf is not a finite number"),
        (dict(max_capacity="12"), "max_capacity='12' is a str"),
        (dict(max_capacity=20_000), "max_capacity=20000 exceeds the maximum of 10,000"),
        (dict(min_capacity=0), "min_capacity=0 without scale_to_zero: at zero nothing brings capacity back"),
        (dict(min_capacity=-1), "min_capacity=-1 is below the minimum of 0"),
        (dict(min_capacity=NAN), "min_capacity=nan is not a finite number"),
        (dict(min_capacity=13), "min_capacity=13 exceeds max_capacity=12"),
        (dict(scale_to_zero=True), "scale_to_zero=True needs an inference component"),
        (dict(scale_to_zero=True, inference_component_name="ic", min_capacity=1), "min_capacity=1 with scale_to_zero=True"),
        (dict(scale_to_zero="yes", inference_component_name="ic"), "scale_to_zero='yes' is a str"),
        # cooldowns and times
        (dict(scale_out_cooldown=300), "scale_out_cooldown=300 is an int; pass a cdk.Duration"),
        (dict(scale_in_cooldown=cdk.Duration.days(2)), "scale_in_cooldown=2 days exceeds the maximum of 1 day"),
        (dict(scale_in_cooldown=cdk.Duration.millis(1500)), "scale_in_cooldown=1 second 500 millis is not whole seconds"),
        (dict(disable_scale_in=1), "disable_scale_in=1 is an int; pass True or False"),
        (dict(lead_time=cdk.Duration.seconds(30)), "lead_time=30 seconds is below the minimum of 1 minute"),
        (dict(lead_time=cdk.Duration.seconds(90)), r"lead_time=1 minute 30 seconds is not whole minutes.*cdk.Duration.minutes\(2\)"),
        (dict(lead_time=cdk.Duration.days(2)), "lead_time=2 days exceeds the maximum of 1 day"),
        (dict(lead_time=20), "lead_time=20 is an int; pass a cdk.Duration"),
        (dict(model_load_time=cdk.Duration.hours(3)), "model_load_time=3 hours exceeds the maximum of 2 hours"),
        (dict(model_load_time=600), "model_load_time=600 is an int"),
        # peaks
        (dict(peaks=PeakWindow(**WEEKDAY_MORNING)), "peaks=PeakWindow.* is a PeakWindow; pass a list"),
        (dict(peaks=[{"capacity": 4}]), r"peaks\[0\]=\{'capacity': 4\} is a dict; pass a PeakWindow"),
        (dict(peaks=[PeakWindow(**{**WEEKDAY_MORNING, "capacity": 20})]),
         "peak 'peak1' holds 20 but max_capacity=12: Application Auto Scaling would cap the peak at 12"),
        (dict(peaks=[PeakWindow(**{**WEEKDAY_MORNING, "capacity": 2})], min_capacity=2),
         "peak 'peak1' holds 2, not above min_capacity=2: the window changes nothing"),
        (dict(peaks=[PeakWindow(**{**WEEKDAY_MORNING, "name": "a"}), PeakWindow(**{**WEEKDAY_MORNING, "name": "a", "days": "SAT"})]),
         "two peaks are named 'a'"),
        (dict(peaks=[PeakWindow(**{**WEEKDAY_MORNING, "days": d, "name": f"p{i}"}) for i, d in enumerate(["MON"] * 101)]),
         "101 peaks need 202 scheduled actions; Application Auto Scaling allows 200"),
        (dict(peaks=[PeakWindow(capacity=4, start="cron(0 0 1 * ? *)", end="cron(0 3 1 * ? *)", time_zone="UTC")]),
         "starts the day before a day-of-month schedule"),
        (dict(alarm_actions=["arn:aws:sns:us-east-1:111122223333:pager"]), r"alarm_actions\[0\]=.* is a str; pass an alarm action"),
    ],
)
def test_endpoint_scaling_refuses(overrides, message):
    with pytest.raises(InvalidPropsError, match=message):
        by_name(new_stack(), **overrides)


def test_every_problem_is_reported_at_once():
    with pytest.raises(InvalidPropsError) as raised:
        by_name(new_stack(), target_concurrency=NAN, max_capacity=0, lead_time=5)
    assert len(raised.value.problems) == 3


def test_props_an_llm_endpoint_knows_are_refused_rather_than_ignored():
    stack = new_stack()
    endpoint = llm(stack)
    with pytest.raises(InvalidPropsError) as raised:
        EndpointScaling(stack, "Scaling", endpoint=endpoint, target_concurrency=4, max_capacity=4,
                        variant_name="Blue", inference_component_name="ic", endpoint_config=gpu_config(stack))
    assert [p.split(" is set")[0] for p in raised.value.problems] == ["variant_name", "inference_component_name", "endpoint_config"]


def test_a_t2_llm_endpoint_cannot_be_auto_scaled():
    stack = new_stack()
    endpoint = llm(stack, instance_type="ml.t2.medium", inference_component=None)
    with pytest.raises(InvalidPropsError, match="ml.t2.medium is a burstable T2 type, which SageMaker cannot auto scale"):
        EndpointScaling(stack, "Scaling", endpoint=endpoint, target_concurrency=4, max_capacity=4)


def test_disabled_scale_in_with_peaks_warns_that_peak_capacity_would_stay():
    stack, _ = scaling_of(lambda s: by_name(s, disable_scale_in=True, peaks=[PeakWindow(**WEEKDAY_MORNING)]))
    Annotations.from_stack(stack).has_warning("/Test/Scaling", Match.string_like_regexp("capacity raised for a peak stays"))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(capacity=None), "capacity is required"),
        (dict(capacity=0), "capacity=0 is below the minimum of 1"),
        (dict(capacity=-2), "capacity=-2 is below the minimum of 1"),
        (dict(capacity=1.5), "capacity=1.5 is not a whole number"),
        (dict(capacity=NAN), "capacity=nan is not a finite number"),
        (dict(capacity=INF), "capacity=inf is not a finite number"),
        (dict(capacity="6"), "capacity='6' is a str"),
        (dict(capacity=True), "capacity=True is a bool"),
        (dict(capacity=20_000), "capacity=20000 exceeds the maximum of 10,000"),
        (dict(time_zone="CEST"), "time_zone='CEST' is not an IANA time zone"),
        (dict(time_zone="Mars/Olympus"), "time_zone='Mars/Olympus' is not an IANA time zone"),
        (dict(time_zone=None), "time_zone is required"),
        (dict(time_zone=""), "time_zone='' is empty"),
        (dict(start="8am"), "start='8am' is not a time of day; write 'HH:MM'"),
        (dict(start="24:00"), "start='24:00' is not a time of day"),
        (dict(end="11:60"), "end='11:60' is not a time of day"),
        (dict(start=time(8, 0, 30)), "start=08:00:30 has seconds"),
        (dict(start="08:00", end="08:00"), "the window has no length"),
        (dict(start=None), "must be the same form"),
        (dict(end=datetime(2999, 1, 1)), "must be the same form"),
        (dict(start=8), "must be the same form"),
        (dict(start=a_string_token()), "start is a string token, a deploy-time value, but the raise action's time is the start minus"),
        (dict(days="MON-FRY"), "'MON-FRY' is not a day or a range of days.*numbers are ambiguous"),
        (dict(days="1-5"), "'1-5' is not a day or a range of days"),
        (dict(days=[]), "days=\\[\\] names no day"),
        (dict(days=5), "days=5 is an int"),
        (dict(name="peak one"), "name='peak one' names scheduled actions"),
        (dict(name="a:b"), "name='a:b' names scheduled actions"),
        (dict(start=datetime(2999, 1, 1, 9), end=datetime(2999, 1, 1, 8), days=None), "end=2999-01-01T08:00:00 is not after start"),
        (dict(start=datetime(2999, 1, 1, 9), end=datetime(2999, 1, 1, 10)), "days='MON-FRI' applies to weekly windows"),
        (dict(start="cron(0 9 * * * *)", end="cron(0 12 * * ? *)", days=None), "exactly one of day-of-month and day-of-week must be '?'"),
        (dict(start="cron(0 9 ? * MON-FRI)", end="cron(0 12 ? * MON-FRI *)", days=None), "six fields"),
        (dict(start="cron(0/5 9 ? * MON-FRI *)", end="cron(0 12 ? * MON-FRI *)", days=None), "minute and hour must be single numbers"),
    ],
)
def test_peak_window_refuses(overrides, message):
    with pytest.raises(InvalidPropsError, match=message):
        PeakWindow(**{**WEEKDAY_MORNING, **overrides})


def test_days_accept_ranges_lists_and_wraparound():
    _, template = scaling_of(lambda s: by_name(s, peaks=[
        PeakWindow(**{**WEEKDAY_MORNING, "days": "FRI-MON", "name": "a"}),
        PeakWindow(**{**WEEKDAY_MORNING, "days": ("wed",), "name": "b"}),
    ]))
    actions = actions_of(template)
    assert actions["a-raise"][0] == "cron(40 7 ? * MON,FRI,SAT,SUN *)"
    assert actions["b-raise"][0] == "cron(40 7 ? * WED *)"


# --- LlmEndpoint --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("instance_type", "accelerated", "local"),
    [
        ("ml.g5.2xlarge", True, True), ("ml.g4dn.xlarge", True, True), ("ml.g6e.12xlarge", True, True),
        ("ml.p4d.24xlarge", True, True), ("ml.p5.48xlarge", True, True), ("ml.p6-b200.48xlarge", True, True),
        ("ml.trn1.32xlarge", True, True), ("ml.p3.2xlarge", True, False), ("ml.inf2.xlarge", True, False),
        ("ml.m5.xlarge", False, False), ("ml.m5d.large", False, True), ("ml.c6i.xlarge", False, False),
        ("ml.t2.medium", False, False),
    ],
)
def test_instance_families(instance_type, accelerated, local):
    assert (is_accelerated(instance_type), has_local_storage(instance_type)) == (accelerated, local)


@pytest.fixture(scope="module")
def gpu_endpoint():
    stack = new_stack()
    endpoint = llm(stack, environment={"SM_NUM_GPUS": "1"})
    return stack, endpoint, template_of(stack).to_json()


def test_a_gpu_endpoint_serves_uncompressed_weights_without_network_access(gpu_endpoint):
    _, endpoint, template = gpu_endpoint
    model = only(template, "AWS::SageMaker::Model")["Properties"]
    assert model["EnableNetworkIsolation"] is True
    assert model["PrimaryContainer"] == {
        "Image": TGI,
        "Environment": {"SM_NUM_GPUS": "1"},
        "ModelDataSource": {"S3DataSource": {"S3Uri": "s3://my-models/llama/", "S3DataType": "S3Prefix", "CompressionType": "None"}},
    }
    config = only(template, "AWS::SageMaker::EndpointConfig")["Properties"]
    assert "KmsKeyId" not in config and "ExecutionRoleArn" not in config  # g5: local NVMe, encrypted in hardware
    (variant,) = config["ProductionVariants"]
    assert variant == {
        "VariantName": "AllTraffic",
        "ModelName": {"Fn::GetAtt": [next(iter(resources(template, "AWS::SageMaker::Model"))), "ModelName"]},
        "InstanceType": "ml.g5.2xlarge",
        "InitialInstanceCount": 1,
        "ContainerStartupHealthCheckTimeoutInSeconds": 900,
        "ModelDataDownloadTimeoutInSeconds": 900,
        "RoutingConfig": {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"},
    }
    assert only(template, "AWS::SageMaker::Endpoint")["Properties"]["EndpointName"] == endpoint.endpoint_name
    assert not resources(template, "AWS::KMS::Key")
    assert endpoint.volume_key is None and endpoint.startup_health_check_timeout.to_minutes() == 15


def test_the_execution_role_reads_only_the_weights_pulls_only_the_image_and_logs_only_its_endpoint(gpu_endpoint):
    _, endpoint, template = gpu_endpoint
    statements = {
        (tuple(s["Action"]) if isinstance(s["Action"], list) else (s["Action"],)): s
        for s in policy_statements(template)
    }
    assert joined(statements[("s3:GetObject",)]["Resource"]) == "arn:<AWS::Partition>:s3:::my-models/llama/*"
    assert statements[("s3:ListBucket",)]["Condition"] == {"StringLike": {"s3:prefix": ["llama/*"]}}
    ecr_actions = ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability")
    assert joined(statements[ecr_actions]["Resource"]) == (
        "arn:<AWS::Partition>:ecr:us-east-1:763104351884:repository/huggingface-pytorch-tgi-inference"
    )
    group = f"arn:<AWS::Partition>:logs:us-east-1:111122223333:log-group:/aws/sagemaker/Endpoints/{endpoint.endpoint_name}"
    assert joined(statements[("logs:CreateLogGroup",)]["Resource"]) == group
    assert joined(statements[("logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams")]["Resource"]) == (
        f"{group}:log-stream:*"
    )
    assert statements[("ecr:GetAuthorizationToken",)]["Resource"] == "*"
    # metrics under SageMaker's own namespaces only (issue 27), not into any application's namespace
    metrics = statements[("cloudwatch:PutMetricData",)]
    assert (metrics["Resource"], metrics["Condition"]) == ("*", {"StringLike": {"cloudwatch:namespace": "/aws/sagemaker/*"}})
    assert len(statements) == 7
    (role,) = resources(template, "AWS::IAM::Role").values()
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    # SageMaker acting for this account and Region only (SageMaker's confused-deputy guidance for inference)
    assert {k: {c: joined(v) for c, v in cond.items()} for k, cond in trust["Condition"].items()} == {
        "ArnLike": {"aws:SourceArn": "arn:<AWS::Partition>:sagemaker:us-east-1:111122223333:*"}}
    assert "ManagedPolicyArns" not in role["Properties"]


def test_the_endpoint_waits_for_the_roles_policies(gpu_endpoint):
    _, _, template = gpu_endpoint
    policies = set(resources(template, "AWS::IAM::Policy"))
    for type_name in ("AWS::SageMaker::Model", "AWS::SageMaker::EndpointConfig", "AWS::SageMaker::Endpoint"):
        assert policies <= set(only(template, type_name)["DependsOn"]), type_name


def test_latency_and_5xx_alarms_read_the_endpoints_metrics(gpu_endpoint):
    _, endpoint, template = gpu_endpoint
    alarms = {a["Properties"]["MetricName"]: a["Properties"] for a in resources(template, "AWS::CloudWatch::Alarm").values()}
    latency, errors = alarms["ModelLatency"], alarms["Invocation5XXErrors"]
    assert (latency["ExtendedStatistic"], latency["Threshold"], latency["EvaluationPeriods"]) == ("p90", 60_000_000, 5)
    assert (errors["Statistic"], errors["Threshold"], errors["Period"]) == ("Sum", 0, 300)
    assert latency["Dimensions"] == [
        {"Name": "EndpointName", "Value": endpoint.endpoint_name}, {"Name": "VariantName", "Value": "AllTraffic"}
    ]
    assert set(endpoint.alarms) == {"ModelLatency", "Invocation5XXErrors"}
    concurrency = endpoint.metric_concurrent_requests()
    assert (concurrency.metric_name, concurrency.statistic) == ("ConcurrentRequestsPerModel", "Maximum")


def test_an_ebs_instance_type_gets_a_rotating_volume_key_and_an_archive_uses_model_data_url():
    stack = new_stack()
    endpoint = llm(stack, instance_type="ml.p3.2xlarge", model_data_key="models/llama.tar.gz",
                   routing_strategy="RANDOM", network_isolation=False, variant_name="Blue",
                   startup_health_check_timeout=cdk.Duration.minutes(30), model_data_download_timeout=cdk.Duration.minutes(40))
    template = template_of(stack).to_json()
    (key_id, key), = resources(template, "AWS::KMS::Key").items()
    assert key["Properties"]["EnableKeyRotation"] is True and key["DeletionPolicy"] == "Retain"
    config = only(template, "AWS::SageMaker::EndpointConfig")["Properties"]
    assert config["KmsKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    variant = config["ProductionVariants"][0]
    assert (variant["VariantName"], variant["RoutingConfig"]["RoutingStrategy"]) == ("Blue", "RANDOM")
    assert (variant["ContainerStartupHealthCheckTimeoutInSeconds"], variant["ModelDataDownloadTimeoutInSeconds"]) == (1800, 2400)
    model = only(template, "AWS::SageMaker::Model")["Properties"]
    assert model["PrimaryContainer"]["ModelDataUrl"] == "s3://my-models/models/llama.tar.gz"
    assert model["EnableNetworkIsolation"] is False
    s3_statements = [s for s in policy_statements(template) if str(s["Action"]).startswith("s3:")]
    assert [joined(s["Resource"]) for s in s3_statements] == ["arn:<AWS::Partition>:s3:::my-models/models/llama.tar.gz"]
    assert endpoint.volume_key is not None
    # SageMaker attaches the volume through a grant: for an AWS resource only (issue 27)
    grants = [s for s in policy_statements(template) if s["Action"] == "kms:CreateGrant"]
    assert [(g["Resource"], g["Condition"]) for g in grants] == [
        ({"Fn::GetAtt": [key_id, "Arn"]}, {"Bool": {"kms:GrantIsForAWSResource": True}})]
    key_use = next(s for s in policy_statements(template) if "kms:Decrypt" in s["Action"])
    assert "kms:CreateGrant" not in key_use["Action"] and "Condition" not in key_use


def test_a_volume_key_for_local_nvme_storage_is_passed_on_with_a_warning_that_it_does_not_cover_it():
    """SageMaker's API model: the key does not encrypt instance local storage (aws-cdk-lib 2.275's
    docs say the call fails; the service's own model decides, the warning names both)."""
    stack = new_stack()
    key = kms.Key(stack, "Mine", enable_key_rotation=True)
    endpoint = llm(stack, volume_encryption_key=key)  # ml.g5.2xlarge: local NVMe
    template = template_of(stack).to_json()
    (key_id,) = resources(template, "AWS::KMS::Key")
    assert only(template, "AWS::SageMaker::EndpointConfig")["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    assert endpoint.volume_key is key
    Annotations.from_stack(stack).has_warning("/Test/Llm", Match.string_like_regexp(
        "ml.g5.2xlarge has local NVMe storage.*does not encrypt instance local storage.*if the deploy fails there, drop the key"))


def test_an_inference_component_carries_the_startup_timeouts_and_the_configs_role():
    stack = new_stack()
    endpoint = llm(stack, inference_component=InferenceComponentOptions(
        min_memory_mb=20_000, max_instances=3, accelerators=1, copies=2, name="llama-ic"))
    template = template_of(stack).to_json()
    component = only(template, "AWS::SageMaker::InferenceComponent")["Properties"]
    assert component["InferenceComponentName"] == "llama-ic" == endpoint.inference_component_name
    assert component["EndpointName"] == {"Fn::GetAtt": [next(iter(resources(template, "AWS::SageMaker::Endpoint"))), "EndpointName"]}
    assert component["VariantName"] == "AllTraffic"
    assert component["Specification"]["ComputeResourceRequirements"] == {"MinMemoryRequiredInMb": 20_000, "NumberOfAcceleratorDevicesRequired": 1}
    assert component["Specification"]["StartupParameters"] == {
        "ContainerStartupHealthCheckTimeoutInSeconds": 900, "ModelDataDownloadTimeoutInSeconds": 900
    }
    assert component["RuntimeConfig"] == {"CopyCount": 2}
    config = only(template, "AWS::SageMaker::EndpointConfig")["Properties"]
    assert "ExecutionRoleArn" in config
    variant = config["ProductionVariants"][0]
    assert "ModelName" not in variant and "ContainerStartupHealthCheckTimeoutInSeconds" not in variant
    assert variant["ManagedInstanceScaling"] == {"Status": "ENABLED", "MinInstanceCount": 1, "MaxInstanceCount": 3}
    groups = [joined(s["Resource"]) for s in policy_statements(template) if s["Action"] == "logs:CreateLogGroup"]
    assert [g.rsplit(":log-group:", 1)[1] for g in groups] == [
        f"/aws/sagemaker/Endpoints/{endpoint.endpoint_name}", "/aws/sagemaker/InferenceComponents/llama-ic"
    ]
    latency = next(a["Properties"] for a in resources(template, "AWS::CloudWatch::Alarm").values()
                   if a["Properties"]["MetricName"] == "ModelLatency")
    assert latency["Dimensions"] == [{"Name": "InferenceComponentName", "Value": "llama-ic"}]
    assert endpoint.metric_concurrent_requests().metric_name == "ConcurrentRequestsPerCopy"


def test_a_cpu_instance_is_allowed_with_a_warning():
    stack = new_stack()
    llm(stack, instance_type="ml.m5.xlarge", inference_component=InferenceComponentOptions(
        min_memory_mb=4096, max_instances=1, accelerators=None, cpu_cores=2))
    template = template_of(stack).to_json()
    Annotations.from_stack(stack).has_warning("/Test/Llm", Match.string_like_regexp("has no GPU or Neuron accelerator"))
    assert only(template, "AWS::SageMaker::InferenceComponent")["Properties"]["Specification"][
        "ComputeResourceRequirements"] == {"MinMemoryRequiredInMb": 4096, "NumberOfCpuCoresRequired": 2}


def test_a_deploy_time_image_needs_its_repository_and_is_pulled_from_it_only():
    stack = new_stack()
    repository = ecr.Repository(stack, "Images", empty_on_delete=False)
    llm(stack, image_uri=repository.repository_uri_for_tag("v1"), image_repository=repository)
    template = template_of(stack).to_json()
    (repo_id,) = resources(template, "AWS::ECR::Repository")
    ecr_statement = next(s for s in policy_statements(template) if "ecr:BatchGetImage" in s["Action"])
    assert ecr_statement["Resource"] == {"Fn::GetAtt": [repo_id, "Arn"]}
    with pytest.raises(InvalidPropsError, match="image_uri is a deploy-time token.*pass image_repository"):
        llm(new_stack(), image_uri=repository.repository_uri_for_tag("v1"))


WEIGHTS_KEY_ARN = "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def _execution_role_policy(stack: cdk.Stack, endpoint: LlmEndpoint) -> str:
    return stack.resolve(stack.get_logical_id(endpoint.role.node.find_child("DefaultPolicy").node.default_child))


@pytest.mark.parametrize("own", [True, False], ids=["bucket-of-the-stack", "from-bucket-attributes"])
def test_a_kms_encrypted_bucket_lets_the_role_decrypt_its_weights(own):
    """SageMaker downloads the weights with the execution role: kms:Decrypt on exactly the bucket's key,
    there and nowhere else (the volume key of a g5 is none: local NVMe)."""
    stack = new_stack()
    key = kms.Key(stack, "WeightsKey", enable_key_rotation=True)
    bucket = (s3.Bucket(stack, "Encrypted", encryption_key=key) if own else
              s3.Bucket.from_bucket_attributes(stack, "Encrypted", bucket_name="enc-models", encryption_key=key))
    endpoint = llm(stack, model_data_bucket=bucket)
    template = template_of(stack).to_json()
    (key_id,) = resources(template, "AWS::KMS::Key")
    assert kms_statements(template) == {_execution_role_policy(stack, endpoint): [
        {"Action": "kms:Decrypt", "Effect": "Allow", "Resource": {"Fn::GetAtt": [key_id, "Arn"]}}]}


def test_a_bucket_imported_by_name_takes_its_key_as_a_prop():
    stack = new_stack()
    endpoint = llm(stack, model_data_bucket_key=kms.Key.from_key_arn(stack, "WeightsKey", WEIGHTS_KEY_ARN))
    template = template_of(stack).to_json()
    assert kms_statements(template) == {_execution_role_policy(stack, endpoint): [
        {"Action": "kms:Decrypt", "Effect": "Allow", "Resource": WEIGHTS_KEY_ARN}]}


def test_a_weights_key_for_a_bucket_that_knows_another_is_refused():
    stack = new_stack()
    bucket = s3.Bucket.from_bucket_attributes(stack, "Encrypted", bucket_name="enc-models", encryption_key=kms.Key(stack, "Own"))
    with pytest.raises(InvalidPropsError) as refused:
        llm(stack, model_data_bucket=bucket, model_data_bucket_key=kms.Key.from_key_arn(stack, "Other", WEIGHTS_KEY_ARN))
    assert refused.value.problems == [
        "model_data_bucket_key is Test/Other but model_data_bucket already knows its own key, Test/Own: the grants "
        "would name a key that does not encrypt the bucket; drop model_data_bucket_key"]


def test_a_weights_key_over_1024_utf8_bytes_is_refused_by_bytes_not_characters():
    """S3 keys are at most 1,024 bytes of UTF-8: 509 'é' and '.tar.gz' are 516 characters but 1,025 bytes."""
    with pytest.raises(InvalidPropsError) as refused:
        llm(new_stack(), model_data_key="é" * 509 + ".tar.gz")
    assert refused.value.problems == [
        "model_data_key is 1,025 bytes of UTF-8; S3 keys are at most 1,024 bytes, prefix included, and "
        "model_data_key is the weights' archive key or prefix: shorten it"
    ]
    llm(new_stack(), model_data_key="é" * 508 + "k.tar.gz")  # exactly 1,024 bytes


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(instance_type=None), "instance_type is required"),
        (dict(instance_type="g5.2xlarge"), "instance_type='g5.2xlarge' is not a SageMaker instance type; use the ml. form"),
        (dict(instance_type=5), "instance_type=5 is an int"),
        (dict(image_uri=None), "image_uri is required"),
        (dict(image_uri="ghcr.io/huggingface/text-generation-inference:3"), "is not an ECR image URI"),
        (dict(image_uri=""), "image_uri='' is empty"),
        (dict(image_repository="repo"), "image_repository='repo' is a str; pass an ecr repository"),
        (dict(model_data_bucket="my-models"), "model_data_bucket='my-models' is a str; pass an s3 bucket"),
        (dict(model_data_bucket=None), "model_data_bucket is required"),
        (dict(model_data_bucket_key="alias/weights"), "model_data_bucket_key='alias/weights' is a str; pass a kms.Key"),
        (dict(model_data_key="llama"), "model_data_key='llama' must be an object key ending in '.tar.gz'"),
        (dict(model_data_key="s3://my-models/llama/"), "without 's3://'"),
        (dict(model_data_key=""), "model_data_key='' is empty"),
        (dict(environment=["A=1"]), "environment=\\['A=1'\\] is a list"),
        (dict(environment={"SM_NUM_GPUS": 1}), "environment\\['SM_NUM_GPUS'\\]=1 is an int; pass a string.*write '1', not 1"),
        (dict(environment={f"V{i}": "x" for i in range(101)}), "environment has 101 entries; SageMaker allows at most 100"),
        (dict(initial_instance_count=0), "initial_instance_count=0 is below the minimum of 1"),
        (dict(initial_instance_count=NAN), "initial_instance_count=nan is not a finite number"),
        (dict(initial_instance_count=INF), "initial_instance_count=inf is not a finite number"),
        (dict(initial_instance_count=1.5), "initial_instance_count=1.5 is not a whole number"),
        (dict(initial_instance_count=20_000), "initial_instance_count=20000 exceeds the maximum of 10,000"),
        (dict(initial_instance_count=None), "initial_instance_count is required"),
        (dict(startup_health_check_timeout=cdk.Duration.seconds(30)), "startup_health_check_timeout=30 seconds is below the minimum of 1 minute"),
        (dict(startup_health_check_timeout=cdk.Duration.hours(2)), "startup_health_check_timeout=2 hours exceeds the maximum of 1 hour"),
        (dict(model_data_download_timeout=900), "model_data_download_timeout=900 is an int; pass a cdk.Duration"),
        (dict(model_data_download_timeout=cdk.Duration.millis(90_500)), "is not whole seconds"),
        (dict(inference_component={"min_memory_mb": 1}), "inference_component=.* is a dict; pass InferenceComponentOptions"),
        (dict(volume_encryption_key="alias/x", instance_type="ml.p3.2xlarge"), "volume_encryption_key='alias/x' is a str"),
        (dict(endpoint_name="llm_endpoint"), "endpoint_name='llm_endpoint' is not a SageMaker name"),
        (dict(endpoint_name="x" * 64), "endpoint_name has 64 characters; at most 63"),
        (dict(variant_name=""), "variant_name='' is empty"),
        (dict(routing_strategy="ROUND_ROBIN"), "routing_strategy='ROUND_ROBIN' must be one of 'LEAST_OUTSTANDING_REQUESTS', 'RANDOM'"),
        (dict(network_isolation="yes"), "network_isolation='yes' is a str; pass True or False"),
        (dict(latency_alarm_threshold=cdk.Duration.hours(2)), "latency_alarm_threshold=2 hours exceeds the maximum of 1 hour"),
        (dict(alarm_actions=[None]), r"alarm_actions\[0\] is required"),
        (dict(inference_component=InferenceComponentOptions(min_memory_mb=1024, max_instances=1), instance_type="ml.m5.xlarge"),
         "asks for 1 accelerator\\(s\\) per copy but ml.m5.xlarge has none"),
    ],
)
def test_llm_endpoint_refuses(overrides, message):
    with pytest.raises(InvalidPropsError, match=message):
        llm(new_stack(), **overrides)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(min_memory_mb=100, max_instances=1), "min_memory_mb=100 is below the minimum of 128"),
        (dict(min_memory_mb=NAN, max_instances=1), "min_memory_mb=nan is not a finite number"),
        (dict(min_memory_mb="24GB", max_instances=1), "min_memory_mb='24GB' is a str"),
        (dict(min_memory_mb=1024, max_instances=0), "max_instances=0 is below the minimum of 1"),
        (dict(min_memory_mb=1024, max_instances=INF), "max_instances=inf is not a finite number"),
        (dict(min_memory_mb=1024, max_instances=2, min_instances=3), "min_instances=3 exceeds max_instances=2"),
        (dict(min_memory_mb=1024, max_instances=2, min_instances=-1), "min_instances=-1 is below the minimum of 0"),
        (dict(min_memory_mb=1024, max_instances=2, accelerators=0), "accelerators=0 is below the minimum of 1"),
        (dict(min_memory_mb=1024, max_instances=2, accelerators=None), None),  # refused by the endpoint, not here
        (dict(min_memory_mb=1024, max_instances=2, cpu_cores=0.1), "cpu_cores=0.1 is below the minimum of 0.25"),
        (dict(min_memory_mb=1024, max_instances=2, copies=0), "copies=0 is below the minimum of 1"),
        (dict(min_memory_mb=1024, max_instances=2, copies=20_000), "copies=20000 exceeds the maximum of 10,000"),
        (dict(min_memory_mb=1024, max_instances=2, name="my_ic"), "name='my_ic' is not a SageMaker name"),
    ],
)
def test_inference_component_options_refuse(kwargs, message):
    if message is None:
        options = InferenceComponentOptions(**kwargs)
        with pytest.raises(InvalidPropsError, match="neither accelerators nor cpu_cores"):
            llm(new_stack(), inference_component=options)
        return
    with pytest.raises(InvalidPropsError, match=message):
        InferenceComponentOptions(**kwargs)


# --- cdk-nag and cfn-lint -----------------------------------------------------------------------


def synthesized(build, *, nag: bool = True, context: dict | None = None) -> tuple[list[str], Path]:
    """Synthesize a one-stack app (AwsSolutions registered): the unacknowledged findings and the outdir."""
    from cdk_nag import AwsSolutionsChecks
    from conftest import nag_violations

    outdir = Path(tempfile.mkdtemp())
    app = cdk.App(outdir=str(outdir), context=context)
    if nag:
        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    build(app)
    with contextlib.suppress(RuntimeError):  # ValidationFailed: the findings are in the report
        app.synth()
    return nag_violations(outdir), outdir


def in_stack(build):
    def app_build(app):
        build(cdk.Stack(app, "Nag", env=cdk.Environment(account="111122223333", region="us-east-1")))
    return app_build


def cfn_lint(outdir: Path) -> subprocess.CompletedProcess:
    templates = sorted(str(p) for p in outdir.glob("*.template.json"))
    assert templates
    return subprocess.run(
        [str(Path(sys.executable).with_name("cfn-lint")), "--format", "parseable", *templates],
        capture_output=True, text=True,
    )


def everything(stack: cdk.Stack) -> None:
    """Every resource kind the library creates: variant and inference component, prefix and archive,
    local storage and an EBS volume key, scale to zero, peaks of all three forms, a CPU policy."""
    variant = llm(stack, "Variant", instance_type="ml.p3.2xlarge", model_data_key="models/llama.tar.gz")
    EndpointScaling(stack, "VariantScaling", endpoint=variant, target_concurrency=6.4, max_capacity=8,
                    lead_time=cdk.Duration.minutes(20), peaks=[
                        PeakWindow(**WEEKDAY_MORNING),
                        PeakWindow(capacity=7, start=datetime(2999, 11, 29, 12), end=datetime(2999, 11, 29, 20),
                                   time_zone="America/New_York", name="black-friday"),
                        PeakWindow(capacity=4, start="cron(0 2 1 * ? *)", end="cron(0 4 1 * ? *)",
                                   time_zone="UTC", name="month-end"),
                    ])
    component = llm(stack, "Component", inference_component=InferenceComponentOptions(
        min_memory_mb=20_000, max_instances=4, min_instances=0))
    EndpointScaling(stack, "ComponentScaling", endpoint=component, target_concurrency=4, max_capacity=8, scale_to_zero=True)
    EndpointScaling(stack, "ExistingCpu", endpoint="other-endpoint", metric="cpu", target_value=60,
                    allow_non_concurrency_metric=True, max_capacity=3)


def test_everything_the_library_creates_passes_nag_and_cfn_lint():
    findings, outdir = synthesized(in_stack(everything))
    assert findings == []
    result = cfn_lint(outdir)
    # exit status is a bit mask: 2 = errors, 4 = warnings, 8 = informational
    assert result.returncode == 0, result.stdout + result.stderr


def test_nag_acknowledges_only_what_the_library_must_grant():
    def build(stack):
        endpoint = llm(stack)
        endpoint.role.add_to_principal_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=["arn:aws:s3:::other/*"]))
        iam.Policy(stack, "Extra", roles=[endpoint.role], statements=[
            iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"], resources=["*"])])

    findings, _ = synthesized(in_stack(build))
    assert findings == [
        "AwsSolutions-IAM5[Resource::arn:aws:s3:::other/*] at Nag/Llm/ExecutionRole/DefaultPolicy/Resource",
        "AwsSolutions-IAM5[Resource::*] at Nag/Extra/Resource",
    ]


def test_cfn_lint_catches_a_wrong_predefined_metric_name(tmp_path):
    _, outdir = synthesized(in_stack(lambda s: by_name(s)), nag=False)
    (template_path,) = outdir.glob("*.template.json")
    template = json.loads(template_path.read_text())
    for policy in resources(template, "AWS::ApplicationAutoScaling::ScalingPolicy").values():
        policy["Properties"]["TargetTrackingScalingPolicyConfiguration"]["PredefinedMetricSpecification"][
            "PredefinedMetricType"] = "SageMakerVariantConcurrentRequestsPerModel"
    template_path.write_text(json.dumps(template))
    assert cfn_lint(outdir).returncode & 2


# --- the reference stack ------------------------------------------------------------------------


def reference(context: dict | None = None) -> tuple[list[str], Path]:
    from stacks.endpoint_scaling_stack import EndpointScalingStack

    return synthesized(lambda app: EndpointScalingStack(app, "GenaiPacerEndpointScaling"), context=context)


@pytest.fixture(scope="module")
def reference_default(reference_templates):
    """The reference app's endpoint-scaling template (synthesized once per session, nag and cfn-lint
    checked in tests/test_reference_app.py)."""
    return reference_templates["GenaiPacerEndpointScaling"]


def test_the_reference_figures_come_from_the_capacity_planner(reference_default):
    from stacks.endpoint_scaling_stack import ENDPOINT_CONTEXT_DEFAULTS

    template = reference_default
    defaults = {k: v for k, (v, _) in ENDPOINT_CONTEXT_DEFAULTS.items()}
    target = capacity.target_concurrency(
        sustained_requests_per_minute=float(defaults["endpoint_sustained_rpm"]),
        latency_seconds=float(defaults["endpoint_latency_seconds"]),
    )
    peak = capacity.capacity_for_peak(
        target_concurrency=target, requests_per_minute=float(defaults["endpoint_peak_rpm"]),
        latency_seconds=float(defaults["endpoint_latency_seconds"]),
    )
    lead = capacity.lead_time(float(defaults["endpoint_load_minutes"]) * 60)
    assert (target.target_value, peak.capacity, lead.minutes) == (6.4, 10, 19)
    assert tracking_of(template)["TargetValue"] == target.target_value
    assert actions_of(template) == {
        "weekday-morning-raise": ("cron(41 7 ? * MON,TUE,WED,THU,FRI *)", 10, "Europe/Berlin"),
        "weekday-morning-restore": ("cron(0 11 ? * MON,TUE,WED,THU,FRI *)", 1, "Europe/Berlin"),
    }
    image = only(template, "AWS::SageMaker::Model")["Properties"]["PrimaryContainer"]["Image"]
    assert "huggingface-pytorch-tgi-inference:2.7.0-tgi3.3.6" in json.dumps(image)
    assert only(template, "AWS::SageMaker::EndpointConfig")["Properties"]["ProductionVariants"][0]["InstanceType"] == "ml.g5.2xlarge"


@pytest.mark.parametrize(
    "context",
    [
        {"endpoint_name": "existing-llm", "endpoint_variant_name": "Blue"},
        {"endpoint_instance_type": "ml.p4d.24xlarge", "endpoint_image_uri": TGI, "endpoint_model_bucket": "weights",
         "endpoint_model_key": "llama-70b.tar.gz", "endpoint_load_minutes": "25", "endpoint_time_zone": "Asia/Tokyo"},
    ],
)
def test_context_changes_the_endpoint_without_code_edits(context):
    findings, outdir = reference(context)
    assert findings == []
    template = json.loads((outdir / "GenaiPacerEndpointScaling.template.json").read_text())
    if "endpoint_name" in context:
        assert not resources(template, "AWS::SageMaker::Endpoint")
        assert target_of(template)["ResourceId"] == "endpoint/existing-llm/variant/Blue"
    else:
        assert only(template, "AWS::SageMaker::Model")["Properties"]["PrimaryContainer"]["ModelDataUrl"] == "s3://weights/llama-70b.tar.gz"
        assert actions_of(template)["weekday-morning-raise"] == ("cron(28 7 ? * MON,TUE,WED,THU,FRI *)", 10, "Asia/Tokyo")
    assert cfn_lint(outdir).returncode == 0


def test_non_numeric_context_is_refused_with_the_keys():
    from stacks.endpoint_scaling_stack import EndpointScalingStack

    app = cdk.App(context={"endpoint_peak_rpm": "lots", "endpoint_max_capacity": "ten"})
    with pytest.raises(ValueError, match="context endpoint_peak_rpm='lots', endpoint_max_capacity='ten' must be numbers"):
        EndpointScalingStack(app, "GenaiPacerEndpointScaling")


def test_every_lead_time_in_the_reference_arithmetic_is_a_whole_minute():
    # a scheduled action fires on a minute; the planner never hands the construct a fraction
    for seconds in (59, 60, 601, 899.5, 7_200):
        assert cdk.Duration.minutes(capacity.lead_time(seconds).minutes).to_seconds() >= seconds
    assert timedelta(minutes=capacity.lead_time(600).minutes) == timedelta(minutes=13)


def test_weights_under_a_prefix_of_a_bucket_in_the_same_stack_pass_nag_and_a_users_own_wildcard_still_fails():
    """Issue 23: the library's prefix grant is acknowledged on exactly that statement, whatever form the
    bucket's ARN takes (a same-stack bucket flattens to <Weights...Arn>/mistral-7b/*)."""
    def build(stack):
        weights = s3.Bucket(stack, "Weights", enforce_ssl=True, server_access_logs_bucket=s3.Bucket.from_bucket_name(
            stack, "AccessLogs", "my-access-logs"))
        endpoint = llm(stack, model_data_bucket=weights, model_data_key="mistral-7b/")
        endpoint.role.add_to_principal_policy(iam.PolicyStatement(
            actions=["s3:GetObject"], resources=[weights.arn_for_objects("other/*")]))

    findings, _ = synthesized(in_stack(build))
    assert findings == [
        "AwsSolutions-IAM5[Resource::<Weights79DEE8EF.Arn>/other/*] at Nag/Llm/ExecutionRole/DefaultPolicy/Resource"]


# --- a caller's grant (issue 34.11) -----------------------------------------------------------------


@pytest.mark.parametrize("component", [False, True])
def test_grant_invoke_gives_a_caller_invoke_endpoint_on_this_endpoint_only(component):
    """Before: no grant_invoke; a caller wrote the endpoint's ARN policy by hand."""
    stack = new_stack()
    options = {"inference_component": InferenceComponentOptions(min_memory_mb=20_000, max_instances=4)} if component else {}
    endpoint = llm(stack, **options)
    caller = iam.Role(stack, "Caller", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    grant = endpoint.grant_invoke(caller)
    assert grant.success
    template = template_of(stack).to_json()
    (policy,) = [p["Properties"] for p in resources(template, "AWS::IAM::Policy").values()
                 if p["Properties"]["Roles"] == [{"Ref": next(k for k in template["Resources"] if k.startswith("Caller"))}]]
    endpoint_id = next(k for k, r in resources(template, "AWS::SageMaker::Endpoint").items())
    expected = [{"Fn::GetAtt": [endpoint_id, "EndpointArn"]}]
    if component:
        component_id = next(iter(resources(template, "AWS::SageMaker::InferenceComponent")))
        expected.append({"Fn::GetAtt": [component_id, "InferenceComponentArn"]})
    assert policy["PolicyDocument"]["Statement"] == [{
        "Action": "sagemaker:InvokeEndpoint", "Effect": "Allow", "Resource": expected if component else expected[0],
    }]
