"""Admission control for one model's quota share in one process: Bedrock's own ledger, kept client-side.

Bedrock charges a tokens-per-minute quota in two steps: a call reserves input + max_tokens when it
starts and is throttled at once if the minute cannot hold that; when it completes the charge settles
to input + cache writes + output x burndown. Calls sent faster than the quota sustains only turn
into throttles and retries. A QuotaPacer keeps the same ledger on the client, a sliding one-minute
window of charges keyed by when each call started, and lets a call start only when its reservation
fits the share:

    pacer = QuotaPacer(tpm=300_000, burndown=5, max_wait_seconds=20)
    client = bedrock_client(max_attempts=1)          # retries go through the pacer (see below)
    result = pacer.converse(client, request)          # waits for room, calls, settles with the usage

- Settlement: when a call returns, its charge becomes what Bedrock settles (the real usage).
- Adaptation: a throttle means someone else draws on the quota too (another process, another app):
  the limit drops multiplicatively (once per round of calls admitted under the old limit) and
  climbs back additively with each settled call, up to the share. The pacer never probes by
  crossing the limit: throttles are the last-resort signal.
- Deadlines: a call that cannot start within max_wait is rejected at once with AdmissionRejected,
  before it is sent and before it waits, so a caller sheds work it cannot serve in time instead of
  queueing it forever.
- Conservative in flight: while a call runs it holds input + max_tokens x burndown, the most it can
  settle to. That covers both readings of Bedrock's reservation (max_tokens with or without the
  burndown) and a settlement Bedrock makes before the response reaches the client.
- Failures: a call that never reached Bedrock (no connection could be made: NEVER_SENT) frees its
  hold at once; any other error keeps it until the window forgets it, because Bedrock may have
  charged the call (a read timeout or a dropped connection happens after the request was sent).
  An answer whose usage cannot be accounted (missing or negative counts) is still returned: its
  hold stays as its charge, and stats().unaccounted counts it (with a log line).
- Arguments are checked (token counts, maxTokens, deadlines, the clock's readings) and refused with
  the argument's name; a clock that steps back is taken as no time passing, never as a longer wait.

- Across processes: QuotaPacer(..., ledger=SharedLedger(...)) (pacer_runtime.ledger) admits a call
  only once the quota's shared DynamoDB ledger also holds its reservation, settles it there with
  the real usage and returns it there at once for a call Bedrock never saw or throttled. Waiting,
  deadlines and AdmissionRejected work as above, the ledger's own prediction included. When the
  ledger cannot be used (DynamoDB keeps throttling or refuses: LedgerError), the pacer falls back
  to fallback_tpm locally (the share's static per-process TPM, never unbounded) for
  ledger_retry_seconds, counts it (stats().ledger_fallbacks), logs it and publishes the
  LedgerFallbacks metric (EMF, by LedgerId).
  QuotaPacer.from_environment() builds both from the variables QuotaLedger.environment(share) sets.

Both Bedrock quota models: QuotaPacer(tpm=...) keeps bedrock-runtime's one combined quota, as above.
QuotaPacer(input_tpm=..., output_tpm=...) keeps bedrock-mantle's two (MANTLE_QUOTAS_DOC; the OpenAI
Responses / Chat Completions and Anthropic Messages endpoint, which does not serve Converse, so such
a pacer refuses converse(): wrap the call in reserve() and settle the ticket with its usage):

    pacer = QuotaPacer(input_tpm=1_000_000, output_tpm=60_000, max_wait_seconds=20)
    with pacer.reserve(input_tokens=900, max_tokens=400) as ticket:
        answer = call_the_mantle_endpoint(...)
        ticket.settle(input_tokens=..., output_tokens=..., cache_read_tokens=...)

- Input window: a call is admitted when input + cache writes + max_tokens fits input_tpm (cache
  reads do not count), held while it runs, and settled to input + cache writes.
- Output window: output is counted as generated, so a call holds max_tokens on it from admission
  (it may generate that much while it runs) and, once it returns, its output tokens count from that
  moment for a window. A call is admitted only when both windows hold it: the pacer never relies on
  what Bedrock does once the output quota is spent (not documented), and the output generated in
  any window stays within output_tpm.
- No RPM, burndown or daily quota applies there, and throttles lower both limits alike (a throttle
  does not say which quota refused it); the rest (waiting, deadlines, AdmissionRejected, releases)
  works as above.
- Across processes: ledger=SharedLedger(..., output_quota_tpm=...) keeps both windows in the one
  quota item (its module docstring); the pacer holds input and max_tokens there in one write and
  settles the output from when the call returned. fallback_tpm is then the input's static share,
  and the output's is output_tpm x fallback_tpm / input_tpm.

Service tiers (https://docs.aws.amazon.com/bedrock/latest/userguide/service-tiers-inference.html):
priority, default and flex calls share the model's one on-demand quota, so the pacer holds them all
against `tpm` alike. A Reserved tier reservation is separate: given reserved_input_tpm and
reserved_output_tpm, a call that asks for `reserved` is held against those two minute budgets
instead (input: input + cache writes, the page's sizing rule; output: maxTokens, settled to the
output tokens, without burndown: an assumption the emulator shares), without waiting for on-demand
room; when they cannot hold it, it overflows to the on-demand quota as Bedrock overflows it to
default, and is admitted there like any call. A call the response says was served at another tier
than it was held for is moved to that tier's ledger. stats() counts the calls per requested and
served tier and those served below the tier they asked for.

With a ledger too, the two features meet as Bedrock's quotas do: priority, default and flex calls,
and a reserved call's overflow, are held locally and in the shared ledger; a reserved call the
reservation holds never touches the ledger, and one Bedrock served at default anyway (the
reservation was full: other processes use it too) is charged to this process's window and to the
shared ledger (SharedLedger.charge: no admission, Bedrock already charged it), so every process
sees it. The reservation itself is shared the same way with reserved_ledger (a SharedLedger with
two budgets: quota_tpm the reservation's input tokens per minute, output_quota_tpm its output): a
reserved call is held there too (input and maxTokens, in one write) and overflows to the on-demand
quota when every process together has used it, before it is sent; reserved_input_tpm and
reserved_output_tpm are then this process's cap on it (the whole reservation, or less). Its output
counts from when the call returned, a little longer than Bedrock may (a call that overflows early
costs on-demand room, never a throttle). While reserved_ledger cannot be used (LedgerError), the
process holds reserved calls up to its own part of the reservation (reserved_fallback_input_tpm and
_output_tpm: from_environment takes the share's static part), overflowing the rest, and asks again
after ledger_retry_seconds, as it falls back to fallback_tpm for the on-demand quota. Without
reserved_ledger, give each process its own part of the reservation.

A share with no on-demand room (issues 25 and 37): ModelQuota gives a share drawn at
service_tier="reserved" whose calls the reservation holds completely an on-demand TPM of 0, so
GENAI_PACER_TPM is 0. Such a pacer still starts and admits its reserved calls through the
reservation (and reserved_ledger) as above; what has no on-demand room is chosen, not unbounded:
- Without a ledger (QuotaPacer(0, reserved_input_tpm=..., reserved_output_tpm=...)): a call the
  reservation cannot hold (a reserved call's overflow, or a call asking for another tier) is
  refused at once with AdmissionRejected saying the share has no on-demand TPM; it is never sent
  (waiting would not help: no room ever frees).
- With a ledger (QuotaLedger.environment: tpm is the share's burst cap, fallback_tpm=0): the
  overflow borrows on-demand room through the shared ledger like any call. While the ledger cannot
  be used there is no static share to fall back to, so the call waits for the ledger (retried every
  ledger_retry_seconds) and is refused with AdmissionRejected, naming the unusable ledger and
  fallback_tpm=0, as soon as its deadline comes before the ledger's retry; it is never sent on the
  pacer's own say-so (fallback_tpm=0 admits nothing, not even into an empty window).

Use one pacer per model quota per process, shared by every thread. With bedrock_client, set
max_attempts=1: each SDK retry would be a new reservation the pacer never admitted; retry through
call_with_backoff / BoundedCalls / run_side_by_side instead, which call the pacer again for each
attempt. The arithmetic mirrors genai_pacer.planning.TokenProfile (reserved, settled), which this
runtime cannot import; a test keeps the two equal.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError, ProxyConnectionError

from . import metrics
from .bedrock import ConverseResult, converse, converse_stream, is_throttle
from .ledger import ENVIRONMENT as LEDGER_ENVIRONMENT
from .ledger import LedgerError, LedgerHold, LedgerRefusal, SharedLedger
from .metrics import SERVICE_TIER_MEMBER, TIER_RANK
from .structured_log import log

__all__ = ["NEVER_SENT", "AdmissionRejected", "PacerStats", "QuotaPacer", "Ticket", "estimate_input_tokens"]

WINDOW_SECONDS = 60.0
#: Errors raised before a request left the client, so Bedrock never saw (or charged) it. botocore's
#: URLLib3Session.send (botocore/httpsession.py) raises them when no connection could be made:
#: EndpointConnectionError for urllib3's NewConnectionError or a DNS failure, ConnectTimeoutError for
#: a connect timeout, ProxyConnectionError when the proxy refused. ReadTimeoutError and
#: ConnectionClosedError come after the request was sent: Bedrock may have charged those calls.
#: With SDK retries on, the error is the last attempt's: an earlier attempt may have been sent, which
#: is one more reason to build the client with max_attempts=1 and retry through the pacer.
NEVER_SENT: tuple[type[Exception], ...] = (EndpointConnectionError, ConnectTimeoutError, ProxyConnectionError)
#: The environment variables genai_pacer.quota.ModelQuota.pacer_environment sets.
ENVIRONMENT = ("GENAI_PACER_TPM", "GENAI_PACER_RPM", "GENAI_PACER_BURNDOWN")
#: ... and, for a model with a Reserved tier reservation, its input and output tokens per minute.
RESERVED_ENVIRONMENT = ("GENAI_PACER_RESERVED_INPUT_TPM", "GENAI_PACER_RESERVED_OUTPUT_TPM")
#: ... and, for a bedrock-mantle quota, its input and output tokens per minute (instead of GENAI_PACER_TPM).
MANTLE_ENVIRONMENT = ("GENAI_PACER_INPUT_TPM", "GENAI_PACER_OUTPUT_TPM")

#: Bedrock's two quota models (genai_pacer.planning.QUOTAS_DOC and MANTLE_QUOTAS_DOC, which this
#: runtime cannot import; a test keeps them equal).
RUNTIME, MANTLE = "bedrock-runtime", "bedrock-mantle"
#: Bedrock user guide, "Quotas for the bedrock-mantle endpoint" (English page; its translations say
#: the English one prevails): two per-model, per-Region quotas, "input tokens per minute" and
#: "output tokens per minute", shared by every API the endpoint serves (OpenAI Responses and Chat
#: Completions, Anthropic Messages; not Converse). At admission "the number of input tokens in the
#: request, plus the value of max_tokens (or the model-specific maximum if max_tokens is not set)"
#: is checked against the input quota, and a request that would exceed it is throttled (HTTP 429);
#: output tokens are counted against the output quota as the model streams or generates them.
#: "Cached input tokens read through prompt caching do not count against the input-tokens-per-minute
#: quota"; the page says nothing else of caching, so cache writes, input the request submits, count.
#: It enforces no requests-per-minute quota, lists no daily quota and names no burndown. Readings,
#: not on the page (the emulator's QuotaModel(endpoint="bedrock-mantle") shares them): the max_tokens
#: part is held on the input window until the call completes, then returned; what Bedrock does once
#: the output quota is spent was cut off in the stored copies.
MANTLE_QUOTAS_DOC = "https://docs.aws.amazon.com/bedrock/latest/userguide/quotas-mantle.html"


class AdmissionRejected(RuntimeError):
    """A call that cannot start within its deadline, rejected before it was sent (shed, not failed).

    reservation: the tokens it would hold; earliest_start_seconds: when the ledger could admit it
    (None when unknown); late: True when it waited and the deadline passed (the prediction was
    optimistic), False when it was rejected on arrival.
    """

    def __init__(self, message: str, *, reservation: int, earliest_start_seconds: float | None, late: bool):
        super().__init__(message)
        self.reservation, self.earliest_start_seconds, self.late = reservation, earliest_start_seconds, late


@dataclass(frozen=True)
class PacerStats:
    """Counters since the pacer was created, and the ledger as it stands."""

    admitted: int
    rejected_at_once: int
    rejected_late: int
    throttled: int
    decreases: int
    settled_calls: int
    released: int  # calls that never reached Bedrock (or a caller's release()): their holds were freed
    unaccounted: int  # answers whose usage could not be read: each kept its hold as its charge
    clock_steps_back: int  # times the clock read earlier than before (taken as no time passing)
    ledger_refusals: int  # tries the shared ledger refused (the call waited, or was rejected)
    ledger_fallbacks: int  # calls admitted on fallback_tpm (or reserved on the reservation's fallback part) while a shared ledger could not be used
    ledger_errors: int  # ledger settlements or releases that failed (the hold expires with its window)
    settled_tokens: float
    limit_tpm: float
    held_tokens: float
    in_window: int
    waiting: int
    #: Calls per "requested->served" service tier ("default" for a call or a response naming none).
    tiers: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    served_below_requested: int = 0  # e.g. reserved->default, priority->default
    reserved_overflows: int = 0  # reserved calls the reservation could not hold, sent against the on-demand quota
    reserved_input_held: float = 0.0  # the reservation's input budget held now
    reserved_output_held: float = 0.0  # ... and its output budget
    #: bedrock-mantle (output_tpm): the output window now (max_tokens of each call in flight, the
    #: output of each call settled in the last minute) and the output tokens settled so far.
    output_held: float = 0.0
    settled_output_tokens: float = 0.0


class _Charge:
    """One call's hold on the window: what it holds now, and whether the window still counts it."""

    __slots__ = ("day", "expired", "seq", "started", "tokens")

    def __init__(self, started: float, tokens: float, seq: int, day: int | None = None):
        self.started, self.tokens, self.seq, self.expired = started, tokens, seq, False
        self.day = day  # the UTC day (days since the epoch) its tokens count on, with daily_tokens


