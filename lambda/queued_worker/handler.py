"""SQS worker: one Converse call per message, answer stored in DynamoDB, failures reported per message.

Message body (JSON object; any other field is refused, so a misspelt one is never ignored):

    {
      "key": "review#123",                    required: where the answer is stored, normalized by
                                              pacer_runtime.answers.normalize_key (at most 2,048 UTF-8 bytes)
      "prompt": "Summarize ..."               text, or
      "messages": [{"role": "user", "content": [{"text": "..."}]}],   Converse messages
      "system": "You are ...",                optional
      "inferenceConfig": {"maxTokens": 600, "temperature": 0.2},       optional; maxTokens defaults to
                                              and may not exceed MAX_OUTPUT_TOKENS (the time budget's size)
      "additionalModelRequestFields": {"top_k": 40},                    optional
      "requestId": "...",                     optional idempotency key (default: the SQS messageId);
                                              stored as "queue#" + requestId
      "sequence": 1764460000000               optional producer order, in epoch milliseconds (the
                                              unit of SentTimestamp): an integer from 0 to the
                                              message's SentTimestamp + 60,000 (answers.SEQUENCE_SKEW_MS);
                                              default: the SentTimestamp. A larger one is refused, so no
                                              producer can pin a key against later writers.
    }

Per message: claim the request (one model call even when SQS delivers it twice at once), skip it
when the stored answer is this request's or a newer one's, otherwise call the model and write the
answer unless a newer one arrived meanwhile (an older request never replaces a newer answer).
A message that fails (malformed, throttled past the SDK's retries, claimed by another delivery,
any unexpected error) is reported as a batch item failure: it alone returns to the queue and, after
the queue's receive limit, lands in the dead-letter queue. Before each message the worker checks
that the invocation's remaining time covers one more worst-case call (CALL_BUDGET_SECONDS plus the
DynamoDB work); when it does not, the rest of the batch is reported unprocessed and comes back.
Every failure logs one structured line saying why, never the prompt.
"""

from __future__ import annotations

import json
import os
import re
import time
import traceback
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError
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
from pacer_runtime.bedrock import checked_service_tier
from pacer_runtime.structured_log import describe_error

MODEL_ID = os.environ["MODEL_ID"]
TABLE_NAME = os.environ["ANSWER_TABLE"]
#: How long a stored answer lives (its TTL), set by AnswerStore; "" keeps answers until replaced.
ANSWER_TTL_SECONDS = int(os.environ.get("ANSWER_TTL_SECONDS") or 0) or None
LATENCY = os.environ.get("PERFORMANCE_LATENCY") or None
#: The construct's service tier (QueuedInference service_tier), checked at start: a bad value stops
#: the worker before any message is taken, instead of failing every message as a bad request.
SERVICE_TIER = checked_service_tier(os.environ["SERVICE_TIER"]) if os.environ.get("SERVICE_TIER") else None
#: A model call's worst case, SDK retries included (set by QueuedInference from its token props).
CALL_BUDGET_SECONDS = float(os.environ["CALL_BUDGET_SECONDS"])
#: The answer length the budget is sized for: the default maxTokens and its ceiling.
MAX_OUTPUT_TOKENS = int(os.environ["MAX_OUTPUT_TOKENS"])
#: The DynamoDB work around one call (claim, read, write, release, with their retries). Keep equal
#: to genai_pacer.queued_inference.STORE_SECONDS, which sizes the function timeout.
STORE_SECONDS = 2.0
RECORD_BUDGET_MS = (CALL_BUDGET_SECONDS + STORE_SECONDS) * 1000
BODY_FIELDS = frozenset(
    {"key", "prompt", "messages", "system", "inferenceConfig", "additionalModelRequestFields", "requestId", "sequence"}
)

