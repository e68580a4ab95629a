"""The pytest plugin's fixtures as a user's test gets them, with no override: the models it serves by
default are current ones, led by the reference stacks' model (issue 37.7)."""

from __future__ import annotations

import pytest
from genai_pacer import BedrockModel
from genai_pacer.testing.pytest_plugin import DEFAULT_MODELS

from stacks.settings import CONTEXT_DEFAULTS


def test_the_default_models_lead_with_the_reference_stacks_model_and_none_is_retired():
    """Claude 3.5 Haiku, the old default, is past its Bedrock end of life: a test written against the
    default fixture exercised a model whose every call now fails."""
    ids = [model_id for model_id, _ in DEFAULT_MODELS]
    assert ids[0] == CONTEXT_DEFAULTS["model_id"][0] == "us.amazon.nova-2-lite-v1:0"
    assert [BedrockModel.from_id(model_id).retirement for model_id in ids] == [None] * len(ids)


def test_the_default_fixture_serves_nova_2_lite_at_burndown_1(bedrock_emulator):
    client = bedrock_emulator.client(retries={"total_max_attempts": 1})
    answer = client.converse(modelId="us.amazon.nova-2-lite-v1:0", inferenceConfig={"maxTokens": 50},
                             messages=[{"role": "user", "content": [{"text": "Say hello."}]}])
    assert answer["stopReason"] in ("end_turn", "max_tokens") and answer["usage"]["outputTokens"] > 0
    assert [spec.burndown for spec in bedrock_emulator.models.values()] == [1.0, 1.0]
    # the window is Nova 2 Lite's 1M tokens, not the emulator's default 200K
    assert bedrock_emulator.models["us.amazon.nova-2-lite-v1:0"].context_window == 1_000_000


def test_the_old_default_model_is_no_longer_served(bedrock_emulator):
    client = bedrock_emulator.client(retries={"total_max_attempts": 1})
    with pytest.raises(client.exceptions.ClientError) as error:
        client.converse(modelId="us.anthropic.claude-3-5-haiku-20241022-v1:0",
                        messages=[{"role": "user", "content": [{"text": "hi"}]}])
    assert error.value.response["Error"]["Code"] in ("ResourceNotFoundException", "ValidationException")
