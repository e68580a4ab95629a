"""Load one finished batch inference job into the answer store.

Called by the BatchPrecompute state machine for a job that ended Completed or PartiallyCompleted:

    {"jobArn", "jobName", "jobIndex", "status", "outputUri", "keysUri", "sequence", "sentAt"}

Bedrock writes one output file per input file and a `manifest.json.out` with the job's counts
(Bedrock user guide, "View the results of a batch inference job",
https://docs.aws.amazon.com/bedrock/latest/userguide/batch-inference-results.html). Where exactly
(`<outputUri><jobId>/<input file>.jsonl.out` in public code and tests) no primary source states, so
the loader lists everything under the job's own outputUri and reads every `*.jsonl.out` and the
`manifest.json.out` it finds there; output found elsewhere than `<jobId>/`, or none at all, is
reported (with what was found) rather than loaded as an empty job. Each line has modelOutput or
error, in no particular order. The loader joins every line to its store key through the
recordId -> key mapping written by `prepare`, writes each answer with
`pacer_runtime.answers.put_answer` (the answer schema every writer shares: a stored answer from a
newer run is never replaced), and then:

- lists every record without an answer in `<outputUri>errored-records.jsonl` with its key and the
  reason (the run's failure list), and counts them in the BatchRecordsFailed metric;
  BatchRecordsLoaded counts the answers written. Reasons: errored, no answer text, missing from
  the output, too large for the store (the item's size and DynamoDB's limit), not storable (e.g.
  text that is not valid Unicode), write failed (transient);
- reconciles its counts with the manifest and reports each disagreement, so a truncated output is
  seen rather than silently loaded as complete. A manifest that cannot be read, or whose counts are
  not whole numbers, is a disagreement too.

The request itself is checked before any record is read: a missing or malformed field, or a
`sequence` no write would accept (`answers.check_sequence`: 0 to now plus the store's clock skew, in
epoch milliseconds), fails the invocation with OutputError naming it.

One bad line, mapping entry or answer fails alone: a line that is not JSON (or nested too deeply
to parse) is counted and its record reported missing; a key mapping line that cannot be read is
listed and its record's output reported as unknown; the rest load.

Several lines for one recordId: a line with an answer wins over an error line or a line without
answer text, whatever their order; of several answers, the first is loaded and the others counted
as duplicates.

Writes run on WRITE_CONCURRENCY threads sharing one DynamoDB client (module scope, its pool sized
to the threads). Only what a retry can fix is retried: a write that still fails after the client's
retries with a throttle, a 5xx or a network error is listed as "write failed" and the invocation
then fails with StoreWriteError so the state machine retries it (records already written are
skipped by put_answer's condition: same request id and sequence). An answer too large for an item,
or refused by DynamoDB's validation, is listed and never retried. Logs carry counts, ids and error
codes, never a prompt or an answer.
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
from pacer_runtime.structured_log import describe_error

from .records import Extracted, NoAnswerError, extract_answer, s3_uri, split_uri

MANIFEST = "manifest.json.out"
OUTPUT_SUFFIX = ".jsonl.out"
ERRORED_NAME = "errored-records.jsonl"
#: The manifest's counts (Bedrock user guide, batch-inference-results.html); each must be a whole number.
MANIFEST_COUNTS = ("totalRecordCount", "processedRecordCount", "successRecordCount", "errorRecordCount")
#: DynamoDB's maximum item size, 400 KB with 1 KB = 1,024 bytes, counting attribute names and values
#: (DynamoDB developer guide, Constraints: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Constraints.html#limits-items).
MAX_ITEM_BYTES = 400 * 1024
#: DynamoDB error codes a retry cannot fix: the item is refused as it is (too large, invalid).
PERMANENT_WRITE_ERRORS = frozenset({"ValidationException", "SerializationException"})
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
    too_large: int = 0
    unstorable: int = 0
    listed: list[dict[str, Any]] = field(default_factory=list)  # the run's failure list for this job
    unknown_ids: list[str] = field(default_factory=list)

    @property
    def success_lines(self) -> int:
        return self.written + self.superseded + self.invalid + self.write_failed + self.too_large + self.unstorable


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
    now = time.time() if now is None else now
    job = _Job.of(event, now=now)  # refused whole, before any record is read
    tally = _Tally()
    keys, unreadable_mapping = _read_keys(s3, job.keys_uri, tally)
    bucket, prefix = split_uri(job.output_uri)
    job_prefix = f"{prefix}{job.job_id}/"
    objects = _list(s3, bucket, prefix)
    out_files = sorted(key for key in objects if key.endswith(OUTPUT_SUFFIX))
    manifests = sorted(key for key in objects if key.rsplit("/", 1)[-1] == MANIFEST)
    generated_at = answers.iso_utc(now)
    expires_at = int(now) + ttl_seconds if ttl_seconds else None
    #: recordId -> "success" once an answer was submitted for it, or "failed" while only failures were seen.
    outcome: dict[str, str] = {}
    provisional: dict[str, tuple[str, dict[str, Any]]] = {}  # recordId -> (kind, listed entry): a later answer wins

    def write(record_id: str, answer: answers.Answer) -> tuple[str, str, Any]:
        if not _storable_text(answer.text):
            return record_id, answer.key, ("not storable", UnicodeError("the answer is not valid Unicode"))
        size = _item_size(answer.to_item())
        if size > MAX_ITEM_BYTES:
            return record_id, answer.key, ("too large", size)
        try:
            return record_id, answer.key, answers.put_answer(ddb, table, answer)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code")
            return record_id, answer.key, ("not storable" if code in PERMANENT_WRITE_ERRORS else "write failed", error)
        except BotoCoreError as error:
            return record_id, answer.key, ("write failed", error)
        except (UnicodeError, ValueError, TypeError, RecursionError) as error:  # the answer itself cannot be stored
            return record_id, answer.key, ("not storable", error)

    def collect(done: set[Future]) -> None:
        for future in done:
            record_id, key, result = future.result()
            if result is True:
                tally.written += 1
            elif result is False:
                tally.superseded += 1
            else:
                reason, detail = result
                entry: dict[str, Any] = {"recordId": record_id, "key": key, "reason": reason}
                if reason == "too large":
                    tally.too_large += 1
                    entry.update(itemBytes=detail, limitBytes=MAX_ITEM_BYTES)
                elif reason == "not storable":
                    tally.unstorable += 1
                    entry.update(describe_error(detail))
                else:
                    tally.write_failed += 1
                    entry.update(describe_error(detail))
                tally.listed.append(entry)

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
                        tally.unknown_ids.append(str(record_id)[:64])
                    continue
                if outcome.get(record_id) == "success":
                    tally.duplicates += 1
                    continue
                failure = _classify(entry, record_id, key)
                if isinstance(failure, tuple):
                    if record_id in outcome:  # a second failure line for the record
                        tally.duplicates += 1
                    else:
                        outcome[record_id] = "failed"
                        provisional[record_id] = failure
                    continue
                if provisional.pop(record_id, None) is not None:  # an answer after a failure line: the answer wins
                    tally.duplicates += 1
                outcome[record_id] = "success"
                extracted = failure
                answer = answers.Answer(
                    key=key,
                    text=extracted.text,
                    model_id=model_id,
                    request_id=answers.WRITER_PREFIXES["batch"] + f"{job.job_id}:{record_id}",
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

    for kind, listed_entry in provisional.values():
        if kind == "errored":
            tally.errored += 1
        else:
            tally.invalid += 1
        tally.listed.append(listed_entry)
    missing = [record_id for record_id in keys if record_id not in outcome]
    for record_id in missing:
        tally.listed.append({"recordId": record_id, "key": keys[record_id], "reason": "missing from the output"})
    manifest, manifest_problems = _read_manifest(s3, bucket, manifests)
    discrepancies = manifest_problems + _reconcile(manifest, len(keys), tally, out_files, job_prefix, objects)
    if unreadable_mapping:
        discrepancies.append(f"{unreadable_mapping} lines of the key mapping cannot be read; their records are listed")
    errored_uri = None
    if tally.listed:
        errored_key = f"{prefix}{ERRORED_NAME}"
        body = b"".join(_json_line(entry) for entry in tally.listed)
        s3.put_object(Bucket=bucket, Key=errored_key, Body=body)
        errored_uri = s3_uri(bucket, errored_key)
    if discrepancies:
        log("WARN", "the job's output does not match its manifest", jobArn=job.job_arn, discrepancies=discrepancies[:REPORT_LIMIT])
    failed_records = tally.errored + tally.invalid + len(missing) + tally.too_large + tally.unstorable + unreadable_mapping
    return {
        "jobIndex": job.index,
        "jobName": job.name,
        "jobArn": job.job_arn,
        "status": job.status,
        "records": len(keys) + unreadable_mapping,
        "loaded": tally.written,
        "superseded": tally.superseded,
        "errored": tally.errored,
        "invalid": tally.invalid,
        "missing": len(missing),
        "unknown": tally.unknown,
        "duplicates": tally.duplicates,
        "malformed": tally.malformed,
        "tooLarge": tally.too_large,
        "unstorable": tally.unstorable,
        "unreadableMapping": unreadable_mapping,
        "writeFailed": tally.write_failed,
        "failedRecords": failed_records,
        "manifest": manifest,
        "reconciled": not discrepancies,
        "discrepancies": discrepancies[:REPORT_LIMIT],
        "unknownRecordIds": tally.unknown_ids,
        "erroredUri": errored_uri,
        "failureMessage": "",
    }


def _classify(entry: dict[str, Any], record_id: str, key: str) -> tuple[str, dict[str, Any]] | Extracted:
    """(kind, listed entry) when the line holds no answer; the answer when it holds one."""
    if "modelOutput" not in entry:
        error: dict[str, Any] = entry["error"] if isinstance(entry.get("error"), dict) else {}
        return "errored", {
            "recordId": record_id, "key": key, "reason": "errored",
            "errorCode": _scalar(error.get("errorCode")), "errorMessage": _scalar(error.get("errorMessage")),
        }
    try:
        return extract_answer(entry["modelOutput"])
    except NoAnswerError as error:
        return "invalid", {"recordId": record_id, "key": key, "reason": "no answer", "errorMessage": str(error)}


def _scalar(value: Any) -> Any:
    """A value of Bedrock's error object as the failure list can hold it (text cut, nothing nested)."""
    if value is None or isinstance(value, bool | int | float):
        return value
    return str(value)[:1000]