# Module scope: created once per execution environment and reused by every warm invocation. The
# worker handles one message at a time, so a pool of two (one spare) is all it needs. The low-level
# DynamoDB client, not boto3.resource: the resource layer adds about 100 ms to every cold start.
BEDROCK = bedrock_client(
    max_pool_connections=int(os.environ.get("MAX_POOL_CONNECTIONS", "2")),
    max_attempts=int(os.environ.get("BEDROCK_MAX_ATTEMPTS", "4")),
    read_timeout=float(os.environ.get("READ_TIMEOUT_SECONDS", "120")),
)
DDB = answers.store_client()


def emit_metrics(result, request: dict[str, Any] | None = None) -> None:
    """One call's tokens, reservation (input + maxTokens), latency and served mode, per model and per
    model and function (EMF: no API call on the request path); QueuedInference.metric_* reads them.

    Without the request, the reservation uses MAX_OUTPUT_TOKENS: the maxTokens a message gets when
    it sets none, and the most it may set.
    """
    metrics.emit_call(
        result,
        model_id=MODEL_ID,
        request=request,
        max_tokens=None if request is not None else MAX_OUTPUT_TOKENS,
        dimensions=metrics.lambda_dimensions(),
    )


@dataclass(frozen=True)
class Message:
    key: str  # normalized
    request_id: str  # the producer's id: claims are per request
    stored_id: str  # the answer's request_id: namespaced, so it ranks among the queue's own ids only
    sequence: int  # the producer's sequence, else SentTimestamp in ms
    sent_at: str | None
    request: dict[str, Any]


def parse(record: dict) -> Message:
    """The checked message of an SQS record; RequestError says what is wrong (never quoting the prompt)."""
    if not isinstance(record, dict) or not isinstance(record.get("body"), str):
        raise RequestError("the record is not an SQS record with a text body")
    try:
        body = json.loads(record["body"])
    except (TypeError, ValueError) as error:
        raise RequestError(f"body is not JSON: {type(error).__name__} at position {getattr(error, 'pos', '?')}") from None
    except RecursionError:
        raise RequestError("body is JSON nested too deep to read") from None
    if not isinstance(body, dict):
        raise RequestError(f"body must be a JSON object, not a {type(body).__name__}")
    unknown = sorted(set(body) - BODY_FIELDS)
    if unknown:
        shown = [name if _encodable(name) else "(not valid Unicode)" for name in unknown[:10]]
        raise RequestError(f"body has unknown fields {shown}; the fields are {sorted(BODY_FIELDS)}")
    bad_text = _unencodable_path(body, "body")
    if bad_text is not None:
        raise RequestError(f"{bad_text} is not valid Unicode (a lone surrogate, as a cut emoji leaves): fix the producer's text")
    try:
        key = answers.check_key(body.get("key"))
        request_id = answers.check_request_id(body.get("requestId", record.get("messageId")))
    except answers.InvalidKeyError as error:
        raise RequestError(str(error)) from None

    attributes = record.get("attributes")
    sent_ms = attributes.get("SentTimestamp") if isinstance(attributes, dict) else None
    sent_ms = int(sent_ms) if isinstance(sent_ms, str) and sent_ms.isascii() and sent_ms.isdigit() else None
    sequence = body.get("sequence")
    if sequence is not None:
        if not isinstance(sequence, int) or isinstance(sequence, bool):
            raise RequestError(f"sequence must be an integer, not a {type(sequence).__name__}")
        # Epoch ms, at most the send time plus the skew (the worker's clock when SQS gave no send time).
        bound = (sent_ms if sent_ms is not None else int(time.time() * 1000)) + answers.SEQUENCE_SKEW_MS
        if not 0 <= sequence <= bound:
            raise RequestError(
                f"sequence={sequence} must be from 0 to the message's SentTimestamp plus "
                f"{answers.SEQUENCE_SKEW_MS} ms (epoch milliseconds): a larger one would outrank every later writer"
            )
    elif sent_ms is None:
        raise RequestError(
            "the record has no SentTimestamp attribute and the body no sequence: its answer cannot be ordered"
        )

    request = build_converse_request(
        MODEL_ID,
        prompt=body.get("prompt"),
        messages=body.get("messages"),
        system=body.get("system"),
        inference_config=body.get("inferenceConfig"),
        additional_fields=body.get("additionalModelRequestFields"),
        latency=LATENCY,
        service_tier=SERVICE_TIER,
    )
    config = request.setdefault("inferenceConfig", {})
    max_tokens = config.setdefault("maxTokens", MAX_OUTPUT_TOKENS)
    if max_tokens > MAX_OUTPUT_TOKENS:
        raise RequestError(
            f"inferenceConfig.maxTokens={max_tokens} exceeds this worker's max_output_tokens={MAX_OUTPUT_TOKENS}, "
            "which its time budget is sized for: lower maxTokens or raise max_output_tokens on QueuedInference"
        )
    return Message(
        key=key,
        request_id=request_id,
        stored_id=answers.WRITER_PREFIXES["queue"] + request_id,
        sequence=sequence if sequence is not None else sent_ms,  # type: ignore[arg-type]
        sent_at=answers.iso_utc(sent_ms / 1000) if sent_ms is not None else None,
        request=request,
    )


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _unencodable_path(value: Any, path: str) -> str | None:
    """The path of the first string (or object key) UTF-8 cannot hold, or None. JSON escapes can carry
    lone surrogates, which botocore cannot send: found here, the message fails alone with its reason."""
    stack = [(value, path)]
    while stack:
        current, where = stack.pop()
        if isinstance(current, str):
            if not _encodable(current):
                return where
        elif isinstance(current, dict):
            for name, item in current.items():
                if not _encodable(name):
                    return f"a field name in {where}"
                stack.append((item, f"{where}.{name}"[:200]))
        elif isinstance(current, list):
            stack.extend((item, f"{where}[{index}]"[:200]) for index, item in enumerate(current))
    return None


