"""AnswerRouter: serve a stored answer by exact key when it is fresh, else call the model.

Request (a function URL POST body, or the event itself when the function is invoked directly):

    {
      "key": "ticker-morning#AAPL",       required: normalized by answers.check_key, as every writer does
      "prompt": "Morning note for AAPL",  required (or "messages": Converse messages): used on a miss
      "system": "...",                     optional
      "inferenceConfig": {"maxTokens": 400},   optional; maxTokens defaults to and may not exceed
                                           MAX_OUTPUT_TOKENS
      "maxAgeSeconds": 3600                optional: a stricter freshness limit than the function's
    }

Response (200): {"answer", "source": "store" | "model", "reason": "hit" | "miss" | "stale", "key"
(normalized), "generatedAt", "modelId", "ageSeconds" (store only), "writtenBack" (model only)}.
A key with no stored answer is a miss, never an error. Errors: 400 {"error": "InvalidRequest",
"message"} for a request that can never succeed, 429 {"error": "Throttled"} when the model
throttled past the SDK's retries, 502 {"error": "ModelError"} for another model error, 500
{"error": "InternalError"}: never a stack trace (the function's log has one line saying why).
A function URL gets {"statusCode", "headers", "body": JSON}; a direct invocation gets the body with
its "statusCode".

Every request emits one EMF count (AnswerHits, AnswerMisses or AnswerStale) so the hit rate shows.
A miss or stale entry is written back (when WRITE_BACK is on) with put_answer: sequence = now in
milliseconds, or one more than the stored answer's if that is higher, so the write replaces what
it read and never an answer written after it. A write-back that fails is logged; the answer is
still returned.

A Python Lambda function cannot stream a miss's answer to its caller: Lambda response streaming
(InvokeWithResponseStream, a function URL in RESPONSE_STREAM mode) is supported only by the
Node.js managed runtime and custom runtimes. When a streamed miss matters, serve misses from a
Node.js function or a container (ECS, App Runner) that calls ConverseStream, or route misses from
the client to such a service, and keep this function for the hits.
"""

from __future__ import annotations

import base64
import json
import math
import os
import time
import traceback
import uuid
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pacer_runtime import (
    RequestError,
    answers,
    bedrock_client,
    build_converse_request,
    converse,
    is_throttle,
    log,
    metrics,
)

MODEL_ID = os.environ["MODEL_ID"]
TABLE_NAME = os.environ["ANSWER_TABLE"]
ANSWER_TTL_SECONDS = int(os.environ.get("ANSWER_TTL_SECONDS") or 0) or None
#: A stored answer older than this is stale: it is regenerated rather than served.
MAX_AGE_SECONDS = float(os.environ["MAX_AGE_SECONDS"])
WRITE_BACK = os.environ.get("WRITE_BACK", "true") == "true"
MAX_OUTPUT_TOKENS = int(os.environ["MAX_OUTPUT_TOKENS"])
LATENCY = os.environ.get("PERFORMANCE_LATENCY") or None
FIELDS = frozenset({"key", "prompt", "messages", "system", "inferenceConfig", "maxAgeSeconds"})
DIMENSIONS = {getattr(metrics, "FUNCTION_DIMENSION", "FunctionName"): os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "local")}

# Module scope: created once per execution environment and reused by warm invocations. One request
# per environment at a time, so a small pool suffices; the low-level DynamoDB client, not the
# resource layer (about 100 ms more cold start).
BEDROCK = bedrock_client(
    max_pool_connections=2,
    max_attempts=int(os.environ.get("BEDROCK_MAX_ATTEMPTS", "3")),
    read_timeout=float(os.environ.get("READ_TIMEOUT_SECONDS", "60")),
)
DDB = answers.store_client(read_timeout=3)


class BadRequest(ValueError):
    """A request that can never succeed as sent."""


def handler(event: Any, context: Any = None) -> dict[str, Any]:
    url = isinstance(event, dict) and "requestContext" in event
    request_id = getattr(context, "aws_request_id", None) or uuid.uuid4().hex
    try:
        status, body = 200, route(parse(event, url), request_id)
    except BadRequest as error:
        status, body = 400, {"error": "InvalidRequest", "message": str(error)}
    except Exception as error:  # every path answers with a body, never a stack trace
        status, body = failure(error, request_id)
    if url:
        return {"statusCode": status, "headers": {"content-type": "application/json"}, "body": json.dumps(body)}
    return {"statusCode": status, **body}


def parse(event: Any, url: bool) -> dict[str, Any]:
    """The request object: the URL body decoded, or the direct invocation's event."""
    if url:
        raw = event.get("body") or ""
        try:
            text = base64.b64decode(raw).decode() if event.get("isBase64Encoded") else raw
            request = json.loads(text)
        except (ValueError, UnicodeDecodeError) as error:
            raise BadRequest(f"body is not JSON ({type(error).__name__}); send a JSON object with key and prompt") from None
    else:
        request = event
    if not isinstance(request, dict):
        raise BadRequest(f"the request must be a JSON object with key and prompt, not a {type(request).__name__}")
    unknown = sorted(str(k) for k in set(request) - FIELDS)
    if unknown:
        raise BadRequest(f"unknown fields {unknown[:10]}; the fields are {sorted(FIELDS)}")
    return request


