"""The emulator, driven by real boto3 clients: wire protocol, validation, quota accounting, latency
modes and tiers, faults, native bodies, CountTokens, and the HTTP limits (raw sockets where botocore
would refuse to send)."""

from __future__ import annotations

import base64
import json
import math
import socket
import subprocess
import sys
from urllib.parse import urlsplit

import botocore.session
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EventStreamError
from genai_pacer import InvalidPropsError, planning
from genai_pacer.testing import (
    ANSWER_TOKENS_KEY,
    EMULATED_OPERATIONS,
    INSTALL_HINT,
    BedrockEmulator,
    LatencyOptimized,
    ManualClock,
    ModelSpec,
    QuotaModel,
    TierLatency,
    _servicemodel,
    approx_tokens,
    specs,
)
from pacer_runtime import converse_stream, is_throttle

HAIKU = "us.anthropic.claude-3-5-haiku-20241022-v1:0"
NOVA = "us.amazon.nova-lite-v1:0"
LLAMA = "meta.llama3-1-8b-instruct-v1:0"
PROMPT = "Summarize the reviews: " + "the battery lasts two days and charges fast. " * 20
SERVICE = botocore.session.get_session().get_service_model("bedrock-runtime")


@pytest.fixture
def bedrock_emulator_models():
    return [
        ModelSpec(HAIKU, burndown=5, tpm_quota=400_000, latency_optimized=LatencyOptimized(tpm_quota=3_000),
                  application_profiles=("a1b2c3d4e5f6",)),
        ModelSpec(NOVA, tpm_quota=5_000, max_output_tokens=4_000),
        ModelSpec(LLAMA, max_output_tokens=2_048, context_window=128_000),
        ModelSpec("mistral.mistral-large-2407-v1:0"),
    ]


@pytest.fixture
def client(bedrock_emulator):
    return bedrock_emulator.client(retries={"total_max_attempts": 1})


@pytest.fixture
def unchecked(bedrock_emulator):
    """A client that sends what botocore would refuse, as Step Functions and other SDKs do."""
    return bedrock_emulator.client(retries={"total_max_attempts": 1}, parameter_validation=False)


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


# ---- wire protocol and quota ------------------------------------------------------------------


def test_converse_round_trip_reports_text_usage_metrics_and_mode(bedrock_emulator, client):
    response = client.converse(**ask())
    text = response["output"]["message"]["content"][0]["text"]
    assert response["usage"]["inputTokens"] == approx_tokens(PROMPT)
    assert response["usage"]["outputTokens"] == 120 == approx_tokens(text)  # the answer re-counts to its usage
    assert response["stopReason"] == "end_turn"
    assert response["performanceConfig"] == {"latency": "standard"}
    assert "serviceTier" not in response  # echoed only when requested
    # Model-time latency: TTFT 0.5 s + prompt/8000 tokens/s, 120 tokens at about 60 tokens/s.
    assert 1_500 < response["metrics"]["latencyMs"] < 4_500
    assert bedrock_emulator.invocations[-1].operation == "Converse"  # botocore's operation names


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


def test_runtime_converse_stream_times_the_first_token(client):
    result = converse_stream(client, ask(answer=80))
    assert result.output_tokens == 80 and result.stop_reason == "end_turn"
    assert 0 < result.first_token_ms < result.latency_ms
    assert result.output_tokens_per_second > 0


def test_the_emulators_first_token_time_is_the_models_prefill(bedrock_emulator_models):
    """Model time on a ManualClock: on the wall clock (x20) a 2 ms late wake-up on a loaded machine is
    40 model ms, and the bound failed at 902 ms once; the figure itself does not depend on the machine."""
    with BedrockEmulator(bedrock_emulator_models, clock=ManualClock(instant=True)) as emulator:
        converse_stream(emulator.client(retries={"total_max_attempts": 1}), ask(answer=80))
    assert 300 < emulator.invocations[-1].ttft_ms < 900  # 0.5 s + 231 tokens / 8,000 per s, jittered


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


def test_a_client_finds_the_record_of_its_own_call_by_request_id(bedrock_emulator, client):
    """Among concurrent calls the records' order is the emulator's, not the client's: the response's
    RequestId (a success's, a stream's or a throttle's) names the one record that is that call's."""
    answered = client.converse(**ask(answer=30))
    streamed = client.converse_stream(**ask(answer=40))
    list(streamed["stream"])
    with pytest.raises(ClientError) as excinfo:
        client.converse(**ask("x" * 8_000, model=NOVA, max_tokens=3_500))
    ids = [r["ResponseMetadata"]["RequestId"] for r in (answered, streamed, excinfo.value.response)]
    records = {i.request_id: i for i in bedrock_emulator.invocations}
    assert len(set(ids)) == 3 and all(ids)
    assert [(records[i].operation, records[i].output_tokens, records[i].outcome) for i in ids] == [
        ("Converse", 30, "ok"), ("ConverseStream", 40, "ok"), ("Converse", 0, "throttled")]


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


def test_same_seed_same_answers_and_latencies_different_seed_different():
    def run(seed):
        with BedrockEmulator([ModelSpec(NOVA)], seed=seed, time_scale=100) as emulator:
            response = emulator.client().converse(**ask(model=NOVA, answer=30))
        return response["output"]["message"]["content"][0]["text"], response["metrics"]["latencyMs"]

    assert run(1) == run(1)
    assert run(1) != run(2)


def test_answer_length_can_be_a_function_of_the_prompt():
    spec = ModelSpec(NOVA, answer_tokens=lambda prompt: 2 * len(prompt.split()))
    with BedrockEmulator([spec], time_scale=50) as emulator:
        response = emulator.client().converse(
            modelId=NOVA, messages=[{"role": "user", "content": [{"text": "one two three"}]}])
    assert response["usage"]["outputTokens"] == 6


# ---- the quota models ------------------------------------------------------------------------


def test_sliding_window_frees_a_charge_one_minute_after_its_request_started():
    ledger = QuotaModel().ledger(1_000, None)
    charge = ledger.reserve(600, now=0.0)
    ledger.settle(charge, 400, now=5.0)
    assert ledger.reserve(700, now=59.9) == "tokens"  # 400 + 700 > 1,000
    assert ledger.used(59.9) == 400
    assert not isinstance(ledger.reserve(700, now=60.0), str)  # the first charge left the window
    assert ledger.used(60.0) == 700


def test_clock_minute_window_is_whole_again_at_each_minute():
    ledger = QuotaModel(window="clock-minute").ledger(1_000, 2)
    ledger.reserve(600, now=59.0)
    assert ledger.reserve(500, now=59.5) == "tokens"
    assert not isinstance(ledger.reserve(900, now=60.5), str)  # a new minute, although 1.5 s later
    ledger.reserve(50, now=61.0)
    assert ledger.reserve(10, now=61.5) == "requests"  # the RPM quota counts the same minute


def test_token_bucket_refills_continuously_and_refunds_at_settlement():
    ledger = QuotaModel(window="token-bucket").ledger(1_200, None)  # refills 20 tokens per second
    charge = ledger.reserve(1_000, now=0.0)
    assert ledger.reserve(300, now=0.0) == "tokens"
    assert not isinstance(ledger.reserve(300, now=5.0), str)  # 200 + 5 x 20 = 300
    ledger.settle(charge, 400, now=5.0)  # 600 of the 1,000 come back
    assert ledger.used(5.0) == 600  # 1,200 - (200 + 100 refilled - 300 + 600 refunded)
    over = ledger.reserve(100, now=5.0)
    ledger.settle(over, 1_000, now=5.0)  # a settlement above its reservation takes the excess
    assert ledger.used(5.0) == 1_600 and ledger.reserve(1, now=5.0) == "tokens"  # the bucket is 400 below empty
    assert not isinstance(ledger.reserve(1, now=26.0), str)  # 21 s x 20 = 420 refilled


def test_token_bucket_rpm_counts_requests():
    ledger = QuotaModel(window="token-bucket").ledger(1_000_000, 60)  # one request per second
    for _ in range(60):
        assert not isinstance(ledger.reserve(1, now=0.0), str)
    assert ledger.reserve(1, now=0.5) == "requests"
    assert not isinstance(ledger.reserve(1, now=1.0), str)


def test_reservation_with_or_without_burndown_on_max_tokens():
    assert QuotaModel().reservation(2_500, 6_000, 5) == 8_500  # the reference notes' worked example
    assert QuotaModel(reserve_output_with_burndown=True).reservation(2_500, 6_000, 5) == 32_500