def process(record: dict) -> bool:
    """Handle one record; True when it is done (delete it), False when it must come back later."""
    message = parse(record)
    ids = {"messageId": record.get("messageId"), "requestId": message.request_id}
    # Claim first, then read: a delivery that finds the answer already stored is skipped, and of
    # deliveries running at once only the claim holder calls the model.
    owner = answers.claim(DDB, TABLE_NAME, message.request_id, seconds=CALL_BUDGET_SECONDS + STORE_SECONDS)
    try:
        stored = answers.get_answer(DDB, TABLE_NAME, message.key)
        if stored is not None and answers.supersedes(stored, message.stored_id, message.sequence):
            same = stored.request_id == message.stored_id
            log("INFO", "already answered" if same else "superseded by a newer answer", **ids,
                storedRequestId=stored.request_id)
            return True
        if owner is None:
            log("INFO", "another delivery of this request is in progress; it comes back later", **ids,
                reason="in-progress")
            return False
        try:
            result = converse(BEDROCK, message.request)
        except (ClientError, BotoCoreError) as error:
            if is_throttle(error):  # throttled past the SDK's retries: the dashboard's throttle line
                metrics.emit_throttle(MODEL_ID, dimensions=metrics.lambda_dimensions())
            raise
        written = answers.put_answer(
            DDB,
            TABLE_NAME,
            answers.Answer.from_result(
                result, key=message.key, model_id=MODEL_ID, request_id=message.stored_id,
                sequence=message.sequence, sent_at=message.sent_at, ttl_seconds=ANSWER_TTL_SECONDS,
            ),
        )
        if not written:
            log("INFO", "a newer answer was stored while this one was generated; kept the newer", **ids)
        emit_metrics(result, message.request)
        return True
    finally:
        if owner is not None:
            _release(message.request_id, owner, ids)


def _release(request_id: str, owner: str, ids: dict) -> None:
    """Release a claim; a failure here only delays a redelivery until the claim expires."""
    try:
        answers.release(DDB, TABLE_NAME, request_id, owner)
    except (ClientError, BotoCoreError) as error:
        log("WARN", "claim not released; it expires on its own", **ids, reason="release-failed",
            **describe_error(error))


