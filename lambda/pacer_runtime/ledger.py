"""One model quota shared by every process: Bedrock's reserve-then-settle ledger, kept in DynamoDB.

A QuotaPacer keeps Bedrock's ledger for one process; a quota is one pool per account and Region.
SharedLedger keeps that ledger in one DynamoDB item every consumer writes with conditional,
add-and-subtract-only updates, so concurrent processes (Lambda workers, containers, scripts and,
with the item layout below, Step Functions DynamoDB tasks) never hold more than the quota between
them. QuotaPacer(ledger=...) admits a call only once the ledger holds its reservation.

The item (table key "pk" = "quota#<ledger id>", one item per model quota, account and Region)
----------------------------------------------------------------------------------------------
    held                      N  tokens the window holds now, every consumer together
    h#<consumer>              N  the same, one consumer's (its floor and burst cap are checked on it);
                                 absent (0) once its last slot left: removed with it (below)
    s#<start second>#<consumer> N tokens charged by that consumer's calls that started in that UTC
                                 second, named by its time of day, "HH:MM:SS": the day is left out
                                 (it would be 11 of each slot's ~25 bytes, and a write is charged
                                 per KB of the item), and read back as the moment of that time of
                                 day nearest the reader's clock, unambiguous while slots live a
                                 minute and clocks agree within hours. (Names of earlier versions,
                                 "YYYY-MM-DDTHH:MM:SS", are still read.)
    w#<consumer>              S  "<time> <tokens>": when that consumer last had a call waiting
                                 within its floor ("YYYY-MM-DDTHH:MM:SS.mmmZ") and the tokens it
                                 waits for, removed once served: borrowers leave them free while recent
                                 (on bedrock-mantle "<time> <tokens> o<output>": the output window's
                                 too, see "bedrock-mantle"; a priority follows, see "Priorities")
    wanted, wanted_by         S  the time of the latest want write and whose it is: a borrower's
                                 condition pins them, so a want written after the borrower's view
                                 fails the borrow, which is retried on the fresh item
    d#<UTC day>               N  the day's tokens ("YYYY-MM-DD"): every charge of the calls that
                                 started that day, settled or still held, every consumer together
                                 (see "The daily token quota")
    expires_at                N  epoch seconds: DynamoDB's TTL attribute (see "Expiry")

Invariant: held = sum of every s# attribute, and h#c = sum of c's. Every write keeps it, because
every write adds the same delta to a slot, to its consumer's h# and to held (an update expression
can ADD and subtract, never multiply: UpdateExpression in botocore's dynamodb model, SET "add or
subtract", ADD "mathematically added"), and removes a slot only while subtracting exactly the value
its condition pins. A consumer's h# is removed in the write that removes its last slot (it would be
0), pinned to the value seen (h#c = :seen, which its slots' pins already imply but a reservation of
c since would change), so the item holds only the consumers with holds in the window: one update
expression cannot both ADD to and REMOVE one attribute, so the writer's own h# (which its write
ADDs to) is lowered, never removed. A missing h# counts as 0 for every reader and writer (the Step
Functions reservation's condition is attribute_not_exists(h#c) OR h#c <= ceiling).

Why one item with per-second slots, and not per-hold items or per-minute counters: admission must
compare one number with the quota atomically, and a ConditionExpression compares an operand with
an operand, no arithmetic (Expressions.OperatorsAndFunctions.html), so the total must be one
attribute of one item. Charges are kept per start second because Bedrock's window keys a charge by
its request's start (genai-performance notes; testing.quota "sliding"): a slot leaves the window
as one unit, one subtraction for all of its calls, where per-hold items would need a write per
hold to expire it and a transaction to reserve (two items). Per-minute counters need no expiry but
let two full minutes' charges overlap in one sliding minute (twice the quota). One second is also
the finest slot a Step Functions JSONPath state can name (below).

Reserve (before a call: the pacer's reservation, input + max_tokens, x burndown under its safe default)
    UpdateItem ADD held :r, h#c :r, s#<now>#c :r
      IF held <= Q - r AND h#c <= floor_c - r                      (within the consumer's floor)
      or IF held <= Q - r - wanted_tokens AND h#c <= burst_c - r
            AND wanted, wanted_by = as seen                            (borrowing)
    The client multiplies (max_tokens x burndown) and subtracts (Q - r) before it writes: the
    ceilings are values, the condition only compares. A missing attribute counts as 0
    (attribute_not_exists(x) OR x <= :ceiling; ADD on a missing attribute starts from 0, botocore's
    UpdateExpression documentation). Slots the writer sees expired ride along in the same write:
    REMOVE s#..., ADD -value to held and h# (or REMOVE the h# of a consumer left without a slot,
    pinned), each pinned by a clause s#... = :seen, and each ceiling is raised by what it removes
    (the condition reads the item before the update).
Settle (input + cache writes + output x burndown, after it; cache reads are free)
    d = settled - held. Above the hold (d > 0: Bedrock charges more than was held), at once:
    UpdateItem ADD held :d, h#c :d, s#<start>#c :d, IF attribute_exists(slot): a slot that already
    left the window takes nothing, as Bedrock ignores a late settlement. Below it (d < 0, the
    common case: the hold counts max_tokens), the return is deferred (below).
Release (a call Bedrock never saw, or throttled: Bedrock charged nothing)
    The same write with d = -held: the hold comes back at once.
Deferred returns (one write per call at steady state)
    A settlement that returns tokens is kept by the consumer (slot -> tokens) and written with its
    next write: the reservation's UpdateItem adds each carried return to its slot, to h#c, held and
    its slot's day, IF attribute_exists(that slot), and raises its own ceilings by them (the returns
    are this consumer's room too). So a busy consumer's call costs one write, and none after the
    call: settle() returns without a round trip. A return is written at once (one write for all of
    them, flush()) only when it matters: another consumer waits within its floor (a recent w#), or
    this consumer is not waiting itself (no refusal in the last 2 x max_poll_seconds: its next try
    carries them) and the window holds at least defer_below_fill of the quota (default 0.75) or its
    oldest return is settle_delay_seconds old (default 2). Checked whenever this consumer settles
    or is refused; no thread. A late return only holds tokens longer than Bedrock does (the safe
    side): the window is never overdrawn. A return is dropped, never written, once its slot left
    the window (Bedrock ignores a late settlement) or is removed by the same write as expired (the
    removal pins the slot's value); a slot another writer removed meanwhile fails the write's
    attribute_exists, and the retry, on the item that failure returned, leaves it out (until it
    left this clock's window too, and is dropped). A consumer
    that dies carrying returns keeps its whole holds until their slots leave the window, as a dead
    holder does. A write carrying returns is never repeated when its answer is lost: the returns
    are dropped (they may have been applied) and a reservation is tried again without them.
    settle_delay_seconds=0 writes every settlement at once (the protocol before deferral).
Expiry (a holder that dies)
    Nothing to do: its slot leaves the window like every other, slot start + 1 s + window +
    skew_seconds after it began, and the next writer removes it. Readers enforce expiry themselves:
    DynamoDB's TTL "typically deletes expired items within two days of expiration" and "items that
    have expired and not been deleted will still show up in reads" (UpdateTimeToLive, botocore's
    dynamodb model; developer guide howitworks-ttl.html). expires_at (last write + TTL_GRACE_SECONDS)
    only lets TTL drop the item of a quota nobody has used for a day, whose slots all expired.

Shares are floors; unused capacity is borrowed (precisely)
    Q is the allocatable quota (ModelQuota: tpm_quota x (1 - keep_free)); consumer c has a floor
    f_c (its share's TPM; the shares sum to at most Q, ModelQuota checks it at synth) and a burst
    cap b_c >= f_c (default Q). A call of c reserving r is admitted
      - within its floor, when h#c + r <= f_c and held + r <= Q: nothing else is asked;
      - borrowing, when h#c + r <= b_c and held + r <= Q - wanted_tokens, the tokens other
        consumers waited for within their floors in the last want_seconds (their w# wants).
    A call within its floor that finds the window full (others borrowed the room) writes
    w#c = "<now> <its reservation>" (at most once per want_seconds / 2 per process, at once again
    after it was served; c's next admitted reservation removes it). Borrowers then leave that much free, so c gets its floor back as the
    borrowed holds settle (seconds) and leave the window (at most window + 1 s + skew later): a floor
    is guaranteed up to the borrowing done while its owner was idle, never pre-empted (a Bedrock
    charge cannot be taken back). c's next admitted reservation removes its want in the
    same write, so room is kept only while someone waits. A want the borrower has not seen yet
    fails its write: the condition pins "wanted" and "wanted_by", which every want write sets.
    (A first version stopped all borrowing while any owner waited: with one busy consumer and three
    light ones, four processes used 58-62% of the quota in the saturated minutes.)

Priorities (optional: ModelQuota.share(..., priority=...), PRIORITIES lowest first)
    Floors decide who is guaranteed what; priorities decide who waits first for what the consumers
    borrow. A consumer above the lowest priority (interactive) refused for want of room (the window,
    or what is kept for others; not its own burst cap or the day) writes its want whether or not it
    is within its floor: w#c = "<now> <tokens> <priority>" within its floor, "... <priority>
    borrowing" beyond it. A borrowing call of consumer c leaves free the tokens of every recent want
    of a floor owner (as before) and of every recent borrowing want of a higher priority than c's;
    one of the same or a lower priority it does not wait behind. So under contention the interactive
    consumer is served before a batch one borrows the room, and a batch consumer within its floor is
    admitted whatever waits (floors are kept). Any admission removes the consumer's own want, and
    its deferred returns are written at once while someone it gives way to waits. The same want
    write sets PRIORITY_WAITING (until its time + want_seconds), the sign the state machines read
    (they cannot read wants: step_functions.ledger_steps borrows only while it is absent); a write
    that sees no recent want above the lowest priority (the served consumer's own reservation, any
    other consumer's, or a sweep) removes it, pinned to the value it read, so a want written meanwhile
    fails that write and is seen on the retry. A want without a priority is a floor owner's, as
    before: items written by earlier versions parse unchanged (a version that predates priorities
    repairs away the wants that name one, so run one version per quota).

Contention and cost
    A busy consumer's call costs 1 conditional write at steady state (the reservation, carrying the
    returns of the calls settled since: "Deferred returns"); a call whose return matters at once
    (a nearly full window, someone waiting) or a release costs 2; plus 1 for each retry on a stale
    view. A view that says the quota is full is checked with one strongly consistent GetItem (read
    units are cheaper than write units and a partition serves three times as many) before the call
    is refused; a waiting call costs one read per try. Writes never read first: each write returns
    the item (ReturnValues ALL_NEW on success, ReturnValuesOnConditionCheckFailure ALL_OLD on a
    failed condition: "no additional cost ... No read capacity units are consumed", botocore's
    UpdateItem documentation), so the next write starts from a fresh view. A failed condition on a
    view that says the call fits is a conflict (another writer changed a pinned slot): retried at
    once, with fresh data, up to conflict_retries times; a view more than FRESH_VIEW_SECONDS old does
    not pin the expired slots it sees unless it needs their room, and then, when other consumers
    write too, it is read again first (one GetItem), as is a view that old that would leave more
    than STALE_VIEW_FILL of the quota held. So is a view of any age that would remove another
    consumer's slot that left the window after the view was read, or of a consumer that lost a
    removal to another writer in the last window: at saturation every waiting consumer tries again
    when the same slot leaves, and all but the first would pin a slot already removed. A failed
    condition is charged (in the simulation, as DynamoDB is assumed to) as a write of the whole item
    against the partition's 1,000 write units; a read is a quarter of the units per KB, against its
    3,000 read units. A lone writer (no other consumer's slot in its view) never reads first. A view
    that says the quota is full
    is a refusal: the caller waits and tries again after a jittered backoff (poll_seconds doubling
    to max_poll_seconds), or at the earliest slot expiry that makes room if sooner.
    All writes of one quota serialize on one item: DynamoDB serves at most 1,000 write units per
    second per partition (HOT_PARTITION_WRITE_UNITS), and an UpdateItem costs one unit per KB of
    the larger of the item before and after. The item holds one slot per consumer and start second
    in the window (about 18 bytes each with a short consumer name) and one h# per consumer holding
    something (about 9), so 4 consumers x 62 live slots are about 5 KB and sustain about 200 writes
    a second, 200 calls a second at one write a call. Many consumers each start their own slots, so
    the item grows with the calls in the window: about 15 bytes per call a minute.
    Simulated with this code (bench/shared_quota_experiment.py --simulate, 2 seeds; docs/quota.md
    has the table, each step's figures and the figures before): at 1,000 calls a minute and half
    the load, a call costs 1.00-1.02 writes and the item asks 41-50 write units a second. At twice
    the load (the quota saturated) a call costs 1.33 writes at 1,000 consumers and 1.82-1.85 at 100
    (2.54-2.63 and 2.38-2.45 before the reads first and the smaller item): one reservation, the
    light consumers' returns written at once (0.30 and 0.44 a call), at 100 consumers their wants
    (0.37-0.40), and 0.01-0.03 failed writes. The item then asks 376-442 write units a second on
    average at 1,000 consumers (4-5 seconds of 60 over the limit, at the peaks; 1,044-1,148 before)
    and 413-417 at 100 (none over). The write units grow with the square of the calls a minute (the
    writes and the item both grow with them): one item reaches the partition's limit on average at
    about 1,500-1,600 calls a minute saturated; past that the ledger must be sharded, each shard a
    consumer group with its own part of the quota (docs/quota.md, "What sharding would take").

Failures
    Throttling and server errors (THROTTLING_CODES) are retried with full-jitter backoff
    (dynamodb_retries); what can never succeed (a missing table, a denied action, a malformed
    request) raises LedgerError at once. An item whose data does not add up (a value that is not a
    number, held != the sum of its slots) is repaired from its valid slots by one conditional write
    and logged, never trusted; another quota's item in the same table is not touched. The repair
    writes no h# for a consumer without a slot (absent is 0).

Clock skew
    The slot names and expiries come from each writer's clock. A writer never names a slot older
    than the newest slot it sees when its clock is behind that slot by at most ADOPTED_SKEW_FACTOR x
    skew_seconds (its holds then only last longer), and a slot is removed skew_seconds after its
    window ends, so a clock up to skew_seconds ahead of Bedrock's never lets a charge leave early.
    Any skew keeps the invariant (held = the sum of the slots). Limits: a clock further behind than
    ADOPTED_SKEW_FACTOR x skew_seconds names its own (old) second, and the others remove its slots
    early, so that process is counted too briefly; a slot more than FUTURE_SLOT_FACTOR windows ahead
    of a writer's clock is repaired away (it would hold the quota for as long as it is ahead). Lambda
    and EC2 keep their clocks within a millisecond of UTC (Amazon Time Sync Service); a process more
    than seconds off has a broken clock.

The daily token quota
    bedrock-runtime also has a per-model daily token quota, "Model invocation max tokens per day",
    by default the TPM quota x 1,440 (DAILY_QUOTA_DOC). Each reservation adds r to d#<its slot's
    UTC day> in the same write, IF d# <= daily_tokens - r, and each settlement or release adds the
    same delta to it as to the slot: no write more per call. A reservation the day cannot hold is
    refused ("the day's tokens are spent"), with retry_in at the next UTC midnight. When Bedrock's
    day resets is not documented: UTC days are this ledger's reading. A settlement arriving after its
    slot left the window is not counted (the day keeps the reservation, the larger figure as a rule).
    A reservation removes the d# attributes of days before yesterday (unpinned: nothing adds to them
    any more). Step Functions consumers count the day the same way, in the same attribute
    (their slot Pass names d#<the date of EnteredTime>; QuotaLedger.shared_daily_tokens() is their D: the
    allocatable day less what the shares held outside every ledger draw).

bedrock-mantle (SharedLedger(..., output_quota_tpm=...); pacer_runtime.quota_pacer.MANTLE_QUOTAS_DOC)
    That endpoint has two quotas per model, input tokens per minute (input + cache writes +
    max_tokens checked at admission; cache reads do not count) and output tokens per minute
    (counted as generated), and no daily quota. The item keeps the input window as above (quota_tpm,
    floor_tpm, burst_tpm are the input's; no d# is written) and the output window beside it, with the
    same shape and rules:
        oheld                 N  output tokens the output window holds, every consumer together
        oh#<consumer>         N  the same, one consumer's
        o#<start second>#<consumer> N  output tokens of that consumer counted in that second (named as s# is)
    Reserve adds r to the input attributes and m (the call's max_tokens: the most it may generate
    while it runs) to the output ones in the one write, IF both windows and both of the consumer's
    ceilings (output_floor_tpm, output_burst_tpm) hold them; expired slots of both families ride
    along, pinned. A call is within its floor when both of the consumer's holds fit their floors.
    Settle, in one write: ADD the input delta to the hold's slot (IF it exists, as above), take m out of
    the hold's output slot (IF it exists) and ADD the output tokens to this consumer's output slot of
    the current second: output counts from when it was generated, so it leaves the window no earlier
    than Bedrock's count. A settlement whose slots already left still counts its output (it was
    generated); a release takes both holds out. Wants keep both windows: a call refused within its floor
    (by either window) writes w#c = "<now> <r> o<m>" ("<now> <r> o<m> <priority>[ borrowing]" with a
    priority), and a borrowing call is also refused when oheld + m > output quota - the m of the same
    wants its input check keeps (the floor owners' and those of higher priorities), its write's output
    ceiling lowered by as much (pinned by wanted, wanted_by as above). So a share is a floor on the
    output window too: borrowers cannot keep taking the output room its owner waits for. The output part
    is "o" and whole digits (at most 15), nothing else; a want without one keeps no output
    (bedrock-runtime's, and those written before it existed), and one that does not parse is repaired
    away. A version before the output part repairs away the wants that carry one: run one version per
    quota. Invariant: oheld = the sum of the o# slots, oh#c = c's; a malformed output attribute is
    repaired from the valid slots like any other.

Step Functions (genai_pacer.step_functions.ledger_steps)
    A JSONPath DynamoDB task takes part without a Lambda: a slot name from the context object's
    EnteredTime (whole seconds via States.StringSplit) and its day, reserve and settle as UpdateItem
    ADD with the ceilings (the window's, the consumer's and the day's) computed at synth (r includes max_tokens x burndown), the settlement's output x burndown
    as a States.MathAdd chain. A state machine cannot remove expired slots (no date arithmetic): the
    process consumers' writes remove them, the state machines' included, and so does sweep(), which
    QuotaLedger's sweeper function (lambda/quota_sweeper) calls every few seconds.
"""

