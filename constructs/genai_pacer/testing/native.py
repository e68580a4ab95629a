"""InvokeModel's native bodies for the families users call most: Anthropic Messages, Amazon Nova
(messages-v1) and Meta Llama. Each family reads its request, writes its response and its stream chunks.

A body is checked the way Bedrock checks native bodies (a JSON-schema pass whose errors read
"Malformed input request: #/path: ..., please reformat your input and try again."), plus each
family's own rules. A model of another family is refused as not emulated, never answered in a
guessed shape. CountTokens, which counts either a Converse-shaped input or a native body, is read
here too.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from collections.abc import Mapping
from typing import Any, Protocol

from . import validation as v
from .specs import FAMILIES, SERVICE_TIER_HEADER, SERVICE_TIER_MEMBER, EmulatorError, ModelSpec


class Usage(Protocol):
    """What a response reports (the emulator's Invocation record)."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int


_JSON_TYPES = {str: "String", bool: "Boolean", int: "Integer", float: "Number", list: "JSONArray", dict: "JSONObject"}


class _Schema:
    """Collects schema problems of one body; raises them as one ValidationException like Bedrock."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def fail(self, pointer: str, text: str) -> None:
        self.problems.append(f"{pointer}: {text}")

    def required(self, body: Mapping[str, Any], *keys: str) -> None:
        for key in keys:
            if key not in body:
                self.fail("#", f"required key [{key}] not found")

    def typed(self, value: Any, pointer: str, *kinds: type) -> bool:
        """value is one of the JSON types (bool is not a number); absent (None) passes."""
        if value is None:
            return False
        found = _JSON_TYPES.get(type(value), type(value).__name__)
        if type(value) in kinds or (float in kinds and type(value) is int):
            return True
        self.fail(pointer, f"expected type: {'/'.join(_JSON_TYPES[k] for k in kinds)}, found: {found}")
        return False

    def at_most(self, value: Any, pointer: str, limit: float, *, low: float = 0) -> None:
        if self.typed(value, pointer, float):
            if value > limit:
                self.fail(pointer, f"{value} is not less or equal to {limit:g}")
            elif value < low:
                self.fail(pointer, f"{value} is not greater or equal to {low:g}")

    def max_tokens(self, spec: ModelSpec, value: Any, pointer: str) -> int:
        if self.typed(value, pointer, int):
            if value < 1:
                self.fail(pointer, f"{value} is not greater or equal to 1")
            elif value > spec.max_output_tokens:
                self.fail(pointer, f"{value} is not less or equal to {spec.max_output_tokens}")
            else:
                return int(value)
        return spec.max_output_tokens

    def raise_if_any(self) -> None:
        if self.problems:
            raise v.invalid(f"Malformed input request: {''.join(self.problems)}, please reformat your input and try again.")


class Family(Protocol):
    name: str

    def read(self, spec: ModelSpec, body: Mapping[str, Any]) -> tuple[str, str, int]:
        """(prompt text, cached prefix, max_tokens) of a valid body; raises ValidationException."""
        ...

    def response(self, spec: ModelSpec, text: str, usage: Usage, cut: bool) -> dict[str, Any]: ...

    def stream_start(self, usage: Usage) -> list[dict[str, Any]]: ...

    def stream_delta(self, text: str, usage: Usage) -> dict[str, Any]: ...

    def stream_stop(self, usage: Usage, cut: bool) -> list[dict[str, Any]]:
        """The closing chunks; the emulator adds amazon-bedrock-invocationMetrics to the last."""
        ...


def _anthropic_model(spec: ModelSpec) -> str:
    """Anthropic's own model name: anthropic.claude-3-5-haiku-20241022-v1:0 -> claude-3-5-haiku-20241022."""
    return re.sub(r"-v\d+(:\d+)?$", "", spec.foundation_model_id.split(".", 1)[-1])


class Anthropic:
    """Anthropic Messages: anthropic_version, max_tokens and messages required; content a string or blocks."""

    name = "anthropic"

    def read(self, spec: ModelSpec, body: Mapping[str, Any]) -> tuple[str, str, int]:
        schema = _Schema()
        schema.required(body, "anthropic_version", "max_tokens", "messages")
        schema.typed(body.get("anthropic_version"), "#/anthropic_version", str)
        if schema.typed(body.get("max_tokens"), "#/max_tokens", int) and body["max_tokens"] < 1:
            schema.fail("#/max_tokens", f"{body['max_tokens']} is not greater or equal to 1")
        schema.at_most(body.get("temperature"), "#/temperature", 1)
        schema.at_most(body.get("top_p"), "#/top_p", 1)
        schema.typed(body.get("top_k"), "#/top_k", int)
        schema.typed(body.get("stop_sequences"), "#/stop_sequences", list)
        system = body.get("system")
        schema.typed(system, "#/system", str, list)
        messages = body.get("messages")
        if schema.typed(messages, "#/messages", list) and isinstance(messages, list):
            if not messages:
                schema.fail("#/messages", "expected minimum item count: 1, found: 0")
            for i, message in enumerate(messages):
                if schema.typed(message, f"#/messages/{i}", dict):
                    schema.required(message, "role", "content")
                    if message.get("role") not in (None, "user", "assistant"):
                        schema.fail(f"#/messages/{i}/role", f"{message['role']} is not a valid enum value")
                    schema.typed(message.get("content"), f"#/messages/{i}/content", str, list)
        schema.raise_if_any()
        assert isinstance(messages, list)  # the schema pass guarantees it
        for i, message in enumerate(messages):
            content = message["content"]
            last_assistant = i == len(messages) - 1 and message["role"] == "assistant"
            if not content and not last_assistant:
                raise v.invalid(f"messages.{i}: all messages must have non-empty content except for the optional final assistant message")
            if any(isinstance(b, dict) and b.get("type") == "text" and not str(b.get("text", "")).strip()
                   for b in (content if isinstance(content, list) else [])):
                raise v.invalid("messages: text content blocks must be non-empty")
        max_tokens = body["max_tokens"]
        if max_tokens > spec.max_output_tokens:
            raise v.invalid(f"max_tokens: {max_tokens} > {spec.max_output_tokens}, which is the maximum "
                            f"allowed number of output tokens for {_anthropic_model(spec)}")
        blocks: list[Any] = list(system) if isinstance(system, list) else ([{"text": system}] if system else [])
        for message in messages:
            content = message["content"]
            blocks.extend(content if isinstance(content, list) else [{"text": content}])
        return "".join(v.texts(blocks)), v.cached_prefix(blocks, marker="cache_control", inclusive=True), max_tokens

    @staticmethod
    def _usage(usage: Usage) -> dict[str, int]:
        return {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_creation_input_tokens": usage.cache_write_tokens,
            "cache_read_input_tokens": usage.cache_read_tokens,
        }

    def response(self, spec: ModelSpec, text: str, usage: Usage, cut: bool) -> dict[str, Any]:
        return {
            "id": f"msg_bdrk_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": _anthropic_model(spec),
            "content": [{"type": "text", "text": text}],
            "stop_reason": "max_tokens" if cut else "end_turn",
            "stop_sequence": None,
            "usage": self._usage(usage),
        }

    def stream_start(self, usage: Usage) -> list[dict[str, Any]]:
        return [
            {"type": "message_start", "message": {"id": f"msg_bdrk_{uuid.uuid4().hex[:24]}", "type": "message",
                                                  "role": "assistant", "content": [], "stop_reason": None,
                                                  "usage": self._usage(usage) | {"output_tokens": 1}}},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ]

    def stream_delta(self, text: str, usage: Usage) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}

    def stream_stop(self, usage: Usage, cut: bool) -> list[dict[str, Any]]:
        return [
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "max_tokens" if cut else "end_turn", "stop_sequence": None},
             "usage": {"output_tokens": usage.output_tokens}},
            {"type": "message_stop"},
        ]


