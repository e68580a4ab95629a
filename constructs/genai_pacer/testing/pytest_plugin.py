"""pytest fixtures for the emulator. Enable them in a conftest.py:

    pytest_plugins = ["genai_pacer.testing.pytest_plugin"]

    @pytest.fixture
    def bedrock_emulator_models():          # optional: override the models
        return [ModelSpec("us.amazon.nova-2-lite-v1:0", tpm_quota=20_000)]

    @pytest.fixture
    def bedrock_emulator_quota():           # optional: another quota algorithm
        return QuotaModel(window="token-bucket")

    def test_my_handler(bedrock_emulator):
        client = bedrock_emulator.client(retries={"total_max_attempts": 1})
        bedrock_emulator.fail_next("ThrottlingException", operation="Converse")
        ...
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .emulator import BedrockEmulator, ModelSpec
from .quota import QuotaModel

__all__ = ["DEFAULT_MODELS"]

#: (model id, context window in tokens) of each model the fixture serves unless overridden: Amazon Nova 2
#: Lite, the model the reference stacks and `make bench` call (stacks/settings.py; a test holds them
#: equal), and Amazon Nova Lite, both at burndown 1 (Amazon Nova models). The context windows are the
#: Bedrock model cards': 1M tokens for Nova 2 Lite (AWS's "Migrate from Amazon Nova 1 to Amazon Nova 2 on
#: Amazon Bedrock": "a context window that expands from 300K to 1M tokens";
#: https://docs.aws.amazon.com/bedrock/latest/userguide/model-card-amazon-nova-2-lite.html) and 300K for
#: Nova Lite (https://docs.aws.amazon.com/bedrock/latest/userguide/model-card-amazon-nova-lite.html).
#: Claude 3.5 Haiku, served by default before 0.2.0, is past its Bedrock end of life
#: (genai_pacer.models.DEPRECATED_MODELS): override the fixture to emulate it.
DEFAULT_MODELS: tuple[tuple[str, int], ...] = (
    ("us.amazon.nova-2-lite-v1:0", 1_000_000),
    ("us.amazon.nova-lite-v1:0", 300_000),
)


@pytest.fixture
def bedrock_emulator_models() -> list[ModelSpec]:
    """The models the emulator serves (DEFAULT_MODELS); override this fixture to change them."""
    return [ModelSpec(model_id, context_window=window) for model_id, window in DEFAULT_MODELS]


@pytest.fixture
def bedrock_emulator_time_scale() -> float:
    """How much faster than real time the emulator runs (override for slow-model tests)."""
    return 20.0


@pytest.fixture
def bedrock_emulator_quota() -> QuotaModel:
    """The quota algorithm (default: a sliding one-minute window, max_tokens reserved without burndown)."""
    return QuotaModel()


@pytest.fixture
def bedrock_emulator(bedrock_emulator_models, bedrock_emulator_time_scale, bedrock_emulator_quota) -> Iterator[BedrockEmulator]:
    """A running emulator on a free loopback port, stopped after the test."""
    with BedrockEmulator(bedrock_emulator_models, time_scale=bedrock_emulator_time_scale,
                         quota=bedrock_emulator_quota) as emulator:
        yield emulator
