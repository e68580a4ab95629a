"""Choices of the reference stacks, read from CDK context (`cdk synth -c model_id=...`).

Each setting has a documented default so `make synth` works with no context at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from genai_pacer import BedrockModel

from constructs import Construct

#: context key -> (default, meaning)
CONTEXT_DEFAULTS: dict[str, tuple[str, str]] = {
    # Amazon Nova 2 Lite (a US cross-Region profile): a current model that the service tiers page lists
    # for the Priority and Flex tiers in us-east-1, us-east-2 and us-west-2 (read in a copy of
    # 2026-02-15, https://docs.aws.amazon.com/bedrock/latest/userguide/service-tiers-inference.html),
    # which the pre-computation stack uses. Claude 3.5 Haiku, the default until 0.2.0, reached its
    # Bedrock end of life on 2026-06-19 (genai_pacer.models.DEPRECATED_MODELS). Amazon Nova Lite
    # (us.amazon.nova-lite-v1:0), the default briefly after it, gave way to the model the page lists
    # for the tiers the pre-computation stack asks for.
    "model_id": (
        "us.amazon.nova-2-lite-v1:0",
        "model or cross-Region inference profile id every reference stack calls",
    ),
    "model_regions": ("", "comma-separated Regions the profile routes to (default: by its prefix)"),
    "burndown": ("1", "quota tokens per output token of that model (1 for Amazon Nova models)"),
    "tpm_quota": ("1000000", "the account's tokens-per-minute quota for that model (an example: pass yours)"),
}


@dataclass(frozen=True)
class ReferenceSettings:
    model: BedrockModel
    burndown: float
    tpm_quota: float

    @classmethod
    def from_context(cls, scope: Construct) -> ReferenceSettings:
        def get(key: str) -> str:
            value = scope.node.try_get_context(key)
            return str(value) if value is not None else CONTEXT_DEFAULTS[key][0]

        regions = [r.strip() for r in get("model_regions").split(",") if r.strip()] or None
        try:
            burndown, tpm_quota = float(get("burndown")), float(get("tpm_quota"))
        except ValueError as error:
            raise ValueError(f"context burndown and tpm_quota must be numbers: {error}") from None
        return cls(BedrockModel.from_id(get("model_id"), regions=regions), burndown, tpm_quota)
