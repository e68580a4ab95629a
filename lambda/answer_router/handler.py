"""AnswerRouter: serve a stored answer by exact key when it is fresh, else generate it from the key.

Request (a function URL POST body, or the event itself when the function is invoked directly):

    {
      "key": "ticker-morning#AAPL",   required: normalized by answers.check_key, as every writer does
      "maxAgeSeconds": 3600           optional: a stricter freshness limit for this caller only
    }

The prompt is never the caller's: it is built on the server from the key. The router's PROMPTS
(AnswerRouter's `prompts`) map key patterns to templates, e.g. "ticker-morning#{ticker}" ->
"Write this morning's note for {ticker}."; a key's '#'-separated segments fill the template's
variables, so the answer stored under a key is reproducible from the key alone and no caller can
store an answer to a prompt of their choosing. A request carrying "prompt", "messages", "system"
or "inferenceConfig" is refused (400).

Response (200): {"answer", "source": "store" | "model", "reason": "hit" | "miss" | "stale" |
"coalesced", "key" (normalized), "generatedAt", "modelId", "ageSeconds" (store only),
"writtenBack" (model only)}. "coalesced": another request generated the answer while this one
waited for it.

Freshness: a stored answer is fresh while its age is at most max_age (MAX_AGE_SECONDS, or the
caller's shorter maxAgeSeconds; age == max_age is still fresh), it is not past its TTL, and it is
readable and non-empty. An item of the wrong types, an empty answer or a generated_at beyond now
plus CLOCK_SKEW_SECONDS is treated as absent (logged by key size, never its text). A caller's
maxAgeSeconds only narrows what that caller accepts: when the stored answer is fresh for the
router but not for the caller, the model answers that caller and nothing is written.

One model call per key: a miss that will write back first takes a per-key claim in the store
(pacer_runtime.key_claims), so concurrent misses across Lambda environments make one call; the
others poll the store for the answer for up to COALESCE_WAIT_SECONDS (half FUNCTION_TIMEOUT_SECONDS
when only that is set; bounded by the function's remaining time), then answer 503 AnswerPending with Retry-After. When the holder's call failed
transiently, the requests that waited for it, and any claimant within that failure's Retry-After,
get the same status and Retry-After without another call.

Errors (a JSON body {"error", "message"}, never a stack trace; 429/503 also carry a Retry-After
header, and "retryAfterSeconds" in the body): 400 InvalidRequest (a request that can never
succeed: bad JSON, not an object, a key that is not valid Unicode, unknown or caller-prompt
fields), 404 NoAnswer (no fresh stored answer and no prompt for the key), 429 Throttled (the
model throttled past the SDK's retries), 502 ModelError (the model refused the call), 502
ModelUnreachable, 502 EmptyAnswer (the model answered nothing; nothing is written), 503
ModelUnavailable, 504 ModelTimeout, 503 StoreThrottled (DynamoDB throttled the read or claim),
503 StoreUnavailable, 503 AnswerPending, 500 StoreError (the table refused access or is
missing: a deployment problem), 500 InternalError. A function URL gets {"statusCode", "headers",
"body": JSON}; a direct invocation gets the body with its "statusCode". Logs name the error's
class, code and HTTP status (structured_log.describe_error), never its message or the key.

Every request that reaches the store emits one EMF count (AnswerHits, AnswerMisses or AnswerStale),
and every 5xx answer but AnswerPending one AnswerServerErrors count. Every model call that returns
emits metrics.emit_call's line (tokens, latency, the tier asked for and the tier that served it).
A write-back uses put_answer: sequence = now in milliseconds, or one more than the stored answer's if that is
higher, so the write replaces what it read and never an answer written after it. A write-back
that fails is logged; the answer is still returned.

A Python Lambda function cannot stream a miss's answer to its caller: Lambda response streaming
(InvokeWithResponseStream, a function URL in RESPONSE_STREAM mode) is supported only by the
Node.js managed runtime and custom runtimes. When a streamed miss matters, serve misses from a
Node.js function or a container (ECS, App Runner) that calls ConverseStream, and keep this
function for the hits.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import random
import re
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, ReadTimeoutError
from botocore.exceptions import ConnectionError as Unreachable
from pacer_runtime import (
    answers,
    bedrock_client,
    build_converse_request,
    converse,
    is_throttle,
    key_claims,
    log,
    metrics,
)
from pacer_runtime.bedrock import checked_service_tier
from pacer_runtime.structured_log import describe_error

MODEL_ID = os.environ["MODEL_ID"]
TABLE_NAME = os.environ["ANSWER_TABLE"]
ANSWER_TTL_SECONDS = int(os.environ.get("ANSWER_TTL_SECONDS") or 0) or None
#: A stored answer older than this is stale for every caller: it is regenerated and replaced.
MAX_AGE_SECONDS = float(os.environ["MAX_AGE_SECONDS"])
WRITE_BACK = os.environ.get("WRITE_BACK", "true") == "true"
MAX_OUTPUT_TOKENS = int(os.environ["MAX_OUTPUT_TOKENS"])
#: How long a miss waits for another request's answer to the same key before answering 503: the
#: router's coalesce_wait, or (a deploy-time timeout, which synth cannot halve) half the function's
#: timeout, FUNCTION_TIMEOUT_SECONDS; 10 s when neither is set.
COALESCE_WAIT_SECONDS = float(
    os.environ.get("COALESCE_WAIT_SECONDS") or float(os.environ.get("FUNCTION_TIMEOUT_SECONDS") or 20) / 2
)
SYSTEM_PROMPT = os.environ.get("SYSTEM_PROMPT") or None
LATENCY = os.environ.get("PERFORMANCE_LATENCY") or None
#: The construct's service tier (AnswerRouter service_tier), checked at start: a bad value stops the
#: function before it answers, instead of failing every miss.
SERVICE_TIER = checked_service_tier(os.environ["SERVICE_TIER"]) if os.environ.get("SERVICE_TIER") else None
FIELDS = frozenset({"key", "maxAgeSeconds"})
#: Fields of the old caller-prompt request: refused by name, since a caller's prompt must not
#: decide what is stored under a shared key.
PROMPT_FIELDS = frozenset({"prompt", "messages", "system", "inferenceConfig"})
DIMENSIONS = {getattr(metrics, "FUNCTION_DIMENSION", "FunctionName"): os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "local")}
#: A generated_at further ahead of this function's clock than this is invalid, not fresh forever
#: (the store's own bound, answers.CLOCK_SKEW_SECONDS).
CLOCK_SKEW_SECONDS = getattr(answers, "CLOCK_SKEW_SECONDS", 60)
#: Time kept back from the function's remaining time to send the response.
RESPONSE_MARGIN_SECONDS = 1.0
#: A claim without a Lambda context (local runs) lasts this long.
DEFAULT_CLAIM_SECONDS = 60.0
#: DynamoDB's throttling error codes (botocore dynamodb service-2.json: ProvisionedThroughputExceededException,
#: RequestLimitExceeded, ThrottlingException).
STORE_THROTTLE_CODES = frozenset({"ProvisionedThroughputExceededException", "RequestLimitExceeded", "ThrottlingException"})
#: Bedrock Runtime errors that mean "not now" (botocore bedrock-runtime service-2.json: ServiceUnavailableException
#: httpStatusCode 503, ModelNotReadyException 429, InternalServerException 500) and "took too long"
#: (ModelTimeoutException 408).
MODEL_UNAVAILABLE_CODES = frozenset({"ServiceUnavailableException", "ModelNotReadyException", "InternalServerException"})
MODEL_TIMEOUT_CODES = frozenset({"ModelTimeoutException"})
RETRY_AFTER_SECONDS = 2

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


class Refusal(Exception):
    """An answer other than 200: its status, error name, message and Retry-After (seconds or None)."""

    def __init__(self, status: int, error: str, message: str, retry_after: int | None = None, **extra: Any) -> None:
        super().__init__(error)
        self.status, self.error, self.message, self.retry_after, self.extra = status, error, message, retry_after, extra


@dataclass(frozen=True)
class KeyPrompt:
    """One of PROMPTS: a key pattern ('#'-separated segments, "{name}" segments are variables) and
    the template those variables fill."""

    segments: tuple[str, ...]
    template: str

    def prompt_for(self, key: str) -> str | None:
        parts = key.split("#")
        if len(parts) != len(self.segments):
            return None
        values: dict[str, str] = {}
        for segment, part in zip(self.segments, parts, strict=True):
            name = _variable(segment)
            if name is None:
                if part != segment:
                    return None
            elif not part.strip():
                return None
            else:
                values[name] = part
        return self.template.format_map(values)


def _variable(segment: str) -> str | None:
    match = re.fullmatch(r"\{([a-z_][a-z0-9_]*)\}", segment)
    return match.group(1) if match else None


def load_prompts(text: str) -> tuple[KeyPrompt, ...]:
    """PROMPTS as the construct wrote it (checked at synth): [{"key": pattern, "prompt": template}, ...]."""
    return tuple(KeyPrompt(tuple(entry["key"].split("#")), entry["prompt"]) for entry in json.loads(text or "[]"))


PROMPTS = load_prompts(os.environ.get("PROMPTS", ""))


def handler(event: Any, context: Any = None) -> dict[str, Any]:
    url = isinstance(event, dict) and "requestContext" in event
    request_id = getattr(context, "aws_request_id", None) or uuid.uuid4().hex
    retry_after: int | None = None
    try:
        status, body = 200, route(parse(event, url), request_id, context)
    except BadRequest as error:
        status, body = 400, {"error": "InvalidRequest", "message": str(error)}
    except Refusal as refusal:
        status, retry_after = refusal.status, refusal.retry_after
        body = {"error": refusal.error, "message": refusal.message, **refusal.extra}
        if retry_after is not None:
            body["retryAfterSeconds"] = retry_after
    except Exception as error:  # every path answers with a body, never a stack trace
        status, body = failure(error, request_id)
    if status >= 500 and body.get("error") != metrics.ANSWER_PENDING:
        metrics.emit({metrics.ANSWER_SERVER_ERRORS: 1}, DIMENSIONS)  # AnswerRouter's ServerErrors alarm reads it
    if url:
        headers = {"content-type": "application/json"}
        if retry_after is not None:
            headers["retry-after"] = str(retry_after)
        return {"statusCode": status, "headers": headers, "body": json.dumps(body)}
    return {"statusCode": status, **body}


def parse(event: Any, url: bool) -> dict[str, Any]:
    """The request object: the URL body decoded, or the direct invocation's event."""
    if url:
        raw = event.get("body")
        if raw is None:
            raw = ""
        if not isinstance(raw, str):
            raise BadRequest(f"body is {_kind(raw)}, not text; send a JSON object with key")
        try:
            text = base64.b64decode(raw, validate=True).decode() if event.get("isBase64Encoded") else raw
            request = json.loads(text)
        except (ValueError, UnicodeDecodeError, binascii.Error, RecursionError) as error:
            raise BadRequest(f"body is not JSON ({type(error).__name__}); send a JSON object with key") from None
    else:
        request = event
    if not isinstance(request, dict):
        raise BadRequest(f"the request must be a JSON object with key, not {_kind(request)}")
    prompt_fields = sorted(PROMPT_FIELDS & set(request))
    if prompt_fields:
        raise BadRequest(
            f"{prompt_fields} are not accepted: this router builds the prompt from the key on the server "
            "(AnswerRouter prompts=...), so an answer stored under a key never depends on a caller's prompt; "
            "send only key (and maxAgeSeconds)"
        )
    unknown = sorted(_printable(k) for k in set(request) - FIELDS)
    if unknown:
        raise BadRequest(f"unknown fields {unknown[:10]}; the fields are {sorted(FIELDS)}")
    return request