class Nova:
    """Amazon Nova's messages-v1: Converse-shaped messages, inferenceConfig.max_new_tokens (or maxTokens)."""

    name = "nova"

    def read(self, spec: ModelSpec, body: Mapping[str, Any]) -> tuple[str, str, int]:
        schema = _Schema()
        schema.required(body, "messages")
        schema.typed(body.get("messages"), "#/messages", list)
        schema.typed(body.get("system"), "#/system", list)
        messages = body.get("messages")
        for i, message in enumerate(messages if isinstance(messages, list) else []):
            if schema.typed(message, f"#/messages/{i}", dict):
                schema.typed(message.get("content"), f"#/messages/{i}/content", list)
        inference = body.get("inferenceConfig")
        max_tokens = spec.max_output_tokens
        if schema.typed(inference, "#/inferenceConfig", dict):
            assert isinstance(inference, dict)
            for key in ("max_new_tokens", "maxTokens"):
                if inference.get(key) is not None:
                    max_tokens = schema.max_tokens(spec, inference[key], f"#/inferenceConfig/{key}")
                    break
            schema.at_most(inference.get("temperature"), "#/inferenceConfig/temperature", 1)
            schema.at_most(inference.get("topP", inference.get("top_p")), "#/inferenceConfig/topP", 1)
        schema.raise_if_any()
        blocks = v.conversation(body)  # the same conversation rules as Converse
        return "".join(v.texts(blocks)), v.cached_prefix(blocks), max_tokens

    @staticmethod
    def _usage(usage: Usage) -> dict[str, int]:
        return {
            "inputTokens": usage.input_tokens,
            "outputTokens": usage.output_tokens,
            "totalTokens": usage.input_tokens + usage.output_tokens + usage.cache_read_tokens + usage.cache_write_tokens,
            "cacheReadInputTokenCount": usage.cache_read_tokens,
            "cacheWriteInputTokenCount": usage.cache_write_tokens,
        }

    def response(self, spec: ModelSpec, text: str, usage: Usage, cut: bool) -> dict[str, Any]:
        return {
            "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
            "stopReason": "max_tokens" if cut else "end_turn",
            "usage": self._usage(usage),
        }

    def stream_start(self, usage: Usage) -> list[dict[str, Any]]:
        return [{"messageStart": {"role": "assistant"}}]

    def stream_delta(self, text: str, usage: Usage) -> dict[str, Any]:
        return {"contentBlockDelta": {"delta": {"text": text}, "contentBlockIndex": 0}}

    def stream_stop(self, usage: Usage, cut: bool) -> list[dict[str, Any]]:
        return [
            {"contentBlockStop": {"contentBlockIndex": 0}},
            {"messageStop": {"stopReason": "max_tokens" if cut else "end_turn"}},
            {"metadata": {"usage": self._usage(usage), "metrics": {}, "trace": {}}},
        ]


