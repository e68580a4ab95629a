"""A Step Functions model task that takes part in the shared quota ledger, without a Lambda per call.

`QuotaLedger` keeps one model quota's reserve-then-settle ledger in one DynamoDB item that every
consumer writes (the item layout and protocol: pacer_runtime.ledger, whose docstring is the design).
A process consumer (QuotaPacer, the QueuedInference worker) reads the item, decides in Python and
writes a conditional UpdateItem. A state machine cannot read an item's attribute names (JSONPath has
no keys(); the offline runner does not execute JSONata, so this library keeps its state machines on
JSONPath), cannot multiply (the only arithmetic intrinsic is States.MathAdd) and cannot do date
arithmetic. So a model task with `ledger=` writes the same item with the same three updates, every
number that needs a product computed at synth:

    <call> ledger slot   Pass: the hold's slot, s#<UTC time of day the state was entered>#<consumer>,
                         from the context object's EnteredTime ("2019-03-26T20:14:13.192Z": the
                         fraction and zone split off, then the date, with States.StringSplit:
                         "s#20:14:13#<consumer>"), and its day, d#<the date before the 'T'>, in an
                         envelope beside the item ({"input": <item>, "slot": ...,
                         "day": ...}: any JSON item works, and comes back as it was; see
                         ENVELOPE_INPUT).
    <call> reserve       DynamoDB UpdateItem (the optimized integration, no Lambda):
                           ADD held :r, h#<consumer> :r, <slot> :r, <day> :r
                           REMOVE expires_at, w#<consumer>
                           IF (held is absent OR held <= Q - r) AND (h#<consumer> is absent OR
                              h#<consumer> <= burst - r) AND (<day> is absent OR <day> <= D - r)
                         r, Q - r, burst - r and D - r are numbers written at synth (D: the
                         ledger's day, QuotaLedger.shared_daily_tokens): r is the pacer's
                         reservation, the share profile's prompt (input + cache writes + cache reads)
                         + ceil(max_tokens x burndown). A refusal (DynamoDB.ConditionalCheckFailed
                         Exception) is caught into:
    <call> ledger try again?   Choice: after LEDGER_RETRY_ATTEMPTS refused tries (about 10 minutes),
                         the call fails with that error, having called nothing (<call> failed);
                         else
    <call> ledger want   DynamoDB UpdateItem: this consumer's want, as a refused process writes it:
                           SET w#<consumer> = "<time> r", wanted = "<time>", wanted_by = <consumer>
                           IF (h#<consumer> is absent OR h#<consumer> <= floor - r) AND
                              (<day> is absent OR <day> <= D - r)
                         <time> the second this state was entered, "2019-03-26T20:14:13.000Z" (the
                         processes' want time, to the millisecond: the fraction is dropped, see
                         WANT_TIME_FORMAT). So borrowers beyond their floors leave r free while the
                         want is recent (want_seconds), and the reservation that is admitted removes
                         it (REMOVE w#<consumer>, as a served process does). Any failure (its
                         condition: the try would borrow, or the day is spent; a throttle) is caught
                         and ignored, and the loop goes on. Absent when r exceeds the floor.
    <call> ledger wait   Wait: the seconds the slot Pass drew (States.MathRandom, 1 s to a cap
                         doubling from 2 to 8 s), then
    <call> ledger slot again   Pass: a new slot and day from this state's EnteredTime, the count
                         plus one (States.MathAdd) and the next wait; then the reservation again.
                         It never calls the model meanwhile, so the wait costs no throttle. A
                         throttled or failing DynamoDB (DYNAMODB_RETRY_ERRORS) is caught the same
                         way (<call> ledger throttled again?, <call> ledger throttled: its own
                         count, DYNAMODB_RETRY_ATTEMPTS tries), then the call goes on without the
                         ledger, paced to the consumer's floor (below, "When DynamoDB fails"):
    <call> ledger fallback metric, <call> ledger fallback wait, <call> ledger fallback call
    <call>               the Converse task, unchanged but for one more field in its selection (the
                         whole Usage); it reads the item from the envelope and puts its selection
                         beside it. Its own Retry still retries throttles while the hold is kept.
    <call> release       on any failure left after its Retry: ADD -r to the same four attributes, IF
                         the slot exists; then the call fails as before (<call> failed: a Fail state
                         with the original error and cause). The hold comes back at once.
    <call> charge...     the settlement's delta, input + cache writes + output x burndown - r, summed
                         with nested States.MathAdd (at most 10 intrinsics in a field: the output is
                         added ceil(burndown) times, ten at a time); cache writes are optional in
                         Converse's usage, so a Choice picks the sum with or without them.
    <call> settle        ADD delta to the same four attributes, IF the slot exists: a slot that
                         already left the window takes nothing, as Bedrock ignores a late
                         settlement. Any failure here (that refusal, or DynamoDB failing past the
                         task's Retry) is caught and the answer goes on: it is paid for, and the
                         hold then counts until its window passes, never less. Then the answer
                         states, as without a ledger; with a result_path below $, <call> ledger
                         answer puts the answer into the item.

When DynamoDB fails (issue 25: "when DynamoDB throttles or cannot be reached, each consumer falls back to
its guaranteed floor locally (never to unbounded) and publishes a metric saying so"): a process falls back
to its static share (QuotaPacer's fallback_tpm). A state machine keeps nothing between calls, and its
iterations share nothing but the item DynamoDB cannot serve, so its floor is kept by a wait fixed at synth.
After DYNAMODB_RETRY_ATTEMPTS throttled or failing reservations (a refusal is the ledger answering: it still
waits and, after LEDGER_RETRY_ATTEMPTS, fails), the call takes:

    <call> ledger fallback metric   PutMetricData through the AWS SDK integration (aws-sdk:cloudwatch):
                         LedgerFallbacks = 1 in the GenaiPacer namespace by LedgerId, what QuotaPacer
                         publishes for its fallback outside Lambda (pacer_runtime.metrics). Any failure
                         is caught and the call goes on: a metric never fails it. The role may
                         PutMetricData in that namespace only (cloudwatch:namespace).
    <call> ledger fallback wait     Wait: w seconds, written at synth (below).
    <call> ledger fallback call     the same Converse task with the same Retry, without the ledger: no
                         hold was written, so there is nothing to settle or release (DynamoDB is what
                         fails). Its answer goes to the same answer states, so the item succeeds; its
                         failure goes to <call> failed with its own error.

The wait. The construct runs at most M calls at once: its Map's MaxConcurrency (the burst's plan when the
share has burst_tpm: the burst cap in calls) or ParallelPrompts' branch count, times the executions the
share was drawn for (ModelQuota.share(executions=...): MaxConcurrency and a Parallel's width apply to each
execution); ScheduledPrecompute's runs never overlap (its run lock), so its M is its MaxConcurrency. Each of
the M places runs one call after another. If each fallback call first waits w seconds and a call takes
about c seconds (the share's call_seconds), the M places start at most M / (c + w) calls a second, each
holding r (the reservation above, prompt + max_tokens x burndown: what Bedrock counts when the call starts),
and the floor allows floor_tpm / 60 tokens a second (floor_tpm / r / 60 calls). So

    w = max(0, ceil(M x r x 60 / floor_tpm - c))

the least whole number of seconds (a Wait's Seconds is an integer, at most WAIT_MAX_SECONDS) that keeps
M x r / (c + w) within floor_tpm / 60. Why this and not another:
- No shared state: a token bucket or a count of the calls in flight needs a store, and the store that
  fails is DynamoDB; a Lambda to keep one would add a function per call. A wait needs only M, r, c and the
  floor, all known at synth (a deploy-time or unbounded max_concurrency is refused with ledger=: M is not).
- Per call, with the call's own r: a ParallelPrompts branch of a larger max_tokens waits longer, each call
  takes at most 1/M of the floor, and together they keep it. The synthesis is paced as one of the M (it may
  run beside another execution's branches).
- r, not the settled tokens: what Bedrock holds at admission is the reservation, so the wait errs long.
- c is the share's average call: a shorter call starts its successor sooner, so the bound holds on average,
  as the share's plan does (it counts calls of call_seconds too).
- A floor that holds M calls back to back needs no wait (w = 0): the calls are as fast as without a ledger
  and the construct's cap holds them.
The floors add up within the quota (the plan checks it), so while every consumer falls back the quota
holds, as when every process is on its static share. The fallback calls write nothing, so nobody sees them
in the item: the other consumers' borrowing can meet them at the model, which Bedrock throttles and their
Retry waits out (the ledger failing is rare; its Retry is what covered it before). A share whose TPM is 0
(a reserved share its part of the reservation holds whole) has no floor: its call fails after the tries, as before. The
wait counts against the execution's timeout (an EXPRESS ParallelPrompts runs at most 5 minutes).

Why this mechanism and not another:
- The same item and attributes as every process consumer, so each sees the others' holds: the
  pacers' admission reads `held` and h#, and their writes remove expired slots of every consumer,
  the state machine's included (subtracting them from held and its h#).
- A conditional write per reservation, one per settlement: the pacer's cost per call. Leases of token
  blocks need a consumer that remembers its lease between calls; a Map's iterations share nothing but
  the item, and an admission step of their own would add a Lambda (or a second write) per call.
- The burndown is applied at synth (r) and by repeated addition (the settlement), so no
  multiplication is needed anywhere: an update expression can only add and subtract.
- Raw per-consumer output counters with the burndown applied where the ledger is read would need
  every reader to know every consumer's burndown and a second attribute per slot; one quota has one
  burndown, known at synth, so charging it at write time keeps the item the pacers already read.
- The slot, the charge and the answer travel in the state (an envelope), not in workflow variables:
  the offline runner's interpreter (moto's) resolves a variable reference only through JSONata.
- Each try of a reservation names its own slot, so a loop of states (Catch, Choice, Wait, Pass) and
  not the task's Retry: a Retry runs the task again with the input it first had, the slot named before
  the first try. Bedrock counts a call from when it starts; a hold admitted after waiting more than a
  minute in a slot named before the wait would already have left the window, and the next process
  write would remove it while Bedrock still counts the call. The same holds for DynamoDB's throttles
  of the reservation (their waits add up to most of a minute), so they take the same loop; the
  settlement's and release's Retry keep theirs, since they must write the slot the reservation wrote.
  The loop costs state transitions a Retry did not (LEDGER_STATES_PER_REFUSAL a refused try, against
  one): the price of a hold that counts as long as Bedrock counts its call. The wait is drawn once per
  try (States.MathRandom, jittered so that many waiting iterations do not retry together) and its cap
  follows a small table (States.Array, indexed with States.ArrayGetItem), as a state machine cannot
  multiply or compare numbers outside a Choice.

The daily token quota: the day is counted as SharedLedger counts it (pacer_runtime.ledger, "The daily
token quota"): the same d#<UTC day> attribute, the day of the hold's slot, the reservation checked
against the ledger's daily tokens in the same conditional write, its settlement and release added in
theirs (no write more per call), a settlement after the slot left the window not counted. So a Map
cannot run past a daily quota the processes respect, nor they past what its calls spent. A
reservation the day cannot hold is refused like one the window cannot hold: it waits and tries again
(about 10 minutes) and then fails with DynamoDB.ConditionalCheckFailedException, having called
nothing; the day only frees at 00:00 UTC, so it fails rather than wait for it.

What a state machine cannot do, and what covers it:
- It does not remove expired slots (no date arithmetic, no attribute listing): its holds leave the
  window when any process consumer writes the item, or when QuotaLedger's sweeper runs (added by
  ledger_consumer through note_state_machine; lambda/quota_sweeper calls SharedLedger.sweep every
  5 s, so a hold counts at most about 5 s past its window, well inside a refused reservation's waiting).
- It does not read other consumers' wants, so beyond its floor it borrows without leaving room for a
  floor owner who waits. It is admitted while the window holds Q and its own holds its burst cap (its
  share's burst_tpm, default Q; at most Q), and its MaxConcurrency (or branch count) bounds it in calls.
  Q (QuotaLedger.shared_tpm: the allocatable TPM less the shares held outside every ledger) is known only
  once the app is complete, so Q - r, burst - r and D - r (the day likewise: QuotaLedger.shared_daily_tokens)
  are tokens resolved at synth. It does write its own want (<call> ledger want), so the processes
  borrowing beyond their floors leave its floor free, as they do for a waiting process. Without it (before issue 25's fix) a BoundedMap with a floor share beside 4
  busy processes waited its whole reservation budget and failed. Its want differs from a process's in
  three ways: it is written on every refused try within the floor (a process writes at most once per
  want_seconds / 2: the state machine keeps no memory between tries, and its tries are 1 to 8 s apart,
  so one write a try is about as often); its time is the whole second, so it looks up to 1 s older than
  it is and is kept that much less; and it is written even if the refusal was the consumer's own burst
  cap (a floor is within the burst cap, so a try within its floor is refused by the window or the day,
  and the day is in the condition). Its want outlives the wait before its next try: QuotaLedger gives
  every consumer a want_seconds (QuotaLedger.want_seconds, 12 s with the default skew) covering the longest
  wait (8 s), the second its time is cut to, the clock skew and the states between. Before, the processes
  kept a want 5 s, and across a wait of 6 to 8 s a borrower could take the room for a minute. Why the
  processes' want and not the state machine's waits: shorter waits (at most 3 s) would have needed about
  300 tries for the same 10 minutes, over twice the state transitions and history events per waiting call
  (16 events a try: an inline Map's 25,000 fill twice as fast), and a want cannot carry a later time (no
  date arithmetic in JSONPath). The cost is on the processes' side and small: a want of a waiter that
  gave up (served wants are removed at once) keeps room 12 s instead of 5, and a process refreshes its
  own want every want_seconds / 2 (6 s, fewer want writes).
- Priorities (ModelQuota.share(..., priority=...); pacer_runtime.ledger, "Priorities"): a state machine
  takes part as "batch", the lowest, since the want it writes is a floor owner's, never one that
  waits to borrow at a priority (a priority want's room is kept by every lower borrower: one write more
  per refused try beyond the floor, and a PRIORITY_WAITING it cannot time); a share a state machine holds drawn "interactive" is refused at synth. While a consumer
  above the lowest priority waits, the processes keep PRIORITY_WAITING in the item (set by that
  consumer's want, removed, pinned to its value, by the first process write or sweep that sees no such
  want still recent: at most want_seconds (QuotaLedger.want_seconds, 12 s by default) after the last one, or at once when it is served). The
  reservation's condition then admits the state machine only within its floor: (h#<consumer> absent
  OR h#<consumer> <= floor - r) OR PRIORITY_WAITING absent, floor - r written at synth. So it never
  borrows the room an interactive consumer waits for, and its floor is kept as before. Why not leave
  free exactly what the waiter waits for, as a process does: that needs the number in the condition
  (held <= Q - r - wanted), and a condition compares an attribute with a value, never with another
  attribute or a sum; reading it first would take a GetItem state before each try (one more state
  transition and read per try, when waiting is already what costs), and the read would be stale by
  the write unless the write pinned it. Why not a time (a want's expiry compared with EnteredTime):
  a Retry re-runs the task with the EnteredTime of its first try, so a waiter that died without being
  served would block the state machine's borrowing until its Retry ran out; a flag the processes and
  the sweeper remove needs no clock. The cost: while an interactive consumer waits, a state machine
  beyond its floor waits too, even where the room would hold both, for at most want_seconds after the
  last want (the batch throughput it gives up is what the interactive consumer waits for, and more).
- It does not repair an item that does not add up: a `held` or h# that is not a number fails its
  condition (attribute_type), so it waits, as on a full window, until a process consumer repairs
  the item (SharedLedger repairs from the valid slots).
- It does not set the item's TTL (no clock it can add to): it removes expires_at, so an item a state
  machine holds tokens in is never dropped by TTL; a process consumer's next write sets it again.
- Each refused try adds its five states' events to the execution history (Step Functions stops a
  STANDARD execution at 25,000 events): an inline Map of many items that waits long should be a
  distributed one, whose child executions each have their own history.

The reservation uses the share profile's prompt size, not each item's (a state machine cannot count
tokens): a longer prompt holds less than Bedrock reserves for it until it settles, and the call's
own Retry covers the rare throttle that can follow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks

from constructs import Construct

from .._internal.checks import Checks, is_token, token_kind
from .._internal.runtime_constants import ledger_layout, metrics_constants
from .._internal.sfn_dynamodb import CONDITIONAL_CHECK_FAILED, DYNAMODB_ERROR_PREFIX, DYNAMODB_RETRY_ERRORS
from .._internal.tables import grant_table_key
from ..quota.ledger import (
    LEADING_KEYS,
    LEDGER_KEY_PREFIX,
    LEDGER_PARTITION_KEY,
    LEDGER_TTL_ATTRIBUTE,
    PRIORITIES,
    STATE_MACHINE_LONGEST_WAIT_SECONDS,
    QuotaLedger,
)

__all__ = [
    "CONDITIONAL_CHECK_FAILED",
    "DYNAMODB_ERROR_PREFIX",
    "DYNAMODB_RETRY_ERRORS",
    "FALLBACK_STATE_SUFFIXES",
    "LEDGER_RETRY_ATTEMPTS",
    "LEDGER_STATES_PER_REFUSAL",
    "LedgerConsumer",
]

#: A refused reservation waits and tries again in a slot named at that try (LedgerCall.admission): each
#: wait is a whole number of seconds drawn by States.MathRandom between 1 and a cap that doubles from 2 to
#: 8 s (slots leave the window every second, so a long cap only idles the quota). The developer guide
#: (https://docs.aws.amazon.com/step-functions/latest/dg/intrinsic-functions.html#asl-intrsc-func-math)
#: says MathRandom returns "a random number between the specified start and end number" without saying
#: whether the end is included (moto's interpreter includes it: random.randint), so each wait is 1 to 8 s
#: either way, never 0 (a retry in the same second only adds state transitions). 135 retries wait about
#: 9 to 10 minutes in all (4.5 s a try on average with the end included, 4 s without), the budget the
#: task's Retry had before, then the call fails with DynamoDB.ConditionalCheckFailedException as it did.
LEDGER_RETRY_WAIT_CAPS = (2, 4, STATE_MACHINE_LONGEST_WAIT_SECONDS)
LEDGER_RETRY_MIN_SECONDS = 1
LEDGER_RETRY_ATTEMPTS = 135
#: What the ledger adds to a Standard workflow's bill (docs/quota.md states both, a test counts the states
#: offline): the states a successful call enters beyond the call itself (slot, reserve, cache writes?,
#: charge, charge output, settle), and LEDGER_STATES_PER_REFUSAL for each refused try (ledger try again?,
#: ledger want, ledger wait, ledger slot again, reserve; one fewer where a call's r exceeds its floor: no want), up to LEDGER_RETRY_ATTEMPTS. Step Functions pricing page (https://aws.amazon.com/step-functions/pricing/,
#: stored copy): "You are charged for the total number of state transitions across all your state
#: machines, including retries"; US East (N. Virginia): $0.0250 per 1,000 state transitions.
LEDGER_STATES_PER_CALL = 6
LEDGER_STATES_PER_REFUSAL = 5
STATE_TRANSITION_USD = 0.025 / 1_000
#: A throttled or failing DynamoDB call of a ledger task (DYNAMODB_RETRY_ERRORS) is retried as
#: ScheduledPrecompute's DynamoDB tasks are: 1 s doubling, 6 tries, full jitter (the reservation's 6 tries
#: go through LedgerCall.admission, each in a new slot, with the refusals' waits).
DYNAMODB_RETRY_ATTEMPTS = 6
#: "You can nest up to 10 intrinsic functions within a field"
#: (https://docs.aws.amazon.com/step-functions/latest/dg/intrinsic-functions.html); States.MathAdd takes
#: two integers, so one field adds at most 11 terms.
MAX_NESTED_INTRINSICS = 10
#: The envelope a ledger-paced call works in, so the item is never changed and any JSON item works: the
#: slot Pass wraps the item as `input` beside the hold's `slot`; the model task reads `input` and puts
#: its selection in `call`; the charge goes in `charge`, a failure in `error`; the answer in `answer`
#: until it is put back where the task's result_path says. (Workflow variables would need no envelope,
#: but the offline runner's interpreter resolves a variable reference only through JSONata.)
ENVELOPE_INPUT = "$.input"
ENVELOPE_SLOT = "$.slot"
ENVELOPE_DAY = "$.day"
ENVELOPE_CALL = "$.call"
ENVELOPE_CHARGE = "$.charge"
ENVELOPE_ERROR = "$.error"
ENVELOPE_ANSWER = "$.answer"
#: The context object's $$.State.EnteredTime is "Format: ISO 8601"
#: (https://docs.aws.amazon.com/step-functions/latest/dg/input-output-contextobject.html), in UTC with a
#: fraction on AWS ("2019-03-26T20:14:13.192Z"); moto's interpreter writes Python's isoformat
#: ("...T20:14:13.192000+00:00", no fraction at a whole second). Cutting at the first '.', 'Z' and '+'
#: leaves the whole second in every one of these forms, and what follows its 'T' (ENTERED_DAY_CUT) is its
#: UTC time of day, the ledger's slot name (pacer_runtime.ledger SLOT_FORMAT "%H:%M:%S"). A '-hh:mm'
#: offset is not cut (the date has '-' too): Step Functions writes UTC. Each cut is one single-character
#: States.StringSplit (what every interpreter agrees on) and an ArrayGetItem: 8 nested intrinsics and the
#: Format, within MAX_NESTED_INTRINSICS.
ENTERED_TIME_CUTS = (".", "Z", "+")
#: The item's attributes a state machine writes: SharedLedger's own names (lambda/pacer_runtime/ledger_layout.py,
#: the one file both sides load).
HELD: str = ledger_layout().HELD
CONSUMER_PREFIX: str = ledger_layout().CONSUMER_PREFIX
SLOT_PREFIX: str = ledger_layout().SLOT_PREFIX
DAY_PREFIX: str = ledger_layout().DAY_PREFIX
#: Present while a consumer above the lowest priority waits (pacer_runtime.ledger, "Priorities"): a state
#: machine borrows only while it is absent.
PRIORITY_WAITING: str = ledger_layout().PRIORITY_WAITING
#: A consumer's want and who wrote the latest (ledger_layout's WANT_PREFIX, WANTED, WANTED_BY): a
#: state machine refused within its floor writes them as a process does (LedgerCall.want).
WANT_PREFIX: str = ledger_layout().WANT_PREFIX
WANTED: str = ledger_layout().WANTED
WANTED_BY: str = ledger_layout().WANTED_BY
#: A want's time as pacer_runtime.ledger writes it (_iso_ms: ISO_SECOND_FORMAT, '.', milliseconds, 'Z';
#: compared as text with the readers' own such times): the whole second of EnteredTime (ENTERED_TIME_CUTS)
#: and ".000Z", as the fraction's digits differ between Step Functions (3) and moto (6, none at a whole
#: second) and no intrinsic cuts a string to a length. So a want looks up to 1 s older than it is.
WANT_TIME_FORMAT = "{}.000Z"
#: The day of $$.State.EnteredTime: the date before its 'T' (ISO 8601's date and time separator, in every
#: form ENTERED_TIME_CUTS lists), the UTC day pacer_runtime.ledger names d#<day> by (DAY_FORMAT "%Y-%m-%d").
ENTERED_DAY_CUT = "T"
#: Characters States.Format takes literally only escaped (\' \{ \} \\: the developer guide's intrinsic
#: functions page, "Reserved characters in intrinsic functions").
_INTRINSIC_ESCAPES = {"'": "\\'", "{": "\\{", "}": "\\}", "\\": "\\\\"}
#: The fallback (module docstring, "When DynamoDB fails"): the states a call takes once its reservation's
#: DynamoDB failures used up their DYNAMODB_RETRY_ATTEMPTS, after its name: the metric, the floor's wait,
#: the model call without the ledger.
FALLBACK_METRIC_SUFFIX = " ledger fallback metric"
FALLBACK_WAIT_SUFFIX = " ledger fallback wait"
FALLBACK_CALL_SUFFIX = " ledger fallback call"
FALLBACK_STATE_SUFFIXES = (FALLBACK_METRIC_SUFFIX, FALLBACK_WAIT_SUFFIX, FALLBACK_CALL_SUFFIX)
#: A Wait state's Seconds: "a positive, integer value from 0 up to 99999999" (the developer guide's Wait
#: state page, https://docs.aws.amazon.com/step-functions/latest/dg/amazon-states-language-wait-state.html).
WAIT_MAX_SECONDS = 99_999_999
#: The fallback's metric is published as the processes publish theirs (pacer_runtime.metrics: NAMESPACE,
#: LEDGER_FALLBACKS, LEDGER_DIMENSION; QuotaPacer emits it by LedgerId), through the AWS SDK integration:
#: "arn:aws:states:::aws-sdk:<service>:<apiAction>" with the action in camel case
#: (https://docs.aws.amazon.com/step-functions/latest/dg/supported-services-awssdk.html), CloudWatch's
#: PutMetricData; its parameters as botocore's cloudwatch 2010-08-01 model names them (PutMetricDataInput:
#: Namespace, MetricData; MetricDatum: MetricName, Dimensions, Value, Unit; Dimension: Name, Value).
PUT_METRIC_DATA_RESOURCE = "arn:{partition}:states:::aws-sdk:cloudwatch:putMetricData"
#: The IAM action, which takes no resource but "*", and the condition key that limits it to one namespace
#: (CloudWatch user guide, "Using condition keys to limit access to CloudWatch namespaces",
#: https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/iam-cw-condition-keys-namespace.html:
#: "Action": "cloudwatch:PutMetricData", "Condition": {"StringEquals": {"cloudwatch:namespace": ...}}).
PUT_METRIC_DATA_ACTION = "cloudwatch:PutMetricData"
NAMESPACE_CONDITION_KEY = "cloudwatch:namespace"


@dataclass(frozen=True)
class LedgerConsumer:
    """How one state machine's model calls take part in a QuotaLedger (built by the constructs)."""

    ledger: QuotaLedger
    name: str  # the consumer's name in the item (its share's)
    floor_tpm: float
    burst_tpm: float
    input_tokens: int  # the share profile's prompt: input + cache writes + cache reads
    #: the allocatable day (QuotaLedger.daily_tokens), for the check at construction; the day the consumers
    #: share, less the shares held outside every ledger, is QuotaLedger.shared_daily_tokens() at synth
    daily_tokens: int
    #: the share's average call duration (its plan's call_seconds), c in the fallback's wait
    call_seconds: float
    #: M, the most calls the construct runs at once (module docstring, "When DynamoDB fails"): its Map's
    #: MaxConcurrency or its branch count, times the executions its share may run at once
    calls_at_once: int

    def reservation(self, max_tokens: int) -> int:
        """r: what a call holds while it runs (QuotaPacer.reservation with hold_output_burndown)."""
        return self.ledger.hold(self.input_tokens, max_tokens)

    @property
    def falls_back(self) -> bool:
        """Whether a call whose reservation DynamoDB keeps failing goes on to the floor's fallback: only
        with a floor (a share whose TPM is 0, such as a reserved share the reservation holds whole, has
        none to fall back to: its call fails as before)."""
        return self.floor_tpm > 0

    def fallback_wait_seconds(self, r: int) -> int:
        """w: the seconds each fallback call of reservation r waits before it calls, so that M calls at
        once, each taking call_seconds, stay within the floor: M / (c + w) calls a second of r tokens
        each is at most floor_tpm / 60 tokens a second, w = max(0, ceil(M x r x 60 / floor_tpm - c))
        (module docstring, "When DynamoDB fails")."""
        # rounded first, so a wait of exactly n seconds is not n + 1 for a float's last digit
        return max(0, math.ceil(round(self.calls_at_once * r * 60 / self.floor_tpm - self.call_seconds, 9)))

    def grant(self, grantee: sfn.StateMachine, *, metric: bool = True) -> None:
        """KMS on a customer-managed table key (the UpdateItem tasks grant UpdateItem themselves, on
        this quota's item only), and, for the fallback's metric, cloudwatch:PutMetricData in the
        processes' namespace only (`metric`: False where the state machine is granted it already)."""
        grant_table_key(self.ledger.table, grantee, ("kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKey"))
        if not metric or not self.falls_back:
            return
        scope = cast(Construct, grantee.node.scope)  # a state machine is always built inside its construct
        # PutMetricData takes no resource but "*": a policy of its own, so that only its finding is acknowledged
        policy = iam.Policy(scope, "LedgerFallbackMetricPolicy", statements=[iam.PolicyStatement(
            actions=[PUT_METRIC_DATA_ACTION], resources=["*"],
            conditions={"StringEquals": {NAMESPACE_CONDITION_KEY: metrics_constants().NAMESPACE}})])
        grantee.role.attach_inline_policy(policy)
        cdk.Validations.of(policy).acknowledge(cdk.Acknowledgment(
            id="AwsSolutions-IAM5[Resource::*]",
            reason=f"{PUT_METRIC_DATA_ACTION} supports no resource-level permissions; the statement is limited to the "
                   f"{metrics_constants().NAMESPACE} namespace by the {NAMESPACE_CONDITION_KEY} condition (the shared "
                   "quota ledger's LedgerFallbacks metric)"))