def route(request: dict[str, Any], request_id: str, context: Any = None) -> dict[str, Any]:
    started = time.time()
    key = checked_key(request.get("key"))
    caller_max_age = request.get("maxAgeSeconds", MAX_AGE_SECONDS)
    if (
        isinstance(caller_max_age, bool) or not isinstance(caller_max_age, int | float)
        or not math.isfinite(caller_max_age) or caller_max_age < 0
    ):
        raise BadRequest("maxAgeSeconds must be a number of seconds >= 0")
    max_age = min(float(caller_max_age), MAX_AGE_SECONDS)  # a caller may ask for fresher, never for staler

    stored = read(key)
    if fresh(stored, started, max_age):
        assert stored is not None
        metrics.emit({metrics.ANSWER_HITS: 1}, DIMENSIONS)
        return served(stored, key, "hit", started)

    prompt = next((p for p in (kp.prompt_for(key) for kp in PROMPTS) if p is not None), None)
    reason = "miss" if stored is None else "stale"
    metrics.emit({metrics.ANSWER_MISSES if stored is None else metrics.ANSWER_STALE: 1}, DIMENSIONS)
    if prompt is None:
        raise Refusal(404, "NoAnswer", "no fresh answer is stored for this key, and it matches none of this "
                      "router's prompts (AnswerRouter prompts=...), so none can be generated")
    call = converse_request(prompt)
    replaceable = not fresh(stored, started, MAX_AGE_SECONDS)  # stale for the router, not only this caller
    if not (WRITE_BACK and replaceable):
        result = call_model(call)
        return generated(result, key, reason, written=False)
    return coalesced(key, call, stored, reason, request_id, context, started, max_age)