def test_the_emulator_reserves_with_burndown_when_its_quota_model_says_so():
    spec = ModelSpec(HAIKU, burndown=5, tpm_quota=30_000)
    with BedrockEmulator([spec], quota=QuotaModel(reserve_output_with_burndown=True), time_scale=50) as emulator:
        emulator.client().converse(**ask("hi", max_tokens=400, answer=10))
        with pytest.raises(ClientError) as excinfo:  # 1 + 8,000 x 5 > 30,000, although 8,001 would fit
            emulator.client(retries={"total_max_attempts": 1}).converse(**ask("hi", max_tokens=8_000, answer=10))
    assert emulator.invocations[0].reserved == 1 + 400 * 5
    assert error_of(excinfo)[0] == "ThrottlingException"


def test_the_token_bucket_emulator_throttles_what_the_bucket_cannot_hold():
    with BedrockEmulator([ModelSpec(NOVA, tpm_quota=5_000)], quota=QuotaModel(window="token-bucket")) as emulator:
        client = emulator.client(retries={"total_max_attempts": 1})
        client.converse(**ask("hi", model=NOVA, max_tokens=3_000, answer=1))  # refunds all but 2 tokens
        stream = client.converse_stream(**ask("hi", model=NOVA, max_tokens=3_000, answer=2_000))["stream"]
        next(iter(stream))  # holds 3,001 of the 5,000
        with pytest.raises(ClientError) as excinfo:
            client.converse(**ask("hi", model=NOVA, max_tokens=3_000))
        stream.close()
    assert error_of(excinfo)[0] == "ThrottlingException"


# ---- validation as Bedrock does it --------------------------------------------------------------

USER = {"role": "user", "content": [{"text": "hi"}]}
ASSISTANT = {"role": "assistant", "content": [{"text": "hello"}]}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"messages": [ASSISTANT, USER]}, "A conversation must start with a user message. Try again with a conversation that starts with a user message."),
        ({"messages": [USER, USER]}, "A conversation must alternate between user and assistant roles."),
        ({"messages": [{"role": "user", "content": []}]}, "The content field in the Message object at messages.0 is empty."),
        ({"messages": [{"role": "user", "content": "hi"}]}, "at 'messages.0.content' failed to satisfy constraint: Member must be a list"),
        ({"messages": [{"role": "user"}]}, "at 'messages.0.content' failed to satisfy constraint: Member must not be null"),
        ({"messages": [{"role": "system", "content": [{"text": "hi"}]}]}, "Member must satisfy enum value set: [user, assistant]"),
        ({"messages": [{"role": "user", "content": [{"text": "  "}]}]}, "The text field in the ContentBlock object at messages.0.content.0 is blank."),
        ({"messages": []}, "A conversation must start with a user message."),
        ({"system": "You are terse."}, "at 'system' failed to satisfy constraint: Member must be a list"),
        ({"inferenceConfig": {"temperature": "hot"}}, "at 'inferenceConfig.temperature' failed to satisfy constraint: Member must be a number"),
        ({"inferenceConfig": {"temperature": 1.5}}, "Member must have value less than or equal to 1"),
        ({"inferenceConfig": {"topP": -0.1}}, "Member must have value greater than or equal to 0"),
        ({"inferenceConfig": {"maxTokens": "many"}}, "at 'inferenceConfig.maxTokens' failed to satisfy constraint: Member must be an integer"),
        ({"inferenceConfig": {"maxTokens": 0}}, "Member must have value greater than or equal to 1"),
        ({"inferenceConfig": {"maxTokens": 9_000}}, "The maximum tokens you requested exceeds the model limit of 8192. Try again with a maximum tokens value that is lower than 8192."),
        ({"inferenceConfig": {"stopSequences": [1]}}, "at 'inferenceConfig.stopSequences.0' failed to satisfy constraint: Member must be a string"),
        ({"inferenceConfig": "fast"}, "at 'inferenceConfig' failed to satisfy constraint: Member must be a structure"),
        ({"performanceConfig": "optimized"}, "at 'performanceConfig' failed to satisfy constraint: Member must be a structure"),
        ({"performanceConfig": {"latency": "fastest"}}, "Value 'fastest' at 'performanceConfig.latency' failed to satisfy constraint: Member must satisfy enum value set: [standard, optimized]"),
        ({"serviceTier": "priority"}, "at 'serviceTier' failed to satisfy constraint: Member must be a structure"),
        ({"serviceTier": {"type": "turbo"}}, "Member must satisfy enum value set: [priority, default, flex, reserved]"),
        ({"requestMetadata": {ANSWER_TOKENS_KEY: "many"}}, "whole number of tokens"),
        ({"requestMetadata": {"team": 7}}, "at 'requestMetadata.team' failed to satisfy constraint: Member must be a string"),
        ({"additionalModelRequestFields": ["top_k"]}, "at 'additionalModelRequestFields' failed to satisfy constraint"),
        ({"modelId": "anthropic.unknown-v9:0"}, "The provided model identifier is invalid."),
        ({"messages": [{"role": "user", "content": [{"text": "x" * 10_000_000}]}]},
         "The model returned the following errors: Input is too long for requested model."),  # a 10 MB prompt
    ],
)
def test_bad_converse_requests_get_bedrocks_validation_exceptions(bedrock_emulator, changes, message):
    """Sent unvalidated, as Step Functions does: a 400 ValidationException, never a retryable 500. A boto3
    client with retries on sends each once; what botocore cannot even serialize goes as raw HTTP."""
    request = {"modelId": HAIKU, "messages": [USER]} | changes
    client = bedrock_emulator.client(retries={"total_max_attempts": 3}, parameter_validation=False)
    for operation, call in (("converse", client.converse), ("converse-stream", client.converse_stream)):
        try:
            with pytest.raises(ClientError) as excinfo:
                call(**request)
            code, text = error_of(excinfo), excinfo.value.response["Error"]["Message"]
        except (AttributeError, TypeError):  # botocore's serializer cannot write a string as a structure or list
            body = {k: v for k, v in request.items() if k != "modelId"}
            status, headers, payload = raw_request(bedrock_emulator, "POST", f"/model/{request['modelId']}/{operation}",
                                                   json.dumps(body).encode())
            code, text = (headers["x-amzn-errortype"].split(":")[0], status), json.loads(payload)["message"]
        assert code == ("ValidationException", 400)
        assert message in text
    assert [i.outcome for i in bedrock_emulator.invocations] == ["ValidationException"] * 2  # each sent once


def test_a_valid_multi_turn_conversation_with_every_checked_field_is_served(unchecked):
    messages = [USER, ASSISTANT, {"role": "user", "content": [{"text": "and then?"}, {"cachePoint": {"type": "default"}}]}]
    response = unchecked.converse(modelId=HAIKU, messages=messages, system=[{"text": "Be brief."}],
                                  inferenceConfig={"temperature": 1, "topP": 0, "stopSequences": ["END"]},
                                  additionalModelRequestFields={"top_k": 5})
    assert response["stopReason"] == "end_turn"


def test_the_context_window_is_per_model():
    with BedrockEmulator([ModelSpec(NOVA, context_window=100)], time_scale=50) as emulator:
        client = emulator.client(retries={"total_max_attempts": 1})
        client.converse(**ask("x" * 400, model=NOVA, answer=5))  # exactly 100 tokens
        with pytest.raises(ClientError) as excinfo:
            client.converse(**ask("x" * 404, model=NOVA, answer=5))
    assert error_of(excinfo) == ("ValidationException", 400)
    assert "Input is too long for requested model." in excinfo.value.response["Error"]["Message"]


# ---- native InvokeModel bodies ------------------------------------------------------------------


def invoke(client, model, body, **extra):
    response = client.invoke_model(modelId=model, body=json.dumps(body) if not isinstance(body, bytes) else body, **extra)
    return response, json.loads(response["body"].read())


def stream_chunks(client, model, body, **extra):
    response = client.invoke_model_with_response_stream(modelId=model, body=json.dumps(body), **extra)
    return response, [json.loads(event["chunk"]["bytes"]) for event in response["body"]]


ANTHROPIC_BODY = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 250,
                  "messages": [{"role": "user", "content": PROMPT}]}
NOVA_BODY = {"schemaVersion": "messages-v1", "messages": [{"role": "user", "content": [{"text": "hello"}]}],
             "inferenceConfig": {"max_new_tokens": 40}}
LLAMA_BODY = {"prompt": "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\nhello<|eot_id|>",
              "max_gen_len": 40, "temperature": 0.5}


