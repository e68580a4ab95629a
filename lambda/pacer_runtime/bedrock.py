"""The bedrock-runtime client and the Converse call, done the way that keeps calls fast.

- Create the client once per process (module scope in Lambda): a client built per request repeats
  setup and TLS handshakes on every call.
- Size max_pool_connections to the calls the process runs at once; past the pool, each extra
  thread opens (and discards) a fresh connection.
- Bound the SDK's retries: throttles are retried with backoff and jitter, then surface so the
  caller (a queue, a state machine) can retry later instead of holding a slot.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from ._arguments import positive, whole
from .metrics import SERVICE_TIER_MEMBER, SERVICE_TIERS
from .prompts import describe as _kind  # one rule for describing a value without echoing it
from .replay import (  # one reading of a Converse response or stream, the load replay's too
    THROTTLE_CODES,
    ConverseResult,
    call_converse,
    call_converse_stream,
)

INFERENCE_CONFIG_KEYS = frozenset({"maxTokens", "temperature", "topP", "stopSequences"})
MESSAGE_KEYS = frozenset({"role", "content"})
MESSAGE_ROLES = ("user", "assistant")
MAX_STOP_SEQUENCES = 2500  # the Converse API model's limit; models may accept fewer


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
    whole("max_pool_connections", max_pool_connections, note="the calls that run at once")
    whole("max_attempts", max_attempts, note="the first call included; 1 disables retries")
    positive("read_timeout", read_timeout)
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
    service_tier: str | None = None,
) -> dict[str, Any]:
    """Converse keyword arguments, with each parameter where the API expects it.

    Shared parameters (maxTokens, temperature, topP, stopSequences) go in inferenceConfig; anything
    model-specific (Anthropic's top_k) goes in additionalModelRequestFields; performanceConfig only
    selects "standard" or "optimized" latency; service_tier ("priority", "default", "flex" or
    "reserved") goes in serviceTier, separate from the latency mode (both may be sent). No tier
    sends none, which Bedrock serves at default. Every field is type-checked here, so input decoded
    from JSON (a queue message) fails with a RequestError naming the field instead of an
    AttributeError or TypeError deep inside the caller. The checks follow the Converse API shapes;
    content blocks other than text are passed through for botocore to validate.
    """
    if (prompt is None) == (messages is None):
        raise RequestError("pass exactly one of prompt (text) or messages (Converse messages)")
    if prompt is not None:
        if not isinstance(prompt, str) or not prompt.strip():
            raise RequestError(f"prompt must be a non-empty string, not {_kind(prompt)}")
        messages = [{"role": "user", "content": [{"text": prompt}]}]
    if not isinstance(model_id, str) or not model_id.strip():
        raise RequestError(f"model_id={model_id!r} must be a model id, profile id or ARN")
    request: dict[str, Any] = {"modelId": model_id, "messages": _checked_messages(messages)}
    if system is not None:
        if not isinstance(system, str) or not system.strip():
            raise RequestError(f"system must be a non-empty string, not {_kind(system)}")
        request["system"] = [{"text": system}]
    if inference_config is not None:
        config = _checked_inference_config(inference_config)
        if config:
            request["inferenceConfig"] = config
    if additional_fields is not None:
        if not isinstance(additional_fields, Mapping) or not all(isinstance(k, str) for k in additional_fields):
            raise RequestError(
                f"additionalModelRequestFields must be an object of model-specific fields such as "
                f"{{\"top_k\": 40}}, not {_kind(additional_fields)}"
            )
        if additional_fields:
            request["additionalModelRequestFields"] = dict(additional_fields)
    if latency is not None:
        if latency not in ("standard", "optimized"):
            raise RequestError(f"latency={latency!r} must be 'standard' or 'optimized'")
        request["performanceConfig"] = {"latency": latency}
    if service_tier is not None:
        request[SERVICE_TIER_MEMBER] = {"type": checked_service_tier(service_tier)}
    return request


def checked_service_tier(service_tier: Any) -> str:
    """A service tier as Bedrock spells it, or a RequestError naming the four (a tier outside the
    enum is refused by botocore before the call; caught here, the message says what to send)."""
    if isinstance(service_tier, str) and service_tier in SERVICE_TIERS:
        return service_tier
    short = isinstance(service_tier, str) and 0 < len(service_tier) <= 20  # a tier name, never a prompt
    hint = " (Bedrock spells standard 'default')" if service_tier == "standard" else ""
    raise RequestError(
        f"service_tier{f'={service_tier!r}' if short else _show(service_tier)} must be one of "
        f"{', '.join(repr(t) for t in SERVICE_TIERS)}{hint}"
    )


def _show(value: Any) -> str:
    """`=value` for a number (safe to log), ` (a string)` and the like for anything else."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"={value!r}"
    return f" ({_kind(value)})"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _checked_messages(messages: Any) -> list[dict[str, Any]]:
    """Converse messages: a non-empty list of {role: user|assistant, content: [one-key blocks]}."""
    shape = "messages must be a non-empty list of {'role': 'user'|'assistant', 'content': [...]} objects"
    if not isinstance(messages, list | tuple) or not messages:
        raise RequestError(f"{shape}, not {_kind(messages)}")
    checked = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, Mapping):
            raise RequestError(f"{where} must be an object with role and content, not {_kind(message)}")
        unknown = sorted(str(k) for k in message if k not in MESSAGE_KEYS)
        if unknown:
            raise RequestError(f"{where} has unknown fields {unknown}; a message takes only role and content")
        if message.get("role") not in MESSAGE_ROLES:
            raise RequestError(f"{where}.role must be 'user' or 'assistant', not {_kind(message.get('role'))}")
        content = message.get("content")
        if not isinstance(content, list | tuple) or not content:
            raise RequestError(f"{where}.content must be a non-empty list of content blocks, not {_kind(content)}")
        for j, block in enumerate(content):
            _check_block(f"{where}.content[{j}]", block)
        checked.append({"role": message["role"], "content": [dict(block) for block in content]})
    return checked


