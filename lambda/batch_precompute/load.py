"""Load one finished batch inference job into the answer store.

Called by the BatchPrecompute state machine for a job that ended Completed or PartiallyCompleted:

    {"jobArn", "jobName", "jobIndex", "status", "outputUri", "keysUri", "sequence", "sentAt"}

Bedrock writes `<outputUri><jobId>/<input file>.jsonl.out` (one line per record, with modelOutput
or error, in no particular order) and `<outputUri><jobId>/manifest.json.out` (the job's counts).
The loader joins every line to its store key through the recordId -> key mapping written by
`prepare`, writes each answer with `pacer_runtime.answers.put_answer` (the answer schema every
writer shares: a stored answer from a newer run is never replaced), and then:

- lists every record without an answer (errored lines, lines with no answer text, records missing
  from the output) in `<outputUri>errored-records.jsonl` with its key and the reason, and counts
  them in the BatchRecordsFailed metric; BatchRecordsLoaded counts the answers written;
- reconciles its counts with the manifest and reports each disagreement, so a truncated output is
  seen rather than silently loaded as complete.

Writes run on WRITE_CONCURRENCY threads sharing one DynamoDB client (module scope, its pool sized
to the threads). A write that still fails after the client's retries is listed too, and the
invocation then fails with StoreWriteError so the state machine retries it; records already
written are skipped on the retry by put_answer's condition (same request id and sequence).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from pacer_runtime import answers, log, metrics

from .records import NoAnswerError, extract_answer, s3_uri, split_uri

MANIFEST = "manifest.json.out"
ERRORED_NAME = "errored-records.jsonl"
#: Discrepancies and unknown record ids are reported up to this many (the result must stay small).
REPORT_LIMIT = 10

TABLE = os.environ.get("ANSWER_TABLE", "")
ANSWER_TTL_SECONDS = int(os.environ.get("ANSWER_TTL_SECONDS") or 0) or None
MODEL_ID = os.environ.get("MODEL_ID", "")
WRITE_CONCURRENCY = int(os.environ.get("WRITE_CONCURRENCY") or 16)

# Module scope: one client per execution environment. botocore clients are thread-safe; the pool
# gives each writer thread its own connection.
S3 = boto3.client("s3", config=Config(retries={"total_max_attempts": 5, "mode": "standard"}))
DDB = answers.store_client(max_pool_connections=WRITE_CONCURRENCY + 2, max_attempts=5)


class StoreWriteError(RuntimeError):
    """Some answers could not be written; retrying the load writes them (the others are skipped)."""


class OutputError(RuntimeError):
    """The job's output or key mapping cannot be read at all."""


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    result = load_job(
        S3, DDB, event, table=TABLE, model_id=MODEL_ID, ttl_seconds=ANSWER_TTL_SECONDS, concurrency=WRITE_CONCURRENCY
    )
    metrics.emit(
        {metrics.BATCH_RECORDS_LOADED: result["loaded"], metrics.BATCH_RECORDS_FAILED: result["failedRecords"]},
        metrics.lambda_dimensions(),  # {"FunctionName": ...}: what BatchPrecompute's metric_* methods read
    )
    if result["writeFailed"]:
        raise StoreWriteError(
            f"{result['writeFailed']} of {result['records']} answers of job {result['jobName']} could not be written "
            f"to the answer store (listed in {result['erroredUri']}); the load is retried and skips those written"
        )
    return result


@dataclass
class _Tally:
    written: int = 0
    superseded: int = 0
    errored: int = 0
    invalid: int = 0
    unknown: int = 0
    duplicates: int = 0
    malformed: int = 0
    write_failed: int = 0
    listed: list[dict[str, Any]] = field(default_factory=list)  # the records without an answer
    unknown_ids: list[str] = field(default_factory=list)

    @property
    def success_lines(self) -> int:
        return self.written + self.superseded + self.invalid + self.write_failed