def test_invoke_model_speaks_the_anthropic_body_and_headers(client):
    response, answer = invoke(client, HAIKU, ANTHROPIC_BODY)
    assert answer["type"] == "message" and answer["content"][0]["type"] == "text"
    assert answer["model"] == "claude-3-5-haiku-20241022"
    assert answer["usage"]["input_tokens"] == approx_tokens(PROMPT)
    assert answer["usage"]["output_tokens"] == 250 and answer["stop_reason"] == "max_tokens"  # default answer 300
    headers = response["ResponseMetadata"]["HTTPHeaders"]
    assert headers["x-amzn-bedrock-output-token-count"] == "250"
    assert response["performanceConfigLatency"] == "standard"
    assert "serviceTier" not in response


def test_anthropic_stream_sends_messages_api_events_and_invocation_metrics(client):
    body = ANTHROPIC_BODY | {"system": [{"type": "text", "text": "Be brief."}]}
    _, chunks = stream_chunks(client, HAIKU, body, requestMetadata=json.dumps({ANSWER_TOKENS_KEY: "30"}))
    types = [c["type"] for c in chunks]
    assert types[:2] == ["message_start", "content_block_start"]
    assert types[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(types[2:-3]) == {"content_block_delta"}
    text = "".join(c["delta"]["text"] for c in chunks if c["type"] == "content_block_delta")
    assert approx_tokens(text) == 30 == chunks[-2]["usage"]["output_tokens"]
    assert chunks[-2]["delta"]["stop_reason"] == "end_turn"
    assert chunks[-1]["amazon-bedrock-invocationMetrics"]["outputTokenCount"] == 30


def test_anthropic_cache_control_marks_the_cached_prefix(client):
    system = [{"type": "text", "text": "You answer questions about the catalog. " * 30, "cache_control": {"type": "ephemeral"}}]
    body = ANTHROPIC_BODY | {"system": system, "messages": [{"role": "user", "content": "Which phone?"}]}
    first = invoke(client, HAIKU, body)[1]["usage"]
    second = invoke(client, HAIKU, body)[1]["usage"]
    cached = approx_tokens(system[0]["text"])
    assert (first["cache_creation_input_tokens"], second["cache_read_input_tokens"]) == (cached, cached)
    assert second["input_tokens"] == approx_tokens("Which phone?")


def test_invoke_model_speaks_nova_messages_v1(client):
    _, answer = invoke(client, NOVA, NOVA_BODY, requestMetadata=json.dumps({ANSWER_TOKENS_KEY: "30"}))
    assert answer["output"]["message"]["role"] == "assistant" and answer["stopReason"] == "end_turn"
    assert set(answer["usage"]) == {"inputTokens", "outputTokens", "totalTokens", "cacheReadInputTokenCount",
                                    "cacheWriteInputTokenCount"}
    assert answer["usage"]["outputTokens"] == 30
    _, cut = invoke(client, NOVA, NOVA_BODY | {"inferenceConfig": {"maxTokens": 10}})  # Nova 2's spelling
    assert (cut["usage"]["outputTokens"], cut["stopReason"]) == (10, "max_tokens")


def test_nova_stream_sends_converse_shaped_chunks_and_invocation_metrics(client):
    _, chunks = stream_chunks(client, NOVA, NOVA_BODY, requestMetadata=json.dumps({ANSWER_TOKENS_KEY: "30"}))
    assert "messageStart" in chunks[0] and "messageStop" in chunks[-2]
    metrics = chunks[-1]["amazon-bedrock-invocationMetrics"]
    assert metrics["outputTokenCount"] == 30 and metrics["firstByteLatency"] > 0
    assert chunks[-1]["metadata"]["usage"]["outputTokens"] == 30
    streamed = "".join(c["contentBlockDelta"]["delta"]["text"] for c in chunks if "contentBlockDelta" in c)
    assert approx_tokens(streamed) == 30


def test_invoke_model_speaks_meta_llama(client):
    _, answer = invoke(client, LLAMA, LLAMA_BODY)
    assert set(answer) == {"generation", "prompt_token_count", "generation_token_count", "stop_reason"}
    assert answer["prompt_token_count"] == approx_tokens(LLAMA_BODY["prompt"])
    assert answer["generation_token_count"] == 40 == approx_tokens(answer["generation"])
    assert answer["stop_reason"] == "length"  # the default 300-token answer, cut at max_gen_len
    _, chunks = stream_chunks(client, LLAMA, LLAMA_BODY, requestMetadata=json.dumps({ANSWER_TOKENS_KEY: "12"}))
    assert all(c["stop_reason"] is None for c in chunks[:-1]) and chunks[-1]["stop_reason"] == "stop"
    assert approx_tokens("".join(c["generation"] for c in chunks)) == 12
    assert chunks[-1]["amazon-bedrock-invocationMetrics"]["outputTokenCount"] == 12


@pytest.mark.parametrize(
    ("model", "body", "message"),
    [
        (HAIKU, {}, "Malformed input request: #: required key [anthropic_version] not found#: required key [max_tokens] not found#: required key [messages] not found, please reformat your input and try again."),
        (HAIKU, {"messages": [{"role": "user", "content": "hi"}]}, "#: required key [max_tokens] not found"),
        (HAIKU, ANTHROPIC_BODY | {"temperature": "hot"}, "#/temperature: expected type: Number, found: String"),
        (HAIKU, ANTHROPIC_BODY | {"max_tokens": "600"}, "#/max_tokens: expected type: Integer, found: String"),
        (HAIKU, ANTHROPIC_BODY | {"max_tokens": 9_000}, "max_tokens: 9000 > 8192, which is the maximum allowed number of output tokens for claude-3-5-haiku-20241022"),
        (HAIKU, ANTHROPIC_BODY | {"messages": []}, "#/messages: expected minimum item count: 1, found: 0"),
        (HAIKU, ANTHROPIC_BODY | {"messages": [{"role": "user", "content": ""}]}, "messages.0: all messages must have non-empty content"),
        (HAIKU, ANTHROPIC_BODY | {"messages": [{"role": "user", "content": [{"type": "text", "text": " "}]}]}, "text content blocks must be non-empty"),
        (HAIKU, ANTHROPIC_BODY | {"messages": [{"role": "bot", "content": "hi"}]}, "#/messages/0/role: bot is not a valid enum value"),
        (NOVA, {}, "Malformed input request: #: required key [messages] not found, please reformat your input and try again."),
        (NOVA, NOVA_BODY | {"messages": [{"role": "user", "content": "hello"}]}, "#/messages/0/content: expected type: JSONArray, found: String"),
        (NOVA, NOVA_BODY | {"messages": [ASSISTANT, USER]}, "A conversation must start with a user message."),
        (NOVA, NOVA_BODY | {"inferenceConfig": {"max_new_tokens": 5_000}}, "#/inferenceConfig/max_new_tokens: 5000 is not less or equal to 4000"),
        (LLAMA, {}, "Malformed input request: #: required key [prompt] not found, please reformat your input and try again."),
        (LLAMA, {"prompt": ["hi"]}, "#/prompt: expected type: String, found: JSONArray"),
        (LLAMA, LLAMA_BODY | {"max_gen_len": 4_096}, "#/max_gen_len: 4096 is not less or equal to 2048"),
        (LLAMA, LLAMA_BODY | {"top_p": 2}, "#/top_p: 2 is not less or equal to 1"),
        (LLAMA, b"not json", "Malformed input request, please reformat your input and try again."),
        (LLAMA, b"[1, 2]", "#: expected type: JSONObject, found: JSONArray"),
        (LLAMA, {"prompt": "x" * 600_000}, "Input is too long for requested model."),
    ],
)
def test_bad_native_bodies_are_malformed_input_requests(unchecked, model, body, message):
    for call in (unchecked.invoke_model, unchecked.invoke_model_with_response_stream):
        with pytest.raises(ClientError) as excinfo:
            call(modelId=model, body=body if isinstance(body, bytes) else json.dumps(body))
        assert error_of(excinfo) == ("ValidationException", 400)
        assert message in excinfo.value.response["Error"]["Message"]


def test_native_headers_are_validated(unchecked):
    for extra, message in [({"performanceConfigLatency": "fastest"}, "[standard, optimized]"),
                           ({"serviceTier": "turbo"}, "[priority, default, flex, reserved]"),
                           ({"requestMetadata": "{not json"}, "requestMetadata is not a JSON object")]:
        with pytest.raises(ClientError) as excinfo:
            invoke(unchecked, NOVA, NOVA_BODY, **extra)
        assert error_of(excinfo) == ("ValidationException", 400) and message in excinfo.value.response["Error"]["Message"]


def test_an_invoke_body_over_bedrocks_limit_gets_its_validation_message(unchecked):
    with pytest.raises(ClientError) as excinfo:
        unchecked.invoke_model(modelId=LLAMA, body=b"x" * 25_000_001)
    assert error_of(excinfo) == ("ValidationException", 400)
    assert excinfo.value.response["Error"]["Message"] == (
        "1 validation error detected: Value at 'body' failed to satisfy constraint: "
        "Member must have length less than or equal to 25000000")


def test_a_model_of_another_family_is_not_guessed_at(bedrock_emulator, client):
    with pytest.raises(ClientError) as excinfo:
        invoke(client, "mistral.mistral-large-2407-v1:0", {"prompt": "<s>[INST] hi [/INST]", "max_tokens": 20})
    assert error_of(excinfo) == ("NotEmulatedException", 501)
    message = excinfo.value.response["Error"]["Message"]
    assert "cannot read InvokeModel bodies for 'mistral.mistral-large-2407-v1:0'" in message
    assert "anthropic, nova, llama" in message and "ModelSpec(family=...)" in message
    assert client.converse(**ask("hi", model="mistral.mistral-large-2407-v1:0", answer=3))["usage"]["outputTokens"] == 3


def test_family_can_be_set_for_a_model_id_that_does_not_say_it():
    with BedrockEmulator([ModelSpec("my-llama", family="llama")], time_scale=50) as emulator:
        _, answer = invoke(emulator.client(), "my-llama", LLAMA_BODY)
    assert answer["generation_token_count"] == 40


# ---- model identifiers ----------------------------------------------------------------------------

IDENTIFIERS = [
    HAIKU,  # the inference profile id it is configured with
    "anthropic.claude-3-5-haiku-20241022-v1:0",  # the foundation model id
    "arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-3-5-haiku-20241022-v1:0",
    f"arn:aws:bedrock:us-east-1:111122223333:inference-profile/{HAIKU}",
    "arn:aws:bedrock:us-west-2:111122223333:application-inference-profile/a1b2c3d4e5f6",
]


@pytest.mark.parametrize("identifier", IDENTIFIERS)
def test_each_identifier_form_reaches_the_configured_model(bedrock_emulator, client, identifier):
    assert client.converse(**ask(model=identifier, answer=5))["usage"]["outputTokens"] == 5
    invoke(client, identifier, ANTHROPIC_BODY)
    counted = client.count_tokens(modelId=identifier, input={"converse": {"messages": [USER]}})
    assert counted["inputTokens"] == 1
    assert {i.model_id for i in bedrock_emulator.invocations} == {HAIKU}


def test_an_arn_with_an_unencoded_slash_in_the_path_is_read_too(bedrock_emulator):
    """Raw HTTP clients do not always percent-encode the ARN's '/', as botocore does."""
    arn = "arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-3-5-haiku-20241022-v1:0"
    status, _, body = raw_request(bedrock_emulator, "POST", f"/model/{arn}/invoke", json.dumps(ANTHROPIC_BODY).encode())
    assert status == 200 and json.loads(body)["usage"]["output_tokens"] == 250


@pytest.mark.parametrize(
    "identifier",
    [
        "arn:aws:bedrock:us-east-1:111122223333:application-inference-profile/notlisted123",
        "arn:aws:bedrock:us-east-1:111122223333:foundation-model/anthropic.claude-3-5-haiku-20241022-v1:0",  # an account
        "arn:aws:bedrock:us-east-1:111122223333:provisioned-model/abcdefabcdef",
        "anthropic.claude-3-haiku-20240307-v1:0",
    ],
)
def test_identifiers_of_other_models_are_invalid(client, identifier):
    with pytest.raises(ClientError) as excinfo:
        client.converse(**ask(model=identifier))
    assert error_of(excinfo) == ("ValidationException", 400)
    message = excinfo.value.response["Error"]["Message"]
    assert message.startswith("The provided model identifier is invalid.") and "application_profiles" in message


# ---- injected errors, as botocore's model allows them ---------------------------------------------


def _call(client, operation, model=NOVA, answer=20):
    """One request of `operation`, consumed whole; returns the stream's events where there is one."""
    if operation == "Converse":
        return client.converse(**ask("hi", model=model, max_tokens=100, answer=answer))
    if operation == "ConverseStream":
        return list(client.converse_stream(**ask("hi", model=model, max_tokens=100, answer=answer))["stream"])
    metadata = json.dumps({ANSWER_TOKENS_KEY: str(answer)})
    if operation == "InvokeModel":
        return client.invoke_model(modelId=model, body=json.dumps(NOVA_BODY), requestMetadata=metadata)
    if operation == "InvokeModelWithResponseStream":
        return list(client.invoke_model_with_response_stream(modelId=model, body=json.dumps(NOVA_BODY),
                                                             requestMetadata=metadata)["body"])
    return client.count_tokens(modelId=model, input={"converse": {"messages": [USER]}})


MODELLED = [(op, error) for op in EMULATED_OPERATIONS for error in SERVICE.operation_model(op).error_shapes]
IN_STREAM = [(op, member) for op in ("ConverseStream", "InvokeModelWithResponseStream")
             for member, shape in SERVICE.operation_model(op).get_event_stream_output().members.items()
             if shape.metadata.get("exception")]


@pytest.mark.parametrize(("operation", "error"), MODELLED, ids=[f"{op}-{e.name}" for op, e in MODELLED])
def test_each_modelled_error_can_be_injected_into_its_operation(bedrock_emulator, client, operation, error):
    bedrock_emulator.fail_next(error.name, operation=operation, message=f"{error.name} for the test")
    with pytest.raises(ClientError) as excinfo:
        _call(client, operation)
    assert error_of(excinfo) == (error.name, error.metadata["error"]["httpStatusCode"] if "error" in error.metadata else 500)
    assert excinfo.value.response["Error"]["Message"] == f"{error.name} for the test"
    _call(client, operation)  # only the next request failed


@pytest.mark.parametrize(("operation", "member"), IN_STREAM, ids=[f"{op}-{m}" for op, m in IN_STREAM])
def test_each_stream_exception_can_be_injected_inside_its_stream(bedrock_emulator, client, operation, member):
    error_type = member[0].upper() + member[1:]
    bedrock_emulator.fail_next(error_type, operation=operation, after_tokens=5, message="mid-stream")
    events = []
    with pytest.raises(EventStreamError) as excinfo:
        response = (client.converse_stream(**ask("hi", model=NOVA, max_tokens=100, answer=50))["stream"]
                    if operation == "ConverseStream" else
                    client.invoke_model_with_response_stream(modelId=NOVA, body=json.dumps(NOVA_BODY))["body"])
        for event in response:
            events.append(event)
    assert excinfo.value.response["Error"] == {"Code": member, "Message": "mid-stream"}  # never empty
    assert events  # the stream had started
    invocation = bedrock_emulator.invocations[-1]
    assert (invocation.outcome, invocation.output_tokens) == (error_type, 5)


def test_in_stream_throttle_settles_what_was_sent(bedrock_emulator, client):
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


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"error_type": "ModelStreamErrorException", "operation": "Converse"},
         "is not an error botocore's model lets Converse return"),
        ({"error_type": "AccessDeniedException", "after_tokens": 3},
         "lets any emulated operation return inside its stream (after_tokens)"),
        ({"error_type": "ModelTimeoutException", "operation": "ConverseStream", "after_tokens": 3},
         "ConverseStream: InternalServerException, ModelStreamErrorException, ServiceUnavailableException, ThrottlingException, ValidationException"),
        ({"error_type": "ConflictException"}, "is not an error botocore's model lets any emulated operation return"),
        ({"error_type": "Nope"}, "error_type='Nope'"),
        ({"operation": "ApplyGuardrail"}, "operation='ApplyGuardrail' must be one of"),
        ({"model_id": "nova"}, "model_id='nova' is not a model this emulator serves"),
        ({"count": 0}, "count=0 is below the minimum of 1"),
        ({"after_tokens": -1}, "after_tokens=-1 is below the minimum of 0"),
        ({"after_tokens": 2.5}, "after_tokens=2.5 is a float"),
    ],
)
def test_fail_next_refuses_what_the_operation_cannot_return(bedrock_emulator, kwargs, message):
    with pytest.raises(InvalidPropsError) as excinfo:
        bedrock_emulator.fail_next(**kwargs)
    assert message in str(excinfo.value)


