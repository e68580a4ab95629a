"""Write a run's batch inference input: JSONL files per job, and each job's recordId -> key mapping.

Called by the BatchPrecompute state machine with the execution's input, name and start time:

    {"input": {"items": [...]} | {"itemsKey": "<key under ITEMS_PREFIX>"},
     "runId": "<execution name>", "startTime": "<execution start, ISO-8601>"}

An item is {"key": "review-summary#B0C1", "prompt": "Summarize ..."} (Converse invocation type: the
record's modelInput is built from the prompt, MAX_TOKENS, SYSTEM_PROMPT and TEMPERATURE) or
{"key": ..., "modelInput": {...}} (used as given, in the invocation type's format). An items
object is JSON Lines (one item per line) or one JSON array. Items that cannot be answered (no key,
a key DynamoDB cannot store, a second item with the same normalized key, a record larger than a
file may be) are left out and listed, with the reason and never the prompt, in
`<run>/rejected.jsonl`; the others go ahead.

Layout in the input bucket, under INPUT_PREFIX:
    <run>/<jobName>/records-0000.jsonl   the job's input folder (what the job's s3Uri names)
    <run>/<jobName>.keys.jsonl           {"recordId", "key"} per record, beside the folder so the
                                         job never reads it as input
    <run>/rejected.jsonl                 only when items were rejected

Returns the plan the state machine runs: {"belowMinimum": true, "message": ...} when the run has
fewer records than a job may hold (nothing is written then), else {"jobs": [...], ...}.

The items object is read twice (once to count and split, once to write), so memory holds the
keys and sizes, never the prompts; the second read is pinned to the first read's ETag.
"""

from __future__ import annotations

import calendar
import contextlib
import hashlib
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError
from pacer_runtime import answers

from .records import Quotas, SplitError, converse_model_input, plan_split, record_id, s3_uri

#: A run submits at most this many jobs: their descriptors and results must fit one 256 KiB state.
MAX_JOBS_PER_RUN = 400
ITEM_FIELDS = frozenset({"key", "prompt", "modelInput"})
INPUT_FIELDS = frozenset({"items", "itemsKey"})
#: The UTF-8 byte-order mark some editors write at the start of a file.
UTF8_BOM = b"\xef\xbb\xbf"
#: Multipart uploads send parts of this size (S3's minimum part is 5 MiB).
PART_BYTES = 8 * 1024 * 1024
_RUN_SAFE = re.compile(r"[^A-Za-z0-9._-]")

S3 = boto3.client("s3", config=Config(retries={"total_max_attempts": 5, "mode": "standard"}))


class InvalidInputError(ValueError):
    """The execution's input cannot be read as a run (Step Functions shows this name as the error)."""


class ItemError(ValueError):
    """One item cannot be answered; it is rejected and the run goes on."""


@dataclass(frozen=True)
class Settings:
    input_bucket: str
    input_prefix: str
    output_bucket: str
    output_prefix: str
    items_bucket: str
    items_prefix: str
    invocation_type: str
    max_tokens: int
    system_prompt: str | None
    temperature: float | None
    quotas: Quotas
    job_name_prefix: str
    job_timeout_hours: int

    @classmethod
    def from_env(cls, env: Any = os.environ) -> Settings:
        return cls(
            input_bucket=env["INPUT_BUCKET"],
            input_prefix=env["INPUT_PREFIX"],
            output_bucket=env["OUTPUT_BUCKET"],
            output_prefix=env["OUTPUT_PREFIX"],
            items_bucket=env["ITEMS_BUCKET"],
            items_prefix=env["ITEMS_PREFIX"],
            invocation_type=env["INVOCATION_TYPE"],
            max_tokens=int(env["MAX_TOKENS"]) if env.get("MAX_TOKENS") else 0,  # empty for InvokeModel
            system_prompt=env.get("SYSTEM_PROMPT") or None,
            temperature=float(env["TEMPERATURE"]) if env.get("TEMPERATURE") else None,
            quotas=Quotas(
                min_records_per_job=int(env["MIN_RECORDS_PER_JOB"]),
                max_records_per_job=int(env["MAX_RECORDS_PER_JOB"]),
                max_records_per_file=int(env["MAX_RECORDS_PER_FILE"]),
                max_job_bytes=int(env["MAX_JOB_BYTES"]),
                max_file_bytes=int(env["MAX_FILE_BYTES"]),
            ),
            job_name_prefix=env["JOB_NAME_PREFIX"],
            job_timeout_hours=int(env["JOB_TIMEOUT_HOURS"]),
        )


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    return prepare(S3, event, Settings.from_env())


