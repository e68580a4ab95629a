"""The pure parts of batch pre-computation: record ids, the split into jobs and files, and answers.

No AWS client here, so the construct's tests, the handlers and the benchmark share one definition.

Record ids
    Bedrock documents a recordId as an alphanumeric string (older pages: 11 characters). A store key
    is neither (`review-summary#B0C1`), so each record's id is `record_id(key)`: 11 base-62
    characters of the SHA-256 of the normalized key (about 65 bits: two keys among 50,000 collide
    with a probability near 3e-11, and `prepare` refuses the second key of a collision rather than
    mixing two answers). The id -> key mapping is written beside the job's input, because output
    lines come back in any order and carry only the id.

Split
    A run's records are divided into jobs of near-equal size (never a small remainder job that would
    fall below the per-job minimum), each at most `max_records_per_job` records and
    `max_job_bytes` bytes, and each job into files of at most `max_records_per_file` records and
    `max_file_bytes` bytes.
"""

from __future__ import annotations

import hashlib
import math
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

__all__ = [
    "LOADABLE",
    "RECORD_ID_LENGTH",
    "TERMINAL",
    "Extracted",
    "NoAnswerError",
    "Quotas",
    "SplitError",
    "converse_model_input",
    "extract_answer",
    "plan_split",
    "record_id",
    "s3_uri",
    "split_uri",
]

RECORD_ID_LENGTH = 11
_ALPHABET = string.digits + string.ascii_uppercase + string.ascii_lowercase
#: The job states Bedrock ends in; the first two have output to load.
TERMINAL = ("Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired")
LOADABLE = ("Completed", "PartiallyCompleted")


def record_id(key: str) -> str:
    """The recordId of a normalized store key: 11 base-62 characters of its SHA-256."""
    number = int.from_bytes(hashlib.sha256(key.encode()).digest()[:9], "big")  # 72 bits > 62**11
    chars = []
    for _ in range(RECORD_ID_LENGTH):
        number, digit = divmod(number, 62)
        chars.append(_ALPHABET[digit])
    return "".join(chars)


def s3_uri(bucket: str, key: str) -> str:
    return f"s3://{bucket}/{key}"


def split_uri(uri: str) -> tuple[str, str]:
    """(bucket, key) of an s3:// URI; ValueError for anything else."""
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        raise ValueError(f"{uri!r} is not an s3:// URI")
    bucket, _, key = uri[5:].partition("/")
    if not bucket:
        raise ValueError(f"{uri!r} names no bucket")
    return bucket, key


class SplitError(ValueError):
    """The records cannot be divided into jobs that all respect the quotas."""


