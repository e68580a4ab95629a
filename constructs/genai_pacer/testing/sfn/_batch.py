"""A stand-in for Bedrock batch inference, so a state machine that submits a job and polls it runs
offline. The test decides each record's answer; the simulated job reads the JSONL input from (moto's)
S3 and writes the output objects where Bedrock would: `<output>/<jobId>/<input file>.out` and
`manifest.json.out`, in an order that is not the input order (as Bedrock's is not)."""

from __future__ import annotations

import datetime
import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..._internal.checks import Checks


class ServiceError(Exception):
    """An error the simulated service answers with; the task fails with `<Service>.<code>`."""

    def __init__(self, code: str, message: str, status: int = 400):
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.status = code, message, status


class BatchRecordError(Exception):
    """Raise it from `respond` to write an error line for that record instead of an answer."""

    def __init__(self, message: str, code: int = 400):
        super().__init__(message)
        self.message, self.code = message, code


@dataclass
class BatchJob:
    """One simulated model invocation job, as the test can inspect it."""

    job_arn: str
    job_name: str
    model_id: str
    role_arn: str
    input_uri: str
    output_uri: str
    request: dict[str, Any]
    submit_time: datetime.datetime
    status: str = "Submitted"
    polls: int = 0
    message: str | None = None
    end_time: datetime.datetime | None = None
    output_keys: list[str] = field(default_factory=list)

    @property
    def job_id(self) -> str:
        return self.job_arn.rsplit("/", 1)[-1]


TERMINAL = ("Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired")


