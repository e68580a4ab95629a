"""Complete a BatchPrecompute run's wait when its batch job has ended: on Bedrock's event, or on a check.

The job request has no field to carry a Step Functions task token, so the state machine stores the
token under the job's ARN (a DynamoDB item {jobArn, token, expires_at}) before it waits. This
function completes that token with the job's status and message, from two triggers:

- `Batch Inference Job State Change` events (an EventBridge rule on source, detail-type and
  detail.status, the only detail field a primary source confirms). The event only says *which* job
  to look at: its ARN is read from `detail.batchJobArn`, `detail.jobArn` or `resources`, whichever
  is there, and the job's name, status and message come from GetModelInvocationJob, the authority.
  Another pipeline's job (its name lacks this pipeline's prefix) is ignored. An event that names no
  job, or a malformed one, is logged and ignored, never retried: a retry cannot fix it.
- A schedule every `status_check_interval` (a few minutes by default) that sends
  {"action": "check-jobs"}: every stored token's job is checked with GetModelInvocationJob, and those
  that ended are completed. So a lost event, or event fields other than those read here, delay a run
  by minutes; each check is one GetModelInvocationJob per running job. One job's failing check is
  logged and the others go on.

A token not yet stored when the event arrives (the job ended before the state machine wrote it)
fails the invocation so Lambda retries it; the next check would complete it too. A token Step
Functions no longer knows (the run already learned the status, or was stopped) is not an error.
Logs name jobs, statuses and error codes only.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from pacer_runtime import log
from pacer_runtime.structured_log import describe_error

TOKEN_TABLE = os.environ.get("TOKEN_TABLE", "")
JOB_NAME_PREFIX = os.environ.get("JOB_NAME_PREFIX", "")
#: The input the check schedule sends (the rule's target input).
CHECK_JOBS = {"action": "check-jobs"}
#: Step Functions' answers for a token it no longer waits on.
GONE = frozenset({"TaskTimedOut", "TaskDoesNotExist", "InvalidToken"})
#: The statuses a job ends in (botocore bedrock service-2.json, ModelInvocationJobStatus).
TERMINAL = frozenset({"Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired"})
#: Where an event may name its job: the first present wins. `batchJobArn` is what public code reads
#: and `jobArn` what the model-customization event carries (Bedrock user guide,
#: https://docs.aws.amazon.com/bedrock/latest/userguide/monitoring-eventbridge-how-it-works.html);
#: neither is confirmed for batch jobs, so `resources` (the EventBridge envelope) is read last, and
#: the schedule's check covers an event that names the job in none of them.
ARN_FIELDS = ("batchJobArn", "jobArn")
NAME_FIELDS = ("batchJobName", "jobName")
#: GetModelInvocationJob answers that say the job is not this pipeline's to read: ignored, not retried.
NOT_OURS = frozenset({"ResourceNotFoundException", "AccessDeniedException", "ValidationException"})
#: A job's message is cut to this many characters before it becomes the run's failure cause.
MESSAGE_LIMIT = 2_000
#: The check stops starting new jobs' checks when less than this much of the invocation is left.
CHECK_RESERVE_MS = 5_000

_CONFIG = Config(retries={"total_max_attempts": 4, "mode": "standard"}, connect_timeout=2, read_timeout=10)
DDB = boto3.client("dynamodb", config=_CONFIG)
SFN = boto3.client("stepfunctions", config=_CONFIG)
BEDROCK = boto3.client("bedrock", config=_CONFIG)


class TokenNotFoundError(RuntimeError):
    """No token is stored for the job yet: Lambda retries the event (and the next check covers it)."""


def handler(event: Any, context: Any = None) -> dict[str, Any]:
    if event == CHECK_JOBS:
        return check_jobs(context)
    return on_event(event)


# ---- the event ---------------------------------------------------------------------------------------


def on_event(event: Any) -> dict[str, Any]:
    """Complete the token of the job an event names, if the job is this pipeline's and has ended."""
    if not isinstance(event, dict):
        return _ignored(f"malformed event: it is {_kind(event)}, not an object", level="ERROR")
    detail = event.get("detail")
    if not isinstance(detail, dict):
        return _ignored(f"malformed event: detail is {_kind(detail)}, not an object", level="ERROR")
    name = _first_text(detail, NAME_FIELDS)
    if name is not None and not _ours(name):
        return _ignored("another pipeline's job", jobName=name)
    arn = _first_text(detail, ARN_FIELDS) or _job_resource(event.get("resources"))
    if arn is None:
        return _ignored(
            "the event names no job ARN (detail.batchJobArn, detail.jobArn or resources); the next check covers it",
            level="ERROR", detailFields=sorted(str(key) for key in detail)[:20],
        )
    try:
        job = BEDROCK.get_model_invocation_job(jobIdentifier=arn)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in NOT_OURS:
            return _ignored("the job cannot be read here", jobArn=arn, **describe_error(error))
        raise  # throttled or unavailable: Lambda retries the event, and the next check covers it
    return _complete_if_ended(job, arn, retry_missing_token=True)


