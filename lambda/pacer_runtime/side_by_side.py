"""Run independent model calls side by side, bounded, with full-jitter retries on throttling.

Independent calls made one after another add up; side by side you wait only for the slowest. The
bound keeps the calls in flight at what the quota sustains (`planning.sustainable_rate(...)
.max_concurrency`), because Bedrock rejects a throttled call at once instead of queuing it: extra
calls in flight only turn into throttles. A throttled call waits a random time between 0 and
min(cap, base x 2^attempt) (full jitter), so retries from many threads spread out instead of
arriving together.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

from ._arguments import positive, whole
from .bedrock import is_throttle

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter. max_attempts counts the first call."""

    base_seconds: float = 1.0
    cap_seconds: float = 20.0
    max_attempts: int = 8

    def __post_init__(self) -> None:
        positive("Backoff base_seconds", self.base_seconds)
        positive("Backoff cap_seconds", self.cap_seconds)
        whole("Backoff max_attempts", self.max_attempts, note="the first call included; 1 disables retries")
        if self.cap_seconds < self.base_seconds:
            raise ValueError(
                f"Backoff base_seconds={self.base_seconds!r} must be > 0 and cap_seconds={self.cap_seconds!r} >= base_seconds"
            )
        if self.max_attempts < 1:
            raise ValueError(f"Backoff max_attempts={self.max_attempts!r} must be >= 1 (1 disables retries)")

    def delay(self, retry: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number `retry` (0 for the first retry)."""
        return (rng or random).uniform(0, min(self.cap_seconds, self.base_seconds * 2**retry))


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """One call's result or the error that ended it, with how many attempts and throttles it took."""

    value: T | None
    error: BaseException | None
    attempts: int
    throttles: int
    seconds: float  # wall time including backoff

    @property
    def ok(self) -> bool:
        return self.error is None


def call_with_backoff(
    call: Callable[[], T],
    *,
    backoff: Backoff = Backoff(),
    retryable: Callable[[BaseException], bool] = is_throttle,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> Outcome[T]:
    """Call until it succeeds, fails with a non-retryable error, or runs out of attempts."""
    started, throttles = time.perf_counter(), 0
    for attempt in range(1, backoff.max_attempts + 1):
        try:
            value = call()
        except Exception as error:  # the caller's error, reported in the Outcome, never swallowed
            retry = retryable(error)
            throttles += retry
            if not retry or attempt == backoff.max_attempts:
                return Outcome(None, error, attempt, throttles, time.perf_counter() - started)
            sleep(backoff.delay(attempt - 1, rng))
        else:
            return Outcome(value, None, attempt, throttles, time.perf_counter() - started)
    raise AssertionError("unreachable: the loop returns on its last attempt")


class BoundedCalls:
    """A pool that runs at most max_in_flight calls at once, each with full-jitter retries.

    Submit calls as they arrive (a request stream); each future resolves to an Outcome, never
    raises. Use it as a context manager, or call close() to wait for the calls still running.
    """

    def __init__(
        self,
        max_in_flight: int,
        *,
        backoff: Backoff = Backoff(),
        retryable: Callable[[BaseException], bool] = is_throttle,
    ):
        whole("max_in_flight", max_in_flight, note="the calls that run at once")
        self.max_in_flight, self.backoff, self.retryable = max_in_flight, backoff, retryable
        self._pool = ThreadPoolExecutor(max_workers=max_in_flight, thread_name_prefix="side-by-side")

    def submit(self, call: Callable[[], T]) -> Future[Outcome[T]]:
        return self._pool.submit(call_with_backoff, call, backoff=self.backoff, retryable=self.retryable)

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def __enter__(self) -> BoundedCalls:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_side_by_side(
    calls: Sequence[Callable[[], T]],
    *,
    max_in_flight: int,
    backoff: Backoff = Backoff(),
    retryable: Callable[[BaseException], bool] = is_throttle,
    on_done: Callable[[int, Outcome[T]], None] | None = None,
) -> list[Outcome[T]]:
    """Run independent calls with at most max_in_flight at once; outcomes in input order.

    Share one client across the calls (clients are thread-safe) and size its
    max_pool_connections to max_in_flight. A failed call is reported in its Outcome; the others
    still run. on_done(index, outcome) is called as each call finishes (progress, metrics), one at a time.
    """
    whole("max_in_flight", max_in_flight, note="the calls that run at once")
    lock = threading.Lock()
    with BoundedCalls(min(max_in_flight, max(len(calls), 1)), backoff=backoff, retryable=retryable) as pool:
        futures = [pool.submit(call) for call in calls]
        if on_done is not None:
            for index, future in enumerate(futures):
                def report(done: Future, index: int = index) -> None:
                    with lock:
                        on_done(index, done.result())
                future.add_done_callback(report)
    return [future.result() for future in futures]
