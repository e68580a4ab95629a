"""SQS worker: one Converse call per message, answer stored in DynamoDB, failures reported per message.

Message body (JSON):

    {
      "key": "review#123",                    required: where the answer is stored (table pk)
      "prompt": "Summarize ..."               text, or
      "messages": [{"role": "user", "content": [{"text": "..."}]}],   Converse messages
      "system": "You are ...",                optional
      "inferenceConfig": {"maxTokens": 600, "temperature": 0.2},       optional
      "additionalModelRequestFields": {"top_k": 40},                    optional
      "requestId": "..."                      optional idempotency key (default: the SQS messageId)
    }

A message that fails (malformed, throttled past the SDK's retries, timed out) is reported as a
batch item failure: it alone returns to the queue and, after the queue's receive limit, lands in
the dead-letter queue. Every failure logs one structured line saying why.
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from pacer_runtime import RequestError, bedrock_client, build_converse_request, converse, is_throttle

MODEL_ID = os.environ["MODEL_ID"]
TABLE_NAME = os.environ["RESULT_TABLE"]
LATENCY = os.environ.get("PERFORMANCE_LATENCY") or None
METRICS_NAMESPACE = "GenaiPacer"

# Module scope: created once per execution environment and reused by every warm invocation. The
# worker handles one message at a time, so a pool of two (one spare) is all it needs.
BEDROCK = bedrock_client(
    max_pool_connections=int(os.environ.get("MAX_POOL_CONNECTIONS", "2")),
    max_attempts=int(os.environ.get("BEDROCK_MAX_ATTEMPTS", "4")),
)
TABLE = boto3.resource("dynamodb").Table(TABLE_NAME)


def log(level: str, message: str, **fields: Any) -> None:
    print(json.dumps({"level": level, "message": message, **fields}, default=str))


def emit_metrics(result) -> None:
    """CloudWatch embedded metric format: one line, turned into metrics by Logs with no API call."""
    print(
        json.dumps(
            {
                "_aws": {
                    "Timestamp": int(time.time() * 1000),
                    "CloudWatchMetrics": [
                        {
                            "Namespace": METRICS_NAMESPACE,
                            "Dimensions": [["ModelId"]],
                            "Metrics": [
                                {"Name": "InputTokens", "Unit": "Count"},
                                {"Name": "OutputTokens", "Unit": "Count"},
                                {"Name": "LatencyMs", "Unit": "Milliseconds"},
                            ],
                        }
                    ],
                },
                "ModelId": MODEL_ID,
                "InputTokens": result.input_tokens,
                "OutputTokens": result.output_tokens,
                "LatencyMs": result.latency_ms,
            }
        )
    )


def parse(record: dict) -> tuple[str, str, dict]:
    """(key, request id, Converse request) from an SQS record; RequestError says what is wrong."""
    try:
        body = json.loads(record["body"])
    except (TypeError, ValueError) as error:
        raise RequestError(f"body is not JSON: {error}") from None
    if not isinstance(body, dict):
        raise RequestError("body must be a JSON object")
    key = body.get("key")
    if not isinstance(key, str) or not key or len(key) > 1024:
        raise RequestError("key must be a non-empty string of at most 1024 characters")
    request = build_converse_request(
        MODEL_ID,
        prompt=body.get("prompt"),
        messages=body.get("messages"),
        system=body.get("system"),
        inference_config=body.get("inferenceConfig"),
        additional_fields=body.get("additionalModelRequestFields"),
        latency=LATENCY,
    )
    return key, str(body.get("requestId") or record["messageId"]), request


def already_answered(key: str, request_id: str) -> bool:
    item = TABLE.get_item(Key={"pk": key}, ConsistentRead=True).get("Item")
    return bool(item) and item.get("request_id") == request_id


def store(key: str, request_id: str, result) -> None:
    """Write the answer unless this very request already wrote it (a redelivery racing itself)."""
    try:
        TABLE.put_item(
            Item={
                "pk": key,
                "request_id": request_id,
                "answer": result.text,
                "model_id": MODEL_ID,
                "input_tokens": result.input_tokens,
                "output_tokens": result.output_tokens,
                "stop_reason": result.stop_reason,
                "served_latency": result.served_latency,
                "created_at": datetime.now(UTC).isoformat(),
            },
            ConditionExpression="attribute_not_exists(pk) OR request_id <> :rid",
            ExpressionAttributeValues={":rid": request_id},
        )
    except ClientError as error:
        if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
            raise


def process(record: dict) -> None:
    key, request_id, request = parse(record)
    if already_answered(key, request_id):
        log(
            "INFO", "duplicate delivery skipped", messageId=record["messageId"], key=key, requestId=request_id
        )
        return
    result = converse(BEDROCK, request)
    store(key, request_id, result)
    emit_metrics(result)


def handler(event: dict, context: Any = None) -> dict:
    failures = []
    for record in event.get("Records", []):
        message_id = record.get("messageId")
        try:
            process(record)
        except RequestError as error:
            reason = "invalid-message"
            log("ERROR", "message rejected", messageId=message_id, reason=reason, detail=str(error))
            failures.append({"itemIdentifier": message_id})
        except (ClientError, BotoCoreError) as error:
            reason = "throttled" if is_throttle(error) else type(error).__name__
            log("ERROR", "model call or write failed", messageId=message_id, reason=reason, detail=str(error))
            failures.append({"itemIdentifier": message_id})
    return {"batchItemFailures": failures}
