"""Add up a run's jobs and name its outcome, for the state machine's last Choice.

Step Functions can neither sum counts over a list nor (reliably) filter it, so this small step
does both. Input: {"plan": <prepare's result>, "jobs": [<one result per job>]}, where a job's
result is the loader's, or {"jobName", "jobArn", "status", "failureMessage"} for a job that was
not loaded (status Failed, Stopped, Expired, or SubmitFailed / LoadFailed for a job that could not
be submitted or loaded).

The outcome is "Loaded" when every job was loaded (PartiallyCompleted jobs included: what
succeeded is in the store and the rest is listed), else the first of SubmitFailed, LoadFailed,
JobFailed, JobExpired, JobStopped that occurred; `cause` then says which jobs, with Bedrock's
failureMessage, and what the other jobs loaded.

A loaded job whose loaded, superseded or failedRecords is not a whole number >= 0 fails the step
(InvalidSummaryInputError naming the job and the field): the totals would otherwise be wrong.
"""

from __future__ import annotations

from typing import Any

#: A job status -> the outcome it gives the run, most severe first.
OUTCOMES = {
    "SubmitFailed": "SubmitFailed",
    "LoadFailed": "LoadFailed",
    "Failed": "JobFailed",
    "Expired": "JobExpired",
    "Stopped": "JobStopped",
}
LOADED = ("Completed", "PartiallyCompleted")
#: Jobs named in the cause at most (Step Functions keeps a cause up to 32,768 characters).
CAUSE_JOBS = 5
URI_LIMIT = 20


class InvalidSummaryInputError(ValueError):
    """The summary's input is not {"plan": {...}, "jobs": [...]} (Step Functions shows this name)."""


def handler(event: Any, context: Any = None) -> dict[str, Any]:
    return summarize(event)


def summarize(event: Any) -> dict[str, Any]:
    if not isinstance(event, dict):
        raise InvalidSummaryInputError(f"the summary input must be an object with plan and jobs, not {type(event).__name__}")
    given_plan, given_jobs = event.get("plan"), event.get("jobs")
    plan: dict[str, Any] = given_plan if isinstance(given_plan, dict) else {}
    jobs = [job for job in (given_jobs if isinstance(given_jobs, list) else []) if isinstance(job, dict)]
    loaded_jobs = [job for job in jobs if job.get("status") in LOADED]
    not_loaded = [job for job in jobs if job.get("status") not in LOADED]

    def total(name: str) -> int:
        return sum(_count(job, index, name) for index, job in enumerate(loaded_jobs))

    summary: dict[str, Any] = {
        "runId": plan.get("runId"),
        "jobs": len(jobs),
        "items": plan.get("items"),
        "rejected": plan.get("rejected", 0),
        "rejectedUri": plan.get("rejectedUri"),
        "records": plan.get("records"),
        "loaded": total("loaded"),
        "superseded": total("superseded"),
        "failedRecords": total("failedRecords"),
        "partiallyCompletedJobs": sum(1 for job in loaded_jobs if job.get("status") == "PartiallyCompleted"),
        "unreconciledJobs": [job.get("jobName") for job in loaded_jobs if job.get("reconciled") is False][:URI_LIMIT],
        "erroredUris": [job["erroredUri"] for job in loaded_jobs if job.get("erroredUri")][:URI_LIMIT],
        "notLoaded": [
            {"jobName": job.get("jobName"), "jobArn": job.get("jobArn"), "status": job.get("status"),
             "failureMessage": job.get("failureMessage") or ""}
            for job in not_loaded
        ][:URI_LIMIT],
    }
    if not not_loaded:
        return {**summary, "outcome": "Loaded", "cause": ""}
    statuses = {job.get("status") for job in not_loaded}
    outcome = next((OUTCOMES[status] for status in OUTCOMES if status in statuses), "JobFailed")
    described = "; ".join(
        f"{job.get('jobName')} ({job.get('jobArn') or 'not submitted'}) ended {job.get('status')}: "
        f"{job.get('failureMessage') or 'no failureMessage'}"
        for job in not_loaded[:CAUSE_JOBS]
    )
    more = f"; and {len(not_loaded) - CAUSE_JOBS} more" if len(not_loaded) > CAUSE_JOBS else ""
    cause = (
        f"{len(not_loaded)} of {len(jobs)} batch jobs were not loaded: {described}{more}. "
        f"The other {len(loaded_jobs)} jobs loaded {summary['loaded']:,} answers"
        + (f" ({summary['failedRecords']:,} records without an answer are listed in S3)" if summary["failedRecords"] else "")
    )
    return {**summary, "outcome": outcome, "cause": cause}


def _count(job: dict[str, Any], index: int, name: str) -> int:
    """A loaded job's count; InvalidSummaryInputError naming the job and field when it is not a whole
    number >= 0 (only a bug in the loader or the state machine sends one: summed as 0 it would hide
    answers from the run's totals)."""
    value = job.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidSummaryInputError(
            f"loaded job {index} ({job.get('jobName')!r}) has {name}={value!r}; a loaded job's {name} must be a whole "
            "number >= 0, as the loader returns it"
        )
    return value