_PARAM_PATH = re.compile(
    r"^(?P<kind>Invalid type for (?:document )?parameter|Invalid value for parameter|Invalid length for parameter"
    r"|Missing required parameter in|Unknown parameter in|Invalid parameter"
    r"|Invalid number of parameters set for tagged union structure|Must set one of the following keys for tagged union ?structure)"
    r" (?P<path>[^\s,:]+)(?::? \"(?P<name>[^\"]{0,64})\")?"
)


def param_problems(error: ParamValidationError) -> list[str]:
    """What botocore refused, as 'kind at path' lines: its report quotes the values (the prompt), these do not."""
    problems = []
    for line in str(error.kwargs.get("report", "")).splitlines():
        match = _PARAM_PATH.match(line.strip())
        if match is None:
            problems.append("unrecognized problem")
            continue
        path = match["path"].rstrip(".")[:200] + (f".{match['name']}" if match["name"] else "")
        problems.append(f"{match['kind']} {path}")
    return problems


def _where(error: BaseException) -> str:
    """file:line of the innermost frame, which locates a bug without logging any value."""
    frames = traceback.extract_tb(error.__traceback__)
    return f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else "?"


def message_id_of(record: Any) -> str | None:
    return record.get("messageId") if isinstance(record, dict) else None


def handle(record: dict) -> bool:
    """process(), with every exception turned into this record's failure and one log line."""
    message_id = message_id_of(record)
    try:
        return process(record)
    except RequestError as error:  # our own messages: they name fields and rules, never values
        log("ERROR", "message rejected", messageId=message_id, reason="invalid-message", detail=str(error))
    except ParamValidationError as error:
        log("ERROR", "message rejected by botocore's parameter validation", messageId=message_id,
            reason="invalid-message", **describe_error(error), problems=param_problems(error))
    except (ClientError, BotoCoreError) as error:
        # Never str(error): botocore's and the services' messages can quote the request (the prompt).
        model = isinstance(error, ClientError) and error.operation_name in MODEL_OPERATIONS
        if isinstance(error, ClientError):
            reason = ("throttled" if model else "store-throttled") if _throttled(error) else (
                "model-error" if model else "store-error")
        else:
            reason = "connection-error"  # a timeout or an unreachable endpoint: model or store
        log("ERROR", "model call failed" if model else "model call or store access failed", messageId=message_id,
            reason=reason, **describe_error(error), where=_where(error))
    except Exception as error:  # one record's bug must never fail its neighbours
        log("ERROR", "unexpected error", messageId=message_id, reason="unexpected",
            **describe_error(error), where=_where(error))
    return False


#: Bedrock Runtime operations the worker calls (botocore names), to tell a model error from a store error.
MODEL_OPERATIONS = frozenset({"Converse", "ConverseStream"})
#: DynamoDB's throttling errors (botocore dynamodb 2012-08-10 model: PutItem/GetItem/DeleteItem errors).
STORE_THROTTLE_CODES = frozenset({"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"})


def _throttled(error: ClientError) -> bool:
    code = error.response.get("Error", {}).get("Code")
    return is_throttle(error) or code in STORE_THROTTLE_CODES


def handler(event: dict, context: Any = None) -> dict:
    records = event.get("Records") or []
    failures: list[dict[str, str | None]] = []
    for index, record in enumerate(records):
        if context is not None and context.get_remaining_time_in_millis() < RECORD_BUDGET_MS:
            rest = [message_id_of(r) for r in records[index:]]
            log("WARN", "remaining time cannot cover another worst-case call; returning the rest unprocessed",
                reason="time-budget", remainingMs=context.get_remaining_time_in_millis(),
                neededMs=RECORD_BUDGET_MS, messageIds=rest)
            failures.extend({"itemIdentifier": message_id} for message_id in rest)
            break
        if not handle(record):
            failures.append({"itemIdentifier": message_id_of(record)})
    return {"batchItemFailures": failures}
