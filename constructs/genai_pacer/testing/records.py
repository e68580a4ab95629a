"""What the emulator records: one Invocation per request, and totals that outlive the bounded history."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["Invocation", "InvocationTotals"]


@dataclass(slots=True)
class Invocation:
    """One request as the emulator saw it; throttled and failed requests are recorded too.

    It is listed from the moment the request arrives and complete (outcome, settlement) before the
    client receives the last byte of its response. operation is botocore's name (Converse,
    InvokeModel, ...); started is in model seconds since the emulator started. reserved is what the
    request asked the quota for; settled is what it finally consumed (0 when throttled). service_tier
    is the tier the request named (None: none), served_tier the tier that served it and that the
    response echoed (`default` when a reserved call overflowed). queued_ms is how long it waited for a
    serving slot (ModelSpec.serving_slots; None when it did not wait for one); ttft_ms and latency_ms
    include that wait. message is the error message when the request failed. request_id is the
    `x-amzn-RequestId` the response carried (botocore's ResponseMetadata["RequestId"]), so a client
    can find the record of its own call among concurrent ones.
    """

    model_id: str
    operation: str
    started: float
    outcome: str = "in-flight"  # then "ok", "throttled", "client-disconnected" or the error type that ended it
    requested_latency: str = "standard"
    served_latency: str = "standard"
    service_tier: str | None = None
    served_tier: str | None = None
    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    max_tokens: int = 0
    reserved: int = 0
    settled: float = 0.0
    ttft_ms: float | None = None
    latency_ms: float | None = None
    queued_ms: float | None = None
    message: str = ""
    request_id: str = ""
    counted: bool = field(default=False, init=False, repr=False, compare=False)  # added to the totals yet


@dataclass(frozen=True)
class InvocationTotals:
    """Every request since the emulator started, including those `invocations` no longer lists."""

    requests: int
    in_flight: int
    outcomes: Mapping[str, int]  # completed requests by outcome
    reserved: int
    settled: float
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    forgotten: int  # records dropped from `invocations` to keep it within max_invocations

    @property
    def throttled(self) -> int:
        return self.outcomes.get("throttled", 0)


@dataclass
class Tally:
    """The running totals behind InvocationTotals, added to as each request completes."""

    requests: int = 0
    forgotten: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    sums: Counter[str] = field(default_factory=Counter)

    def add(self, record: Invocation) -> None:
        self.outcomes[record.outcome] += 1
        for name in ("reserved", "settled", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
            self.sums[name] += getattr(record, name)

    def snapshot(self) -> InvocationTotals:
        return InvocationTotals(
            requests=self.requests,
            in_flight=self.requests - sum(self.outcomes.values()),
            outcomes=dict(self.outcomes),
            reserved=int(self.sums["reserved"]),
            settled=float(self.sums["settled"]),
            input_tokens=int(self.sums["input_tokens"]),
            output_tokens=int(self.sums["output_tokens"]),
            cache_read_tokens=int(self.sums["cache_read_tokens"]),
            cache_write_tokens=int(self.sums["cache_write_tokens"]),
            forgotten=self.forgotten,
        )