def test_a_fault_waits_for_a_request_that_can_return_it(bedrock_emulator, client):
    bedrock_emulator.fail_next("ModelStreamErrorException")  # modelled only for InvokeModelWithResponseStream
    bedrock_emulator.fail_next("ServiceQuotaExceededException", model_id=f"arn:aws:bedrock:us-east-1:111122223333:inference-profile/{NOVA}")
    _call(client, "Converse")
    _call(client, "ConverseStream")
    with pytest.raises(ClientError) as quota:
        _call(client, "InvokeModel")  # a modelled error of InvokeModel
    with pytest.raises(ClientError) as stream:
        _call(client, "InvokeModelWithResponseStream")
    assert error_of(quota) == ("ServiceQuotaExceededException", 400)
    assert error_of(stream) == ("ModelStreamErrorException", 424)


def test_fail_next_without_botocore_says_how_to_install_it(bedrock_emulator, monkeypatch):
    monkeypatch.setattr(_servicemodel, "load", lambda: None)
    with pytest.raises(ModuleNotFoundError, match=r"fail_next .* botocore, which is not installed: pip install boto3 "):
        bedrock_emulator.fail_next("ThrottlingException")


# ---- CountTokens and the operations the emulator does not serve -----------------------------------


def test_count_tokens_counts_converse_and_invoke_model_input_like_the_emulator_charges(bedrock_emulator, client):
    system = [{"text": "Be brief."}]
    counted = client.count_tokens(modelId=HAIKU, input={"converse": {"messages": [{"role": "user", "content": [{"text": PROMPT}]}],
                                                                     "system": system}})
    assert counted["inputTokens"] == approx_tokens("Be brief." + PROMPT)
    native = client.count_tokens(modelId=HAIKU, input={"invokeModel": {"body": json.dumps(ANTHROPIC_BODY).encode()}})
    charged = invoke(client, HAIKU, ANTHROPIC_BODY)[1]["usage"]["input_tokens"]
    assert native["inputTokens"] == charged == approx_tokens(PROMPT)
    counts = [i for i in bedrock_emulator.invocations if i.operation == "CountTokens"]
    assert [(i.outcome, i.reserved, i.settled) for i in counts] == [("ok", 0, 0), ("ok", 0, 0)]  # no quota charged


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({}, "at 'input' failed to satisfy constraint"),
        ({"converse": {"messages": [USER]}, "invokeModel": {"body": "e30="}}, "Member must set exactly one of converse or invokeModel"),
        ({"converse": {"messages": [ASSISTANT]}}, "A conversation must start with a user message."),
        ({"invokeModel": {"body": "not base64!"}}, "input.invokeModel.body is not valid base64"),
        ({"invokeModel": {"body": base64.b64encode(b"{}").decode()}}, "#: required key [anthropic_version] not found"),
    ],
)
def test_bad_count_tokens_requests_are_validation_exceptions(bedrock_emulator, given, message):
    # Raw JSON, because botocore would base64-encode (and so repair) the invokeModel body itself.
    status, headers, body = raw_request(bedrock_emulator, "POST", f"/model/{HAIKU}/count-tokens", json.dumps({"input": given} if given else {}).encode())
    assert (status, headers["x-amzn-errortype"].split(":")[0]) == (400, "ValidationException")
    assert message in json.loads(body)["message"]