def load_job(
    s3: Any,
    ddb: Any,
    event: dict[str, Any],
    *,
    table: str,
    model_id: str,
    ttl_seconds: int | None,
    concurrency: int,
    now: float | None = None,
) -> dict[str, Any]:
    """Load one job's output; returns the counts the state machine reports (see the module docstring)."""
    job = _Job.of(event)
    now = time.time() if now is None else now
    keys = _read_keys(s3, job.keys_uri)
    bucket, prefix = split_uri(job.output_uri)
    job_prefix = f"{prefix}{job.job_id}/"
    objects = _list(s3, bucket, job_prefix)
    out_files = sorted(key for key in objects if key.endswith(".jsonl.out"))
    tally = _Tally()
    seen: set[str] = set()
    generated_at = answers.iso_utc(now)
    expires_at = int(now) + ttl_seconds if ttl_seconds else None

    def write(record_id: str, answer: answers.Answer) -> tuple[str, str, bool | Exception]:
        try:
            return record_id, answer.key, answers.put_answer(ddb, table, answer)
        except (ClientError, BotoCoreError) as error:
            return record_id, answer.key, error

    def collect(done: set[Future]) -> None:
        for future in done:
            record_id, key, outcome = future.result()
            if outcome is True:
                tally.written += 1
            elif outcome is False:
                tally.superseded += 1
            else:
                tally.write_failed += 1
                tally.listed.append({"recordId": record_id, "key": key, "reason": "write failed", "errorMessage": str(outcome)})

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="put") as pool:
        pending: set[Future] = set()
        for file_key in out_files:
            for number, raw in enumerate(_stream_lines(s3, bucket, file_key), 1):
                entry = _parse(raw)
                if entry is None:
                    tally.malformed += 1
                    tally.listed.append({"reason": f"line {number} of {file_key.rsplit('/', 1)[-1]} is not a JSON object"})
                    continue
                record_id = entry.get("recordId")
                key = keys.get(record_id) if isinstance(record_id, str) else None
                if key is None or not isinstance(record_id, str):
                    tally.unknown += 1
                    if len(tally.unknown_ids) < REPORT_LIMIT:
                        tally.unknown_ids.append(str(record_id))
                    continue
                if record_id in seen:
                    tally.duplicates += 1
                    continue
                seen.add(record_id)
                if "modelOutput" not in entry:
                    error: dict[str, Any] = entry["error"] if isinstance(entry.get("error"), dict) else {}
                    tally.errored += 1
                    tally.listed.append({
                        "recordId": record_id, "key": key, "reason": "errored",
                        "errorCode": error.get("errorCode"), "errorMessage": error.get("errorMessage"),
                    })
                    continue
                try:
                    extracted = extract_answer(entry["modelOutput"])
                except NoAnswerError as error:
                    tally.invalid += 1
                    tally.listed.append({"recordId": record_id, "key": key, "reason": "no answer", "errorMessage": str(error)})
                    continue
                answer = answers.Answer(
                    key=key,
                    text=extracted.text,
                    model_id=model_id,
                    request_id=f"{job.job_id}:{record_id}",
                    sequence=job.sequence,
                    stop_reason=extracted.stop_reason,
                    input_tokens=extracted.input_tokens,
                    output_tokens=extracted.output_tokens,
                    generated_at=generated_at,
                    sent_at=job.sent_at,
                    expires_at=expires_at,
                )
                pending.add(pool.submit(write, record_id, answer))
                if len(pending) >= concurrency * 4:  # bounded: never 50,000 answers queued in memory
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    collect(done)
        done, _ = wait(pending)
        collect(done)

    missing = [record_id for record_id in keys if record_id not in seen]
    for record_id in missing:
        tally.listed.append({"recordId": record_id, "key": keys[record_id], "reason": "missing from the output"})
    manifest = _read_manifest(s3, bucket, job_prefix + MANIFEST) if job_prefix + MANIFEST in objects else None
    discrepancies = _reconcile(manifest, len(keys), tally, len(out_files))
    errored_uri = None
    if tally.listed:
        errored_key = f"{prefix}{ERRORED_NAME}"
        body = b"".join((json.dumps(entry, ensure_ascii=False) + "\n").encode() for entry in tally.listed)
        s3.put_object(Bucket=bucket, Key=errored_key, Body=body)
        errored_uri = s3_uri(bucket, errored_key)
    if discrepancies:
        log("WARN", "the job's output does not match its manifest", jobArn=job.job_arn, discrepancies=discrepancies)
    return {
        "jobIndex": job.index,
        "jobName": job.name,
        "jobArn": job.job_arn,
        "status": job.status,
        "records": len(keys),
        "loaded": tally.written,
        "superseded": tally.superseded,
        "errored": tally.errored,
        "invalid": tally.invalid,
        "missing": len(missing),
        "unknown": tally.unknown,
        "duplicates": tally.duplicates,
        "malformed": tally.malformed,
        "writeFailed": tally.write_failed,
        "failedRecords": tally.errored + tally.invalid + len(missing),
        "manifest": manifest,
        "reconciled": not discrepancies,
        "discrepancies": discrepancies[:REPORT_LIMIT],
        "unknownRecordIds": tally.unknown_ids,
        "erroredUri": errored_uri,
        "failureMessage": "",
    }