from __future__ import annotations

import math
import os
import random
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as NotConnected

# The names the constructs write too (QuotaLedger's environment, the Step Functions ledger steps), one file
# for both sides: ENVIRONMENT is what QuotaLedger.environment(share) sets and from_environment reads.
from .ledger_layout import (
    CONSUMER_PREFIX,
    DAY_PREFIX,
    ENVIRONMENT,
    HELD,
    KEY_PREFIX,
    OUTPUT_ENVIRONMENT,
    PARTITION_KEY,
    PRIORITIES,
    PRIORITY_VARIABLE,
    PRIORITY_WAITING,
    RESERVED_ENVIRONMENT,
    RESERVED_SUFFIX,
    SLOT_PREFIX,
    TTL_ATTRIBUTE,
    WANT_PREFIX,
    WANT_SECONDS_VARIABLE,
    WANTED,
    WANTED_BY,
)
from .structured_log import log

__all__ = [
    "ENVIRONMENT",
    "HOT_PARTITION_WRITE_UNITS",
    "LedgerError",
    "LedgerHold",
    "LedgerRefusal",
    "LedgerView",
    "SharedLedger",
]

#: A bedrock-mantle quota's output tokens per minute, kept beside its input window in the same item
#: (see "bedrock-mantle" in the module docstring): the output window's tokens, one consumer's, one slot's.
OUTPUT_HELD = "oheld"
OUTPUT_CONSUMER_PREFIX = "oh#"
OUTPUT_SLOT_PREFIX = "o#"
#: A bedrock-mantle want's output part, after its tokens: "o" and the output tokens it waits for, in whole
#: digits (at most 15: exact in a float); anything else after "o" makes the want malformed (repaired away).
WANT_OUTPUT_MARK = "o"
WANT_OUTPUT_PATTERN = re.compile(r"o([0-9]{1,15})")
DAY_FORMAT = "%Y-%m-%d"
SECONDS_PER_DAY = 86_400
#: "Model invocation max tokens per day for ${model}": "By default, this value is the per-minute
#: quota multiplied by 24 x 60. New AWS accounts might receive reduced quotas." (Quotas for the
#: bedrock-runtime endpoint.)
DAILY_QUOTA_DOC = "https://docs.aws.amazon.com/bedrock/latest/userguide/quotas-runtime.html"
MINUTES_PER_DAY = 24 * 60
#: Slots are whole UTC seconds: the finest start time a JSONPath state can name (see the docstring).
SLOT_SECONDS = 1.0
#: A slot is named by its UTC time of day (see "The item"); read back as the moment nearest the reader's
#: clock, so a name is unambiguous while its slot is within half a day of every clock.
SLOT_FORMAT = "%H:%M:%S"
HALF_DAY_SECONDS = SECONDS_PER_DAY / 2
#: Slots named by their whole UTC second ("YYYY-MM-DDTHH:MM:SS"), as written before the item got smaller
#: (items and state machines of earlier versions), are still read; wants keep this form, in milliseconds.
ISO_SECOND_FORMAT = "%Y-%m-%dT%H:%M:%S"
WINDOW_SECONDS = 60.0
#: How long after its last write the quota item may be dropped by DynamoDB's TTL (a day: every
#: slot in it expired long before).
TTL_GRACE_SECONDS = 86_400
#: "each individual partition is limited to 1,000 write units per second and 3,000 read units per
#: second" (DynamoDB developer guide, warm-throughput-scenarios.html); one item is one partition.
HOT_PARTITION_WRITE_UNITS = 1_000
#: Error codes retried with backoff: the throttling and transient errors botocore's dynamodb model
#: lists for UpdateItem (ProvisionedThroughputExceededException, RequestLimitExceeded,
#: ThrottlingException, InternalServerError, TransactionConflictException,
#: ReplicatedWriteConflictException). Any other code (ResourceNotFoundException,
#: AccessDeniedException, ValidationException...) can never succeed as sent: raised at once.
THROTTLING_CODES = frozenset({
    "ProvisionedThroughputExceededException", "RequestLimitExceeded", "ThrottlingException",
    "InternalServerError", "TransactionConflictException", "ReplicatedWriteConflictException",
})
CONDITION_FAILED = "ConditionalCheckFailedException"
#: DynamoDB's limits on one expression (developer guide, "Constraints in Amazon DynamoDB",
#: Constraints.html#limits-expression-parameters): "The maximum length of any expression string is
#: 4 KB" and "The maximum number of operators or functions allowed in any expression is 300".
MAX_EXPRESSION_BYTES = 4_096
MAX_EXPRESSION_OPERATORS = 300
#: At most this many expired slots are removed per write (each pins its value: "#e = :e" and an AND,
#: 2 operators), the rest by the next write. With the at most 15 operators of the fixed clauses, a
#: condition has at most 15 + 2 x 40 = 95 operators however many consumers the item holds, and
#: stays under 1 KB (names and values are placeholders).
MAX_CLEANUP = 40
#: At most this many deferred returns ride along one write (each an ADD and an attribute_exists clause,
#: 2 operators), the rest with the next: 15 + 2 x 40 + 2 x 40 = 175 operators at most, under 300.
MAX_RETURNS = 40
#: A view older than this (seconds since the write or read that returned it) removes no expired slot
#: when its reservation fits without their room: another writer has likely removed them already, and
#: a removal pins each slot's value, so the write would fail (a conflict: one write more). Measured
#: in the simulation at half load (100 consumers, docs/quota.md): 0.155 conflicts a call without it.
#: A fresh view removes them, as does any write that needs their room.
FRESH_VIEW_SECONDS = 1.0
#: A view older than FRESH_VIEW_SECONDS, when other consumers write too, is read again (a strongly
#: consistent GetItem) before a reservation that needs its expired slots' room (others have likely removed
#: them: the pinned removal would fail) or that leaves more than this share of the quota held (the window
#: may have filled since: the ceiling would fail); see "Contention and cost" for the other reads first.
#: A failed condition is charged as a write of the whole item and counts against the partition's 1,000
#: write units a second; a read costs a quarter as much per KB and counts against its 3,000 read units.
#: Measured in the simulation at 2x load (docs/quota.md): failed writes were 0.57-1.33 of a call's
#: 2.38-2.63 writes before these reads, 0.02-0.03 after.
STALE_VIEW_FILL = 0.75
#: A sweep's writes after the conflicts it retries: MAX_CLEANUP slots each, so 25 writes remove the
#: 1,000 slots of a minute of 16 consumers starting a call every second; more are left to the next sweep.
MAX_EXPIRED_WRITES = 25
CONSUMER_NAME_LIMIT = 80
#: A writer adopts the item's newest slot when its own clock is behind it by at most this many
#: skew_seconds: a lagging clock's holds then start with the others'; a slot further ahead (a clock
#: far in the future) is not followed, so one bad clock cannot make every hold last longer.
ADOPTED_SKEW_FACTOR = 10
#: A slot starting more than this many windows ahead of a writer's clock is not trusted (repaired
#: away): no clock the ledger tolerates is that far ahead, and such a slot would never leave the window.
FUTURE_SLOT_FACTOR = 2


