"""QuotaLedger's sweeper: removes the slots that left the quota's one-minute window, for ledgers that
state machines use (genai_pacer.step_functions.ledger_steps).

A state machine reserves and settles in the shared ledger item with DynamoDB UpdateItem tasks, but it
cannot remove a slot that left the window (JSONPath has no date arithmetic and cannot list an item's
attributes). Process consumers (SharedLedger) remove every consumer's expired slots on the way when
they reserve; a ledger no process writes would keep every hold, and once the holds reach the quota
every reservation would wait and then fail. This function calls the one removal the runtime has,
`SharedLedger.sweep()` (the same pinned, conditional removal a reservation does; a malformed item is
repaired from its valid slots, not trusted).

Why it loops inside each invocation: the finest EventBridge schedule is once a minute (see
QuotaLedger), and a slot leaves the window 62 s after its second started (1 s slot + 60 s window + 1 s
default skew). Swept only once a minute, a slot could count for up to 122 s, and at saturation the
state machines would use as little as about half the quota (a burst admitted just after a sweep is
not yet expired at the next one). So each invocation sweeps every SWEEP_INTERVAL_SECONDS until its
time runs low, and the next scheduled invocation takes over: a slot then counts at most 62 + 5 s,
about 8% longer than Bedrock keeps it. A sweep that finds nothing expired costs one strongly
consistent GetItem; overlapping invocations are harmless (every removal is pinned to the value read).

The Reserved tier reservation: when the quota has one (ModelQuota(reserved_input_tpm=...)), every
reserved share's processes draw on one two-budget item beside the quota's, under its id +
RESERVED_SUFFIX (SharedLedger.reservation_from_environment). Its slots leave the window like the
quota's, and only its consumers' writes removed them: a reservation whose consumers went quiet kept
every expired slot (and its item's size, which each write pays for, per KB) until one of them wrote
again. So each sweep sweeps that item too, with the same removal.

Environment (set by QuotaLedger): the GENAI_PACER_LEDGER_* variables of QuotaLedger.consumer_variables,
under the consumer name SWEEPER_CONSUMER (the sweeper holds nothing; the name is never written), and,
with a reservation, its GENAI_PACER_LEDGER_RESERVED_* (the sweeper's floors there 0).
Result: {"sweeps": <how many>, "tokensRemoved": <tokens of the quota item's slots removed>}, and with a
reservation "reservedTokensRemoved": <tokens of its item's slots removed, input and output>.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from pacer_runtime.ledger import SharedLedger
from pacer_runtime.structured_log import log

#: Seconds between two sweeps within one invocation (see the module docstring).
SWEEP_INTERVAL_SECONDS = 5.0
#: An invocation stops sweeping when less than the interval plus this margin remains: a sweep is a
#: read and a few writes, well under a second, retried with DynamoDB's backoff within the margin.
MARGIN_SECONDS = 5.0
#: The consumer name the sweeper's SharedLedger is built with (it never writes an h# or a slot).
SWEEPER_CONSUMER = "quota-sweeper"

_ledgers: tuple[SharedLedger, SharedLedger | None] | None = None


def handler(event: Any, context: Any, *, environ: Mapping[str, str] | None = None,
            sleep: Callable[[float], None] = time.sleep, **options: Any) -> dict[str, float]:
    """Sweep the quota's item (and the reservation's, when the quota has one) now, then every
    SWEEP_INTERVAL_SECONDS while the invocation has time. environ, sleep and options (SharedLedger's:
    client, clock) are for tests."""
    global _ledgers
    if _ledgers is None or environ is not None or options:
        ledger = SharedLedger.from_environment(environ, **options)
        reservation = SharedLedger.reservation_from_environment(environ, **{"client": ledger.client, **options})
        if environ is None and not options:
            _ledgers = (ledger, reservation)  # one client per execution environment
    else:
        ledger, reservation = _ledgers
    sweeps, removed, reserved_removed = 0, 0.0, 0.0
    while True:
        removed += ledger.sweep()
        if reservation is not None:
            reserved_removed += reservation.sweep()
        sweeps += 1
        if context.get_remaining_time_in_millis() / 1000 < SWEEP_INTERVAL_SECONDS + MARGIN_SECONDS:
            break
        sleep(SWEEP_INTERVAL_SECONDS)
    for swept, tokens in ((ledger, removed), (reservation, reserved_removed)):
        if swept is not None and (tokens or swept.counts["repairs"]):
            log("INFO", "QuotaLedger sweeper: removed the slots that left the window", ledger_id=swept.ledger_id,
                sweeps=sweeps, tokens_removed=tokens, repairs=swept.counts["repairs"])
    result = {"sweeps": sweeps, "tokensRemoved": removed}
    if reservation is not None:
        result["reservedTokensRemoved"] = reserved_removed
    return result
