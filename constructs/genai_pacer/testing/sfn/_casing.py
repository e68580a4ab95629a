"""Step Functions' AWS SDK integrations name parameters and results in PascalCase (ModelId,
Output.Message.Content); the service APIs use their own member names (modelId, output.message...).
Convert both ways along the botocore shapes, as Step Functions does, leaving document members (a
model's additionalModelRequestFields) as they are."""

from __future__ import annotations

import datetime
import json
from functools import cache
from typing import Any

from botocore.model import OperationModel, Shape, StructureShape
from botocore.response import StreamingBody
from botocore.session import get_session


class ParameterError(ValueError):
    """A parameter the service API does not have, named with the path to it."""


@cache
def operation_model(boto_service: str, action: str) -> OperationModel:
    """The botocore model of `action` (camelCase, as in the Resource ARN) of `boto_service`."""
    service = get_session().get_service_model(boto_service)
    wanted = action.lower()
    for name in service.operation_names:
        if name.lower() == wanted:
            return service.operation_model(name)
    raise ParameterError(f"{boto_service} has no operation {action!r}")


def sfn_name(member: str) -> str:
    """The name Step Functions gives an API member: its first letter upper-cased."""
    return member[:1].upper() + member[1:]


def _is_document(shape: Shape) -> bool:
    return bool(getattr(shape, "is_document_type", False))


def to_api(value: Any, shape: Shape | None, where: str) -> Any:
    """Parameters as Step Functions passes them (PascalCase) -> the API's member names."""
    if shape is None or _is_document(shape):
        return value
    if isinstance(shape, StructureShape):
        if not isinstance(value, dict):
            return value  # the service answers a wrong type with its own ValidationException
        names = {sfn_name(member): member for member in shape.members}
        converted = {}
        for key, item in value.items():
            member = names.get(key)
            if member is None:
                hint = names.get(sfn_name(key))
                fix = f"write {sfn_name(key)!r}" if hint else f"the members are {', '.join(sorted(names))}"
                raise ParameterError(
                    f"{where}.{key} is not a parameter Step Functions accepts ({fix}); AWS rejects this definition"
                )
            converted[member] = to_api(item, shape.members[member], f"{where}.{key}")
        return converted
    if shape.type_name == "list" and isinstance(value, list):
        return [to_api(item, shape.member, f"{where}[{i}]") for i, item in enumerate(value)]
    if shape.type_name == "map" and isinstance(value, dict):
        return {k: to_api(v, shape.value, f"{where}.{k}") for k, v in value.items()}
    if shape.type_name == "blob":
        if isinstance(value, str):
            return value.encode()
        if isinstance(value, dict | list):
            return json.dumps(value, separators=(",", ":")).encode()
    return value


def to_sfn(value: Any, shape: Shape | None) -> Any:
    """An API response -> the PascalCase JSON a Step Functions task returns."""
    if isinstance(value, StreamingBody):
        value = value.read()
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if shape is None or _is_document(shape):
        return value
    if isinstance(shape, StructureShape) and isinstance(value, dict):
        return {sfn_name(k): to_sfn(v, shape.members.get(k)) for k, v in value.items() if k != "ResponseMetadata"}
    if shape.type_name == "list" and isinstance(value, list):
        return [to_sfn(item, shape.member) for item in value]
    if shape.type_name == "map" and isinstance(value, dict):
        return {k: to_sfn(v, shape.value) for k, v in value.items()}
    return value
