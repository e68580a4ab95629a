"""Reading and validating Converse requests the way Bedrock does, and what every operation's request becomes.

Clients other than botocore (Step Functions' SDK integration, raw HTTP, other SDKs) send requests
unvalidated, so the emulator checks what Bedrock checks and answers a 400 ValidationException, never
a retryable 500. Messages are Bedrock's where they are known (the conversation rules, empty content,
blank text, the output limit, the context window, the model identifier); type and enum errors use
the service's "1 validation error detected" form, whose exact wording for types is the emulator's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .specs import (
    ANSWER_TOKENS_KEY,
    LATENCY_MODES,
    SERVICE_TIER_MEMBER,
    SERVICE_TIERS,
    EmulatorError,
    ModelSpec,
    approx_tokens,
)

#: Operations the emulator serves (botocore's names), by the last segment of their request path.
OPERATIONS = {
    "converse": "Converse",
    "converse-stream": "ConverseStream",
    "invoke": "InvokeModel",
    "invoke-with-response-stream": "InvokeModelWithResponseStream",
    "count-tokens": "CountTokens",
}
STREAMING = ("ConverseStream", "InvokeModelWithResponseStream")

START_WITH_USER = "A conversation must start with a user message. Try again with a conversation that starts with a user message."
ALTERNATE = ("A conversation must alternate between user and assistant roles. Make sure the conversation alternates "
             "between user and assistant roles and try again.")
TOO_LONG = "Input is too long for requested model."
INVALID_MODEL = "The provided model identifier is invalid."


@dataclass
class Request:
    """What the emulator needs from a request, whichever operation carried it."""

    operation: str
    spec: ModelSpec
    prompt: str
    cached_prefix: str
    max_tokens: int
    latency: str = "standard"
    service_tier: str | None = None
    answer_hint: int | None = None
    family: str | None = None  # the native body family of InvokeModel*, None for Converse*

    @property
    def streaming(self) -> bool:
        return self.operation in STREAMING


def invalid(message: str) -> EmulatorError:
    return EmulatorError("ValidationException", message)


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _constraint(path: str, value: Any, rule: str) -> EmulatorError:
    return invalid(f"1 validation error detected: Value {_show(value)} at '{path}' failed to satisfy constraint: Member must {rule}")


def expect(value: Any, kind: type | tuple[type, ...], path: str, described: str) -> Any:
    """value when it has the JSON type `kind` (bool is never a number), else a ValidationException."""
    if isinstance(value, kind) and not (isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,))):
        return value
    raise _constraint(path, value, f"be {described}")


def optional_object(body: Mapping[str, Any], key: str, path: str | None = None) -> dict[str, Any]:
    value = body.get(key)
    return {} if value is None else expect(value, dict, path or key, "a structure (JSON object)")


def number_in(value: Any, path: str, low: float, high: float) -> None:
    if value is None:
        return
    expect(value, (int, float), path, "a number")
    if value < low:
        raise _constraint(path, value, f"have value greater than or equal to {low:g}")
    if value > high:
        raise _constraint(path, value, f"have value less than or equal to {high:g}")


def one_of(value: Any, path: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise _constraint(path, value, f"satisfy enum value set: [{', '.join(choices)}]")
    return value


def service_tier(spec: ModelSpec, tier: Any, path: str) -> str | None:
    """The tier a request asks for, refused as ModelSpec documents: an unknown value, a tier the model
    does not take, or `reserved` without a reservation (the last two are documented assumptions)."""
    if tier is None:
        return None
    one_of(tier, path, SERVICE_TIERS)
    if tier not in spec.service_tiers:
        raise invalid(f"The model {spec.model_id} does not support the {tier} service tier. Send one of "
                      f"{', '.join(spec.service_tiers)}, or no service tier for default.")
    if tier == "reserved" and not spec.has_reservation:
        raise invalid(f"This account has no Reserved tier capacity for {spec.model_id}. Send the default, priority "
                      "or flex service tier, or none.")
    return str(tier)


def checked_max_tokens(spec: ModelSpec, value: Any, path: str) -> int:
    """The request's max_tokens, or the model's maximum when unset (what Bedrock reserves then)."""
    if value is None:
        return spec.max_output_tokens
    expect(value, int, path, "an integer")
    if value < 1:
        raise _constraint(path, value, "have value greater than or equal to 1")
    if value > spec.max_output_tokens:
        limit = spec.max_output_tokens
        raise invalid(f"The maximum tokens you requested exceeds the model limit of {limit}. "
                      f"Try again with a maximum tokens value that is lower than {limit}.")
    return value


def answer_hint(metadata: Mapping[str, Any]) -> int | None:
    if ANSWER_TOKENS_KEY not in metadata:
        return None
    try:
        return max(int(metadata[ANSWER_TOKENS_KEY]), 1)
    except (TypeError, ValueError):
        raise invalid(f"requestMetadata {ANSWER_TOKENS_KEY} must be a whole number of tokens") from None


def request_metadata(value: Any, path: str = "requestMetadata") -> dict[str, str]:
    """A map of up to 16 string pairs."""
    if value is None:
        return {}
    expect(value, dict, path, "a map of string keys to string values")
    for key, item in value.items():
        expect(item, str, f"{path}.{key}", "a string")
    if not 1 <= len(value) <= 16:
        raise _constraint(path, value, "have between 1 and 16 entries")
    return value


def texts(value: Any) -> Iterator[str]:
    """Every text a request carries (Converse blocks, native bodies), in order."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            if key in ("text", "content", "prompt", "inputText", "system") or isinstance(item, list | dict):
                yield from texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from texts(item)


