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

With QueuedInference(ledger=...) the worker takes part in the model quota's shared ledger
(pacer_runtime.ledger): before each call it holds the call's reservation there (input + maxTokens x
burndown, the QuotaPacer's hold), after it settles the hold to the real usage (input + cache writes
+ output x burndown; cache reads are free), and a call Bedrock never saw or throttled returns its
hold at once. A message the ledger refuses waits in the queue, not in a throttle: it is sent back
to the queue with a delay and its delivery deleted (see send_back for why not a batch item
failure). While DynamoDB throttles or cannot be reached, the process falls back to its part of the
worker's floor, never unbounded, and publishes LedgerFallbacks.
"""

from __future__ import annotations

import base64
import json
import math
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
from pacer_runtime.ledger import ENVIRONMENT as LEDGER_ENVIRONMENT
from pacer_runtime.ledger import LedgerError, LedgerHold, SharedLedger
from pacer_runtime.quota_pacer import ENVIRONMENT as PACER_ENVIRONMENT
from pacer_runtime.quota_pacer import (
    NEVER_SENT,
    AdmissionRejected,
    QuotaPacer,
    Ticket,
    estimate_input_tokens,
    settled_tokens,
)
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
#: Set by QueuedInference(ledger=...) beside the ledger's own variables (genai_pacer.queue.inference
#: QUEUE_URL_VARIABLE and PROCESSES_VARIABLE; a test keeps the names equal): the queue a refused
#: message goes back to, and how many workers run at once, which splits the floor between them.
QUEUE_URL_VARIABLE = "QUEUE_URL"
PROCESSES_VARIABLE = "MAX_CONCURRENCY"
#: The ledger work around one call (a reservation and its settlement, each with at most
#: LEDGER_DYNAMODB_RETRIES retries of at most 0.05 + 0.1 + 0.2 s of backoff). Keep equal to
#: genai_pacer.queue.inference.LEDGER_SECONDS, which adds it to the function timeout.
LEDGER_SECONDS = 2.0
LEDGER_DYNAMODB_RETRIES = 3
#: After a LedgerError the process stays on its fallback this long before it asks the ledger again
#: (QuotaPacer's ledger_retry_seconds default).
LEDGER_RETRY_SECONDS = 5.0
#: SendMessage's DelaySeconds: "Valid values: 0 to 900", and "When you set FifoQueue, you can't set
#: DelaySeconds per message" (botocore's sqs model, SendMessage). A refused message waits at least
#: MIN_WAIT_SECONDS, so a full quota does not turn into a loop of deliveries.
MAX_DELAY_SECONDS = 900
MIN_WAIT_SECONDS = 1
LEDGER = (SharedLedger.from_environment(dynamodb_retries=LEDGER_DYNAMODB_RETRIES)
          if os.environ.get(LEDGER_ENVIRONMENT[0]) else None)
RECORD_BUDGET_MS = (CALL_BUDGET_SECONDS + STORE_SECONDS + (LEDGER_SECONDS if LEDGER else 0)) * 1000
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
#: Quota tokens per output token (the quota's burndown), for the hold and the settlement.
BURNDOWN = float(os.environ.get(PACER_ENVIRONMENT[2]) or 1)
if LEDGER is not None:
    import boto3

    SQS = boto3.client("sqs")
    QUEUE_URL = os.environ[QUEUE_URL_VARIABLE]
    #: This process's part of the worker's floor: what it may use on its own while the ledger cannot
    #: be used. Never unbounded: a worker without a floor then takes no call (its messages wait).
    FALLBACK_TPM = LEDGER.floor_tpm / max(int(float(os.environ.get(PROCESSES_VARIABLE) or 1)), 1)
    FALLBACK = QuotaPacer(FALLBACK_TPM, burndown=BURNDOWN, max_wait_seconds=0) if FALLBACK_TPM >= 1 else None
#: The process's view of the ledger between messages: on the fallback until `down_until`; refused
#: until `retry_at` (a refusal a moment ago: the next messages wait without asking again).
_LEDGER_STATE: dict[str, Any] = {"down_until": -math.inf, "retry_at": -math.inf, "wait": MIN_WAIT_SECONDS, "reason": ""}


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


@dataclass(frozen=True)
class Wait:
    """The ledger has no room for the call now: the message goes back to the queue for `seconds`."""

    seconds: int
    reason: str


class Held:
    """A call's admission: its hold in the shared ledger, or its ticket on the process's fallback."""

    def __init__(self, hold: LedgerHold | None = None, ticket: Ticket | None = None):
        self.hold, self.ticket = hold, ticket

    def settle(self, result: Any) -> None:
        """Turn the hold into what Bedrock charged: input + cache writes + output x burndown."""
        if self.ticket is not None:
            self.ticket.settle(input_tokens=result.input_tokens, output_tokens=result.output_tokens,
                               cache_write_tokens=result.cache_write_tokens, cache_read_tokens=result.cache_read_tokens)
        if self.hold is not None and LEDGER is not None:
            charge = settled_tokens(result.input_tokens, result.output_tokens,
                                    cache_write_tokens=result.cache_write_tokens, burndown=BURNDOWN)
            self._end(lambda hold: LEDGER.settle(hold, charge), "settle")

    def failed(self, error: BaseException) -> None:
        """A call that failed: a throttle or a request that never left the client (NEVER_SENT, or
        refused by botocore's validation) was charged nothing, so its hold comes back at once; any
        other error keeps it until the window passes (Bedrock may have charged the call)."""
        if not (is_throttle(error) or isinstance(error, NEVER_SENT + (ParamValidationError,))):
            return
        if self.ticket is not None:
            if is_throttle(error):
                self.ticket.throttled()
            else:
                self.ticket.release()
        if self.hold is not None and LEDGER is not None:
            self._end(LEDGER.release, "release")

    def _end(self, end: Any, what: str) -> None:
        try:
            end(self.hold)
        except LedgerError as error:  # the answer still counts; the hold leaves with its window
            log("WARN", f"the shared ledger did not take the {what}; the hold stays until its window passes",
                reason="ledger-error", code=error.code, heldTokens=self.hold.tokens if self.hold else None)


def admit(message: Message) -> Held | Wait:
    """Hold the call's reservation in the shared ledger, or on the fallback while the ledger cannot
    be used; a Wait when neither has room now."""
    assert LEDGER is not None
    max_tokens = message.request["inferenceConfig"]["maxTokens"]
    tokens = estimate_input_tokens(message.request) + math.ceil(max_tokens * BURNDOWN)
    if tokens > LEDGER.burst_tpm:
        raise RequestError(
            f"the call holds {tokens:,} quota tokens (its prompt + maxTokens={max_tokens} x burndown {BURNDOWN:g}), "
            f"more than this worker may hold in the shared ledger ({LEDGER.burst_tpm:,.0f}): lower maxTokens or the prompt"
        )
    state = _LEDGER_STATE
    now = time.monotonic()
    if now < state["down_until"]:
        return _fallback(tokens)
    if now < state["retry_at"]:  # refused a moment ago: the ledger would say the same
        return Wait(state["wait"], state["reason"])
    try:
        outcome = LEDGER.try_reserve(tokens)
    except LedgerError as error:
        state["down_until"] = time.monotonic() + LEDGER_RETRY_SECONDS
        log("WARN", "the shared ledger cannot be used; this process falls back to its part of the worker's floor",
            reason="ledger-fallback", code=error.code, fallbackTpm=FALLBACK_TPM, retryInSeconds=LEDGER_RETRY_SECONDS)
        metrics.emit_ledger_fallback(LEDGER.ledger_id)
        return _fallback(tokens)
    if isinstance(outcome, LedgerHold):
        return Held(hold=outcome)
    # The ledger's own estimate of when the window holds the call (slots leaving it), else its
    # backoff: a message sent back sooner would only be refused again.
    seconds = outcome.ready_in if outcome.ready_in is not None else outcome.retry_in
    state["retry_at"] = time.monotonic() + outcome.retry_in
    state["wait"], state["reason"] = _delay(seconds), outcome.reason
    return Wait(state["wait"], outcome.reason)


def _fallback(tokens: int) -> Held | Wait:
    if FALLBACK is None:
        return Wait(_delay(LEDGER_RETRY_SECONDS), "the shared ledger cannot be used and this worker has no floor")
    if tokens > FALLBACK.tpm:
        return Wait(_delay(LEDGER_RETRY_SECONDS), f"the shared ledger cannot be used, and the call's {tokens:,} tokens "
                    f"exceed this process's part of the floor ({FALLBACK.tpm:,.0f} TPM)")
    try:
        return Held(ticket=FALLBACK.admit(tokens, max_wait_seconds=0))
    except AdmissionRejected as rejected:
        seconds = rejected.earliest_start_seconds
        return Wait(_delay(LEDGER_RETRY_SECONDS if seconds is None else seconds),
                    "the shared ledger cannot be used, and this process's part of the floor is full")


def _delay(seconds: float) -> int:
    return min(max(math.ceil(seconds), MIN_WAIT_SECONDS), MAX_DELAY_SECONDS)


def send_back(record: dict, message: Message, wait: Wait, ids: dict) -> None:
    """Send a refused message back to the queue, delayed by wait.seconds; the delivery is then deleted.

    Why a new message, and not a batch item failure or a shorter visibility: every delivery of a
    message counts toward the queue's redrive limit ("maxReceiveCount - The number of times a
    message is delivered to the source queue before being moved to the dead-letter queue",
    botocore's sqs model, SetQueueAttributes), and neither ChangeMessageVisibility nor a failure
    report resets it: a message refused three times by a busy quota (the default limit) would be
    dead-lettered though nothing is wrong with it. A new message starts at zero deliveries. It keeps
    the request's identity: requestId (claims and the stored answer's id) and sequence (the order
    of answers) are pinned in its body, and its message attributes are copied. A FIFO queue cannot
    delay one message (MAX_DELAY_SECONDS), so QueuedInference refuses a ledger beside one.
    """
    body = json.loads(record["body"])
    body["requestId"], body["sequence"] = message.request_id, message.sequence
    request: dict[str, Any] = {"QueueUrl": QUEUE_URL, "MessageBody": json.dumps(body), "DelaySeconds": wait.seconds}
    attributes = _attributes(record)
    if attributes:
        request["MessageAttributes"] = attributes
    sent = SQS.send_message(**request)
    log("INFO", "the quota's shared ledger has no room now; the message waits in the queue", **ids,
        reason="ledger-wait", ledgerReason=wait.reason, delaySeconds=wait.seconds, resentAs=sent.get("MessageId"))


def _attributes(record: dict) -> dict[str, dict[str, Any]]:
    """The record's message attributes as SendMessage takes them (the event gives binary ones in base64)."""
    copied: dict[str, dict[str, Any]] = {}
    for name, attribute in (record.get("messageAttributes") or {}).items():
        if not isinstance(attribute, dict) or not isinstance(attribute.get("dataType"), str):
            continue
        if isinstance(attribute.get("stringValue"), str):
            copied[name] = {"DataType": attribute["dataType"], "StringValue": attribute["stringValue"]}
        elif isinstance(attribute.get("binaryValue"), str):
            copied[name] = {"DataType": attribute["dataType"], "BinaryValue": base64.b64decode(attribute["binaryValue"])}
    return copied


