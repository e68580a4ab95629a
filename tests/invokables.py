"""Objects shaped like aws_bedrock_alpha's IBedrockInvokable (issue 23), for the tests of every construct
that takes a model: tests/models/ checks what BedrockModel makes of each, and the construct tests check
that each builds the template the BedrockModel it names builds (the alpha package itself is not installed)."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk

#: The model the fakes' prompt router routes to (an id shape only: nothing is invoked).
HAIKU = "anthropic.claude-3-5-haiku-20241022-v1:0"


class _Enum:
    """A jsii enum member as the alpha package exposes it (InferenceProfileType.APPLICATION)."""

    def __init__(self, value: str) -> None:
        self.value = value


class Invokable:
    """The IBedrockInvokable contract: invokable_arn and grant_invoke (never called by genai-pacer)."""

    invokable_arn: str

    def grant_invoke(self, grantee: Any) -> Any:
        raise AssertionError("genai-pacer grants exact ARNs itself; the object's own grant is not used")


class FakeFoundationModel(Invokable):
    """Shaped like aws_bedrock_alpha.BedrockFoundationModel: its ARN holds partition and Region tokens."""

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id
        self.model_arn = self.invokable_arn = f"arn:{cdk.Aws.PARTITION}:bedrock:{cdk.Aws.REGION}::foundation-model/{model_id}"

    def grant_invoke_all_regions(self, grantee: Any) -> Any:
        raise AssertionError("not used")


class FakeCrossRegionProfile(Invokable):
    """Shaped like aws_bedrock_alpha.CrossRegionInferenceProfile."""

    def __init__(self, geo: str, model: FakeFoundationModel) -> None:
        self.inference_profile_id = f"{geo}.{model.model_id}"
        self.inference_profile_model = model
        self.type = _Enum("SYSTEM_DEFINED")
        self.inference_profile_arn = self.invokable_arn = (
            f"arn:{cdk.Aws.PARTITION}:bedrock:{cdk.Aws.REGION}:{cdk.Aws.ACCOUNT_ID}:inference-profile/{self.inference_profile_id}")

    def grant_profile_usage(self, grantee: Any) -> Any:
        raise AssertionError("not used")


class FakeApplicationProfile(Invokable):
    """Shaped like aws_bedrock_alpha.ApplicationInferenceProfile: a deploy-time ARN and the model it copies."""

    def __init__(self, arn: str, source: Invokable) -> None:
        self.inference_profile_arn = self.invokable_arn = arn
        self.inference_profile_id = cdk.Fn.select(1, cdk.Fn.split("/", arn))
        self.inference_profile_model = source
        self.type = _Enum("APPLICATION")


class FakePromptRouter(Invokable):
    """Shaped like aws_bedrock_alpha.PromptRouter."""

    def __init__(self) -> None:
        self.prompt_router_arn = self.invokable_arn = "arn:aws:bedrock:us-east-1:111122223333:default-prompt-router/anthropic.claude:1"
        self.routing_endpoints = [FakeCrossRegionProfile("us", FakeFoundationModel(HAIKU))]
