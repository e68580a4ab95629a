"""pytest fixtures for the emulator. Enable them in a conftest.py:

    pytest_plugins = ["genai_pacer.testing.pytest_plugin"]

    @pytest.fixture
    def bedrock_emulator_models():          # optional: override the models
        return [ModelSpec("us.anthropic.claude-3-5-haiku-20241022-v1:0", burndown=5, tpm_quota=20_000)]

    def test_my_handler(bedrock_emulator):
        client = bedrock_emulator.client(retries={"total_max_attempts": 1})
        ...
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .emulator import BedrockEmulator, ModelSpec


@pytest.fixture
def bedrock_emulator_models() -> list[ModelSpec]:
    """The models the emulator serves; override this fixture to change them."""
    return [ModelSpec("us.amazon.nova-lite-v1:0"), ModelSpec("us.anthropic.claude-3-5-haiku-20241022-v1:0", burndown=5)]


@pytest.fixture
def bedrock_emulator_time_scale() -> float:
    """How much faster than real time the emulator runs (override for slow-model tests)."""
    return 20.0


@pytest.fixture
def bedrock_emulator(bedrock_emulator_models, bedrock_emulator_time_scale) -> Iterator[BedrockEmulator]:
    """A running emulator on a free loopback port, stopped after the test."""
    with BedrockEmulator(bedrock_emulator_models, time_scale=bedrock_emulator_time_scale) as emulator:
        yield emulator