def _check_block(where: str, block: Any) -> None:
    """A content block is a union: exactly one key. Text is checked here; other kinds (image,
    document, toolUse, ...) must be objects and are validated by botocore against the API model."""
    if not isinstance(block, Mapping) or len(block) != 1:
        raise RequestError(
            f"{where} must be an object with exactly one key such as {{\"text\": \"...\"}}, not "
            f"{_kind(block) if not isinstance(block, Mapping) else f'an object with {len(block)} keys'}"
        )
    ((kind, value),) = block.items()
    if kind == "text":
        if not isinstance(value, str) or not value.strip():
            raise RequestError(f"{where}.text must be a non-empty string, not {_kind(value)}")
    elif not isinstance(kind, str) or not isinstance(value, Mapping):
        raise RequestError(f"{where}.{kind} must be an object, not {_kind(value)}")


def _checked_inference_config(config: Any) -> dict[str, Any]:
    if not isinstance(config, Mapping):
        raise RequestError(
            f"inferenceConfig must be an object such as {{\"maxTokens\": 600, \"temperature\": 0.2}}, "
            f"not {_kind(config)}"
        )
    unknown = set(config) - INFERENCE_CONFIG_KEYS
    if unknown:
        raise RequestError(
            f"inferenceConfig has {sorted(map(str, unknown))}; it takes only {sorted(INFERENCE_CONFIG_KEYS)}: put "
            "model-specific parameters such as top_k in additionalModelRequestFields"
        )
    max_tokens = config.get("maxTokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        raise RequestError(f"inferenceConfig.maxTokens{_show(max_tokens)} must be a positive integer")
    for name in ("temperature", "topP"):
        value = config.get(name)
        if value is not None and (not _is_number(value) or not 0 <= value <= 1):
            raise RequestError(f"inferenceConfig.{name}{_show(value)} must be a number from 0 to 1")
    stops = config.get("stopSequences")
    if stops is not None and (
        not isinstance(stops, list | tuple)
        or len(stops) > MAX_STOP_SEQUENCES
        or not all(isinstance(s, str) and s for s in stops)
    ):
        raise RequestError(
            f"inferenceConfig.stopSequences must be a list of at most {MAX_STOP_SEQUENCES} non-empty strings, "
            f"not {_kind(stops)}"
        )
    return {name: list(value) if name == "stopSequences" else value for name, value in config.items()}


def converse(client, request: Mapping[str, Any]) -> ConverseResult:
    """Call Converse and return the answer with its usage; errors propagate as botocore ClientError."""
    return call_converse(client, request)


def converse_stream(client, request: Mapping[str, Any]) -> ConverseResult:
    """Call ConverseStream and read it to the end, timing the first text (TTFT) as the user sees it.

    Usage, served latency mode, served tier and stop reason come from the stream's own events (server-reported,
    never re-counted). An exception inside the stream propagates as botocore's EventStreamError,
    which carries the same error code a ClientError would (is_throttle works on both).
    """
    return call_converse_stream(client, request)


def is_throttle(error: BaseException) -> bool:
    """True for Bedrock's throttling errors, which are worth retrying later.

    In-stream exceptions (EventStreamError, a ClientError) carry camelCase codes
    (throttlingException); both spellings count.
    """
    if not isinstance(error, ClientError):
        return False
    code = error.response.get("Error", {}).get("Code") or ""
    return code[:1].upper() + code[1:] in THROTTLE_CODES