def _item_size(item: dict[str, dict[str, str]]) -> int:
    """An item's size as DynamoDB counts it: UTF-8 bytes of each attribute name plus its value (strings:
    UTF-8 bytes; numbers: about one byte per two significant digits plus one) (DynamoDB developer guide,
    "DynamoDB item sizes and formats": https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html)."""
    size = 0
    for name, value in item.items():
        size += len(name.encode("utf-8", "surrogatepass"))
        if "S" in value:
            size += len(value["S"].encode("utf-8", "surrogatepass"))
        elif "N" in value:
            digits = value["N"].lstrip("-").replace(".", "").strip("0") or "0"
            size += (len(digits) + 1) // 2 + 1
        else:
            size += len(json.dumps(value))
    return size


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
    def of(cls, event: Any, *, now: float) -> _Job:
        """The job of a load request; OutputError naming the field that is missing or malformed (a
        sequence every write would refuse fails the request, not each of its records)."""
        if not isinstance(event, dict):
            raise OutputError(f"the load request is incomplete or malformed: it is {type(event).__name__}, not an object")
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
                sequence=answers.check_sequence(event["sequence"], now=now),
                sent_at=event.get("sentAt") if isinstance(event.get("sentAt"), str) else None,
            )
        except (KeyError, TypeError, ValueError) as error:
            raise OutputError(f"the load request is incomplete or malformed: {type(error).__name__}: {error}") from None