class BatchJobSimulator:
    """Answers aws-sdk:bedrock:createModelInvocationJob / getModelInvocationJob (and stop / list).

    respond: record -> modelOutput, where record is one input line ({"recordId", "modelInput"});
        raise BatchRecordError to write an error line for it.
    polls_until_done: GetModelInvocationJob calls that answer InProgress before the job ends. Default: 1.
    final_status: the status the job ends in. Default: Completed, or PartiallyCompleted when some
        record failed and some succeeded, or Failed when every record failed.
    message: the job's message when it ends Failed. Default: a generic one.
    seed: orders the output lines (Bedrock does not keep the input order). Default: 0.
    """

    def __init__(
        self,
        respond: Callable[[dict[str, Any]], dict[str, Any]],
        *,
        polls_until_done: int = 1,
        final_status: str | None = None,
        message: str | None = None,
        seed: int = 0,
    ) -> None:
        with Checks("BatchJobSimulator") as check:
            check.rule(callable(respond), f"respond={respond!r} is not callable; pass a function record -> modelOutput", id="respond.not-callable")
            check.integer("polls_until_done", polls_until_done, minimum=0, fix="0 ends the job on the first poll")
            if final_status is not None:
                check.one_of("final_status", final_status, TERMINAL)
            check.text("message", message, optional=True)
            check.integer("seed", seed)
        self.respond, self.polls_until_done = respond, polls_until_done
        self.final_status, self.message, self.seed = final_status, message, seed
        self.jobs: list[BatchJob] = []

    # ---- the API, called by the runner with API member names ------------------------------------
    def call(self, action: str, params: dict[str, Any], *, s3: Any, region: str, account: str) -> dict[str, Any]:
        handler = {
            "createmodelinvocationjob": self._create,
            "getmodelinvocationjob": self._get,
            "stopmodelinvocationjob": self._stop,
            "listmodelinvocationjobs": self._list,
        }.get(action.lower())
        if handler is None:
            raise ServiceError("ValidationException", f"bedrock:{action} is not simulated")
        return handler(params, s3=s3, region=region, account=account)

    def _create(self, params: dict[str, Any], *, s3: Any, region: str, account: str) -> dict[str, Any]:
        missing = [
            name
            for name, value in (
                ("jobName", params.get("jobName")),
                ("roleArn", params.get("roleArn")),
                ("modelId", params.get("modelId")),
                ("inputDataConfig.s3InputDataConfig.s3Uri", _dig(params, "inputDataConfig", "s3InputDataConfig", "s3Uri")),
                ("outputDataConfig.s3OutputDataConfig.s3Uri", _dig(params, "outputDataConfig", "s3OutputDataConfig", "s3Uri")),
            )
            if not value
        ]
        if missing:
            raise ServiceError("ValidationException", f"missing required parameters: {', '.join(missing)}")
        hours = params.get("timeoutDurationInHours")
        if hours is not None and not (isinstance(hours, int) and 24 <= hours <= 168):
            raise ServiceError("ValidationException", f"timeoutDurationInHours {hours!r} must be 24..168")
        digest = hashlib.sha256(f"{self.seed}|{len(self.jobs)}|{params['jobName']}".encode()).hexdigest()
        job = BatchJob(
            job_arn=f"arn:aws:bedrock:{region}:{account}:model-invocation-job/{digest[:12]}",
            job_name=params["jobName"],
            model_id=params["modelId"],
            role_arn=params["roleArn"],
            input_uri=_dig(params, "inputDataConfig", "s3InputDataConfig", "s3Uri"),
            output_uri=_dig(params, "outputDataConfig", "s3OutputDataConfig", "s3Uri"),
            request=params,
            submit_time=datetime.datetime.now(datetime.UTC),
        )
        self.jobs.append(job)
        return {"jobArn": job.job_arn}

    def _find(self, identifier: Any) -> BatchJob:
        for job in self.jobs:
            if identifier in (job.job_arn, job.job_id):
                return job
        raise ServiceError("ResourceNotFoundException", f"model invocation job {identifier!r} was not found", 404)

    def _get(self, params: dict[str, Any], *, s3: Any, region: str, account: str) -> dict[str, Any]:
        job = self._find(params.get("jobIdentifier"))
        job.polls += 1
        if job.status == "Stopping":
            job.status, job.end_time = "Stopped", datetime.datetime.now(datetime.UTC)
        elif job.status not in TERMINAL:
            if job.polls > self.polls_until_done:
                self._finish(job, s3)
            else:
                job.status = "InProgress"
        return self._describe(job)

    def _stop(self, params: dict[str, Any], *, s3: Any, region: str, account: str) -> dict[str, Any]:
        job = self._find(params.get("jobIdentifier"))
        if job.status in TERMINAL:
            raise ServiceError("ValidationException", f"job {job.job_id} already ended ({job.status})")
        job.status = "Stopping"
        return {}

    def _list(self, params: dict[str, Any], *, s3: Any, region: str, account: str) -> dict[str, Any]:
        return {"invocationJobSummaries": [self._describe(job) for job in self.jobs]}

    @staticmethod
    def _describe(job: BatchJob) -> dict[str, Any]:
        described = {
            "jobArn": job.job_arn,
            "jobName": job.job_name,
            "modelId": job.model_id,
            "roleArn": job.role_arn,
            "status": job.status,
            "submitTime": job.submit_time,
            "lastModifiedTime": job.end_time or job.submit_time,
            "inputDataConfig": job.request["inputDataConfig"],
            "outputDataConfig": job.request["outputDataConfig"],
        }
        for key in ("timeoutDurationInHours", "modelInvocationType", "clientRequestToken"):
            if key in job.request:
                described[key] = job.request[key]
        if job.message:
            described["message"] = job.message
        if job.end_time:
            described["endTime"] = job.end_time
        return described

    # ---- the job's work ------------------------------------------------------------------------
    def _finish(self, job: BatchJob, s3: Any) -> None:
        job.end_time = datetime.datetime.now(datetime.UTC)
        try:
            inputs = _read_inputs(s3, job.input_uri)
        except ServiceError as error:
            job.status, job.message = "Failed", error.message
            return
        bucket, prefix = _split_uri(job.output_uri)
        prefix = f"{prefix.rstrip('/')}/{job.job_id}/" if prefix else f"{job.job_id}/"
        rng = random.Random(f"{self.seed}|{job.job_arn}")
        ok = failed = 0
        for key, lines in inputs:
            out = []
            for line in lines:
                record = json.loads(line) if isinstance(line, str) else line
                entry: dict[str, Any] = {"recordId": record.get("recordId"), "modelInput": record.get("modelInput")}
                try:
                    entry["modelOutput"] = self.respond(record)
                    ok += 1
                except BatchRecordError as error:
                    entry["error"] = {"errorCode": error.code, "errorMessage": error.message}
                    failed += 1
                out.append(entry)
            rng.shuffle(out)
            name = key.rsplit("/", 1)[-1]
            body = "".join(json.dumps(entry) + "\n" for entry in out)
            s3.put_object(Bucket=bucket, Key=f"{prefix}{name}.out", Body=body.encode())
            job.output_keys.append(f"{prefix}{name}.out")
        manifest = {"totalRecordCount": ok + failed, "processedRecordCount": ok + failed,
                    "successRecordCount": ok, "errorRecordCount": failed}
        s3.put_object(Bucket=bucket, Key=f"{prefix}manifest.json.out", Body=json.dumps(manifest).encode())
        job.output_keys.append(f"{prefix}manifest.json.out")
        if self.final_status:
            job.status = self.final_status
        else:
            job.status = "Completed" if not failed else ("Failed" if not ok else "PartiallyCompleted")
        if job.status == "Failed":
            job.message = self.message or "the simulated job failed"


def _dig(data: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)  # type: ignore[assignment]
    return data


def _split_uri(uri: str) -> tuple[str, str]:
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        raise ServiceError("ValidationException", f"{uri!r} is not an s3:// URI")
    bucket, _, key = uri[5:].partition("/")
    return bucket, key


def _read_inputs(s3: Any, uri: str) -> list[tuple[str, list[str]]]:
    """The JSONL objects of an input URI: the object itself, or every object under the prefix."""
    bucket, key = _split_uri(uri)
    try:
        listing = s3.list_objects_v2(Bucket=bucket, Prefix=key).get("Contents", [])
    except Exception as error:  # NoSuchBucket and the like
        raise ServiceError("ValidationException", f"cannot read {uri}: {error}") from None
    keys = [item["Key"] for item in listing if item["Key"] == key or key.endswith("/") or not key]
    if not keys:
        keys = [item["Key"] for item in listing if item["Key"].startswith(key.rstrip("/") + "/")]
    if not keys:
        raise ServiceError("ValidationException", f"no input object at {uri}")
    found = []
    for object_key in sorted(keys):
        text = s3.get_object(Bucket=bucket, Key=object_key)["Body"].read().decode()
        found.append((object_key, [line for line in text.splitlines() if line.strip()]))
    return found