def process(record: dict) -> bool:
    """Handle one record; True when it is done (delete it), False when it must come back later."""
    message = parse(record)
    ids = {"messageId": record.get("messageId"), "requestId": message.request_id}
    # Claim first, then read: a delivery that finds the answer already stored is skipped, and of
    # deliveries running at once only the claim holder calls the model.
    owner = answers.claim(DDB, TABLE_NAME, message.request_id, seconds=RECORD_BUDGET_MS / 1000)
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
        held = admit(message) if LEDGER is not None else None
        if isinstance(held, Wait):
            send_back(record, message, held, ids)
            return True
        try:
            result = converse(BEDROCK, message.request)
        except Exception as error:
            if isinstance(error, ClientError | BotoCoreError) and is_throttle(error):
                # throttled past the SDK's retries: the dashboard's throttle line
                metrics.emit_throttle(MODEL_ID, dimensions=metrics.lambda_dimensions())
            if held is not None:
                held.failed(error)
            raise
        if held is not None:
            held.settle(result)  # at once: the room the answer did not use is free for the next call
        written = answers.put_answer(
            DDB,
            TABLE_NAME,
            answers.Answer.from_result(
                result, key=message.key, model_id=MODEL_ID, request_id=message.stored_id,
                sequence=message.sequence, sent_at=message.sent_at, ttl_seconds=ANSWER_TTL_SECONDS,
                requested_tier=SERVICE_TIER,
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