def coalesced(
    key: str, call: dict[str, Any], stored: answers.Answer | None, reason: str, request_id: str,
    context: Any, started: float, max_age: float,
) -> dict[str, Any]:
    """One model call per key across environments: take the key's claim and generate, or wait for
    whoever holds it to store the answer."""
    remaining = _remaining_seconds(context)
    deadline = started + max(0.0, min(COALESCE_WAIT_SECONDS, remaining - RESPONSE_MARGIN_SECONDS))
    claim_seconds = min(key_claims.MAX_CLAIM_SECONDS, remaining + 2) if context is not None else DEFAULT_CLAIM_SECONDS
    pause = 0.05
    while True:
        taken = store_call(lambda: key_claims.claim(DDB, TABLE_NAME, key, seconds=claim_seconds))
        if taken is not None:
            return generate_claimed(key, call, stored, reason, request_id, taken, started, max_age)
        if time.time() >= deadline:
            wait = RETRY_AFTER_SECONDS
            raise Refusal(503, metrics.ANSWER_PENDING, "another request is generating this key's answer; retry shortly", wait)
        time.sleep(min(pause * (0.5 + random.random()), max(0.0, deadline - time.time())))
        pause = min(pause * 2, 1.0)
        latest = read(key)
        if acceptable(latest, started, max_age):
            assert latest is not None
            return served(latest, key, "coalesced", started)