@pytest.mark.parametrize(
    ("call", "operation"),
    [
        (lambda c: c.apply_guardrail(guardrailIdentifier="g", guardrailVersion="1", source="INPUT", content=[{"text": {"text": "hi"}}]), "ApplyGuardrail"),
        (lambda c: c.list_async_invokes(), "ListAsyncInvokes"),
        (lambda c: c.get_async_invoke(invocationArn="arn:aws:bedrock:us-east-1:111122223333:async-invoke/abc"), "GetAsyncInvoke"),
        (lambda c: c.start_async_invoke(modelId=NOVA, modelInput={}, outputDataConfig={"s3OutputDataConfig": {"s3Uri": "s3://b/k"}}), "StartAsyncInvoke"),
    ],
)
def test_other_operations_are_named_as_not_emulated(client, call, operation):
    with pytest.raises(ClientError) as excinfo:
        call(client)
    assert error_of(excinfo) == ("NotEmulatedException", 501)
    assert excinfo.value.response["Error"]["Message"].startswith(f"{operation} is not emulated: BedrockEmulator serves Converse, ")


def test_an_unknown_path_is_a_404_not_a_hang(bedrock_emulator):
    status, headers, body = raw_request(bedrock_emulator, "POST", "/guardrail/x/apply", b"{}")
    assert (status, headers["x-amzn-errortype"].split(":")[0]) == (404, "UnknownOperationException")
    assert "no bedrock-runtime operation at POST /guardrail/x/apply" in json.loads(body)["message"]


# ---- service tiers ---------------------------------------------------------------------------------


def test_service_tier_field_names_and_values_match_botocores_model():
    assert tuple(SERVICE.shape_for("ServiceTierType").enum) == specs.SERVICE_TIERS
    assert tuple(SERVICE.shape_for("PerformanceConfigLatency").enum) == specs.LATENCY_MODES
    for op in ("Converse", "ConverseStream"):
        assert SERVICE.operation_model(op).input_shape.members[specs.SERVICE_TIER_MEMBER].name == "ServiceTier"
    assert specs.SERVICE_TIER_MEMBER in SERVICE.operation_model("Converse").output_shape.members
    assert specs.SERVICE_TIER_MEMBER in SERVICE.shape_for("ConverseStreamMetadataEvent").members
    for op in ("InvokeModel", "InvokeModelWithResponseStream"):
        for shape in (SERVICE.operation_model(op).input_shape, SERVICE.operation_model(op).output_shape):
            assert shape.members[specs.SERVICE_TIER_MEMBER].serialization == {
                "location": "header", "name": specs.SERVICE_TIER_HEADER}
    # The refusals are ValidationException: a 400 that botocore's model lists for every emulated operation.
    assert SERVICE.shape_for("ValidationException").metadata["error"]["httpStatusCode"] == 400
    assert all("ValidationException" in [e.name for e in SERVICE.operation_model(op).error_shapes]
               for op in EMULATED_OPERATIONS)


TIERED = ("Converse", "ConverseStream", "InvokeModel", "InvokeModelWithResponseStream")


def tiered(client, operation, tier, *, model=NOVA, prompt="hi", max_tokens=100, answer=20):
    """One call of `operation` naming `tier` (None: none), consumed whole; returns the tier it echoed."""
    if operation.startswith("Converse"):
        request = ask(prompt, model=model, max_tokens=max_tokens, answer=answer)
        request |= {"serviceTier": {"type": tier}} if tier else {}
        if operation == "Converse":
            return client.converse(**request).get("serviceTier", {}).get("type")
        events = list(client.converse_stream(**request)["stream"])
        return events[-1]["metadata"].get("serviceTier", {}).get("type")
    body = {"messages": [{"role": "user", "content": [{"text": prompt}]}], "inferenceConfig": {"max_new_tokens": max_tokens}}
    extra = {"requestMetadata": json.dumps({ANSWER_TOKENS_KEY: str(answer)})} | ({"serviceTier": tier} if tier else {})
    if operation == "InvokeModel":
        response = client.invoke_model(modelId=model, body=json.dumps(body), **extra)
        response["body"].read()
    else:
        response = client.invoke_model_with_response_stream(modelId=model, body=json.dumps(body), **extra)
        list(response["body"])
    return response.get("serviceTier")


def until(condition, what):
    """Wait for a state of the emulator (not for a duration); the wall-time bound only stops a hang."""
    import time

    deadline = time.monotonic() + 20
    while not condition():
        assert time.monotonic() < deadline, f"the emulator never reached: {what}"
        time.sleep(0.002)


def drive(clock, emulator, model=NOVA, step=1.0):
    """Advance model time `step` at a time, each time only once every call in flight is asleep on the
    clock or waiting for a serving slot, until none is in flight: the same steps on every machine."""
    for _ in range(2_000):
        if emulator.totals.in_flight == 0:
            return
        until(lambda: clock.sleepers + emulator.queued(model) >= emulator.totals.in_flight, "every call blocked")
        clock.advance(step)
    raise AssertionError("calls still in flight after 2,000 steps")


def in_thread(call):
    import threading

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    return thread


