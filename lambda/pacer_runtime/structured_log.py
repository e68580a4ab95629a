"""One structured log line per event, as JSON on stdout (Lambda sends it to CloudWatch Logs, where
Logs Insights queries its fields). Handlers log reasons and ids, never a prompt."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["log"]


def log(level: str, message: str, **fields: Any) -> None:
    print(json.dumps({"level": level, "message": message, **fields}, default=str))