def route(request: dict[str, Any], request_id: str) -> dict[str, Any]:
    try:
        key = answers.check_key(request.get("key"))
    except answers.InvalidKeyError as error:
        raise BadRequest(str(error)) from None
    max_age = request.get("maxAgeSeconds", MAX_AGE_SECONDS)
    if isinstance(max_age, bool) or not isinstance(max_age, int | float) or not math.isfinite(max_age) or max_age < 0:
        raise BadRequest("maxAgeSeconds must be a number of seconds >= 0")
    max_age = min(float(max_age), MAX_AGE_SECONDS)  # a caller may ask for fresher, never for staler
    call = converse_request(request)  # checked before the lookup: a bad request fails on a hit too

    now = time.time()
    stored = answers.get_answer(DDB, TABLE_NAME, key)
    age = age_of(stored, now) if stored is not None else None
    if stored is not None and age is not None and age <= max_age and not expired(stored, now):
        metrics.emit({metrics.ANSWER_HITS: 1}, DIMENSIONS)
        return {"answer": stored.text, "source": "store", "reason": "hit", "key": key,
                "generatedAt": stored.generated_at, "modelId": stored.model_id, "ageSeconds": round(age, 3)}

    reason = "miss" if stored is None else "stale"
    metrics.emit({metrics.ANSWER_MISSES if stored is None else metrics.ANSWER_STALE: 1}, DIMENSIONS)
    result = converse(BEDROCK, call)
    generated = time.time()
    written = False
    if WRITE_BACK and result.text:
        written = write_back(key, result, stored, generated, request_id)
    return {"answer": result.text, "source": "model", "reason": reason, "key": key,
            "generatedAt": answers.iso_utc(generated), "modelId": MODEL_ID, "writtenBack": written}


def converse_request(request: dict[str, Any]) -> dict[str, Any]:
    try:
        call = build_converse_request(
            MODEL_ID,
            prompt=request.get("prompt"),
            messages=request.get("messages"),
            system=request.get("system"),
            inference_config=request.get("inferenceConfig"),
            latency=LATENCY,
        )
    except RequestError as error:
        raise BadRequest(str(error)) from None
    config = call.setdefault("inferenceConfig", {})
    max_tokens = config.setdefault("maxTokens", MAX_OUTPUT_TOKENS)
    if max_tokens > MAX_OUTPUT_TOKENS:
        raise BadRequest(
            f"inferenceConfig.maxTokens={max_tokens} exceeds this router's limit of {MAX_OUTPUT_TOKENS} "
            "(max_output_tokens on AnswerRouter): lower maxTokens"
        )
    return call


def age_of(stored: answers.Answer, now: float) -> float | None:
    """Seconds since the stored answer was generated; None when its time cannot be read (then stale)."""
    try:
        generated = datetime.fromisoformat(stored.generated_at)
    except ValueError:
        return None
    if generated.tzinfo is None:
        return None
    return max(0.0, now - generated.timestamp())


def expired(stored: answers.Answer, now: float) -> bool:
    """Past its TTL: DynamoDB deletes expired items within days, not at once."""
    return stored.expires_at is not None and stored.expires_at <= now


def write_back(key: str, result: Any, stored: answers.Answer | None, generated: float, request_id: str) -> bool:
    sequence = int(generated * 1000)
    if stored is not None and stored.sequence >= sequence:
        sequence = stored.sequence + 1  # replace what was read, even if its writer's clock ran ahead
    try:
        return answers.put_answer(
            DDB, TABLE_NAME,
            answers.Answer.from_result(
                result, key=key, model_id=MODEL_ID, request_id=f"router#{request_id}",
                sequence=min(sequence, answers.MAX_SEQUENCE), ttl_seconds=ANSWER_TTL_SECONDS, now=generated,
            ),
        )
    except (ClientError, BotoCoreError, ValueError) as error:
        log("WARN", "write-back failed; the answer is returned anyway", key_bytes=len(key.encode()),
            error=type(error).__name__, code=_code(error))
        return False


def failure(error: Exception, request_id: str) -> tuple[int, dict[str, Any]]:
    if isinstance(error, ClientError) and is_throttle(error):
        log("WARN", "model throttled past the SDK's retries", requestId=request_id, code=_code(error))
        return 429, {"error": "Throttled", "message": "the model's quota is exhausted right now; retry with backoff"}
    if isinstance(error, ClientError) and error.operation_name in ("Converse", "ConverseStream"):
        log("ERROR", "model call failed", requestId=request_id, code=_code(error))
        return 502, {"error": "ModelError", "code": _code(error)}
    log("ERROR", "unexpected error", requestId=request_id, error=type(error).__name__,
        trace=traceback.format_exception_only(type(error), error)[-1].strip()[:500])
    return 500, {"error": "InternalError", "requestId": request_id}


def _code(error: Exception) -> str:
    return error.response.get("Error", {}).get("Code", "") if isinstance(error, ClientError) else ""
