"""Benchmark prompts: the one JSONL parser of the local bench (`genai_pacer.testing.bench`) and the
deployed load replay, and the Converse call each line becomes.

Two line formats, told apart by their keys (one JSON object a line; blank lines are skipped):

- A text line: `{"prompt": str, "expected_output_tokens": int, "id"?: str, "system"?: str}`.
  expected_output_tokens is required: the shipped workloads and the quota experiments rely on it.
- A recorded Converse request: `{"messages": [...], "system"?: [SystemContentBlock, ...],
  "inferenceConfig"?: {...}, "additionalModelRequestFields"?: {...}, "performanceConfig"?: {...},
  "id"?: str, "expected_output_tokens"?: int}`: the fields exactly as a production service passes
  them to Converse. A line holding any other key is refused, naming it: modelId (the benchmark's
  model decides), toolConfig (not supported yet) and the rest of Converse's members are never
  dropped silently. Without expected_output_tokens the request carries no answer-length hint (the
  emulator answers with its model's answer_tokens; real Bedrock ignores the hint anyway), and a
  plan that needs a number per prompt (`expected_output_tokens`) refuses the line by file:line.

Where botocore is installed (always, in Lambda and wherever the bench calls Bedrock), a recorded
line is validated against the Converse input shape of botocore's bedrock-runtime model, so a bad
recording fails when the file is read, with file:line and botocore's report, and not as a
ValidationException counted among the run's errors. No message ever holds prompt text: a value is
described by its kind ("a string", "a list"), never echoed.

Standard library only at import: the library loads this file by its path without boto3
(genai_pacer._internal.runtime_constants.prompts_module); in a handler it is pacer_runtime.prompts.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

__all__ = [
    "CONVERSE_OPERATION",
    "CONVERSE_SERVICE",
    "LATENCY_MODES",
    "RECORDED_FIELDS",
    "Prompt",
    "PromptError",
    "describe",
    "expected_output_tokens",
    "parse_each",
    "parse_prompts",
]

#: botocore's service model that describes Converse (botocore/data/bedrock-runtime/2023-09-30/service-2.json).
CONVERSE_SERVICE = "bedrock-runtime"
CONVERSE_OPERATION = "Converse"
#: PerformanceConfiguration.latency's enum in that model.
LATENCY_MODES = ("standard", "optimized")
#: The Converse members a recorded line may hold: the request a production service sends, less the model.
RECORDED_FIELDS = ("messages", "system", "inferenceConfig", "additionalModelRequestFields", "performanceConfig")
#: What a line may add to either format: its name in the report, and its answer length.
LINE_FIELDS = ("id", "expected_output_tokens")
TEXT_FIELDS = ("prompt", "system", *LINE_FIELDS)
#: Why a Converse member is refused in a recorded line, for those with a reason beyond "not replayed".
REFUSED = {
    "modelId": "the benchmark's model decides which model is called (the bench's --model-id), not the recording",
    "toolConfig": "tool use is not supported by the replay yet: record requests without tools",
    "requestMetadata": "the benchmark sets requestMetadata itself (the emulator's answer-length hint)",
}


class PromptError(ValueError):
    """A prompts line that cannot be replayed; the message starts with where it is (file:line)."""


def describe(value: Any) -> str:
    """What a value is, for an error message, without echoing it (it may be the user's prompt)."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return "an empty string" if not value.strip() else "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "an empty list" if not value else "a list"
    return f"a {type(value).__name__}"


@dataclass(frozen=True)
class Prompt:
    """One request of a workload: a text prompt (prompt, system) or a recorded Converse request
    (recorded: its messages, system, inferenceConfig, ... as recorded; read-only), with the output
    length it produces in production when known. source is where it was read (file:line)."""

    prompt: str | None = None
    expected_output_tokens: int | None = None
    id: str = ""
    system: str | None = None
    recorded: Mapping[str, Any] | None = field(default=None, hash=False)
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if (self.prompt is None) == (self.recorded is None):
            raise PromptError(f"{self._where}: a prompt is either text (prompt) or a recorded request (recorded)")

    @property
    def _where(self) -> str:
        return self.source or f"prompt {self.id!r}"

    @property
    def max_tokens(self) -> int | None:
        """The recorded inferenceConfig.maxTokens, if any (what Bedrock reserves for the call)."""
        config = (self.recorded or {}).get("inferenceConfig") or {}
        value = config.get("maxTokens")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def input_text(self) -> str:
        """Every text block of the request, system first: for input-length estimates."""
        if self.prompt is not None:
            return (self.system or "") + self.prompt
        recorded = self.recorded or {}
        blocks = list(recorded.get("system") or [])
        for message in recorded.get("messages") or []:
            content = message.get("content") if isinstance(message, Mapping) else None
            blocks += content if isinstance(content, list) else []
        # Shapes are botocore-checked when it is installed; without it a malformed block counts as no text.
        return "".join(block["text"] for block in blocks if isinstance(block, Mapping) and isinstance(block.get("text"), str))

    def converse_request(self, model_id: str, *, max_tokens: int | None = None, latency: str | None = None,
                         answer_hint_key: str | None = None) -> dict[str, Any]:
        """Converse keyword arguments for this prompt on model_id.

        max_tokens and latency, when given, win over a recorded inferenceConfig.maxTokens and
        performanceConfig: they are the run's settings, applied to every request alike.
        answer_hint_key puts expected_output_tokens in requestMetadata under that key (the
        emulator's answer-length hint); a prompt without expected_output_tokens sends no hint.
        """
        if not isinstance(model_id, str) or not model_id.strip():
            raise PromptError(f"model_id={model_id!r} must be a model id, profile id or ARN")
        if latency is not None and latency not in LATENCY_MODES:
            raise PromptError(f"latency={latency!r} must be one of {', '.join(map(repr, LATENCY_MODES))}")
        if self.recorded is not None:
            request: dict[str, Any] = {"modelId": model_id, **copy.deepcopy(dict(self.recorded))}
        else:
            request = {"modelId": model_id, "messages": [{"role": "user", "content": [{"text": self.prompt}]}]}
            if self.system is not None:
                request["system"] = [{"text": self.system}]
        if max_tokens:
            request["inferenceConfig"] = {**request.get("inferenceConfig", {}), "maxTokens": max_tokens}
        if latency is not None:
            request["performanceConfig"] = {"latency": latency}
        if answer_hint_key and self.expected_output_tokens is not None:
            request["requestMetadata"] = {answer_hint_key: str(self.expected_output_tokens)}
        return request


def expected_output_tokens(prompts: list[Prompt] | tuple[Prompt, ...], purpose: str) -> list[int]:
    """Each prompt's expected_output_tokens, or a PromptError naming the first line without one."""
    for prompt in prompts:
        if prompt.expected_output_tokens is None:
            raise PromptError(f"{prompt._where}: no 'expected_output_tokens'; {purpose} needs each prompt's "
                              "answer length: add it to the line")
    return [prompt.expected_output_tokens for prompt in prompts if prompt.expected_output_tokens is not None]


def parse_prompts(text: str, source: str) -> list[Prompt]:
    """Every prompt of a JSONL text, in order; source names the file in errors (source:line)."""
    prompts = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            prompts.append(_parse_line(line, f"{source}:{number}", str(number)))
    if not prompts:
        raise PromptError(f"{source}: no prompts")
    return prompts


def parse_each(text: str, source: str) -> list[Prompt | PromptError]:
    """Every non-blank line of a JSONL text, in order: its Prompt, or the PromptError that refuses
    it (source:line). For a run that replays the good lines and reports the bad ones, so one bad
    line of a production recording fails alone instead of failing the run."""
    parsed: list[Prompt | PromptError] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                parsed.append(_parse_line(line, f"{source}:{number}", str(number)))
            except PromptError as error:
                parsed.append(error)
    return parsed


def _parse_line(line: str, where: str, number: str) -> Prompt:
    try:
        record = json.loads(line)
    except ValueError as error:
        raise PromptError(f"{where}: not JSON ({error})") from None
    if not isinstance(record, dict):
        raise PromptError(f"{where}: a line is a JSON object, not {describe(record)}")
    if "prompt" in record and "messages" in record:
        raise PromptError(f"{where}: has both 'prompt' (a text line) and 'messages' (a recorded Converse request); "
                          "keep one")
    expected = record.get("expected_output_tokens")
    if "messages" in record:
        if expected is not None:
            _check_expected(expected, where)
        return _recorded(record, where, number)
    return _text(record, where, number)


def _check_expected(expected: Any, where: str) -> None:
    if not isinstance(expected, int) or isinstance(expected, bool) or expected < 1:
        shown = expected if expected is None or isinstance(expected, int | float) else describe(expected)
        raise PromptError(f"{where}: 'expected_output_tokens' must be a positive integer, got {shown!r}")


def _line_id(record: Mapping[str, Any], where: str, number: str) -> str:
    value = record.get("id")
    if value is None or value == "":
        return number
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise PromptError(f"{where}: 'id' must be a string, not {describe(value)}")
    return str(value)


def _text(record: dict[str, Any], where: str, number: str) -> Prompt:
    if not isinstance(record.get("prompt"), str) or not record["prompt"].strip():
        raise PromptError(f"{where}: needs a non-empty string 'prompt' (a text line) or a 'messages' list "
                          "(a recorded Converse request)")
    unknown = sorted(set(record) - set(TEXT_FIELDS))
    if unknown:
        raise PromptError(f"{where}: {', '.join(map(repr, unknown))} not allowed in a text line (allowed: "
                          f"{', '.join(TEXT_FIELDS)}); for a recorded Converse request give 'messages' instead of 'prompt'")
    _check_expected(record.get("expected_output_tokens"), where)
    system = record.get("system")
    if system is not None and (not isinstance(system, str) or not system.strip()):
        hint = ("; a list of SystemContentBlocks belongs in a recorded Converse request (with 'messages')"
                if isinstance(system, list) else "")
        raise PromptError(f"{where}: 'system' in a text line must be a non-empty string, not {describe(system)}{hint}")
    return Prompt(record["prompt"], record["expected_output_tokens"], _line_id(record, where, number), system,
                  source=where)


def _recorded(record: dict[str, Any], where: str, number: str) -> Prompt:
    unknown = sorted(set(record) - set(RECORDED_FIELDS) - set(LINE_FIELDS))
    if unknown:
        reasons = "".join(f"; {key}: {REFUSED[key]}" for key in unknown if key in REFUSED)
        raise PromptError(f"{where}: {', '.join(map(repr, unknown))} not allowed in a recorded Converse request "
                          f"(allowed: {', '.join(RECORDED_FIELDS + LINE_FIELDS)}){reasons}")
    fields = {key: record[key] for key in RECORDED_FIELDS if key in record}
    if not isinstance(fields["messages"], list) or not fields["messages"]:
        raise PromptError(f"{where}: 'messages' must be a non-empty list of Converse messages, not "
                          f"{describe(fields['messages'])}")
    problems = _converse_problems(fields)
    if problems:
        raise PromptError(f"{where}: not a valid Converse request (botocore's {CONVERSE_SERVICE} "
                          f"{CONVERSE_OPERATION} input shape):\n" + "\n".join(problems))
    return Prompt(None, record.get("expected_output_tokens"), _line_id(record, where, number), recorded=fields,
                  source=where)


@cache
def _converse_input_shape() -> Any:
    """The Converse input shape from botocore's model, or None where botocore is not installed."""
    try:
        from botocore.session import get_session
    except ImportError:
        return None
    return get_session().get_service_model(CONVERSE_SERVICE).operation_model(CONVERSE_OPERATION).input_shape


def _converse_problems(fields: Mapping[str, Any]) -> list[str]:
    """botocore's validation of the request (types, required members, tagged unions, minimums) and
    of string enums (role, latency), which botocore's ParamValidator leaves to the service."""
    shape = _converse_input_shape()
    if shape is None:
        return []
    from botocore.validate import ParamValidator

    params = {"modelId": "replay", **fields}  # the model is the run's; the shape requires one
    errors = ParamValidator().validate(params, shape)
    # botocore's own report prints each bad value, which may be prompt text: the same report with
    # each value described by its kind instead (ValidationErrors keeps (reason, name, details)).
    problems = [_problem(reason, name, details) for reason, name, details in getattr(errors, "_errors", [])]
    if errors.has_errors() and not problems:
        problems = ["botocore refused the request"]
    if not problems:
        _enum_problems(params, shape, "", problems)
    return problems


def _problem(reason: str, name: str, details: Mapping[str, Any]) -> str:
    name = name.lstrip(".") or "input"
    if reason == "missing required field":
        return f"Missing required parameter in {name}: {details.get('required_name')!r}"
    if reason == "unknown field":
        return (f"Unknown parameter in {name}: {details.get('unknown_param')!r}, must be one of: "
                f"{', '.join(details.get('valid_names', []))}")
    if reason in ("invalid type", "invalid type for document"):
        return (f"Invalid type for parameter {name}: {describe(details.get('param'))}, valid types: "
                f"{', '.join(details.get('valid_types', []))}")
    if reason == "invalid range":
        return f"Invalid value for parameter {name}: {describe(details.get('param'))}, valid min value: {details.get('min_allowed')}"
    if reason == "invalid length":
        return f"Invalid length for parameter {name}: {describe(details.get('param'))}, valid min length: {details.get('min_allowed')}"
    if reason == "more than one input":
        return f"{name} may set only one of: {', '.join(details.get('members', []))}"
    if reason == "empty input":
        return f"{name} must set one of: {', '.join(details.get('members', []))}"
    return f"{reason} in {name}"


def _enum_problems(value: Any, shape: Any, name: str, problems: list[str]) -> None:
    type_name = shape.type_name
    if type_name == "structure" and isinstance(value, Mapping):
        for key, member in shape.members.items():
            if key in value:
                _enum_problems(value[key], member, f"{name}.{key}" if name else key, problems)
    elif type_name == "list" and isinstance(value, list):
        for index, item in enumerate(value):
            _enum_problems(item, shape.member, f"{name}[{index}]", problems)
    elif type_name == "string" and getattr(shape, "enum", None) and value not in shape.enum:
        problems.append(f"Invalid value for parameter {name}: {describe(value)}, valid values: {', '.join(shape.enum)}")
