"""The answer router's handler under test: its environment, a moto table and a stubbed Bedrock client,
shared by the router's tests and the service-tier tests (tests/test_service_tiers.py)."""

from __future__ import annotations

import importlib
import json
import sys
import time

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws
from pacer_runtime import answers

MODEL = "amazon.nova-lite-v1:0"
TABLE = "answers"
MAX_AGE = 3600
PROMPTS = [
    {"key": "ticker-morning#{ticker}", "prompt": "Write this morning's note for {ticker}."},
    {"key": "review-summary#{product}", "prompt": "Summarize the reviews of product {product}."},
    {"key": "k#{n}", "prompt": "Answer {n}."},
]


def converse_response(text: str = "fresh answer") -> dict:
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 12, "outputTokens": 3, "totalTokens": 15},
        "metrics": {"latencyMs": 420},
    }


@pytest.fixture
def router(monkeypatch):
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
        "MODEL_ID": MODEL, "ANSWER_TABLE": TABLE, "ANSWER_TTL_SECONDS": "86400", "MAX_AGE_SECONDS": str(MAX_AGE),
        "WRITE_BACK": "true", "MAX_OUTPUT_TOKENS": "400", "AWS_LAMBDA_FUNCTION_NAME": "router-fn",
        "PROMPTS": json.dumps(PROMPTS), "COALESCE_WAIT_SECONDS": "2",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        boto3.client("dynamodb").create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        sys.modules.pop("answer_router.handler", None)
        module = importlib.import_module("answer_router.handler")
        with Stubber(module.BEDROCK) as stub:
            module.stub = stub
            yield module
            stub.assert_no_pending_responses()  # every queued model answer was asked for


def store(module, key: str, text: str, *, age: float = 0.0, sequence: int | None = None, expires_at: int | None = None,
          generated: float | None = None):
    """Store an answer generated `age` seconds ago, or at `generated` (epoch seconds) when given: a test
    that needs an exact age pins the instant, since the clock moves between two reads."""
    generated = time.time() - age if generated is None else generated
    answers.put_answer(module.DDB, TABLE, answers.Answer(
        key=answers.normalize_key(key), text=text, model_id=MODEL, request_id="precompute-run",
        sequence=int(generated * 1000) if sequence is None else sequence,
        generated_at=answers.iso_utc(generated), expires_at=expires_at,
    ))


def converse_params(prompt: str) -> dict:
    """The Converse call a miss must make: the server's prompt for the key, the router's maxTokens."""
    return {"modelId": MODEL, "messages": [{"role": "user", "content": [{"text": prompt}]}], "inferenceConfig": {"maxTokens": 400}}


def metric_lines(capsys) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith('{"_aws"')]
