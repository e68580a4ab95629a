"""Argument checks for the runtime helpers: a wrong type, NaN or infinity fails at once with the
argument's name, instead of a TypeError deep inside, or a pool that never starts (NaN workers)."""

from __future__ import annotations

import math
from typing import Any


def whole(name: str, value: Any, *, minimum: int = 1, note: str = "") -> int:
    """A whole number (not a bool, not a float) >= minimum."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r} must be a whole number >= {minimum}{f' ({note})' if note else ''}")
    return value


def positive(name: str, value: Any, *, minimum: float = 0.0) -> float:
    """A finite number > minimum."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= minimum:
        raise ValueError(f"{name}={value!r} must be a finite number > {minimum:g}")
    return float(value)