def generate_claimed(
    key: str, call: dict[str, Any], stored: answers.Answer | None, reason: str, request_id: str,
    taken: key_claims.Claim, started: float, max_age: float,
) -> dict[str, Any]:
    """Holding the key's claim: serve what arrived meanwhile, repeat the holder's recent failure, or call."""
    failure: key_claims.Failure | None = None
    try:
        previous = taken.previous_failure
        if previous is not None and (previous.failed_at >= started or time.time() < previous.failed_at + previous.retry_after):
            failure = previous  # the holder just failed (while this request waited): do not pay to fail again
            raise Refusal(previous.status, previous.error, "the model call for this key failed just now; retry later",
                          previous.retry_after)
        latest = read(key)  # an answer written between our read and our claim
        if acceptable(latest, started, max_age):
            assert latest is not None
            return served(latest, key, "coalesced", started)
        try:
            result = call_model(call)
        except Refusal as refusal:
            if refusal.retry_after is not None:
                failure = key_claims.Failure(refusal.status, refusal.error, time.time(), refusal.retry_after)
            raise
        written = write_back(key, result, latest if latest is not None else stored, request_id)
        return generated(result, key, reason, written=written)
    finally:
        try:
            key_claims.release(DDB, TABLE_NAME, key, taken.owner, failure=failure)
        except (ClientError, BotoCoreError) as error:  # the claim expires on its own
            log("WARN", "releasing the key claim failed; it expires on its own", **describe_error(error))


def checked_key(value: Any) -> str:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise BadRequest("key is not valid Unicode (a lone surrogate, e.g. half an emoji): send UTF-8 text") from None
    try:
        return answers.check_key(value)
    except answers.InvalidKeyError as error:
        raise BadRequest(str(error)) from None


