"""The emulator, driven by real boto3 clients: wire protocol, quota accounting, latency modes, faults."""

from __future__ import annotations

import base64
import json

import pytest
from botocore.exceptions import ClientError, EventStreamError
from genai_pacer import planning
from genai_pacer.testing import (
    ANSWER_TOKENS_KEY,
    BedrockEmulator,
    LatencyOptimized,
    ModelSpec,
    approx_tokens,
)
from pacer_runtime import converse_stream, is_throttle

HAIKU = "us.anthropic.claude-3-5-haiku-20241022-v1:0"
NOVA = "us.amazon.nova-lite-v1:0"
PROMPT = "Summarize the reviews: " + "the battery lasts two days and charges fast. " * 20


@pytest.fixture
def bedrock_emulator_models():
    return [
        ModelSpec(HAIKU, burndown=5, tpm_quota=400_000, latency_optimized=LatencyOptimized(tpm_quota=3_000)),
        ModelSpec(NOVA, tpm_quota=5_000, max_output_tokens=4_000),
    ]


@pytest.fixture
def client(bedrock_emulator):
    return bedrock_emulator.client(retries={"total_max_attempts": 1})


def ask(prompt=PROMPT, *, model=HAIKU, max_tokens=600, answer=120, **extra):
    request = {
        "modelId": model,
        "messages": [{"role": "user", "content": [{"text": prompt}]}],
        "inferenceConfig": {"maxTokens": max_tokens},
        "requestMetadata": {ANSWER_TOKENS_KEY: str(answer)},
    }
    return request | extra


def error_of(excinfo) -> tuple[str, int]:
    response = excinfo.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


def test_converse_round_trip_reports_text_usage_metrics_and_mode(client):
    response = client.converse(**ask())
    text = response["output"]["message"]["content"][0]["text"]
    assert response["usage"]["inputTokens"] == approx_tokens(PROMPT)
    assert response["usage"]["outputTokens"] == 120 == approx_tokens(text)  # the answer re-counts to its usage
    assert response["stopReason"] == "end_turn"
    assert response["performanceConfig"] == {"latency": "standard"}
    # Model-time latency: TTFT 0.5 s + prompt/8000 tokens/s, 120 tokens at about 60 tokens/s.
    assert 1_500 < response["metrics"]["latencyMs"] < 4_500


def test_answer_is_cut_at_max_tokens(client):
    response = client.converse(**ask(max_tokens=50, answer=400))
    assert response["usage"]["outputTokens"] == 50
    assert response["stopReason"] == "max_tokens"


def test_converse_stream_sends_the_event_sequence_with_metadata(client):
    response = client.converse_stream(**ask(answer=80))
    events = list(response["stream"])
    kinds = [next(iter(event)) for event in events]
    assert kinds[0] == "messageStart" and kinds[-3:] == ["contentBlockStop", "messageStop", "metadata"]
    assert set(kinds[1:-3]) == {"contentBlockDelta"} and len(kinds) > 5  # paced in several deltas
    text = "".join(e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e)
    metadata = events[-1]["metadata"]
    assert metadata["usage"]["outputTokens"] == 80 == approx_tokens(text)
    assert metadata["performanceConfig"] == {"latency": "standard"}
    assert metadata["metrics"]["latencyMs"] > 0


def test_runtime_converse_stream_times_the_first_token(bedrock_emulator, client):
    result = converse_stream(client, ask(answer=80))
    assert result.output_tokens == 80 and result.stop_reason == "end_turn"
    assert 0 < result.first_token_ms < result.latency_ms
    assert result.output_tokens_per_second > 0
    assert 300 < bedrock_emulator.invocations[-1].ttft_ms < 900  # 0.5 s + 231 tokens / 8,000 per s, jittered


def test_invoke_model_speaks_the_anthropic_body_and_headers(client):
    body = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 250,
            "messages": [{"role": "user", "content": PROMPT}]}
    response = client.invoke_model(modelId=HAIKU, body=json.dumps(body))
    answer = json.loads(response["body"].read())
    assert answer["type"] == "message" and answer["content"][0]["type"] == "text"
    assert answer["usage"]["input_tokens"] == approx_tokens(PROMPT)
    assert answer["usage"]["output_tokens"] == 250 and answer["stop_reason"] == "max_tokens"  # default answer 300
    headers = response["ResponseMetadata"]["HTTPHeaders"]
    assert headers["x-amzn-bedrock-output-token-count"] == "250"
    assert response["performanceConfigLatency"] == "standard"


