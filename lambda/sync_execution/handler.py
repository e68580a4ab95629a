"""Function URL -> StartSyncExecution: a caller waits for an EXPRESS workflow's answer in one request.

Request: POST with a JSON object body (the execution input). Every outcome is an HTTP answer with a
JSON body {"error", "cause", ...}, never a function error:

- 200: the execution SUCCEEDED; the body is its output.
- 400: the body is not a JSON object (missing, not JSON, not UTF-8, a lone surrogate, NaN, nested
  too deep), or Step Functions refused the input (InvalidExecutionInput).
- 413: the input is larger than Step Functions accepts (256 KiB in UTF-8).
- 429: Step Functions throttled the start, also after the handler's own retries; nothing ran.
  Retry-After says when to try again.
- 502: the execution FAILED (its error and cause), Step Functions could not be reached or answered
  with an error of its own, or the output cannot be returned (not JSON, or above the function
  URL's 6 MB response limit).
- 504: the execution TIMED_OUT, or no answer came within WAIT_SECONDS plus READ_MARGIN_SECONDS.

A start is never repeated once its request was sent: StartSyncExecution holds the connection for
the whole execution, and an EXPRESS execution is not deduplicated by name, so repeating a start
whose answer was lost (a read timeout, a closed connection, a 5xx) would run, and pay for, the
whole workflow again. Only a start that provably never ran is retried: an error response Step
Functions classes as a throttle (its API reference: error codes of StartSyncExecution are
"reserved for errors that prevent your execution from running"), or a connection that could not
be opened. The SDK's own retries are off for the same reason (see CONFIG).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import random
import time
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)
from pacer_runtime.structured_log import log

#: The longest an EXPRESS execution runs (Step Functions developer guide, "Choosing workflow type").
EXPRESS_LIMIT_SECONDS = 300
#: Execution input limit, UTF-8 bytes (botocore stepfunctions model: SensitiveData max 262144).
INPUT_LIMIT_BYTES = 262_144
#: A buffered function URL answers at most 6 MB (Lambda developer guide, function URL invoke
#: modes: "BUFFERED ... The maximum payload size is 6 MB"). Read as 6,000,000 bytes, the stricter
#: of the decimal and binary readings.
RESPONSE_LIMIT_BYTES = 6_000_000
#: Error codes of a start Step Functions refused for rate: nothing ran, so a retry is safe.
THROTTLE_CODES = frozenset({"ThrottlingException", "KmsThrottlingException"})
#: Starts of one request, the first included; only refused starts are repeated.
START_ATTEMPTS = 3
#: Full-jitter backoff between refused starts: up to BASE x 2^n seconds, at most CAP.
BACKOFF_BASE_SECONDS = 0.2
BACKOFF_CAP_SECONDS = 2.0
#: Opening a connection takes well under this; a slower one is reported, not waited on.
CONNECT_TIMEOUT_SECONDS = 5

STATE_MACHINE_ARN = os.environ["STATE_MACHINE_ARN"]
#: How long the workflow may run (the construct's `wait`), capped at the EXPRESS limit.
WAIT_SECONDS = min(max(float(os.environ.get("WAIT_SECONDS", EXPRESS_LIMIT_SECONDS)), 1.0), EXPRESS_LIMIT_SECONDS)
#: How much longer than the workflow StartSyncExecution may take to answer (the construct sets it).
READ_MARGIN_SECONDS = max(float(os.environ.get("READ_MARGIN_SECONDS", "5")), 0.0)
READ_TIMEOUT_SECONDS = WAIT_SECONDS + READ_MARGIN_SECONDS

# botocore's default read timeout is 60 s (botocore/endpoint.py DEFAULT_TIMEOUT), and both of its
# retry modes retry a read timeout and a closed connection (standard: retries/standard.py
# TransientRetryableChecker; legacy: data/_retry.json general_socket_errors), plus 5xx answers. For
# StartSyncExecution each of those repeats a start that may have run. So: a read timeout above the
# workflow's, and one attempt in either mode (the Lambda runtime's botocore and AWS_RETRY_MODE /
# AWS_MAX_ATTEMPTS would otherwise choose 3 or 5); the handler retries what is safe itself.
CONFIG = Config(
    connect_timeout=CONNECT_TIMEOUT_SECONDS,
    read_timeout=READ_TIMEOUT_SECONDS,
    retries={"mode": "standard", "total_max_attempts": 1},
)
STEP_FUNCTIONS = boto3.client("stepfunctions", config=CONFIG)  # module scope: reused by warm invocations

STATUS_CODES = {"SUCCEEDED": 200, "FAILED": 502, "TIMED_OUT": 504}


class BadRequest(Exception):
    def __init__(self, status: int, error: str, cause: str) -> None:
        super().__init__(cause)
        self.status, self.error, self.cause = status, error, cause


def respond(status: int, body: Any, headers: dict[str, str] | None = None) -> dict:
    return {
        "statusCode": status,
        "headers": {"content-type": "application/json", **(headers or {})},
        "body": json.dumps(body),
    }


def failure(status: int, error: str, cause: str, headers: dict[str, str] | None = None, **fields: Any) -> dict:
    log("warning" if status < 500 else "error", "sync execution not answered", status=status, error=error, **fields)
    return respond(status, {"error": error, "cause": cause, **fields}, headers)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def execution_input(event: Any) -> str:
    """The execution input as compact JSON text, or BadRequest saying what is wrong with the request."""
    if not isinstance(event, dict):
        raise BadRequest(400, "InvalidRequest", "the event is not a function URL request")
    raw = event.get("body")
    if raw is None:
        raw = ""
    if not isinstance(raw, str):
        raise BadRequest(400, "InvalidRequest", "the request body must be text")
    try:
        text = base64.b64decode(raw, validate=True).decode("utf-8") if event.get("isBase64Encoded") else raw
        payload = json.loads(text, parse_constant=_refuse_constant)
    except (binascii.Error, UnicodeDecodeError):
        raise BadRequest(400, "InvalidRequest", "body is not UTF-8 text") from None
    except RecursionError:
        raise BadRequest(400, "InvalidRequest", "body is nested too deeply") from None
    except ValueError as error:  # JSONDecodeError, NaN/Infinity, an integer too long to read
        raise BadRequest(400, "InvalidRequest", f"body is not JSON: {error}") from None
    if not isinstance(payload, dict):
        raise BadRequest(400, "InvalidRequest", "body must be a JSON object (the execution input)")
    try:
        encoded = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(400, "InvalidRequest", "body holds a string that is not valid Unicode (a lone surrogate)") from None
    except RecursionError:
        raise BadRequest(400, "InvalidRequest", "body is nested too deeply") from None
    if len(encoded) > INPUT_LIMIT_BYTES:
        raise BadRequest(
            413, "InputTooLarge",
            f"the input is {len(encoded):,} bytes; Step Functions accepts at most {INPUT_LIMIT_BYTES:,}",
        )
    return encoded.decode("utf-8")


class StartRefused(Exception):
    """Step Functions refused every start (throttled) or could not be reached; nothing ran."""

    def __init__(self, error: str, throttled: bool) -> None:
        super().__init__(error)
        self.error, self.throttled = error, throttled


def _never_ran(error: Exception) -> tuple[bool, str, bool]:
    """(safe to retry, error name, throttled) for an error of one start."""
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code", ""))
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        throttled = code in THROTTLE_CODES or status == 429
        return throttled and status < 500, code, throttled
    # The connection was never opened, so the request was never sent.
    return isinstance(error, EndpointConnectionError | ConnectTimeoutError), type(error).__name__, False


def start(text: str, context: Any) -> dict:
    """One StartSyncExecution, retried only while each failure proves nothing ran and time remains."""
    attempt = 0
    while True:
        try:
            return STEP_FUNCTIONS.start_sync_execution(stateMachineArn=STATE_MACHINE_ARN, input=text)
        except (ClientError, EndpointConnectionError, ConnectTimeoutError) as error:
            safe, name, throttled = _never_ran(error)
            if not safe:
                raise
            attempt += 1
            delay = random.uniform(0, min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2**attempt))
            if attempt == START_ATTEMPTS or not _time_for_another_start(context, delay):
                raise StartRefused(name, throttled) from error
            log("info", "start refused before it ran; starting again", error=name, attempt=attempt)
            time.sleep(delay)


def _time_for_another_start(context: Any, delay: float) -> bool:
    """Whether the function still has time to wait `delay` and then a whole execution."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is None:
        return True
    return remaining() / 1000 - delay > READ_TIMEOUT_SECONDS + 1


