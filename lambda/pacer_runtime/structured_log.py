"""One structured log line per event, as JSON on stdout (Lambda sends it to CloudWatch Logs, where
Logs Insights queries its fields). Handlers log reasons and ids, never a prompt."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["describe_error", "log"]


def log(level: str, message: str, **fields: Any) -> None:
    print(json.dumps({"level": level, "message": message, **fields}, default=str))


def describe_error(error: BaseException) -> dict[str, Any]:
    """A log-safe description of an error: its class name and, for a botocore ClientError, the
    service's error code and HTTP status. Never str(error) nor the error's message: botocore's
    messages quote request parameters (a prompt, a stored answer), and so may the service's.

    The fields are {"errorClass": ..., "code": ..., "httpStatus": ...}, the last two only when known.
    """
    described: dict[str, Any] = {"errorClass": type(error).__name__}
    response = getattr(error, "response", None)  # botocore ClientError (duck-typed: no botocore import)
    if isinstance(response, dict):
        details = response.get("Error")
        code = details.get("Code") if isinstance(details, dict) else None
        if isinstance(code, str) and code:
            described["code"] = _safe_name(code)
        metadata = response.get("ResponseMetadata")
        status = metadata.get("HTTPStatusCode") if isinstance(metadata, dict) else None
        if isinstance(status, int) and not isinstance(status, bool):
            described["httpStatus"] = status
    return described


def _safe_name(code: str) -> str:
    """An error code as a name: AWS codes are short identifiers; anything else is cut and marked, so a
    service that put text in the code field cannot carry a prompt into the log."""
    if len(code) <= 64 and all(c.isalnum() or c in "._:-" for c in code):
        return code
    return "unrecognized-code"
