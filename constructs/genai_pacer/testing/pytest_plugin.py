"""pytest fixtures for the emulator. Enable them in a conftest.py:

    pytest_plugins = ["genai_pacer.testing.pytest_plugin"]

    @pytest.fixture
    def bedrock_emulator_models():          # optional: override the models
        return [ModelSpec("us.anthropic.claude-3-5-haiku-20241022-v1:0", burndown=5, tpm_quota=20_000)]

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


@pytest.fixture
def bedrock_emulator_models() -> list[ModelSpec]:
    """The models the emulator serves; override this fixture to change them."""
    return [ModelSpec("us.amazon.nova-lite-v1:0", context_window=300_000),
            ModelSpec("us.anthropic.claude-3-5-haiku-20241022-v1:0", burndown=5)]


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
