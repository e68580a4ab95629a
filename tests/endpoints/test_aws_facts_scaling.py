"""The AWS facts EndpointScaling and the capacity planner rely on, read back from the sources the dev
tools install: botocore's Application Auto Scaling and SageMaker service models and cfn-lint's
CloudFormation schemas. A drift in either fails here, next to the constant it contradicts. Facts only
the documentation states (quotas, CloudWatch metric names) carry their URL next to the constant."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import aws_cdk as cdk
import botocore.loaders
import cfnlint
import pytest
from aws_cdk.assertions import Template
from genai_pacer.endpoints import capacity
from genai_pacer.endpoints import scaling as endpoint_scaling
from genai_pacer.endpoints.scaling import EndpointScaling, PeakWindow
from helpers import new_stack, only

SCHEMAS = Path(cfnlint.__file__).parent / "data" / "schemas"


@cache
def model(service: str) -> dict:
    return botocore.loaders.Loader().load_service_model(service, "service-2")


def shape(service: str, name: str) -> dict:
    return model(service)["shapes"][name]


def documentation(service: str, operation_input: str, member: str) -> str:
    """A member's documentation as text (tags dropped)."""
    html = shape(service, operation_input)["members"][member]["documentation"]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))


@cache
def schema(type_name: str) -> dict:
    providers = json.loads((SCHEMAS / "providers" / "us-east-1.json").read_text())
    return json.loads((SCHEMAS / "resources" / f"{providers[type_name]}.json").read_text())


def test_the_scalable_dimensions_are_in_the_models_enum():
    dimensions = shape("application-autoscaling", "ScalableDimension")["enum"]
    assert endpoint_scaling.VARIANT_DIMENSION in dimensions
    assert endpoint_scaling.COMPONENT_DIMENSION in dimensions


def test_the_resource_ids_follow_the_models_examples():
    text = documentation("application-autoscaling", "RegisterScalableTargetRequest", "ResourceId")
    variant = endpoint_scaling.VARIANT_RESOURCE_ID.format(endpoint="my-end-point", variant="KMeansClustering")
    component = endpoint_scaling.COMPONENT_RESOURCE_ID.format(component="my-inference-component")
    assert variant in text and component in text


@pytest.mark.parametrize(("metric", "is_component"), sorted(endpoint_scaling.PREDEFINED_METRIC_TYPES))
def test_each_predefined_metric_type_is_in_the_models_enum_and_is_what_the_template_says(metric, is_component):
    expected = endpoint_scaling.PREDEFINED_METRIC_TYPES[(metric, is_component)]
    assert expected in shape("application-autoscaling", "MetricType")["enum"]
    stack = new_stack()
    target = {"inference_component_name": "my-ic"} if is_component else {}
    extra = {"target_concurrency": 4} if metric == "concurrency" else {
        "metric": metric, "target_value": 100, "allow_non_concurrency_metric": True}
    EndpointScaling(stack, "Scaling", endpoint="my-endpoint", max_capacity=4, **target, **extra)
    policy = only(Template.from_stack(stack).to_json(), "AWS::ApplicationAutoScaling::ScalingPolicy")["Properties"]
    written = policy["TargetTrackingScalingPolicyConfiguration"]["PredefinedMetricSpecification"]["PredefinedMetricType"]
    assert written == expected


def test_schedules_are_at_and_six_field_cron_expressions_as_the_model_documents():
    text = documentation("application-autoscaling", "PutScheduledActionRequest", "Schedule")
    assert '"at(yyyy-mm-ddThh:mm:ss)"' in text
    assert "six fields separated by white spaces: [Minutes] [Hours] [Day_of_Month] [Month] [Day_of_Week] [Year]" in text
    assert endpoint_scaling.CRON_FIELDS == 6
    from datetime import datetime

    assert re.fullmatch(r"at\(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\)", datetime(2027, 3, 5, 7, 40).strftime(endpoint_scaling.AT_FORMAT))


def test_the_longest_scheduled_action_name_fits_the_models_shape():
    name_shape = shape("application-autoscaling", "ScheduledActionName")
    assert name_shape["max"] == endpoint_scaling.MAX_SCHEDULED_ACTION_NAME
    longest = "p" * 100  # PeakWindow(name=...) allows 1-100 letters, digits, '-' and '_'
    PeakWindow(capacity=2, start="08:00", end="09:00", time_zone="UTC", name=longest)
    for suffix in ("-raise", "-restore"):
        action = longest + suffix
        assert len(action) <= name_shape["max"]
        assert re.fullmatch(name_shape["pattern"], action)


def test_the_scheduled_action_properties_the_construct_writes_are_in_the_cloudformation_schema():
    action = schema("AWS::ApplicationAutoScaling::ScalableTarget")["definitions"]["ScheduledAction"]["properties"]
    assert {"Schedule", "ScheduledActionName", "Timezone", "ScalableTargetAction"} <= set(action)


def test_sagemaker_names_follow_the_models_patterns():
    for name, pattern in (("EndpointName", endpoint_scaling.ENDPOINT_NAME), ("VariantName", endpoint_scaling.VARIANT_NAME),
                          ("InferenceComponentName", endpoint_scaling.INFERENCE_COMPONENT_NAME)):
        assert shape("sagemaker", name)["pattern"] == pattern.pattern, name
        assert shape("sagemaker", name)["max"] == endpoint_scaling.MAX_SAGEMAKER_NAME, name


def test_the_longest_load_time_is_sagemakers_two_startup_timeouts():
    download = shape("sagemaker", "ProductionVariantModelDataDownloadTimeoutInSeconds")
    health = shape("sagemaker", "ProductionVariantContainerStartupHealthCheckTimeoutInSeconds")
    assert download["max"] + health["max"] == capacity.MAX_LOAD_SECONDS


def test_deploy_time_capacities_and_names_pass_cfn_lint(tmp_path):
    """The Refs the token table lets through are of the types the resource schemas want."""
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Tokens", env=cdk.Environment(account="111122223333", region="us-east-1"))

    def number(name: str) -> float:
        return cdk.CfnParameter(stack, name, type="Number").value_as_number

    peak = PeakWindow(capacity=number("PeakCapacity"), start="08:00", end="09:00", days="MON-FRI", time_zone="UTC",
                      name=cdk.CfnParameter(stack, "PeakName").value_as_string)
    EndpointScaling(stack, "Scaling", endpoint=cdk.CfnParameter(stack, "Endpoint").value_as_string,
                    variant_name=cdk.CfnParameter(stack, "Variant").value_as_string,
                    min_capacity=number("Min"), max_capacity=number("Max"), target_concurrency=number("Target"),
                    scale_out_cooldown=cdk.Duration.seconds(number("Out")),
                    scale_in_cooldown=cdk.Duration.seconds(number("In")), peaks=[peak])
    app.synth()
    result = subprocess.run([str(Path(sys.executable).with_name("cfn-lint")), "--format", "parseable",
                             str(tmp_path / "Tokens.template.json")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
