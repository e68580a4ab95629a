"""How the emulator charges a model's quota. Bedrock's exact algorithm is not public, so it is a choice.

Every model charges in two steps (see `genai_pacer.planning`): at the start a request reserves
input + cache writes + cache reads + max_tokens and is throttled if the quota cannot hold that; at
completion the charge settles to input + cache writes + output x burndown. What varies:

- window "sliding" (default): a charge counts for one minute after its request started, the
  accounting `planning.sustainable_rate` assumes and the reference notes describe.
- window "clock-minute": charges count toward the clock minute their request started in (minutes
  of model time since the emulator started); the quota is whole again at each minute boundary.
- window "token-bucket": a bucket of tpm tokens refilled at tpm per minute; a reservation takes from
  it, a settlement returns the unused part (or takes the excess, so the bucket can go negative).
- reserve_output_with_burndown: False (default, as the reference notes) reserves max_tokens; True
  reserves max_tokens x burndown, the reading some public sources give.

An RPM quota, when set, counts requests the same way (a request bucket for "token-bucket").
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from .._internal.checks import Checks

__all__ = ["QUOTA_WINDOWS", "QuotaModel"]

WINDOW_SECONDS = 60.0
QUOTA_WINDOWS = ("sliding", "clock-minute", "token-bucket")


@dataclass(frozen=True)
class QuotaModel:
    """The quota algorithm every model of one emulator uses; the default follows the reference notes."""

    window: str = "sliding"
    reserve_output_with_burndown: bool = False

    def __post_init__(self) -> None:
        with Checks("QuotaModel") as check:
            check.one_of("window", self.window, QUOTA_WINDOWS)
            check.instance("reserve_output_with_burndown", self.reserve_output_with_burndown, bool, "True or False")

    def reservation(self, prompt_tokens: int, max_tokens: int, burndown: float) -> int:
        """Tokens reserved at the start: prompt (input, cache writes and reads) + max_tokens [x burndown]."""
        output = max_tokens * burndown if self.reserve_output_with_burndown else max_tokens
        return prompt_tokens + math.ceil(output)

    def ledger(self, tpm: int, rpm: int | None) -> Ledger:
        if self.window == "token-bucket":
            return _TokenBucket(tpm, rpm)
        return _Window(tpm, rpm, clock_minute=self.window == "clock-minute")


class Charge:
    """One request's hold on a quota: reserved at start, settled at completion."""

    __slots__ = ("expired", "started", "tokens")

    def __init__(self, started: float, tokens: float):
        self.started, self.tokens, self.expired = started, tokens, False


class Ledger(Protocol):
    """One quota (a model's standard or optimized TPM); `now` is in model seconds."""

    def reserve(self, tokens: int, now: float) -> Charge | str:
        """The charge, or why the request is throttled ("tokens" or "requests")."""
        ...

    def settle(self, charge: Charge, tokens: float, now: float) -> None: ...

    def used(self, now: float) -> float:
        """Tokens held right now (reservations in flight included)."""
        ...


class _Window:
    """Charges keyed by request start, forgotten when their window passes (sliding or clock minute)."""

    def __init__(self, tpm: int, rpm: int | None, *, clock_minute: bool):
        self.tpm, self.rpm, self.clock_minute = tpm, rpm, clock_minute
        self.charges: deque[Charge] = deque()  # in start order, so expiry is from the left
        self.total = 0.0

    def _expired(self, charge: Charge, now: float) -> bool:
        if self.clock_minute:  # it started before the current minute
            return charge.started < math.floor(now / WINDOW_SECONDS) * WINDOW_SECONDS
        return charge.started <= now - WINDOW_SECONDS  # it started a full window ago

    def _expire(self, now: float) -> None:
        while self.charges and self._expired(self.charges[0], now):
            charge = self.charges.popleft()
            charge.expired = True
            self.total -= charge.tokens

    def reserve(self, tokens: int, now: float) -> Charge | str:
        self._expire(now)
        if self.total + tokens > self.tpm:
            return "tokens"
        if self.rpm is not None and len(self.charges) + 1 > self.rpm:
            return "requests"
        charge = Charge(now, float(tokens))
        self.charges.append(charge)
        self.total += tokens
        return charge

    def settle(self, charge: Charge, tokens: float, now: float) -> None:
        if not charge.expired:  # still counted in its window
            self.total += tokens - charge.tokens
        charge.tokens = tokens

    def used(self, now: float) -> float:
        self._expire(now)
        return self.total


class _TokenBucket:
    """tpm tokens of capacity, refilled continuously at tpm per minute (and the same for requests)."""

    def __init__(self, tpm: int, rpm: int | None):
        self.tpm, self.rpm = tpm, rpm
        self.tokens, self.requests, self.at = float(tpm), float(rpm or 0), 0.0

    def _refill(self, now: float) -> None:
        elapsed, self.at = max(now - self.at, 0.0), max(now, self.at)
        self.tokens = min(self.tpm, self.tokens + elapsed * self.tpm / WINDOW_SECONDS)
        if self.rpm is not None:
            self.requests = min(self.rpm, self.requests + elapsed * self.rpm / WINDOW_SECONDS)

    def reserve(self, tokens: int, now: float) -> Charge | str:
        self._refill(now)
        if tokens > self.tokens:
            return "tokens"
        if self.rpm is not None and self.requests < 1:
            return "requests"
        self.tokens -= tokens
        if self.rpm is not None:
            self.requests -= 1
        return Charge(now, float(tokens))

    def settle(self, charge: Charge, tokens: float, now: float) -> None:
        self._refill(now)
        self.tokens = min(self.tpm, self.tokens + charge.tokens - tokens)
        charge.tokens = tokens

    def used(self, now: float) -> float:
        self._refill(now)
        return self.tpm - self.tokens