def _complete_if_ended(job: Any, arn: str, *, retry_missing_token: bool) -> dict[str, Any]:
    """Read the job description defensively and complete the job's token when it has ended."""
    if not isinstance(job, dict):
        return _ignored("GetModelInvocationJob answered no job description", jobArn=arn, level="ERROR")
    name, status = job.get("jobName"), job.get("status")
    if not isinstance(name, str) or not _ours(name):
        return _ignored("another pipeline's job", jobArn=arn)
    if status not in TERMINAL:
        return _ignored("the job has not ended", jobArn=arn, status=str(status)[:40])
    described_arn, described_message = job.get("jobArn"), job.get("message")
    arn = described_arn if isinstance(described_arn, str) and described_arn else arn
    message = described_message if isinstance(described_message, str) else ""
    item = DDB.get_item(TableName=TOKEN_TABLE, Key={"jobArn": {"S": arn}}, ConsistentRead=True).get("Item")
    token = _token(item)
    if token is None:
        if retry_missing_token:
            raise TokenNotFoundError(f"no task token is stored for {arn} yet; the event will be retried")
        return _ignored("no usable task token is stored for the job", jobArn=arn, level="ERROR")
    return _complete(arn, token, status, message[:MESSAGE_LIMIT])


def _complete(arn: str, token: str, status: str, message: str) -> dict[str, Any]:
    output = {"jobArn": arn, "status": status, "failureMessage": message}
    try:
        SFN.send_task_success(taskToken=token, output=json.dumps(output))
        completed = True
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") not in GONE:
            raise
        log("INFO", "the run no longer waits on this job's token", jobArn=arn, **describe_error(error))
        completed = False
    try:  # only this token's item: a newer wait of the same job may have stored another
        DDB.delete_item(
            TableName=TOKEN_TABLE,
            Key={"jobArn": {"S": arn}},
            ConditionExpression="#token = :token",
            ExpressionAttributeNames={"#token": "token"},
            ExpressionAttributeValues={":token": {"S": token}},
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
            raise
    log("INFO", "batch job ended", jobArn=arn, status=status, completed=completed)
    return {"completed": completed, "jobArn": arn, "status": status}


# ---- the check -----------------------------------------------------------------------------------------


def check_jobs(context: Any = None) -> dict[str, Any]:
    """Check every waiting job once; complete those that ended. One job's failure never stops the others."""
    counts = {"checked": 0, "completed": 0, "running": 0, "failed": 0, "malformed": 0}
    deadline = _deadline(context)
    scan: dict[str, Any] = {"TableName": TOKEN_TABLE, "ConsistentRead": True}
    while True:
        page = DDB.scan(**scan)
        for item in page.get("Items", []):
            if time.monotonic() > deadline:
                log("WARN", "the check ran out of time; the next one goes on", **counts)
                return counts
            arn = item.get("jobArn", {}).get("S") if isinstance(item.get("jobArn"), dict) else None
            if not isinstance(arn, str) or _token(item) is None:
                counts["malformed"] += 1
                log("ERROR", "a stored wait has no job ARN or token; skipped", attributes=sorted(item)[:10])
                continue
            counts["checked"] += 1
            try:
                job = BEDROCK.get_model_invocation_job(jobIdentifier=arn)
                outcome = _complete_if_ended(job, arn, retry_missing_token=False)
            except (ClientError, BotoCoreError) as error:
                counts["failed"] += 1
                log("WARN", "could not check a job; the next check retries it", jobArn=arn, **describe_error(error))
                continue
            counts["completed" if outcome.get("completed") else "running"] += 1
        if "LastEvaluatedKey" not in page:
            break
        scan["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    log("INFO", "checked the waiting batch jobs", **counts)
    return counts


def _deadline(context: Any) -> float:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    millis = remaining() if callable(remaining) else 60_000
    return time.monotonic() + max(0, millis - CHECK_RESERVE_MS) / 1000


# ---- reading what is given ------------------------------------------------------------------------------


def _ours(name: str) -> bool:
    return bool(JOB_NAME_PREFIX) and name.startswith(f"{JOB_NAME_PREFIX}-")


def _first_text(detail: dict[str, Any], fields: tuple[str, ...]) -> str | None:
    for field in fields:
        value = detail.get(field)
        if isinstance(value, str) and value:
            return value
    return None


def _job_resource(resources: Any) -> str | None:
    if not isinstance(resources, list):
        return None
    return next((r for r in resources if isinstance(r, str) and ":model-invocation-job/" in r), None)


def _token(item: Any) -> str | None:
    if not isinstance(item, dict):
        return None
    token = item.get("token")
    value = token.get("S") if isinstance(token, dict) else None
    return value if isinstance(value, str) and value else None


def _kind(value: Any) -> str:
    return "null" if value is None else f"a {type(value).__name__}"


def _ignored(reason: str, *, level: str = "INFO", **fields: Any) -> dict[str, Any]:
    log(level, f"event ignored: {reason}", **fields)
    return {"completed": False, "reason": reason}
