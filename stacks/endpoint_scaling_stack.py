"""A self-hosted LLM on a SageMaker GPU endpoint, scaled ahead of a weekday-morning peak and on
concurrency in between; every figure from genai_pacer.endpoints.capacity and CDK context.

Context (`cdk synth -c key=value`), with the defaults in ENDPOINT_CONTEXT_DEFAULTS:

- endpoint_name: scale this existing endpoint instead of creating one (its variant is
  endpoint_variant_name); the image, bucket and instance keys are then unused.
- endpoint_image_uri, endpoint_model_bucket, endpoint_model_key, endpoint_instance_type,
  endpoint_load_minutes: the LlmEndpoint the stack creates.
- endpoint_sustained_rpm, endpoint_latency_seconds: what one instance sustains at the latency
  target, measured against the endpoint; endpoint_peak_rpm: the peak's rate.
- endpoint_peak_days, endpoint_peak_start, endpoint_peak_end, endpoint_time_zone: the peak.
- endpoint_max_capacity: the most instances scaling may run.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_s3 as s3
from genai_pacer.endpoints import capacity
from genai_pacer.endpoints.llm_endpoint import LlmEndpoint
from genai_pacer.endpoints.scaling import EndpointScaling, PeakWindow

from constructs import Construct

#: The Hugging Face TGI deep learning container (AWS account 763104351884 hosts it in most
#: commercial Regions; pass endpoint_image_uri elsewhere).
TGI_ACCOUNT = "763104351884"
TGI_REPOSITORY = "huggingface-pytorch-tgi-inference"
TGI_TAG = "2.7.0-tgi3.3.6-gpu-py311-cu124-ubuntu22.04"

#: context key -> (default, meaning)
ENDPOINT_CONTEXT_DEFAULTS: dict[str, tuple[str, str]] = {
    "endpoint_name": ("", "an existing endpoint to scale; empty creates an LlmEndpoint"),
    "endpoint_variant_name": ("AllTraffic", "the variant of an existing endpoint"),
    "endpoint_image_uri": (
        "",
        f"the serving image; empty is TGI ({TGI_REPOSITORY}:{TGI_TAG}) in the stack's Region",
    ),
    "endpoint_model_bucket": ("", "the bucket holding the weights; empty is genai-pacer-models-<account id>"),
    "endpoint_model_key": (
        "models/llama-3-1-8b-instruct/",
        "the weights: a prefix ending in / or a .tar.gz key",
    ),
    "endpoint_instance_type": ("ml.g5.2xlarge", "one A10G GPU with 24 GB: an 8B model in 16-bit weights"),
    "endpoint_load_minutes": (
        "15",
        "the startup health-check timeout, and the model load time scaling plans for",
    ),
    "endpoint_sustained_rpm": (
        "120",
        "requests per minute one instance sustains at the latency target (measured)",
    ),
    "endpoint_latency_seconds": ("4", "seconds per request at that rate"),
    "endpoint_peak_rpm": ("900", "requests per minute at the weekday-morning peak"),
    "endpoint_peak_days": ("MON-FRI", "the peak's days"),
    "endpoint_peak_start": ("08:00", "the peak's start, local time"),
    "endpoint_peak_end": ("11:00", "the peak's end, local time"),
    "endpoint_time_zone": ("Europe/Berlin", "the users' IANA time zone"),
    "endpoint_max_capacity": ("12", "the most instances scaling may run"),
}

_NUMBERS = (
    "endpoint_load_minutes",
    "endpoint_sustained_rpm",
    "endpoint_latency_seconds",
    "endpoint_peak_rpm",
    "endpoint_max_capacity",
)


def endpoint_context(scope: Construct) -> dict[str, str]:
    """Every key of ENDPOINT_CONTEXT_DEFAULTS, from context or its default."""
    values = {}
    for key, (default, _) in ENDPOINT_CONTEXT_DEFAULTS.items():
        value = scope.node.try_get_context(key)
        values[key] = str(value) if value is not None else default
    return values


def _numbers(values: dict[str, str]) -> dict[str, float]:
    parsed, bad = {}, []
    for key in _NUMBERS:
        try:
            parsed[key] = float(values[key])
        except ValueError:
            bad.append(f"{key}={values[key]!r}")
    if bad:
        raise ValueError(f"context {', '.join(bad)} must be numbers (see stacks/endpoint_scaling_stack.py)")
    return parsed


class EndpointScalingStack(cdk.Stack):
    def __init__(self, scope: Construct, id: str, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        context = endpoint_context(self)
        numbers = _numbers(context)

        # One instance serves 120 requests per minute at 4 s each before latency passes the target:
        # 8 requests in flight; tracking holds 20% below that, and the peak needs enough instances.
        target = capacity.target_concurrency(
            sustained_requests_per_minute=numbers["endpoint_sustained_rpm"],
            latency_seconds=numbers["endpoint_latency_seconds"],
        )
        peak = capacity.capacity_for_peak(
            target_concurrency=target,
            requests_per_minute=numbers["endpoint_peak_rpm"],
            latency_seconds=numbers["endpoint_latency_seconds"],
        )
        load = cdk.Duration.minutes(numbers["endpoint_load_minutes"])
        lead = capacity.lead_time(load.to_seconds())

        endpoint: LlmEndpoint | str
        if context["endpoint_name"]:
            endpoint = context["endpoint_name"]
        else:
            endpoint = self._llm_endpoint(context, load)
            cdk.CfnOutput(self, "EndpointName", value=endpoint.endpoint_name)
        self.scaling = EndpointScaling(
            self,
            "Scaling",
            endpoint=endpoint,
            variant_name=context["endpoint_variant_name"] if isinstance(endpoint, str) else None,
            target_concurrency=target,
            max_capacity=int(numbers["endpoint_max_capacity"]),
            model_load_time=load if isinstance(endpoint, str) else None,
            lead_time=cdk.Duration.minutes(lead.minutes),
            peaks=[
                PeakWindow(
                    name="weekday-morning",
                    capacity=peak,
                    days=context["endpoint_peak_days"],
                    start=context["endpoint_peak_start"],
                    end=context["endpoint_peak_end"],
                    time_zone=context["endpoint_time_zone"],
                )
            ],
        )

    def _llm_endpoint(self, context: dict[str, str], load: cdk.Duration) -> LlmEndpoint:
        repository = None
        image_uri = context["endpoint_image_uri"]
        if not image_uri:
            repository = ecr.Repository.from_repository_attributes(
                self,
                "TgiImage",
                repository_arn=self.format_arn(
                    service="ecr", account=TGI_ACCOUNT, resource="repository", resource_name=TGI_REPOSITORY
                ),
                repository_name=TGI_REPOSITORY,
            )
            image_uri = repository.repository_uri_for_tag(TGI_TAG)
        bucket = s3.Bucket.from_bucket_name(
            self, "Models", context["endpoint_model_bucket"] or f"genai-pacer-models-{cdk.Aws.ACCOUNT_ID}"
        )
        return LlmEndpoint(
            self,
            "Llm",
            instance_type=context["endpoint_instance_type"],
            image_uri=image_uri,
            image_repository=repository,
            model_data_bucket=bucket,
            model_data_key=context["endpoint_model_key"],
            environment={"SM_NUM_GPUS": "1", "MAX_INPUT_TOKENS": "4096", "MAX_TOTAL_TOKENS": "6144"},
            startup_health_check_timeout=load,
        )