def converse_request(prompt: str) -> dict[str, Any]:
    return build_converse_request(
        MODEL_ID, prompt=prompt, system=SYSTEM_PROMPT, inference_config={"maxTokens": MAX_OUTPUT_TOKENS}, latency=LATENCY,
        service_tier=SERVICE_TIER,
    )


def read(key: str) -> answers.Answer | None:
    """The stored answer, or None when absent, unreadable or empty (then it is a miss and replaceable)."""
    try:
        stored = store_call(lambda: answers.get_answer(DDB, TABLE_NAME, key))
    except (KeyError, TypeError, ValueError, AttributeError, ArithmeticError) as error:
        log("WARN", "stored item unreadable; treated as a miss", key_bytes=len(key.encode()), **describe_error(error))
        return None
    if stored is None:
        return None
    if not isinstance(stored.text, str) or not stored.text.strip():
        log("WARN", "stored answer empty; treated as a miss", key_bytes=len(key.encode()))
        return None
    return stored


def fresh(stored: answers.Answer | None, now: float, max_age: float) -> bool:
    if stored is None:
        return False
    age = age_of(stored, now)
    return age is not None and age <= max_age and not expired(stored, now)


def acceptable(stored: answers.Answer | None, started: float, max_age: float) -> bool:
    """Fresh for this caller, or generated after this request began (as fresh as any answer can be)."""
    now = time.time()
    if stored is None or expired(stored, now):
        return False
    generated_at = _epoch(stored.generated_at)
    return fresh(stored, now, max_age) or (generated_at is not None and started - 0.001 <= generated_at <= now + CLOCK_SKEW_SECONDS)


def age_of(stored: answers.Answer, now: float) -> float | None:
    """Seconds since the stored answer was generated; None when its time cannot be read or lies beyond
    the clock skew in the future (then it is stale: one bad item must not be fresh forever)."""
    generated = _epoch(stored.generated_at)
    if generated is None or generated > now + CLOCK_SKEW_SECONDS:
        return None
    return max(0.0, now - generated)