def test_invoke_model_without_max_tokens_is_refused_for_anthropic(client):
    with pytest.raises(ClientError) as excinfo:
        client.invoke_model(modelId=HAIKU, body=json.dumps({"messages": [{"role": "user", "content": "hi"}]}))
    assert error_of(excinfo) == ("ValidationException", 400)


def test_invoke_model_with_response_stream_sends_chunks_and_invocation_metrics(client):
    body = {"messages": [{"role": "user", "content": [{"text": "hello"}]}], "inferenceConfig": {"maxTokens": 40}}
    response = client.invoke_model_with_response_stream(
        modelId=NOVA, body=json.dumps(body), requestMetadata=json.dumps({ANSWER_TOKENS_KEY: "30"})
    )
    chunks = [json.loads(event["chunk"]["bytes"]) for event in response["body"]]
    assert "messageStart" in chunks[0]
    metrics = chunks[-1]["amazon-bedrock-invocationMetrics"]
    assert metrics["outputTokenCount"] == 30 and metrics["firstByteLatency"] > 0
    streamed = "".join(c["contentBlockDelta"]["delta"]["text"] for c in chunks if "contentBlockDelta" in c)
    assert approx_tokens(streamed) == 30


def test_a_reservation_above_the_quota_is_throttled_with_the_service_error_shape(bedrock_emulator, client):
    # NOVA's quota is 5,000 TPM: 2,000 input tokens + max_tokens 3,500 cannot be reserved.
    with pytest.raises(ClientError) as excinfo:
        client.converse(**ask("x" * 8_000, model=NOVA, max_tokens=3_500))
    assert error_of(excinfo) == ("ThrottlingException", 429)
    assert "Too many tokens" in excinfo.value.response["Error"]["Message"]
    assert is_throttle(excinfo.value)
    throttled = bedrock_emulator.invocations[-1]
    assert (throttled.outcome, throttled.reserved, throttled.settled) == ("throttled", 5_500, 0)
    assert bedrock_emulator.quota_used(NOVA) == 0  # a throttled request charges nothing


def test_settlement_matches_the_planner_for_the_same_request(bedrock_emulator, client):
    response = client.converse(**ask(max_tokens=600, answer=120))
    usage = response["usage"]
    expected = planning.TokenProfile(
        input_tokens=usage["inputTokens"], output_tokens=usage["outputTokens"], max_tokens=600, burndown=5
    )
    invocation = bedrock_emulator.invocations[-1]
    assert invocation.reserved == expected.reserved  # input + max_tokens at start
    assert invocation.settled == expected.settled  # input + 120 x 5 at completion
    assert bedrock_emulator.quota_used(HAIKU) == expected.settled  # the window now holds the settled charge


def test_unset_max_tokens_reserves_the_model_maximum(bedrock_emulator, client):
    client.converse(modelId=NOVA, messages=[{"role": "user", "content": [{"text": "hi"}]}],
                    requestMetadata={ANSWER_TOKENS_KEY: "10"})
    assert bedrock_emulator.invocations[-1].reserved == approx_tokens("hi") + 4_000


def test_a_request_in_flight_holds_its_reservation():
    """While one stream is open its reservation counts; a second that would not fit is throttled."""
    # time_scale 5: the 2,000-token answer streams for about 7 s inside a 12 s window.
    with BedrockEmulator([ModelSpec(NOVA, tpm_quota=5_000)], time_scale=5) as emulator:
        client = emulator.client(retries={"total_max_attempts": 1})
        stream = client.converse_stream(**ask("hi", model=NOVA, max_tokens=3_000, answer=2_000))["stream"]
        next(iter(stream))  # the first event: the request is admitted and in flight
        assert emulator.quota_used(NOVA) == approx_tokens("hi") + 3_000
        with pytest.raises(ClientError) as excinfo:
            client.converse(**ask("hi", model=NOVA, max_tokens=3_000))
        stream.close()
    assert error_of(excinfo)[0] == "ThrottlingException"