class Llama:
    """Meta Llama: a formatted `prompt` string, max_gen_len, temperature, top_p."""

    name = "llama"

    def read(self, spec: ModelSpec, body: Mapping[str, Any]) -> tuple[str, str, int]:
        schema = _Schema()
        schema.required(body, "prompt")
        schema.typed(body.get("prompt"), "#/prompt", str)
        max_tokens = spec.max_output_tokens
        if body.get("max_gen_len") is not None:
            max_tokens = schema.max_tokens(spec, body["max_gen_len"], "#/max_gen_len")
        schema.at_most(body.get("temperature"), "#/temperature", 1)
        schema.at_most(body.get("top_p"), "#/top_p", 1)
        schema.raise_if_any()
        if not body["prompt"].strip():
            raise v.invalid("Malformed input request: #/prompt: expected minLength: 1, actual: 0, please reformat your input and try again.")
        return body["prompt"], "", max_tokens

    def response(self, spec: ModelSpec, text: str, usage: Usage, cut: bool) -> dict[str, Any]:
        return {
            "generation": text,
            "prompt_token_count": usage.input_tokens,
            "generation_token_count": usage.output_tokens,
            "stop_reason": "length" if cut else "stop",
        }

    def stream_start(self, usage: Usage) -> list[dict[str, Any]]:
        return []

    def stream_delta(self, text: str, usage: Usage) -> dict[str, Any]:
        return {"generation": text, "prompt_token_count": None, "generation_token_count": usage.output_tokens,
                "stop_reason": None}

    def stream_stop(self, usage: Usage, cut: bool) -> list[dict[str, Any]]:
        return [{"generation": "", "prompt_token_count": usage.input_tokens,
                 "generation_token_count": usage.output_tokens, "stop_reason": "length" if cut else "stop"}]