def test_priority_default_and_flex_share_one_on_demand_pool():
    spec = ModelSpec(NOVA, tpm_quota=3_000, max_output_tokens=4_000, jitter=0)
    with BedrockEmulator([spec], clock=ManualClock(instant=True)) as emulator:
        client = emulator.client(retries={"total_max_attempts": 1})
        # Each reserves 1 + 500 and settles at 1 + 100, in the same window, through three APIs.
        for operation, tier in (("Converse", "priority"), ("InvokeModel", "default"), ("ConverseStream", "flex")):
            assert tiered(client, operation, tier, max_tokens=500, answer=100) == tier
        assert emulator.quota_used(NOVA) == 3 * 101 == sum(i.settled for i in emulator.invocations)
        # 303 held + 1 + 2,800 > 3,000: refused at every tier, Priority included (no tier has a pool of its own),
        # though 2,801 alone would fit the pool.
        for tier in ("priority", "default", "flex"):
            with pytest.raises(ClientError) as excinfo:
                tiered(client, "Converse", tier, max_tokens=2_800)
            assert error_of(excinfo) == ("ThrottlingException", 429)
        assert emulator.quota_used(NOVA) == 303


def test_reserved_tier_has_its_own_input_and_output_budgets_and_overflows_to_default():
    spec = ModelSpec(NOVA, tpm_quota=100_000, reserved_input_tpm=1_000, reserved_output_tpm=300, jitter=0)
    clock = ManualClock(instant=True)
    with BedrockEmulator([spec], clock=clock) as emulator:
        client = emulator.client(retries={"total_max_attempts": 1})
        prompt = "x" * 400  # 100 tokens

        def used():
            return tuple(emulator.quota_used(NOVA, pool) for pool in ("standard", "reserved-input", "reserved-output"))

        assert tiered(client, "Converse", "reserved", prompt=prompt, max_tokens=200, answer=150) == "reserved"
        assert used() == (0, 100, 150)  # input on the input budget, output (settled, no burndown) on the output one
        # Output: 150 held + max_tokens 200 > 300: overflows to the on-demand pool, served and echoed as default.
        assert tiered(client, "InvokeModel", "reserved", prompt=prompt, max_tokens=200, answer=150) == "default"
        assert used() == (emulator.invocations[-1].settled, 100, 150)
        # Input: 100 held + 1,000 > 1,000 (the output budget would hold it, and is left as it was).
        assert tiered(client, "ConverseStream", "reserved", prompt="x" * 4_000, max_tokens=100, answer=50) == "default"
        assert used()[1:] == (100, 150)
        clock.advance(60)  # the first call's charges leave the one-minute window
        assert tiered(client, "InvokeModelWithResponseStream", "reserved", prompt=prompt, max_tokens=200) == "reserved"
    assert [(i.service_tier, i.served_tier) for i in emulator.invocations] == [
        ("reserved", "reserved"), ("reserved", "default"), ("reserved", "default"), ("reserved", "reserved")]


@pytest.mark.parametrize("operation", TIERED)
def test_the_tier_that_served_a_call_is_echoed_where_botocore_reads_it(operation):
    spec = ModelSpec(NOVA, reserved_input_tpm=10_000, reserved_output_tpm=150)
    with BedrockEmulator([spec], clock=ManualClock(instant=True)) as emulator:
        client = emulator.client(retries={"total_max_attempts": 1})
        echoed = [tiered(client, operation, tier, max_tokens=max_tokens)
                  for tier, max_tokens in ((None, 100), ("priority", 100), ("default", 100), ("flex", 100),
                                           ("reserved", 100), ("reserved", 200))]  # 20 held + 200 > 150: overflow
    assert echoed == [None, "priority", "default", "flex", "reserved", "default"]
    assert [i.served_tier for i in emulator.invocations] == echoed


@pytest.mark.parametrize("operation", TIERED)
@pytest.mark.parametrize(
    ("tiers", "tier", "message"),
    [
        (("default", "priority"), "flex", f"The model {NOVA} does not support the flex service tier."),
        (specs.SERVICE_TIERS, "reserved", f"This account has no Reserved tier capacity for {NOVA}."),
    ],
)
def test_a_tier_the_model_does_not_serve_is_a_validation_exception(operation, tiers, tier, message):
    with BedrockEmulator([ModelSpec(NOVA, service_tiers=tiers)], clock=ManualClock(instant=True)) as emulator:
        client = emulator.client(retries={"total_max_attempts": 1})
        with pytest.raises(ClientError) as excinfo:
            tiered(client, operation, tier)
        assert tiered(client, operation, "priority") == "priority"  # the tiers it lists are served
    assert error_of(excinfo) == ("ValidationException", 400)
    assert excinfo.value.response["Error"]["Message"].startswith(message)
    refused = emulator.invocations[0]
    assert (refused.outcome, refused.reserved, refused.settled) == ("ValidationException", 0, 0)


def test_calls_waiting_for_a_serving_slot_are_served_priority_first_and_flex_last():
    clock = ManualClock()
    with BedrockEmulator([ModelSpec(NOVA, serving_slots=1, jitter=0)], clock=clock) as emulator:
        def call(tier):
            return in_thread(lambda: tiered(emulator.client(retries={"total_max_attempts": 1}), "Converse", tier))

        threads = [call("default")]
        until(lambda: clock.sleepers == 1, "the first call holds the only slot")
        for waiting, tier in enumerate(("flex", "default", "priority"), start=1):  # worst tier first
            threads.append(call(tier))
            until(lambda n=waiting: emulator.queued(NOVA) == n, f"{waiting} calls waiting")
        drive(clock, emulator)
        for thread in threads:
            thread.join()
    first, *waiting = emulator.invocations
    assert [i.outcome for i in emulator.invocations] == ["ok"] * 4
    assert first.queued_ms == 0
    served = sorted(waiting, key=lambda i: i.queued_ms)
    assert [i.service_tier for i in served] == ["priority", "default", "flex"]  # arrival order was the reverse
    # Model time moved a second at a time, and each call needs less than one (0.5 s + 20 tokens at 60/s):
    # the three were let in one after another, the same on every machine.
    assert [i.queued_ms for i in served] == [1_000, 2_000, 3_000]
    assert all(i.latency_ms > i.queued_ms for i in waiting)  # the reported latency includes the wait


def test_a_call_that_waits_too_long_for_a_slot_is_throttled_and_charged_nothing():
    clock = ManualClock()
    spec = ModelSpec(NOVA, serving_slots=1, max_queue_seconds=10, jitter=0, output_tokens_per_second=50)
    with BedrockEmulator([spec], clock=clock) as emulator:
        client = emulator.client(retries={"total_max_attempts": 1})
        long_call = in_thread(lambda: tiered(emulator.client(), "Converse", "priority", max_tokens=1_000, answer=1_000))
        until(lambda: clock.sleepers == 1, "the long call holds the only slot")  # for 0.5 + 20 model seconds
        errors = []

        def wait_in_line():
            with pytest.raises(ClientError) as excinfo:
                tiered(client, "Converse", "flex")
            errors.append(error_of(excinfo))

        waiter = in_thread(wait_in_line)
        until(lambda: emulator.queued(NOVA) == 1, "the flex call waits")
        clock.advance(11)
        waiter.join()
        assert errors == [("ThrottlingException", 429)]
        assert emulator.quota_used(NOVA) == 1 + 1_000  # the long call's reservation only
        drive(clock, emulator)
        long_call.join()
    throttled = emulator.invocations[1]
    assert (throttled.outcome, throttled.settled, throttled.queued_ms) == ("throttled", 0, 11_000)


def test_a_call_served_from_the_reservation_does_not_wait_for_an_on_demand_slot():
    clock = ManualClock()
    spec = ModelSpec(NOVA, serving_slots=1, reserved_input_tpm=1_000, reserved_output_tpm=1_000, jitter=0)
    with BedrockEmulator([spec], clock=clock) as emulator:
        blocker = in_thread(lambda: tiered(emulator.client(), "Converse", "priority", max_tokens=1_000, answer=1_000))
        until(lambda: clock.sleepers == 1, "an on-demand call holds the only slot")  # for about 17 model seconds
        reserved = in_thread(lambda: tiered(emulator.client(), "Converse", "reserved"))
        until(lambda: clock.sleepers == 2, "the reserved call is being served")
        assert emulator.queued(NOVA) == 0
        drive(clock, emulator)
        blocker.join()
        reserved.join()
    on_demand, from_reservation = emulator.invocations
    assert (from_reservation.served_tier, from_reservation.queued_ms) == ("reserved", None)
    assert from_reservation.started + from_reservation.latency_ms / 1000 < on_demand.started + on_demand.latency_ms / 1000


