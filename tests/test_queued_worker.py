"""lambda/queued_worker: per-message outcomes, idempotent writes, EMF metrics, one client per process."""

from __future__ import annotations

import importlib
import json
import sys

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

MODEL = "us.anthropic.claude-3-5-haiku-20241022-v1:0"
TABLE = "answers"


def worker_environment(monkeypatch, **extra: str) -> None:
    """The environment QueuedInference gives the worker, with dummy credentials."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "MODEL_ID": MODEL,
        "RESULT_TABLE": TABLE,
        "BEDROCK_MAX_ATTEMPTS": "1",
        **extra,
    }.items():
        monkeypatch.setenv(name, value)


def load_worker():
    """Create the answers table (inside mock_aws) and import the handler module afresh."""
    boto3.resource("dynamodb").create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    sys.modules.pop("queued_worker.handler", None)
    return importlib.import_module("queued_worker.handler")


@pytest.fixture
def worker(monkeypatch):
    worker_environment(monkeypatch)
    created = []
    real_client = boto3.client

    def counting_client(service, *args, **kwargs):
        created.append(service)
        return real_client(service, *args, **kwargs)

    with mock_aws():
        monkeypatch.setattr(boto3, "client", counting_client)
        module = load_worker()
        module.created_clients = created
        with Stubber(module.BEDROCK) as stub:
            module.stub = stub
            yield module
            stub.assert_no_pending_responses()


def record(message_id: str, body) -> dict:
    return {"messageId": message_id, "body": body if isinstance(body, str) else json.dumps(body)}


def answer(text: str, input_tokens=20, output_tokens=5) -> dict:
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": "end_turn",
        "usage": {
            "inputTokens": input_tokens,
            "outputTokens": output_tokens,
            "totalTokens": input_tokens + output_tokens,
        },
        "metrics": {"latencyMs": 100},
    }


def stored(worker, key: str) -> dict | None:
    return worker.TABLE.get_item(Key={"pk": key}).get("Item")


def expect_call(worker, text: str, prompt: str | None = None, **response_kwargs):
    expected = None
    if prompt is not None:
        expected = {"modelId": MODEL, "messages": [{"role": "user", "content": [{"text": prompt}]}]}
    worker.stub.add_response("converse", answer(text, **response_kwargs), expected)


def test_good_batch_stores_each_answer_with_usage(worker, capsys):
    expect_call(worker, "Great product.", prompt="Summarize review 1", input_tokens=30, output_tokens=4)
    expect_call(worker, "Mixed feelings.", prompt="Summarize review 2")
    result = worker.handler(
        {
            "Records": [
                record("m1", {"key": "review#1", "prompt": "Summarize review 1"}),
                record("m2", {"key": "review#2", "prompt": "Summarize review 2"}),
            ]
        }
    )
    assert result == {"batchItemFailures": []}
    item = stored(worker, "review#1")
    assert item["answer"] == "Great product." and item["model_id"] == MODEL
    assert (item["input_tokens"], item["output_tokens"], item["request_id"]) == (30, 4, "m1")
    assert item["created_at"].endswith("+00:00")
    assert stored(worker, "review#2")["answer"] == "Mixed feelings."
    metrics = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert [m["OutputTokens"] for m in metrics] == [4, 5]
    assert metrics[0]["_aws"]["CloudWatchMetrics"][0]["Metrics"][0] == {
        "Name": "InputTokens",
        "Unit": "Count",
    }


def test_mixed_batch_reports_exactly_the_malformed_and_the_throttled(worker, capsys):
    expect_call(worker, "first")
    worker.stub.add_client_error("converse", "ThrottlingException", "Too many tokens, please wait", 429)
    expect_call(worker, "last")
    result = worker.handler(
        {
            "Records": [
                record("ok-1", {"key": "a", "prompt": "one"}),
                record("bad-json", "{not json"),
                record("throttled", {"key": "b", "prompt": "two"}),
                record("ok-2", {"key": "c", "prompt": "three"}),
            ]
        }
    )
    assert result == {"batchItemFailures": [{"itemIdentifier": "bad-json"}, {"itemIdentifier": "throttled"}]}
    assert stored(worker, "a")["answer"] == "first" and stored(worker, "c")["answer"] == "last"
    assert stored(worker, "b") is None
    logs = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"level"' in line]
    assert {(entry["messageId"], entry["reason"]) for entry in logs} == {
        ("bad-json", "invalid-message"),
        ("throttled", "throttled"),
    }


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ([1, 2], "body must be a JSON object"),
        ({"prompt": "no key"}, "key must be a non-empty string"),
        ({"key": "k"}, "exactly one of prompt"),
        ({"key": "k", "prompt": "p", "inferenceConfig": {"top_k": 3}}, "additionalModelRequestFields"),
    ],
)
def test_invalid_bodies_fail_alone_with_a_reason(worker, capsys, body, detail):
    result = worker.handler({"Records": [record("bad", body)]})
    assert result == {"batchItemFailures": [{"itemIdentifier": "bad"}]}
    (line,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert line["reason"] == "invalid-message" and detail in line["detail"]


def test_redelivered_message_is_not_answered_or_written_twice(worker):
    expect_call(worker, "only once")
    message = record("m-1", {"key": "ticker#AMZN", "prompt": "Morning summary"})
    assert worker.handler({"Records": [message]}) == {"batchItemFailures": []}
    first = stored(worker, "ticker#AMZN")
    # redelivery: no second stubbed response, so a second model call would fail the test
    assert worker.handler({"Records": [message]}) == {"batchItemFailures": []}
    assert stored(worker, "ticker#AMZN") == first


def test_a_new_request_for_the_same_key_replaces_the_answer(worker):
    expect_call(worker, "v1")
    expect_call(worker, "v2")
    worker.handler({"Records": [record("m-1", {"key": "k", "prompt": "p", "requestId": "r1"})]})
    worker.handler({"Records": [record("m-2", {"key": "k", "prompt": "p", "requestId": "r2"})]})
    assert (stored(worker, "k")["answer"], stored(worker, "k")["request_id"]) == ("v2", "r2")


def test_a_producer_retry_with_the_same_request_id_is_a_duplicate(worker):
    expect_call(worker, "once")
    worker.handler({"Records": [record("m-1", {"key": "k", "prompt": "p", "requestId": "r1"})]})
    worker.handler({"Records": [record("m-9", {"key": "k", "prompt": "p", "requestId": "r1"})]})
    assert stored(worker, "k")["request_id"] == "r1"


def test_the_bedrock_client_is_created_once_per_process(worker):
    client = worker.BEDROCK
    expect_call(worker, "one")
    expect_call(worker, "two")
    worker.handler({"Records": [record("m1", {"key": "x", "prompt": "p"})]})
    worker.handler({"Records": [record("m2", {"key": "y", "prompt": "p"})]})
    assert worker.BEDROCK is client
    assert worker.created_clients.count("bedrock-runtime") == 1
    assert worker.BEDROCK.meta.config.max_pool_connections == 2


def test_unmodified_worker_against_the_emulator_stores_answers_and_returns_throttles(monkeypatch):
    """The real worker module and a real boto3 client, pointed at the emulator through the standard
    AWS_ENDPOINT_URL_BEDROCK_RUNTIME variable: no stubs on the model side."""
    from genai_pacer.testing import BedrockEmulator, ModelSpec

    spec = ModelSpec(MODEL, burndown=5, tpm_quota=3_000, max_output_tokens=4_096)
    with BedrockEmulator([spec], time_scale=50) as emulator:
        worker_environment(monkeypatch, AWS_ENDPOINT_URL_BEDROCK_RUNTIME=emulator.endpoint_url)
        with mock_aws():
            worker = load_worker()
            small = {"maxTokens": 200}
            result = worker.handler({"Records": [
                record("m-1", {"key": "review#1", "prompt": "Summarize: great battery", "inferenceConfig": small}),
                # Reserves 1 + 4,000 tokens: more than the 3,000-token quota can ever hold.
                record("m-2", {"key": "review#2", "prompt": "Summarize it", "inferenceConfig": {"maxTokens": 4_000}}),
            ]})
            item = stored(worker, "review#1")
    assert result == {"batchItemFailures": [{"itemIdentifier": "m-2"}]}  # back to the queue, then the DLQ
    # The emulator's default 300-token answer, cut at the message's maxTokens; 24 characters = 6 tokens.
    assert (item["output_tokens"], item["stop_reason"], item["input_tokens"]) == (200, "max_tokens", 6)
    assert item["served_latency"] == "standard" and len(item["answer"]) == 200 * 4
    assert [i.outcome for i in emulator.invocations] == ["ok", "throttled"]
