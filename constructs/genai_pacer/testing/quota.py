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

Which of Bedrock's two quota models a model is charged under is `endpoint`:

- "bedrock-runtime" (default; planning.QUOTAS_DOC): one combined tokens-per-minute quota per model,
  charged as above, plus the per-model daily token quota ("Model invocation max tokens per day",
  ModelSpec.daily_token_quota, by default the TPM quota x 1,440). The day is charged the same two
  steps as the minute (reserve, then settle with burndown: the page does not say whether the daily
  quota applies the burndown; counting it can only throttle early, never late, and
  `planning.DailyLoad` counts it the same way). When the day resets is not documented either: the
  emulator's days are whole days of model time since it started (DAY_SECONDS), like the
  "clock-minute" window.
- "bedrock-mantle" (planning.MANTLE_QUOTAS_DOC): two per-model quotas and no RPM. Input tokens per minute
  (ModelSpec.tpm_quota): input + cache writes + max_tokens is checked against it at admission
  (cache reads do not count) and settles to input + cache writes at completion (the page says the
  sum is checked; that the max_tokens part is held until the call completes is this emulator's
  reading). Output tokens per minute (ModelSpec.output_tpm_quota): output tokens are counted as
  the model generates them (a streamed call as each chunk goes out, a whole answer when it is
  sent). What Bedrock does once the output quota is spent was cut off in the stored copy of the
  page: the emulator throttles new calls while the output window is full and never cuts off a call
  in flight. No burndown applies (there is no combined quota) and there is no daily quota.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from .._internal.checks import Checks
from ..quota.planning import MANTLE_QUOTAS_DOC

__all__ = ["QUOTA_ENDPOINTS", "QUOTA_WINDOWS", "QuotaModel"]

WINDOW_SECONDS = 60.0
#: One day of model time: the daily token quota's window (its reset time is not documented).
DAY_SECONDS = 86_400.0
QUOTA_WINDOWS = ("sliding", "clock-minute", "token-bucket")
QUOTA_ENDPOINTS = ("bedrock-runtime", "bedrock-mantle")


@dataclass(frozen=True)
class QuotaModel:
    """The quota algorithm every model of one emulator uses; the default follows the reference notes."""

    window: str = "sliding"
    reserve_output_with_burndown: bool = False
    endpoint: str = "bedrock-runtime"

    def __post_init__(self) -> None:
        with Checks("QuotaModel") as check:
            check.one_of("window", self.window, QUOTA_WINDOWS)
            check.instance("reserve_output_with_burndown", self.reserve_output_with_burndown, bool, "True or False")
            check.one_of("endpoint", self.endpoint, QUOTA_ENDPOINTS)
            check.rule(not (self.mantle and self.reserve_output_with_burndown),
                       "reserve_output_with_burndown=True has no meaning for endpoint='bedrock-mantle': its input "
                       "quota holds max_tokens without burndown and its output quota counts tokens generated "
                       f"({MANTLE_QUOTAS_DOC}); drop it", id="reserve_output_with_burndown.mantle")

    @property
    def mantle(self) -> bool:
        """Whether models are charged the bedrock-mantle way (input and output tokens per minute)."""
        return self.endpoint == "bedrock-mantle"

    def reservation(self, prompt_tokens: int, max_tokens: int, burndown: float) -> int:
        """Tokens reserved at the start: prompt (input, cache writes and reads) + max_tokens [x burndown]."""
        output = max_tokens * burndown if self.reserve_output_with_burndown else max_tokens
        return prompt_tokens + math.ceil(output)

    def ledger(self, tpm: int, rpm: int | None) -> Ledger:
        if self.window == "token-bucket":
            return _TokenBucket(tpm, rpm)
        return _Window(tpm, rpm, clock_minute=self.window == "clock-minute")

    def daily_ledger(self, tokens_per_day: int) -> Ledger:
        """The daily token quota: charges count toward the day (of model time) their request started in."""
        return _Window(tokens_per_day, None, clock_minute=True, seconds=DAY_SECONDS)


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

    def count(self, tokens: int, now: float) -> None:
        """Charge tokens already spent, without a check (bedrock-mantle's output, as it is generated)."""
        ...

    def full(self, now: float) -> bool:
        """Whether the quota holds nothing more right now."""
        ...


class _Window:
    """Charges keyed by request start, forgotten when their window passes (sliding or clock minute)."""

    def __init__(self, tpm: int, rpm: int | None, *, clock_minute: bool, seconds: float = WINDOW_SECONDS):
        self.tpm, self.rpm, self.clock_minute, self.seconds = tpm, rpm, clock_minute, seconds
        self.charges: deque[Charge] = deque()  # in start order, so expiry is from the left
        self.total = 0.0

    def _expired(self, charge: Charge, now: float) -> bool:
        if self.clock_minute:  # it started before the current minute (or day)
            return charge.started < math.floor(now / self.seconds) * self.seconds
        return charge.started <= now - self.seconds  # it started a full window ago

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

    def count(self, tokens: int, now: float) -> None:
        self._expire(now)
        self.charges.append(Charge(now, float(tokens)))
        self.total += tokens

    def full(self, now: float) -> bool:
        return self.used(now) >= self.tpm


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

    def count(self, tokens: int, now: float) -> None:
        self._refill(now)
        self.tokens -= tokens

    def full(self, now: float) -> bool:
        self._refill(now)
        return self.tokens <= 0
