"""botocore's bedrock-runtime service model, read as data with the standard library.

The emulator asks it which errors an operation can return (and, in a stream, which exceptions the
event union carries), with which HTTP status, and which operations exist, so none of these lists is
copied here and none drifts when botocore adds an error or an operation. The JSON file is read from
the installed botocore package without importing botocore (import time stays ~10 ms). Without
botocore the emulator still serves requests; only what needs the model (fail_next, naming an
operation it does not emulate) says so.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVICE = "bedrock-runtime"


@dataclass(frozen=True)
class Operation:
    name: str
    method: str
    uri: str
    errors: tuple[str, ...]  # the operation's modelled errors (shape names), before any stream starts
    stream_errors: dict[str, str] | None  # in-stream: error shape name -> event member name; None if no stream

    def route(self) -> re.Pattern[str]:
        """The request path as a pattern: each {label} matches one percent-encoded segment or more."""
        path = self.uri.split("?", 1)[0]
        parts = re.split(r"\{[^}]+\}", path)
        return re.compile("".join(re.escape(p) + ("(.+)" if i < len(parts) - 1 else "") for i, p in enumerate(parts)))


@dataclass(frozen=True)
class ServiceModel:
    source: str
    operations: dict[str, Operation]
    statuses: dict[str, int]  # error shape name -> HTTP status
    enums: dict[str, tuple[str, ...]]

    def operation_at(self, method: str, path: str) -> str | None:
        """The operation a request line addresses, or None."""
        for op in self.operations.values():
            if op.method == method and op.route().fullmatch(path):
                return op.name
        return None


def _data_dir() -> Path | None:
    spec = importlib.util.find_spec("botocore")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "data" / SERVICE


def _read(directory: Path) -> tuple[dict[str, Any], str] | None:
    versions = sorted(d for d in directory.iterdir() if d.is_dir()) if directory.is_dir() else []
    for version in reversed(versions):  # botocore uses the newest API version
        plain, packed = version / "service-2.json", version / "service-2.json.gz"
        if plain.is_file():
            return json.loads(plain.read_bytes()), str(plain)
        if packed.is_file():
            return json.loads(gzip.decompress(packed.read_bytes())), str(packed)
    return None


def _build(data: dict[str, Any], source: str) -> ServiceModel:
    shapes = data["shapes"]
    operations = {}
    for name, op in data["operations"].items():
        stream_errors = None
        output = shapes.get(op.get("output", {}).get("shape", ""), {})
        for member in output.get("members", {}).values():
            union = shapes.get(member["shape"], {})
            if union.get("eventstream"):
                stream_errors = {
                    m["shape"]: member_name
                    for member_name, m in union["members"].items()
                    if shapes.get(m["shape"], {}).get("exception")
                }
        operations[name] = Operation(
            name=name,
            method=op["http"]["method"],
            uri=op["http"]["requestUri"],
            errors=tuple(error["shape"] for error in op.get("errors", [])),
            stream_errors=stream_errors,
        )
    statuses = {
        name: int(shape.get("error", {}).get("httpStatusCode") or (400 if shape.get("error", {}).get("senderFault") else 500))
        for name, shape in shapes.items()
        if shape.get("exception")
    }
    enums = {name: tuple(shape["enum"]) for name, shape in shapes.items() if "enum" in shape}
    return ServiceModel(source, operations, statuses, enums)


@functools.lru_cache(maxsize=1)
def load() -> ServiceModel | None:
    """The installed botocore's bedrock-runtime model, or None when botocore is not installed."""
    directory = _data_dir()
    found = _read(directory) if directory else None
    return _build(*found) if found else None