@dataclass(frozen=True)
class Quotas:
    """The per-model batch inference quotas a run is split by (see BatchPrecompute for the defaults).
    Each is a whole number >= 1, else ValueError naming it: a zero maximum would divide by zero or plan
    one-record files, a zero minimum empty jobs."""

    min_records_per_job: int
    max_records_per_job: int
    max_records_per_file: int
    max_job_bytes: int
    max_file_bytes: int

    def __post_init__(self) -> None:
        for limit in fields(self):
            value = getattr(self, limit.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Quotas {limit.name}={value!r} must be a whole number >= 1")


def plan_split(sizes: Sequence[int], quotas: Quotas) -> list[list[tuple[int, int]]]:
    """Jobs, each a list of files, each a (start, end) range over the records whose line sizes are `sizes`.

    Jobs get near-equal record counts, so with max_records_per_job >= 2 x min_records_per_job no
    job falls below the minimum; more jobs are used while one would exceed max_job_bytes. Files
    fill up to max_records_per_file and max_file_bytes, in order.
    """
    count = len(sizes)
    if count < quotas.min_records_per_job:
        raise SplitError(f"{count} records is below the minimum of {quotas.min_records_per_job} per job")
    too_big = [i for i, size in enumerate(sizes) if size > quotas.max_file_bytes]
    if too_big:
        raise SplitError(
            f"record {too_big[0]} is {sizes[too_big[0]]:,} bytes, above max_file_bytes={quotas.max_file_bytes:,}"
        )
    offsets = [0]
    for size in sizes:
        offsets.append(offsets[-1] + size)
    jobs = max(1, math.ceil(count / quotas.max_records_per_job), math.ceil(offsets[-1] / quotas.max_job_bytes))
    while True:
        bounds = _balanced(count, jobs)
        if count // jobs < quotas.min_records_per_job:
            raise SplitError(
                f"{count} records of {offsets[-1]:,} bytes need {jobs} jobs to stay under max_records_per_job="
                f"{quotas.max_records_per_job:,} and max_job_bytes={quotas.max_job_bytes:,}, and {jobs} jobs would hold "
                f"fewer than the minimum of {quotas.min_records_per_job} records each; shorten the prompts or split the run"
            )
        if all(offsets[end] - offsets[start] <= quotas.max_job_bytes for start, end in bounds):
            break
        jobs += 1
    return [_files(sizes, start, end, quotas) for start, end in bounds]


def _balanced(count: int, parts: int) -> list[tuple[int, int]]:
    base, extra = divmod(count, parts)
    bounds, start = [], 0
    for index in range(parts):
        end = start + base + (1 if index < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def _files(sizes: Sequence[int], start: int, end: int, quotas: Quotas) -> list[tuple[int, int]]:
    files: list[tuple[int, int]] = []
    first, used = start, 0
    for index in range(start, end):
        if index > first and (index - first >= quotas.max_records_per_file or used + sizes[index] > quotas.max_file_bytes):
            files.append((first, index))
            first, used = index, 0
        used += sizes[index]
    files.append((first, end))
    return files


def converse_model_input(
    prompt: str, *, max_tokens: int, system: str | None = None, temperature: float | None = None
) -> dict[str, Any]:
    """A record's modelInput for the Converse invocation type: the Converse request body, no modelId."""
    body: dict[str, Any] = {"messages": [{"role": "user", "content": [{"text": prompt}]}]}
    if system:
        body["system"] = [{"text": system}]
    config: dict[str, Any] = {"maxTokens": max_tokens}
    if temperature is not None:
        config["temperature"] = temperature
    body["inferenceConfig"] = config
    return body


class NoAnswerError(ValueError):
    """A success line whose modelOutput holds no answer text."""


@dataclass(frozen=True)
class Extracted:
    text: str
    stop_reason: str
    input_tokens: int
    output_tokens: int


def extract_answer(output: Any) -> Extracted:
    """The answer text, stop reason and token counts of a modelOutput.

    Understands the Converse response (and Nova's native body, the same shape), Anthropic's
    Messages body, Llama's, Titan's, Mistral's and the OpenAI-style `choices` body.
    """
    if not isinstance(output, Mapping):
        raise NoAnswerError(f"modelOutput is {type(output).__name__}, not an object")
    message = output.get("output", {}).get("message") if isinstance(output.get("output"), Mapping) else None
    if isinstance(message, Mapping):  # Converse, Nova
        usage = output.get("usage") or {}
        return _extracted(_texts(message.get("content")), output.get("stopReason"),
                          usage.get("inputTokens"), usage.get("outputTokens"))
    if isinstance(output.get("content"), list):  # Anthropic Messages
        usage = output.get("usage") or {}
        return _extracted(_texts(output["content"]), output.get("stop_reason"),
                          usage.get("input_tokens"), usage.get("output_tokens"))
    if "generation" in output:  # Llama
        return _extracted(output.get("generation"), output.get("stop_reason"),
                          output.get("prompt_token_count"), output.get("generation_token_count"))
    if isinstance(output.get("results"), list) and output["results"]:  # Titan Text
        first = output["results"][0] if isinstance(output["results"][0], Mapping) else {}
        return _extracted(first.get("outputText"), first.get("completionReason"),
                          output.get("inputTextTokenCount"), first.get("tokenCount"))
    if isinstance(output.get("outputs"), list) and output["outputs"]:  # Mistral
        first = output["outputs"][0] if isinstance(output["outputs"][0], Mapping) else {}
        return _extracted(first.get("text"), first.get("stop_reason"), None, None)
    if isinstance(output.get("choices"), list) and output["choices"]:  # OpenAI-style
        first = output["choices"][0] if isinstance(output["choices"][0], Mapping) else {}
        usage = output.get("usage") or {}
        text = (first.get("message") or {}).get("content") if isinstance(first.get("message"), Mapping) else first.get("text")
        return _extracted(text, first.get("finish_reason"), usage.get("prompt_tokens"), usage.get("completion_tokens"))
    raise NoAnswerError(f"modelOutput has no answer field this loader knows (keys: {sorted(output)[:8]})")


def _texts(content: Any) -> str | None:
    if not isinstance(content, list):
        return None
    parts = [block["text"] for block in content if isinstance(block, Mapping) and isinstance(block.get("text"), str)]
    return "".join(parts) if parts else None


def _extracted(text: Any, stop: Any, input_tokens: Any, output_tokens: Any) -> Extracted:
    if not isinstance(text, str) or not text.strip():
        raise NoAnswerError("modelOutput holds no answer text")
    return Extracted(text, stop if isinstance(stop, str) else "", _count(input_tokens), _count(output_tokens))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