def test_prompt_cache_reads_are_free_and_writes_are_charged(bedrock_emulator, client):
    system = [{"text": "You answer questions about the catalog. " * 30}, {"cachePoint": {"type": "default"}}]
    request = ask("Which phone lasts longest?", answer=20) | {"system": system}
    first = client.converse(**request)["usage"]
    second = client.converse(**request)["usage"]
    cached = approx_tokens(system[0]["text"])
    assert (first["cacheWriteInputTokens"], first["cacheReadInputTokens"]) == (cached, 0)
    assert (second["cacheWriteInputTokens"], second["cacheReadInputTokens"]) == (0, cached)
    read = bedrock_emulator.invocations[-1]
    profile = planning.TokenProfile(input_tokens=read.input_tokens, output_tokens=20, max_tokens=600, burndown=5,
                                    cache_read_tokens=cached)
    assert (read.reserved, read.settled) == (profile.reserved, profile.settled)  # reads reserved, never settled


def test_rpm_quota_throttles_the_request_past_the_limit():
    with BedrockEmulator([ModelSpec(NOVA, rpm_quota=2)], time_scale=50) as emulator:
        client = emulator.client(retries={"total_max_attempts": 1})
        for _ in range(2):
            client.converse(**ask("hi", model=NOVA, answer=5))
        with pytest.raises(ClientError) as excinfo:
            client.converse(**ask("hi", model=NOVA, answer=5))
    assert error_of(excinfo) == ("ThrottlingException", 429)
    assert "Too many requests" in excinfo.value.response["Error"]["Message"]


def test_the_quota_window_frees_after_a_scaled_minute():
    import time

    with BedrockEmulator([ModelSpec(NOVA, tpm_quota=1_000)], time_scale=60) as emulator:  # a 1 s window
        client = emulator.client(retries={"total_max_attempts": 1})
        client.converse(**ask("hi", model=NOVA, max_tokens=900, answer=200))  # settles at 201, in about 0.06 s
        with pytest.raises(ClientError):
            client.converse(**ask("hi", model=NOVA, max_tokens=900, answer=5))  # 201 + 901 > 1,000
        time.sleep(1.1)
        client.converse(**ask("hi", model=NOVA, max_tokens=900, answer=5))
    assert [i.outcome for i in emulator.invocations] == ["ok", "throttled", "ok"]


def test_optimized_mode_falls_back_to_standard_silently_when_its_quota_is_full(bedrock_emulator, client):
    optimized = {"performanceConfig": {"latency": "optimized"}}
    first = client.converse(**ask("hi", max_tokens=2_000, answer=500) | optimized)  # settles at 1 + 500 x 5
    second = client.converse(**ask("hi", max_tokens=2_000, answer=10) | optimized)  # 2,501 + 2,001 > 3,000
    assert first["performanceConfig"] == {"latency": "optimized"}
    assert second["performanceConfig"] == {"latency": "standard"}  # served, no error
    assert [(i.requested_latency, i.served_latency) for i in bedrock_emulator.invocations] == [
        ("optimized", "optimized"), ("optimized", "standard")]
    assert bedrock_emulator.quota_used(HAIKU, "standard") == bedrock_emulator.invocations[-1].settled


def test_in_stream_exception_arrives_as_the_service_sends_it(bedrock_emulator, client):
    bedrock_emulator.fail_next("ThrottlingException", after_tokens=5)
    response = client.converse_stream(**ask(answer=50))
    received = []
    with pytest.raises(EventStreamError) as excinfo:
        for event in response["stream"]:
            received.append(next(iter(event)))
    assert excinfo.value.response["Error"]["Code"] == "throttlingException"  # camelCase inside a stream
    assert is_throttle(excinfo.value)
    assert received[0] == "messageStart" and "contentBlockDelta" in received
    invocation = bedrock_emulator.invocations[-1]
    assert invocation.output_tokens == 5 and invocation.settled == invocation.input_tokens + 5 * 5


def test_injected_service_unavailable_is_a_503(bedrock_emulator, client):
    bedrock_emulator.fail_next("ServiceUnavailableException", model_id=HAIKU)
    with pytest.raises(ClientError) as excinfo:
        client.converse(**ask())
    assert error_of(excinfo) == ("ServiceUnavailableException", 503)
    client.converse(**ask())  # only the next request failed


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (ask(model="anthropic.unknown-v9:0"), "model identifier is invalid"),
        (ask(max_tokens=9_000), "exceeds the model's maximum output of 8192"),
        (ask() | {"performanceConfig": {"latency": "fastest"}}, "not standard or optimized"),
        (ask() | {"requestMetadata": {ANSWER_TOKENS_KEY: "many"}}, "whole number of tokens"),
    ],
)
def test_bad_requests_get_validation_exceptions(client, request_, message):
    with pytest.raises(ClientError) as excinfo:
        client.converse(**request_)
    assert error_of(excinfo) == ("ValidationException", 400)
    assert message in excinfo.value.response["Error"]["Message"]


