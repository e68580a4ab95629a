"""The shared quota ledger: one DynamoDB item per model quota that every consumer's QuotaPacer writes.

`ModelQuota` plans a quota at synth: each consumer draws a share, and without a ledger a share is a
wall (its consumer's deploy-time cap). Static shares waste the quota as soon as load is uneven
(issue 25: 4 processes on quarter shares used 35% of it). `QuotaLedger` keeps Bedrock's
reserve-then-settle ledger where every consumer sees it, so the shares become floors and what one
consumer leaves unused the others borrow:

    quota = ModelQuota(self, "HaikuQuota", model=model, tpm_quota=400_000, burndown=5)
    profile = quota.profile(input_tokens=2_500, output_tokens=300, max_tokens=440)
    quota.share("Interactive", profile, fraction=0.5, call_seconds=6)
    ledger = QuotaLedger(self, "HaikuLedger", quota=quota)
    ledger.grant_use(worker)                                   # UpdateItem and GetItem on its item only
    worker.add_environment(...)  # for each (k, v) of ledger.environment("Interactive")
    # in the worker: pacer = QuotaPacer.from_environment(); pacer.converse(client, request)

The item layout and the protocol (reserve, settle, release, expiry, floors and borrowing,
contention, failures, clock skew) are the runtime's: `pacer_runtime.ledger`
(genai_pacer.runtime.ledger), whose docstring is the design. The Step Functions constructs take part
with `ledger=` through DynamoDB tasks of their own: `step_functions.ledger_steps`.
The table holds one item per quota, keyed "quota#<ledger_id>" under the string partition key
"pk", so one table may serve several quotas, each consumer granted only its own quota's item.

Why a construct of its own and not a ModelQuota option: ModelQuota creates no resources (it is a
plan checked at synth, and apps use it without a ledger); the ledger is a table with grants and
consumers' environments, and one table may keep several quotas. It reads the floors from the
quota's shares, so the plan stays the one source of truth.

Shares held outside the ledger (a plain QuotaPacer's, a QueuedInference or a Map without ledger=) are
left free: the ledger sees only its consumers' holds, so it would let them borrow the TPM those shares
use and the model would throttle everyone. Q is therefore the allocatable TPM less what those shares
draw (shared_tpm, outside_shares), read from the quota's plan of the complete app, and the day the
allocatable day less what they draw in theirs (shared_daily_tokens: x 1,440 by default). Consumers and shares
are added after the ledger, as CDK apps are written, so Q reaches the consumers' variables and the
state machines' conditions as tokens resolved at synth (cdk.Lazy), the plan computed once per synth;
so does the day.

Shares as floors, precisely (the runtime enforces it): Q = tpm_quota x (1 - keep_free) less the shares
held outside every ledger of the quota; a consumer
holding less than its share's TPM is admitted while the window holds Q; above its share it
borrows up to its burst cap (the share's burst_tpm, ModelQuota.share(..., burst_tpm=...); default Q),
leaving free what other consumers wait for within their shares. A
share is guaranteed up to what was borrowed while its owner was idle: borrowed holds come back as
they settle and leave Bedrock's one-minute window, and borrowers keep free what an owner waits for.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, cast

import aws_cdk as cdk
import jsii
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_

from constructs import Construct, IConstruct

from .._internal.checks import Checks, Default, _show, is_token, resolved, warn
from .._internal.docs import constructor_doc
from .._internal.runtime_constants import ledger_layout, metrics_constants
from .._internal.secure import handler_function
from .._internal.tables import check_existing_table, grant_table_key, table_or_new
from . import planning
from .model_quota import ModelQuota

__all__ = [
    "LEDGER_DAILY_TOKENS_VARIABLE",
    "LEDGER_ENVIRONMENT",
    "LEDGER_KEY_PREFIX",
    "LEDGER_OUTPUT_ENVIRONMENT",
    "LEDGER_RESERVED_ENVIRONMENT",
    "LEDGER_PARTITION_KEY",
    "LEDGER_PRIORITY_VARIABLE",
    "LEDGER_TTL_ATTRIBUTE",
    "QuotaLedger",
]

#: The names SharedLedger reads, from the one file both sides load (lambda/pacer_runtime/ledger_layout.py;
#: the constructs load it by its path: importing pacer_runtime needs boto3).
_LAYOUT = ledger_layout()
LEDGER_PARTITION_KEY: str = _LAYOUT.PARTITION_KEY
LEDGER_KEY_PREFIX: str = _LAYOUT.KEY_PREFIX
LEDGER_TTL_ATTRIBUTE: str = _LAYOUT.TTL_ATTRIBUTE
#: The variables environment(share) sets, in SharedLedger.from_environment's order; the last is the day
#: (LEDGER_DAILY_TOKENS_VARIABLE).
LEDGER_ENVIRONMENT: tuple[str, ...] = _LAYOUT.ENVIRONMENT
LEDGER_DAILY_TOKENS_VARIABLE: str = _LAYOUT.DAILY_TOKENS_VARIABLE
LEDGER_WANT_SECONDS_VARIABLE: str = _LAYOUT.WANT_SECONDS_VARIABLE
#: The longest wait between two reservation tries of a state machine (step_functions.ledger_steps'
#: LEDGER_RETRY_WAIT_CAPS end with it). A state machine writes its want on each refused try within its floor
#: and cannot refresh it during the wait, so every consumer keeps a want (want_seconds) at least that long,
#: plus the second its time is cut to (the want names the whole second its state was entered), the clock
#: skew between Step Functions and the processes, and WANT_MARGIN_SECONDS for the states between two tries
#: (a Pass, a Choice and two DynamoDB tasks, tens of milliseconds each on AWS): 12 s with the default skew.
#: Before, the processes kept a want 5 s (SharedLedger's default) and a want written before a 6 to 8 s wait
#: lapsed, so a borrower could take, for a minute, the room the state machine waited for within its floor.
STATE_MACHINE_LONGEST_WAIT_SECONDS = 8
WANT_MARGIN_SECONDS = 2
#: The variables environment(share) adds for a share of a bedrock-mantle quota: the output window's
#: quota, the consumer's floor and burst cap on it (SharedLedger's output_quota_tpm, ...).
LEDGER_OUTPUT_ENVIRONMENT: tuple[str, ...] = _LAYOUT.OUTPUT_ENVIRONMENT
#: The variables environment(share) adds for a share drawn at the Reserved tier: the model's
#: reservation and the share's part of it, shared in the same table (SharedLedger.reservation_from_environment).
LEDGER_RESERVED_ENVIRONMENT: tuple[str, ...] = _LAYOUT.RESERVED_ENVIRONMENT
#: The consumer's priority (a share drawn with priority=), read by SharedLedger.from_environment.
LEDGER_PRIORITY_VARIABLE: str = _LAYOUT.PRIORITY_VARIABLE
PRIORITIES: tuple[str, ...] = _LAYOUT.PRIORITIES
#: Every call of the protocol is an UpdateItem (reserve, settle, release, a floor owner's want, a
#: repair); GetItem reads the item before a refusal and for stats.
_USE_ACTIONS = ("dynamodb:UpdateItem", "dynamodb:GetItem")
_READ_ACTIONS = ("dynamodb:GetItem",)
#: The KMS actions a caller needs on a customer-managed table key: the same reasoning and sources as
#: answer_store's _KEY_READ_ACTIONS and _KEY_WRITE_ACTIONS.
_KEY_USE_ACTIONS = ("kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKey")
_KEY_READ_ACTIONS = ("kms:Decrypt", "kms:DescribeKey")
#: The IAM condition key that limits item-level actions to items with the listed partition key
#: values (exact values with ForAllValues:StringEquals: DynamoDB developer guide, "Using IAM policy
#: conditions for fine-grained access control", specifying-conditions.html).
LEADING_KEYS = "dynamodb:LeadingKeys"
_DEFAULT_SKEW = Default("cdk.Duration.seconds(1)", lambda: cdk.Duration.seconds(1))
#: A share name is part of the ledger's attribute names (pacer_runtime.ledger.CONSUMER_NAME_LIMIT).
_CONSUMER_LIMIT = 80
_LEDGER_ID_LIMIT = 200  # a label, well inside the item key (a design choice, not a service limit)
#: The sweeper's schedule: EventBridge's finest. A rate expression is "rate(value unit)" with a positive
#: whole value and the unit minute | minutes | hour | hours | day | days (EventBridge user guide, "Rate
#: expressions reference", https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rate-expressions.html;
#: aws-cdk-lib's events.Schedule: "rates cannot be defined in fractions of minutes"), so once a minute.
SWEEP_RATE = cdk.Duration.minutes(1)
#: Each invocation sweeps every few seconds until its time runs low (lambda/quota_sweeper: why), and
#: runs a little longer than the schedule's minute so the next invocation overlaps it rather than
#: leaving a gap. Kept with quota_sweeper.handler's SWEEP_INTERVAL_SECONDS + MARGIN_SECONDS by a test.
SWEEP_TIMEOUT = cdk.Duration.seconds(70)
#: The sweeper's memory, the smallest Lambda takes: it sends a read and a few writes every 5 s.
SWEEPER_MEMORY_MB = 128
#: What an invocation runs, and is billed for: it stops once less than SWEEP_INTERVAL_SECONDS +
#: MARGIN_SECONDS (10 s) of its 70 s remain, after its sweep at about 65 s (kept with the handler by a test).
SWEEPER_BILLED_SECONDS = 65
#: Lambda's us-east-1 on-demand prices (AWS Lambda pricing page, https://aws.amazon.com/lambda/pricing/,
#: "Arm price", first 7.5 billion GB-seconds a month, and "Requests"; the page fills its tables in from a
#: price list, which artillery's lib/platform/aws-lambda/prices.js copies: arm64 1333340 x 1e-11; the figure is
#: confirmed only by that third-party copy, not by AWS's own text, so treat it as an estimate): USD per
#: GB-second on Arm (handler_function's architecture) and per request. The free tier (400,000 GB-seconds and
#: 1 million requests a month, the same page) is the account's, shared by all its functions.
LAMBDA_ARM_GB_SECOND_USD = 0.0000133334
LAMBDA_REQUEST_USD = 0.20 / 1_000_000
_MINUTES_A_MONTH = 365.25 * 24 * 60 / 12
#: What the sweeper's function costs a month at those prices, before the free tier: it runs every minute
#: whether or not a state machine runs (about $4.76; its log group's KMS key adds KEY_MONTHLY_PRICE_USD,
#: its GetItem every 5 s about half a million read request units). docs/quota.md states it (a test).
SWEEPER_MONTHLY_USD = _MINUTES_A_MONTH * (
    SWEEPER_MEMORY_MB / 1024 * SWEEPER_BILLED_SECONDS * LAMBDA_ARM_GB_SECOND_USD + LAMBDA_REQUEST_USD)
#: The consumer name the sweeper's environment carries (quota_sweeper.handler.SWEEPER_CONSUMER): it
#: holds nothing, so the name is never written into the item.
SWEEPER_CONSUMER = "quota-sweeper"


@constructor_doc
class QuotaLedger(Construct):
    """The shared reservation ledger of one ModelQuota: a DynamoDB table every consumer's QuotaPacer uses.

    quota: required; the ModelQuota whose shares become floors. Its allocatable TPM (tpm_quota x
        (1 - keep_free)) less what its shares held outside every ledger draw (`shared_tpm()`, known
        at synth) is what the consumers share at run time. A bedrock-mantle quota's
        (input_tpm_quota, output_tpm_quota) ledger keeps its output window too (each share's output
        TPM its floor there) and no day; only processes take part in it (QuotaPacer.from_environment):
        the constructs that call Converse refuse it.
    table: an existing table: string partition key "pk", no sort key (refused otherwise where its
        schema is known; an imported table gets a warning saying what to check), TTL on
        "expires_at" (advised). Several quotas may share one table. Default: a new on-demand table,
        encrypted, point-in-time recovery on, TTL on "expires_at", destroyed with the stack (it
        holds a minute of window state, nothing worth keeping).
    encryption_key: customer-managed KMS key for a new table. Default: AWS-managed encryption.
    ledger_id: the quota's key in the table ("quota#<ledger_id>"). Default: the quota's model id,
        or, for a deploy-time model id, the quota construct's unique id. Two quotas in one table
        need different ids.
    clock_skew: the clock difference between consumers the ledger tolerates: each slot is kept this
        much longer than Bedrock's window, so a clock that far ahead never frees a charge early.
        Lambda functions are synchronized by AWS; more than a few seconds means a broken clock.
        Between 0 and 30 seconds. Default: 1 second. It also lengthens `want_seconds` (how long every
        consumer keeps a waiting consumer's want: a state machine's longest wait + 1 s + this + 2 s).
    sweeper: whether a state machine's use of the ledger adds a function that removes the slots that
        left the window (a state machine cannot: step_functions.ledger_steps), run by an EventBridge
        rule once a minute, sweeping every 5 seconds within each invocation; granted UpdateItem and
        GetItem on this quota's item only. With a Reserved tier reservation (ModelQuota's
        reserved_input_tpm) it sweeps the reservation's item too (and is granted it), a second GetItem
        every 5 seconds. Without it, a ledger that only state machines use keeps
        every hold until a process consumer writes the item, and stalls once the holds reach the
        quota (warned at synth). Default: True. It runs every minute whether or not a state machine
        runs: a 128 MB Arm function for about 65 s a minute, about $4.76 a month at us-east-1's
        Lambda prices before the account's free tier (SWEEPER_MONTHLY_USD), plus its log group's
        KMS key ($1 a month) and a GetItem every 5 seconds. False when a process consumer of this
        quota is busy at all times.

    Attributes: `table`, `quota`, `ledger_id`, `clock_skew`, `quota_tpm` and `daily_tokens` (the
    allocatable minute and day; what the consumers share once the shares held outside every ledger are
    left free: `shared_tpm()` and `shared_daily_tokens()`, known at synth), `want_seconds`, `sweeper_function` (the sweeper, once a state machine uses the
    ledger, else None). Grants: `grant_use` (UpdateItem,
    GetItem), `grant_read` (GetItem), each limited to this quota's item. Consumers receive
    `environment(share)`. `takes_part(path)` says whether a construct takes part (granted by grant_use,
    or a state machine given ledger=): the quota's plan counts a share its holders hold in the ledger at
    its floor, and a construct given a share drawn with burst_tpm and ledger= caps its calls at the
    burst's (`burst_plan`).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        quota: ModelQuota,
        table: dynamodb.ITable | None = None,
        encryption_key: kms.IKey | None = None,
        ledger_id: str | None = None,
        clock_skew: cdk.Duration | Default = _DEFAULT_SKEW,
        sweeper: bool = True,
    ) -> None:
        super().__init__(scope, id)
        skew: cdk.Duration = resolved(clock_skew)
        with Checks("QuotaLedger", scope=self) as check:
            check.instance("quota", quota, ModelQuota, "the ModelQuota whose shares become floors")
            check.instance("table", table, dynamodb.ITable, "a dynamodb.Table or dynamodb.Table.from_table_name(...)",
                           optional=True)
            check.instance("encryption_key", encryption_key, kms.IKey, "a kms.Key", optional=True)
            check.instance("sweeper", sweeper, bool, "True (the default) or False")
            check.rule(table is None or encryption_key is None,
                       "encryption_key configures a new table, but table is an existing one: encrypt your table yourself", id="encryption_key.existing-ledger-table")
            if is_token(ledger_id):
                check.fail("ledger_id is an unresolved CDK token (a deploy-time value); it is written into each "
                           "consumer's environment and grant at synth: pass text, e.g. the model id", id="ledger_id.deploy-time")
            elif ledger_id is not None:
                check.text("ledger_id", ledger_id, max_length=_LEDGER_ID_LIMIT, fix="a label for the quota, e.g. its model id")
            if isinstance(skew, cdk.Duration) and skew.is_unresolved():
                check.fail("clock_skew is a deploy-time Duration; the ledger's consumers are configured at synth: pass "
                           "cdk.Duration.seconds(1)", id="clock_skew.deploy-time")
            else:
                check.duration("clock_skew", skew, minimum=cdk.Duration.seconds(0), maximum=cdk.Duration.seconds(30),
                               fix="the clock difference between consumers to tolerate, e.g. cdk.Duration.seconds(1)")
            if table is not None and check_existing_table(
                self, check, table, partition_key=LEDGER_PARTITION_KEY, ttl_attribute=LEDGER_TTL_ATTRIBUTE,
                purpose="the ledger keys each quota's item",
            ):
                self._check_ttl(table)
        self.quota = quota
        self.clock_skew = skew
        model_id = quota.model.model_id
        self.ledger_id: str = ledger_id or (model_id if not cdk.Token.is_unresolved(model_id) else cdk.Names.unique_id(quota))
        self.table = table_or_new(self, table, partition_key=LEDGER_PARTITION_KEY, ttl_attribute=LEDGER_TTL_ATTRIBUTE,
                                  encryption_key=encryption_key, removal_policy=cdk.RemovalPolicy.DESTROY)
        # Who takes part, for the warning at synth: a state machine removes no expired slot (ledger_steps).
        self._process_consumers = False
        self._state_machines: list[str] = []
        self._sweeper = sweeper is True
        self.sweeper_function: lambda_.Function | None = None
        # The construct paths of who takes part (grant_use's grantees and their roles, the state machines'
        # constructs): the quota's plan counts a share those hold at its floor, not at their caps.
        self._members: set[str] = set()
        # The shares this ledger gave a consumer its variables for (outside_shares: a share no construct synth
        # sees holds is inside when its consumer got them).
        self._declared: set[str] = set()
        # (who, r): each call's hold fixed at synth, checked against Q and the day at synth (note_reservation)
        self._reservations: list[tuple[str, int]] = []
        # what a consumer checks once the app is complete (check_at_synth), run by _check_outside
        self._synth_checks: list[Callable[[], None]] = []
        quota._ledgers.append(self)
        cdk.Aspects.of(self).add(_WarnStateMachinesOnly(self))

    @property
    def quota_tpm(self) -> float:
        """The quota's allocatable TPM (tpm_quota x (1 - keep_free)): what the ledger's consumers share
        when every share of the quota is held in a ledger (`shared_tpm()` is what they share)."""
        return self.quota.allocatable_tpm

    def outside_shares(self) -> dict[str, float]:
        """The shares of the quota held outside every QuotaLedger of it, with the TPM each draws
        (Share.drawn_tpm: its TPM, or what its holders' caps draw if more), read from the quota's plan
        of the complete app (ModelQuota.plan(consumers=True), computed once per synth).

        A share is inside when every holder synth found takes part in a ledger of the quota
        (Share.in_ledger), or, held by no construct synth can see, when a ledger gave a consumer its
        variables (environment(share), consumer_variables, a state machine's ledger=): a process outside
        the app then uses it through the ledger. Every other share is outside: a plain QuotaPacer or a
        construct without ledger= holds it (or, held by nobody synth sees, something outside the app may
        draw it, as the plan counts it). A bedrock-mantle quota's callers cannot be found (their grants
        name projects): none is outside."""
        return {share.name: share.drawn_tpm for share in self._outside()}

    def _outside(self) -> list[Any]:
        """The plan's shares (model_quota.Share) held outside every ledger of the quota: `outside_shares`."""
        # While the census runs it resolves the consumers' states (to read their max_tokens), and with them the
        # tokens that call this: the number it reads there is never used, the tokens are resolved again after.
        if self.output_quota_tpm is not None or self.quota._in_census:
            return []
        plan = self.quota._complete_plan()
        declared = set().union(*(getattr(ledger, "_declared", set()) for ledger in self.quota._ledgers))
        return [share for share in plan.shares if not share.in_ledger and (plan.holders(share) or share.name not in declared)]

    def shared_tpm(self) -> float:
        """Q, what the ledger's consumers share at run time: the allocatable TPM minus what the shares held
        outside every ledger draw (`outside_shares()`). The ledger sees only its own consumers' holds, so
        without this its consumers would borrow the TPM the outside shares use and the model would throttle
        them all. Known once the app is complete: environment(share) and the state machines' reservations
        carry it as a token resolved at synth (`lazy_tpm`)."""
        return self.quota_tpm - sum(self.outside_shares().values())

    def shared_daily_tokens(self) -> int:
        """The day the ledger's consumers share at run time, as `shared_tpm()` is of the minute: the
        allocatable day (`daily_tokens`) less what the shares held outside every ledger draw in a day, each
        its drawn TPM (`outside_shares()`) for its hours_per_day (ModelQuota.share; 24 by default, so x 1,440
        as DAILY_QUOTA_DOC's default day is the TPM quota's). With the default daily_token_quota and outside
        shares running all day, shared_tpm() x 1,440. The outside shares' processes spend the model's day on
        Bedrock without the ledger's d# counter seeing it, so without this the ledger's consumers could spend
        the whole day before 00:00 UTC and the model would refuse everyone. Known once the app is complete:
        environment(share) and the state machines' reservations carry it as a token resolved at synth
        (`lazy_day`)."""
        outside = sum(share.drawn_tpm * planning.MINUTES_PER_DAY * share.hours_per_day / 24 for share in self._outside())
        return math.floor(self.daily_tokens - outside)

    def lazy_day(self, value: Any) -> str:
        """A token, resolved at synth once the app is complete, for `value(shared_daily_tokens())` written as a
        whole number: the day's GENAI_PACER_LEDGER_DAILY_TOKENS and the state machines' day ceilings (lazy_tpm's
        counterpart for the day)."""
        return cdk.Lazy.uncached_string(_Produce(lambda: f"{value(self.shared_daily_tokens()):.0f}"))

    def lazy_tpm(self, value: Any) -> str:
        """A token, resolved at synth once the app is complete, for `value(shared_tpm())` written as a whole
        number (as the other GENAI_PACER_LEDGER_* numbers are): what environment(share) and the state
        machines' condition numbers carry for the minute, since consumers and shares are added after the
        ledger (an experienced CDK user's order: the ledger first, its consumers later)."""
        # uncached: the census resolves these tokens too (while it runs they are placeholders, outside_shares)
        return cdk.Lazy.uncached_string(_Produce(lambda: f"{value(self.shared_tpm()):.0f}"))

    @property
    def output_quota_tpm(self) -> float | None:
        """On a bedrock-mantle quota, the output tokens per minute the consumers share:
        output_tpm_quota x (1 - keep_free); None on bedrock-runtime."""
        output = self.quota.output_tpm_quota
        return None if output is None else round(output * (1 - self.quota.keep_free), 6)

    @property
    def daily_tokens(self) -> int:
        """The allocatable part of the model's daily token quota, (daily_token_quota, default tpm_quota x
        1,440) x (1 - keep_free), as quota_tpm is of the minute: what the consumers share when every share
        of the quota is held in a ledger (`shared_daily_tokens()` is what they share). Every consumer counts
        the day in the same d#<UTC day> counter of the item: the processes' SharedLedger and the state
        machines' reservations (step_functions.ledger_steps)."""
        daily = self.quota.daily_token_quota
        whole = self.quota.tpm_quota * planning.MINUTES_PER_DAY if daily is None else daily
        return math.floor(whole * (1 - self.quota.keep_free))

    @staticmethod
    def of_model(check: Checks, ledger: Any, model: Any, *, consumer: str) -> QuotaLedger | None:
        """`ledger` when it is a QuotaLedger of `model`'s quota (the problem recorded otherwise; None
        without a ledger): the one check every `ledger=` prop makes. `consumer` says what calls the model
        ("this worker"), for the message."""
        if ledger is None or not check.instance(
            "ledger", ledger, QuotaLedger, f"a QuotaLedger of the ModelQuota of {consumer}'s model", optional=True
        ):
            return None
        check.rule(ledger.quota.endpoint == "bedrock-runtime",
                   f"ledger=QuotaLedger {ledger.node.id} keeps a bedrock-mantle quota, and {consumer} calls "
                   "bedrock-runtime (Converse), whose quota is another: pass the ledger of the model's bedrock-runtime "
                   "ModelQuota", id="ledger.mantle-quota")
        ours, theirs = getattr(model, "model_id", None), ledger.quota.model.model_id
        if isinstance(ours, str) and not is_token(ours) and not is_token(theirs):
            check.rule(
                ours == theirs,
                f"ledger=QuotaLedger {ledger.node.id} keeps the quota of model {theirs!r}, but {consumer} calls "
                f"{ours!r}: each model has its own quota; pass the ledger of its model's ModelQuota",
                id="ledger.other-model",
            )
        return cast(QuotaLedger, ledger)

    @staticmethod
    def share_name(quota: ModelQuota, plan: Any) -> str | None:
        """The name `plan` was drawn under from `quota` (None: not one of its shares)."""
        return next((name for issued, name in quota._issued.values() if issued is plan), None) if plan is not None else None

    @staticmethod
    def burst_plan(ledger: Any, plan: Any) -> Any:
        """The plan a construct given `ledger` and a cap of `plan` sizes its deploy-time cap by: the share's
        burst (Share.burst_per_execution) when `plan` is a share of the ledger's quota drawn with
        burst_tpm, so the construct may borrow up to it while the ledger decides how much runs at once;
        else `plan` itself (an int, a share without a burst, no ledger). The floor's plan stays the one
        the quota knows the holder by, and the burst's plan is registered under the same share."""
        if not isinstance(ledger, QuotaLedger):
            return plan
        name = QuotaLedger.share_name(ledger.quota, plan)
        burst = ledger.quota.shares[name].burst_per_execution if name is not None else None
        return plan if burst is None else burst

    def environment(self, share: str, *, burst_tpm: float | None = None) -> dict[str, str]:
        """The variables a consumer's processes need: the quota's pacer_environment(share) (its static
        per-process share, the pacer's fallback) and the ledger's (GENAI_PACER_LEDGER_*: the table, the
        quota's id, the consumer, the minute, its floor and burst cap, the clock skew and the day,
        daily_tokens), read by `QuotaPacer.from_environment()`.

        burst_tpm: the most this consumer may hold at once, borrowing included, from its share's
            TPM up to the quota's allocatable TPM, for a share drawn without one (a value that differs
            from the share's declared burst_tpm is refused: declare it once, on the share). Default:
            the share's burst_tpm (ModelQuota.share(..., burst_tpm=...)), else the allocatable TPM.
        """
        shares = self.quota.shares
        with Checks(f"QuotaLedger.environment({_show(share)})", scope=self) as check:
            if not isinstance(share, str) or share not in shares:
                check.fail(f"share={_show(share)} is not a share of ModelQuota {self.quota.node.id}; drawn: "
                           f"{', '.join(shares) or 'none'}", id="share.not-drawn")
            elif "#" in share or len(share) > _CONSUMER_LIMIT:
                check.fail(f"share={share!r} names the consumer in the ledger's attribute names: at most "
                           f"{_CONSUMER_LIMIT} characters and no '#'; draw the share under such a name", id="share.name-too-long")
            drawn = shares[share] if isinstance(share, str) and share in shares else None
            floor = drawn.tpm if drawn is not None else 0.0
            declared = drawn.burst_tpm if drawn is not None else None
            if burst_tpm is not None and declared is not None and not is_token(burst_tpm):
                check.rule(burst_tpm == declared,
                           f"burst_tpm={_show(burst_tpm)} differs from the burst_tpm={declared:,.0f} share {share!r} was "
                           "drawn with: the share's is the consumer's cap; drop burst_tpm here, or draw the share with "
                           "the burst you want", id="burst_tpm.differs-from-share")
            elif burst_tpm is not None and self.output_quota_tpm is not None:
                check.fail("burst_tpm on a share of a bedrock-mantle quota: its consumer may borrow up to the whole "
                           "allocatable input and output quotas; drop it", id="burst_tpm.mantle-ledger")
            elif burst_tpm is not None:
                if is_token(burst_tpm):
                    check.fail("burst_tpm is an unresolved CDK token; it is checked against the share at synth: pass "
                               "a number", id="burst_tpm.deploy-time")
                else:
                    check.number("burst_tpm", burst_tpm, minimum=floor, maximum=self.quota_tpm,
                                 fix=f"between the share's {floor:,.0f} TPM and the quota's allocatable "
                                 f"{self.quota_tpm:,.0f} TPM")
        variables = {**self.quota.pacer_environment(share),
                     **self.consumer_variables(share, floor, declared if burst_tpm is None else burst_tpm)}
        if drawn is not None and drawn.reserved_budget is not None:  # the reservation every reserved share draws on
            variables.update(self._reservation_variables(*drawn.reserved_budget))
        if self.output_quota_tpm is not None and drawn is not None:  # bedrock-mantle: the output window too, no day
            del variables[LEDGER_DAILY_TOKENS_VARIABLE]
            variables.update(zip(LEDGER_OUTPUT_ENVIRONMENT, (
                f"{self.output_quota_tpm:.0f}", f"{drawn.output_tpm or 0:.0f}", f"{self.output_quota_tpm:.0f}"),
                strict=True))
        return variables

    def consumer_variables(self, consumer: str, floor_tpm: float, burst_tpm: float | None = None) -> dict[str, str]:
        """The ledger's own variables (GENAI_PACER_LEDGER_*) for one consumer, unchecked: `environment`
        checks a share's; a construct that takes part itself (QueuedInference(ledger=...)) checks its own.
        The consumer's priority (LEDGER_PRIORITY_VARIABLE) only when its share was drawn with one."""
        self._declared.add(consumer)  # a ledger consumer, even when synth sees no construct holding its share
        # The minute and the burst cap: Q = shared_tpm() (the allocatable TPM less the shares held outside
        # every ledger), resolved at synth; a burst cap above Q is Q (SharedLedger takes burst <= quota). The
        # day likewise: shared_daily_tokens().
        variables = dict(zip(LEDGER_ENVIRONMENT, (
            self.table.table_name, self.ledger_id, consumer, self.lazy_tpm(lambda q: q), f"{floor_tpm:.0f}",
            self.lazy_tpm(lambda q: q if burst_tpm is None else min(burst_tpm, q)),
            f"{self.clock_skew.to_seconds(integral=False):g}", self.lazy_day(lambda day: day),
        ), strict=True))
        variables[LEDGER_WANT_SECONDS_VARIABLE] = f"{self.want_seconds:g}"
        drawn = self.quota.shares.get(consumer)
        if drawn is not None and drawn.priority is not None:
            variables[LEDGER_PRIORITY_VARIABLE] = drawn.priority
        return variables

    @property
    def want_seconds(self) -> float:
        """How long every consumer keeps another's want (LEDGER_WANT_SECONDS_VARIABLE): from one refused try
        of a state machine to its next (STATE_MACHINE_LONGEST_WAIT_SECONDS), whole second, skew and margin."""
        return STATE_MACHINE_LONGEST_WAIT_SECONDS + 1 + self.clock_skew.to_seconds(integral=False) + WANT_MARGIN_SECONDS

    def _reservation_variables(self, floor_input_tpm: float, floor_output_tpm: float) -> dict[str, str]:
        """The Reserved tier reservation's variables (LEDGER_RESERVED_ENVIRONMENT, read by
        SharedLedger.reservation_from_environment): the model's reservation and a consumer's floors in it."""
        return dict(zip(LEDGER_RESERVED_ENVIRONMENT, (
            f"{self.quota.reserved_input_tpm:.0f}", f"{self.quota.reserved_output_tpm:.0f}",
            f"{floor_input_tpm:.0f}", f"{floor_output_tpm:.0f}"), strict=True))

    @property
    def prioritized(self) -> bool:
        """Whether a share of the quota was drawn with a priority above the lowest: then a state machine
        borrows only while no such consumer waits (step_functions.ledger_steps). Read at synth, after
        every share is drawn."""
        return any(share.priority not in (None, PRIORITIES[0]) for share in self.quota.shares.values())

    def hold(self, prompt_tokens: int, max_tokens: int) -> int:
        """What one call holds in the ledger while it runs: its prompt (input + cache writes + cache reads)
        + max_tokens x the quota's burndown (pacer_runtime's QuotaPacer.reservation with
        hold_output_burndown, as every consumer of the ledger holds it). A call holding more than a
        consumer's burst cap can never be admitted (SharedLedger refuses it)."""
        return int(prompt_tokens) + math.ceil(max_tokens * self.quota.burndown)

    def note_reservation(self, holder: str, held: int) -> None:
        """A consumer each of whose calls holds `held` tokens, fixed at synth (a state machine's model task, a
        LoadReplay run's requests), described by `holder` ("the state machine of share 'Nightly' (Summarize)").
        Checked once the app is complete against what its consumers share (shared_tpm, shared_daily_tokens):
        a call holding more than what the shares outside the ledger leave could never be admitted."""
        self._reservations.append((holder, held))

    def check_at_synth(self, check: Callable[[], None]) -> None:
        """Run `check` at synth once the app is complete (from ModelQuota's validation, with this ledger's
        own checks), when shared_tpm() and shared_daily_tokens() are known: what a consumer built before
        its fellow consumers and shares (QueuedInference's warning on max_output_tokens) compares with
        what the ledger's consumers share, not with the whole allocatable quota."""
        self._synth_checks.append(check)

    def _check_outside(self, check: Checks, plan: Any) -> None:
        """At synth, from the complete plan (ModelQuota's validation): the consumers' own checks
        (check_at_synth), then the outside shares must leave the ledger something, and what synth cannot
        count outside the ledger is named (a warning: the ledger leaves free only what the plan counts)."""
        for consumer_check in self._synth_checks:
            consumer_check()
        outside = self.outside_shares()
        if not outside or not (self._declared or self._members):  # a ledger nobody uses shares nothing
            return
        shown = ", ".join(f"{name!r} ({tpm:,.0f} TPM)" for name, tpm in outside.items())
        check.rule(
            self.shared_tpm() >= 1,
            f"QuotaLedger {self.node.id}: the shares held outside every ledger of ModelQuota {self.quota.node.id} "
            f"({shown}) draw all of its {self.quota_tpm:,.0f} allocatable TPM, leaving the ledger's consumers nothing; "
            "move them into the ledger (ledger.grant_use + ledger.environment(share), or ledger= on the construct) "
            "or make them smaller", id="ledger.outside-shares-leave-nothing")
        shared, day = self.shared_tpm(), self.shared_daily_tokens()
        check.rule(
            day >= 1,
            f"QuotaLedger {self.node.id}: the shares held outside every ledger of ModelQuota {self.quota.node.id} "
            f"({shown}) draw all of its {self.daily_tokens:,} allocatable tokens a day at their TPM for their "
            "hours_per_day, leaving the ledger's consumers no day; move them into the ledger, make them smaller, "
            "draw them with the hours_per_day they run, or raise daily_token_quota", id="ledger.outside-shares-leave-no-day")
        for holder, held in self._reservations:
            check.rule(
                held <= shared,
                f"QuotaLedger {self.node.id}: {holder} reserves {held:,} tokens a call, more than the {shared:,.0f} "
                f"TPM its consumers share once the shares held outside it ({shown}) are left free: it could never be "
                "admitted; lower max_tokens, or move those shares into the ledger", id="ledger.reservation-above-shared")
            check.rule(
                day < 1 or held <= day,
                f"QuotaLedger {self.node.id}: {holder} reserves {held:,} tokens a call, more than the {day:,} tokens a "
                f"day its consumers share once the shares held outside it ({shown}) have drawn theirs: it could never "
                "be admitted; lower max_tokens, move those shares into the ledger, or raise daily_token_quota",
                id="ledger.reservation-above-shared-day")
        for share in plan.shares:
            for holder in plan.holders(share) if share.name in outside else ():
                if holder.deploy_time_cap:
                    warn(self, "ledger-outside-deploy-time-cap",
                         f"QuotaLedger {self.node.id} leaves free the {outside[share.name]:,.0f} TPM of share "
                         f"{share.name!r}, held outside the ledger by {holder.kind} {holder.path}, but its cap is a "
                         f"deploy-time value ({holder.cap}) synth cannot read, so it may draw more and the ledger's "
                         "consumers borrow it: move it into the ledger (ledger.grant_use + ledger.environment(share), "
                         "or ledger= on the construct), give it a cap known at synth, or cap the ledger's consumers' "
                         "burst_tpm at what it leaves")
        for consumer in plan.unshared:
            if not consumer.in_ledger:
                warn(self, "ledger-outside-unshared",
                     f"QuotaLedger {self.node.id}: {consumer.kind} {consumer.path} calls the model outside the ledger "
                     f"and holds no share of ModelQuota {self.quota.node.id}, so the ledger cannot leave free what it "
                     f"draws ({consumer.worst_case()}) and its consumers may borrow it: draw it a share "
                     "(max_concurrency=quota.share(...), or a share named after it), or move it into the ledger")

    def metric_fallbacks(self, **props: Any) -> cloudwatch.IMetric:
        """Times a consumer of this ledger could not use it (DynamoDB kept throttling or refused) and fell back
        to its floor: LedgerFallbacks by LedgerId, which every kind of consumer publishes (QuotaPacer, the
        QueuedInference worker, the state machines' model tasks), so one alarm on it covers them all (a
        function's own are also by FunctionName). With a Reserved tier reservation, its item's fallbacks
        (LedgerId <ledger_id>#reserved) are added in: a math expression of the two. Default: Sum over 5
        minutes; props as cloudwatch.Metric's."""
        names = metrics_constants()

        def fallbacks(ledger_id: str) -> cloudwatch.Metric:
            return cloudwatch.Metric(**{"namespace": names.NAMESPACE, "metric_name": names.LEDGER_FALLBACKS,
                                        "dimensions_map": {names.LEDGER_DIMENSION: ledger_id}, "statistic": "Sum",
                                        "period": cdk.Duration.minutes(5), **props})

        shared = fallbacks(self.ledger_id)
        if self.quota.reserved_input_tpm is None:
            return shared
        return cloudwatch.MathExpression(
            expression="FILL(shared, 0) + FILL(reserved, 0)", label="LedgerFallbacks",
            using_metrics={"shared": shared, "reserved": fallbacks(self.ledger_id + _LAYOUT.RESERVED_SUFFIX)},
            period=props.get("period", cdk.Duration.minutes(5)))

    def grant_use(self, grantee: iam.IGrantable) -> iam.Grant:
        """Reserve, settle and release in this quota's ledger (UpdateItem, GetItem on its item only)."""
        self._process_consumers = True
        for member in (grantee, getattr(grantee, "grant_principal", None)):
            if hasattr(member, "node"):  # a construct (a function, a role, an imported role), not a bare principal
                self._members.add(member.node.path)  # type: ignore[union-attr]
        return self._grant(grantee, _USE_ACTIONS, _KEY_USE_ACTIONS)

    def takes_part(self, path: str, role_paths: Iterable[str] = ()) -> bool:
        """Whether the construct at `path` (or one of the roles it calls the model with) takes part in
        this ledger: granted by grant_use, or a state machine's construct (note_state_machine)."""
        return path in self._members or any(role in self._members for role in role_paths)

    def note_state_machine(self, path: str) -> None:
        """A Step Functions construct takes part (step_functions.ledger_steps): its holds leave the window
        only when a process consumer writes the item, which synth warns about when none is granted."""
        self._state_machines.append(path)
        self._members.add(path)
        if self._sweeper and self.sweeper_function is None:
            self.sweeper_function = self._add_sweeper()

    def _add_sweeper(self) -> lambda_.Function:
        """The function that removes expired slots for the state machines (lambda/quota_sweeper), once a
        minute; granted exactly what a process consumer is, on this quota's item. With a Reserved tier
        reservation (ModelQuota(reserved_input_tpm=...)), it sweeps the reservation's item too (the
        variables environment(share) gives a reserved share, its floors there 0), which only the reserved
        consumers' writes swept before; _grant covers that item."""
        environment = self.consumer_variables(SWEEPER_CONSUMER, 0.0)
        if self.quota.reserved_input_tpm is not None:
            environment.update(self._reservation_variables(0.0, 0.0))
        function = handler_function(
            self, "Sweeper", handler="quota_sweeper.handler.handler",
            environment=environment, timeout=SWEEP_TIMEOUT,
            memory_size=SWEEPER_MEMORY_MB,
        )
        self._grant(function, _USE_ACTIONS, _KEY_USE_ACTIONS)
        # retry_attempts=0: a failed sweep is not repeated, the next minute's invocation sweeps anyway
        events.Rule(self, "SweepSchedule", schedule=events.Schedule.rate(SWEEP_RATE),
                    targets=[targets.LambdaFunction(function, retry_attempts=0)])
        return function

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        """Read this quota's ledger item (GetItem): for dashboards and tools."""
        return self._grant(grantee, _READ_ACTIONS, _KEY_READ_ACTIONS)

    def _grant(self, grantee: iam.IGrantable, actions: tuple[str, ...], key_actions: tuple[str, ...]) -> iam.Grant:
        grant = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=list(actions),
            resource_arns=[self.table.table_arn],
            # Only this quota's item: a consumer of one quota cannot write another's in a shared table.
            # With a Reserved tier reservation, its shared item too (environment(share) of a reserved share).
            conditions={"ForAllValues:StringEquals": {LEADING_KEYS: [LEDGER_KEY_PREFIX + self.ledger_id] + (
                [LEDGER_KEY_PREFIX + self.ledger_id + _LAYOUT.RESERVED_SUFFIX]
                if self.quota.reserved_input_tpm is not None else [])}},
        )
        grant_table_key(self.table, grantee, key_actions)
        return grant

    def _check_ttl(self, table: dynamodb.ITable) -> None:
        """Advised, not required: readers enforce every hold's expiry themselves; TTL only drops the item
        of a quota nobody used for a day."""
        ttl = _ttl_attribute(table)
        if ttl != LEDGER_TTL_ATTRIBUTE:
            warn(
                self,
                "ledger-ttl",
                f"table {table.node.path} has " + (f"its TTL on {ttl!r}" if ttl else "no TTL") + f": set "
                f"time_to_live_attribute='{LEDGER_TTL_ATTRIBUTE}' so DynamoDB drops the items of quotas nobody uses",
            )