class _Waiter:
    __slots__ = ("asked", "output", "tokens")

    def __init__(self, tokens: int, output: int = 0):
        self.tokens = tokens
        self.output = output  # bedrock-mantle: the max_tokens it holds on the output window
        self.asked = False  # whether this call asked the shared ledger itself yet


class _Budget:
    """One minute budget kept client-side: [started, tokens] entries in time order, and what they hold.

    The Reserved tier's two budgets are two of these, and so is bedrock-mantle's output tokens per
    minute; an entry the window already dropped is never counted again."""

    __slots__ = ("entries", "held", "tpm")

    def __init__(self, tpm: float):
        self.tpm = float(tpm)
        self.entries: deque[list[float]] = deque()  # in time order, so they expire from the left
        self.held = 0.0

    def expire(self, horizon: float) -> bool:
        """Forget the entries that started at or before `horizon`; True when any was forgotten."""
        freed = False
        while self.entries and self.entries[0][0] <= horizon:
            self.held -= self.entries.popleft()[1]
            freed = True
        if not self.entries:
            self.held = 0.0  # no float drift left behind by many additions and subtractions
        return freed

    def fits(self, tokens: float, limit: float | None = None) -> bool:
        return self.held + tokens <= (self.tpm if limit is None else limit)

    def add(self, now: float, tokens: float) -> list[float]:
        entry = [now, float(tokens)]
        self.entries.append(entry)
        self.held += tokens
        return entry

    def settle(self, entry: list[float], tokens: float, *, at: float | None = None) -> None:
        """Replace a held entry's tokens. With `at` (no earlier than any entry's time) the hold is
        returned and the tokens counted anew from `at`, as bedrock-mantle counts output when it is
        generated; without it, an entry the window already dropped changes nothing."""
        if any(held is entry for held in self.entries):  # by identity: two calls may hold equal tokens
            self.held += (0.0 if at is not None else tokens) - entry[1]
            entry[1] = 0.0 if at is not None else float(tokens)
        if at is not None and tokens:
            self.add(at, tokens)

    def earliest(self, need: float, limit: float, now: float, lifetime: float) -> float:
        """When `need` more tokens fit under `limit` if nothing held settles lower (entries leave
        `lifetime` after they started); past what the window holds, one window at a time."""
        if need > limit:
            last = self.entries[-1][0] + lifetime if self.entries else now
            return max(now, last) + (math.ceil(need / limit) - 1) * lifetime
        excess, freed = self.held + need - limit, 0.0
        if excess <= 0:
            return now
        for started, tokens in self.entries:
            freed += tokens
            if freed >= excess:
                return started + lifetime
        return self.entries[-1][0] + lifetime if self.entries else now


class _Reservation:
    """A Reserved tier reservation's two minute budgets, kept client-side: input and output tokens."""

    def __init__(self, input_tpm: float, output_tpm: float):
        self.input, self.output = _Budget(input_tpm), _Budget(output_tpm)

    @property
    def input_held(self) -> float:
        return self.input.held

    @property
    def output_held(self) -> float:
        return self.output.held

    def expire(self, horizon: float) -> None:
        self.input.expire(horizon)
        self.output.expire(horizon)

    def take(self, now: float, input_tokens: float, output_tokens: float) -> tuple[list[float], list[float]] | None:
        """Hold a call's tokens when both budgets can, else None (it overflows to the on-demand quota)."""
        if not (self.input.fits(input_tokens) and self.output.fits(output_tokens)):
            return None
        return self.input.add(now, input_tokens), self.output.add(now, output_tokens)

    def settle(self, entry: tuple[list[float], list[float]], input_tokens: float, output_tokens: float) -> None:
        """Replace a held call's tokens with its usage; an entry the window already dropped changes nothing."""
        self.input.settle(entry[0], input_tokens)
        self.output.settle(entry[1], output_tokens)

    def release(self, entry: tuple[list[float], list[float]]) -> None:
        self.settle(entry, 0, 0)


class Ticket:
    """An admitted call's place in the ledger. Settle it with the real usage when the call returns.

    Exactly one of settle(), throttled() or release() ends it; a ticket that is never ended keeps
    its hold until the window forgets it (the safe assumption: Bedrock may have charged it).
    """

    __slots__ = ("_charge", "_output", "_pacer", "done", "hold", "reserved", "text_estimate")

    def __init__(self, pacer: QuotaPacer, charge: _Charge, reserved: int, hold: LedgerHold | None = None,
                 output: list[float] | None = None):
        self._pacer, self._charge, self.reserved = pacer, charge, reserved
        self._output = output  # bedrock-mantle: its entry in the output window
        self.hold = hold  # the shared ledger's hold, when the pacer has a ledger and it was used
        self.done = False
        self.text_estimate: float | None = None  # prompt tokens by characters alone, when the pacer estimated them

    def settle(self, *, input_tokens: int, output_tokens: int, cache_write_tokens: int = 0,
               cache_read_tokens: int = 0) -> float:
        """Record the usage Bedrock reported; returns the settled charge (input + cache writes + output x burndown).

        Usage that is not whole numbers >= 0 (None, negative: a response the SDK parsed without
        counts) cannot be accounted: the hold stays as the charge (returned), stats().unaccounted
        counts it and a warning is logged. It never raises for the usage: the answer is the
        caller's to keep.
        """
        return self._pacer._settle(self, input_tokens, output_tokens, cache_write_tokens, cache_read_tokens)

    def throttled(self) -> None:
        """Bedrock throttled the call: it charged nothing, and someone else is drawing on the quota."""
        self._pacer._throttled(self)

    def release(self) -> None:
        """The call never reached Bedrock (it failed before sending, e.g. one of NEVER_SENT): free its hold."""
        self._pacer._release(self)