class LedgerError(RuntimeError):
    """The ledger cannot be used: DynamoDB refused in a way no retry fixes, or kept throttling."""

    def __init__(self, message: str, *, code: str | None = None, retryable: bool = False, lost: bool = False):
        super().__init__(message)
        #: lost: the request may have been applied (its answer was lost), so it was not repeated
        self.code, self.retryable, self.lost = code, retryable, lost


@dataclass(frozen=True)
class LedgerHold:
    """A reservation the ledger holds: end it with settle() or release()."""

    tokens: int
    slot: str  # the slot attribute holding it
    started: float  # the ledger clock's time when it was reserved
    borrowed: bool
    output: int = 0  # bedrock-mantle: the max_tokens it holds on the output window
    output_slot: str | None = None  # ... and the output slot holding them


@dataclass(frozen=True)
class LedgerRefusal:
    """The ledger cannot hold the reservation now. retry_in: seconds until it is worth trying again
    (a jittered backoff, or sooner when a slot leaving the window makes room); ready_in: seconds
    until the window could hold it if nothing settles lower (None: unknown, e.g. while a floor owner
    waits); reason: why, in words; within_floor: the call was within its consumer's floor;
    waits_for_room: the window (or what is kept for others) refused it, not the consumer's own burst
    cap or the day: a consumer that outranks others then says it waits (its want)."""

    retry_in: float
    ready_in: float | None
    reason: str
    within_floor: bool
    waits_for_room: bool = True


@dataclass
class LedgerView:
    """The quota item as the last write saw it, parsed. problems: what does not add up (repaired)."""

    held: float = 0.0
    consumers: dict[str, float] = field(default_factory=dict)
    slots: dict[str, tuple[float, str, float]] = field(default_factory=dict)  # name -> (start, consumer, tokens)
    wants: dict[str, tuple[str, float]] = field(default_factory=dict)  # consumer -> (ISO time, tokens it waits for)
    #: bedrock-mantle: consumer -> the output tokens its want waits for on the output window (a want without
    #: an output part, as bedrock-runtime consumers write, is absent here: 0)
    want_output: dict[str, float] = field(default_factory=dict)
    #: consumer -> (its priority's rank, whether it waits to borrow): wants that name a priority ("Priorities")
    want_priority: dict[str, tuple[int, bool]] = field(default_factory=dict)
    priority_waiting: str | None = None  # PRIORITY_WAITING: until when a consumer above the lowest priority waits
    days: dict[str, float] = field(default_factory=dict)  # UTC day "YYYY-MM-DD" -> tokens that day
    output_held: float = 0.0  # bedrock-mantle: the output window's tokens, and as held, consumers, slots are
    output_consumers: dict[str, float] = field(default_factory=dict)
    output_slots: dict[str, tuple[float, str, float]] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, item: Mapping[str, Any] | None, now: float | None = None) -> LedgerView:
        """The item, parsed; a slot's time of day is read as the moment nearest `now` (default: time.time())."""
        now = time.time() if now is None else now
        view = cls(raw=dict(item or {}))
        for name, value in (item or {}).items():
            if name in (PARTITION_KEY, TTL_ATTRIBUTE):
                continue
            if name in (WANTED, WANTED_BY):
                if not (isinstance(value, Mapping) and isinstance(value.get("S"), str)):
                    view.problems.append(f"{name} is not a string: {_shown(value)}")
                continue
            if name == PRIORITY_WAITING:
                if isinstance(value, Mapping) and isinstance(value.get("S"), str):
                    view.priority_waiting = value["S"]
                else:
                    view.problems.append(f"{name} is not a time: {_shown(value)}")
                continue
            if name.startswith(WANT_PREFIX):
                want = _parse_want(value)
                if want is not None:
                    view.wants[name[len(WANT_PREFIX):]] = want[0]
                    if want[1] is not None:
                        view.want_priority[name[len(WANT_PREFIX):]] = want[1]
                    if want[2]:
                        view.want_output[name[len(WANT_PREFIX):]] = want[2]
                else:
                    view.problems.append(f"{name} is not a want ('<time> <tokens>[ o<output>][ <priority>[ borrowing]]'): "
                                         f"{_shown(value)}")
                continue
            number = _number(value)
            if name.startswith(DAY_PREFIX):
                if number is None or not _is_day(name[len(DAY_PREFIX):]):
                    view.problems.append(f"{name} is not a day's tokens (d#YYYY-MM-DD, a number): {_shown(value)}")
                else:
                    view.days[name[len(DAY_PREFIX):]] = number
                continue
            if name in (HELD, OUTPUT_HELD) or name.startswith((CONSUMER_PREFIX, OUTPUT_CONSUMER_PREFIX)):
                if number is None:
                    view.problems.append(f"{name} is not a finite number: {_shown(value)}")
                elif name == HELD:
                    view.held = number
                elif name == OUTPUT_HELD:
                    view.output_held = number
                elif name.startswith(CONSUMER_PREFIX):
                    view.consumers[name[len(CONSUMER_PREFIX):]] = number
                else:
                    view.output_consumers[name[len(OUTPUT_CONSUMER_PREFIX):]] = number
            elif name.startswith((SLOT_PREFIX, OUTPUT_SLOT_PREFIX)):
                output = name.startswith(OUTPUT_SLOT_PREFIX)
                start, consumer = _parse_slot(name, now, OUTPUT_SLOT_PREFIX if output else SLOT_PREFIX)
                if number is None or start is None or consumer is None or number < 0:
                    view.problems.append(f"{name} is not a slot of a finite number of tokens >= 0: {_shown(value)}")
                else:
                    (view.output_slots if output else view.slots)[name] = (start, consumer, number)
            else:
                view.problems.append(f"{name} is not an attribute of the ledger")
        for held, consumers, slots, prefix, label in (
                (view.held, view.consumers, view.slots, CONSUMER_PREFIX, HELD),
                (view.output_held, view.output_consumers, view.output_slots, OUTPUT_CONSUMER_PREFIX, OUTPUT_HELD)):
            total = sum(tokens for _, _, tokens in slots.values())
            if not view.problems and abs(held - total) > 0.5:
                view.problems.append(f"{label}={held:g} differs from its slots' sum {total:g}")
            owned: dict[str, float] = {}  # one pass: an item of C consumers and S slots is parsed in O(C + S)
            for _, c, t in slots.values():
                owned[c] = owned.get(c, 0.0) + t
            for consumer in set(consumers) | set(owned):
                own = owned.get(consumer, 0.0)
                if not view.problems and abs(consumers.get(consumer, 0.0) - own) > 0.5:
                    view.problems.append(f"{prefix}{consumer}={consumers.get(consumer, 0.0):g} differs from its slots' "
                                         f"sum {own:g}")
        return view

    def newest_start(self) -> float:
        return max((start for start, _, _ in self.slots.values()), default=-math.inf)


