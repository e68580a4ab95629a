"""The bedrock-runtime client and the Converse call, done the way that keeps calls fast.

- Create the client once per process (module scope in Lambda): a client built per request repeats
  setup and TLS handshakes on every call.
- Size max_pool_connections to the calls the process runs at once; past the pool, each extra
  thread opens (and discards) a fresh connection.
- Bound the SDK's retries: throttles are retried with backoff and jitter, then surface so the
  caller (a queue, a state machine) can retry later instead of holding a slot.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

THROTTLE_CODES = frozenset(
    {"ThrottlingException", "TooManyRequestsException", "ServiceQuotaExceededException"}
)
INFERENCE_CONFIG_KEYS = frozenset({"maxTokens", "temperature", "topP", "stopSequences"})


class RequestError(ValueError):
    """A request that can never succeed as written (retrying it is pointless)."""


def bedrock_client(
    *,
    max_pool_connections: int = 10,
    max_attempts: int = 4,
    retry_mode: str = "standard",
    read_timeout: float = 120,
    region_name: str | None = None,
    endpoint_url: str | None = None,
    session: boto3.session.Session | None = None,
):
    """A bedrock-runtime client for one process; call it once and share the result across threads.

    max_attempts counts the first call: 4 means up to 3 retries with the SDK's exponential backoff
    and jitter ("standard"), or with client-side rate limiting after throttles ("adaptive").
    """
    if max_pool_connections < 1:
        raise ValueError(f"max_pool_connections={max_pool_connections} must be >= 1 (the calls run at once)")
    if max_attempts < 1:
        raise ValueError(f"max_attempts={max_attempts} must be >= 1 (1 disables retries)")
    config = Config(
        max_pool_connections=max_pool_connections,
        retries={"total_max_attempts": max_attempts, "mode": retry_mode},  # counts the first call
        read_timeout=read_timeout,
        connect_timeout=5,
        tcp_keepalive=True,
    )
    return (session or boto3).client(
        "bedrock-runtime", region_name=region_name, endpoint_url=endpoint_url, config=config
    )


def build_converse_request(
    model_id: str,
    *,
    prompt: str | None = None,
    messages: Sequence[Mapping[str, Any]] | None = None,
    system: str | None = None,
    inference_config: Mapping[str, Any] | None = None,
    additional_fields: Mapping[str, Any] | None = None,
    latency: str | None = None,
) -> dict[str, Any]:
    """Converse keyword arguments, with each parameter where the API expects it.

    Shared parameters (maxTokens, temperature, topP, stopSequences) go in inferenceConfig; anything
    model-specific (Anthropic's top_k) goes in additionalModelRequestFields; performanceConfig only
    selects "standard" or "optimized" latency. Raises RequestError for anything misplaced.
    """
    if (prompt is None) == (messages is None):
        raise RequestError("pass exactly one of prompt (text) or messages (Converse messages)")
    if prompt is not None:
        if not isinstance(prompt, str) or not prompt.strip():
            raise RequestError("prompt must be a non-empty string")
        messages = [{"role": "user", "content": [{"text": prompt}]}]
    if (
        not isinstance(messages, Sequence)
        or not messages
        or not all(isinstance(m, Mapping) for m in messages)
    ):
        raise RequestError("messages must be a non-empty list of {'role': ..., 'content': [...]} objects")
    request: dict[str, Any] = {"modelId": model_id, "messages": [dict(m) for m in messages]}
    if system is not None:
        if not isinstance(system, str) or not system.strip():
            raise RequestError("system must be a non-empty string")
        request["system"] = [{"text": system}]
    if inference_config:
        unknown = set(inference_config) - INFERENCE_CONFIG_KEYS
        if unknown:
            raise RequestError(
                f"inferenceConfig has {sorted(unknown)}; it takes only {sorted(INFERENCE_CONFIG_KEYS)}: put "
                "model-specific parameters such as top_k in additionalModelRequestFields"
            )
        max_tokens = inference_config.get("maxTokens")
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            raise RequestError(f"inferenceConfig.maxTokens={max_tokens!r} must be a positive integer")
        request["inferenceConfig"] = dict(inference_config)
    if additional_fields:
        request["additionalModelRequestFields"] = dict(additional_fields)
    if latency is not None:
        if latency not in ("standard", "optimized"):
            raise RequestError(f"latency={latency!r} must be 'standard' or 'optimized'")
        request["performanceConfig"] = {"latency": latency}
    return request


@dataclass(frozen=True)
class ConverseResult:
    text: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    stop_reason: str
    latency_ms: float  # measured by the caller, retries included
    service_latency_ms: int | None  # the service's own metrics.latencyMs
    served_latency: str  # "standard" or "optimized": what actually served the request
    first_token_ms: float | None = None  # streaming only: time to the first text, measured by the caller

    @property
    def output_tokens_per_second(self) -> float | None:
        """Decode speed after the first token (streaming only): what a reader sees the answer keep."""
        if self.first_token_ms is None or self.latency_ms <= self.first_token_ms:
            return None
        return self.output_tokens / ((self.latency_ms - self.first_token_ms) / 1000)


def converse(client, request: Mapping[str, Any]) -> ConverseResult:
    """Call Converse and return the answer with its usage; errors propagate as botocore ClientError."""
    started = time.perf_counter()
    response = client.converse(**request)
    elapsed_ms = (time.perf_counter() - started) * 1000
    content = response.get("output", {}).get("message", {}).get("content", [])
    return _result(
        "".join(block.get("text", "") for block in content), response, elapsed_ms, first_token_ms=None
    )


def converse_stream(client, request: Mapping[str, Any]) -> ConverseResult:
    """Call ConverseStream and read it to the end, timing the first text (TTFT) as the user sees it.

    Usage, served latency mode and stop reason come from the stream's own events (server-reported,
    never re-counted). An exception inside the stream propagates as botocore's EventStreamError,
    which carries the same error code a ClientError would (is_throttle works on both).
    """
    started = time.perf_counter()
    response = client.converse_stream(**request)
    parts: list[str] = []
    summary: dict[str, Any] = {}
    first_token_ms = None
    for event in response["stream"]:
        if "contentBlockDelta" in event:
            text = event["contentBlockDelta"].get("delta", {}).get("text", "")
            if text and first_token_ms is None:
                first_token_ms = (time.perf_counter() - started) * 1000
            parts.append(text)
        elif "messageStop" in event:
            summary["stopReason"] = event["messageStop"].get("stopReason", "")
        elif "metadata" in event:
            summary.update(event["metadata"])
    elapsed_ms = (time.perf_counter() - started) * 1000
    return _result("".join(parts), summary, elapsed_ms, first_token_ms=first_token_ms)


def _result(text: str, response: Mapping[str, Any], elapsed_ms: float, *, first_token_ms: float | None) -> ConverseResult:
    usage = response.get("usage", {})
    return ConverseResult(
        text=text,
        input_tokens=usage.get("inputTokens", 0),
        output_tokens=usage.get("outputTokens", 0),
        cache_read_tokens=usage.get("cacheReadInputTokens", 0),
        cache_write_tokens=usage.get("cacheWriteInputTokens", 0),
        stop_reason=response.get("stopReason", ""),
        latency_ms=round(elapsed_ms, 1),
        service_latency_ms=response.get("metrics", {}).get("latencyMs"),
        served_latency=response.get("performanceConfig", {}).get("latency", "standard"),
        first_token_ms=None if first_token_ms is None else round(first_token_ms, 1),
    )


def is_throttle(error: BaseException) -> bool:
    """True for Bedrock's throttling errors, which are worth retrying later.

    In-stream exceptions (EventStreamError, a ClientError) carry camelCase codes
    (throttlingException); both spellings count.
    """
    if not isinstance(error, ClientError):
        return False
    code = error.response.get("Error", {}).get("Code") or ""
    return code[:1].upper() + code[1:] in THROTTLE_CODES