def ledger_consumer(
    check: Checks,
    scope: Construct,
    ledger: Any,
    *,
    model: Any,
    plan: Any = None,
    calls_per_execution: Any,
    one_execution_at_a_time: bool = False,
) -> LedgerConsumer | None:
    """The consumer a construct's model calls are in `ledger`: the share it holds (given as
    max_concurrency=quota.share(...), or drawn under the construct's id). None (with the problem
    recorded) without a ledger or when a check failed.

    calls_per_execution: the most calls one execution runs at once (the Map's MaxConcurrency, the
    branch count; None when its own check failed), times the share's executions (unless
    `one_execution_at_a_time`: a construct whose runs never overlap) is M, the fallback's concurrency."""
    if QuotaLedger.of_model(check, ledger, model, consumer="this construct") is None:
        return None
    if calls_per_execution is None:  # its own check recorded why
        return None
    if is_token(calls_per_execution):
        check.fail(f"max_concurrency is a deploy-time {token_kind(calls_per_execution)}, but with ledger= a call whose "
                   "reservation DynamoDB keeps failing waits, before it calls without the ledger, the seconds that keep "
                   "this many calls at once within the share's floor, written into the state machine at synth: pass an "
                   "int or the share's plan", id="max_concurrency.deploy-time-with-ledger")
        return None
    if not check.rule(
        calls_per_execution > 0,
        "max_concurrency=0 (unbounded) with ledger=: a call whose reservation DynamoDB keeps failing calls without the "
        "ledger, paced to the share's floor by the calls the construct runs at once, which an unbounded Map does not "
        "limit; pass the share's plan (max_concurrency=quota.share(...)) or drop allow_unbounded",
        id="max_concurrency.unbounded-with-ledger",
    ):
        return None
    quota = ledger.quota
    share = QuotaLedger.share_name(quota, plan)
    if share is None and scope.node.id in quota.shares:
        share = scope.node.id
    if share is None:
        check.fail(
            f"ledger: no share of ModelQuota {quota.node.id} is this construct's; a state machine reserves the "
            "share profile's prompt size for each call (it cannot count tokens), so draw one: pass "
            f"max_concurrency=quota.share(...) or draw a share named {scope.node.id!r}",
            id="ledger.no-share",
        )
        return None
    if not check.rule(
        "#" not in share and len(share) <= 80,
        f"ledger: the share {share!r} names this consumer in the ledger's attribute names, which allow at most "
        "80 characters and no '#'; draw the share under such a name",
        id="ledger.state-machine-share-name",
    ):
        return None
    drawn = quota.shares[share].priority
    if not check.rule(
        drawn in (None, PRIORITIES[0]),
        f"ledger: the share {share!r} was drawn with priority={drawn!r}, but a state machine takes part as "
        f"{PRIORITIES[0]!r}: it writes a want only within its floor, never that it waits to borrow "
        f"(it keeps no priority in its want), so no consumer would keep room for it beyond; draw the share with priority={PRIORITIES[0]!r} or none",
        id="ledger.interactive-state-machine",
    ):
        return None
    floor = quota.shares[share].tpm
    # A state machine reads no wants (see the module docstring): its burst cap is its share's burst_tpm,
    # else the allocatable quota, and its MaxConcurrency (or branch count) bounds it in calls.
    declared = quota.shares[share].burst_tpm
    burst = ledger.quota_tpm if declared is None else declared
    profile = quota.shares[share].profile
    prompt = int(profile.input_tokens + profile.cache_write_tokens + profile.cache_read_tokens)
    drawn_share = quota.shares[share]
    executions = 1 if one_execution_at_a_time else drawn_share.executions
    ledger.note_state_machine(scope.node.path)
    ledger._declared.add(share)
    return LedgerConsumer(ledger=ledger, name=share, floor_tpm=floor, burst_tpm=burst, input_tokens=prompt,
                          daily_tokens=ledger.daily_tokens, call_seconds=float(drawn_share.per_execution.call_seconds),
                          calls_at_once=int(calls_per_execution) * executions)