def test_each_tier_can_have_its_own_latency():
    spec = ModelSpec(NOVA, jitter=0, ttft_seconds=0.5, output_tokens_per_second=50, tier_latency={
        "priority": TierLatency(ttft_seconds=0.2, output_tokens_per_second=100),
        "flex": TierLatency(ttft_seconds=3.0, prefill_tokens_per_second=1_000, output_tokens_per_second=20),
    })
    with BedrockEmulator([spec], clock=ManualClock(instant=True)) as emulator:
        client = emulator.client()
        latency = {tier: client.converse(**ask("x" * 400, model=NOVA, answer=100),
                                         **({"serviceTier": {"type": tier}} if tier else {}))["metrics"]["latencyMs"]
                   for tier in (None, "default", "priority", "flex")}
    # 100 prompt tokens, 100 answer tokens, no jitter: exact model-time figures.
    assert latency == {None: round((0.5 + 100 / 8_000 + 100 / 50) * 1000),
                       "default": round((0.5 + 100 / 8_000 + 100 / 50) * 1000),
                       "priority": round((0.2 + 100 / 8_000 + 100 / 100) * 1000),
                       "flex": round((3.0 + 100 / 1_000 + 100 / 20) * 1000)}
    assert [i.service_tier for i in emulator.invocations] == [None, "default", "priority", "flex"]


def test_a_manual_clock_moves_only_when_told():
    clock = ManualClock(start=5)
    assert clock.now() == 5 and clock.advance(2.5) == 7.5
    instant = ManualClock(instant=True)
    instant.sleep(3)
    instant.sleep(-1)  # never backward
    assert instant.now() == 3 and instant.sleepers == 0


# ---- HTTP limits (raw sockets: botocore would not send these) ------------------------------------


def raw_request(emulator, method, path, body=b"", *, headers=None, chunks=None, read_timeout=10.0):
    """Send one request on a fresh connection (Connection: close) and read the whole answer."""
    url = urlsplit(emulator.endpoint_url)
    lines = [f"{method} {path} HTTP/1.1", f"Host: {url.netloc}", "Connection: close"]
    if headers is None:
        headers = {"Content-Length": str(len(body))}
    lines += [f"{k}: {v}" for k, v in headers.items()]
    with socket.create_connection((url.hostname, url.port), timeout=read_timeout) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, payload = received.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    parsed = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in header_lines)}
    return int(status_line.split()[1]), parsed, payload


CONVERSE_BODY = json.dumps({"messages": [USER], "inferenceConfig": {"maxTokens": 20},
                            "requestMetadata": {ANSWER_TOKENS_KEY: "4"}}).encode()


@pytest.mark.parametrize("length", ["abc", "-1", "1.5", "", "10, 12"])
def test_a_content_length_that_is_not_a_byte_count_gets_a_400(bedrock_emulator, length):
    status, headers, body = raw_request(bedrock_emulator, "POST", f"/model/{NOVA}/converse", b"{}",
                                        headers={"Content-Length": length})
    assert (status, headers["x-amzn-errortype"].split(":")[0]) == (400, "BadRequestException")
    assert "is not a byte count" in json.loads(body)["message"]


def test_a_body_over_the_cap_gets_a_413_without_being_read():
    with BedrockEmulator([ModelSpec(NOVA)], max_body_bytes=1_000) as emulator:
        # Declares 100 MB and sends 64 KB of it: the answer comes before the rest would have been read.
        status, headers, body = raw_request(emulator, "POST", f"/model/{NOVA}/converse", b"x" * 65_536,
                                            headers={"Content-Length": str(100 * 1024 * 1024)})
        assert (status, headers["x-amzn-errortype"].split(":")[0]) == (413, "RequestEntityTooLargeException")
        assert "body of 104857600 bytes exceeds the emulator's cap of 1000 bytes" in json.loads(body)["message"]
        # A client that writes its whole body before reading still sees the 413 (a lingering close).
        import urllib.error
        import urllib.request

        with pytest.raises(urllib.error.HTTPError) as excinfo:
            urllib.request.urlopen(urllib.request.Request(f"{emulator.endpoint_url}/model/{NOVA}/converse", data=b"x" * 50_000))
        assert excinfo.value.code == 413
        assert emulator.invocations == []  # refused before it became a request


def test_expect_100_continue_is_refused_before_the_body_is_sent():
    with BedrockEmulator([ModelSpec(NOVA)], max_body_bytes=1_000) as emulator:
        status, _, _ = raw_request(emulator, "POST", f"/model/{NOVA}/converse",
                                   headers={"Content-Length": "5000", "Expect": "100-continue"})
    assert status == 413