class QuotaPacer:
    """Admits calls to one model only when the quota share can hold their reservation.

    tpm: the tokens per minute this process may use of bedrock-runtime's combined quota (its share;
        see genai_pacer.quota.ModelQuota.pacer_environment). input_tpm and output_tpm instead: its
        share of a bedrock-mantle quota's input and output tokens per minute (both; no tpm, rpm,
        burndown, daily_tokens, model_max_tokens or reservation then; see the module docstring). rpm: optional, legacy requests-per-minute share, paced only when
        given (Bedrock's bedrock-runtime quotas are token-based; genai_pacer.planning.RPM_RULE).
    burndown: quota tokens per output token of the model (1, 5, 10, 15). Default: 1.
    max_wait_seconds: how long a call may wait to start before it is rejected; None waits as long
        as it takes (no deadline). Default: None. Each call may pass its own.
    model_max_tokens: what Bedrock reserves for a request without maxTokens (the model's maximum
        output). Default: None, so such a request is refused (set maxTokens: it sizes the reservation).
    hold_output_burndown: hold max_tokens x burndown while a call runs (True), or max_tokens alone,
        the reference notes' reading of the reservation (False). Default: True, the safe reading.
    decrease: the factor the limit is multiplied by after a throttle. Default: 0.7.
    recovery: limit regained per settled token after a throttle (0.1: settling a full share's worth
        restores 10% of it). Default: 0.1.
    min_fraction: the lowest the limit falls, as a fraction of tpm. Default: 0.1.
    window_seconds: the quota window. Default: 60 (Bedrock's minute; smaller against a time-scaled
        emulator). expiry_margin_seconds: how much longer than the window a charge is kept, for the
        time the request takes to reach Bedrock (which starts its clock later). Default: 0.5.
    chars_per_token: for estimating input tokens from text before the call; corrected by the
        settled usage as calls return. Default: 4.
    ledger: a pacer_runtime.ledger.SharedLedger: admit only what the quota's shared ledger also
        holds (see the module docstring). tpm is then this process's local cap (the consumer's
        burst cap, or the whole quota). Default: None (this process alone).
    fallback_tpm: with a ledger, what this process may use on its own while the ledger cannot be
        used: its static share. 0: none (a share the reservation holds completely): its on-demand calls
        wait for the ledger, or are rejected (the module docstring). Default: tpm x 0.1
        (min_fraction's default), never unbounded.
    ledger_retry_seconds: how long the pacer stays on fallback_tpm after a LedgerError before it
        tries the ledger again. Default: 5.
    reserved_input_tpm / reserved_output_tpm: this process's part of the model's Reserved tier
        reservation, in input and output tokens per minute (both or neither; the module docstring
        says how reserved calls are held). Default: none: a call asking for `reserved` is held
        against tpm like any other (the pacer cannot know the reservation's room). With them, tpm
        may be 0: a share with no on-demand room, whose other calls are rejected (module docstring).
    reserved_ledger: a pacer_runtime.ledger.SharedLedger keeping the Reserved tier reservation every
        process shares (quota_tpm: its input, output_quota_tpm: its output tokens per minute; a ledger
        id of its own, e.g. "<model>#reserved"); needs reserved_input_tpm/reserved_output_tpm (this
        process's cap on it). Default: None (the reservation is this process's own part).
    reserved_fallback_input_tpm / reserved_fallback_output_tpm: with reserved_ledger, what this process
        holds of the reservation on its own while reserved_ledger cannot be used (its static part; both
        or neither). Default: a tenth of reserved_input_tpm / reserved_output_tpm, as fallback_tpm's.
    daily_tokens: this process's part of the model's daily token quota ("Model invocation max tokens
        per day", by default the TPM quota x 1,440 for the whole model): every call admitted on a UTC
        day counts its reservation, then its settlement, on that day, and a call the day cannot hold
        waits for 00:00 UTC or is rejected at once when its deadline is sooner. Default: None (no day
        kept in process; with a ledger the shared ledger keeps the model's day). When Bedrock's day
        resets is not documented: UTC days are this pacer's reading. wall_clock: epoch seconds for
        the day. Default: time.time.
    clock: a monotonic clock in seconds. Default: time.monotonic. A reading earlier than the last
        is taken as no time passing (charges keep their age instead of waiting out the step); a
        reading that is not a finite number raises RuntimeError. poll_seconds: the longest a
        waiting call sleeps before it looks at the clock again. Default: 0.25.
    """

    def __init__(
        self,
        tpm: float | None = None,
        *,
        input_tpm: float | None = None,
        output_tpm: float | None = None,
        rpm: float | None = None,
        burndown: float = 1.0,
        max_wait_seconds: float | None = None,
        model_max_tokens: int | None = None,
        hold_output_burndown: bool = True,
        decrease: float = 0.7,
        recovery: float = 0.1,
        min_fraction: float = 0.1,
        window_seconds: float = WINDOW_SECONDS,
        expiry_margin_seconds: float = 0.5,
        chars_per_token: float = 4.0,
        clock: Callable[[], float] = time.monotonic,
        poll_seconds: float = 0.25,
        ledger: SharedLedger | None = None,
        fallback_tpm: float | None = None,
        ledger_retry_seconds: float = 5.0,
        reserved_input_tpm: float | None = None,
        reserved_output_tpm: float | None = None,
        daily_tokens: float | None = None,
        wall_clock: Callable[[], float] = time.time,
        reserved_ledger: SharedLedger | None = None,
        reserved_fallback_input_tpm: float | None = None,
        reserved_fallback_output_tpm: float | None = None,
    ):
        mantle = input_tpm is not None or output_tpm is not None
        # A share the Reserved tier reservation holds completely has no on-demand TPM: tpm=0 is its size.
        reserved_only = (not mantle and _is_number(tpm) and tpm == 0 and reserved_input_tpm is not None
                         and reserved_output_tpm is not None)
        problems = [
            *([] if reserved_only else _positive(
                "tpm", tpm, "the share's tokens per minute, e.g. 300000; 0 only with reserved_input_tpm and "
                "reserved_output_tpm, for a share the Reserved tier reservation holds completely", optional=mantle)),
            *_positive("input_tpm", input_tpm, "the share's bedrock-mantle input tokens per minute", optional=True),
            *_positive("output_tpm", output_tpm, "the share's bedrock-mantle output tokens per minute", optional=True),
            *_positive("rpm", rpm, "the share's requests per minute, or None", optional=True),
            *_bounded("burndown", burndown, 1, 100, "quota tokens per output token: 1, 5, 10 or 15"),
            *_bounded("max_wait_seconds", max_wait_seconds, 0, math.inf, "seconds a call may wait to start, or None",
                      optional=True, infinite=True),
            *_bounded("decrease", decrease, 0, 1, "the factor after a throttle, e.g. 0.7", exclusive=True),
            *_bounded("recovery", recovery, 0, 10, "limit regained per settled token, e.g. 0.1"),
            *_bounded("min_fraction", min_fraction, 0.01, 1, "the lowest limit as a fraction of tpm, e.g. 0.1"),
            *_positive("window_seconds", window_seconds, "the quota window in seconds: 60"),
            *_bounded("expiry_margin_seconds", expiry_margin_seconds, 0, math.inf, "seconds, e.g. 0.5"),
            *_positive("chars_per_token", chars_per_token, "characters per token, e.g. 4"),
            *_positive("poll_seconds", poll_seconds, "seconds, e.g. 0.25"),
            *_bounded("fallback_tpm", fallback_tpm, 0, math.inf, "the share's static per-process TPM; 0 for a share "
                      "with no on-demand TPM", optional=True),
            *_bounded("ledger_retry_seconds", ledger_retry_seconds, 0, 3600, "seconds, e.g. 5"),
            *_positive("reserved_input_tpm", reserved_input_tpm, "the reservation's input tokens per minute, or None",
                       optional=True),
            *_positive("reserved_output_tpm", reserved_output_tpm, "the reservation's output tokens per minute, or None",
                       optional=True),
            *_positive("daily_tokens", daily_tokens, "this process's tokens a day, or None", optional=True),
            *_bounded("reserved_fallback_input_tpm", reserved_fallback_input_tpm, 0, math.inf,
                      "this process's static part of the reservation's input tokens per minute, or None", optional=True),
            *_bounded("reserved_fallback_output_tpm", reserved_fallback_output_tpm, 0, math.inf,
                      "this process's static part of the reservation's output tokens per minute, or None", optional=True),
        ]
        if not callable(wall_clock):
            problems.append(f"wall_clock={wall_clock!r} must be a function returning epoch seconds")
        if mantle:
            problems.extend(_mantle_conflicts(tpm=tpm, input_tpm=input_tpm, output_tpm=output_tpm, rpm=rpm,
                                              burndown=burndown, daily_tokens=daily_tokens,
                                              reserved_input_tpm=reserved_input_tpm, model_max_tokens=model_max_tokens,
                                              ledger=ledger))
        if ledger is not None and not isinstance(ledger, SharedLedger):
            problems.append(f"ledger={ledger!r} must be a pacer_runtime.ledger.SharedLedger or None")
        elif ledger is not None and not mantle and ledger.output_quota_tpm is not None:
            problems.append("ledger: this SharedLedger keeps a bedrock-mantle quota (output_quota_tpm); pace it with "
                            "QuotaPacer(input_tpm=..., output_tpm=...), or give this pacer a bedrock-runtime ledger")
        if reserved_ledger is not None and (not isinstance(reserved_ledger, SharedLedger)
                                            or reserved_ledger.output_quota_tpm is None):
            problems.append(f"reserved_ledger={reserved_ledger!r} must be a SharedLedger keeping the reservation's input "
                            "and output budgets (SharedLedger(..., quota_tpm=<reserved input TPM>, "
                            "output_quota_tpm=<reserved output TPM>))")
        if reserved_ledger is not None and reserved_input_tpm is None:
            problems.append("reserved_ledger without reserved_input_tpm/reserved_output_tpm: those are what this process "
                            "may hold of the shared reservation (its whole size, or less); pass them too")
        if (reserved_fallback_input_tpm is None) != (reserved_fallback_output_tpm is None):
            problems.append("reserved_fallback_input_tpm and reserved_fallback_output_tpm go together (pass both, or "
                            "neither)")
        elif reserved_fallback_input_tpm is not None and reserved_ledger is None:
            problems.append("reserved_fallback_input_tpm/reserved_fallback_output_tpm without reserved_ledger: they are "
                            "what this process holds of the reservation while the shared reservation cannot be used; "
                            "without one, reserved_input_tpm/reserved_output_tpm are this process's part already")
        if (reserved_input_tpm is None) != (reserved_output_tpm is None):
            problems.append("reserved_input_tpm and reserved_output_tpm go together: a Reserved tier reservation has "
                            "both budgets (pass both, or neither)")
        if model_max_tokens is not None and (not _is_int(model_max_tokens) or model_max_tokens < 1):
            problems.append(f"model_max_tokens={model_max_tokens!r} must be a positive integer (the model's maximum output) or None")
        if not isinstance(hold_output_burndown, bool):
            problems.append(f"hold_output_burndown={hold_output_burndown!r} must be True or False")
        if not callable(clock):
            problems.append(f"clock={clock!r} must be a function returning monotonic seconds")
        if problems:
            raise ValueError("QuotaPacer: " + "; ".join(problems))
        #: "bedrock-runtime" (tpm: one combined quota) or "bedrock-mantle" (input_tpm and output_tpm).
        self.endpoint = MANTLE if mantle else RUNTIME
        self.input_tpm = None if input_tpm is None else float(input_tpm)
        self.output_tpm = None if output_tpm is None else float(output_tpm)
        # The window every call is admitted on: the combined quota, or bedrock-mantle's input tokens.
        primary = input_tpm if mantle else tpm
        assert primary is not None
        self.tpm, self.rpm, self.burndown = float(primary), None if rpm is None else float(rpm), float(burndown)
        self._output = None if output_tpm is None else _Budget(output_tpm)
        self._settled_output = 0.0
        self.max_wait_seconds, self.model_max_tokens = max_wait_seconds, model_max_tokens
        self.hold_output_burndown = hold_output_burndown
        self.decrease, self.recovery, self.min_fraction = decrease, recovery, min_fraction
        self.window_seconds, self.expiry_margin_seconds = float(window_seconds), float(expiry_margin_seconds)
        self.chars_per_token, self.poll_seconds, self.clock = float(chars_per_token), float(poll_seconds), clock
        self._cond = threading.Condition()
        self._charges: deque[_Charge] = deque()  # in start order, so they expire from the left
        self._held = 0.0
        self._waiters: deque[_Waiter] = deque()
        self._limit = self.tpm
        self._seq = 0  # admissions so far: orders throttles against decreases
        self._decreased_at_seq = 0
        self._input_ratio = 1.0  # actual / estimated prompt tokens, learned from settlements
        self._counts = {"admitted": 0, "rejected_at_once": 0, "rejected_late": 0, "throttled": 0, "decreases": 0,
                        "settled_calls": 0, "released": 0, "unaccounted": 0, "clock_steps_back": 0}
        self._settled_tokens = 0.0
        self._clock_offset = 0.0  # added to every reading, so the pacer's time never steps back
        self._last_now = -math.inf
        self.ledger = ledger
        self.fallback_tpm = min(float(fallback_tpm), self.tpm) if fallback_tpm is not None else self.tpm * 0.1
        self.ledger_retry_seconds = float(ledger_retry_seconds)
        self._ledger_down_until = -math.inf  # pacer time until which the fallback applies
        self._ledger_retry_at = -math.inf  # pacer time before which the ledger is not asked again
        self._ledger_ready_at: float | None = None  # the ledger's last prediction (pacer time)
        self._ledger_reason = ""
        self._ledger_error = ""  # why the ledger could not be used last (a LedgerError's message)
        self._ledger_busy = False  # a waiter is asking the ledger (with the lock released)
        self._counts.update(ledger_refusals=0, ledger_fallbacks=0, ledger_errors=0)
        self._reservation = (None if reserved_input_tpm is None or reserved_output_tpm is None
                             else _Reservation(reserved_input_tpm, reserved_output_tpm))
        #: The Reserved tier reservation every process shares (a two-budget SharedLedger), or None.
        self.reserved_ledger = reserved_ledger
        #: While reserved_ledger cannot be used: what this process holds of the reservation on its own (its
        #: static part; default a tenth of its cap, as fallback_tpm), input and output tokens per minute.
        self.reserved_fallback_tpm: tuple[float, float] | None = None
        if self._reservation is not None and reserved_ledger is not None:
            fallback_in = (reserved_fallback_input_tpm if reserved_fallback_input_tpm is not None
                           else self._reservation.input.tpm * 0.1)
            fallback_out = (reserved_fallback_output_tpm if reserved_fallback_output_tpm is not None
                            else self._reservation.output.tpm * 0.1)
            self.reserved_fallback_tpm = (min(float(fallback_in), self._reservation.input.tpm),
                                          min(float(fallback_out), self._reservation.output.tpm))
        self._reserved_down_until = -math.inf  # pacer time until which reserved_fallback_tpm applies
        self._tiers: dict[str, int] = {}
        self._tier_counts = {"served_below_requested": 0, "reserved_overflows": 0}
        self.daily_tokens = None if daily_tokens is None else float(daily_tokens)
        self.wall_clock = wall_clock
        self._day, self._day_tokens = -1, 0.0  # the UTC day (days since the epoch) and its tokens so far

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None, **options: Any) -> QuotaPacer:
        """A pacer sized by the variables ModelQuota.pacer_environment sets (GENAI_PACER_TPM, _RPM, _BURNDOWN,
        and _RESERVED_INPUT_TPM and _RESERVED_OUTPUT_TPM for a share of a Reserved tier reservation), or
        GENAI_PACER_INPUT_TPM and _OUTPUT_TPM for a share of a bedrock-mantle quota (then no GENAI_PACER_TPM).

        With the variables QuotaLedger.environment(share) adds (GENAI_PACER_LEDGER_*), the pacer
        also uses the quota's shared ledger: its local cap is then the consumer's burst cap and
        GENAI_PACER_TPM (the static per-process share) becomes fallback_tpm. The reservation's
        variables apply either way; with the ledger's GENAI_PACER_LEDGER_RESERVED_* too, the reservation is
        shared by every process through reserved_ledger (SharedLedger.reservation_from_environment).
        GENAI_PACER_TPM=0 (a reserved share the reservation holds completely) is taken: the pacer starts,
        and its calls the reservation does not hold wait for the ledger or are rejected (module docstring).
        """
        env = os.environ if environ is None else environ
        tpm_name, rpm_name, burndown_name = ENVIRONMENT
        ledger = options.pop("ledger", None)
        if ledger is None and env.get(LEDGER_ENVIRONMENT[0]):
            ledger = SharedLedger.from_environment(env)
        values: dict[str, float | None] = {}
        reserved_input, reserved_output = RESERVED_ENVIRONMENT
        mantle_input, mantle_output = MANTLE_ENVIRONMENT
        mantle = env.get(mantle_input) is not None or env.get(mantle_output) is not None
        for key, name, required in ((tpm_name, "tpm", ledger is None and not mantle), (rpm_name, "rpm", False),
                                    (burndown_name, "burndown", False),
                                    (reserved_input, "reserved_input_tpm", False),
                                    (reserved_output, "reserved_output_tpm", False),
                                    (mantle_input, "input_tpm", False), (mantle_output, "output_tpm", False)):
            text = env.get(key)
            if text is None:
                if required:
                    raise ValueError(f"QuotaPacer.from_environment: {key} is not set; set it to the share's tokens per "
                                     "minute (ModelQuota.pacer_environment(name) gives every variable)")
                continue
            try:
                values[name] = float(text)
            except ValueError:
                raise ValueError(f"QuotaPacer.from_environment: {key}={text!r} is not a number") from None
        reserved_ledger = options.pop("reserved_ledger", None)
        if reserved_ledger is None and ledger is not None:
            reserved_ledger = SharedLedger.reservation_from_environment(env, client=ledger.client)
        if reserved_ledger is not None:  # the reservation every process shares: this process may use all of it
            # its own part (the share's static one) is what it holds while the shared reservation cannot be used
            if values.get("reserved_input_tpm") is not None and values.get("reserved_output_tpm") is not None:
                options.setdefault("reserved_fallback_input_tpm", values["reserved_input_tpm"])
                options.setdefault("reserved_fallback_output_tpm", values["reserved_output_tpm"])
            values["reserved_input_tpm"] = reserved_ledger.quota_tpm
            values["reserved_output_tpm"] = reserved_ledger.output_quota_tpm
            options["reserved_ledger"] = reserved_ledger
        if ledger is not None and ledger.output_quota_tpm is not None:  # a bedrock-mantle share in the ledger
            share = values.pop("input_tpm", None)
            values.pop("output_tpm", None)  # the output fallback follows the input's (output_tpm x fallback / input)
            values["input_tpm"], values["output_tpm"] = ledger.burst_tpm, ledger.output_burst_tpm
            if share is not None:
                values["fallback_tpm"] = share
            return cls(**{**values, "ledger": ledger, **options})
        if ledger is not None:
            share = values.pop("tpm", None)
            values["tpm"] = ledger.burst_tpm
            if share is not None:
                values["fallback_tpm"] = share
            return cls(**{**values, "ledger": ledger, **options})
        return cls(**{**values, **options})

    # --- the arithmetic (mirrors genai_pacer.planning.TokenProfile) ------------------------------

    def reservation(self, input_tokens: int, max_tokens: int, *, cache_write_tokens: int = 0,
                    cache_read_tokens: int = 0) -> int:
        """What a call holds while it runs: its prompt + max_tokens (x burndown when hold_output_burndown).

        On bedrock-mantle, what it holds on the input window: input + cache writes + max_tokens (cache
        reads do not count there, MANTLE_QUOTAS_DOC); it holds max_tokens on the output window too."""
        counts = {"input_tokens": input_tokens, "cache_write_tokens": cache_write_tokens,
                  "cache_read_tokens": cache_read_tokens}
        bad = [f"{name}={value!r}" for name, value in counts.items() if not _is_int(value) or value < 0]
        if not _is_int(max_tokens) or max_tokens < 1:
            bad.append(f"max_tokens={max_tokens!r}")
        if bad:
            raise ValueError(f"QuotaPacer.reservation: {', '.join(bad)}: token counts are whole numbers >= 0 and "
                             "max_tokens >= 1 (a smaller count would shrink the hold below what Bedrock reserves)")
        if self._output is not None:
            return input_tokens + cache_write_tokens + max_tokens
        output = max_tokens * self.burndown if self.hold_output_burndown else max_tokens
        return input_tokens + cache_write_tokens + cache_read_tokens + math.ceil(output)

    def settlement(self, input_tokens: int, output_tokens: int, *, cache_write_tokens: int = 0) -> float:
        """What a call finally costs: input + cache writes + output x burndown (cache reads are free).

        On bedrock-mantle, what it costs the input window: input + cache writes (its output_tokens
        count on the output window, from when the call returned)."""
        if self._output is not None:
            return float(input_tokens + cache_write_tokens)
        return settled_tokens(input_tokens, output_tokens, cache_write_tokens=cache_write_tokens, burndown=self.burndown)

    def estimate_input_tokens(self, request: Mapping[str, Any]) -> int:
        """The prompt tokens of a Converse request, from its text, corrected by the usage settled so far."""
        with self._cond:
            ratio = self._input_ratio
        return math.ceil(_text_chars(request) / self.chars_per_token * ratio)

    # --- admission ------------------------------------------------------------------------------

    def admit(self, reservation: int, *, max_tokens: int | None = None, max_wait_seconds: float | None = None,
              start_by: float | None = None) -> Ticket:
        """Wait until `reservation` tokens fit the share, hold them, and return the call's Ticket.

        The deadline is start_by (a clock() time) or max_wait_seconds from now, else the pacer's
        max_wait_seconds. A call whose predicted start is past it raises AdmissionRejected at once.
        Calls are admitted in arrival order, so a large reservation is not starved by small ones.

        max_tokens: bedrock-mantle only, and required there: the call's max_tokens, held on the
        output window too until the call settles (`reservation`, from reservation(), is what it
        holds on the input window).
        """
        if not _is_int(reservation) or reservation < 1:
            raise ValueError(f"reservation={reservation!r} must be a positive whole number of tokens")
        if self._output is None and max_tokens is not None:
            raise ValueError(f"QuotaPacer.admit: max_tokens={max_tokens!r} is for a bedrock-mantle pacer (input_tpm, "
                             "output_tpm); this one keeps one combined quota, which `reservation` already sizes")
        if self._output is not None:
            if max_tokens is None or not _is_int(max_tokens) or max_tokens < 1:
                raise ValueError(f"QuotaPacer.admit: max_tokens={max_tokens!r}: a bedrock-mantle pacer holds the call's "
                                 "max_tokens (a whole number >= 1) on the output tokens per minute too; pass it")
            if max_tokens > self._output.tpm:
                raise ValueError(
                    f"QuotaPacer: max_tokens={max_tokens:,} exceeds the share's output_tpm={self._output.tpm:,.0f}, so "
                    "the call could never be admitted without spending more output than a minute holds: lower "
                    "max_tokens or give the share more output TPM")
        if self.daily_tokens is not None and reservation > self.daily_tokens:
            raise ValueError(f"QuotaPacer: a reservation of {reservation:,} tokens exceeds daily_tokens="
                             f"{self.daily_tokens:,.0f}, so it can never be admitted: lower maxTokens or raise daily_tokens")
        if self.tpm == 0:  # a share the reservation holds completely: no on-demand room, ever
            with self._cond:
                self._counts["rejected_at_once"] += 1
            raise AdmissionRejected(
                f"QuotaPacer: a call reserving {reservation:,} tokens cannot be admitted: this share has no on-demand "
                "TPM (tpm=0: a share drawn at service_tier='reserved' whose calls the Reserved tier reservation holds "
                "completely), and the reservation did not hold this call (it asks for another tier, or the reservation "
                "is full). It was not sent: send it as serviceTier reserved within the reservation, shed it, or draw "
                "the share with on-demand room (ModelQuota.share with more calls than the reservation holds)",
                reservation=reservation, earliest_start_seconds=None, late=False)
        if reservation > self.tpm:
            raise ValueError(
                f"QuotaPacer: a reservation of {reservation:,} tokens exceeds the share's {self.tpm:,.0f} "
                f"{'input_tpm' if self._output is not None else 'TPM'}, so it "
                "can never be admitted (Bedrock would throttle it every time): lower maxTokens or the prompt, or "
                "give the share more TPM")
        if max_wait_seconds is not None and start_by is not None:
            raise ValueError("pass max_wait_seconds or start_by, not both: one deadline per call")
        problems = _bounded("max_wait_seconds", max_wait_seconds, 0, math.inf, "seconds the call may wait, or None",
                            optional=True, infinite=True)
        if start_by is not None and (not _is_number(start_by) or not math.isfinite(start_by)):
            problems.append(f"start_by={start_by!r} must be a finite clock() time, or None")
        if problems:
            raise ValueError("QuotaPacer.admit: " + "; ".join(problems))
        waiter = _Waiter(reservation, max_tokens or 0)
        with self._cond:
            now = self._now()
            wait = self.max_wait_seconds if max_wait_seconds is None else max_wait_seconds
            # start_by is in the clock's own terms; the offset carries it into the pacer's time
            deadline = start_by + self._clock_offset if start_by is not None else (None if wait is None else now + wait)
            self._waiters.append(waiter)
            waited = False
            try:
                while True:
                    now = self._now()
                    self._expire(now)
                    to_midnight = self._day_wait(reservation)
                    if self._waiters[0] is waiter and self._fits(reservation, output=waiter.output) and not self._ledger_busy and not to_midnight:
                        if self.ledger is None:
                            return self._admit(waiter, now)
                        if now < self._ledger_down_until:  # the ledger cannot be used: the static share
                            # fallback_tpm=0 admits nothing: _fits lets any call into an empty window
                            if self.fallback_tpm > 0 and self._fits(reservation, self.fallback_tpm, output=waiter.output):
                                self._counts["ledger_fallbacks"] += 1
                                return self._admit(waiter, now)
                        elif now >= self._ledger_retry_at or not waiter.asked:
                            # A call at the head asks once whatever the backoff: the last refusal
                            # was an earlier call's, and another process may have freed room since.
                            waiter.asked = True
                            outcome = self._ask_ledger(reservation, waiter.output)
                            now = self._now()
                            if isinstance(outcome, LedgerHold):
                                return self._admit(waiter, now, outcome)
                            if outcome is None:
                                continue  # on the fallback now
                            self._counts["ledger_refusals"] += 1
                            self._ledger_retry_at = now + outcome.retry_in
                            self._ledger_ready_at = None if outcome.ready_in is None else now + outcome.ready_in
                            self._ledger_reason = outcome.reason
                    if deadline is not None:
                        eta = self._earliest_start(waiter, now)
                        if self.ledger is not None and now < self._ledger_down_until:
                            # on the fallback: its static share, or the ledger again once it is retried
                            fallback_limit = min(self.fallback_tpm, self._limit)
                            on_fallback = (self._earliest_start(waiter, now, fallback_limit) if fallback_limit > 0
                                           else math.inf)  # no static share: only the ledger's retry
                            eta = min(on_fallback, max(eta, self._ledger_down_until))
                        if (self.ledger is not None and self._ledger_ready_at is not None and now >= self._ledger_down_until
                                and (waiter.asked or self._waiters[0] is not waiter)):
                            eta = max(eta, self._ledger_ready_at)  # the shared window's own prediction
                        eta = max(eta, now + to_midnight)
                        if eta > deadline:
                            self._counts["rejected_late" if waited else "rejected_at_once"] += 1
                            raise self._rejection(waiter, now, eta, deadline, late=waited, day=bool(to_midnight))
                    wake = self._next_expiry()
                    if to_midnight:
                        wake = min(wake, now + to_midnight)
                    if self.ledger is not None and self._ledger_retry_at > now:
                        wake = min(wake, self._ledger_retry_at)
                    if deadline is not None:
                        wake = min(wake, deadline)
                    self._cond.wait(min(max(wake - now, 0.0), self.poll_seconds))
                    waited = True
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                    self._cond.notify_all()  # the next waiter may be at the head now

    @contextmanager
    def reserve(self, input_tokens: int, max_tokens: int, *, cache_write_tokens: int = 0, cache_read_tokens: int = 0,
                max_wait_seconds: float | None = None, start_by: float | None = None) -> Iterator[Ticket]:
        """Admit one call for the body of a with block; settle the ticket inside it.

        A throttle raised from the block ends the ticket as throttled; an error of NEVER_SENT (the
        request never left the client) releases it; any other error keeps the hold (Bedrock may
        have charged the call) and propagates.
        """
        reserved = self.reservation(input_tokens, max_tokens, cache_write_tokens=cache_write_tokens,
                                    cache_read_tokens=cache_read_tokens)
        ticket = self.admit(reserved, max_tokens=max_tokens if self._output is not None else None,
                            max_wait_seconds=max_wait_seconds, start_by=start_by)
        try:
            yield ticket
        except Exception as error:
            if not ticket.done:
                if is_throttle(error):
                    ticket.throttled()
                elif isinstance(error, NEVER_SENT):
                    ticket.release()
            raise

    def converse(self, client: Any, request: Mapping[str, Any], *, stream: bool = False,
                 max_wait_seconds: float | None = None, start_by: float | None = None) -> ConverseResult:
        """Admit, call Converse (or ConverseStream), settle with the reported usage; errors propagate.

        Raises AdmissionRejected when the call cannot start by its deadline (it is never sent), and
        the throttle itself when Bedrock throttles (retry with call_with_backoff: each attempt is
        admitted again). A bedrock-mantle pacer refuses it: that endpoint does not serve Converse.
        """
        if self._output is not None:
            raise ValueError(
                "QuotaPacer.converse calls bedrock-runtime's Converse, which the bedrock-mantle endpoint does not serve "
                f"(it serves the OpenAI Responses and Chat Completions and Anthropic Messages APIs, {MANTLE_QUOTAS_DOC}): "
                "wrap your call in `with pacer.reserve(input_tokens, max_tokens) as ticket:` and settle the ticket with "
                "its usage")
        max_tokens = (request.get("inferenceConfig") or {}).get("maxTokens")
        if max_tokens is not None and (not _is_int(max_tokens) or max_tokens < 1):
            raise ValueError(f"QuotaPacer.converse: inferenceConfig.maxTokens={max_tokens!r} must be a whole number >= 1 "
                             "(Bedrock refuses anything else, and it sizes the reservation)")
        max_tokens = max_tokens or self.model_max_tokens
        if max_tokens is None:
            raise ValueError(
                "QuotaPacer.converse: the request sets no inferenceConfig.maxTokens, so Bedrock reserves the model's "
                "maximum output: set maxTokens just above the answers' p99 (it sizes the reservation), or give the "
                "pacer model_max_tokens")
        raw = _text_chars(request) / self.chars_per_token
        requested = ((request.get(SERVICE_TIER_MEMBER) or {}).get("type") if isinstance(request, Mapping) else None)
        with self._cond:
            estimate = math.ceil(raw * self._input_ratio)
            entry = None
            if requested == "reserved" and self._reservation is not None:
                now = self._now()
                self._reservation.expire(now - self.window_seconds - self.expiry_margin_seconds)
                entry = self._reservation.take(now, estimate, max_tokens)
                if entry is None:
                    self._tier_counts["reserved_overflows"] += 1
        hold = None
        if entry is not None and self.reserved_ledger is not None:
            asked = self._ask_reserved_ledger(max(estimate, 1), max_tokens)
            hold = asked if isinstance(asked, LedgerHold) else None
            with self._cond:
                # unusable: this process's static part of the reservation, never all of it on its own say-so
                on_fallback = asked is None and self._within_reserved_fallback()
                if on_fallback:
                    self._counts["ledger_fallbacks"] += 1
                elif hold is None:  # the reservation every process shares is full (or unusable past this part)
                    self._reservation.release(entry)  # type: ignore[union-attr]
                    self._tier_counts["reserved_overflows"] += 1
                    entry = None
        if entry is not None:
            return self._converse_reserved(client, request, entry, stream=stream, hold=hold)
        with self.reserve(estimate, max_tokens, max_wait_seconds=max_wait_seconds, start_by=start_by) as ticket:
            ticket.text_estimate = raw  # the settlement then corrects the characters-per-token guess
            result = (converse_stream if stream else converse)(client, request)
            if result.input_tokens == result.cache_write_tokens == result.cache_read_tokens == 0:
                # Every Converse request sends at least one prompt token, so no prompt tokens at all
                # means the usage was not reported (a stream without its metadata event).
                self._keep_hold(ticket, {"prompt_tokens": 0})
            else:
                ticket.settle(input_tokens=result.input_tokens, output_tokens=result.output_tokens,
                              cache_write_tokens=result.cache_write_tokens, cache_read_tokens=result.cache_read_tokens)
            self._record_tiers(requested, result)
            return result

    def _ask_reserved_ledger(self, input_tokens: int, max_tokens: int) -> LedgerHold | LedgerRefusal | None:
        """Hold a reserved call in the reservation every process shares (reserved_ledger): its hold, its
        refusal (full: the call overflows to the on-demand quota), or None while it cannot be used (a
        LedgerError: counted, logged, LedgerFallbacks published, and not asked again for ledger_retry_seconds)."""
        assert self.reserved_ledger is not None
        with self._cond:
            if self._now() < self._reserved_down_until:
                return None
        try:
            return self.reserved_ledger.try_reserve(input_tokens, max_tokens)
        except LedgerError as error:
            with self._cond:
                self._counts["ledger_errors"] += 1
                self._reserved_down_until = self._now() + self.ledger_retry_seconds
            fallback = self.reserved_fallback_tpm or (0.0, 0.0)
            log("WARNING", "QuotaPacer: the shared reservation cannot be used; this process holds its own part of it, "
                "and reserved calls past that part go to the on-demand quota", error=str(error), code=error.code,
                reserved_fallback_input_tpm=fallback[0], reserved_fallback_output_tpm=fallback[1],
                retry_in_seconds=self.ledger_retry_seconds)
            metrics.emit_ledger_fallback(self.reserved_ledger.ledger_id)
            return None

    def _within_reserved_fallback(self) -> bool:
        """The reservation's local budgets (the call's entry included) within this process's own part."""
        reservation, fallback = self._reservation, self.reserved_fallback_tpm
        return (reservation is not None and fallback is not None and reservation.input.held <= fallback[0]
                and reservation.output.held <= fallback[1])

    def _converse_reserved(self, client: Any, request: Mapping[str, Any], entry: tuple[list[float], list[float]], *,
                           stream: bool, hold: LedgerHold | None = None) -> ConverseResult:
        """A call the reservation holds: it never waits for on-demand room. Served at another tier (the
        reservation is shared with other processes, or the estimate was low), its usage moves to the
        on-demand ledger, as Bedrock charges it there. hold: its hold in the shared reservation, ended
        the same way."""
        reservation = self._reservation
        assert reservation is not None
        try:
            result = (converse_stream if stream else converse)(client, request)
        except Exception as error:
            if is_throttle(error) or isinstance(error, NEVER_SENT):
                with self._cond:
                    reservation.release(entry)  # Bedrock charged nothing (or never saw it)
                self._reserved_ledger_end(hold, None)
            raise
        shared = None
        served_reserved = result.served_tier in (None, "reserved")
        self._reserved_ledger_end(hold, (result.input_tokens + result.cache_write_tokens, result.output_tokens)
                                  if served_reserved else None)
        with self._cond:
            if served_reserved:
                reservation.settle(entry, result.input_tokens + result.cache_write_tokens, result.output_tokens)
            else:
                reservation.release(entry)
                self._seq += 1
                charge = _Charge(entry[0][0], self.settlement(result.input_tokens, result.output_tokens,
                                                           cache_write_tokens=result.cache_write_tokens), self._seq)
                self._charges.append(charge)
                self._held += charge.tokens
                if self.ledger is not None and self._now() >= self._ledger_down_until:
                    shared = charge.tokens  # every process's on-demand window: the shared ledger's
            self._record_tiers_locked("reserved", result)
        if shared is not None:
            self._ledger_charge(shared)
        return result

    def _reserved_ledger_end(self, hold: LedgerHold | None, usage: tuple[int, int] | None) -> None:
        """Settle a hold of the shared reservation with (input + cache writes, output), or release it
        (None: Bedrock charged the reservation nothing); a failure is counted and logged."""
        if hold is None or self.reserved_ledger is None:
            return
        try:
            if usage is None:
                self.reserved_ledger.release(hold)
            else:
                self.reserved_ledger.settle(hold, usage[0], usage[1])
        except LedgerError as error:
            with self._cond:
                self._counts["ledger_errors"] += 1
            log("WARNING", "QuotaPacer: the shared reservation did not take a settlement; the hold stays until its "
                "window passes", error=str(error), code=error.code)

    def _ledger_charge(self, tokens: float) -> None:
        """Charge the shared ledger with tokens Bedrock took from the on-demand quota unasked (a reserved
        call served at default), outside the lock; a failure is counted and logged, as a settlement's."""
        assert self.ledger is not None
        try:
            self.ledger.charge(tokens)
        except LedgerError as error:
            with self._cond:
                self._counts["ledger_errors"] += 1
            log("WARNING", "QuotaPacer: the shared ledger did not take a reserved call served at default; only this "
                "process's window counts it", error=str(error), code=error.code, tokens=tokens)

    def _record_tiers(self, requested: str | None, result: Any) -> None:
        with self._cond:
            self._record_tiers_locked(requested, result)

    def _record_tiers_locked(self, requested: str | None, result: Any) -> None:
        asked = requested or "default"
        served = getattr(result, "served_tier", None) or asked  # a response naming no tier: served as asked
        key = f"{asked}->{served}"
        self._tiers[key] = self._tiers.get(key, 0) + 1
        if asked in TIER_RANK and served in TIER_RANK and TIER_RANK[served] < TIER_RANK[asked]:
            self._tier_counts["served_below_requested"] += 1

    # --- reading ---------------------------------------------------------------------------------

    @property
    def limit_tpm(self) -> float:
        """The tokens per minute admitted now: the share, lowered after throttles until it recovers."""
        with self._cond:
            return self._limit

    def stats(self) -> PacerStats:
        with self._cond:
            now = self._now()
            self._expire(now)
            if self._reservation is not None:
                self._reservation.expire(now - self.window_seconds - self.expiry_margin_seconds)
            return PacerStats(
                **self._counts, settled_tokens=self._settled_tokens, limit_tpm=self._limit, held_tokens=self._held,
                in_window=len(self._charges), waiting=len(self._waiters),
                tiers=MappingProxyType(dict(self._tiers)), **self._tier_counts,
                reserved_input_held=self._reservation.input_held if self._reservation else 0.0,
                reserved_output_held=self._reservation.output_held if self._reservation else 0.0,
                output_held=self._output.held if self._output is not None else 0.0,
                settled_output_tokens=self._settled_output,
            )

    # --- internals (called with the lock held unless they take it) ------------------------------

    def _now(self) -> float:
        """The pacer's time: the clock's reading, moved forward by any step back seen so far."""
        reading = self.clock()
        if not _is_number(reading) or not math.isfinite(reading):
            raise RuntimeError(f"QuotaPacer: clock() returned {reading!r}, not a finite number of seconds: pass a "
                               "monotonic clock such as time.monotonic")
        now = reading + self._clock_offset
        if now < self._last_now:
            self._clock_offset += self._last_now - now
            self._counts["clock_steps_back"] += 1
            now = self._last_now
        self._last_now = now
        return now

    def _expire(self, now: float) -> None:
        horizon = now - self.window_seconds - self.expiry_margin_seconds
        freed = False
        while self._charges and self._charges[0].started <= horizon:
            charge = self._charges.popleft()
            charge.expired, freed = True, True
            self._held -= charge.tokens
        if not self._charges:
            self._held = 0.0  # no float drift left behind by many additions and subtractions
        if self._output is not None and self._output.expire(horizon):
            freed = True
        if freed:
            self._cond.notify_all()

    def _fits(self, tokens: int, limit: float | None = None, *, output: int = 0) -> bool:
        if self.rpm is not None and len(self._charges) + 1 > self.rpm:
            return False
        limit = self._limit if limit is None else min(limit, self._limit)
        # An empty window admits any reservation within the share, so a limit lowered below a large
        # reservation cannot stall it forever.
        if self._output is not None and self._output.entries and not self._output.fits(output, self._output_limit(limit)):
            return False
        return not self._charges or self._held + tokens <= limit

    def _output_limit(self, limit: float) -> float:
        """bedrock-mantle's output tokens admitted now: output_tpm, lowered in step with the input limit
        (a throttle does not say which quota it was)."""
        assert self._output is not None
        return self._output.tpm * limit / self.tpm

    def _ask_ledger(self, reservation: int, output: int = 0) -> LedgerHold | LedgerRefusal | None:
        """Ask the shared ledger with the lock released (a DynamoDB round trip); None after a
        LedgerError, with the fallback switched on. Only the head waiter asks (FIFO is kept).
        output: bedrock-mantle's max_tokens, held on the ledger's output window too."""
        assert self.ledger is not None
        self._ledger_busy = True
        self._cond.release()
        try:
            try:
                outcome: LedgerHold | LedgerRefusal | LedgerError = (
                    self.ledger.try_reserve(reservation, output) if output else self.ledger.try_reserve(reservation))
            except LedgerError as error:
                outcome = error
        finally:
            self._cond.acquire()
            self._ledger_busy = False
            self._cond.notify_all()
        if isinstance(outcome, LedgerError):
            self._ledger_down_until = self._now() + self.ledger_retry_seconds
            self._ledger_error = str(outcome)
            log("WARNING", "QuotaPacer: the shared ledger cannot be used; this process falls back to its static share"
                + ("" if self.fallback_tpm > 0 else ", which is none (fallback_tpm=0): its on-demand calls wait for the "
                   "ledger or are rejected"),
                error=str(outcome), code=outcome.code, fallback_tpm=self.fallback_tpm,
                retry_in_seconds=self.ledger_retry_seconds)
            metrics.emit_ledger_fallback(self.ledger.ledger_id)
            return None
        if isinstance(outcome, LedgerHold):
            self._ledger_ready_at = None
        return outcome

    def _ledger_end(self, ticket: Ticket, charge: float | None, output_tokens: int | None = None) -> None:
        """Settle (charge) or return (None) the ticket's hold in the shared ledger, outside the lock.
        A failure is counted and logged: the hold then leaves with its window, as Bedrock's would.
        output_tokens: a bedrock-mantle call's output, counted on the ledger's output window."""
        if ticket.hold is None or self.ledger is None:
            return
        try:
            if charge is None:
                self.ledger.release(ticket.hold)
            elif ticket.hold.output_slot is not None:
                self.ledger.settle(ticket.hold, charge, output_tokens)
            else:
                self.ledger.settle(ticket.hold, charge)
        except LedgerError as error:
            with self._cond:
                self._counts["ledger_errors"] += 1
            log("WARNING", "QuotaPacer: the shared ledger did not take a settlement; the hold stays until its window "
                "passes", error=str(error), code=error.code, held_tokens=ticket.hold.tokens)
            return
        if charge is None or charge < ticket.hold.tokens:
            with self._cond:  # room this process freed: its own waiters may ask the ledger at once
                self._ledger_retry_at = -math.inf
                self._cond.notify_all()

    def _day_wait(self, tokens: int) -> float:
        """0 when the day holds `tokens` more (or no day is kept), else the seconds until 00:00 UTC."""
        if self.daily_tokens is None:
            return 0.0
        wall = self.wall_clock()
        day = math.floor(wall / SECONDS_PER_DAY)
        if day > self._day:  # a new UTC day: the tokens of the last one no longer count
            self._day, self._day_tokens = day, 0.0
        if self._day_tokens + tokens <= self.daily_tokens:
            return 0.0
        return max((day + 1) * SECONDS_PER_DAY - wall, 1e-3)

    def _day_add(self, charge: _Charge, delta: float) -> None:
        if charge.day is not None and charge.day == self._day:
            self._day_tokens += delta

    def _admit(self, waiter: _Waiter, now: float, hold: LedgerHold | None = None) -> Ticket:
        self._waiters.popleft()
        self._seq += 1
        charge = _Charge(now, float(waiter.tokens), self._seq, None if self.daily_tokens is None else self._day)
        self._day_add(charge, waiter.tokens)
        self._charges.append(charge)
        self._held += waiter.tokens
        self._counts["admitted"] += 1
        self._cond.notify_all()
        output = self._output.add(now, waiter.output) if self._output is not None else None
        return Ticket(self, charge, waiter.tokens, hold, output)

    def _next_expiry(self) -> float:
        lifetime = self.window_seconds + self.expiry_margin_seconds
        first = self._charges[0].started + lifetime if self._charges else math.inf
        if self._output is not None and self._output.entries:
            first = min(first, self._output.entries[0][0] + lifetime)
        return first

    def _earliest_start(self, waiter: _Waiter, now: float, limit: float | None = None) -> float:
        """When the ledger could admit `waiter` after every call ahead of it, if nothing settles lower.

        Pessimistic on purpose: calls in flight usually settle below their hold, which frees room
        sooner, but a prediction that is too early makes a caller wait for a rejection. On
        bedrock-mantle the later of the input and the output windows' predictions.
        """
        eta = self._earliest_in_window(waiter, now, limit)
        if self._output is not None:
            ahead = list(self._waiters)[: self._waiters.index(waiter) + 1]
            output_limit = self._output_limit(self._limit if limit is None else limit)
            eta = max(eta, self._output.earliest(sum(w.output for w in ahead), output_limit, now,
                                                 self.window_seconds + self.expiry_margin_seconds))
        return eta

    def _earliest_in_window(self, waiter: _Waiter, now: float, limit: float | None = None) -> float:
        ahead = list(self._waiters)[: self._waiters.index(waiter) + 1]
        need, count = sum(w.tokens for w in ahead), len(ahead)
        lifetime = self.window_seconds + self.expiry_margin_seconds
        limit = self._limit if limit is None else limit
        if need > limit:  # admitted one window at a time, each into an emptier window
            rounds = math.ceil(need / limit) - 1
            last = self._charges[-1].started + lifetime if self._charges else now
            return max(now, last) + rounds * lifetime
        excess_tokens = self._held + need - limit
        excess_calls = 0 if self.rpm is None else len(self._charges) + count - self.rpm
        if excess_tokens <= 0 and excess_calls <= 0:
            return now
        freed_tokens = 0.0
        for freed_calls, charge in enumerate(self._charges, start=1):
            freed_tokens += charge.tokens
            if freed_tokens >= excess_tokens and freed_calls >= excess_calls:
                return charge.started + lifetime
        last = self._charges[-1].started + lifetime if self._charges else now
        return last + (math.ceil(excess_calls / self.rpm) * lifetime if self.rpm and excess_calls > len(self._charges) else 0)

    def _rejection(self, waiter: _Waiter, now: float, eta: float, deadline: float, *, late: bool,
                   day: bool = False) -> AdmissionRejected:
        wait = eta - now
        ahead = self._waiters.index(waiter)
        when = "waited and its deadline passed" if late else f"cannot start within {max(deadline - now, 0):.2f} s"
        message = (
            f"QuotaPacer: a call reserving {waiter.tokens:,} tokens {when}: the window holds {self._held:,.0f} "
            f"of {self._limit:,.0f} tokens per minute (share {self.tpm:,.0f})"
            + (f" and the output window {self._output.held:,.0f} of {self._output_limit(self._limit):,.0f} output "
               f"tokens per minute for its max_tokens={waiter.output:,}" if self._output is not None else "")
            + f" with {ahead} call(s) waiting ahead, so the earliest start is in {wait:.2f} s"
            + (f" (the shared ledger: {self._ledger_reason})" if self.ledger is not None and self._ledger_reason
               and now >= self._ledger_down_until else "")
            + ((f" (the shared ledger cannot be used ({self._ledger_error}) until it is retried in "
                f"{self._ledger_down_until - now:.2f} s, and fallback_tpm=0: this share has no static on-demand TPM to "
                "fall back to, as a share the Reserved tier reservation holds completely)" if self.fallback_tpm == 0 else
                f" (the shared ledger cannot be used ({self._ledger_error}): on fallback_tpm={self.fallback_tpm:,.0f} "
                f"until it is retried in {self._ledger_down_until - now:.2f} s)")
               if self.ledger is not None and now < self._ledger_down_until else "")
            + (f" (the day's tokens are spent: {self._day_tokens:,.0f} of daily_tokens={self.daily_tokens:,.0f}; "
               "the pacer's day ends at 00:00 UTC)" if day else "")
            + ". It was not sent: shed it (a fallback answer, or ask the "
            "caller to retry later), or allow a longer max_wait_seconds"
        )
        return AdmissionRejected(message, reservation=waiter.tokens,
                                 earliest_start_seconds=None if math.isinf(wait) else wait, late=late)

    def _end(self, ticket: Ticket) -> bool:
        if ticket.done:
            return False
        ticket.done = True
        return True

    def _settle(self, ticket: Ticket, input_tokens: int, output_tokens: int, cache_write_tokens: int,
                cache_read_tokens: int) -> float:
        usage = {"input_tokens": input_tokens, "output_tokens": output_tokens,
                 "cache_write_tokens": cache_write_tokens, "cache_read_tokens": cache_read_tokens}
        bad = {name: type(value).__name__ if not _is_number(value) else value
               for name, value in usage.items() if not _is_int(value) or value < 0}
        if bad:
            return self._keep_hold(ticket, bad)
        with self._cond:
            if not self._end(ticket):
                raise RuntimeError("Ticket.settle: this ticket is already settled, throttled or released")
            charge = ticket._charge
            settled = self.settlement(input_tokens, output_tokens, cache_write_tokens=cache_write_tokens)
            self._day_add(charge, settled - charge.tokens)
            if not charge.expired:  # still counted in its window, as Bedrock does
                self._held += settled - charge.tokens
            charge.tokens = settled
            if self._output is not None and ticket._output is not None:
                # Counted as generated: no later than now, so counting it from now keeps it in the
                # window at least as long as Bedrock does; the max_tokens hold is returned.
                self._output.settle(ticket._output, output_tokens, at=self._now())
                self._settled_output += output_tokens
            self._counts["settled_calls"] += 1
            self._settled_tokens += settled
            self._limit = min(self.tpm, self._limit + self.recovery * settled)
            prompt = input_tokens + cache_write_tokens + cache_read_tokens
            if ticket.text_estimate:  # an exponentially weighted mean of real / estimated prompt tokens
                self._input_ratio += 0.2 * (prompt / ticket.text_estimate - self._input_ratio)
            self._cond.notify_all()
        self._ledger_end(ticket, settled, output_tokens)
        return settled

    def _keep_hold(self, ticket: Ticket, problem: Mapping[str, Any]) -> float:
        """End a ticket whose usage cannot be accounted: its hold stays as its charge (it covers what
        Bedrock settles while the pacer holds max_tokens x burndown), counted and logged."""
        with self._cond:
            if not self._end(ticket):
                raise RuntimeError("Ticket.settle: this ticket is already settled, throttled or released")
            self._counts["unaccounted"] += 1
            held = ticket._charge.tokens
        log("WARNING", "QuotaPacer: usage not accounted; the call keeps its hold as its charge",
            usage_problem=dict(problem), held_tokens=held)
        return held

    def _drop(self, ticket: Ticket) -> None:
        charge = ticket._charge
        self._day_add(charge, -charge.tokens)  # Bedrock charged nothing, on the day either
        if not charge.expired:
            self._charges.remove(charge)
            self._held -= charge.tokens
            charge.expired = True
            if not self._charges:
                self._held = 0.0
        if self._output is not None and ticket._output is not None:
            self._output.settle(ticket._output, 0)  # nothing generated
        self._cond.notify_all()

    def _throttled(self, ticket: Ticket) -> None:
        with self._cond:
            if not self._end(ticket):
                raise RuntimeError("Ticket.throttled: this ticket is already settled, throttled or released")
            self._drop(ticket)  # a throttled call is not charged
            self._counts["throttled"] += 1
            # Calls admitted before the last decrease saw the old limit: their throttles are the same news.
            if ticket._charge.seq > self._decreased_at_seq:
                self._limit = max(self._limit * self.decrease, self.tpm * self.min_fraction)
                self._decreased_at_seq = self._seq
                self._counts["decreases"] += 1
        self._ledger_end(ticket, None)  # Bedrock charged nothing

    def _release(self, ticket: Ticket) -> None:
        with self._cond:
            if not self._end(ticket):
                raise RuntimeError("Ticket.release: this ticket is already settled, throttled or released")
            self._drop(ticket)
            self._counts["released"] += 1
        self._ledger_end(ticket, None)


