"""Choices of the reference stacks, read from CDK context (`cdk synth -c model_id=...`).

Each setting has a documented default so `make synth` works with no context at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from genai_pacer import BedrockModel

from constructs import Construct

#: context key -> (default, meaning)
CONTEXT_DEFAULTS: dict[str, tuple[str, str]] = {
    "model_id": (
        # Amazon Nova Lite, through its US profile: a current model (Claude 3.5 Haiku, the default until
        # 0.2.0, reached its Bedrock end of life on 2026-06-19: genai_pacer.models.DEPRECATED_MODELS).
        "us.amazon.nova-lite-v1:0",
        "model or cross-Region inference profile id every reference stack calls",
    ),
    "model_regions": ("", "comma-separated Regions the profile routes to (default: by its prefix)"),
    "burndown": ("1", "quota tokens per output token of that model (1 for Nova Lite; 5 for the Claude models "
                      "planning.BURNDOWN_DOC lists)"),
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