@jsii.implements(cdk.IStringProducer)
class _Produce:
    """A cdk.Lazy.uncached_string producer calling `value` each time the token is resolved (at synth)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def produce(self, context: cdk.IResolveContext) -> str:
        return cast(str, self.value())


@jsii.implements(cdk.IAspect)
class _WarnStateMachinesOnly:
    """At synth, after every consumer took part: a ledger only state machines use, with sweeper=False,
    stalls once their holds reach the quota, since none of them removes a slot that left the window."""

    def __init__(self, ledger: QuotaLedger) -> None:
        self.ledger = ledger
        self.warned = False

    def visit(self, node: IConstruct) -> None:
        ledger = self.ledger
        if (node is not ledger or self.warned or not ledger._state_machines or ledger._process_consumers
                or ledger.sweeper_function is not None):
            return
        self.warned = True
        warn(
            ledger, "ledger-state-machines-only",
            f"QuotaLedger {ledger.node.id} is used by state machines only ({', '.join(ledger._state_machines)}): a state "
            "machine cannot remove the holds that left the quota's one-minute window (JSONPath has no date arithmetic), "
            "so they count until a process consumer writes the item, and once they reach the quota every reservation "
            "waits and then fails. sweeper=False turned off the function that removes them: drop sweeper=False, or give "
            "the ledger one process consumer that is always busy (a function with ledger.environment(share) and "
            "ledger.grant_use, or QueuedInference(ledger=...)); if one in another app uses this table and ledger_id, "
            "acknowledge this warning",
        )


def _ttl_attribute(table: dynamodb.ITable) -> str | None:
    """The TTL attribute of a table defined in this app (its CloudFormation TimeToLiveSpecification)."""
    spec = table.node.default_child.time_to_live_specification  # type: ignore[union-attr]
    if spec is None or cdk.Token.is_unresolved(spec):
        return None
    name = getattr(spec, "attribute_name", None)
    enabled = getattr(spec, "enabled", None)
    return name if isinstance(name, str) and enabled is not False else None