SECONDS_PER_DAY = 86_400


def settled_tokens(input_tokens: int, output_tokens: int, *, cache_write_tokens: int = 0, burndown: float = 1.0) -> float:
    """What Bedrock finally charges a call against the quota: input + cache writes + output x burndown
    (cache reads are free). One formula for the pacer, the shared ledger's consumers and the worker."""
    return input_tokens + cache_write_tokens + output_tokens * burndown


def estimate_input_tokens(request: Mapping[str, Any], *, chars_per_token: float = 4.0) -> int:
    """Prompt tokens of a Converse request estimated from its text (system, messages, tool config)."""
    return math.ceil(_text_chars(request) / chars_per_token)


def _text_chars(request: Mapping[str, Any]) -> int:
    """Characters of text a Converse request sends: every text block (tool results included) and the tool specs."""
    total = 0

    def walk(value: Any) -> None:
        nonlocal total
        if isinstance(value, Mapping):
            for key, item in value.items():
                if key == "text" and isinstance(item, str):
                    total += len(item)
                elif key not in ("image", "document", "video", "cachePoint"):  # binary or markers, not text
                    walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    walk(request.get("system"))
    walk(request.get("messages"))
    if request.get("toolConfig"):
        total += len(json.dumps(request["toolConfig"], default=str))
    return total