# ---- the run ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Accepted:
    item: int  # position in the items (0-based)
    key: str  # normalized
    record_id: str
    size: int  # bytes of the JSONL line


def prepare(s3: Any, event: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """Validate the items, split them into jobs and write the input; see the module docstring."""
    run_id, started = _run(event)
    source = _Source.of(s3, event.get("input"), settings)
    run_dir = f"{settings.input_prefix}{run_id}/"
    accepted: list[_Accepted] = []
    rejected: list[dict[str, Any]] = []
    keys: dict[str, int] = {}
    ids: dict[str, int] = {}
    total = 0
    for index, item in source.items():
        total += 1
        try:
            key, line = _guarded_line(item, settings)
            if key in keys:
                raise ItemError(f"duplicate key: item {keys[key]} has the same key once normalized; the first is kept")
            rid = record_id(key)
            if rid in ids:
                raise ItemError(f"recordId collision with item {ids[rid]} (two keys hash alike); rename one key")
            size = len(line)
            if size > settings.quotas.max_file_bytes:
                raise ItemError(
                    f"its JSONL record is {size:,} bytes, above max_file_bytes={settings.quotas.max_file_bytes:,}"
                )
        except ItemError as error:
            rejected.append({"item": index, **_key_of(item), "reason": str(error)})
            continue
        keys[key], ids[rid] = index, index
        accepted.append(_Accepted(index, key, rid, size))

    rejected_uri = None
    if rejected:
        rejected_uri = s3_uri(settings.input_bucket, f"{run_dir}rejected.jsonl")
        _put_lines(s3, settings.input_bucket, f"{run_dir}rejected.jsonl", rejected)
    summary = {
        "runId": run_id,
        "items": total,
        "records": len(accepted),
        "rejected": len(rejected),
        "rejectedUri": rejected_uri,
        "minimum": settings.quotas.min_records_per_job,
    }
    minimum = settings.quotas.min_records_per_job
    if len(accepted) < minimum:
        return {
            **summary,
            "belowMinimum": True,
            "jobs": [],
            "message": (
                f"{len(accepted)} records to answer ({total} items, {len(rejected)} rejected) is below the minimum of "
                f"{minimum} records per batch inference job for this model (min_records_per_job, a per-model "
                f"Service Quota): Bedrock would refuse the job. Gather at least {minimum - len(accepted)} more keys, "
                "or answer these on demand (ScheduledPrecompute, or BatchPrecompute's on_demand_fallback)"
            ),
        }
    try:
        split = plan_split([record.size for record in accepted], settings.quotas)
    except SplitError as error:
        raise InvalidInputError(str(error)) from None
    if len(split) > MAX_JOBS_PER_RUN:
        raise InvalidInputError(
            f"{len(accepted):,} records need {len(split)} jobs at max_records_per_job="
            f"{settings.quotas.max_records_per_job:,}; one run submits at most {MAX_JOBS_PER_RUN} (its job list must fit "
            "a 256 KiB Step Functions state): split the keys over several runs"
        )
    jobs = _write_jobs(s3, source, accepted, split, settings, run_id, run_dir, started)
    return {**summary, "belowMinimum": False, "message": "", "jobs": jobs}


def _run(event: Any) -> tuple[str, float]:
    if not isinstance(event, dict):
        raise InvalidInputError(f"the prepare request must be an object with input, runId and startTime, not {type(event).__name__}")
    run_id, start = event.get("runId"), event.get("startTime")
    if not isinstance(run_id, str) or not run_id:
        raise InvalidInputError("runId (the execution name) is missing")
    try:
        started = calendar.timegm(time.strptime(str(start)[:19], "%Y-%m-%dT%H:%M:%S"))
        fraction = re.match(r"^\.(\d+)", str(start)[19:])
        millis = int((fraction.group(1) + "000")[:3]) if fraction else 0
    except ValueError:
        raise InvalidInputError(f"startTime={start!r} is not an ISO-8601 time") from None
    return _RUN_SAFE.sub("-", run_id)[:80], started + millis / 1000


def _guarded_line(item: Any, settings: Settings) -> tuple[str, bytes]:
    """`_line`, with what one item's content can raise turned into that item's rejection."""
    try:
        return _line(item, settings)
    except UnicodeError:
        raise ItemError("the key or prompt is not valid Unicode (e.g. a lone surrogate, half an emoji)") from None
    except RecursionError:
        raise ItemError("the item is nested too deeply to encode") from None


def _key_of(item: Any) -> dict[str, str]:
    """{"key": <the item's key>} for the failure list when the key is text that can be written, else {}."""
    key = item.get("key") if isinstance(item, dict) else None
    if not isinstance(key, str):
        return {}
    try:
        key.encode("utf-8")
    except UnicodeError:
        return {}
    return {"key": key[:answers.MAX_KEY_BYTES]}


def _line(item: Any, settings: Settings) -> tuple[str, bytes]:
    """(normalized key, JSONL record bytes) of one item, or ItemError saying why it cannot be answered."""
    if isinstance(item, _Unparsable):
        raise ItemError(f"item {item.index} {item.reason}")
    if not isinstance(item, dict):
        raise ItemError(f"an item must be a JSON object, not {type(item).__name__}")
    unknown = sorted(set(item) - ITEM_FIELDS)
    if unknown:
        raise ItemError(f"unknown fields {unknown[:5]}; an item has key and prompt (or modelInput)")
    try:
        key = answers.check_key(item.get("key"))
    except answers.InvalidKeyError as error:
        raise ItemError(str(error)) from None
    prompt, model_input = item.get("prompt"), item.get("modelInput")
    if (prompt is None) == (model_input is None):
        raise ItemError("an item needs exactly one of prompt or modelInput")
    if prompt is not None:
        if not isinstance(prompt, str) or not prompt.strip():
            raise ItemError("prompt must be a non-empty string")
        if settings.invocation_type != "Converse":
            raise ItemError(
                f"a prompt is turned into a Converse body, but this run's invocation type is {settings.invocation_type}: "
                "give modelInput in the model's native body"
            )
        model_input = converse_model_input(
            prompt, max_tokens=settings.max_tokens, system=settings.system_prompt, temperature=settings.temperature
        )
    elif not isinstance(model_input, dict) or not model_input:
        raise ItemError("modelInput must be a non-empty JSON object")
    rid = record_id(key)
    line = json.dumps({"recordId": rid, "modelInput": model_input}, separators=(",", ":"), ensure_ascii=False) + "\n"
    return key, line.encode()


def _write_jobs(
    s3: Any,
    source: _Source,
    accepted: list[_Accepted],
    split: list[list[tuple[int, int]]],
    settings: Settings,
    run_id: str,
    run_dir: str,
    started: float,
) -> list[dict[str, Any]]:
    run_hash = hashlib.sha256(run_id.encode()).hexdigest()[:8]
    # Second pass over the items: only the accepted ones, in order, written where the split says.
    wanted = iter(accepted)
    upcoming = next(wanted, None)
    lines = source.items()

    def next_line() -> tuple[_Accepted, bytes]:
        nonlocal upcoming
        assert upcoming is not None
        for index, item in lines:
            if index == upcoming.item:
                key, line = _guarded_line(item, settings)
                if key != upcoming.key:
                    raise InvalidInputError(f"item {index} changed between two reads of the items object")
                record, upcoming = upcoming, next(wanted, None)
                return record, line
        raise InvalidInputError("the items object ended early on its second read; do not change it during a run")

    jobs = []
    expires_at = int(started) + settings.job_timeout_hours * 3600 + 2 * 86400
    for number, files in enumerate(split):
        name = f"{settings.job_name_prefix}-{run_hash}-{number:04d}"
        folder = f"{run_dir}{name}/"
        keys_writer = MultipartWriter(s3, settings.input_bucket, f"{run_dir}{name}.keys.jsonl")
        records = 0
        try:
            for file_number, (start, end) in enumerate(files):
                writer = MultipartWriter(s3, settings.input_bucket, f"{folder}records-{file_number:04d}.jsonl")
                try:
                    for _ in range(start, end):
                        record, line = next_line()
                        writer.write(line)
                        keys_writer.write(_json_line({"recordId": record.record_id, "key": record.key}))
                        records += 1
                    writer.close()
                except BaseException:
                    writer.abort()
                    raise
            keys_writer.close()
        except BaseException:
            keys_writer.abort()
            raise
        jobs.append({
            "jobIndex": number,
            "jobName": name,
            "clientRequestToken": hashlib.sha256(f"{run_id}/{number}".encode()).hexdigest()[:32],
            "inputUri": s3_uri(settings.input_bucket, folder),
            "outputUri": s3_uri(settings.output_bucket, f"{settings.output_prefix}{run_id}/{name}/"),
            "keysUri": s3_uri(settings.input_bucket, f"{run_dir}{name}.keys.jsonl"),
            "records": records,
            "files": len(files),
            "sequence": int(started * 1000),
            "sentAt": answers.iso_utc(started),
            "tokenExpiresAt": expires_at,
        })
    return jobs


def _json_line(value: Any) -> bytes:
    return (json.dumps(value, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


def _put_lines(s3: Any, bucket: str, key: str, values: list[Any]) -> None:
    s3.put_object(Bucket=bucket, Key=key, Body=b"".join(_json_line(v) for v in values))


# ---- reading the items ----------------------------------------------------------------------------


@dataclass
class _Source:
    """The run's items: inline in the execution input, or an object under ITEMS_PREFIX."""

    s3: Any
    inline: list[Any] | None
    bucket: str = ""
    key: str = ""
    etag: str | None = None

    @classmethod
    def of(cls, s3: Any, given: Any, settings: Settings) -> _Source:
        if not isinstance(given, dict):
            raise InvalidInputError(
                f"the execution input must be an object with items or itemsKey, not {type(given).__name__}"
            )
        unknown = sorted(set(given) - INPUT_FIELDS)
        if unknown or ("items" in given) == ("itemsKey" in given):
            raise InvalidInputError(
                f"the execution input has fields {sorted(given)[:6]}; give exactly one of items (a list of "
                "{key, prompt} objects) or itemsKey (a JSONL or JSON object in the items bucket)"
            )
        if "items" in given:
            if not isinstance(given["items"], list):
                raise InvalidInputError(f"items must be a list, not {type(given['items']).__name__}")
            return cls(s3, given["items"])
        key = given["itemsKey"]
        if not isinstance(key, str) or not key.startswith(settings.items_prefix) or key == settings.items_prefix:
            raise InvalidInputError(
                f"itemsKey={key!r} must name an object under {settings.items_prefix!r} in bucket "
                f"{settings.items_bucket} (the only prefix this run may read)"
            )
        return cls(s3, None, settings.items_bucket, key)

    def items(self) -> Iterator[tuple[int, Any]]:
        """(position, item) of every item; a line that is not JSON is yielded as an ItemError-raising value."""
        if self.inline is not None:
            yield from enumerate(self.inline)
            return
        get: dict[str, Any] = {"Bucket": self.bucket, "Key": self.key}
        if self.etag is not None:
            get["IfMatch"] = self.etag
        try:
            response = self.s3.get_object(**get)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code")
            if code in ("NoSuchKey", "404"):
                raise InvalidInputError(f"no items object s3://{self.bucket}/{self.key}") from None
            if code in ("PreconditionFailed", "412"):
                raise InvalidInputError(
                    f"s3://{self.bucket}/{self.key} changed between two reads; do not change it during a run"
                ) from None
            raise
        self.etag = self.etag or response.get("ETag")
        body = response["Body"]
        first = body.read(1)
        if first == UTF8_BOM[:1]:  # a byte-order mark (editors on Windows write one): not part of the JSON
            rest = body.read(len(UTF8_BOM) - 1)
            first = body.read(1) if first + rest == UTF8_BOM else first + rest
        while first in (b" ", b"\n", b"\r", b"\t"):
            first = body.read(1)
        if first == b"[":  # one JSON array
            try:
                values = json.loads(first + body.read())
            except (ValueError, RecursionError) as error:
                raise InvalidInputError(
                    f"s3://{self.bucket}/{self.key} is not a JSON array ({type(error).__name__}); write one item per line "
                    "(JSON Lines) so one bad item fails alone"
                ) from None
            if not isinstance(values, list):
                raise InvalidInputError(f"s3://{self.bucket}/{self.key} is not a JSON array")
            yield from enumerate(values)
            return
        index = 0
        pending = first
        for raw in _lines(body, pending):
            if not raw.strip():
                continue
            try:
                value: Any = json.loads(raw)
            except RecursionError:
                value = _Unparsable(index, "is nested too deeply to parse")
            except ValueError:
                value = _Unparsable(index, "is not a JSON line")
            yield index, value
            index += 1


class _Unparsable:
    """Stands for a line of the items object that is not JSON: `_line` rejects it, naming the line."""

    def __init__(self, index: int, reason: str) -> None:
        self.index, self.reason = index, reason


def _lines(body: Any, head: bytes) -> Iterator[bytes]:
    """The lines of a streaming body whose first bytes were already read into `head`."""
    buffer = head
    for chunk in iter(lambda: body.read(1024 * 1024), b""):
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        yield from complete
    if buffer:
        yield buffer


# ---- writing objects of any size --------------------------------------------------------------------


class MultipartWriter:
    """Writes an S3 object from many small writes, holding at most one part in memory.

    Small objects go up in one PutObject on close; larger ones as a multipart upload of PART_BYTES
    parts, so a file of several hundred megabytes never sits in the function's memory.
    """

    def __init__(self, s3: Any, bucket: str, key: str, part_bytes: int = PART_BYTES) -> None:
        self.s3, self.bucket, self.key, self.part_bytes = s3, bucket, key, part_bytes
        self.buffer = bytearray()
        self.upload_id: str | None = None
        self.parts: list[dict[str, Any]] = []

    def write(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) >= self.part_bytes:
            self._flush()

    def _flush(self) -> None:
        if self.upload_id is None:
            self.upload_id = self.s3.create_multipart_upload(Bucket=self.bucket, Key=self.key)["UploadId"]
        number = len(self.parts) + 1
        etag = self.s3.upload_part(
            Bucket=self.bucket, Key=self.key, UploadId=self.upload_id, PartNumber=number, Body=bytes(self.buffer)
        )["ETag"]
        self.parts.append({"ETag": etag, "PartNumber": number})
        self.buffer.clear()

    def close(self) -> None:
        if self.upload_id is None:
            self.s3.put_object(Bucket=self.bucket, Key=self.key, Body=bytes(self.buffer))
            return
        if self.buffer:
            self._flush()
        self.s3.complete_multipart_upload(
            Bucket=self.bucket, Key=self.key, UploadId=self.upload_id, MultipartUpload={"Parts": self.parts}
        )

    def abort(self) -> None:
        if self.upload_id is not None:
            # The original error matters more; the buckets' lifecycle rule removes what is left.
            with contextlib.suppress(Exception):
                self.s3.abort_multipart_upload(Bucket=self.bucket, Key=self.key, UploadId=self.upload_id)