def check_ledger_request(check: Checks, consumer: LedgerConsumer | None, request: Any, result_selector: Any,
                         name: str = "request") -> None:
    """What a ledger-paced call needs at synth: a Converse request (its usage is the settlement), the
    default selection (the settlement reads the usage from it), a max_tokens known at synth (r is)."""
    from .model_tasks import ConverseRequest

    if consumer is None:
        return
    if not isinstance(request, ConverseRequest):
        check.fail(f"{name}: ledger= settles each call from Converse's usage; a NativeRequest's body is the model's "
                   "own format: use ConverseRequest(...) or drop ledger", id="request.native-with-ledger")
        return
    if result_selector is not None:
        check.fail("task_options.result_selector with ledger=: the settlement reads the call's usage from the "
                   "default selection; drop result_selector (the answer keeps text, stopReason and usage) or drop ledger",
                   id="task_options.result-selector-with-ledger")
    if is_token(request.max_tokens):
        check.fail(f"{name}.max_tokens is a deploy-time {token_kind(request.max_tokens)}, but with ledger= each call's "
                   "reservation (input + max_tokens x burndown) is written into the state machine at synth: pass an int",
                   id="request.max-tokens-deploy-time-with-ledger")
        return
    if not isinstance(request.max_tokens, int):  # ConverseRequest refused it already
        return
    r = consumer.reservation(request.max_tokens)
    # Checked again once the app is complete against what the shares outside the ledger leave (Q is known then)
    consumer.ledger.note_reservation(f"the state machine of share {consumer.name!r} ({name})", r)
    check.rule(
        r <= consumer.burst_tpm,
        f"{name}: a call reserves {r:,} tokens (the share's prompt + max_tokens={request.max_tokens:,} x burndown "
        f"{consumer.ledger.quota.burndown:g}), more than the consumer may hold ({consumer.burst_tpm:,.0f} TPM): it "
        "could never be admitted; lower max_tokens or raise the share's burst_tpm",
        id="request.reservation-above-burst",
    )
    check.rule(
        r <= consumer.daily_tokens,
        f"{name}: a call reserves {r:,} tokens, more than the ledger's whole day ({consumer.daily_tokens:,} tokens: "
        "the ModelQuota's daily_token_quota x (1 - keep_free)): it could never be admitted; lower max_tokens or raise "
        "daily_token_quota",
        id="request.reservation-above-daily",
    )
    if consumer.falls_back:
        wait = consumer.fallback_wait_seconds(r)
        check.rule(
            wait <= WAIT_MAX_SECONDS,
            f"{name}: a call reserves {r:,} tokens, and {consumer.calls_at_once:,} of them at once within the share's "
            f"floor of {consumer.floor_tpm:,.0f} TPM would each wait {wait:,} s when DynamoDB fails and the call goes on "
            f"without the ledger, beyond a Wait state's {WAIT_MAX_SECONDS:,} s; lower max_tokens or max_concurrency, "
            "or raise the share",
            id="request.fallback-wait-above-wait-limit",
        )