def _mantle_conflicts(*, tpm: Any, input_tpm: Any, output_tpm: Any, rpm: Any, burndown: Any, daily_tokens: Any,
                      reserved_input_tpm: Any, model_max_tokens: Any, ledger: Any) -> list[str]:
    """What a bedrock-mantle pacer (input_tpm, output_tpm) cannot take, each naming its argument."""
    problems = []
    if tpm is not None:
        problems.append(f"tpm={tpm!r} with input_tpm/output_tpm: tpm is bedrock-runtime's one combined quota, "
                        f"input_tpm and output_tpm bedrock-mantle's two ({MANTLE_QUOTAS_DOC}); pass one model")
    if (input_tpm is None) != (output_tpm is None):
        given, missing = ("input_tpm", "output_tpm") if output_tpm is None else ("output_tpm", "input_tpm")
        problems.append(f"{given} without {missing}: a bedrock-mantle quota has both an input and an output tokens "
                        "per minute quota (pass both)")
    if rpm is not None:
        problems.append(f"rpm={rpm!r}: bedrock-mantle enforces no requests-per-minute quota; drop it")
    if burndown != 1:
        problems.append(f"burndown={burndown!r}: bedrock-mantle's input and output quotas count tokens 1:1 (its "
                        "page names no burndown); drop it")
    if daily_tokens is not None:
        problems.append(f"daily_tokens={daily_tokens!r}: the daily token quota is bedrock-runtime's; bedrock-mantle "
                        "lists none; drop it")
    if reserved_input_tpm is not None:
        problems.append("reserved_input_tpm/reserved_output_tpm: the pacer holds a Reserved tier call only in "
                        "QuotaPacer.converse (bedrock-runtime's Converse), which a bedrock-mantle pacer does not make; "
                        "drop them")
    if model_max_tokens is not None:
        problems.append(f"model_max_tokens={model_max_tokens!r}: only QuotaPacer.converse reads it, which a "
                        "bedrock-mantle pacer does not make; pass the model's maximum as max_tokens to reserve() or "
                        "admit() for a request that sets none")
    if ledger is not None and getattr(ledger, "output_quota_tpm", None) is None:
        problems.append("ledger: this SharedLedger keeps bedrock-runtime's one combined quota; a bedrock-mantle pacer "
                        "needs one that keeps its output window too (SharedLedger(..., output_quota_tpm=...))")
    return problems


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _positive(name: str, value: Any, fix: str, *, optional: bool = False) -> list[str]:
    if value is None and optional:
        return []
    if not _is_number(value) or not math.isfinite(value) or value <= 0:
        return [f"{name}={value!r} must be a finite number > 0 ({fix})"]
    return []


def _bounded(name: str, value: Any, low: float, high: float, fix: str, *, optional: bool = False,
             infinite: bool = False, exclusive: bool = False) -> list[str]:
    if value is None and optional:
        return []
    ok = _is_number(value) and not math.isnan(value) and (infinite or math.isfinite(value))
    if ok:
        ok = low < value < high if exclusive else low <= value <= high
    if not ok:
        return [f"{name}={value!r} must be a number in {'(' if exclusive else '['}{low:g}, {high:g}{')' if exclusive else ']'} ({fix})"]
    return []