_FAMILIES: dict[str, Family] = {family.name: family for family in (Anthropic(), Nova(), Llama())}
assert tuple(_FAMILIES) == FAMILIES


def family_of(spec: ModelSpec, operation: str) -> Family:
    """The family that reads this model's native bodies, or a clear refusal."""
    name = spec.native_family
    if name is None:
        raise EmulatorError(
            "NotEmulatedException",
            f"BedrockEmulator cannot read {operation} bodies for {spec.model_id!r}: it serves the native request "
            f"shapes of {', '.join(FAMILIES)} models. Call Converse (one shape for every model), or set "
            f"ModelSpec(family=...) if this model speaks one of those shapes.",
        )
    return _FAMILIES[name]


def read(operation: str, spec: ModelSpec, body: Mapping[str, Any], headers: Mapping[str, str]) -> v.Request:
    """An InvokeModel or InvokeModelWithResponseStream request: native body plus Bedrock's headers."""
    family = family_of(spec, operation)
    prompt, prefix, max_tokens = family.read(spec, body)
    v.check_context(spec, prompt, converse=False)
    latency = v.one_of(headers.get("x-amzn-bedrock-performanceconfig-latency", "standard"),
                       "performanceConfigLatency", v.LATENCY_MODES)
    tier = v.service_tier(spec, headers.get(SERVICE_TIER_HEADER.lower()), SERVICE_TIER_MEMBER)
    metadata: Any = None
    if headers.get("x-amzn-bedrock-request-metadata"):
        try:
            metadata = json.loads(headers["x-amzn-bedrock-request-metadata"])
        except ValueError:
            raise v.invalid("requestMetadata is not a JSON object of string keys and values") from None
    return v.Request(
        operation=operation,
        spec=spec,
        prompt=prompt,
        cached_prefix=prefix,
        max_tokens=max_tokens,
        latency=latency,
        service_tier=tier,
        answer_hint=v.answer_hint(v.request_metadata(metadata)),
        family=family.name,
    )


def count_tokens_request(spec: ModelSpec, body: Mapping[str, Any]) -> v.Request:
    """CountTokens: a Converse-shaped input or an InvokeModel body (base64 in JSON), counted alike."""
    given = v.expect(body.get("input"), dict, "input", "a CountTokensInput structure: {\"converse\": {...}} or {\"invokeModel\": {\"body\": ...}}")
    members = [key for key in ("converse", "invokeModel") if given.get(key) is not None]
    if len(members) != 1:
        raise v.invalid("1 validation error detected: Value at 'input' failed to satisfy constraint: "
                        "Member must set exactly one of converse or invokeModel")
    if members == ["converse"]:
        prompt = "".join(v.texts(v.conversation(v.expect(given["converse"], dict, "input.converse", "a structure"))))
    else:
        blob = v.expect(given["invokeModel"], dict, "input.invokeModel", "a structure")
        encoded = v.expect(blob.get("body"), str, "input.invokeModel.body", "a base64-encoded InvokeModel body")
        try:
            decoded = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise v.invalid("input.invokeModel.body is not valid base64") from None
        prompt = family_of(spec, "CountTokens").read(spec, v.json_object(decoded))[0]
    return v.Request(operation="CountTokens", spec=spec, prompt=prompt, cached_prefix="", max_tokens=0)