def _escaped(text: str) -> str:
    return "".join(_INTRINSIC_ESCAPES.get(c, c) for c in text)


def _sum(terms: list[str]) -> str:
    """Nested States.MathAdd of the terms (at most MAX_NESTED_INTRINSICS + 1)."""
    expression = terms[0]
    for term in terms[1:]:
        expression = f"States.MathAdd({expression}, {term})"
    return expression


@dataclass
class LedgerCall:
    """The ledger's states around one model task (model_call builds it)."""

    consumer: LedgerConsumer
    scope: Construct
    id: str
    max_tokens: int
    #: Where the hold's slot and the charge are kept in the state: the envelope's by default; a construct
    #: whose state is its own object (ScheduledPrecompute's items) keeps them in a field of it.
    slot_path: str = ENVELOPE_SLOT
    charge_path: str = ENVELOPE_CHARGE

    def __post_init__(self) -> None:
        self.r = self.consumer.reservation(self.max_tokens)
        #: The hold's day attribute (d#<UTC day>) sits beside its slot: the slot Pass writes both.
        self.day_path = self.slot_path.rpartition(".")[0] + ".day"

    # the states --------------------------------------------------------------------------------------

    def slot(self, again: bool = False) -> sfn.Pass:
        """The hold's slot from the second the state was entered: "2019-03-26T20:14:13.192Z" loses its
        fraction ('.') and its zone ('Z', or '+' in an offset form), then its date ('T'), to
        States.StringSplit: s#20:14:13#<consumer>. Beside it, the refused tries so far (`retries`), the
        throttled ones (`throttled.count`) and the wait before the next try should this one fail (`wait`, with
        the index of the cap after it, `backoff`). `again`: the Pass a refused try comes back through,
        which names a new slot for the next try (its input is the envelope, or the state with the ledger
        field, not the item)."""
        entered = "$$.State.EnteredTime"
        second = entered
        for delimiter in ENTERED_TIME_CUTS:
            second = f"States.ArrayGetItem(States.StringSplit({second}, '{delimiter}'), 0)"
        second = f"States.ArrayGetItem(States.StringSplit({second}, '{ENTERED_DAY_CUT}'), 1)"  # its UTC time of day
        name = f"{SLOT_PREFIX}{{}}#{_escaped(self.consumer.name)}"
        slot = f"States.Format('{name}', {second})"
        # The same EnteredTime's date: the slot's UTC day, as SharedLedger counts a hold on its slot's day.
        day = f"States.Format('{DAY_PREFIX}{{}}', States.ArrayGetItem(States.StringSplit({entered}, '{ENTERED_DAY_CUT}'), 0))"
        parent, _, field = self.slot_path.rpartition(".")
        caps = ", ".join(str(c) for c in LEDGER_RETRY_WAIT_CAPS)
        after = ", ".join(str(min(i + 1, len(LEDGER_RETRY_WAIT_CAPS) - 1)) for i in range(len(LEDGER_RETRY_WAIT_CAPS)))
        tries: dict[str, Any] = {
            "retries.$": f"States.MathAdd({parent}.retries, 1)",
            "wait.$": f"States.MathRandom({LEDGER_RETRY_MIN_SECONDS}, States.ArrayGetItem(States.Array({caps}), "
                      f"{parent}.backoff))",
            "backoff.$": f"States.ArrayGetItem(States.Array({after}), {parent}.backoff)",
            "throttled.$": f"{parent}.throttled",
        } if again else {
            "retries": 0,
            "throttled": {"count": 0},
            "wait.$": f"States.MathRandom({LEDGER_RETRY_MIN_SECONDS}, {LEDGER_RETRY_WAIT_CAPS[0]})",
            "backoff": min(1, len(LEDGER_RETRY_WAIT_CAPS) - 1),
        }
        id = f"{self.id} ledger slot again" if again else f"{self.id} ledger slot"
        if self.slot_path == ENVELOPE_SLOT:
            item = ENVELOPE_INPUT if again else "$"
            return sfn.Pass(self.scope, id, parameters={"input.$": item, "slot.$": slot, "day.$": day, **tries})
        return sfn.Pass(self.scope, id, parameters={f"{field}.$": slot, "day.$": day, **tries}, result_path=parent)

    def admission(self, refused: sfn.IChainable, error_path: str, fallback: sfn.IChainable | None
                  ) -> tuple[sfn.Pass, tasks.DynamoUpdateItem]:
        """The slot Pass, then the reservation; a refusal (the ledger's condition failed) waits, names a
        new slot and tries again, so the hold a try writes counts from that try, as Bedrock counts the
        call from when it starts. A throttled or failing DynamoDB (DYNAMODB_RETRY_ERRORS) takes the same
        way back, for the same reason, DYNAMODB_RETRY_ATTEMPTS times. After LEDGER_RETRY_ATTEMPTS refusals
        the error (Error and Cause at `error_path`) goes to `refused`, nothing held; after
        DYNAMODB_RETRY_ATTEMPTS throttles, to `fallback` (the states fallback() returns: the call goes on
        without the ledger, paced to the floor), or to `refused` where there is none (a consumer without a
        floor). Returns the first state and the reservation task, for the caller's next state (and its own
        catch of what is left, after these)."""
        parent = self.slot_path.rpartition(".")[0]
        first, again = self.slot(), self.slot(again=True)
        reserve = self.reserve()
        wait = sfn.Wait(self.scope, f"{self.id} ledger wait", time=sfn.WaitTime.seconds_path(f"{parent}.wait"))
        want = self.want()
        retry = (sfn.Choice(self.scope, f"{self.id} ledger try again?")
                 .when(sfn.Condition.number_greater_than_equals(f"{parent}.retries", LEDGER_RETRY_ATTEMPTS), refused)
                 .otherwise(want or wait))
        if want is not None:  # its failures (not within its floor, throttles) are ignored: the loop goes on
            want.add_catch(wait, errors=[sfn.Errors.ALL], result_path=sfn.JsonPath.DISCARD)
            want.next(wait)
        count = sfn.Pass(self.scope, f"{self.id} ledger throttled",
                         parameters={"count.$": f"States.MathAdd({parent}.throttled.count, 1)"},
                         result_path=f"{parent}.throttled")
        throttled = (sfn.Choice(self.scope, f"{self.id} ledger throttled again?")
                     .when(sfn.Condition.number_greater_than_equals(f"{parent}.throttled.count", DYNAMODB_RETRY_ATTEMPTS),
                           fallback or refused)
                     .otherwise(count))
        count.next(wait)
        wait.next(again)
        again.next(reserve)
        reserve.add_catch(retry, errors=[CONDITIONAL_CHECK_FAILED], result_path=error_path)
        reserve.add_catch(throttled, errors=list(DYNAMODB_RETRY_ERRORS), result_path=error_path)
        first.next(reserve)
        return first, reserve

    def fallback(self, call: sfn.TaskStateBase | None, *, failed: sfn.IChainable, error_path: str,
                 then: sfn.IChainable) -> sfn.IChainable | None:
        """What a call does once DynamoDB failed its reservation DYNAMODB_RETRY_ATTEMPTS times (module
        docstring, "When DynamoDB fails"): publish LedgerFallbacks (its failure caught and ignored), wait
        the floor's seconds (fallback_wait_seconds, fixed at synth), then `call`: the model task without
        the ledger (no settlement, no release), going on to `then`, its failure (Error and Cause at
        `error_path`) to `failed`. None for a consumer without a floor (its call fails; the caller builds
        no `call` then)."""
        if call is None or not self.consumer.falls_back:
            return None
        call.add_catch(failed, errors=[sfn.Errors.ALL], result_path=error_path)
        call.next(then)
        names = metrics_constants()
        parent = self.slot_path.rpartition(".")[0]
        wait = sfn.Wait(self.scope, f"{self.id}{FALLBACK_WAIT_SUFFIX}",
                        time=sfn.WaitTime.duration(cdk.Duration.seconds(self.consumer.fallback_wait_seconds(self.r))))
        metric = sfn.CustomState(self.scope, f"{self.id}{FALLBACK_METRIC_SUFFIX}", state_json={
            "Type": "Task",
            "Resource": PUT_METRIC_DATA_RESOURCE.format(partition=cdk.Aws.PARTITION),
            "Parameters": {
                "Namespace": names.NAMESPACE,
                "MetricData": [{
                    "MetricName": names.LEDGER_FALLBACKS,
                    "Unit": names.UNITS[names.LEDGER_FALLBACKS],
                    "Value": 1,
                    # what QuotaPacer publishes outside Lambda (no FunctionName): the ledger's id
                    "Dimensions": [{"Name": names.LEDGER_DIMENSION, "Value": self.consumer.ledger.ledger_id}],
                }],
            },
            # PutMetricData answers {}; kept beside the slot (a null ResultPath would be dropped on its way
            # through jsii, and the result would replace the state)
            "ResultPath": f"{parent}.fallback",
        })
        # a metric that cannot be published never fails the call
        metric.add_catch(wait, errors=[sfn.Errors.ALL], result_path=sfn.JsonPath.DISCARD)
        metric.next(wait)
        wait.next(call)
        return metric

    def place(self, path: str) -> sfn.Pass:
        """The item with the answer at `path` (a reference path below $): ResultPath writes into the
        raw input, here the envelope, whose `input` OutputPath then returns."""
        return sfn.Pass(self.scope, f"{self.id} ledger answer", input_path=ENVELOPE_ANSWER,
                        result_path=ENVELOPE_INPUT + path[1:], output_path=ENVELOPE_INPUT)

    def reserve(self) -> tasks.DynamoUpdateItem:
        """The reservation's UpdateItem, with no Retry: admission() builds the way each try takes again."""
        ledger = self.consumer.ledger
        # Priorities (module docstring): within its floor, or while no consumer above the lowest priority waits.
        floor_left = self.consumer.floor_tpm - self.r
        values = {":r": tasks.DynamoAttributeValue.from_number(self.r),
                  # Q and the burst cap (at most Q) known once the app is complete: QuotaLedger.shared_tpm
                  ":total": tasks.DynamoAttributeValue.number_from_string(ledger.lazy_tpm(lambda q: q - self.r)),
                  ":mine": tasks.DynamoAttributeValue.number_from_string(
                      ledger.lazy_tpm(lambda q: min(self.consumer.burst_tpm, q) - self.r)),
                  # the day the consumers share once the outside shares drew theirs: QuotaLedger.shared_daily_tokens
                  ":day": tasks.DynamoAttributeValue.number_from_string(ledger.lazy_day(lambda day: day - self.r)),
                  ":number": tasks.DynamoAttributeValue.from_string("N")}
        if floor_left >= 0:
            values[":floor"] = tasks.DynamoAttributeValue.from_number(floor_left)
            outranked = "(attribute_not_exists(#mine) OR #mine <= :floor OR attribute_not_exists(#waiting))"
        else:  # no call of this consumer fits its floor: it always borrows
            outranked = "attribute_not_exists(#waiting)"
        removes = "#ttl, #want" if floor_left >= 0 else "#ttl"  # served: its want is removed, as a process's is
        want = {"#want": WANT_PREFIX + self.consumer.name} if floor_left >= 0 else {}
        task = self._update(
            f"{self.id} reserve",
            update=f"ADD #held :r, #mine :r, #slot :r, #day :r REMOVE {removes}",
            condition=("(attribute_not_exists(#held) OR (attribute_type(#held, :number) AND #held <= :total)) AND "
                       "(attribute_not_exists(#mine) OR (attribute_type(#mine, :number) AND #mine <= :mine)) AND "
                       "(attribute_not_exists(#day) OR (attribute_type(#day, :number) AND #day <= :day)) AND "
                       + outranked),
            values=values,
            extra_names={"#ttl": LEDGER_TTL_ATTRIBUTE, "#waiting": PRIORITY_WAITING, **want}, retry=False,
        )
        return task

    def want(self) -> tasks.DynamoUpdateItem | None:
        """A refused try within the consumer's floor writes its want as a process does (SharedLedger's
        want write): w#<consumer> = "<time> <r>", `wanted` = the time, `wanted_by` = the consumer, so the
        borrowers leave r free while it is recent. The time is the second this state was entered, in the
        form pacer_runtime.ledger's wants keep (WANT_TIME_FORMAT). IF within the floor (h# absent or
        <= floor - r) and the day holds r (as a process refused for the day writes none). None when no
        call of this consumer fits its floor (it always borrows, and a borrower writes no want)."""
        floor_left = self.consumer.floor_tpm - self.r
        if floor_left < 0:
            return None
        second = sfn.JsonPath.string_at("$$.State.EnteredTime")
        for delimiter in ENTERED_TIME_CUTS:
            second = sfn.JsonPath.array_get_item(sfn.JsonPath.string_split(second, delimiter), 0)
        at = sfn.JsonPath.format(WANT_TIME_FORMAT, second)
        return self._update(
            f"{self.id} ledger want",
            update="SET #w = :want, #wanted = :at, #wanted_by = :me",
            condition="(attribute_not_exists(#mine) OR #mine <= :floor) AND "
                      "(attribute_not_exists(#day) OR #day <= :day)",
            values={":want": tasks.DynamoAttributeValue.from_string(
                        sfn.JsonPath.format(WANT_TIME_FORMAT + f" {self.r}", second)),
                    ":at": tasks.DynamoAttributeValue.from_string(at),
                    ":me": tasks.DynamoAttributeValue.from_string(self.consumer.name),
                    ":floor": tasks.DynamoAttributeValue.from_number(floor_left),
                    ":day": tasks.DynamoAttributeValue.number_from_string(
                        self.consumer.ledger.lazy_day(lambda day: day - self.r))},
            names={"#w": WANT_PREFIX + self.consumer.name, "#wanted": WANTED, "#wanted_by": WANTED_BY,
                   "#mine": CONSUMER_PREFIX + self.consumer.name, "#day": sfn.JsonPath.string_at(self.day_path)},
            retry=False,
        )

    def release(self) -> tasks.DynamoUpdateItem:
        return self._update(f"{self.id} release", update="ADD #held :d, #mine :d, #slot :d, #day :d",
                            values={":d": tasks.DynamoAttributeValue.from_number(-self.r)})

    def settle(self) -> tasks.DynamoUpdateItem:
        delta = tasks.DynamoAttributeValue.number_from_string(
            sfn.JsonPath.format("{}", sfn.JsonPath.string_at(f"{self.charge_path}.delta")))
        return self._update(f"{self.id} settle", update="ADD #held :d, #mine :d, #slot :d, #day :d", values={":d": delta})

    def charge(self, usage: str, then: sfn.IChainable) -> sfn.IChainable:
        """The settlement's delta in the envelope: input (+ cache writes) - r, then + output x burndown."""
        delta = f"{self.charge_path}.delta"

        def step(name: str, terms: list[str]) -> sfn.Pass:
            return sfn.Pass(self.scope, name, parameters={"delta.$": _sum(terms)}, result_path=self.charge_path)

        with_writes = step(f"{self.id} charge with cache writes",
                           [f"{usage}.InputTokens", f"{usage}.CacheWriteInputTokens", str(-self.r)])
        without = step(f"{self.id} charge", [f"{usage}.InputTokens", str(-self.r)])
        output = f"{usage}.OutputTokens"
        count = math.ceil(self.consumer.ledger.quota.burndown)
        steps: list[sfn.Pass] = []
        while count > 0:
            take = min(count, MAX_NESTED_INTRINSICS)
            steps.append(step(f"{self.id} charge output {len(steps) + 1}", [delta, *([output] * take)]))
            count -= take
        for before, after in zip(steps, steps[1:], strict=False):
            before.next(after)
        steps[-1].next(then)
        with_writes.next(steps[0])
        without.next(steps[0])
        return (sfn.Choice(self.scope, f"{self.id} cache writes?")
                .when(sfn.Condition.is_present(f"{usage}.CacheWriteInputTokens"), with_writes)
                .otherwise(without))

    def _update(self, id: str, *, update: str, values: Mapping[str, tasks.DynamoAttributeValue],
                condition: str = "attribute_exists(#slot)",
                extra_names: Mapping[str, str] | None = None, retry: bool = True,
                names: Mapping[str, str] | None = None) -> tasks.DynamoUpdateItem:
        """One conditional UpdateItem of the quota's item; `names` replaces the hold's attribute names
        (#held, #mine, #slot, #day), which DynamoDB refuses unused."""
        ledger = self.consumer.ledger
        key = LEDGER_KEY_PREFIX + ledger.ledger_id
        task = tasks.DynamoUpdateItem(
            self.scope, id, table=ledger.table, key={LEDGER_PARTITION_KEY: tasks.DynamoAttributeValue.from_string(key)},
            update_expression=update, condition_expression=condition,
            expression_attribute_names=dict(names) if names is not None else {
                "#held": HELD, "#mine": CONSUMER_PREFIX + self.consumer.name,
                "#slot": sfn.JsonPath.string_at(self.slot_path),
                "#day": sfn.JsonPath.string_at(self.day_path), **(extra_names or {})},
            expression_attribute_values=dict(values),
            result_path=sfn.JsonPath.DISCARD,
        )
        if retry:  # the reservation's own tries go through admission, each in a new slot
            task.add_retry(errors=list(DYNAMODB_RETRY_ERRORS), interval=cdk.Duration.seconds(1), backoff_rate=2.0,
                           max_attempts=DYNAMODB_RETRY_ATTEMPTS, jitter_strategy=sfn.JitterType.FULL)
        # aws-cdk-lib grants UpdateItem on the whole table: narrowed to this quota's item, as QuotaLedger's grants are.
        for statement in task._task_policies or []:
            statement.add_condition("ForAllValues:StringEquals", {LEADING_KEYS: [key]})
        return task
