"""lambda/pacer_runtime: the client factory, Converse request building and the Converse call."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from pacer_runtime import RequestError, bedrock_client, build_converse_request, converse, is_throttle

MODEL = "us.amazon.nova-lite-v1:0"


@pytest.fixture
def client(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    return bedrock_client(region_name="us-east-1", max_pool_connections=40, max_attempts=3)


def test_client_pool_and_retries_are_sized(client):
    config = client.meta.config
    assert config.max_pool_connections == 40
    assert config.retries == {"total_max_attempts": 3, "mode": "standard"}  # the first call and 2 retries
    assert client.meta.service_model.service_name == "bedrock-runtime"


def test_client_rejects_a_pool_of_zero_and_no_attempts():
    with pytest.raises(ValueError, match="max_pool_connections=0 must be >= 1"):
        bedrock_client(max_pool_connections=0)
    with pytest.raises(ValueError, match="max_attempts=0 must be >= 1"):
        bedrock_client(max_attempts=0)


def test_parameters_go_where_converse_expects_them():
    request = build_converse_request(
        MODEL,
        prompt="Tag this article",
        system="You tag articles.",
        inference_config={"temperature": 0.1, "maxTokens": 600},
        additional_fields={"top_k": 40},
        latency="optimized",
    )
    assert request == {
        "modelId": MODEL,
        "messages": [{"role": "user", "content": [{"text": "Tag this article"}]}],
        "system": [{"text": "You tag articles."}],
        "inferenceConfig": {"temperature": 0.1, "maxTokens": 600},
        "additionalModelRequestFields": {"top_k": 40},
        "performanceConfig": {"latency": "optimized"},
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(), "exactly one of prompt"),
        (dict(prompt="a", messages=[{"role": "user"}]), "exactly one of prompt"),
        (dict(prompt="   "), "prompt must be a non-empty string"),
        (dict(messages=[]), "messages must be a non-empty list"),
        (
            dict(prompt="a", inference_config={"top_k": 5}),
            "put model-specific parameters such as top_k in additionalModelRequestFields",
        ),
        (dict(prompt="a", inference_config={"maxTokens": 0}), "maxTokens=0 must be a positive integer"),
        (dict(prompt="a", latency="fast"), "latency='fast' must be 'standard' or 'optimized'"),
        (dict(prompt="a", system=""), "system must be a non-empty string"),
    ],
)
def test_misplaced_or_missing_parameters_are_request_errors(kwargs, message):
    with pytest.raises(RequestError, match=message):
        build_converse_request(MODEL, **kwargs)


def converse_response(text="Hello", served="standard"):
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 12, "outputTokens": 3, "totalTokens": 15, "cacheReadInputTokens": 4},
        "metrics": {"latencyMs": 321},
        "performanceConfig": {"latency": served},
    }


def test_converse_returns_text_usage_and_the_mode_that_served_it(client):
    request = build_converse_request(MODEL, prompt="Hi", latency="optimized")
    with Stubber(client) as stub:
        stub.add_response("converse", converse_response(served="standard"), request)
        result = converse(client, request)
    assert (result.text, result.input_tokens, result.output_tokens, result.cache_read_tokens) == (
        "Hello",
        12,
        3,
        4,
    )
    assert result.service_latency_ms == 321 and result.stop_reason == "end_turn"
    assert result.served_latency == "standard"  # asked for optimized, quota fell back: visible, not an error


def test_throttles_are_recognized(client):
    request = build_converse_request(MODEL, prompt="Hi")
    with Stubber(client) as stub:
        stub.add_client_error("converse", "ThrottlingException", "Too many tokens", 429)
        with pytest.raises(ClientError) as caught:
            converse(client, request)
    assert is_throttle(caught.value)
    validation = ClientError({"Error": {"Code": "ValidationException", "Message": "bad"}}, "Converse")
    assert not is_throttle(validation)
    assert not is_throttle(ValueError("x"))


def test_a_session_can_be_supplied(monkeypatch):
    session = boto3.session.Session(aws_access_key_id="a", aws_secret_access_key="b", region_name="eu-west-1")
    assert bedrock_client(session=session).meta.region_name == "eu-west-1"