class SharedLedger:
    """The shared ledger of one model quota, used by one consumer (every process of a share).

    table_name: the DynamoDB table (genai_pacer.quota.QuotaLedger creates it). ledger_id: the quota
        item's id (the table may hold several quotas). consumer: this consumer's name (its share's).
    quota_tpm: Q, the allocatable quota every consumer shares. floor_tpm: the consumer's guaranteed
        floor (its share). Default: 0 (it only borrows). burst_tpm: the most the consumer may hold
        at once, borrowing included. Default: quota_tpm.
    daily_tokens: the model's daily token quota the consumers share ("Model invocation max tokens
        per day"). Default: None, quota_tpm x 1,440 (the AWS default is the TPM quota x 1,440; Q is
        the allocatable part of it, so the default stays inside it).
    skew_seconds: the clock skew between consumers it tolerates (slots are kept that much longer
        than the window). Default: 1.0. want_seconds: how long a floor owner's waiting call stops
        others from borrowing. Default: 5.0 (QuotaLedger.environment sets 12 s with its default skew, so a
        state machine's want lasts between its tries). window_seconds: the quota window. Default: 60.
    client: a boto3 DynamoDB client, built with retries={"total_max_attempts": 1} (the ledger retries
        itself, and never repeats a settlement whose answer was lost). Default: such a client for the
        environment's Region. clock: epoch seconds shared
        by every consumer. Default: time.time. sleep and rng: injected for tests.
    conflict_retries: immediate retries of a write that lost to another on a pinned slot. Default: 4.
    dynamodb_retries: retries of a throttled or failing DynamoDB call, with full-jitter backoff
        from backoff_seconds up to max_backoff_seconds, before LedgerError. Default: 5, 0.05 s, 2 s.
    poll_seconds, max_poll_seconds: the wait before trying again after a refusal, doubling on each
        refusal in a row up to the maximum, jittered. Default: 0.25, 2.0.
    settle_delay_seconds, defer_below_fill: how long a settlement's return may wait for this
        consumer's next write, and the share of the quota the window may hold while it waits (see
        "Deferred returns"). Default: 2.0, 0.75. settle_delay_seconds=0 writes every settlement at once.
    """

    def __init__(
        self,
        table_name: str,
        *,
        ledger_id: str,
        consumer: str,
        quota_tpm: float,
        floor_tpm: float = 0.0,
        burst_tpm: float | None = None,
        daily_tokens: float | None = None,
        skew_seconds: float = 1.0,
        want_seconds: float = 5.0,
        window_seconds: float = WINDOW_SECONDS,
        client: Any = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        conflict_retries: int = 4,
        dynamodb_retries: int = 5,
        backoff_seconds: float = 0.05,
        max_backoff_seconds: float = 2.0,
        poll_seconds: float = 0.25,
        max_poll_seconds: float = 2.0,
        priority: str = PRIORITIES[0],
        settle_delay_seconds: float = 2.0,
        defer_below_fill: float = 0.75,
        output_quota_tpm: float | None = None,
        output_floor_tpm: float = 0.0,
        output_burst_tpm: float | None = None,
    ):
        mantle = output_quota_tpm is not None
        burst = quota_tpm if burst_tpm is None else burst_tpm
        daily: Any = quota_tpm * MINUTES_PER_DAY if daily_tokens is None and _finite(quota_tpm) else daily_tokens
        problems = []
        if mantle:
            output_burst: Any = output_quota_tpm if output_burst_tpm is None else output_burst_tpm
            checked: tuple[tuple[str, Any, float], ...] = (
                ("output_quota_tpm", output_quota_tpm, 1), ("output_floor_tpm", output_floor_tpm, 0),
                ("output_burst_tpm", output_burst, 1))
            for label, amount, least in checked:
                if not _finite(amount) or amount < least:
                    problems.append(f"{label}={amount!r} must be a finite number >= {least:g}")
            if not problems and not output_floor_tpm <= output_burst <= output_quota_tpm:
                problems.append(f"output_floor_tpm={output_floor_tpm:g} <= output_burst_tpm={output_burst:g} <= "
                                f"output_quota_tpm={output_quota_tpm:g} must hold: a floor is a share of the quota")
            if daily_tokens is not None:
                problems.append(f"daily_tokens={daily_tokens!r} with output_quota_tpm: the daily token quota is "
                                "bedrock-runtime's; a bedrock-mantle quota has none (drop it)")
            daily = 1  # not kept: no day on bedrock-mantle
        elif output_floor_tpm != 0.0 or output_burst_tpm is not None:
            problems.append("output_floor_tpm/output_burst_tpm without output_quota_tpm: they are a bedrock-mantle "
                            "consumer's output floor and cap (pass output_quota_tpm too, or drop them)")
        for label, text in (("table_name", table_name), ("ledger_id", ledger_id), ("consumer", consumer)):
            if not isinstance(text, str) or not text.strip():
                problems.append(f"{label}={text!r} must be a non-empty string")
        if isinstance(consumer, str) and ("#" in consumer or len(consumer) > CONSUMER_NAME_LIMIT):
            problems.append(f"consumer={consumer!r} must have at most {CONSUMER_NAME_LIMIT} characters and no '#' "
                            "(it is part of the ledger's attribute names)")
        for name, value, low in (("quota_tpm", quota_tpm, 1), ("floor_tpm", floor_tpm, 0), ("burst_tpm", burst, 1),
                                 ("daily_tokens", daily, 1),
                                 ("skew_seconds", skew_seconds, 0), ("want_seconds", want_seconds, 0),
                                 ("window_seconds", window_seconds, 1e-3), ("backoff_seconds", backoff_seconds, 0),
                                 ("max_backoff_seconds", max_backoff_seconds, 0), ("poll_seconds", poll_seconds, 1e-3),
                                 ("max_poll_seconds", max_poll_seconds, 1e-3),
                                 ("settle_delay_seconds", settle_delay_seconds, 0), ("defer_below_fill", defer_below_fill, 0)):
            if not _finite(value) or value < low:
                problems.append(f"{name}={value!r} must be a finite number >= {low:g}")
        for label, count in (("conflict_retries", conflict_retries), ("dynamodb_retries", dynamodb_retries)):
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                problems.append(f"{label}={count!r} must be a whole number >= 0")
        if not problems:
            if floor_tpm > quota_tpm:
                problems.append(f"floor_tpm={floor_tpm:g} exceeds quota_tpm={quota_tpm:g}: a floor is a share of the quota")
            if burst < floor_tpm or burst > quota_tpm:
                problems.append(f"burst_tpm={burst:g} must be between floor_tpm={floor_tpm:g} and quota_tpm={quota_tpm:g}")
        if _finite(defer_below_fill) and defer_below_fill > 1:
            problems.append(f"defer_below_fill={defer_below_fill!r} must be a fraction of the quota between 0 and 1")
        if not callable(clock) or not callable(sleep):
            problems.append("clock and sleep must be functions")
        if priority not in PRIORITIES:
            problems.append(f"priority={priority!r} must be one of {', '.join(repr(p) for p in PRIORITIES)} (who waits "
                            "first for what the consumers borrow)")
        if problems:
            raise ValueError("SharedLedger: " + "; ".join(problems))
        self.table_name, self.ledger_id, self.consumer = table_name, ledger_id, consumer
        self.quota_tpm, self.floor_tpm, self.burst_tpm = float(quota_tpm), float(floor_tpm), float(burst)
        #: bedrock-mantle: the output window's quota, this consumer's floor and cap on it (quota_tpm and the
        #: rest are then the input window's); None on bedrock-runtime.
        self.output_quota_tpm = None if output_quota_tpm is None else float(output_quota_tpm)
        self.output_floor_tpm = float(output_floor_tpm)
        self.output_burst_tpm = None if output_quota_tpm is None else float(output_burst)
        self.keeps_day = not mantle  # bedrock-runtime's daily token quota; bedrock-mantle lists none
        self.daily_tokens = math.inf if mantle else float(daily)
        self.skew_seconds, self.want_seconds, self.window_seconds = float(skew_seconds), float(want_seconds), float(window_seconds)
        self.priority, self.rank = priority, PRIORITIES.index(priority)
        self.clock, self.sleep, self.rng = clock, sleep, rng or random.Random()
        self.conflict_retries, self.dynamodb_retries = conflict_retries, dynamodb_retries
        self.backoff_seconds, self.max_backoff_seconds = float(backoff_seconds), float(max_backoff_seconds)
        self.poll_seconds, self.max_poll_seconds = float(poll_seconds), float(max_poll_seconds)
        self.settle_delay_seconds, self.defer_below_fill = float(settle_delay_seconds), float(defer_below_fill)
        if client is None:
            import boto3
            from botocore.config import Config

            # The SDK's own retries would repeat a write whose answer was lost (see _call): off.
            client = boto3.client("dynamodb", config=Config(retries={"total_max_attempts": 1}))
        self.client = client
        self.key = {PARTITION_KEY: {"S": KEY_PREFIX + ledger_id}}
        self._lock = threading.Lock()
        self._view = LedgerView()
        self._seen = False  # whether this process has read or written the item yet
        self._view_at = -math.inf  # the clock when the view was returned
        self._refusals = 0  # refusals in a row: the poll backoff's exponent
        self._want_written = -math.inf
        self._lost_removal_at = -math.inf  # when a reservation's removal of expired slots last lost to another writer
        self._refused_at = -math.inf  # when a reservation was last refused (its caller is waiting), None once admitted
        #: Deferred returns: slot -> [tokens to add (negative), when the first was deferred]; see "Deferred returns".
        self._returns: dict[str, list[float]] = {}
        self.counts = {"reads": 0, "writes": 0, "conflicts": 0, "refusals": 0, "throttled": 0, "repairs": 0, "reserved": 0,
                       "borrowed": 0, "settled": 0, "released": 0, "late": 0, "wants": 0, "swept": 0,
                       "day_refusals": 0, "deferred": 0, "carried": 0, "flushes": 0, "charged": 0}

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None, **options: Any) -> SharedLedger:
        """A ledger configured by the variables QuotaLedger.environment(share) sets (ENVIRONMENT), the
        day every consumer shares (ledger_layout.DAILY_TOKENS_VARIABLE, QuotaLedger.daily_tokens) and
        how long a want is kept (WANT_SECONDS_VARIABLE) included; a variable not set takes the
        parameter's default. `options` override them."""
        env = os.environ if environ is None else environ
        table, ledger_id, consumer, quota, floor, burst, skew, daily = ENVIRONMENT
        missing = [name for name in (table, ledger_id, consumer, quota) if not env.get(name)]
        if missing:
            raise ValueError(f"SharedLedger.from_environment: {', '.join(missing)} not set; QuotaLedger.environment(share) "
                             "gives every variable")
        numbers: dict[str, float] = {}
        output_quota, output_floor, output_burst = OUTPUT_ENVIRONMENT
        for key, name in ((quota, "quota_tpm"), (floor, "floor_tpm"), (burst, "burst_tpm"), (skew, "skew_seconds"),
                          (daily, "daily_tokens"), (WANT_SECONDS_VARIABLE, "want_seconds"),
                          (output_quota, "output_quota_tpm"),
                          (output_floor, "output_floor_tpm"), (output_burst, "output_burst_tpm")):
            text = env.get(key)
            if text:
                try:
                    numbers[name] = float(text)
                except ValueError:
                    raise ValueError(f"SharedLedger.from_environment: {key}={text!r} is not a number") from None
        chosen: dict[str, Any] = {"priority": env[PRIORITY_VARIABLE]} if env.get(PRIORITY_VARIABLE) else {}
        return cls(env[table], ledger_id=env[ledger_id], consumer=env[consumer], **{**numbers, **chosen, **options})

    @classmethod
    def reservation_from_environment(cls, environ: Mapping[str, str] | None = None,
                                     **options: Any) -> SharedLedger | None:
        """The Reserved tier reservation every reserved share draws on, as QuotaLedger.environment(share)
        sets it for a share drawn at service_tier="reserved" (RESERVED_ENVIRONMENT): a two-budget item
        (quota_tpm the reservation's input, output_quota_tpm its output tokens per minute; the share's
        part of each its floors) under the quota's id + RESERVED_SUFFIX. None when not set."""
        env = os.environ if environ is None else environ
        if not env.get(RESERVED_ENVIRONMENT[0]):
            return None
        table, ledger_id, consumer, _, _, _, skew, _ = ENVIRONMENT
        numbers: dict[str, float] = {}
        for key, name in zip(RESERVED_ENVIRONMENT, ("quota_tpm", "output_quota_tpm", "floor_tpm", "output_floor_tpm"),
                             strict=True):
            text = env.get(key)
            try:
                numbers[name] = float(text) if text is not None else math.nan
            except ValueError:
                numbers[name] = math.nan
            if not math.isfinite(numbers[name]):
                raise ValueError(f"SharedLedger.reservation_from_environment: {key}={text!r} is not a number; "
                                 "QuotaLedger.environment(share) gives every variable")
        if env.get(skew):
            numbers["skew_seconds"] = float(env[skew])
        missing = [name for name in (table, ledger_id, consumer) if not env.get(name)]
        if missing:
            raise ValueError(f"SharedLedger.reservation_from_environment: {', '.join(missing)} not set; "
                             "QuotaLedger.environment(share) gives every variable")
        return cls(env[table], ledger_id=env[ledger_id] + RESERVED_SUFFIX, consumer=env[consumer],
                   **{**numbers, **options})

    # --- the protocol ----------------------------------------------------------------------------

    def try_reserve(self, tokens: int, output_tokens: int | None = None) -> LedgerHold | LedgerRefusal:
        """Hold `tokens` in the shared window now, or say why not and when to try again (never waits
        for room; retries only a write that lost a race, and DynamoDB's throttles).

        output_tokens: bedrock-mantle only, and required there: the call's max_tokens, held on the
        output window in the same write (`tokens` is then input + cache writes + max_tokens)."""
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
            raise ValueError(f"SharedLedger.try_reserve: tokens={tokens!r} must be a whole number >= 1")
        if self.output_quota_tpm is None and output_tokens is not None:
            raise ValueError(f"SharedLedger.try_reserve: output_tokens={output_tokens!r} is for a bedrock-mantle ledger "
                             "(output_quota_tpm); this one keeps one combined quota")
        if self.output_quota_tpm is not None:
            if not isinstance(output_tokens, int) or isinstance(output_tokens, bool) or output_tokens < 1:
                raise ValueError(f"SharedLedger.try_reserve: output_tokens={output_tokens!r}: a bedrock-mantle ledger "
                                 "holds the call's max_tokens (a whole number >= 1) on its output window; pass it")
            if output_tokens > cast(float, self.output_burst_tpm):
                raise ValueError(f"SharedLedger: max_tokens={output_tokens:,} exceeds the consumer's output burst cap "
                                 f"of {self.output_burst_tpm:,.0f}, so it can never be held: lower maxTokens")
        if tokens > min(self.burst_tpm, self.daily_tokens):
            if tokens > self.daily_tokens:
                raise ValueError(f"SharedLedger: a reservation of {tokens:,} tokens exceeds the daily token quota of "
                                 f"{self.daily_tokens:,.0f}, so it can never be held: lower maxTokens or raise daily_tokens")
            raise ValueError(f"SharedLedger: a reservation of {tokens:,} tokens exceeds the consumer's burst cap of "
                             f"{self.burst_tpm:,.0f} TPM, so it can never be held: lower maxTokens or raise the cap")
        refreshed = False
        if not self._seen:  # a process's first use reads the item once: its slots tell a lagging clock
            self.view(refresh=True)
            refreshed = True
        for _ in range(self.conflict_retries + 2):
            now, view = self._trusted_view()
            if view is None:  # repaired: try again on the item the repair returned
                continue
            # This consumer's deferred returns ride along (see "Deferred returns"): taken out while the
            # write is in flight (another thread's write cannot carry them too), put back if it fails.
            carried = self._carried(view, now)
            decision = self._decide(view, tokens, now, carried, output_tokens or 0)
            with self._lock:
                stale = now - self._view_at > FRESH_VIEW_SECONDS
            if stale and not isinstance(decision, LedgerRefusal) and "#e0" in decision[1]:
                # a stale view removes no expired slot when the reservation fits without their room
                lean = self._decide(view, tokens, now, carried, output_tokens or 0, cleanup=False)
                if not isinstance(lean, LedgerRefusal) and lean[0] == decision[0]:
                    decision = lean
            removes = not isinstance(decision, LedgerRefusal) and ("#e0" in decision[1] or "#f0" in decision[1])
            with self._lock:
                viewed_at, lost = self._view_at, now - self._lost_removal_at <= self.window_seconds
            if not refreshed and removes and not stale and not lost:
                contested = self._contested_removal(view, decision[1], viewed_at)
            else:
                contested = False
            if not refreshed and not isinstance(decision, LedgerRefusal) and (
                    (removes and (contested or (lost and now > viewed_at)))
                    or (stale and (removes or view.held + tokens > STALE_VIEW_FILL * self.quota_tpm)
                        and any(c != self.consumer for _, c, _ in view.slots.values()))):
                # A view that needs its expired slots' room is read again first when another consumer's
                # slot it would remove left the window after the view was read (every consumer waiting
                # for that room tries again then), when this consumer lately lost such a removal to
                # another writer, or when it is stale and others write too: the pinned removal would
                # fail. A stale view that leaves the window nearly full too, when others write (its
                # ceiling may have been reached since): see STALE_VIEW_FILL. A lone writer never reads first.
                self._restore(carried)
                self.view(refresh=True)
                refreshed = True
                continue
            if isinstance(decision, LedgerRefusal):
                self._restore(carried)
                if not refreshed:  # a refusal is decided on a fresh read (cheaper than a failing write)
                    self.view(refresh=True)
                    refreshed = True
                    continue
                self._refused(decision, tokens, now, output_tokens or 0)
                if self._returns_matter(now):  # someone waits within its floor: what this consumer returns is theirs
                    self.flush()
                return decision
            borrowed, names, values, condition, update, slot, output_slot = decision
            try:  # a write carrying returns is never repeated: applied twice, it would return tokens twice
                outcome = self._write(update, condition, names, values, repeatable=not carried)
            except LedgerError as error:
                if not (error.lost and carried):
                    self._restore(carried)
                    raise
                self.counts["late"] += len(carried)  # applied or not, never again; the reservation is tried anew
                continue
            if outcome is None:  # the condition failed: the view was stale; the error carried the fresh item
                self._restore(carried)
                self.counts["conflicts"] += 1
                if "#e0" in names or "#f0" in names:
                    with self._lock:
                        self._lost_removal_at = now  # others remove what it sees expired: read before removing
                continue
            self.counts["carried"] += len(carried)
            self.counts["reserved"] += 1
            self.counts["borrowed"] += borrowed
            with self._lock:
                self._refusals = 0
                self._refused_at = -math.inf
                self._want_written = -math.inf  # served: the next wait says so at once
            return LedgerHold(tokens, slot, now, borrowed, output_tokens or 0, output_slot)
        refusal = LedgerRefusal(self._poll_delay(), None, "the item kept changing under this write "
                                f"({self.conflict_retries + 1} tries); trying again", within_floor=False,
                                waits_for_room=False)
        self.counts["refusals"] += 1
        return refusal

    def settle(self, hold: LedgerHold, charge: float, output_tokens: int | None = None) -> None:
        """Turn a hold into its real charge (input + cache writes + output x burndown); a hold whose
        slot already left the window is not charged again (Bedrock ignores a late settlement).

        A charge above the hold is written at once. A charge below it returns tokens: the return is
        deferred (see "Deferred returns" in the module docstring) and rides along this consumer's next
        write, unless it matters now: another consumer waits within its floor, or this consumer is not
        waiting itself and the window holds defer_below_fill of the quota or the oldest deferred return
        is settle_delay_seconds old; then every deferred return is written at once (one write).

        output_tokens: a bedrock-mantle hold's output (required there; `charge` is then input + cache
        writes): settled at once in one write (no deferral), its max_tokens leave the output window and
        its output is counted from now, as that endpoint counts output when it is generated, even when
        the hold's slots already left."""
        if not _finite(charge) or charge < 0:
            raise ValueError(f"SharedLedger.settle: charge={charge!r} must be a finite number >= 0")
        if hold.output_slot is not None:
            if not isinstance(output_tokens, int) or isinstance(output_tokens, bool) or output_tokens < 0:
                raise ValueError(f"SharedLedger.settle: output_tokens={output_tokens!r}: a bedrock-mantle hold settles "
                                 "with the call's output tokens (a whole number >= 0)")
            self._adjust_mantle(hold, math.ceil(charge) - hold.tokens, output_tokens, "settled")
            return
        delta = math.ceil(charge) - hold.tokens
        if delta >= 0 or self.settle_delay_seconds <= 0:
            self._adjust(hold, delta, "settled")
            return
        now = self.clock()
        start, _ = _parse_slot(hold.slot, now)
        if start is None or self._expired(start, now):  # it left the window: Bedrock ignores it too
            self.counts["late"] += 1
            return
        with self._lock:
            self._returns.setdefault(hold.slot, [0.0, now])[0] += delta
        self.counts["settled"] += 1
        self.counts["deferred"] += 1
        if self._returns_matter(now):
            self.flush()

    def release(self, hold: LedgerHold) -> None:
        """Return a hold at once: the call never reached Bedrock, or Bedrock throttled it (the
        deferred returns ride along)."""
        if hold.output_slot is not None:
            self._adjust_mantle(hold, -hold.tokens, 0, "released")
            return
        self._adjust(hold, -hold.tokens, "released")

    def flush(self) -> None:
        """Write every deferred return now (one write; MAX_RETURNS slots a write): what settle() does
        when a return matters, and what a process about to stop may call (else its returns stay held
        until their slots leave the window, as a dead holder's do)."""
        with self._lock:
            writes = math.ceil(len(self._returns) / MAX_RETURNS)
        for _ in range(writes):
            if not self._returns or self._apply({}, None) == 0:
                return

    @property
    def deferred_tokens(self) -> float:
        """The tokens this consumer's deferred returns will give back (>= 0), not yet written."""
        with self._lock:
            return -sum(entry[0] for entry in self._returns.values())

    def charge(self, tokens: float) -> None:
        """Count `tokens` Bedrock already charged to the on-demand quota without this ledger admitting
        them: a Reserved tier call that Bedrock served at default (its reservation was full, service
        tiers page: "overflows to default"). No ceiling is checked (the tokens are spent whatever the
        ledger says); they go into this consumer's slot of the current second, so they leave the
        window no earlier than Bedrock's charge of a call that started before, and into the day. An
        item that does not add up is repaired first; a write that loses to another is retried."""
        if not _finite(tokens) or tokens < 0:
            raise ValueError(f"SharedLedger.charge: tokens={tokens!r} must be a finite number >= 0")
        amount = math.ceil(tokens)
        if amount == 0:
            return
        for _ in range(self.conflict_retries + 2):
            now, view = self._trusted_view()
            if view is None:  # repaired: try again on the item the repair returned
                continue
            start = math.floor(now / SLOT_SECONDS) * SLOT_SECONDS
            newest = view.newest_start()
            if start < newest <= start + ADOPTED_SKEW_FACTOR * max(self.skew_seconds, SLOT_SECONDS):
                start = newest  # as a reservation names its slot: never older than the newest seen
            names = {"#held": HELD, "#mine": CONSUMER_PREFIX + self.consumer,
                     "#slot": f"{SLOT_PREFIX}{_slot_name(start)}#{self.consumer}", "#day": DAY_PREFIX + _day(start),
                     "#ttl": TTL_ATTRIBUTE}
            values = {":t": _n(amount), ":number": {"S": "N"}, ":ttl": _n(math.ceil(now) + TTL_GRACE_SECONDS)}
            condition = " AND ".join(f"(attribute_not_exists({p}) OR attribute_type({p}, :number))"
                                     for p in ("#held", "#mine", "#slot", "#day"))
            update = "ADD #held :t, #mine :t, #slot :t, #day :t SET #ttl = :ttl"
            if self._write(update, condition, names, values) is not None:
                self.counts["charged"] += 1
                return
            self.counts["conflicts"] += 1  # an attribute turned into text since the view: repaired next time
        raise LedgerError(f"SharedLedger: a charge of {amount:,} tokens did not go through after "
                          f"{self.conflict_retries + 2} tries", code="Conflict", retryable=True)

    def sweep(self) -> float:
        """Remove every slot that left the window, of every consumer, without reserving anything: what
        each reservation does on the way (the same removal, _expired_slots and _removal), for an item
        no process consumer writes (QuotaLedger's sweeper, for ledgers state machines use: a state
        machine cannot remove a slot). Reads the item (strongly consistent), repairs it first when it
        does not add up, then removes MAX_CLEANUP slots per write, each pinned to the value read, until
        none is left; sets the TTL as every process write does. Returns the tokens removed."""
        removed = 0.0
        self.view(refresh=True)
        for _ in range(self.conflict_retries + 2 + MAX_EXPIRED_WRITES):
            now, view = self._trusted_view()
            if view is None:  # repaired: try again on the item the repair returned
                continue
            expired, freed_all, freed = self._expired_slots(view, now)
            out_expired, out_freed_all, out_freed = self._expired_slots(view, now, output=True,
                                                                        limit=MAX_CLEANUP - len(expired))
            if not expired and not out_expired:
                if view.priority_waiting is not None and not self._outranking_wait(view, _iso_ms(now - self.want_seconds)):
                    # nobody above the lowest priority waits any more: the state machines may borrow again
                    self._write("REMOVE #pw", "#pw = :pw", {"#pw": PRIORITY_WAITING}, {":pw": {"S": view.priority_waiting}})
                return removed
            names = {"#held": HELD, "#ttl": TTL_ATTRIBUTE}
            values: dict[str, Any] = {":number": {"S": "N"}, ":ttl": _n(math.ceil(now) + TTL_GRACE_SECONDS)}
            deltas: dict[str, float] = {"#held": -freed_all}
            clauses = ["(attribute_not_exists(#held) OR attribute_type(#held, :number))"]
            removes = self._removal(view, expired, freed, None, names, values, deltas, clauses)
            if out_expired:  # bedrock-mantle's output slots leave the same way
                names["#oheld"], deltas["#oheld"] = OUTPUT_HELD, -out_freed_all
                removes += self._removal(view, out_expired, out_freed, None, names, values, deltas, clauses, output=True)
            for placeholder in deltas:  # an h# turned into text since the read fails the write, not the ADD
                if placeholder != "#held":
                    clauses.append(f"(attribute_not_exists({placeholder}) OR attribute_type({placeholder}, :number))")
            adds = []
            for placeholder, delta in deltas.items():
                values[f":d{placeholder[1:]}"] = _n(delta)
                adds.append(f"{placeholder} :d{placeholder[1:]}")
            update = "ADD " + ", ".join(adds) + " SET #ttl = :ttl REMOVE " + ", ".join(removes)
            if self._write(update, " AND ".join(clauses), names, values) is None:
                self.counts["conflicts"] += 1  # another writer moved first; its item is the new view
                continue
            removed += freed_all + out_freed_all
            self.counts["swept"] += len(expired) + len(out_expired)
        return removed

    def view(self, *, refresh: bool = False) -> LedgerView:
        """The item as last seen (refresh: read it now, a strongly consistent GetItem)."""
        if refresh:
            self.counts["reads"] += 1
            item = self._call("get_item", TableName=self.table_name, Key=self.key, ConsistentRead=True).get("Item")
            with self._lock:
                self._view, self._seen, self._view_at = LedgerView.parse(item, self.clock()), True, self.clock()
        with self._lock:
            return self._view

    def live_tokens(self, view: LedgerView, now: float, consumer: str | None = None) -> float:
        """Tokens of the slots still in the window at `now` (of one consumer, or all)."""
        return sum(t for name, (start, c, t) in view.slots.items()
                   if (consumer is None or c == consumer) and not self._expired(start, now))

    # --- internals -------------------------------------------------------------------------------

    def _expired(self, start: float, now: float) -> bool:
        return start + SLOT_SECONDS + self.window_seconds + self.skew_seconds <= now

    def _expired_slots(self, view: LedgerView, now: float, *, output: bool = False,
                       limit: int = MAX_CLEANUP) -> tuple[list[str], float, dict[str, float]]:
        """The slots that left the window at `now`, oldest first (at most `limit`), their tokens in
        all and per consumer: what a write removes on the way (_decide) or a sweep removes alone.
        output: bedrock-mantle's output slots instead."""
        slots = view.output_slots if output else view.slots
        expired = sorted((name for name, (start, _, _) in slots.items() if self._expired(start, now)),
                         key=lambda n: slots[n][0])[:max(limit, 0)]
        freed: dict[str, float] = {}
        for n in expired:
            freed[slots[n][1]] = freed.get(slots[n][1], 0.0) + slots[n][2]
        return expired, sum(slots[n][2] for n in expired), freed

    @staticmethod
    def _removal(view: LedgerView, expired: list[str], freed: Mapping[str, float], skip: str | None,
                 names: dict[str, str], values: dict[str, Any], deltas: dict[str, float], clauses: list[str], *,
                 output: bool = False) -> list[str]:
        """Fill in the removal of `expired`: each slot pinned to the value seen (#e = :e), each other
        consumer's h# lowered by its freed tokens (`skip`'s is the caller's own delta), or removed with
        its last slot, pinned to the value seen (#p = :p); returns the REMOVE operands. The caller adds
        -freed to held with its own delta. output: bedrock-mantle's output slots, their oh#
        (placeholders #q, #f, #g: both families may be removed in one write)."""
        consumer_prefix, h, e, p = (OUTPUT_CONSUMER_PREFIX, "q", "f", "g") if output else (CONSUMER_PREFIX, "h", "e", "p")
        slots = view.output_slots if output else view.slots
        held_by = view.output_consumers if output else view.consumers
        removing = set(expired)
        left = {c for name, (_, c, _) in slots.items() if name not in removing}  # consumers keeping a slot
        removes = []
        for i, consumer in enumerate(sorted(c for c in freed if c != skip)):
            attribute = consumer_prefix + consumer
            if consumer not in left and attribute in view.raw and abs(held_by.get(consumer, 0.0) - freed[consumer]) <= 0.5:
                # its last slots leave: its h# goes too (pinned to the value seen: a reservation of that
                # consumer since fails this write), so the item holds only consumers with holds in the window
                names[f"#{p}{i}"], values[f":{p}{i}"] = attribute, view.raw[attribute]
                clauses.append(f"#{p}{i} = :{p}{i}")
                removes.append(f"#{p}{i}")
                continue
            names[f"#{h}{i}"] = attribute
            deltas[f"#{h}{i}"] = -freed[consumer]
        for i, name in enumerate(expired):
            names[f"#{e}{i}"], values[f":{e}{i}"] = name, view.raw[name]
            clauses.append(f"#{e}{i} = :{e}{i}")
            removes.append(f"#{e}{i}")
        return removes

    def _decide(self, view: LedgerView, tokens: int, now: float, carried: Mapping[str, float], output: int = 0, *,
                cleanup: bool = True) -> Any:
        # cleanup=False: decide on the item as it is, its expired slots still counted (FRESH_VIEW_SECONDS)
        expired, freed_all, freed = self._expired_slots(view, now) if cleanup else ([], 0.0, {})
        # The deferred returns it carries (none of them in an expired slot) are this consumer's room too.
        back = sum(carried.values())  # <= 0
        held = view.held - freed_all + back
        mine = view.consumers.get(self.consumer, 0.0) - freed.get(self.consumer, 0.0) + back
        within_floor = mine + tokens <= self.floor_tpm
        mantle = self.output_quota_tpm is not None
        out_expired, out_freed_all, out_freed = (self._expired_slots(view, now, output=True, limit=MAX_CLEANUP - len(expired))
                                                 if mantle and cleanup else ([], 0.0, {}))
        out_held = view.output_held - out_freed_all
        out_mine = view.output_consumers.get(self.consumer, 0.0) - out_freed.get(self.consumer, 0.0)
        within_floor = within_floor and (not mantle or out_mine + output <= self.output_floor_tpm)
        since = _iso_ms(now - self.want_seconds)
        # What other consumers recently waited for within their floors, or to borrow with a higher priority
        # than this consumer's: a borrower leaves it free ("Priorities").
        wanting = self._waiting_before_me(view, since)
        kept = sum(wanting.values())
        # bedrock-mantle: the output tokens the same wants wait for, kept free on the output window alike
        kept_output = {c: view.want_output[c] for c in wanting if view.want_output.get(c, 0.0) > 0}
        # The slot: this writer's second, never older than the newest slot in the item (a clock
        # behind the others' then only keeps its holds longer). Its UTC day is the hold's day.
        own = math.floor(now / SLOT_SECONDS) * SLOT_SECONDS
        newest = view.newest_start()
        start = newest if own < newest <= own + ADOPTED_SKEW_FACTOR * max(self.skew_seconds, SLOT_SECONDS) else own
        day = _day(start)
        day_back: dict[str, float] = {}
        for name, delta in carried.items():
            returned_on = _slot_day(name, now)
            if returned_on is not None:
                day_back[returned_on] = day_back.get(returned_on, 0.0) + delta
        spent = view.days.get(day, 0.0) + day_back.get(day, 0.0)
        if self.keeps_day and spent + tokens > self.daily_tokens:
            midnight = (math.floor(now / SECONDS_PER_DAY) + 1) * SECONDS_PER_DAY - now
            self.counts["day_refusals"] += 1
            return LedgerRefusal(max(midnight, self._poll_delay()), midnight,
                                 f"the day's tokens are spent: {spent:,.0f} of the daily token quota of "
                                 f"{self.daily_tokens:,.0f} on {day} (UTC), and this call reserves {tokens:,}; the "
                                 f"ledger's day ends at 00:00 UTC ({DAILY_QUOTA_DOC})", False, waits_for_room=False)
        if held + tokens > self.quota_tpm:
            return self._refusal(view, tokens, now, "the quota's window is full", within_floor, held)
        if mantle and out_held + output > cast(float, self.output_quota_tpm):
            return self._refusal(view, output, now, "the quota's output window is full", within_floor, out_held,
                                 output=True)
        if not within_floor:
            if mine + tokens > self.burst_tpm:
                return self._refusal(view, tokens, now, f"the consumer holds {mine:,.0f} of its {self.burst_tpm:,.0f} "
                                     "burst cap", False, None)
            if mantle and out_mine + output > cast(float, self.output_burst_tpm):
                return self._refusal(view, output, now, f"the consumer holds {out_mine:,.0f} of its "
                                     f"{self.output_burst_tpm:,.0f} output burst cap", False, None, output=True)
            if held + tokens > self.quota_tpm - kept:
                return self._kept_refusal(view, wanting, "tokens")
            if mantle and out_held + output > cast(float, self.output_quota_tpm) - sum(kept_output.values()):
                return self._kept_refusal(view, kept_output, "output tokens")
        slot = f"{SLOT_PREFIX}{_slot_name(start)}#{self.consumer}"
        names = {"#held": HELD, "#mine": CONSUMER_PREFIX + self.consumer, "#slot": slot, "#ttl": TTL_ATTRIBUTE}
        values: dict[str, Any] = {":r": _n(tokens + carried.get(slot, 0.0)),
                                  ":ttl": _n(math.ceil(now) + TTL_GRACE_SECONDS)}
        deltas = {"#held": tokens - freed_all + back, "#mine": tokens - freed.get(self.consumer, 0.0) + back}
        clauses: list[str] = []
        removes = self._removal(view, expired, freed, self.consumer, names, values, deltas, clauses)
        if self.keeps_day:
            names["#day"] = DAY_PREFIX + day
            values[":day"] = _n(self.daily_tokens - tokens - day_back.get(day, 0.0))
            values[":dd"] = _n(tokens + day_back.get(day, 0.0))
            yesterday = _day(start - SECONDS_PER_DAY)
            for i, old in enumerate(sorted(d for d in view.days if d < yesterday)[:MAX_CLEANUP]):
                names[f"#o{i}"] = DAY_PREFIX + old  # nothing adds to a day before yesterday any more
                removes.append(f"#o{i}")
        output_slot = None
        if mantle:  # the output window beside it: max_tokens held from now, pinned and bounded the same way
            output_slot = f"{OUTPUT_SLOT_PREFIX}{_slot_name(start)}#{self.consumer}"
            names.update({"#oheld": OUTPUT_HELD, "#omine": OUTPUT_CONSUMER_PREFIX + self.consumer, "#oslot": output_slot})
            values[":m"] = _n(output)
            deltas["#oheld"] = output - out_freed_all
            deltas["#omine"] = output - out_freed.get(self.consumer, 0.0)
            removes += self._removal(view, out_expired, out_freed, self.consumer, names, values, deltas, clauses,
                                     output=True)
            values[":ototal"] = _n(cast(float, self.output_quota_tpm) - output + out_freed_all
                                   - (0.0 if within_floor else sum(kept_output.values())))
            clauses.append("(attribute_not_exists(#oheld) OR (attribute_type(#oheld, :number) AND #oheld <= :ototal))")
            out_ceiling = (self.output_floor_tpm if within_floor else cast(float, self.output_burst_tpm)) - output \
                + out_freed.get(self.consumer, 0.0)
            values[":omine"] = _n(out_ceiling)
            clauses.append("(attribute_not_exists(#omine) OR (attribute_type(#omine, :number) AND #omine <= :omine))")
        values[":total"] = _n(self.quota_tpm - tokens + freed_all - back - (0.0 if within_floor else kept))
        # attribute_type first: a value that is not a number fails the condition (and is repaired),
        # never compares as something else
        values[":number"] = {"S": "N"}
        clauses.append("(attribute_not_exists(#held) OR (attribute_type(#held, :number) AND #held <= :total))")
        ceiling = (self.floor_tpm if within_floor else self.burst_tpm) - tokens + freed.get(self.consumer, 0.0) - back
        values[":mine"] = _n(ceiling)
        clauses.append("(attribute_not_exists(#mine) OR (attribute_type(#mine, :number) AND #mine <= :mine))")
        if self.keeps_day:
            clauses.append("(attribute_not_exists(#day) OR (attribute_type(#day, :number) AND #day <= :day))")
        if not within_floor:  # a want written after this view changes "wanted": the write fails and is retried
            names["#wanted"] = WANTED
            if WANTED in view.raw and WANTED_BY in view.raw:
                names["#wanted_by"] = WANTED_BY
                values[":wanted"], values[":wanted_by"] = view.raw[WANTED], view.raw[WANTED_BY]
                clauses.append("(#wanted = :wanted AND #wanted_by = :wanted_by)")
            else:
                clauses.append("attribute_not_exists(#wanted)")
        sets = ["#ttl = :ttl"]
        own_want = view.wants.get(self.consumer)
        if own_want is not None:  # served (its floor, or what it waited to borrow): borrowers need not keep it any more
            names["#want"] = WANT_PREFIX + self.consumer
            removes.append("#want")
        if view.priority_waiting is not None and not self._outranking_wait(view, since):
            # No consumer above the lowest priority waits any more (this one is served now): the state
            # machines may borrow again. Pinned: a want written since changes the flag and fails this write.
            names["#pw"], values[":pw"] = PRIORITY_WAITING, {"S": view.priority_waiting}
            clauses.append("#pw = :pw")
            removes.append("#pw")
        adds = ["#slot :r", *(["#day :dd"] if self.keeps_day else []), *(["#oslot :m"] if mantle else [])]
        # the other slots' returns, each IF its slot is still there (one another writer removed as expired
        # fails the write, which is retried on the fresh item without it); their days' too
        for i, name in enumerate(sorted(n for n in carried if n != slot)):
            names[f"#r{i}"], values[f":r{i}"] = name, _n(carried[name])
            adds.append(f"#r{i} :r{i}")
            clauses.append(f"attribute_exists(#r{i})")
        for i, returned_on in enumerate(sorted(d for d in day_back if d != day) if self.keeps_day else []):
            names[f"#y{i}"], values[f":y{i}"] = DAY_PREFIX + returned_on, _n(day_back[returned_on])
            adds.append(f"#y{i} :y{i}")
        for placeholder, delta in deltas.items():
            values[f":d{placeholder[1:]}"] = _n(delta)
            adds.append(f"{placeholder} :d{placeholder[1:]}")
        update = "ADD " + ", ".join(adds) + " SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        return (not within_floor, names, values, " AND ".join(clauses), update, slot, output_slot)

    def _refusal(self, view: LedgerView, tokens: int, now: float, reason: str, within_floor: bool,
                 held: float | None, *, output: bool = False) -> LedgerRefusal:
        """When to try again: the next poll, or sooner when slots leaving the window make room (output:
        bedrock-mantle's output window, `tokens` being the output the call holds)."""
        slots = view.output_slots if output else view.slots
        quota = cast(float, self.output_quota_tpm) if output else self.quota_tpm
        burst = cast(float, self.output_burst_tpm) if output else self.burst_tpm
        if held is not None:  # the quota's window is full: any consumer's slot leaving makes room
            excess, whose = held + tokens - quota, None
        else:  # the consumer's burst cap: only its own slots leaving make room
            own = sum(t for start, c, t in slots.values() if c == self.consumer and not self._expired(start, now))
            excess, whose = own + tokens - burst, self.consumer
        ready: float | None = None
        freed = 0.0
        for start, owner, t in sorted(s for s in slots.values() if not self._expired(s[0], now)):
            if whose is None or owner == whose:
                freed += t
                if freed >= excess:
                    ready = max(0.0, start + SLOT_SECONDS + self.window_seconds + self.skew_seconds - now)
                    break
        retry = self._poll_delay()
        return LedgerRefusal(retry if ready is None else min(retry, ready), ready, reason, within_floor)

    def _kept_refusal(self, view: LedgerView, waiting: Mapping[str, float], unit: str) -> LedgerRefusal:
        """A borrower's refusal for what `waiting` (consumer -> tokens it waits for) is kept, naming them
        and which of them outrank this consumer."""
        outranking = sorted(c for c in waiting if view.want_priority.get(c, (0, False))[1])
        why = "wait within their floors" if not outranking else (
            f"wait within their floors or outrank this {self.priority} consumer ({', '.join(outranking)})")
        return LedgerRefusal(self._poll_delay(), None, f"{', '.join(sorted(waiting))} {why}: "
                             f"{sum(waiting.values()):,.0f} {unit} are kept for them", False)

    def _contested_removal(self, view: LedgerView, names: Mapping[str, str], viewed_at: float) -> bool:
        """Whether a reservation's removal pins another consumer's slot that left the window after the
        view was read: what every consumer waiting for that room tries to remove at that moment (a lone
        writer's own slots never are)."""
        for placeholder, name in names.items():
            if placeholder[:2] in ("#e", "#f") and placeholder[2:].isdigit():
                slot = (view.output_slots if placeholder[1] == "f" else view.slots).get(name)
                if slot is not None and slot[1] != self.consumer and \
                        slot[0] + SLOT_SECONDS + self.window_seconds + self.skew_seconds > viewed_at:
                    return True
        return False

    def _poll_delay(self) -> float:
        with self._lock:
            exponent = self._refusals
        ceiling = min(self.max_poll_seconds, self.poll_seconds * 2 ** min(exponent, 16))
        return self.poll_seconds / 2 + self.rng.random() * (ceiling - self.poll_seconds / 2)

    def _refused(self, refusal: LedgerRefusal, tokens: int, now: float, output: int = 0) -> None:
        """Count a refusal, and write this consumer's want when it waits within its floor or outranks
        others: `tokens` and, on bedrock-mantle, `output` (the call's max_tokens, what it holds on the
        output window), whichever window refused it, so borrowers keep both free."""
        self.counts["refusals"] += 1
        with self._lock:
            self._refusals += 1
            self._refused_at = now
            outranks = self.rank > 0 and refusal.waits_for_room  # lower priorities keep free what it waits for
            write_want = ((refusal.within_floor or outranks)
                          and now - self._want_written >= self.want_seconds / 2)
            if write_want:
                self._want_written = now
        if write_want:  # borrowers keep `tokens` free until this consumer is served (an unconditional SET: one write)
            self.counts["wants"] += 1
            want = f"{_iso_ms(now)} {tokens}"
            if self.output_quota_tpm is not None:  # and its max_tokens on the output window
                want += f" {WANT_OUTPUT_MARK}{output}"
            if self.rank > 0:
                want += f" {self.priority}" + ("" if refusal.within_floor else " borrowing")
            update = "SET #w = :want, #wanted = :now, #wanted_by = :me, #ttl = :ttl"
            names = {"#w": WANT_PREFIX + self.consumer, "#wanted": WANTED, "#wanted_by": WANTED_BY, "#ttl": TTL_ATTRIBUTE}
            values = {":want": {"S": want}, ":now": {"S": _iso_ms(now)}, ":me": {"S": self.consumer},
                      ":ttl": _n(math.ceil(now) + TTL_GRACE_SECONDS)}
            if self.rank > 0:  # the state machines, which cannot read wants, borrow nothing until then
                update += ", #pw = :until"
                names["#pw"], values[":until"] = PRIORITY_WAITING, {"S": _iso_ms(now + self.want_seconds)}
            self._write(update, None, names, values)

    def _waiting_before_me(self, view: LedgerView, since: str) -> dict[str, float]:
        """Who waits, since `since`, for tokens a borrowing call of this consumer leaves free, and for how
        many: a consumer waiting within its floor, or one of a higher priority waiting to borrow."""
        return {c: need for c, (when, need) in view.wants.items()
                if c != self.consumer and when >= since and need > 0
                and (not view.want_priority.get(c, (0, False))[1] or view.want_priority[c][0] > self.rank)}

    def _outranking_wait(self, view: LedgerView, since: str) -> bool:
        """Whether another consumer above the lowest priority waits (since `since`): what keeps the
        PRIORITY_WAITING flag the state machines read."""
        return any(c != self.consumer and when >= since and need > 0 and view.want_priority.get(c, (0, False))[0] > 0
                   for c, (when, need) in view.wants.items())

    def _adjust(self, hold: LedgerHold, delta: int, kind: str) -> None:
        if delta == 0:
            self.counts[kind] += 1
            return
        self._apply({hold.slot: delta}, kind)

    def _apply(self, own: Mapping[str, float], kind: str | None) -> int:
        """Write `own` (slot -> tokens to add: a settlement above its hold, a release) with the deferred
        returns riding along (at most MAX_RETURNS), each slot IF it still exists: a slot that left the
        window takes nothing, as Bedrock ignores a late settlement. A failed condition (a slot another
        writer removed) is retried on the fresh item without the slots it lacks. Never repeated when
        its answer is lost (applied twice it would return tokens Bedrock still counts). Returns the
        returns written or dropped."""
        now = self.clock()
        with self._lock:
            view = self._view
        carried = self._carried(view, now)
        deltas: dict[str, float] = dict(carried)
        for name, delta in own.items():
            deltas[name] = deltas.get(name, 0.0) + delta
        done = len(carried)
        for _ in range(self.conflict_retries + 2):
            live = {name: delta for name, delta in deltas.items() if delta != 0}
            if not live:
                break
            names = {"#held": HELD, "#mine": CONSUMER_PREFIX + self.consumer}
            values: dict[str, Any] = {":d": _n(sum(live.values()))}
            adds, clauses = ["#held :d", "#mine :d"], []
            days: dict[str, float] = {}
            for i, (name, delta) in enumerate(sorted(live.items())):
                names[f"#s{i}"], values[f":s{i}"] = name, _n(delta)
                adds.append(f"#s{i} :s{i}")
                clauses.append(f"attribute_exists(#s{i})")
                day = _slot_day(name, now)  # the day the hold was reserved on
                if day is not None:
                    days[day] = days.get(day, 0.0) + delta
            for i, (day, delta) in enumerate(sorted(days.items())):
                names[f"#y{i}"], values[f":y{i}"] = DAY_PREFIX + day, _n(delta)
                adds.append(f"#y{i} :y{i}")
            try:
                outcome = self._write("ADD " + ", ".join(adds), " AND ".join(clauses), names, values, repeatable=False)
            except LedgerError as error:
                if error.lost:
                    self.counts["late"] += len(carried)  # applied or not: never again
                else:
                    self._restore(carried)
                raise
            if outcome is not None:
                self.counts["carried"] += len(carried)
                if kind is not None:
                    self.counts[kind] += 1
                if carried:
                    self.counts["flushes"] += kind is None
                return done
            with self._lock:  # a slot is gone (it left the window): that part takes nothing
                fresh = self._view
            for name in [n for n in live if n not in fresh.slots]:
                deltas.pop(name)
                carried.pop(name, None)
                self.counts["late"] += 1
        self._restore(carried)  # the item kept changing: they wait for the next write
        if kind is not None and any(name in deltas for name in own):
            self.counts[kind] += 1
        return done

    def _carried(self, view: LedgerView, now: float) -> dict[str, float]:
        """Take out the deferred returns the next write carries (slot -> tokens, < 0; at most
        MAX_RETURNS): those whose slot the view holds and that have not left the window at `now` (so
        none is in a slot the write removes as expired: that removal pins the slot's value). One
        that left the window is dropped, counted as late: Bedrock ignores a late settlement. One whose
        slot the view lacks stays (a view another thread's earlier write returned last may lack it; one
        another writer removed is dropped once it left this clock's window). The caller puts back
        (_restore) what its write did not apply."""
        carried: dict[str, float] = {}
        late = 0
        with self._lock:
            for name in sorted(self._returns):
                start, _ = _parse_slot(name, now)
                if start is None or self._expired(start, now):
                    del self._returns[name]
                    late += 1
                elif name in view.slots and len(carried) < MAX_RETURNS:
                    carried[name] = self._returns.pop(name)[0]
        self.counts["late"] += late
        return carried

    def _restore(self, carried: Mapping[str, float]) -> None:
        """Put back returns a write took out and did not apply (they wait for the next write)."""
        if not carried:
            return
        now = self.clock()
        with self._lock:
            for name, delta in carried.items():
                self._returns.setdefault(name, [0.0, now])[0] += delta

    def _returns_matter(self, now: float) -> bool:
        """Whether the deferred returns are written now rather than with this consumer's next write."""
        with self._lock:
            if not self._returns:
                return False
            oldest = min(entry[1] for entry in self._returns.values())
            view = self._view
            waiting = now - self._refused_at <= 2 * self.max_poll_seconds
        since = _iso_ms(now - self.want_seconds)
        if self._waiting_before_me(view, since):
            return True  # someone waits within its floor, or outranks this consumer: every token back counts
        if waiting:  # this consumer's own next try carries them, and counts them as its room
            return False
        return now - oldest >= self.settle_delay_seconds or view.held >= self.defer_below_fill * self.quota_tpm

    def _adjust_mantle(self, hold: LedgerHold, delta: int, output_tokens: int, kind: str) -> None:
        """A bedrock-mantle hold's settlement or release, in one write: the input slot adjusted by
        `delta` while it is in the window (as _adjust), the output hold taken out of its slot while it
        is, and `output_tokens` counted in this consumer's output slot of the current second. Each
        slot's presence is pinned (attribute_exists), as the view says; a view that was stale fails
        the write, whose returned item decides the next try. Never repeated when its answer was lost."""
        assert hold.output_slot is not None
        for _ in range(self.conflict_retries + 2):
            now, trusted = self._trusted_view()
            if trusted is None:  # repaired first (an ADD onto a malformed attribute would fail): try again
                continue
            view = trusted
            start = math.floor(now / SLOT_SECONDS) * SLOT_SECONDS
            newest = max(view.newest_start(), max((s for s, _, _ in view.output_slots.values()), default=-math.inf))
            if start < newest <= start + ADOPTED_SKEW_FACTOR * max(self.skew_seconds, SLOT_SECONDS):
                start = newest  # as a reservation names its slot: a lagging clock counts longer, never shorter
            names: dict[str, str] = {}
            values: dict[str, Any] = {}
            slot_deltas: dict[str, float] = {}
            clauses: list[str] = []
            in_window = hold.slot in view.slots
            if in_window and delta:
                names.update({"#held": HELD, "#mine": CONSUMER_PREFIX + self.consumer, "#slot": hold.slot})
                values[":d"] = _n(delta)
                clauses.append("attribute_exists(#slot)")
            out_delta = float(output_tokens)
            if hold.output_slot in view.output_slots:
                slot_deltas[hold.output_slot] = -hold.output
                out_delta -= hold.output
                names["#ohold"] = hold.output_slot
                clauses.append("attribute_exists(#ohold)")
            if output_tokens:
                now_slot = f"{OUTPUT_SLOT_PREFIX}{_slot_name(start)}#{self.consumer}"
                slot_deltas[now_slot] = slot_deltas.get(now_slot, 0.0) + output_tokens
            adds = ["#held :d", "#mine :d", "#slot :d"] if ":d" in values else []
            for i, (name, amount) in enumerate(sorted(slot_deltas.items())):
                names[f"#os{i}"], values[f":os{i}"] = name, _n(amount)
                adds.append(f"#os{i} :os{i}")
            if out_delta:
                names.update({"#oheld": OUTPUT_HELD, "#omine": OUTPUT_CONSUMER_PREFIX + self.consumer})
                values[":od"] = _n(out_delta)
                adds += ["#oheld :od", "#omine :od"]
            if not adds:
                self.counts[kind if in_window else "late"] += 1
                return
            outcome = self._write("ADD " + ", ".join(adds), " AND ".join(clauses) or None, names, values,
                                  repeatable=False)
            if outcome is None:  # a slot left the window since the view: the returned item is the new view
                self.counts["conflicts"] += 1
                continue
            self.counts[kind if in_window else "late"] += 1
            return
        raise LedgerError(f"SharedLedger: a {kind.removesuffix('d')} of a bedrock-mantle hold did not go through after "
                          f"{self.conflict_retries + 2} tries", code="Conflict", retryable=True)

    def _trusted_view(self) -> tuple[float, LedgerView | None]:
        """Now, and the item as last seen, fit to decide on: the slots further ahead than any clock the
        ledger follows left out. None when it does not add up: it is repaired (one conditional write,
        whose returned item becomes the view) and the caller tries again. What every write decides on
        (a reservation, a sweep) first."""
        now = self.clock()
        with self._lock:
            view = self._view
        view = self._without_future_slots(view, now)
        if view.problems:
            self._repair(view)
            return now, None
        return now, view

    def _without_future_slots(self, view: LedgerView, now: float) -> LedgerView:
        """The view, with every slot that starts further ahead of `now` than any clock the ledger
        follows (FUTURE_SLOT_FACTOR x the window) marked as a problem and left out: such a slot would
        hold its tokens for as long as it is ahead (a broken clock, or a hostile write), so it is
        repaired away rather than trusted."""
        limit = now + FUTURE_SLOT_FACTOR * self.window_seconds
        future = [name for slots in (view.slots, view.output_slots) for name, (start, _, _) in slots.items()
                  if start > limit]
        if not future:
            return view
        kept = {name: slot for name, slot in view.slots.items() if name not in future}
        kept_output = {name: slot for name, slot in view.output_slots.items() if name not in future}
        return LedgerView(held=view.held, consumers=dict(view.consumers), slots=kept, wants=dict(view.wants),
                          want_output=dict(view.want_output),
                          want_priority=dict(view.want_priority), priority_waiting=view.priority_waiting,
                          days=dict(view.days), output_held=view.output_held,
                          output_consumers=dict(view.output_consumers), output_slots=kept_output,
                          raw=view.raw, problems=[*view.problems, *(f"{name} starts more than "
                          f"{FUTURE_SLOT_FACTOR * self.window_seconds:g} s ahead of this clock" for name in future)])

    def _repair(self, view: LedgerView) -> None:
        """Rebuild held and each h# from the valid slots, dropping what is malformed; pinned to the
        exact values read (a concurrent writer makes it fail, and the next view is repaired again)."""
        self.counts["repairs"] += 1
        log("WARNING", "SharedLedger: the quota item does not add up; repaired from its valid slots",
            ledger_id=self.ledger_id, problems=view.problems[:10])
        consumers = set(view.consumers) | {c for _, c, _ in view.slots.values()}
        targets = {HELD: sum(t for _, _, t in view.slots.values())}
        for consumer in consumers:
            targets[CONSUMER_PREFIX + consumer] = sum(t for _, c, t in view.slots.values() if c == consumer)
        if view.output_slots or OUTPUT_HELD in view.raw or any(n.startswith(OUTPUT_CONSUMER_PREFIX) for n in view.raw):
            targets[OUTPUT_HELD] = sum(t for _, _, t in view.output_slots.values())
            for consumer in set(view.output_consumers) | {c for _, c, _ in view.output_slots.values()}:
                targets[OUTPUT_CONSUMER_PREFIX + consumer] = sum(t for _, c, t in view.output_slots.values()
                                                                 if c == consumer)
        # a consumer without a slot has no h# (its last slot's removal takes it): 0 is left out, not written
        slotted = {CONSUMER_PREFIX + c for _, c, _ in view.slots.values()} | {
            OUTPUT_CONSUMER_PREFIX + c for _, c, _ in view.output_slots.values()}
        targets = {name: total for name, total in targets.items()
                   if name in (HELD, OUTPUT_HELD) or name in slotted}
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        clauses, removes = [], []
        for i, (name, raw) in enumerate(sorted(view.raw.items())):
            if name in (PARTITION_KEY, TTL_ATTRIBUTE):
                continue
            names[f"#a{i}"], values[f":a{i}"] = name, raw
            clauses.append(f"#a{i} = :a{i}")
            valid = (name in view.slots or name in view.output_slots or name in targets or (name.startswith(WANT_PREFIX) and name[2:] in view.wants)
                     or (name.startswith(DAY_PREFIX) and name[len(DAY_PREFIX):] in view.days)
                     or (name in (WANTED, WANTED_BY) and isinstance(raw, Mapping) and isinstance(raw.get("S"), str))
                     or (name == PRIORITY_WAITING and view.priority_waiting is not None))
            if not valid:
                removes.append(f"#a{i}")
        sets = []
        for i, (name, total) in enumerate(sorted(targets.items())):
            names[f"#t{i}"], values[f":t{i}"] = name, _n(total)
            sets.append(f"#t{i} = :t{i}")
        update = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        self._write(update, " AND ".join(clauses) or None, names, values)

    def _write(self, update: str, condition: str | None, names: dict[str, str], values: dict[str, Any], *,
               repeatable: bool = True) -> dict | None:
        """One UpdateItem; the returned item becomes the view. None when the condition failed."""
        request: dict[str, Any] = {"TableName": self.table_name, "Key": self.key, "UpdateExpression": update,
                                   "ExpressionAttributeNames": names, "ExpressionAttributeValues": values,
                                   "ReturnValues": "ALL_NEW"}
        if condition:
            request["ConditionExpression"] = condition
            request["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        self.counts["writes"] += 1
        try:
            item = self._call("update_item", repeatable=repeatable, **request).get("Attributes")
        except _ConditionFailed as failed:
            with self._lock:
                self._view, self._seen, self._view_at = LedgerView.parse(failed.item, self.clock()), True, self.clock()
            return None
        with self._lock:
            self._view, self._seen, self._view_at = LedgerView.parse(item, self.clock()), True, self.clock()
        return item

    def _call(self, operation: str, *, repeatable: bool = True, **request: Any) -> dict:
        """A DynamoDB call, retried with full-jitter backoff on throttling and transient errors.

        A request that never left the client (NotConnected: no connection could be made) is always
        retried. One whose answer was lost (a read timeout, a dropped connection: HTTPClientError) may
        have been applied: it is retried only when `repeatable` (a reservation applied twice holds
        more than it needs until its window passes, which is safe); a settlement or release is not
        (applied twice it would return tokens Bedrock still counts), and raises instead.
        """
        for attempt in range(self.dynamodb_retries + 1):
            try:
                return getattr(self.client, operation)(**request)
            except ClientError as error:
                code = error.response.get("Error", {}).get("Code", "")
                if code == CONDITION_FAILED:
                    raise _ConditionFailed(error.response.get("Item")) from None
                if code not in THROTTLING_CODES:
                    raise LedgerError(f"SharedLedger: DynamoDB {operation} on {self.table_name} failed with {code}: "
                                      f"{error.response.get('Error', {}).get('Message', '')} (not retried: it cannot "
                                      "succeed as sent; check the table, the grant and the ledger id)", code=code) from error
                last: Exception = error
            except NotConnected as error:
                code, last = type(error).__name__, error
            except HTTPClientError as error:
                code, last = type(error).__name__, error
                if not repeatable:
                    raise LedgerError(f"SharedLedger: DynamoDB {operation} on {self.table_name}: {code}; it may have been "
                                      "applied, so it is not repeated (the hold stays until its window passes)",
                                      code=code, retryable=True, lost=True) from error
            self.counts["throttled"] += 1
            if attempt < self.dynamodb_retries:
                ceiling = min(self.max_backoff_seconds, self.backoff_seconds * 2 ** attempt)
                self.sleep(self.rng.random() * ceiling)
        raise LedgerError(f"SharedLedger: DynamoDB {operation} on {self.table_name} kept failing ({code}) after "
                          f"{self.dynamodb_retries + 1} attempts", code=code, retryable=True) from last


class _ConditionFailed(Exception):
    def __init__(self, item: Mapping[str, Any] | None):
        super().__init__("condition failed")
        self.item = item


def _n(value: float) -> dict[str, str]:
    number = int(value) if float(value).is_integer() else value
    return {"N": str(number)}


def _number(value: Any) -> float | None:
    text = value.get("N") if isinstance(value, Mapping) else None
    try:
        number = float(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return number if number is not None and math.isfinite(number) else None


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _parse_want(value: Any) -> tuple[tuple[str, float], tuple[int, bool] | None, float] | None:
    """A w# attribute: "<time> <tokens>" (a floor owner's), "<time> <tokens> <priority>" (the same, of a
    consumer above the lowest priority) or "<time> <tokens> <priority> borrowing"; on bedrock-mantle
    "o<output>" follows <tokens> (the output tokens it waits for: WANT_OUTPUT_PATTERN, whole digits and
    nothing else). Returns ((time, tokens), (priority rank, borrowing) or None, output: 0 without the
    output part); None if malformed."""
    text = value.get("S") if isinstance(value, Mapping) else None
    if not isinstance(text, str):
        return None
    parts = text.split(" ")
    tokens = _number({"N": parts[1]}) if len(parts) >= 2 else 0.0 if len(parts) == 1 else None
    if tokens is None or tokens < 0:
        return None
    output = 0.0
    if len(parts) >= 3 and parts[2].startswith(WANT_OUTPUT_MARK):
        found = WANT_OUTPUT_PATTERN.fullmatch(parts[2])
        if found is None:
            return None
        output = float(found.group(1))
        del parts[2]
    if len(parts) > 4:
        return None
    if len(parts) <= 2:
        return (parts[0], tokens), None, output
    if parts[2] not in PRIORITIES or (len(parts) == 4 and parts[3] != "borrowing"):
        return None
    return (parts[0], tokens), (PRIORITIES.index(parts[2]), len(parts) == 4), output


def _slot_name(start: float) -> str:
    return datetime.fromtimestamp(start, UTC).strftime(SLOT_FORMAT)


def _parse_slot(name: str, now: float, prefix: str = SLOT_PREFIX) -> tuple[float | None, str | None]:
    """A slot's start (epoch seconds) and consumer: "s#HH:MM:SS#c" is the moment of that UTC time of day
    nearest `now`; "s#YYYY-MM-DDTHH:MM:SS#c" (an earlier version's name) is that second. prefix: "o#"
    for a bedrock-mantle output slot."""
    body = name[len(prefix):]
    stamp, sep, consumer = body.partition("#")
    if not sep or not consumer:
        return None, None
    if len(stamp) == 8 and stamp[2] == stamp[5] == ":":
        hours, minutes, seconds = stamp[:2], stamp[3:5], stamp[6:]
        if not (hours.isdigit() and minutes.isdigit() and seconds.isdigit()) or not (
                int(hours) < 24 and int(minutes) < 60 and int(seconds) < 60):
            return None, None
        start = math.floor(now / SECONDS_PER_DAY) * SECONDS_PER_DAY + int(hours) * 3600 + int(minutes) * 60 + int(seconds)
        if start - now > HALF_DAY_SECONDS:
            start -= SECONDS_PER_DAY
        elif now - start >= HALF_DAY_SECONDS:
            start += SECONDS_PER_DAY
        return float(start), consumer
    try:
        return datetime.strptime(stamp, ISO_SECOND_FORMAT).replace(tzinfo=UTC).timestamp(), consumer
    except ValueError:
        return None, None


def _slot_day(name: str, now: float) -> str | None:
    """The UTC day a slot's hold was reserved on (its start's), None if its name is not a slot's."""
    start, _ = _parse_slot(name, now)
    return None if start is None else _day(start)


def _day(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime(DAY_FORMAT)


def _is_day(text: str) -> bool:
    try:
        datetime.strptime(text, DAY_FORMAT)
    except ValueError:
        return False
    return True


def _iso_ms(epoch: float) -> str:
    moment = datetime.fromtimestamp(epoch, UTC)
    return moment.strftime(ISO_SECOND_FORMAT) + f".{moment.microsecond // 1000:03d}Z"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