def _read_keys(s3: Any, uri: str, tally: _Tally) -> tuple[dict[str, str], int]:
    """The recordId -> key mapping and the number of its lines that cannot be read (each listed)."""
    bucket, key = split_uri(uri)
    mapping: dict[str, str] = {}
    unreadable = 0
    try:
        for number, raw in enumerate(_stream_lines(s3, bucket, key), 1):
            entry = _parse(raw)
            record_id = entry.get("recordId") if entry is not None else None
            stored_key = entry.get("key") if entry is not None else None
            if not isinstance(record_id, str) or not isinstance(stored_key, str) or not _storable_text(stored_key):
                unreadable += 1
                listed: dict[str, Any] = {"reason": f"line {number} of the key mapping is not a {{recordId, key}} object"}
                if isinstance(record_id, str) and _storable_text(record_id):
                    listed["recordId"] = record_id[:64]
                tally.listed.append(listed)
                continue
            mapping[record_id] = stored_key
    except ClientError as error:
        raise OutputError(f"cannot read the key mapping {uri}: {describe_error(error)}") from None
    return mapping, unreadable


def _storable_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeError:
        return False
    return True


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
    """A JSON object line, or None: not JSON, not an object, or nested too deeply to parse."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _json_line(value: Any) -> bytes:
    """One line of the failure list; a text that is not valid Unicode is escaped, never a crash."""
    return (json.dumps(value, ensure_ascii=True) + "\n").encode()


def _read_manifest(s3: Any, bucket: str, keys: list[str]) -> tuple[dict[str, int] | None, list[str]]:
    """The manifest's counts, and each reason it cannot be trusted (unreadable, a count not a whole number)."""
    if not keys:
        return None, [f"no {MANIFEST}: the counts cannot be checked"]
    if len(keys) > 1:
        return None, [f"{len(keys)} {MANIFEST} files under the job's output: the counts cannot be checked"]
    try:
        value = json.loads(s3.get_object(Bucket=bucket, Key=keys[0])["Body"].read())
    except (ClientError, BotoCoreError, ValueError, RecursionError) as error:
        return None, [f"{MANIFEST} cannot be read ({type(error).__name__}): the counts cannot be checked"]
    if not isinstance(value, dict):
        return None, [f"{MANIFEST} is {type(value).__name__}, not an object: the counts cannot be checked"]
    counts: dict[str, int] = {}
    problems: list[str] = []
    for name in MANIFEST_COUNTS:
        count = value.get(name)
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
            counts[name] = count
        elif name in value:
            problems.append(f"manifest {name} is a {type(count).__name__}, not a count")  # the value is not quoted
        else:
            problems.append(f"manifest has no {name}")
    return counts, problems


def _reconcile(
    manifest: dict[str, int] | None, submitted: int, tally: _Tally, out_files: list[str], job_prefix: str, objects: set[str]
) -> list[str]:
    """Each way the output disagrees with the manifest, with the records submitted and with the documented layout."""
    problems: list[str] = []
    if not out_files:
        found = sorted(key.rsplit("/", 1)[-1] for key in objects)[:5]
        problems.append(f"the job wrote no {OUTPUT_SUFFIX} file under its output location (found: {found})")
    elif not all(key.startswith(job_prefix) for key in out_files):
        problems.append(f"some {OUTPUT_SUFFIX} files are not under <jobId>/ as expected; all were read")
    if manifest is not None:
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
        problems.append(f"{tally.duplicates} output lines repeat a recordId (an answer wins over a failure; else the first)")
    if tally.malformed:
        problems.append(f"{tally.malformed} output lines are not JSON objects")
    return problems
