"""QuotaPacer's in-process daily token quota (daily_tokens): a UTC day counted on the wall clock,
reservation then settlement, on fake clocks (no sleeping)."""

from __future__ import annotations

import threading

import pytest
from pacer_runtime.quota_pacer import AdmissionRejected, QuotaPacer

EPOCH = 1_800_000_000.0  # 2027-01-15T08:00:00Z
MIDNIGHT = 1_800_057_600.0  # 2027-01-16T00:00:00Z


class Clocks:
    """The pacer's monotonic clock and the wall clock, moved together."""

    def __init__(self) -> None:
        self.monotonic, self.wall = 0.0, EPOCH

    def advance(self, seconds: float) -> None:
        self.monotonic += seconds
        self.wall += seconds


def pacer(clocks: Clocks, **options) -> QuotaPacer:
    return QuotaPacer(10_000, clock=lambda: clocks.monotonic, wall_clock=lambda: clocks.wall, poll_seconds=0.005,
                      **options)


def test_a_call_past_the_days_tokens_is_rejected_at_once_until_midnight_with_the_minute_free():
    clocks = Clocks()
    p = pacer(clocks, daily_tokens=1_000)
    p.admit(600).settle(input_tokens=300, output_tokens=100)  # the day counts the settled 400
    p.admit(500).throttled()  # Bedrock charged nothing: neither does the day
    p.admit(500).settle(input_tokens=400, output_tokens=100)
    clocks.advance(120)  # the window is empty
    with pytest.raises(AdmissionRejected, match=r"the day's tokens are spent: 900 of daily_tokens=1,000") as rejected:
        p.admit(200, max_wait_seconds=3_600)
    assert rejected.value.earliest_start_seconds == pytest.approx(MIDNIGHT - clocks.wall)
    ticket = p.admit(100, max_wait_seconds=0)  # what the day still holds goes at once
    ticket.release()
    clocks.advance(MIDNIGHT - clocks.wall + 1)
    assert p.admit(1_000, max_wait_seconds=0).reserved == 1_000  # a new day


def test_a_call_waiting_for_the_next_day_is_admitted_at_midnight():
    clocks = Clocks()
    clocks.wall = MIDNIGHT - 10
    p = pacer(clocks, daily_tokens=1_000)
    p.admit(1_000).settle(input_tokens=1_000, output_tokens=0)
    admitted: list = []
    waiter = threading.Thread(target=lambda: admitted.append(p.admit(500)), daemon=True)  # no deadline: it waits
    waiter.start()
    while p.stats().waiting != 1:  # a state, not a duration: the call is queued for the day
        assert waiter.is_alive() and not admitted
    assert not admitted
    clocks.advance(11)
    waiter.join(timeout=30)
    assert admitted and admitted[0].reserved == 500


def test_without_daily_tokens_no_day_is_kept_and_bad_values_are_refused():
    clocks = Clocks()
    p = pacer(clocks)
    for _ in range(3):
        p.admit(9_000).settle(input_tokens=9_000, output_tokens=0)
        clocks.advance(61)
    with pytest.raises(ValueError, match="daily_tokens=0"):
        pacer(clocks, daily_tokens=0)
    with pytest.raises(ValueError, match="exceeds daily_tokens=500"):
        pacer(clocks, daily_tokens=500).admit(600)
