"""Integration test: EndpointScaling registers its scheduled peak capacity and its target-tracking policy.

One test case. The endpoint is an LlmEndpoint on one CPU instance (integ_endpoint_instance_type,
default ml.m5.large) serving an echo model (integ/echo_model: a Hugging Face toolkit
`code/inference.py`, no weights), so a run costs minutes of a small instance, not a GPU. Assertions
read back what Application Auto Scaling holds: the scalable target with its capacities, the peak's
scheduled actions (raise ahead of the window, lower after it) and the target-tracking policy on
concurrent requests per model.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aws_cdk as cdk  # noqa: E402
from aws_cdk import aws_ecr as ecr  # noqa: E402
from aws_cdk import aws_s3_deployment as s3deploy  # noqa: E402
from aws_cdk.integ_tests_alpha import ExpectedResult, IntegTest, Match  # noqa: E402
from genai_pacer.endpoints.llm_endpoint import LlmEndpoint  # noqa: E402
from genai_pacer.endpoints.scaling import EndpointScaling, PeakWindow  # noqa: E402

from integ._support import (  # noqa: E402
    HF_CPU_ACCOUNT,
    HF_CPU_REPOSITORY,
    HF_CPU_TAG,
    destroy_on_delete,
    new_app,
    scratch_bucket,
    setting,
)

ECHO_MODEL = Path(__file__).resolve().parent / "echo_model"
MAX_CAPACITY = 2


class EndpointScalingStack(cdk.Stack):
    def __init__(self, scope: cdk.App, id: str) -> None:
        super().__init__(scope, id)
        image_uri = setting(self, "integ_endpoint_image_uri")
        repository = None
        if not image_uri:
            repository = ecr.Repository.from_repository_attributes(
                self,
                "HfCpuImage",
                repository_arn=self.format_arn(
                    service="ecr", account=HF_CPU_ACCOUNT, resource="repository", resource_name=HF_CPU_REPOSITORY
                ),
                repository_name=HF_CPU_REPOSITORY,
            )
            image_uri = repository.repository_uri_for_tag(HF_CPU_TAG)
        bucket = scratch_bucket(self, "Model")
        upload = s3deploy.BucketDeployment(
            self, "EchoModel", sources=[s3deploy.Source.asset(str(ECHO_MODEL))], destination_bucket=bucket,
            destination_key_prefix="echo/",
        )
        self.endpoint = LlmEndpoint(
            self,
            "Echo",
            instance_type=setting(self, "integ_endpoint_instance_type"),
            image_uri=image_uri,
            image_repository=repository,
            model_data_bucket=bucket,
            model_data_key="echo/",
            startup_health_check_timeout=cdk.Duration.minutes(10),
        )
        self.endpoint.node.add_dependency(upload)  # the model files exist before SageMaker reads them
        self.scaling = EndpointScaling(
            self,
            "Scaling",
            endpoint=self.endpoint,
            target_concurrency=4,
            max_capacity=MAX_CAPACITY,
            lead_time=cdk.Duration.minutes(15),
            peaks=[
                PeakWindow(
                    name="weekday-morning", capacity=2, days="MON-FRI", start="08:00", end="11:00", time_zone="Europe/Berlin"
                )
            ],
        )
        destroy_on_delete(self)


def build_app(context: dict[str, Any] | None = None, outdir: str | None = None) -> cdk.App:
    app = new_app(context, outdir)
    stack = EndpointScalingStack(app, "IntegEndpointScaling")
    integ = IntegTest(app, "EndpointScaling", test_cases=[stack], stack_update_workflow=False)
    resource_id = cdk.Fn.join("", ["endpoint/", stack.endpoint.endpoint_name, "/variant/", stack.endpoint.variant_name])
    target = {"ServiceNamespace": "sagemaker", "ResourceIds": [resource_id]}
    integ.assertions.aws_api_call("ApplicationAutoScaling", "describeScalableTargets", target).expect(
        ExpectedResult.object_like(
            {
                "ScalableTargets": [
                    Match.object_like(
                        {
                            "ResourceId": resource_id,
                            "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
                            "MaxCapacity": MAX_CAPACITY,
                        }
                    )
                ]
            }
        )
    )
    one = {"ServiceNamespace": "sagemaker", "ResourceId": resource_id}
    integ.assertions.aws_api_call("ApplicationAutoScaling", "describeScheduledActions", one).expect(
        ExpectedResult.object_like(
            {
                "ScheduledActions": Match.array_with(
                    [
                        Match.object_like({"Timezone": "Europe/Berlin", "ScalableTargetAction": {"MinCapacity": 2}}),
                    ]
                )
            }
        )
    )
    integ.assertions.aws_api_call("ApplicationAutoScaling", "describeScalingPolicies", one).expect(
        ExpectedResult.object_like(
            {"ScalingPolicies": Match.array_with([Match.object_like({"PolicyType": "TargetTrackingScaling"})])}
        )
    )
    return app


if __name__ == "__main__":
    build_app().synth()