def cached_prefix(blocks: list[Any], *, marker: str = "cachePoint", inclusive: bool = False) -> str:
    """The text before the last cache marker: a separate cachePoint block (Converse, Nova), or a
    block carrying cache_control (Anthropic, inclusive: the marked block is cached too)."""
    prefix: list[str] = []
    seen: list[str] = []
    for block in blocks:
        marked = isinstance(block, dict) and marker in block
        if not marked or inclusive:
            seen.extend(texts(block))
        if marked:
            prefix = list(seen)
    return "".join(prefix)


def check_context(spec: ModelSpec, prompt: str, *, converse: bool) -> None:
    if approx_tokens(prompt) > spec.context_window:
        raise invalid(f"The model returned the following errors: {TOO_LONG}" if converse else TOO_LONG)


def _content_blocks(content: list[Any], path: str) -> None:
    for j, block in enumerate(content):
        where = f"{path}.{j}"
        expect(block, dict, where, "a ContentBlock structure such as {\"text\": \"...\"}")
        if not block:
            raise _constraint(where, block, "set exactly one member of the ContentBlock union")
        if "text" in block:
            expect(block["text"], str, f"{where}.text", "a string")
            if not block["text"].strip():
                raise invalid(f"The text field in the ContentBlock object at {where} is blank. Add text to the text field, and try again.")


def conversation(body: Mapping[str, Any]) -> list[Any]:
    """system + message content blocks of a Converse-shaped body (Converse, ConverseStream, CountTokens,
    and Nova's native messages-v1), after Bedrock's conversation rules."""
    system = body.get("system")
    blocks: list[Any] = []
    if system is not None:
        expect(system, list, "system", "a list of SystemContentBlock structures such as [{\"text\": \"...\"}]")
        _content_blocks(system, "system")
        blocks.extend(system)
    messages = body.get("messages")
    if messages is None:
        raise invalid(START_WITH_USER)
    expect(messages, list, "messages", "a list of Message structures")
    if not messages:
        raise invalid(START_WITH_USER)
    roles = []
    for i, message in enumerate(messages):
        expect(message, dict, f"messages.{i}", "a Message structure {\"role\": ..., \"content\": [...]}")
        roles.append(one_of(message.get("role"), f"messages.{i}.role", ("user", "assistant")))
        content = message.get("content")
        if content is None:
            raise _constraint(f"messages.{i}.content", None, "not be null")
        expect(content, list, f"messages.{i}.content", "a list of ContentBlock structures such as [{\"text\": \"...\"}]")
        if not content:
            raise invalid(f"The content field in the Message object at messages.{i} is empty. "
                          "Add a ContentBlock object to the content field and try again.")
        _content_blocks(content, f"messages.{i}.content")
        blocks.extend(content)
    if roles[0] != "user":
        raise invalid(START_WITH_USER)
    if any(a == b for a, b in zip(roles, roles[1:], strict=False)):
        raise invalid(ALTERNATE)
    return blocks


def converse(operation: str, spec: ModelSpec, body: Mapping[str, Any]) -> Request:
    """A Converse or ConverseStream body, validated."""
    blocks = conversation(body)
    inference = optional_object(body, "inferenceConfig")
    max_tokens = checked_max_tokens(spec, inference.get("maxTokens"), "inferenceConfig.maxTokens")
    number_in(inference.get("temperature"), "inferenceConfig.temperature", 0, 1)
    number_in(inference.get("topP"), "inferenceConfig.topP", 0, 1)
    stops = inference.get("stopSequences")
    if stops is not None:
        for k, stop in enumerate(expect(stops, list, "inferenceConfig.stopSequences", "a list of strings")):
            expect(stop, str, f"inferenceConfig.stopSequences.{k}", "a string")
    optional_object(body, "additionalModelRequestFields")
    performance = optional_object(body, "performanceConfig")
    latency = one_of(performance.get("latency", "standard"), "performanceConfig.latency", LATENCY_MODES)
    tier = None
    if body.get(SERVICE_TIER_MEMBER) is not None:
        tier = service_tier(spec, optional_object(body, SERVICE_TIER_MEMBER).get("type"), f"{SERVICE_TIER_MEMBER}.type")
    prompt = "".join(texts(blocks))
    check_context(spec, prompt, converse=True)
    return Request(
        operation=operation,
        spec=spec,
        prompt=prompt,
        cached_prefix=cached_prefix(blocks),
        max_tokens=max_tokens,
        latency=latency,
        service_tier=tier,
        answer_hint=answer_hint(request_metadata(body.get("requestMetadata"))),
    )


def json_object(raw: bytes) -> dict[str, Any]:
    """A request body as a JSON object (an empty body reads as {}, so required keys are reported)."""
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        raise invalid("Malformed input request, please reformat your input and try again.") from None
    if not isinstance(body, dict):
        names: dict[type, str] = {list: "JSONArray", str: "String"}
        found = names.get(type(body), type(body).__name__)
        raise invalid(f"Malformed input request: #: expected type: JSONObject, found: {found}, please reformat "
                        "your input and try again.")
    return body
