"""A model's on-demand serving slots: how many calls it serves at once, and who goes next.

ASSUMPTION (documented, not measured): Bedrock's processing queue serves Priority before Standard
(`default`) and Flex after it. AWS says so in words only (sources beside ASSUMED_TIER_ORDER). How
Bedrock orders its queue, how long a call may wait and what it answers when the wait is too long
are not published, so the emulator takes the simplest reading: calls wait in tier order (ties: first
come, first served); a call that waited max_queue_seconds is refused with ThrottlingException, the
retryable refusal botocore's model lists for every emulated operation.
"""

from __future__ import annotations

import heapq
import itertools
import threading

from .clock import Clock

__all__ = ["ASSUMED_TIER_ORDER", "ServingSlots"]

#: The order calls waiting for a serving slot are served in, best first: an ASSUMPTION read from
#: AWS's tiers overview, https://aws.amazon.com/bedrock/service-tiers ("Priority requests receive
#: preferential treatment in the processing queue, moving ahead of standard requests"; Flex is for
#: "workloads that can trade immediate processing for cost efficiency") and the user guide,
#: https://docs.aws.amazon.com/bedrock/latest/userguide/service-tiers-inference.html (Priority
#: requests are prioritized over Standard and Flex requests). `default` is Standard. `reserved` is
#: absent: a call served from a reservation uses capacity set aside for it and does not wait for
#: on-demand slots (an overflowed reserved call waits as `default`, the tier that serves it). A call
#: that names no tier waits as `default`, the tier Bedrock serves it at.
ASSUMED_TIER_ORDER: tuple[str, ...] = ("priority", "default", "flex")


class ServingSlots:
    """At most `slots` calls are served at once; the others wait, best tier first, then in arrival order."""

    def __init__(self, slots: int, clock: Clock):
        self.free, self.clock = slots, clock
        self._queue: list[tuple[int, int]] = []  # (tier rank, arrival number): a heap, best first
        self._arrivals = itertools.count()
        self._changed = threading.Condition()

    @property
    def waiting(self) -> int:
        """Calls waiting for a slot right now (those a free slot is about to go to are not counted)."""
        with self._changed:
            return max(len(self._queue) - self.free, 0)

    def acquire(self, tier: str | None, max_wait: float) -> bool:
        """Wait for a slot up to `max_wait` model seconds; True when one was taken, False when the wait ran out."""
        ticket = (ASSUMED_TIER_ORDER.index(tier or "default"), next(self._arrivals))
        deadline = self.clock.now() + max_wait
        with self._changed:
            heapq.heappush(self._queue, ticket)
            while True:
                if self.free > 0 and self._queue[0] == ticket:
                    heapq.heappop(self._queue)
                    self.free -= 1
                    self._changed.notify_all()  # the next in line may take another free slot
                    return True
                left = deadline - self.clock.now()
                if left <= 0:
                    self._queue.remove(ticket)
                    heapq.heapify(self._queue)
                    self._changed.notify_all()  # it may have been first in line
                    return False
                # A release wakes the line at once; the clock is looked at again at least this often.
                self._changed.wait(min(self.clock.wall_seconds(left), 0.05))

    def release(self) -> None:
        with self._changed:
            self.free += 1
            self._changed.notify_all()
