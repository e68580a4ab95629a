"""The binary framing of `application/vnd.amazon.eventstream`, as bedrock-runtime streams it.

Each message: total length and headers length (uint32, big-endian), a CRC32 of those 8 bytes, the
headers, the payload, and a CRC32 of everything before it. Headers used here are strings (type 7):
`:message-type` (event or exception), `:event-type` or `:exception-type`, `:content-type`.
botocore's own parser reads these frames, so a real client checks every length and CRC.
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

_STRING = 7


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return struct.pack("!B", len(raw_name)) + raw_name + struct.pack("!BH", _STRING, len(raw_value)) + raw_value


def frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message with both CRCs."""
    raw_headers = b"".join(_header(name, value) for name, value in headers.items())
    total = 12 + len(raw_headers) + len(payload) + 4
    prelude = struct.pack("!II", total, len(raw_headers))
    message = prelude + struct.pack("!I", zlib.crc32(prelude)) + raw_headers + payload
    return message + struct.pack("!I", zlib.crc32(message))


def event(event_type: str, body: dict[str, Any]) -> bytes:
    """An event whose JSON payload holds the event shape's members (e.g. contentBlockDelta)."""
    return frame(
        {":event-type": event_type, ":content-type": "application/json", ":message-type": "event"},
        json.dumps(body, separators=(",", ":")).encode(),
    )


def exception(exception_type: str, message: str) -> bytes:
    """An in-stream error; the type is camelCase as the service sends it (throttlingException)."""
    return frame(
        {":exception-type": exception_type, ":content-type": "application/json", ":message-type": "exception"},
        json.dumps({"message": message}).encode(),
    )
