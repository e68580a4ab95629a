"""Which Bedrock model a construct calls, and the exact IAM resources that call needs.

A cross-Region inference profile is invoked by its own ARN but serves the request from a
foundation model in one of several Regions, so the caller's role needs the profile ARN *and* the
foundation-model ARN in every Region the profile routes to. Granting `*` instead would fail cdk-nag
and let the role call any model; this module keeps the list explicit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_bedrock as bedrock
from aws_cdk import aws_iam as iam

from constructs import Construct

__all__ = ["BedrockModel", "PROFILE_REGIONS"]

#: Regions that the geographic cross-Region inference profiles commonly route to. Routing differs
#: per model and grows over time: check `aws bedrock get-inference-profile` and pass `regions=`
#: when your profile differs.
PROFILE_REGIONS: dict[str, tuple[str, ...]] = {
    "us": ("us-east-1", "us-east-2", "us-west-2"),
    "us-gov": ("us-gov-east-1", "us-gov-west-1"),
    "eu": ("eu-central-1", "eu-north-1", "eu-west-1", "eu-west-3"),
    "apac": ("ap-northeast-1", "ap-northeast-2", "ap-south-1", "ap-southeast-1", "ap-southeast-2"),
    "ca": ("ca-central-1", "ca-west-1"),
    "jp": ("ap-northeast-1", "ap-northeast-3"),
    "au": ("ap-southeast-2", "ap-southeast-4"),
}

_MODEL_ID = re.compile(r"^[a-z0-9-]+\.[A-Za-z0-9.:_-]+$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")

INVOKE_ACTIONS = ("bedrock:InvokeModel",)
STREAM_ACTIONS = ("bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream")


@dataclass(frozen=True)
class BedrockModel:
    """A foundation model or a cross-Region inference profile to invoke.

    Build it with `BedrockModel.from_id("us.anthropic.claude-3-5-haiku-20241022-v1:0")` (a known
    geographic prefix makes it an inference profile), `BedrockModel.foundation(...)` or
    `BedrockModel.inference_profile(..., regions=[...])`.
    """

    model_id: str
    profile_regions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if cdk.Token.is_unresolved(self.model_id):
            return
        if not _MODEL_ID.match(self.model_id):
            raise ValueError(
                f"model_id={self.model_id!r} is not a Bedrock model id; expected provider.model[:version] "
                "such as 'amazon.nova-lite-v1:0', or a profile id such as 'us.amazon.nova-lite-v1:0'"
            )
        for region in self.profile_regions:
            if not _REGION.match(region):
                raise ValueError(
                    f"regions contains {region!r}, which is not an AWS Region name such as 'us-east-1'"
                )

    @classmethod
    def foundation(cls, model_id: str) -> BedrockModel:
        """An on-demand foundation model in the stack's own Region."""
        return cls(model_id)

    @classmethod
    def inference_profile(cls, profile_id: str, *, regions: Sequence[str] | None = None) -> BedrockModel:
        """A cross-Region inference profile; regions default to PROFILE_REGIONS for its prefix."""
        prefix = profile_id.split(".", 1)[0]
        if regions is None:
            if prefix not in PROFILE_REGIONS:
                raise ValueError(
                    f"profile {profile_id!r} has prefix {prefix!r}, whose routing Regions genai-pacer does not "
                    f"know (known: {', '.join(sorted(PROFILE_REGIONS))}); pass regions=[...] as listed by "
                    "`aws bedrock get-inference-profile`"
                )
            regions = PROFILE_REGIONS[prefix]
        if not regions:
            raise ValueError(f"regions for profile {profile_id!r} is empty; list the Regions it routes to")
        return cls(profile_id, tuple(regions))

    @classmethod
    def from_id(cls, model_id: str, *, regions: Sequence[str] | None = None) -> BedrockModel:
        """A profile when the id starts with a geographic prefix (or regions are given), else a model."""
        if regions is not None or model_id.split(".", 1)[0] in (*PROFILE_REGIONS, "global"):
            return cls.inference_profile(model_id, regions=regions)
        return cls.foundation(model_id)

    @property
    def is_inference_profile(self) -> bool:
        return bool(self.profile_regions)

    @property
    def foundation_model_id(self) -> str:
        """The model id without the profile's geographic prefix."""
        return self.model_id.split(".", 1)[1] if self.is_inference_profile else self.model_id

    def invoke_arn(self, scope: Construct) -> str:
        """The ARN to pass as ModelId: the profile's when there is one, else the model's."""
        stack = cdk.Stack.of(scope)
        if self.is_inference_profile:
            return stack.format_arn(
                service="bedrock",
                resource="inference-profile",
                resource_name=self.model_id,
                arn_format=cdk.ArnFormat.SLASH_RESOURCE_NAME,
            )
        return self._foundation_arn(stack, stack.region)

    def routed_model_arns(self, scope: Construct) -> list[str]:
        """The foundation-model ARNs a profile serves from (none for a plain foundation model)."""
        stack = cdk.Stack.of(scope)
        return [self._foundation_arn(stack, region) for region in self.profile_regions]

    def resource_arns(self, scope: Construct) -> list[str]:
        """Every ARN an invoking role must be allowed: the invoke ARN plus any routed foundation model."""
        return [self.invoke_arn(scope), *self.routed_model_arns(scope)]

    def grant_invoke(self, grantee: iam.IGrantable, *, streaming: bool = False) -> iam.Grant:
        """Allow InvokeModel (Converse) and, with streaming, the response-stream action too."""
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=list(STREAM_ACTIONS if streaming else INVOKE_ACTIONS),
            resource_arns=self.resource_arns(_scope_of(grantee)),
        )

    def as_imodel(self, scope: Construct, id: str) -> bedrock.IModel:
        """The aws-cdk-lib IModel whose ARN the Step Functions Bedrock task puts in ModelId."""
        if self.is_inference_profile:
            return bedrock.ProvisionedModel.from_provisioned_model_arn(scope, id, self.invoke_arn(scope))
        return bedrock.FoundationModel.from_foundation_model_id(
            scope, id, bedrock.FoundationModelIdentifier(self.model_id)
        )

    def _foundation_arn(self, stack: cdk.Stack, region: str) -> str:
        return stack.format_arn(
            service="bedrock",
            region=region,
            account="",
            resource="foundation-model",
            resource_name=self.foundation_model_id,
            arn_format=cdk.ArnFormat.SLASH_RESOURCE_NAME,
        )


def _scope_of(grantee: iam.IGrantable) -> Construct:
    """A construct in the grantee's stack, needed to render ARNs with its partition and Region."""
    for candidate in (grantee, grantee.grant_principal):
        if isinstance(candidate, Construct):
            return candidate
    raise TypeError(f"cannot grant to {grantee!r}: pass a role, function or other construct")
