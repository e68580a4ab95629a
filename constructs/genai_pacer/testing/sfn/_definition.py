"""The executed copy of a definition: what moto's interpreter cannot parse is rewritten or set aside.

Nothing here touches what is synthesized for AWS; the runner works on a deep copy. Fields moto's
grammar rejects but the runner can honour itself (a Map's ItemBatcher, a ResultWriter's
WriterConfig) are removed from the copy and handed to the interpreter patches as MapSettings.
Whatever neither moto nor the runner can execute the way AWS does is refused up front with an
OfflineExecutionError naming the state, rather than running and answering differently.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ._errors import OfflineExecutionError

#: Bedrock control-plane actions the runner simulates (batch inference jobs).
BATCH_ACTIONS = ("createModelInvocationJob", "getModelInvocationJob", "stopModelInvocationJob",
                 "listModelInvocationJobs")
#: bedrock-runtime operations Step Functions' SDK integration cannot call (AWS rejects the definition).
STREAMING_ACTIONS = ("converseStream", "invokeModelWithResponseStream", "invokeModelWithBidirectionalStream")

_SERVICE_ARN = re.compile(r"^arn:[a-z-]+:states:::(?P<service>[A-Za-z0-9-]+):(?P<rest>.+)$")


@dataclass(frozen=True)
class Integration:
    """A Task's Resource ARN taken apart."""

    service: str  # "aws-sdk", "bedrock", "dynamodb", ...
    api: str  # the SDK service for aws-sdk ("bedrockruntime"), else the service itself
    action: str
    pattern: str | None  # "sync", "sync:2", "waitForTaskToken" or None

    @classmethod
    def parse(cls, resource: str) -> Integration | None:
        match = _SERVICE_ARN.match(resource)
        if match is None:
            return None
        service, rest = match["service"], match["rest"]
        rest, _, pattern = rest.partition(".")
        if service == "aws-sdk":
            api, _, action = rest.partition(":")
        else:
            api, action = service, rest
        return cls(service=service, api=api, action=action, pattern=pattern or None)


_LAMBDA_ARN = re.compile(r"^arn:[a-z-]+:lambda:[^:]*:[^:]*:function:.+$")


@dataclass(frozen=True)
class LambdaTask:
    """A Task that invokes a Lambda function: by its ARN as Resource (the result is the function's return
    value), or through the optimized `lambda:invoke` integration (the result is Invoke's response)."""

    state: str
    resource: str
    function: str | None  # the FunctionName (or Resource ARN) as written; None when chosen at run time
    pattern: str | None  # "waitForTaskToken" or None

    @classmethod
    def parse(cls, name: str, state: dict[str, Any]) -> LambdaTask | None:
        resource = state.get("Resource")
        if not isinstance(resource, str):
            return None
        if _LAMBDA_ARN.match(resource):
            return cls(state=name, resource=resource, function=resource, pattern=None)
        integration = Integration.parse(resource)
        if integration is None or integration.service != "lambda" or integration.action != "invoke":
            return None
        parameters = state.get("Parameters") or state.get("Arguments") or {}
        function = parameters.get("FunctionName") if isinstance(parameters, dict) else None
        return cls(state=name, resource=resource, function=function if isinstance(function, str) else None,
                   pattern=integration.pattern)


@dataclass(frozen=True)
class ItemBatcher:
    max_items: int | None
    max_bytes: int | None
    batch_input: dict[str, Any] | None


@dataclass(frozen=True)
class WriterConfig:
    output_type: str  # JSON or JSONL
    transformation: str  # NONE, COMPACT or FLATTEN
    exported: bool  # the ResultWriter also writes to S3 (Resource and Parameters given)


@dataclass
class MapSettings:
    """What the runner executes for a distributed Map beyond what moto parses."""

    item_batcher: ItemBatcher | None = None
    writer_config: WriterConfig | None = None
    tolerated_failure_count: int | None = None
    tolerated_failure_percentage: float | None = None
    distributed: bool = False
    exports_results: bool = False  # a ResultWriter with Resource: the Map's output is the export's location


@dataclass
class ExecutablePlan:
    definition: dict[str, Any]
    maps: dict[str, MapSettings] = field(default_factory=dict)
    integrations: dict[str, Integration] = field(default_factory=dict)  # Task state name -> integration
    lambdas: dict[str, LambdaTask] = field(default_factory=dict)  # Task state name -> the function it invokes