def answer(result: dict) -> dict:
    """The HTTP answer for a finished execution."""
    status = result.get("status")
    arn = str(result.get("executionArn", ""))
    if status == "SUCCEEDED":
        try:
            output = json.loads(result.get("output") or "null")
        except ValueError:
            return failure(502, "OutputNotJson", "the execution's output is not JSON", executionArn=arn)
        reply = respond(200, output)
        size = len(json.dumps(reply).encode("utf-8"))
        if size > RESPONSE_LIMIT_BYTES:
            return failure(
                502, "OutputTooLarge",
                f"the output needs {size:,} bytes; a function URL answers at most {RESPONSE_LIMIT_BYTES:,}",
                executionArn=arn,
            )
        log("info", "sync execution answered", status=200, executionArn=arn)
        return reply
    code = STATUS_CODES.get(str(status), 502)
    log("warning", "sync execution did not succeed", status=code, executionStatus=str(status), executionArn=arn)
    return respond(
        code,
        {"status": status, "error": result.get("error", ""), "cause": result.get("cause", ""), "executionArn": arn},
    )


def handler(event: Any, context: Any = None) -> dict:
    try:
        text = execution_input(event)
    except BadRequest as bad:
        return failure(bad.status, bad.error, bad.cause)
    try:
        result = start(text, context)
    except StartRefused as refused:
        if refused.throttled:
            return failure(
                429, refused.error, "Step Functions throttled the start; nothing ran: try again later",
                headers={"retry-after": str(int(BACKOFF_CAP_SECONDS))},
            )
        return failure(502, "StepFunctionsUnreachable", f"Step Functions could not be reached ({refused.error}); nothing ran")
    except ReadTimeoutError:
        return failure(
            504, "WorkflowTimeout",
            f"no answer within {READ_TIMEOUT_SECONDS:g} s; the execution, if it started, was not started again",
        )
    except ClientError as error:
        code = str(error.response.get("Error", {}).get("Code", "Unknown"))
        if code == "InvalidExecutionInput":
            return failure(400, code, "Step Functions refused the input")
        return failure(502, code, "Step Functions did not start the workflow")
    except BotoCoreError as error:  # a closed connection and the like: the start may have run
        return failure(
            502, type(error).__name__, "the call to Step Functions failed after it was sent; it was not started again",
        )
    return answer(result)
