"""pacer_runtime.sampling: presets, ranges checked before any call, and the temperature-and-topP warning."""

from __future__ import annotations

import logging

import boto3
import pytest
from botocore.stub import Stubber
from pacer_runtime import (
    EXTRACTION,
    VARIED,
    RequestError,
    Sampling,
    build_converse_request,
    converse,
    sampling,
)

HAIKU = "us.anthropic.claude-3-5-haiku-20241022-v1:0"


def test_extraction_is_temperature_zero_and_varied_a_moderate_temperature_only():
    assert EXTRACTION.inference_config(max_tokens=300) == {"maxTokens": 300, "temperature": 0.0}
    assert VARIED.inference_config(max_tokens=120) == {"maxTokens": 120, "temperature": 0.8}
    assert sampling.PRESETS == {"extraction": EXTRACTION, "varied": VARIED}
    assert EXTRACTION.top_p is None and VARIED.top_p is None  # neither preset moves both knobs


def test_a_preset_config_is_a_valid_converse_request(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    client = boto3.client("bedrock-runtime", region_name="us-east-1")
    config = EXTRACTION.with_(stop_sequences=["</json>"]).inference_config(max_tokens=400, model_id=HAIKU)
    request = build_converse_request(HAIKU, prompt="Extract the invoice fields", inference_config=config)
    reply = {"output": {"message": {"role": "assistant", "content": [{"text": "{}"}]}}, "stopReason": "end_turn",
             "usage": {"inputTokens": 10, "outputTokens": 2, "totalTokens": 12}, "metrics": {"latencyMs": 50}}
    with Stubber(client) as stub:  # botocore checks the request against the Converse API model
        stub.add_response("converse", reply, request)
        assert converse(client, request).text == "{}"
    assert request["inferenceConfig"] == {"maxTokens": 400, "temperature": 0.0, "stopSequences": ["</json>"]}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(temperature=1.5), r"temperature=1.5 is outside 0..1"),
        (dict(temperature=-0.1), r"temperature=-0.1 is outside 0..1"),
        (dict(temperature=float("nan")), r"temperature=nan must be a number from 0 to 1"),
        (dict(temperature=float("inf")), r"temperature=inf must be a number from 0 to 1"),
        (dict(temperature=True), r"temperature=True must be a number"),
        (dict(temperature="0.2"), r"temperature='0.2' must be a number"),
        (dict(top_p=1.01), r"topP=1.01 is outside 0..1"),
        (dict(top_p=-1), r"topP=-1 is outside 0..1"),
        (dict(top_p=None, temperature=None, stop_sequences="END"), r"stop_sequences must be a list of strings"),
        (dict(stop_sequences=[""]), r"stop_sequences must hold at most 2500 non-empty strings"),
        (dict(stop_sequences=["x"] * 2501), r"stop_sequences must hold at most 2500"),
        (dict(stop_sequences=[3]), r"stop_sequences must hold at most 2500 non-empty strings"),
    ],
)
def test_out_of_range_settings_raise_when_built(kwargs, message):
    with pytest.raises(RequestError, match=message):
        Sampling(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(max_tokens=0), r"maxTokens=0 must be a positive whole number"),
        (dict(max_tokens=-5), r"maxTokens=-5 must be a positive whole number"),
        (dict(max_tokens=1.5), r"maxTokens=1.5 must be a positive whole number"),
        (dict(max_tokens=None), r"maxTokens=None must be a positive whole number"),
        (dict(max_tokens=True), r"maxTokens=True must be a positive whole number"),
        # A known model's maximum, found through its cross-Region profile id.
        (dict(max_tokens=10_000, model_id=HAIKU), r"maxTokens=10,000 exceeds us\.anthropic\.claude-3-5-haiku.*8,192"),
        (dict(max_tokens=5_000, model_id="anthropic.claude-3-haiku-20240307-v1:0"), r"maximum output of 4,096"),
        # The caller's figure wins over the table, and is checked itself.
        (dict(max_tokens=2_000, model_id=HAIKU, model_max_tokens=1_000), r"maximum output of 1,000"),
        (dict(max_tokens=100, model_max_tokens=0), r"model_max_tokens=0 must be a positive whole number"),
    ],
)
def test_max_tokens_is_checked_against_the_models_maximum_where_known(kwargs, message):
    with pytest.raises(RequestError, match=message):
        EXTRACTION.inference_config(**kwargs)


def test_an_unknown_models_maximum_is_not_guessed():
    assert sampling.model_max_output_tokens("amazon.nova-lite-v1:0") is None
    assert EXTRACTION.inference_config(max_tokens=50_000, model_id="amazon.nova-lite-v1:0")["maxTokens"] == 50_000
    assert sampling.model_max_output_tokens(HAIKU) == 8_192


def test_both_knobs_away_from_one_logs_a_warning_one_knob_does_not(caplog):
    with caplog.at_level(logging.WARNING, logger="pacer_runtime.sampling"):
        Sampling(temperature=0.7)
        Sampling(temperature=0.2, top_p=1.0)  # topP at its widest is no change
        Sampling(top_p=0.9)
        assert caplog.records == []
        Sampling(temperature=0.7, top_p=0.9)
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert "temperature=0.7 and topP=0.9 are both set away from 1.0" in record.getMessage()
    assert "many providers advise changing one" in record.getMessage()


def test_with_rechecks_the_changed_settings():
    with pytest.raises(RequestError, match="temperature=2 is outside 0..1"):
        VARIED.with_(temperature=2)
    assert VARIED.with_(stop_sequences=("END",)).stop_sequences == ("END",)