def executable_copy(definition: dict[str, Any], *, where: str) -> ExecutablePlan:
    """A copy of `definition` that moto's interpreter accepts, with the settings it cannot hold."""
    plan = ExecutablePlan(definition=copy.deepcopy(definition))
    problems: list[str] = []
    if plan.definition.get("QueryLanguage") == "JSONata":
        problems.append(
            "its QueryLanguage is JSONata: moto evaluates JSONata through a Java bridge it does not ship, so "
            "every JSONata expression fails offline; test a JSONPath version of the definition"
        )
    for name, state in _states(plan.definition):
        kind = state.get("Type")
        if state.get("QueryLanguage") == "JSONata":
            problems.append(f"{kind} {name!r} uses JSONata, which moto cannot evaluate offline (no Java bridge)")
        _intrinsics(name, kind, state, problems)
        if kind == "Task":
            _task(name, state, plan, problems)
        elif kind == "Map":
            _map(name, state, plan, problems)
    if problems:
        raise OfflineExecutionError(
            f"{where} cannot be executed offline:\n" + "\n".join(f"- {problem}" for problem in problems)
        )
    return plan


def _states(scope: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every state, those in Parallel branches and Map processors included."""
    for name, state in (scope.get("States") or {}).items():
        yield name, state
        for branch in state.get("Branches") or []:
            yield from _states(branch)
        for key in ("ItemProcessor", "Iterator"):
            if isinstance(state.get(key), dict):
                yield from _states(state[key])


#: Keys of a state that hold other states (walked by `_states`), not the state's own fields.
_NESTED_STATES = ("Branches", "ItemProcessor", "Iterator")
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_STRING_LITERAL = re.compile(r"'((?:\\.|[^'\\])*)'", re.DOTALL)


def _intrinsic_fields(value: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """(field path, expression) of every intrinsic function in a state's fields ("key.$": "States.…")."""
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{where}.{key}" if where else str(key)
            if isinstance(item, str) and str(key).endswith(".$") and item.startswith("States."):
                yield path, item
            elif not (where == "" and key in _NESTED_STATES):
                yield from _intrinsic_fields(item, path)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _intrinsic_fields(item, f"{where}[{index}]")


def _intrinsics(name: str, kind: Any, state: dict[str, Any], problems: list[str]) -> None:
    """Every intrinsic function must parse as on AWS: moto's grammar, given one it cannot parse, prints the
    error to stderr and runs what it could read, a silently different result (a prompt cut at an
    apostrophe). An escape Step Functions does not define is refused too, since its value is unknown."""
    from ._interpreter import INTRINSIC_ESCAPES, IntrinsicSyntaxError, parse_intrinsic

    for where, expression in _intrinsic_fields(state):
        try:
            parse_intrinsic(expression)
        except IntrinsicSyntaxError as error:
            problems.append(f"{kind} {name!r}: the intrinsic function in {where} cannot be executed offline: {error}")
            continue
        unknown = sorted({f"\\{m[1]}" for literal in _STRING_LITERAL.findall(expression)
                          for m in _ESCAPE.finditer(literal) if m[1] not in INTRINSIC_ESCAPES})
        if unknown:
            problems.append(
                f"{kind} {name!r}: the intrinsic function in {where} escapes {', '.join(unknown)} in a string "
                "literal; Step Functions defines only \\' \\{ \\} and \\\\ there, so the runner cannot say what AWS "
                "would make of it: write the character itself, or one of those four escapes"
            )


def _task(name: str, state: dict[str, Any], plan: ExecutablePlan, problems: list[str]) -> None:
    resource = state.get("Resource")
    if not isinstance(resource, str):
        return
    lambda_task = LambdaTask.parse(name, state)
    if lambda_task is not None:
        # Which function it calls, and whether the runner can run it, depends on the template: the runner checks.
        plan.lambdas[name] = lambda_task
        return
    integration = Integration.parse(resource)
    if integration is None:
        return
    plan.integrations[name] = integration
    parameters = state.get("Parameters") or state.get("Arguments") or {}
    if integration.service == "bedrock":
        if integration.action != "invokeModel":
            problems.append(
                f"Task {name!r} calls bedrock:{integration.action}, which the runner does not emulate "
                "(only bedrock:invokeModel and the aws-sdk:bedrockruntime / batch-job calls are)"
            )
        elif integration.pattern:
            problems.append(
                f"Task {name!r} uses bedrock:invokeModel.{integration.pattern}; InvokeModel supports only the "
                "request-response pattern"
            )
        elif isinstance(parameters, dict) and ("Output" in parameters or "Output.$" in parameters):
            problems.append(
                f"Task {name!r} writes the InvokeModel response to S3 (Output.S3Uri); the result Step Functions "
                "returns in that case is not reproduced offline; drop Output for the test or read the Body"
            )
    elif integration.service == "aws-sdk" and integration.api == "bedrockruntime":
        if integration.action in STREAMING_ACTIONS:
            problems.append(
                f"Task {name!r} calls bedrockruntime:{integration.action}: Step Functions' SDK integration cannot "
                "call streaming operations (AWS rejects the definition); call converse or invokeModel"
            )
        elif integration.pattern:
            problems.append(f"Task {name!r}: aws-sdk:bedrockruntime calls support only the request-response pattern")
    elif integration.service == "aws-sdk" and integration.api == "bedrock":
        if integration.action not in BATCH_ACTIONS:
            problems.append(
                f"Task {name!r} calls bedrock:{integration.action}; of the Bedrock control plane the runner "
                f"simulates only the batch inference calls ({', '.join(BATCH_ACTIONS)})"
            )
        elif integration.pattern:
            problems.append(f"Task {name!r}: aws-sdk:bedrock calls support only the request-response pattern")


def _map(name: str, state: dict[str, Any], plan: ExecutablePlan, problems: list[str]) -> None:
    processor = state.get("ItemProcessor") or {}
    config = processor.get("ProcessorConfig") or {}
    settings = MapSettings(distributed=config.get("Mode") == "DISTRIBUTED")

    # moto's grammar reads ToleratedFailurePercentage as a decimal only: 5 fails to parse, 5.0 works.
    percentage = state.get("ToleratedFailurePercentage")
    if isinstance(percentage, int) and not isinstance(percentage, bool):
        state["ToleratedFailurePercentage"] = float(percentage)
    for key in ("ToleratedFailurePercentagePath", "ToleratedFailureCountPath"):
        if key in state:
            problems.append(f"Map {name!r}: {key} is not executed offline; give the literal value instead")
    if isinstance(state.get("ToleratedFailurePercentage"), float):
        settings.tolerated_failure_percentage = state["ToleratedFailurePercentage"]
    if isinstance(state.get("ToleratedFailureCount"), int):
        settings.tolerated_failure_count = state["ToleratedFailureCount"]

    batcher = state.pop("ItemBatcher", None)
    if batcher is not None and ("ItemSelector" in state or "Parameters" in state):
        problems.append(
            f"Map {name!r}: ItemBatcher with ItemSelector is not executed offline (Step Functions selects each "
            "item before batching; the runner batches after moto selects); drop one of them for the test"
        )
    elif batcher is not None:
        unsupported = sorted(k for k in batcher if k not in ("MaxItemsPerBatch", "MaxInputBytesPerBatch", "BatchInput"))
        batch_input = batcher.get("BatchInput")
        if unsupported:
            problems.append(
                f"Map {name!r}: ItemBatcher {', '.join(unsupported)} is not executed offline; use literal "
                "MaxItemsPerBatch / MaxInputBytesPerBatch"
            )
        elif batch_input is not None and (not isinstance(batch_input, dict) or _has_paths(batch_input)):
            problems.append(
                f"Map {name!r}: ItemBatcher BatchInput with JSONPath or JSONata fields is not executed offline; "
                "use literal values"
            )
        else:
            settings.item_batcher = ItemBatcher(
                max_items=batcher.get("MaxItemsPerBatch"),
                max_bytes=batcher.get("MaxInputBytesPerBatch"),
                batch_input=batch_input,
            )

    reader = state.get("ItemReader") or {}
    input_type = (reader.get("ReaderConfig") or {}).get("InputType")
    if input_type not in (None, "JSON", "JSONL", "CSV"):
        problems.append(
            f"Map {name!r}: ItemReader InputType {input_type!r} is not executed offline (moto reads JSON and CSV "
            "objects and S3 listings; the runner adds JSONL)"
        )

    writer = state.get("ResultWriter")
    if isinstance(writer, dict) and "WriterConfig" in writer:
        raw = writer.pop("WriterConfig") or {}
        exported = "Resource" in writer
        settings.writer_config = WriterConfig(
            output_type=str(raw.get("OutputType", "JSON")),
            transformation=str(raw.get("Transformation", "NONE" if exported else "COMPACT")),
            exported=exported,
        )
        if settings.writer_config.transformation not in ("NONE", "COMPACT", "FLATTEN"):
            problems.append(f"Map {name!r}: WriterConfig Transformation {raw.get('Transformation')!r} is not known")
        if settings.writer_config.output_type != "JSON":
            problems.append(
                f"Map {name!r}: WriterConfig OutputType {raw.get('OutputType')!r} is not executed offline (the runner "
                "writes JSON result files, whose names it knows); use JSON for the test"
            )
        if not exported:
            del state["ResultWriter"]
    if isinstance(state.get("ResultWriter"), dict):
        settings.exports_results = True
        if not settings.distributed:
            problems.append(f"Map {name!r}: ResultWriter applies to distributed Maps only")
    if settings != MapSettings(distributed=settings.distributed) or settings.distributed:
        plan.maps[name] = settings


def _has_paths(value: Any) -> bool:
    if isinstance(value, dict):
        return any(str(k).endswith(".$") or _has_paths(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_paths(v) for v in value)
    return isinstance(value, str) and value.startswith("{%")