@dataclass(frozen=True)
class _Job:
    job_arn: str
    job_id: str
    name: str
    index: int
    status: str
    output_uri: str
    keys_uri: str
    sequence: int
    sent_at: str | None

    @classmethod
    def of(cls, event: dict[str, Any]) -> _Job:
        try:
            job_arn = str(event["jobArn"])
            output_uri = str(event["outputUri"])
            if not output_uri.endswith("/"):
                output_uri += "/"
            split_uri(output_uri)
            split_uri(str(event["keysUri"]))
            return cls(
                job_arn=job_arn,
                job_id=job_arn.rsplit("/", 1)[-1],
                name=str(event.get("jobName", "")),
                index=int(event.get("jobIndex", 0)),
                status=str(event.get("status", "")),
                output_uri=output_uri,
                keys_uri=str(event["keysUri"]),
                sequence=int(event["sequence"]),
                sent_at=event.get("sentAt"),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise OutputError(f"the load request is incomplete or malformed: {type(error).__name__}: {error}") from None


def _read_keys(s3: Any, uri: str) -> dict[str, str]:
    bucket, key = split_uri(uri)
    mapping: dict[str, str] = {}
    try:
        for raw in _stream_lines(s3, bucket, key):
            entry = json.loads(raw)
            mapping[entry["recordId"]] = entry["key"]
    except ClientError as error:
        raise OutputError(f"cannot read the key mapping {uri}: {error}") from None
    return mapping


def _list(s3: Any, bucket: str, prefix: str) -> set[str]:
    found: set[str] = set()
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
    while True:
        page = s3.list_objects_v2(**kwargs)
        found.update(item["Key"] for item in page.get("Contents", []))
        if not page.get("IsTruncated"):
            return found
        kwargs["ContinuationToken"] = page["NextContinuationToken"]


def _stream_lines(s3: Any, bucket: str, key: str) -> Iterator[bytes]:
    """The non-empty lines of an object, read in 1 MiB chunks (an output file may be hundreds of MB)."""
    body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    buffer = b""
    for chunk in iter(lambda: body.read(1024 * 1024), b""):
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


def _parse(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _read_manifest(s3: Any, bucket: str, key: str) -> dict[str, int] | None:
    try:
        value = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except (ClientError, ValueError):
        return None
    if not isinstance(value, dict):
        return None
    return {name: count for name, count in value.items() if isinstance(count, int) and not isinstance(count, bool)}


def _reconcile(manifest: dict[str, int] | None, submitted: int, tally: _Tally, files: int) -> list[str]:
    """Each way the output disagrees with the manifest and with the records submitted."""
    problems: list[str] = []
    if files == 0:
        problems.append("the job wrote no .jsonl.out file")
    if manifest is None:
        problems.append(f"no readable {MANIFEST}: the counts cannot be checked")
    else:
        pairs = (
            ("totalRecordCount", submitted, "records were submitted"),
            ("processedRecordCount", tally.success_lines + tally.errored, "records are in the output files"),
            ("successRecordCount", tally.success_lines, "records in the output files have modelOutput"),
            ("errorRecordCount", tally.errored, "records in the output files have an error"),
        )
        for name, counted, meaning in pairs:
            if name in manifest and manifest[name] != counted:
                problems.append(f"manifest {name}={manifest[name]:,} but {counted:,} {meaning}")
    if tally.unknown:
        problems.append(f"{tally.unknown} output lines have a recordId this job did not submit")
    if tally.duplicates:
        problems.append(f"{tally.duplicates} output lines repeat a recordId (the first was loaded)")
    if tally.malformed:
        problems.append(f"{tally.malformed} output lines are not JSON objects")
    return problems
