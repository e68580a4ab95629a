"""The emulator's clock: what time it is in model seconds, and how a request sleeps in them.

- `WallClock` (the default): model time is wall time since the emulator started times time_scale;
  a sleep of s model seconds lasts s / time_scale wall seconds.
- `ManualClock`: model time moves only when a test moves it, with `advance(seconds)`, or, with
  `instant=True`, by every sleep jumping the clock to the sleep's end. A test then asserts exact
  model-time figures and orderings (who was served first, when a quota window frees) without
  depending on how fast the machine is. `sleepers` says how many requests are asleep, so a test
  can wait for "the first call holds its slot" as a state, not a duration.

Both are safe to share between the emulator's request threads.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

from .._internal.checks import Checks

__all__ = ["Clock", "ManualClock", "WallClock"]


class Clock(Protocol):
    """Model time for the emulator."""

    def now(self) -> float:
        """Model seconds since the clock started."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block the calling request for `seconds` of model time."""
        ...

    def wall_seconds(self, seconds: float) -> float:
        """How long a wait of `seconds` model seconds may block a thread before it looks again."""
        ...


class WallClock:
    """Wall time since creation, times time_scale (60 runs a one-minute quota window in one second)."""

    def __init__(self, time_scale: float = 1.0):
        self.time_scale = time_scale
        self._started_at = time.monotonic()

    def now(self) -> float:
        return (time.monotonic() - self._started_at) * self.time_scale

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds / self.time_scale)

    def wall_seconds(self, seconds: float) -> float:
        return max(seconds, 0.0) / self.time_scale


class ManualClock:
    """Model time that moves only when told to.

    advance(seconds) moves it forward and wakes every sleeper whose sleep has ended. With
    instant=True a sleep itself moves the clock to its end (never backward), so sequential calls take
    no wall time and their model-time figures are exact; concurrent sleeps then overlap rather than
    add up. start: the model time the clock starts at. Default: 0.
    """

    def __init__(self, start: float = 0.0, *, instant: bool = False):
        with Checks("ManualClock") as check:
            check.number("start", start, minimum=0)
            check.instance("instant", instant, bool, "True or False")
        self.instant = instant
        self._now = float(start)
        self._deadlines: list[float] = []  # of the threads asleep
        self._changed = threading.Condition()

    def now(self) -> float:
        with self._changed:
            return self._now

    @property
    def sleepers(self) -> int:
        """How many threads sleep on this clock until a time still to come (one whose sleep has ended
        but that has not woken yet is not counted, so a test that advances the clock once every
        request sleeps never advances it twice past the same sleeper)."""
        with self._changed:
            return sum(deadline > self._now for deadline in self._deadlines)

    def advance(self, seconds: float) -> float:
        """Move model time forward by `seconds`; returns the new time."""
        with Checks("ManualClock.advance") as check:
            check.number("seconds", seconds, minimum=0)
        with self._changed:
            self._now += seconds
            self._changed.notify_all()
            return self._now

    def sleep(self, seconds: float) -> None:
        with self._changed:
            deadline = self._now + max(seconds, 0.0)
            if self.instant:
                self._now = max(self._now, deadline)
                self._changed.notify_all()
                return
            self._deadlines.append(deadline)
            try:
                while self._now < deadline:
                    self._changed.wait()
            finally:
                self._deadlines.remove(deadline)

    def wall_seconds(self, seconds: float) -> float:
        return 0.01  # model time moves only on advance(): look again soon