def _epoch(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        generated = datetime.fromisoformat(text)
    except ValueError:
        return None
    return generated.timestamp() if generated.tzinfo is not None else None


def expired(stored: answers.Answer, now: float) -> bool:
    """Past its TTL: DynamoDB deletes expired items within days, not at once."""
    expires_at = stored.expires_at
    return isinstance(expires_at, int | float) and not isinstance(expires_at, bool) and expires_at <= now


def served(stored: answers.Answer, key: str, reason: str, started: float) -> dict[str, Any]:
    age = age_of(stored, time.time())
    return {"answer": stored.text, "source": "store", "reason": reason, "key": key, "generatedAt": stored.generated_at,
            "modelId": stored.model_id, "ageSeconds": round(age if age is not None else 0.0, 3)}


def generated(result: Any, key: str, reason: str, *, written: bool) -> dict[str, Any]:
    return {"answer": result.text, "source": "model", "reason": reason, "key": key,
            "generatedAt": answers.iso_utc(result.generated), "modelId": MODEL_ID, "writtenBack": written}


@dataclass(frozen=True)
class Generated:
    text: str
    generated: float
    result: Any


def call_model(call: dict[str, Any]) -> Generated:
    """The model's non-empty answer, or a Refusal naming what failed: the model, its quota or the network."""
    try:
        result = converse(BEDROCK, call)
    except ClientError as error:
        code = _code(error)
        log("WARN" if is_throttle(error) else "ERROR", "model call failed", **describe_error(error))
        if is_throttle(error):
            raise Refusal(429, "Throttled", "the model's quota is exhausted right now; retry with backoff",
                          RETRY_AFTER_SECONDS) from None
        if code in MODEL_UNAVAILABLE_CODES:
            raise Refusal(503, "ModelUnavailable", "the model is unavailable right now; retry with backoff",
                          RETRY_AFTER_SECONDS, code=code) from None
        if code in MODEL_TIMEOUT_CODES:
            raise Refusal(504, "ModelTimeout", "the model took too long to answer", RETRY_AFTER_SECONDS, code=code) from None
        raise Refusal(502, "ModelError", "the model refused the call", code=code) from None
    except ReadTimeoutError as error:
        log("ERROR", "model call timed out", **describe_error(error))
        raise Refusal(504, "ModelTimeout", "the model did not answer in time", RETRY_AFTER_SECONDS) from None
    except Unreachable as error:
        log("ERROR", "model unreachable", **describe_error(error))
        raise Refusal(502, "ModelUnreachable", "the model endpoint could not be reached", RETRY_AFTER_SECONDS) from None
    except BotoCoreError as error:
        log("ERROR", "model call failed", **describe_error(error))
        raise Refusal(502, "ModelError", "the model call failed") from None
    # The call's tokens, latency and tiers (asked for, served, served below), as the queue worker's:
    # the router is the user's path, so a Priority miss served at default must reach the tier alarm.
    metrics.emit_call(result, model_id=MODEL_ID, request=call, dimensions=metrics.lambda_dimensions())
    if not result.text.strip():
        log("WARN", "the model answered nothing; not stored", stopReason=str(result.stop_reason)[:40])
        raise Refusal(502, "EmptyAnswer", "the model returned an empty answer; nothing was stored")
    return Generated(result.text, time.time(), result)


def store_call(call: Any) -> Any:
    """Run one store call; DynamoDB's failures become Refusals that name the store, not the model."""
    try:
        return call()
    except ClientError as error:
        code = _code(error)
        log("WARN", "answer store call failed", **describe_error(error))
        if code in STORE_THROTTLE_CODES:
            raise Refusal(503, "StoreThrottled", "the answer store is throttling reads; retry shortly",
                          RETRY_AFTER_SECONDS) from None
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        if isinstance(status, int) and status >= 500:
            raise Refusal(503, "StoreUnavailable", "the answer store is unavailable; retry shortly",
                          RETRY_AFTER_SECONDS) from None
        raise Refusal(500, "StoreError", "the answer store refused the call (a deployment problem)", code=code) from None
    except BotoCoreError as error:
        log("WARN", "answer store unreachable", **describe_error(error))
        raise Refusal(503, "StoreUnavailable", "the answer store could not be reached; retry shortly",
                      RETRY_AFTER_SECONDS) from None


def write_back(key: str, answer: Generated, stored: answers.Answer | None, request_id: str) -> bool:
    sequence = int(answer.generated * 1000)
    stored_sequence = getattr(stored, "sequence", None)
    if isinstance(stored_sequence, int) and not isinstance(stored_sequence, bool) and stored_sequence >= sequence:
        sequence = stored_sequence + 1  # replace what was read, even if its writer's clock ran ahead
    # A sequence beyond now plus the store's skew is refused by put_answer (and invalid to readers).
    sequence = min(sequence, int(answer.generated * 1000) + getattr(answers, "SEQUENCE_SKEW_MS", 0), answers.MAX_SEQUENCE)
    try:
        return answers.put_answer(
            DDB, TABLE_NAME,
            answers.Answer.from_result(
                answer.result, key=key, model_id=MODEL_ID, request_id=f"router#{request_id}",
                sequence=sequence, ttl_seconds=ANSWER_TTL_SECONDS, now=answer.generated, requested_tier=SERVICE_TIER,
            ),
        )
    except (ClientError, BotoCoreError, ValueError) as error:
        log("WARN", "write-back failed; the answer is returned anyway", key_bytes=len(key.encode()),
            **describe_error(error))
        return False


def failure(error: Exception, request_id: str) -> tuple[int, dict[str, Any]]:
    log("ERROR", "unexpected error", requestId=request_id, **describe_error(error))
    return 500, {"error": "InternalError", "requestId": request_id}


def _remaining_seconds(context: Any) -> float:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if callable(remaining):
        try:
            return max(0.0, float(remaining()) / 1000)
        except (TypeError, ValueError):  # a context that is not Lambda's (a test, a local run)
            return DEFAULT_CLAIM_SECONDS
    return DEFAULT_CLAIM_SECONDS


def _code(error: ClientError) -> str:
    code = error.response.get("Error", {}).get("Code", "")
    return code if isinstance(code, str) else ""


def _kind(value: Any) -> str:
    name = type(value).__name__
    return f"{'an' if name[:1] in 'aeiou' else 'a'} {name}"


def _printable(name: Any) -> str:
    text = str(name)
    return text.encode("utf-8", "backslashreplace").decode()[:40]
