"""Function URL -> StartSyncExecution: a caller waits for an EXPRESS workflow's answer in one request.

Request: POST with a JSON object body (the execution input). Response: 200 with the execution's
output; 400 for a body that is not a JSON object; 502 when the execution FAILED (error and cause
as Step Functions reports them); 504 when it TIMED_OUT. An EXPRESS workflow runs at most
5 minutes, and the function's timeout is set just above the workflow's.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import boto3

STATE_MACHINE_ARN = os.environ["STATE_MACHINE_ARN"]
STEP_FUNCTIONS = boto3.client("stepfunctions")  # module scope: reused by warm invocations

STATUS_CODES = {"SUCCEEDED": 200, "FAILED": 502, "TIMED_OUT": 504}


def respond(status: int, body: Any) -> dict:
    return {"statusCode": status, "headers": {"content-type": "application/json"}, "body": json.dumps(body)}


def handler(event: dict, context: Any = None) -> dict:
    raw = event.get("body") or ""
    try:
        text = base64.b64decode(raw).decode() if event.get("isBase64Encoded") else raw
        payload = json.loads(text)
    except (ValueError, UnicodeDecodeError) as error:
        return respond(400, {"error": "InvalidRequest", "cause": f"body is not JSON: {error}"})
    if not isinstance(payload, dict):
        return respond(400, {"error": "InvalidRequest", "cause": "body must be a JSON object (the execution input)"})
    result = STEP_FUNCTIONS.start_sync_execution(stateMachineArn=STATE_MACHINE_ARN, input=json.dumps(payload))
    status = result["status"]
    if status == "SUCCEEDED":
        return respond(200, json.loads(result.get("output") or "null"))
    return respond(
        STATUS_CODES.get(status, 502),
        {"status": status, "error": result.get("error", ""), "cause": result.get("cause", ""),
         "executionArn": result.get("executionArn", "")},
    )
