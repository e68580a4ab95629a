"""The queue worker (lambda/queued_worker) as Lambda runs it, for the tests of every capability that
drives it: the environment QueuedInference gives it, a moto answers table, Bedrock stubbed, SQS records
as the event source delivers them, and readers for what it stored and logged. The queue's tests
(tests/queue/) and the answer store's integrity tests use it; tests/conftest.py registers it as a plugin,
so the `worker` fixture needs no import."""

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
SECRET = "SECRET-PROMPT-TEXT"
CALL_BUDGET = 60  # seconds, as QueuedInference would set it
T0 = 1_764_460_000_000  # a SentTimestamp, in ms


def worker_environment(monkeypatch, **extra: str) -> None:
    """The environment QueuedInference gives the worker, with dummy credentials."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "MODEL_ID": MODEL,
        "ANSWER_TABLE": TABLE,
        "BEDROCK_MAX_ATTEMPTS": "1",
        "CALL_BUDGET_SECONDS": str(CALL_BUDGET),
        "MAX_OUTPUT_TOKENS": "4096",
        "READ_TIMEOUT_SECONDS": "30",
        **extra,
    }.items():
        monkeypatch.setenv(name, value)


def create_table() -> None:
    boto3.client("dynamodb").create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )


def import_worker():
    sys.modules.pop("queued_worker.handler", None)
    return importlib.import_module("queued_worker.handler")


def load_worker():
    """Create the answers table (inside mock_aws) and import the handler module afresh."""
    create_table()
    return import_worker()


@pytest.fixture
def worker(monkeypatch):
    worker_environment(monkeypatch)
    created = []
    real_client = boto3.client

    def counting_client(service, *args, **kwargs):
        created.append(service)
        return real_client(service, *args, **kwargs)

    with mock_aws():
        create_table()
        monkeypatch.setattr(boto3, "client", counting_client)
        module = import_worker()
        module.created_clients = created
        with Stubber(module.BEDROCK) as stub:
            module.stub = stub
            yield module
            stub.assert_no_pending_responses()


def record(message_id: str, body, sent: int | None = T0) -> dict:
    """An SQS record as the event source delivers it (SentTimestamp in ms, as a string)."""
    attributes = {"ApproximateReceiveCount": "1"}
    if sent is not None:
        attributes["SentTimestamp"] = str(sent)
    return {
        "messageId": message_id,
        "body": body if isinstance(body, str) else json.dumps(body),
        "attributes": attributes,
    }


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


def item(worker, pk: str) -> dict | None:
    """The raw item under `pk`, attribute values unwrapped."""
    found = worker.DDB.get_item(TableName=TABLE, Key={"pk": {"S": pk}}).get("Item")
    if found is None:
        return None
    return {name: value.get("S", value.get("N")) for name, value in found.items()}


def all_keys(worker) -> list[str]:
    return sorted(i["pk"]["S"] for i in worker.DDB.scan(TableName=TABLE)["Items"])


def expect_call(worker, text: str, prompt: str | None = None, max_tokens: int = 4096, **response_kwargs):
    expected = None
    if prompt is not None:
        expected = {
            "modelId": MODEL,
            "messages": [{"role": "user", "content": [{"text": prompt}]}],
            "inferenceConfig": {"maxTokens": max_tokens},
        }
    worker.stub.add_response("converse", answer(text, **response_kwargs), expected)


def log_lines(capsys) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"level"' in line]