def _chunked(data: bytes, size: int) -> bytes:
    parts = [data[i:i + size] for i in range(0, len(data), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def test_a_chunked_body_is_read():
    with BedrockEmulator([ModelSpec(NOVA)], time_scale=50) as emulator:
        status, _, body = raw_request(emulator, "POST", f"/model/{NOVA}/converse", _chunked(CONVERSE_BODY, 7),
                                      headers={"Transfer-Encoding": "chunked"})
    assert status == 200 and json.loads(body)["usage"]["outputTokens"] == 4


@pytest.mark.parametrize(
    ("headers", "body", "status", "error_type", "message"),
    [
        ({"Transfer-Encoding": "chunked"}, _chunked(b"x" * 3_000, 1_000), 413, "RequestEntityTooLargeException", "exceeds the emulator's cap"),
        ({"Transfer-Encoding": "chunked"}, b"zz\r\n{}\r\n0\r\n\r\n", 400, "BadRequestException", "malformed chunk size line"),
        ({"Transfer-Encoding": "chunked"}, b"2\r\n{}XX0\r\n\r\n", 400, "BadRequestException", "does not end with CRLF"),
        ({"Transfer-Encoding": "gzip"}, b"", 501, "NotImplementedException", "Transfer-Encoding 'gzip' is not supported"),
        ({"Transfer-Encoding": "chunked", "Content-Length": "2"}, b"{}", 400, "BadRequestException", "both Content-Length and Transfer-Encoding"),
    ],
)
def test_bad_or_unsupported_transfer_codings_are_refused_clearly(headers, body, status, error_type, message):
    with BedrockEmulator([ModelSpec(NOVA)], max_body_bytes=2_000) as emulator:
        got, got_headers, payload = raw_request(emulator, "POST", f"/model/{NOVA}/converse", body, headers=headers)
    assert (got, got_headers["x-amzn-errortype"].split(":")[0]) == (status, error_type)
    assert message in json.loads(payload)["message"]


@pytest.mark.parametrize("sent", [b"", b"POST /model/x/converse HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"mess"])
def test_an_idle_or_half_sent_connection_is_closed_after_the_timeout(sent):
    """Without the timeout these connections would hold a server thread forever."""
    with BedrockEmulator([ModelSpec(NOVA)], connection_timeout_seconds=0.3) as emulator:
        url = urlsplit(emulator.endpoint_url)
        with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
            sock.sendall(sent)
            assert sock.recv(1024) == b""  # the server closed it (the client's own timeout would raise)
        assert emulator.invocations == []


def test_the_history_is_bounded_and_the_totals_count_everything():
    with BedrockEmulator([ModelSpec(NOVA, tpm_quota=1_000)], max_invocations=3, time_scale=50) as emulator:
        client = emulator.client(retries={"total_max_attempts": 1})
        settled = 0.0
        for answer in (5, 6, 7, 8):
            usage = client.converse(**ask("hi", model=NOVA, max_tokens=100, answer=answer))["usage"]
            settled += usage["inputTokens"] + usage["outputTokens"]
        with pytest.raises(ClientError):
            client.converse(**ask("hi", model=NOVA, max_tokens=999))
        totals = emulator.totals
        assert [i.output_tokens for i in emulator.invocations] == [7, 8, 0]  # the three most recent
    assert (totals.requests, totals.in_flight, totals.forgotten) == (5, 0, 2)
    assert totals.outcomes == {"ok": 4, "throttled": 1} and totals.throttled == 1
    assert (totals.settled, totals.output_tokens, totals.reserved) == (settled, 26, 4 * 101 + 1_000)


# ---- configuration and packaging ---------------------------------------------------------------

NAN, INF = math.nan, math.inf


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tpm_quota": 0}, "tpm_quota=0 is below the minimum of 1"),
        ({"tpm_quota": 1.5}, "tpm_quota=1.5 is a float"),
        ({"tpm_quota": True}, "tpm_quota=True is a bool"),
        ({"tpm_quota": None}, "tpm_quota is required"),
        ({"rpm_quota": 0}, "rpm_quota=0 is below the minimum of 1"),
        ({"burndown": 0.5}, "burndown=0.5 is below the minimum of 1"),
        ({"burndown": NAN}, "burndown=nan is not a finite number"),
        ({"max_output_tokens": -1}, "max_output_tokens=-1 is below the minimum of 1"),
        ({"context_window": 0}, "context_window=0 is below the minimum of 1"),
        ({"ttft_seconds": 0}, "ttft_seconds=0 must be greater than 0"),
        ({"output_tokens_per_second": INF}, "output_tokens_per_second=inf is not a finite number"),
        ({"prefill_tokens_per_second": "fast"}, "prefill_tokens_per_second='fast' is a str"),
        ({"jitter": -0.1}, "jitter=-0.1 is below the minimum of 0"),
        ({"answer_tokens": 0}, "answer_tokens=0 is below the minimum of 1"),
        ({"cache_ttl_seconds": -5}, "cache_ttl_seconds=-5 must be greater than 0"),
        ({"family": "mistral"}, "family='mistral' must be one of 'anthropic', 'nova', 'llama'"),
        ({"application_profiles": "abc"}, "application_profiles='abc' is a str"),
        ({"application_profiles": ("arn:aws:bedrock:x/y",)}, "pass the id after 'application-inference-profile/'"),
        ({"tier_latency": {"turbo": TierLatency()}}, "tier_latency key='turbo' must be one of"),
        ({"tier_latency": {"flex": 2.0}}, "tier_latency['flex']=2.0 is a float"),
        ({"latency_optimized": 3_000}, "latency_optimized=3000 is an int"),
        ({"service_tiers": ["default"]}, "service_tiers=['default'] is a list"),
        ({"service_tiers": ("default", "turbo")}, "service_tiers item='turbo' must be one of"),
        ({"service_tiers": ("priority", "flex")}, "lacks 'default': the Standard tier (default) serves every model"),
        ({"service_tiers": ("default",), "tier_latency": {"flex": TierLatency()}},
         "tier_latency has ['flex'] but service_tiers does not"),
        ({"reserved_input_tpm": 1_000}, "reserved_input_tpm and reserved_output_tpm go together"),
        ({"reserved_input_tpm": 0, "reserved_output_tpm": 10}, "reserved_input_tpm=0 is below the minimum of 1"),
        ({"reserved_input_tpm": 10, "reserved_output_tpm": 10, "service_tiers": ("default",)},
         "reserved_input_tpm is set but service_tiers lacks 'reserved'"),
        ({"serving_slots": 0}, "serving_slots=0 is below the minimum of 1"),
        ({"max_queue_seconds": 0}, "max_queue_seconds=0 must be greater than 0"),
    ],
)
def test_model_spec_rejects_bad_values(kwargs, message):
    with pytest.raises(InvalidPropsError) as excinfo:
        ModelSpec(NOVA, **kwargs)
    assert message in str(excinfo.value) and str(excinfo.value).startswith(f"ModelSpec '{NOVA}'")


def test_model_spec_reports_every_problem_at_once():
    with pytest.raises(InvalidPropsError) as excinfo:
        ModelSpec(NOVA, tpm_quota=0, burndown=0, jitter=-1)
    assert len(excinfo.value.problems) == 3


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: LatencyOptimized(tpm_quota=0), "tpm_quota=0 is below the minimum of 1"),
        (lambda: LatencyOptimized(tpm_quota=100, ttft_seconds=NAN), "ttft_seconds=nan is not a finite number"),
        (lambda: TierLatency(ttft_seconds=-1), "ttft_seconds=-1 must be greater than 0"),
        (lambda: TierLatency(output_tokens_per_second=0), "output_tokens_per_second=0 must be greater than 0"),
        (lambda: QuotaModel(window="leaky"), "window='leaky' must be one of 'sliding', 'clock-minute', 'token-bucket'"),
        (lambda: QuotaModel(reserve_output_with_burndown="yes"), "reserve_output_with_burndown='yes' is a str"),
        (lambda: BedrockEmulator(time_scale=0), "time_scale=0 must be greater than 0"),
        (lambda: BedrockEmulator(time_scale=INF), "time_scale=inf is not a finite number"),
        (lambda: BedrockEmulator(connection_setup_seconds=-1), "connection_setup_seconds=-1 is below the minimum of 0"),
        (lambda: BedrockEmulator(connection_timeout_seconds=0), "connection_timeout_seconds=0 must be greater than 0"),
        (lambda: BedrockEmulator(max_body_bytes=0), "max_body_bytes=0 is below the minimum of 1"),
        (lambda: BedrockEmulator(max_invocations=None), "max_invocations is required"),
        (lambda: BedrockEmulator(quota="sliding"), "quota='sliding' is a str"),
        (lambda: BedrockEmulator([ModelSpec(NOVA), ModelSpec(NOVA)]), f"duplicate model ids ['{NOVA}']"),
        (lambda: BedrockEmulator(["nova"]), "models[0]='nova' is a str"),
        (lambda: BedrockEmulator(time_scale=60, clock=ManualClock()), "time_scale=60 and clock= were both given"),
        (lambda: BedrockEmulator(clock=60), "clock=60 is not a clock"),
        (lambda: ManualClock(start=-1), "start=-1 is below the minimum of 0"),
        (lambda: ManualClock().advance(-1), "seconds=-1 is below the minimum of 0"),
        (lambda: BedrockEmulator().quota_used("us.amazon.nova-lite-v1:0", "reserved-input"),
         "has no 'reserved-input' quota"),
        (lambda: BedrockEmulator().quota_used("us.amazon.nova-lite-v1:0", "flex"), "pool='flex' must be one of"),
    ],
)
def test_other_settings_reject_bad_values(build, message):
    with pytest.raises(InvalidPropsError) as excinfo:
        build()
    assert message in str(excinfo.value)


def test_the_endpoint_needs_a_running_emulator():
    with pytest.raises(RuntimeError, match="not running"):
        BedrockEmulator().endpoint_url  # noqa: B018


def test_client_without_boto3_says_how_to_install_it(bedrock_emulator, monkeypatch):
    monkeypatch.setitem(sys.modules, "boto3", None)
    with pytest.raises(ModuleNotFoundError) as excinfo:
        bedrock_emulator.client()
    assert INSTALL_HINT.startswith("pip install boto3 ")
    assert str(excinfo.value).endswith(f"needs boto3, which is not installed: {INSTALL_HINT}")
    assert excinfo.value.name == "boto3"


def test_the_emulator_needs_only_the_standard_library():
    """Without boto3 and botocore: it imports, serves, names unknown paths, and says what fail_next needs."""
    script = f"""
import json, sys, urllib.request, urllib.error
sys.modules["boto3"] = sys.modules["botocore"] = None
from genai_pacer.testing import BedrockEmulator, ModelSpec
with BedrockEmulator([ModelSpec("m", ttft_seconds=0.1)], time_scale=100) as emulator:
    request = urllib.request.Request(emulator.endpoint_url + "/model/m/converse", data={CONVERSE_BODY!r})
    print(json.loads(urllib.request.urlopen(request).read())["usage"]["outputTokens"])
    try:
        urllib.request.urlopen(urllib.request.Request(emulator.endpoint_url + "/async-invoke"))
    except urllib.error.HTTPError as error:
        print(error.code)
    try:
        emulator.fail_next("ThrottlingException")
    except ModuleNotFoundError as error:
        print(error.name)
print(sorted(m for m in sys.modules if m.split(".")[0] in ("boto3", "botocore", "aws_cdk", "jsii") and sys.modules[m]))
"""
    root = _servicemodel.__file__.rsplit("/genai_pacer/", 1)[0]
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                            env={"PYTHONPATH": root, "PATH": "/usr/bin:/bin"})
    assert result.stdout.split() == ["4", "404", "botocore", "[]"], result.stderr


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


def test_the_service_model_is_read_from_the_installed_botocore():
    model = _servicemodel.load()
    assert model is not None and model.source.startswith(botocore.__path__[0])
    assert set(model.operations) == set(SERVICE.operation_names)
    for name in SERVICE.operation_names:
        assert model.operations[name].errors == tuple(e.name for e in SERVICE.operation_model(name).error_shapes)
    assert set(EMULATED_OPERATIONS) < set(model.operations)


def test_the_command_line_emulator_serves_boto3(tmp_path):
    import os

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
                              aws_access_key_id="x", aws_secret_access_key="x", config=Config(retries={"total_max_attempts": 1}))
        response = client.converse(**ask("hi", model=NOVA, max_tokens=100, answer=7))
        assert response["usage"]["outputTokens"] == 7
    finally:
        process.terminate()
        process.wait(timeout=10)


class TestThePytestPlugin:
    @pytest.fixture
    def bedrock_emulator_quota(self):
        return QuotaModel(window="clock-minute")

    def test_the_quota_fixture_chooses_the_algorithm(self, bedrock_emulator):
        assert bedrock_emulator.quota == QuotaModel(window="clock-minute")
        assert bedrock_emulator.time_scale == 20.0
