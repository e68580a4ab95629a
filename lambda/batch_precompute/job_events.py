"""Complete a BatchPrecompute run's wait when EventBridge announces that its batch job ended.

The job request has no field to carry a Step Functions task token, so the state machine stores the
token under the job's ARN (a DynamoDB item {jobArn, token, expires_at}) before it waits. An
EventBridge rule sends this function `Batch Inference Job State Change` events of this pipeline's
jobs (name prefix) in a terminal state; it reads the token and sends the job's status and
failureMessage as the task's result.

A token not yet stored (the job ended before the state machine wrote it) fails the invocation, and
Lambda's asynchronous retries come back after a minute and two. A token Step Functions no longer
knows (the run already learned the status from its own check, or was stopped) is not an error.
Bedrock delivers these events on a best-effort basis; a lost one is covered by the state machine,
which checks the job itself after status_check_interval.
"""

from __future__ import annotations

import json
import os
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError
from pacer_runtime import log

TOKEN_TABLE = os.environ.get("TOKEN_TABLE", "")
#: Step Functions' answers for a token it no longer waits on.
GONE = frozenset({"TaskTimedOut", "TaskDoesNotExist", "InvalidToken"})

_CONFIG = Config(retries={"total_max_attempts": 4, "mode": "standard"}, connect_timeout=2, read_timeout=10)
DDB = boto3.client("dynamodb", config=_CONFIG)
SFN = boto3.client("stepfunctions", config=_CONFIG)


class TokenNotFoundError(RuntimeError):
    """No token is stored for the job yet: Lambda retries the event."""


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    detail = event.get("detail") or {}
    job_arn = detail.get("batchJobArn") or next(iter(event.get("resources") or []), None)
    status = detail.get("status")
    if not isinstance(job_arn, str) or not isinstance(status, str):
        log("ERROR", "the event has no batchJobArn or status; ignored", detailType=event.get("detail-type"))
        return {"completed": False, "reason": "malformed event"}
    item = DDB.get_item(TableName=TOKEN_TABLE, Key={"jobArn": {"S": job_arn}}, ConsistentRead=True).get("Item")
    if item is None:
        raise TokenNotFoundError(f"no task token is stored for {job_arn} yet; the event will be retried")
    token = item["token"]["S"]
    output = {"jobArn": job_arn, "status": status, "failureMessage": detail.get("failureMessage") or ""}
    try:
        SFN.send_task_success(taskToken=token, output=json.dumps(output))
        completed = True
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        if code not in GONE:
            raise
        log("INFO", "the run no longer waits on this job's token", jobArn=job_arn, code=code)
        completed = False
    try:  # only this token's item: a newer wait of the same job may have stored another
        DDB.delete_item(
            TableName=TOKEN_TABLE,
            Key={"jobArn": {"S": job_arn}},
            ConditionExpression="#token = :token",
            ExpressionAttributeNames={"#token": "token"},
            ExpressionAttributeValues={":token": {"S": token}},
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
            raise
    log("INFO", "batch job ended", jobArn=job_arn, status=status, completed=completed)
    return {"completed": completed, "jobArn": job_arn, "status": status}