def test_same_seed_same_answers_and_latencies_different_seed_different():
    def run(seed):
        with BedrockEmulator([ModelSpec(NOVA)], seed=seed, time_scale=100) as emulator:
            response = emulator.client().converse(**ask(model=NOVA, answer=30))
        return response["output"]["message"]["content"][0]["text"], response["metrics"]["latencyMs"]

    assert run(1) == run(1)
    assert run(1) != run(2)


def test_the_model_arn_of_a_profile_reaches_the_same_model(client):
    arn = f"arn:aws:bedrock:us-east-1:111122223333:inference-profile/{HAIKU}"
    assert client.converse(**ask(model=arn, answer=5))["usage"]["outputTokens"] == 5


def test_event_stream_frames_carry_valid_crcs():
    from botocore.eventstream import EventStreamBuffer
    from genai_pacer.testing import eventstream

    buffer = EventStreamBuffer()
    buffer.add_data(eventstream.event("chunk", {"bytes": base64.b64encode(b"{}").decode()}))
    buffer.add_data(eventstream.exception("throttlingException", "slow down"))
    messages = list(buffer)  # botocore checks both CRCs of each frame while parsing
    assert [m.headers[":message-type"] for m in messages] == ["event", "exception"]
    assert messages[1].headers[":exception-type"] == "throttlingException"
    assert json.loads(messages[1].payload) == {"message": "slow down"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tpm_quota": 0}, "tpm_quota=0 must be > 0"),
        ({"burndown": 0.5}, "burndown=0.5 must be >= 1"),
        ({"rpm_quota": 0}, "rpm_quota=0 must be >= 1"),
        ({"answer_tokens": 0}, "answer_tokens=0 must be >= 1"),
    ],
)
def test_model_spec_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ModelSpec(NOVA, **kwargs)


def test_emulator_rejects_a_bad_time_scale_and_unknown_fault():
    with pytest.raises(ValueError, match="time_scale=0 must be > 0"):
        BedrockEmulator(time_scale=0)
    with pytest.raises(ValueError, match="error_type='Nope'"):
        BedrockEmulator().fail_next("Nope")
    with pytest.raises(RuntimeError, match="not running"):
        BedrockEmulator().endpoint_url  # noqa: B018


def test_the_command_line_emulator_serves_boto3(tmp_path):
    import os
    import subprocess
    import sys

    import boto3
    from genai_pacer.testing import emulator as module

    root = module.__file__.rsplit("/genai_pacer/", 1)[0]
    env = os.environ | {"PYTHONPATH": root, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "genai_pacer.testing.cli", "emulator", "--port", "0", "--model-id", NOVA,
         "--time-scale", "50", "--tpm", "1000"],
        stdout=subprocess.PIPE, text=True, env=env,
    )
    try:
        first = process.stdout.readline()
        endpoint = first.split(" at ")[1].split()[0]
        client = boto3.client("bedrock-runtime", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id="x", aws_secret_access_key="x")
        response = client.converse(**ask("hi", model=NOVA, max_tokens=100, answer=7))
        assert response["usage"]["outputTokens"] == 7
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_answer_length_can_be_a_function_of_the_prompt():
    spec = ModelSpec(NOVA, answer_tokens=lambda prompt: 2 * len(prompt.split()))
    with BedrockEmulator([spec], time_scale=50) as emulator:
        response = emulator.client().converse(
            modelId=NOVA, messages=[{"role": "user", "content": [{"text": "one two three"}]}])
    assert response["usage"]["outputTokens"] == 6


def test_an_unknown_path_is_a_404_not_a_hang(bedrock_emulator):
    import urllib.error
    import urllib.request

    request = urllib.request.Request(bedrock_emulator.endpoint_url + "/guardrail/x/apply", data=b"{}")
    with pytest.raises(urllib.error.HTTPError) as excinfo:
        urllib.request.urlopen(request)
    assert excinfo.value.code == 404 and "no bedrock-runtime operation" in excinfo.value.read().decode()


def test_a_negative_connection_setup_is_refused():
    with pytest.raises(ValueError, match="connection_setup_seconds=-1 must be >= 0"):
        BedrockEmulator(connection_setup_seconds=-1)
