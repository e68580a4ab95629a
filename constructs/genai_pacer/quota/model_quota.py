"""One model quota, many consumers: every construct that calls a model draws a named share of one plan.

A model's TPM quota is one pool per account and Region, but each construct sizes its concurrency as
if it had the pool to itself: three consumers each planned against the whole quota allow three
times the calls in flight the quota sustains, and nothing warns. `ModelQuota` is declared once per
model (or inference profile) and Region; each consumer draws a share from it:

    quota = ModelQuota(self, "HaikuQuota", model=model, tpm_quota=400_000, burndown=5)
    profile = quota.profile(input_tokens=2_500, output_tokens=300, max_tokens=440)
    BoundedMap(self, "Nightly", max_concurrency=quota.share("Nightly", profile, fraction=0.3, call_seconds=6), ...)

A share's plan is a `planning.RatePlan`, so every construct takes it unchanged where it takes a cap
(max_concurrency; AnswerRouter's reserved_concurrency) and fits it to its own range. At synth the
quota checks that its shares fit (over-allocation is an error listing each consumer), warns when
little headroom is left, and writes the plan into the cloud assembly (`genai-pacer-quota.<id>.json`,
and the construct's metadata) for `genai-pacer quota-check` and dashboards to read.

MaxConcurrency and Parallel width apply per execution, so a share states how many executions of
its consumer may run at once (`executions`) and its plan caps each one at its slice.

Every caller counts. At synth the quota finds each construct of the app that may call its model (by
its IAM grant on the model, in the quota's account and Region) and matches it to the share it holds.
A construct holds the share it was given, whatever the names: every genai-pacer construct that fits a
RatePlan to its cap records it as `concurrency_plan` (`_checks.fit_concurrency`, the one place that
sets it), and a construct of your own that takes a share sets that attribute to the plan it was
given. A grant on a role outside every genai-pacer construct (the user's own or an imported one, given
as StateMachineOptions(role=...)) belongs to the construct whose state machine runs with that role. A
construct given no share of this quota holds the share named after its construct id or
path: that is how a consumer without a cap to take a plan holds one (ParallelPrompts, a function of
yours, declared with `calls=`). A share held by two consumers is an error naming both; a caller
holding no share is reported with its worst case (its cap on calls in flight x each call's
reservation, or unbounded without a cap), and a share no caller holds (drawn for no one, or given
to a construct that calls another model or calls it in another account or Region) is reported by
name: warnings, or errors with `require_shares=True`. A share no caller holds still counts in the
allocation, since a consumer synth cannot see (a role imported by ARN, a process outside the app)
may draw it; the plan file lists it (`unheld_shares`).

Real caps count. Synth reads each holder's own caps from its resources (a Map's MaxConcurrency, a
Parallel's branches, the lower of a function's reserved concurrency and its event sources' maximum
concurrency) and counts the share at the calls in flight they allow: for a construct given the
share, the lower of the share and its own caps; for one holding it by name, its own caps, which may
be above the share (a router named after a share of 2 calls but built with reserved_concurrency=5
has 5 in flight). A holder nothing readable caps counts as its share. Each share draws the larger of
its TPM and what its holders' caps draw (`Share.drawn_tpm`), except a share whose holders all take
part in a QuotaLedger of the quota (`Share.in_ledger`): the ledger holds what they draw beyond the
share to what the others leave free, so it draws its TPM, its guaranteed floor. A share drawn with
burst_tpm (what a ledger consumer may borrow up to) held by a construct outside every ledger is an
error naming it; over-allocation and the warning
threshold are checked on those draws, and the error names each holder drawing beyond its share.
Each call counts at the max_tokens its holder really sends (a state's MaxTokens, a construct's
max_output_tokens) where that is above the share's profile, since Bedrock reserves it when a call
starts; a warning names both numbers.

Both quota models: tpm_quota plans bedrock-runtime's one combined tokens per minute (Converse and
InvokeModel). input_tpm_quota and output_tpm_quota instead plan a bedrock-mantle quota
(planning.MANTLE_QUOTAS_DOC: the OpenAI Responses / Chat Completions and Anthropic Messages
endpoint): a fraction= share is that part of both, each execution planned with
planning.sustainable_mantle_rate; a calls= share draws what its calls draw on each; over-allocation
of either quota is an error; pacer_environment sizes QuotaPacer(input_tpm=..., output_tpm=...). A
mantle caller's IAM grant (bedrock-mantle:CreateInference) names projects, not models, so synth
finds no callers: a mantle share is held by declaration only.

Days count too: Bedrock also has a per-model daily token quota (TPM x 1,440 by default) and a
cross-model daily cap per account and Region (planning.QUOTAS_DOC). Each share says how many hours
a day its consumer runs (`hours_per_day`), and synth warns when the day's tokens would pass either.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import math
import os
import re
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, cast

import aws_cdk as cdk
import jsii
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_stepfunctions as sfn

from constructs import Construct, IConstruct, IValidation

from .._internal.checks import Checks, _show, is_token, warn
from .._internal.docs import constructor_doc
from .._internal.runtime_constants import ledger_layout
from ..models import BedrockModel, as_bedrock_model
from . import planning
from .check import PLAN_FILE_PREFIX

__all__ = [
    "DEFAULT_WARN_AT",
    "INVOKE_ACTIONS",
    "PACER_ENVIRONMENT",
    "PACER_MANTLE_ENVIRONMENT",
    "PACER_RESERVED_ENVIRONMENT",
    "PLAN_FILE_PREFIX",
    "PLAN_METADATA_TYPE",
    "Consumer",
    "ModelQuota",
    "QuotaPlan",
    "Share",
]

#: Allocation (shares over the allocatable quota) from which synth warns: below 10% headroom, the
#: estimates a plan rests on (input length, output p99, call duration) leave no margin for error.
DEFAULT_WARN_AT = 0.9
#: The construct metadata type holding the same plan (in <stack>.metadata.json of the assembly).
PLAN_METADATA_TYPE = "genai-pacer:quota-plan"
#: Environment variables `ModelQuota.pacer_environment` sets and `pacer_runtime.QuotaPacer.from_environment`
#: reads (the runtime cannot import this module, so tests keep the two lists equal).
PACER_ENVIRONMENT = ("GENAI_PACER_TPM", "GENAI_PACER_RPM", "GENAI_PACER_BURNDOWN")
#: ... and, for a share drawn at the Reserved tier, its part of the reservation (pacer_runtime.quota_pacer
#: RESERVED_ENVIRONMENT).
PACER_RESERVED_ENVIRONMENT = ("GENAI_PACER_RESERVED_INPUT_TPM", "GENAI_PACER_RESERVED_OUTPUT_TPM")
#: ... and, for a share of a bedrock-mantle quota, its input and output tokens per minute instead of
#: GENAI_PACER_TPM (pacer_runtime.quota_pacer MANTLE_ENVIRONMENT).
PACER_MANTLE_ENVIRONMENT = ("GENAI_PACER_INPUT_TPM", "GENAI_PACER_OUTPUT_TPM")
#: Bedrock's two quota models: bedrock-runtime's one combined tokens per minute (planning.QUOTAS_DOC)
#: and bedrock-mantle's input and output tokens per minute (planning.MANTLE_QUOTAS_DOC).
ENDPOINTS = ("bedrock-runtime", "bedrock-mantle")
#: The IAM action a call to the bedrock-mantle endpoint authorizes as, on project resources, not on a
#: model (Bedrock user guide, "Making inference requests",
#: https://docs.aws.amazon.com/bedrock/latest/userguide/inference.html, and the AWS managed policy
#: AmazonBedrockMantleInferenceAccess: bedrock-mantle:CreateInference on
#: arn:aws:bedrock-mantle:*:*:project/*). A grant names no model, so synth cannot tell which
#: constructs call a mantle quota's model: such a quota's shares are held by declaration only.
MANTLE_INVOKE_ACTION = "bedrock-mantle:CreateInference"
#: Bedrock's service tiers (botocore's ServiceTierType, as model_tasks.SERVICE_TIERS): priority,
#: default and flex draw on the one on-demand quota; reserved on the model's reservation
#: (planning.SERVICE_TIERS_DOC).
SERVICE_TIERS = ("priority", "default", "flex", "reserved")
#: A share's priority in a QuotaLedger, lowest first (pacer_runtime/ledger_layout.py, the one file the
#: runtime and the constructs load).
PRIORITIES: tuple[str, ...] = ledger_layout().PRIORITIES

_SHARE_KINDS = ("fraction", "tpm", "calls")
#: A Service Quotas quota code as the API accepts it (botocore service-quotas QuotaCode pattern,
#: checked by tests/test_aws_facts_bedrock.py). Bedrock's codes look like L-A1B2C3D4, but only the
#: API's own pattern is enforced, so a valid code is never refused here.
QUOTA_CODE = re.compile(r"[a-zA-Z][a-zA-Z0-9-]{1,128}")
_MODEL_HINT = "a BedrockModel, e.g. BedrockModel.from_id('us.amazon.nova-2-lite-v1:0')"
_PROFILE_HINT = "a planning.TokenProfile; quota.profile(input_tokens=..., output_tokens=..., max_tokens=...) applies the quota's burndown"
_MAX_CALLS = 1_000_000  # far above any construct's range (a distributed Map allows 10,000 at once)
#: IAM actions that call a model on bedrock-runtime (Converse and ConverseStream authorize as these):
#: https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonbedrock.html
INVOKE_ACTIONS = ("bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream")
#: The condition key that confines a grant on a foundation model to calls through one inference
#: profile (same page): such a grant does not let the role call the model on its own quota.
INFERENCE_PROFILE_CONDITION = "bedrock:InferenceProfileArn"
#: Batch inference jobs run under a role Bedrock assumes; they draw on the batch quotas, not the
#: on-demand TPM (https://docs.aws.amazon.com/bedrock/latest/userguide/batch-inference-permissions.html).
BEDROCK_SERVICE_PRINCIPAL = "bedrock.amazonaws.com"


@dataclass(frozen=True)
class Share:
    """One consumer's draw on the quota.

    tpm (and rpm) is what the share allocates; per_execution is the plan one execution uses (its
    max_concurrency is what the construct gets); planned_in_flight = per_execution.max_concurrency x
    executions is the most calls the plan lets the consumer have in flight.

    held_in_flight: the calls in flight its holders' own caps allow, as synth read them from their
    resources (`ModelQuota.plan(consumers=True)`): a construct given the share caps at the lower of
    the share and its own caps; one holding it by name caps at its own caps, which may be more; a
    holder nothing readable caps counts as the plan. None: no holder was looked for or found.
    in_flight is that figure when known, else the plan's; tpm_at_cap is what in_flight calls draw
    back to back; drawn_tpm, what the share takes from the quota, is the larger of tpm and tpm_at_cap.

    held_max_tokens: the largest max_tokens its holders' requests set, as synth read it (a state's
    MaxTokens, a construct's max_output_tokens). Bedrock reserves a request's max_tokens when it starts,
    so when that is above profile.max_tokens the share is counted at the holders' real reservation
    (`reserving`), not the profile's. None: none was read.
    """

    name: str
    kind: str  # "fraction", "tpm" or "calls": how the share was declared
    tpm: float
    rpm: float | None
    executions: int
    per_execution: planning.RatePlan
    profile: planning.TokenProfile
    hours_per_day: float = 24.0
    held_in_flight: int | None = None
    held_max_tokens: int | None = None
    #: The service tier the consumer's calls ask for (None: none, served at default).
    service_tier: str | None = None
    #: A reserved share's part of the reservation, (input, output) tokens per minute: what the shares
    #: drawn at the Reserved tier before it left (None for every other tier).
    reserved_budget: tuple[float, float] | None = None
    #: With a QuotaLedger, the most the consumer may hold at once, borrowing what others leave unused
    #: (its burst cap; tpm is its guaranteed floor). None: none declared (the ledger's default, the
    #: allocatable quota). The plan allocates tpm, never this.
    burst_tpm: float | None = None
    #: The plan one execution needs to draw burst_tpm (its slice of it, as per_execution is of tpm);
    #: None without a burst.
    burst_per_execution: planning.RatePlan | None = None
    #: Whether every holder synth found takes part in a QuotaLedger of the quota: the ledger then holds
    #: their draw beyond the share to what the others leave free, so the share draws its TPM (its floor)
    #: whatever their caps (`ModelQuota.plan(consumers=True)`).
    in_ledger: bool = False
    #: On a bedrock-mantle quota, the share's output tokens per minute (tpm is then its input tokens per
    #: minute); None on bedrock-runtime.
    output_tpm: float | None = None
    #: With a QuotaLedger, who waits first for the capacity consumers borrow (PRIORITIES, lowest first):
    #: a borrowing call leaves free what a waiting consumer of a higher priority waits for. None: the
    #: lowest ("batch"). Floors are kept whatever the priorities.
    priority: str | None = None

    def reserved_plan(self, in_flight: int | None = None) -> planning.ReservedPlan | None:
        """For a reserved share: what its part of the reservation holds of `in_flight` calls back to
        back (default: in_flight) and what overflows to the on-demand quota; None for other tiers."""
        if self.reserved_budget is None:
            return None
        calls = self.in_flight if in_flight is None else in_flight
        return planning.plan_reserved(
            self.reserving, requests_per_minute=calls * 60 / self.per_execution.call_seconds,
            reserved_input_tpm=self.reserved_budget[0], reserved_output_tpm=self.reserved_budget[1],
            call_seconds=self.per_execution.call_seconds, headroom=0)

    @property
    def planned_in_flight(self) -> int:
        return self.per_execution.max_concurrency * self.executions

    @property
    def in_flight(self) -> int:
        return self.planned_in_flight if self.held_in_flight is None else self.held_in_flight

    @property
    def reserves_beyond_profile(self) -> bool:
        """Whether its holders' requests set a larger max_tokens than its profile, so reserve more."""
        return self.held_max_tokens is not None and self.held_max_tokens > self.profile.max_tokens

    @property
    def draws_beyond_profile(self) -> bool:
        """Whether that larger reservation raises its draw at the cap (it does not while settlement binds)."""
        return self.reserves_beyond_profile and self.tpm_at_cap > _tpm_at(
            self.profile, self.in_flight, self.per_execution.call_seconds, mantle=self.mantle) + 1e-6

    @property
    def mantle(self) -> bool:
        """Whether it is a share of a bedrock-mantle quota (input and output tokens per minute)."""
        return self.output_tpm is not None

    @property
    def output_tpm_at_cap(self) -> float | None:
        """On bedrock-mantle, the output tokens per minute its calls in flight generate back to back."""
        if self.output_tpm is None:
            return None
        return self.in_flight * 60 / self.per_execution.call_seconds * self.profile.output_tokens

    @property
    def drawn_output_tpm(self) -> float | None:
        """On bedrock-mantle, what it takes from the output quota: its output TPM, or more at its caps."""
        at_cap = self.output_tpm_at_cap
        return None if self.output_tpm is None or at_cap is None else max(self.output_tpm, at_cap)

    @property
    def reserving(self) -> planning.TokenProfile:
        """The profile its calls really reserve: the profile, with the holders' max_tokens where larger."""
        if self.held_max_tokens is None or not self.reserves_beyond_profile:
            return self.profile
        return dataclasses.replace(self.profile, max_tokens=self.held_max_tokens)

    @property
    def tpm_at_cap(self) -> float:
        """TPM drawn when every call it may have in flight runs back to back (at most tpm for the plan's
        own cap, which rounds down; more when a holder's own cap is above the plan, or its requests
        reserve more max_tokens than the profile says). A reserved share draws on the on-demand quota
        only what its part of the reservation cannot hold."""
        reserved = self.reserved_plan()
        if reserved is not None:
            return 0.0 if reserved.overflow is None else reserved.overflow.required_tpm
        return _tpm_at(self.reserving, self.in_flight, self.per_execution.call_seconds, mantle=self.mantle)

    @property
    def drawn_tpm(self) -> float:
        """What the share takes from the quota: its TPM, or what its holders draw at their caps if more,
        unless they all take part in a QuotaLedger (in_ledger): then its TPM, the floor the ledger keeps."""
        return self.tpm if self.in_ledger else max(self.tpm, self.tpm_at_cap)

    @property
    def daily_load(self) -> planning.DailyLoad:
        """The share's day: its calls at the cap, back to back, settling for hours_per_day."""
        settled_per_minute = self.in_flight * 60 / self.per_execution.call_seconds * self.profile.settled
        return planning.DailyLoad(self.name, settled_per_minute, self.hours_per_day)

    @property
    def requests_per_minute(self) -> float:
        """Requests per minute of all executions together at the plan's rate."""
        return self.per_execution.requests_per_minute * self.executions


@dataclass(frozen=True)
class Consumer:
    """A construct of the app that may call the quota's model, found by its IAM grant on the model.

    share: the share it holds (None: it draws none). calls_in_flight: the most calls it has in
    flight, per execution when per_execution (a state machine's Map or Parallel caps each execution);
    None when nothing caps it, or (deploy_time_cap) when its cap is a deploy-time value synth cannot
    read. cap: where that number comes from. max_tokens: the largest max_tokens
    its requests set, when the synthesized states show it (each call reserves its prompt plus that).
    """

    path: str
    kind: str
    share: str | None
    calls_in_flight: int | None
    cap: str
    max_tokens: int | None = None
    per_execution: bool = False
    deploy_time_cap: bool = False
    #: Whether it takes part in a QuotaLedger of this quota (ledger.grant_use, or a construct given ledger=):
    #: the ledger, not its caps, then bounds what it draws.
    in_ledger: bool = False

    def worst_case(self) -> str:
        """Its worst-case draw in words: calls in flight x each call's reservation, unknown, or unbounded."""
        if self.calls_in_flight is None and self.deploy_time_cap:
            return f"unknown at synth: {self.cap}, so the plan cannot count its calls in flight"
        if self.calls_in_flight is None:
            return f"unbounded: {self.cap}, so nothing limits its calls in flight"
        each = "its prompt + max_tokens" if self.max_tokens is None else f"its prompt + {self.max_tokens:,} max_tokens"
        held = "" if self.max_tokens is None else f", at least {self.calls_in_flight * self.max_tokens:,} tokens held at once"
        return f"up to {self.calls_in_flight} calls in flight ({self.cap}), each reserving {each}{held}"


@dataclass(frozen=True)
class QuotaPlan:
    """The quota and every share drawn from it, with the totals the checks and the table use.

    allocation is the shares' draws (Share.drawn_tpm: each share's TPM, or what its holders' caps draw
    when a plan with consumers found more) over the allocatable quota (tpm_quota minus what keep_free
    keeps for interactive traffic): above 1 the consumers overdraw the quota when they run together.
    """

    model_id: str
    region: str
    account: str
    tpm_quota: float
    rpm_quota: float | None
    burndown: float
    keep_free: float
    warn_at: float
    service_quota_code: str | None
    shares: tuple[Share, ...]
    daily_token_quota: float | None = None
    cross_model_daily_tokens: float | None = None
    other_models_daily_tokens: float = 0.0
    consumers: tuple[Consumer, ...] = ()
    with_consumers: bool = False  # whether the app's callers were looked for (plan(consumers=True))
    stage: str = ""  # the name of the Stage holding the quota's stack ("": the app itself)
    reserved_input_tpm: float | None = None  # the model's Reserved tier reservation, apart from tpm_quota
    reserved_output_tpm: float | None = None
    #: On a bedrock-mantle quota, its output tokens per minute (tpm_quota is then its input tokens per
    #: minute); None on bedrock-runtime.
    output_tpm_quota: float | None = None

    @property
    def endpoint(self) -> str:
        """The quota model: "bedrock-runtime" or "bedrock-mantle"."""
        return ENDPOINTS[0] if self.output_tpm_quota is None else ENDPOINTS[1]

    @property
    def allocatable_output_tpm(self) -> float | None:
        return None if self.output_tpm_quota is None else self.output_tpm_quota * (1 - self.keep_free)

    @property
    def allocated_output_tpm(self) -> float | None:
        """On bedrock-mantle, what the shares take from the output quota (each at its caps where more)."""
        if self.output_tpm_quota is None:
            return None
        return sum(share.drawn_output_tpm or 0.0 for share in self.shares)

    @property
    def output_allocation(self) -> float | None:
        allocatable, allocated = self.allocatable_output_tpm, self.allocated_output_tpm
        if allocatable is None or allocated is None:
            return None
        return allocated / allocatable if allocatable > 0 else math.inf

    @property
    def binding_allocation(self) -> float:
        """The larger allocation: the TPM's, or on bedrock-mantle the input's or the output's."""
        return max(self.allocation, self.output_allocation or 0.0)

    @property
    def kept_free_tpm(self) -> float:
        return self.tpm_quota * self.keep_free

    @property
    def allocatable_tpm(self) -> float:
        return self.tpm_quota - self.kept_free_tpm

    @property
    def allocated_tpm(self) -> float:
        """What the shares take: each share's TPM, or what its holders' caps draw where that is more."""
        return sum(share.drawn_tpm for share in self.shares)

    @property
    def headroom_tpm(self) -> float:
        """Allocatable TPM no share holds (negative when over-allocated)."""
        return self.allocatable_tpm - self.allocated_tpm

    @property
    def allocation(self) -> float:
        return self.allocated_tpm / self.allocatable_tpm if self.allocatable_tpm > 0 else math.inf

    @property
    def allocated_rpm(self) -> float:
        return sum(share.rpm or 0 for share in self.shares)

    @property
    def rpm_allocation(self) -> float | None:
        if self.rpm_quota is None:
            return None
        return self.allocated_rpm / (self.rpm_quota * (1 - self.keep_free))

    @property
    def in_flight(self) -> int:
        """Calls in flight when every consumer runs at its cap."""
        return sum(share.in_flight for share in self.shares)

    @property
    def tpm_at_caps(self) -> float:
        """TPM the consumers draw when all run at their caps together: the plan line a quota graph draws
        (observe.TpmQuota(planned_tpm=...)). At most allocated_tpm, but for shares whose holders take part
        in a QuotaLedger: their caps may draw their bursts, and the ledger holds them all to the quota."""
        return sum(share.tpm_at_cap for share in self.shares)

    def daily(self) -> planning.DailyPlan:
        """The shares' day (each at its cap for its hours_per_day) against the daily quotas."""
        return planning.plan_daily_tokens(
            [share.daily_load for share in self.shares], tpm_quota=self.tpm_quota,
            daily_token_quota=self.daily_token_quota, cross_model_daily_tokens=self.cross_model_daily_tokens,
            other_models_daily_tokens=self.other_models_daily_tokens)

    @property
    def shares_by_name(self) -> dict[str, Share]:
        return {share.name: share for share in self.shares}

    def holders(self, share: Share) -> tuple[Consumer, ...]:
        """The constructs found holding `share` (needs a plan with consumers)."""
        return tuple(c for c in self.consumers if c.share == share.name)

    @property
    def unshared(self) -> tuple[Consumer, ...]:
        """Constructs that may call the model and hold no share: their draw is not in the plan."""
        return tuple(c for c in self.consumers if c.share is None)

    @property
    def unheld(self) -> tuple[Share, ...]:
        """Shares no construct that may call the model holds (empty unless the callers were looked for).
        They still count in the allocation: a consumer synth cannot see (a role imported by ARN, a
        process outside the app, a stack not built yet) may draw them, and dropping one would let
        the other shares take its TPM."""
        return tuple(s for s in self.shares if not self.holders(s)) if self.with_consumers else ()

    def over_allocated(self) -> bool:
        # A hair of tolerance: fractions such as 0.1 + 0.2 do not add up exactly in floating point.
        rpm = self.rpm_allocation
        return self.binding_allocation > 1 + 1e-9 or (rpm is not None and rpm > 1 + 1e-9)

    def table(self) -> str:
        """The plan as a plain-text table: consumers, TPM, concurrency and headroom."""
        if self.output_tpm_quota is not None:
            return self._mantle_table(self.output_tpm_quota)
        quota = self.tpm_quota
        header = ("consumer", "tier", "TPM", "of quota", "burst TPM", "RPM", "calls/execution", "executions",
                  "in flight", "TPM at cap", "tokens/day")
        rows: list[tuple[str, ...]] = [
            (
                share.name,
                _tier_cell(share),
                f"{share.tpm:,.0f}",
                f"{share.tpm / quota:.1%}",
                "-" if share.burst_tpm is None else f"{share.burst_tpm:,.0f}",
                "-" if share.rpm is None else f"{share.rpm:,.1f}",
                str(share.per_execution.max_concurrency),
                str(share.executions),
                str(share.in_flight) if share.in_flight == share.planned_in_flight
                else f"{share.in_flight} (plan {share.planned_in_flight})",
                f"{share.tpm_at_cap:,.0f}",
                f"{share.daily_load.daily_tokens:,.0f}",
            )
            for share in self.shares
        ]
        rows.append(("(kept free)", "", f"{self.kept_free_tpm:,.0f}", f"{self.keep_free:.1%}", *[""] * 7))
        rows.append(("(headroom)", "", f"{self.headroom_tpm:,.0f}", f"{self.headroom_tpm / quota:.1%}", *[""] * 7))
        widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
        day = self.daily()
        lines = [
            f"{self.model_id} in {self.region}: {quota:,.0f} TPM"
            + ("" if self.rpm_quota is None else f", {self.rpm_quota:,.0f} RPM (legacy)")
            + f", burndown {self.burndown:g}; {self.allocated_tpm:,.0f} TPM allocated ({self.allocation:.1%} of "
            f"{self.allocatable_tpm:,.0f} allocatable), {self.in_flight} calls in flight at the caps; "
            f"{day.daily_tokens:,.0f} tokens a day ({day.fraction:.1%} of the {day.daily_quota:,.0f} daily quota)"
            + ("" if self.reserved_input_tpm is None else
               f"; Reserved tier reservation {self.reserved_input_tpm:,.0f} input and {self.reserved_output_tpm:,.0f} "
               "output TPM, apart from the on-demand quota priority, default and flex share")
        ]
        for row in (header, *rows):
            lines.append("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip())
        return "\n".join(lines)

    def _mantle_table(self, output_quota: float) -> str:
        """A bedrock-mantle plan: each share's input and output tokens per minute (no RPM, no day)."""
        header = ("consumer", "tier", "input TPM", "of input", "output TPM", "of output", "calls/execution",
                  "executions", "in flight", "input at cap", "output at cap")
        rows: list[tuple[str, ...]] = [
            (share.name, share.service_tier or "-", f"{share.tpm:,.0f}", f"{share.tpm / self.tpm_quota:.1%}",
             f"{share.output_tpm or 0:,.0f}", f"{(share.output_tpm or 0) / output_quota:.1%}",
             str(share.per_execution.max_concurrency), str(share.executions),
             str(share.in_flight) if share.in_flight == share.planned_in_flight
             else f"{share.in_flight} (plan {share.planned_in_flight})",
             f"{share.tpm_at_cap:,.0f}", f"{share.output_tpm_at_cap or 0:,.0f}")
            for share in self.shares
        ]
        kept_out = output_quota * self.keep_free
        headroom_out = cast(float, self.allocatable_output_tpm) - cast(float, self.allocated_output_tpm)
        rows.append(("(kept free)", "", f"{self.kept_free_tpm:,.0f}", f"{self.keep_free:.1%}", f"{kept_out:,.0f}",
                     f"{self.keep_free:.1%}", *[""] * 5))
        rows.append(("(headroom)", "", f"{self.headroom_tpm:,.0f}", f"{self.headroom_tpm / self.tpm_quota:.1%}",
                     f"{headroom_out:,.0f}", f"{headroom_out / output_quota:.1%}", *[""] * 5))
        widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
        lines = [
            f"{self.model_id} in {self.region}: bedrock-mantle, {self.tpm_quota:,.0f} input and {output_quota:,.0f} "
            f"output tokens per minute (no RPM, no daily quota); {self.allocated_tpm:,.0f} input TPM allocated "
            f"({self.allocation:.1%} of {self.allocatable_tpm:,.0f} allocatable), {self.allocated_output_tpm:,.0f} "
            f"output TPM allocated ({self.output_allocation:.1%} of {self.allocatable_output_tpm:,.0f} allocatable), "
            f"{self.in_flight} calls in flight at the caps"
        ]
        for row in (header, *rows):
            lines.append("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                                   for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip())
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready data (what the cloud assembly file holds)."""
        mantle = self.output_tpm_quota is not None
        return {
            "model_id": self.model_id,
            "region": self.region,
            "account": self.account,
            "stage": self.stage,
            "tpm_quota": self.tpm_quota,
            "rpm_quota": self.rpm_quota,
            "burndown": self.burndown,
            "keep_free": self.keep_free,
            "warn_at": self.warn_at,
            "service_quota_code": self.service_quota_code,
            "reserved_input_tpm": self.reserved_input_tpm,
            "reserved_output_tpm": self.reserved_output_tpm,
            "allocated_tpm": round(self.allocated_tpm, 1),
            "allocatable_tpm": round(self.allocatable_tpm, 1),
            "headroom_tpm": round(self.headroom_tpm, 1),
            "allocation": round(self.allocation, 4),
            "in_flight": self.in_flight,
            "tpm_at_caps": round(self.tpm_at_caps, 1),
            "endpoint": self.endpoint,
            "output_tpm_quota": self.output_tpm_quota,
            "allocated_output_tpm": None if not mantle else round(cast(float, self.allocated_output_tpm), 1),
            "allocatable_output_tpm": None if not mantle else round(cast(float, self.allocatable_output_tpm), 1),
            "output_allocation": None if not mantle else round(cast(float, self.output_allocation), 4),
            "daily_token_quota": None if mantle else round(self.daily().daily_quota, 1),
            "daily_tokens": None if mantle else round(self.daily().daily_tokens, 1),
            "cross_model_daily_tokens": self.cross_model_daily_tokens,
            "other_models_daily_tokens": round(self.other_models_daily_tokens, 1),
            "unshared_consumers": [asdict(consumer) for consumer in self.unshared],
            "unheld_shares": [share.name for share in self.unheld],
            "shares": [
                {
                    "name": share.name,
                    "kind": share.kind,
                    "service_tier": share.service_tier,
                    **_reserved_fields(share),
                    "tpm": round(share.tpm, 1),
                    "rpm": None if share.rpm is None else round(share.rpm, 2),
                    "fraction_of_quota": round(share.tpm / self.tpm_quota, 4),
                    "burst_tpm": None if share.burst_tpm is None else round(share.burst_tpm, 1),
                    "burst_calls_per_execution": None if share.burst_per_execution is None
                    else share.burst_per_execution.max_concurrency,
                    "in_ledger": share.in_ledger,
                    "priority": share.priority,
                    "executions": share.executions,
                    "calls_per_execution": share.per_execution.max_concurrency,
                    "in_flight": share.in_flight,
                    "planned_in_flight": share.planned_in_flight,
                    "requests_per_minute": round(share.requests_per_minute, 2),
                    "call_seconds": share.per_execution.call_seconds,
                    "tpm_at_cap": round(share.tpm_at_cap, 1),
                    "drawn_tpm": round(share.drawn_tpm, 1),
                    "held_max_tokens": share.held_max_tokens,
                    "hours_per_day": share.hours_per_day,
                    **({"output_tpm": round(cast(float, share.output_tpm), 1),
                        "output_tpm_at_cap": round(cast(float, share.output_tpm_at_cap), 1),
                        "drawn_output_tpm": round(cast(float, share.drawn_output_tpm), 1)} if mantle
                       else {"daily_tokens": round(share.daily_load.daily_tokens, 1)}),
                    "holders": [c.path for c in self.holders(share)],
                    "profile": asdict(share.profile),
                }
                for share in self.shares
            ],
            "table": self.table().splitlines(),
        }


# Quotas per app, to find two declared for the same model, account and Region.
_QUOTAS: weakref.WeakKeyDictionary[Any, list[ModelQuota]] = weakref.WeakKeyDictionary()


@constructor_doc
class ModelQuota(Construct):
    """One model's (or inference profile's) quota in one account and Region, shared by named consumers.

    model: required; the model or inference profile the consumers call. Bedrock keeps separate
        quotas for on-demand and cross-Region calls of one model: declare the one the consumers use.
    tpm_quota: the bedrock-runtime tokens-per-minute quota (Service Quotas: "On-demand InvokeModel tokens
        per minute for <model>" or "Cross-Region InvokeModel tokens per minute for <model>").
        `genai-pacer quota-check` compares it with the account's value before you deploy. Required,
        unless the quota is bedrock-mantle's (then refused).
    input_tpm_quota / output_tpm_quota: a bedrock-mantle quota instead (both; Service Quotas:
        "Bedrock Mantle input tokens per minute for <model>" and "... output ...",
        planning.MANTLE_QUOTAS_DOC). Shares are then drawn with fraction= (that part of both) or
        calls=; rpm_quota, a burndown other than 1, the daily quotas, a reservation,
        service_quota_code and require_shares are refused with it, naming each. Default: None.
    rpm_quota: legacy; a requests-per-minute figure for accounts or tooling that still track one. Bedrock
        no longer enforces RPM on the bedrock-runtime endpoint (planning.RPM_RULE), so a plan never
        needs it. Given, the shares split it, it caps their rates (each share's RatePlan then says
        limited_by "rpm" and names it legacy), pacer_environment passes it to QuotaPacer, and synth
        fails when the shares overdraw it, since that tooling would then hold them back; quota-check
        reports it for information only. Default: None.
    burndown: quota tokens per output token of the model (1, 5, 10 or 15: check its current rate on
        planning.BURNDOWN_DOC; another value is warned about at synth). Every share's profile must use
        it. Default: 1.
    keep_free: the fraction of the quota no share may take, kept for traffic the app does not
        declare (interactive users, a console, another application), 0 <= keep_free < 1. Default: 0.
    warn_at: allocation of the allocatable quota (tpm_quota x (1 - keep_free)) from which synth
        warns that little headroom is left, 0 < warn_at <= 1. Default: 0.9.
    service_quota_code: the Service Quotas code of this quota (L-...), so `genai-pacer quota-check`
        reads it without matching quota names. Default: None (matched by the model's name). A
        deploy-time token is refused: the code is read from the plan file before deploying.
    daily_token_quota: the model's "Model invocation max tokens per day" quota. Default: None, the
        AWS default of tpm_quota x 1,440 (new accounts may have less: check Service Quotas).
    cross_model_daily_tokens: the account's "Cross-Model Max Tokens Per Day" in the Region, shared
        by every model; the days of every ModelQuota of the app in this account and Region count
        against it. Default: None (not checked).
    reserved_input_tpm / reserved_output_tpm: the model's Reserved tier reservation, in input and
        output tokens per minute (both or neither), apart from tpm_quota (planning.SERVICE_TIERS_DOC).
        Shares drawn with service_tier="reserved" split it in the order they are drawn; what their
        part cannot hold overflows to the on-demand quota and counts in the allocation. Default:
        None (no reservation: a reserved share is refused).
    require_shares: make a construct that may call the model without holding a share, and a share
        that no such construct holds, synth errors instead of warnings. Default: False (warnings,
        so an app adopting ModelQuota one consumer at a time still synthesizes).

    Draw shares with `share(...)`; read the plan with `plan()`. At synth: over-allocation (at the
    holders' real caps) and a share held by two constructs are errors (validation) naming each; a
    caller without a share and a share without a holder (see the module docstring), an allocation
    at or above warn_at, a day past a daily quota, a quota without shares, and a second quota for
    the same model, account and Region are warnings; the plan is written to the cloud assembly.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        model: BedrockModel,
        tpm_quota: float | None = None,
        rpm_quota: float | None = None,
        burndown: float = 1.0,
        keep_free: float = 0.0,
        warn_at: float = DEFAULT_WARN_AT,
        service_quota_code: str | None = None,
        daily_token_quota: float | None = None,
        cross_model_daily_tokens: float | None = None,
        require_shares: bool = False,
        reserved_input_tpm: float | None = None,
        reserved_output_tpm: float | None = None,
        input_tpm_quota: float | None = None,
        output_tpm_quota: float | None = None,
    ) -> None:
        super().__init__(scope, id)
        model = as_bedrock_model(model)
        mantle = input_tpm_quota is not None or output_tpm_quota is not None
        with Checks("ModelQuota", scope=self) as check:
            check.instance("model", model, BedrockModel, _MODEL_HINT)
            if mantle:
                _mantle_props(check, tpm_quota=tpm_quota, input_tpm_quota=input_tpm_quota,
                              output_tpm_quota=output_tpm_quota, rpm_quota=rpm_quota, burndown=burndown,
                              daily_token_quota=daily_token_quota, cross_model_daily_tokens=cross_model_daily_tokens,
                              reserved=(reserved_input_tpm, reserved_output_tpm),
                              service_quota_code=service_quota_code, require_shares=require_shares)
            elif tpm_quota is None:
                check.fail("tpm_quota is required: the model's bedrock-runtime tokens-per-minute quota from Service "
                           "Quotas, e.g. 400000 (or input_tpm_quota and output_tpm_quota for a bedrock-mantle quota, "
                           f"{planning.MANTLE_QUOTAS_DOC})", id="tpm_quota.missing")
            else:
                _plan_number(check, "tpm_quota", tpm_quota, minimum=1, maximum=planning.MAX_TPM_QUOTA,
                             fix="the model's tokens-per-minute quota from Service Quotas, e.g. 400000")
            _plan_number(check, "rpm_quota", rpm_quota, above=0, maximum=planning.MAX_RATE, optional=True,
                         fix="a legacy requests-per-minute figure, or None (bedrock-runtime no longer enforces RPM)")
            _plan_number(check, "burndown", burndown, minimum=1, maximum=planning.MAX_BURNDOWN,
                         fix="quota tokens per output token: 1 for most models, 5 for older Claude models, "
                         "10 or 15 for the newest (check the model's current rate)")
            if _plan_number(check, "keep_free", keep_free, minimum=0,
                            fix="a fraction of the quota kept for undeclared traffic, 0 <= keep_free < 1, e.g. 0.2"):
                check.rule(keep_free < 1, f"keep_free={keep_free!r} keeps the whole quota free, so no share can draw "
                           "from it; pass a fraction below 1, e.g. 0.2", id="keep_free.whole-quota")
            _plan_number(check, "warn_at", warn_at, above=0, maximum=1,
                         fix="the allocation (0..1 of the allocatable quota) from which synth warns, e.g. 0.9")
            if is_token(service_quota_code):
                check.fail("service_quota_code is an unresolved CDK token (a deploy-time value); the code goes into "
                           "the plan file `genai-pacer quota-check` reads before deploying: pass it as text, e.g. "
                           "'L-A1B2C3D4'", id="service_quota_code.deploy-time")
            elif service_quota_code is not None and check.text("service_quota_code", service_quota_code):
                check.rule(QUOTA_CODE.fullmatch(service_quota_code) is not None,
                           f"service_quota_code={service_quota_code!r} is not a Service Quotas code; codes look like "
                           "'L-A1B2C3D4' (aws service-quotas list-service-quotas --service-code bedrock)", id="service_quota_code.format")
            daily_max = planning.MAX_TPM_QUOTA * planning.MINUTES_PER_DAY
            _plan_number(check, "daily_token_quota", daily_token_quota, minimum=1, maximum=daily_max, optional=True,
                         fix="the model's daily token quota from Service Quotas, or None for tpm_quota x 1,440")
            _plan_number(check, "cross_model_daily_tokens", cross_model_daily_tokens, minimum=1, maximum=daily_max,
                         optional=True, fix="the account's Cross-Model Max Tokens Per Day in the Region, or None")
            check.instance("require_shares", require_shares, bool, "True or False")
            for name, value in (("reserved_input_tpm", reserved_input_tpm), ("reserved_output_tpm", reserved_output_tpm)):
                _plan_number(check, name, value, minimum=1, maximum=planning.MAX_TPM_QUOTA, optional=True,
                             fix="the reservation's tokens per minute (from your AWS account team), or None")
            check.rule((reserved_input_tpm is None) == (reserved_output_tpm is None),
                       "reserved_input_tpm and reserved_output_tpm go together: a Reserved tier reservation has an input "
                       "and an output budget; pass both, or neither", id="reserved_input_tpm.without-output")
        self.model = model
        self.reserved_input_tpm = None if reserved_input_tpm is None else float(reserved_input_tpm)
        self.reserved_output_tpm = None if reserved_output_tpm is None else float(reserved_output_tpm)
        #: "bedrock-runtime" (tpm_quota) or "bedrock-mantle" (input_tpm_quota and output_tpm_quota).
        self.endpoint = ENDPOINTS[1] if mantle else ENDPOINTS[0]
        self.input_tpm_quota = None if input_tpm_quota is None else float(input_tpm_quota)
        self.output_tpm_quota = None if output_tpm_quota is None else float(output_tpm_quota)
        # The quota the plan allocates: the combined TPM, or bedrock-mantle's input tokens per minute
        # (its output quota is allocated beside it: Share.output_tpm, QuotaPlan.output_allocation).
        self.tpm_quota = float(cast(float, input_tpm_quota if mantle else tpm_quota))
        self.rpm_quota = None if rpm_quota is None else float(rpm_quota)
        self.burndown = float(burndown)
        self.keep_free = float(keep_free)
        self.warn_at = float(warn_at)
        self.service_quota_code = service_quota_code
        self.daily_token_quota = None if daily_token_quota is None else float(daily_token_quota)
        self.cross_model_daily_tokens = None if cross_model_daily_tokens is None else float(cross_model_daily_tokens)
        self.require_shares = require_shares
        if self.burndown not in planning.PUBLISHED_BURNDOWN_RATES:
            warn(
                self,
                "quota-unpublished-burndown",
                f"ModelQuota {id}: burndown={self.burndown:g} is a rate no model has: output tokens count "
                f"{', '.join(f'{r}x' for r in planning.PUBLISHED_BURNDOWN_RATES)} against the quota (1x for most "
                f"models, 5x for those {planning.BURNDOWN_DOC} lists), and a wrong rate mis-sizes every share; "
                "pass the model's rate from that page",
            )
        self._shares: dict[str, Share] = {}
        self._issued: dict[int, tuple[planning.RatePlan, str]] = {}  # id(plan) -> (plan, share name)
        self._ledgers: list[Any] = []  # the QuotaLedgers of this quota (each appends itself)
        self._synth_plan: QuotaPlan | None = None  # plan(consumers=True) of the last validation (_complete_plan)
        self._in_census = 0  # > 0 while the census runs (QuotaLedger.outside_shares)
        _QUOTAS.setdefault(self.node.root, []).append(self)
        self.node.add_validation(_Enforced(self))
        cdk.Aspects.of(self).add(_PublishPlan(self))

    # --- drawing shares ---------------------------------------------------------------------------

    def profile(
        self,
        *,
        input_tokens: int,
        output_tokens: int,
        max_tokens: int,
        cache_write_tokens: int = 0,
        cache_read_tokens: int = 0,
    ) -> planning.TokenProfile:
        """A planning.TokenProfile of one request to this model, with the quota's burndown."""
        return planning.TokenProfile(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            max_tokens=max_tokens,
            burndown=self.burndown,
            cache_write_tokens=cache_write_tokens,
            cache_read_tokens=cache_read_tokens,
        )

    def share(
        self,
        name: str,
        profile: planning.TokenProfile,
        *,
        call_seconds: float,
        fraction: float | None = None,
        tpm: float | None = None,
        calls: int | None = None,
        executions: int = 1,
        hours_per_day: float = 24.0,
        service_tier: str | None = None,
        burst_tpm: float | None = None,
        priority: str | None = None,
    ) -> planning.RatePlan:
        """Draw a named share and return the plan one execution of the consumer uses.

        Give exactly one of:
        - fraction: of the whole tpm_quota (0.3 is 30%), or tpm: an absolute TPM. The share's
          plan is `planning.sustainable_rate` over the share divided by `executions`; its
          max_concurrency is the cap a Map or queue construct takes (`max_concurrency=plan`).
        - calls: a fixed number of calls one execution has in flight (ParallelPrompts' branch
          count, which takes no cap). The share is then the TPM those calls draw
          (`planning.plan_tpm` at calls x 60 / call_seconds requests per minute).

        profile: the token shape of one request (quota.profile(...) applies the burndown).
        call_seconds: the average duration of one call, which turns a rate into calls in flight.
        executions: how many executions of the consumer may run at once (MaxConcurrency and Parallel
            width apply per execution). Default: 1, for a consumer that never overlaps itself.
        hours_per_day: how long a day the consumer runs at its cap (a nightly run: its window;
            daytime traffic: its hours), for the daily token quotas. Default: 24, the worst case.
        name: the share's label in the plan. A construct given the returned plan holds the share
            whatever its name; a consumer that takes no plan (ParallelPrompts, a function of yours)
            holds the share named after its construct id (or path).
        With an rpm_quota (legacy), a fraction or tpm share also takes that fraction of the RPM.
        service_tier: the tier the consumer's calls ask for (give the consumer the same one). priority,
            default and flex all draw on the one on-demand quota, so the share is planned as without
            a tier, and the tier is recorded in the plan. "reserved" draws on the quota's reservation
            (reserved_input_tpm/reserved_output_tpm) and needs calls= (the rate it holds): what the
            part of the reservation the earlier reserved shares left cannot hold overflows to the
            on-demand quota, and that overflow is the share's TPM. Default: None (served at default).
        burst_tpm: with a QuotaLedger, the share's TPM is the consumer's guaranteed floor and burst_tpm
            its burst cap: the most it may hold in the ledger at once, borrowing what the other
            consumers leave unused, from the share's TPM up to the allocatable quota (tpm_quota x
            (1 - keep_free)). The plan allocates the floor (the bursts may add up past the quota: the
            ledger holds them to it at run time) and shows the burst; QuotaLedger.environment(share)
            and the constructs given ledger= make it the consumer's cap in the ledger. The plan
            returned is still the floor's. Refused with calls= (a fixed width has nothing to borrow up
            to) and with service_tier="reserved". Default: None (in a ledger, the allocatable quota).
        priority: with a QuotaLedger, who waits first for what the consumers borrow: "interactive"
            (a user waits on its calls) or "batch". A borrowing call leaves free what a waiting consumer
            of a higher priority waits for, as it does what a consumer waiting within its floor waits
            for; floors are kept whatever the priorities. QuotaLedger.environment(share) and
            QueuedInference(ledger=...) give it to the consumer (GENAI_PACER_LEDGER_PRIORITY). A state
            machine takes part as "batch" (its want is a floor owner's, never a priority's):
            "interactive" for a share a state machine holds is refused, and so is a priority whose
            holder takes part in no ledger.
            Default: None (the lowest, "batch").
        """
        with Checks(f"ModelQuota.share({_show(name)})", scope=self) as check:  # a token by its kind, never its encoding
            if is_token(name):
                check.fail("name is an unresolved CDK token; a share's name is a label in the plan: pass text", id="name.deploy-time-share")
            elif check.text("name", name, max_length=80, fix="the consumer's name, e.g. its construct id"):
                check.rule(name not in self._shares,
                           f"name={name!r} is already drawn from this quota; give each consumer its own name "
                           f"(taken: {', '.join(self._shares)})", id="name.taken")
            profile_ok = check.instance("profile", profile, planning.TokenProfile, _PROFILE_HINT)
            if profile_ok:
                check.rule(profile.burndown == self.burndown,
                           f"profile.burndown={profile.burndown:g} differs from the quota's burndown={self.burndown:g}: "
                           "the share would be planned for another model; build the profile with "
                           "quota.profile(...) or dataclasses.replace(profile, burndown=quota.burndown)", id="profile.other-burndown")
            seconds_ok = _plan_number(check, "call_seconds", call_seconds, minimum=planning.MIN_CALL_SECONDS,
                                      maximum=planning.MAX_CALL_SECONDS,
                                      fix="the average duration of one model call in seconds, e.g. 6")
            given = [kind for kind, value in (("fraction", fraction), ("tpm", tpm), ("calls", calls)) if value is not None]
            kind_ok = check.rule(len(given) == 1,
                                 f"{' and '.join(given) or 'none of fraction, tpm and calls'} given; pass exactly one: "
                                 "fraction (of the quota) or tpm for a consumer that takes a cap (a Map, a queue), "
                                 "calls for one with a fixed width (ParallelPrompts' branches)", id="fraction.one-of-fraction-tpm-calls")
            amount_ok = False
            if fraction is not None:
                amount_ok = _plan_number(check, "fraction", fraction, above=0, maximum=1,
                                         fix="a fraction of the whole tpm_quota, e.g. 0.3 for 30%")
            elif tpm is not None:
                amount_ok = _plan_number(check, "tpm", tpm, minimum=1, maximum=self.tpm_quota,
                                         fix=f"tokens per minute, at most the quota's {self.tpm_quota:,.0f}")
            elif calls is not None:
                amount_ok = _plan_number(check, "calls", calls, minimum=1, maximum=_MAX_CALLS, whole=True,
                                         fix="the calls one execution has in flight, e.g. the number of Parallel branches")
            executions_ok = _plan_number(check, "executions", executions, minimum=1, maximum=_MAX_CALLS, whole=True,
                                         fix="how many executions may run at once; 1 for a consumer that never overlaps")
            _plan_number(check, "hours_per_day", hours_per_day, above=0, maximum=24,
                         fix="hours a day the consumer runs at its cap, more than 0 and at most 24")
            if is_token(service_tier):
                check.fail("service_tier is an unresolved CDK token, but the plan needs the tier at synth: pass one of "
                           f"{', '.join(SERVICE_TIERS)}", id="service_tier.deploy-time")
            elif (service_tier is not None and check.one_of("service_tier", service_tier, SERVICE_TIERS,
                                                            fix="the tier the consumer's calls ask for")
                  and service_tier == "reserved"):
                check.rule(self.reserved_input_tpm is not None,
                           "service_tier='reserved' draws on the model's Reserved tier reservation, and this quota "
                           "has none: pass reserved_input_tpm and reserved_output_tpm to ModelQuota, or draw the "
                           "share at another tier", id="service_tier.no-reservation")
                check.rule(calls is not None,
                           "service_tier='reserved' needs calls= (the calls one execution has in flight), the rate "
                           "the reservation holds; fraction and tpm are parts of the on-demand quota", id="service_tier.reserved-needs-calls")
            mantle = self.endpoint == ENDPOINTS[1]
            if mantle:
                check.rule(tpm is None, "tpm= on a bedrock-mantle quota: a share of it is a part of both its input and "
                           "its output tokens per minute; draw fraction= (that part of each) or calls=", id="tpm.mantle")
                check.rule(burst_tpm is None, "burst_tpm on a bedrock-mantle quota: a burst cap is what a consumer may "
                           "borrow in a QuotaLedger, which keeps bedrock-runtime's combined quota; drop it",
                           id="burst_tpm.mantle")
                check.rule(priority is None, "priority on a bedrock-mantle quota: a priority decides who waits first "
                           "in a QuotaLedger, which keeps bedrock-runtime's combined quota; drop it", id="priority.mantle")
            floor = None if not amount_ok or calls is not None or mantle else (
                fraction * self.tpm_quota if fraction is not None else float(tpm))  # type: ignore[arg-type]
            burst_ok = mantle or self._check_burst(check, burst_tpm, floor, calls=calls, service_tier=service_tier)
            if is_token(priority):
                check.fail("priority is an unresolved CDK token, but the consumers' environment is written at synth: "
                           f"pass one of {', '.join(PRIORITIES)}", id="priority.deploy-time")
            elif priority is not None:
                check.one_of("priority", priority, PRIORITIES, fix="who waits first in a QuotaLedger: 'interactive' "
                             "for a consumer a user waits on, 'batch' for background work")
            share: Share | None = None
            if profile_ok and seconds_ok and kind_ok and amount_ok and executions_ok and not check.problems:
                if calls is not None:
                    share = self._fixed_width(name, profile, int(calls), int(executions), call_seconds)
                elif mantle:
                    share = self._mantle_budget(check, name, profile, float(fraction),  # type: ignore[arg-type]
                                                int(executions), call_seconds)
                else:
                    budget = fraction * self.tpm_quota if fraction is not None else float(tpm)  # type: ignore[arg-type]
                    share = self._budget(check, name, "fraction" if fraction is not None else "tpm", profile, budget,
                                         int(executions), call_seconds)
                    if share is not None and burst_ok and burst_tpm is not None:
                        share = self._with_burst(share, float(burst_tpm))
        # None only on a path that recorded a problem, and Checks raised it on leaving the block.
        share = dataclasses.replace(cast(Share, share), hours_per_day=float(hours_per_day), service_tier=service_tier,
                                    priority=priority)
        if service_tier == "reserved":
            share = self._reserved(share)
        self._shares[name] = share
        plan = dataclasses.replace(share.per_execution)  # its own object: the share it stands for is known by identity
        self._issued[id(plan)] = (plan, name)
        if share.burst_per_execution is not None:
            # A construct given ledger= sizes its cap by the burst's plan (QuotaLedger.burst_plan): holding
            # it is holding the share.
            self._issued[id(share.burst_per_execution)] = (share.burst_per_execution, name)
        return plan

    def _budget(
        self, check: Checks, name: str, kind: str, profile: planning.TokenProfile, budget: float,
        executions: int, call_seconds: float,
    ) -> Share | None:
        """A share sized by its TPM: each execution gets the rate its slice sustains."""
        rpm = None if self.rpm_quota is None else self.rpm_quota * budget / self.tpm_quota
        slice_tpm = budget / executions
        # The planner's one rule (and message): a slice that cannot sustain one call at a time would be
        # overdrawn by the construct's smallest cap, or cannot hold one call's reservation at all.
        quota = "the share" if executions == 1 else f"each of the share's {executions} executions"
        if not planning.holds_one_call(check, profile, tpm=slice_tpm, call_seconds=call_seconds, quota=quota,
                                       executions=executions):
            return None
        per_execution = planning.sustainable_rate(
            profile,
            tpm_quota=slice_tpm,
            call_seconds=call_seconds,
            rpm_quota=None if rpm is None else rpm / executions,
        )
        # Only the legacy RPM figure can hold the rate below one call in flight now.
        in_flight = per_execution.requests_per_minute / 60 * call_seconds
        if not check.rule(
            in_flight >= 1,
            f"the share's legacy rpm_quota slice of {per_execution.requests_per_minute:,.6g} requests per minute per "
            f"execution sustains {in_flight:.2f} calls in flight of {call_seconds:g} s, less than one, so the "
            f"construct's cap of 1 would overdraw it; give the share more, run fewer executions or drop rpm_quota "
            f"({planning.RPM_RULE})",
            id="rpm_quota.below-call",
        ):
            return None
        return Share(name, kind, budget, rpm, executions, per_execution, profile)

    def _mantle_budget(self, check: Checks, name: str, profile: planning.TokenProfile, fraction: float,
                       executions: int, call_seconds: float) -> Share | None:
        """A share of a bedrock-mantle quota: `fraction` of both its quotas, each execution planned with
        planning.sustainable_mantle_rate over its slice of each; what the planner would refuse is
        refused here first, naming the share's arguments."""
        input_quota, output_quota = cast(float, self.input_tpm_quota), cast(float, self.output_tpm_quota)
        input_slice, output_slice = fraction * input_quota / executions, fraction * output_quota / executions
        quota = "the share" if executions == 1 else f"each of the share's {executions} executions"
        fix = "draw a larger fraction" + (", run fewer executions" if executions > 1 else "")
        admitted = profile.input_tokens + profile.cache_write_tokens + profile.max_tokens
        one_at_a_time = 60 / call_seconds
        rules = (
            (admitted <= input_slice,
             f"fraction={fraction:g} gives {quota} {input_slice:,.0f} input tokens per minute, which cannot admit one "
             f"call: bedrock-mantle checks input + cache writes + max_tokens = {admitted:,} against it "
             f"({planning.MANTLE_QUOTAS_DOC}); {fix} or lower max_tokens", "fraction.below-one-call"),
            (one_at_a_time * planning._mantle_input(profile, call_seconds) <= input_slice,
             f"fraction={fraction:g} gives {quota} {input_slice:,.0f} input tokens per minute, less than one call at a "
             f"time of {call_seconds:g} s draws ({one_at_a_time * planning._mantle_input(profile, call_seconds):,.0f}), "
             f"so the construct's smallest cap would overdraw it; {fix} or lower max_tokens", "fraction.below-one-at-a-time"),
            (output_slice >= 1 and one_at_a_time * profile.output_tokens <= output_slice,
             f"fraction={fraction:g} gives {quota} {output_slice:,.0f} output tokens per minute, less than one call at a "
             f"time of {call_seconds:g} s generates ({one_at_a_time * profile.output_tokens:,.0f}), so the construct's "
             f"smallest cap would overdraw it; {fix}", "fraction.below-one-at-a-time-output"),
        )
        if not all([check.rule(ok, message, id=rule) for ok, message, rule in rules]):
            return None
        per_execution = planning.sustainable_mantle_rate(profile, input_tpm_quota=input_slice,
                                                         output_tpm_quota=output_slice, call_seconds=call_seconds)
        return Share(name, "fraction", fraction * input_quota, None, executions, per_execution, profile,
                     output_tpm=fraction * output_quota)

    @property
    def allocatable_tpm(self) -> float:
        """What the shares may allocate, and every consumer of a QuotaLedger shares: tpm_quota x (1 - keep_free)."""
        # rounded: 400,000 x (1 - 0.7) is 120,000.00000000001 in floating point, and a burst of exactly the
        # allocatable quota must pass
        return round(self.tpm_quota * (1 - self.keep_free), 6)

    def _check_burst(self, check: Checks, burst_tpm: Any, floor: float | None, *, calls: Any,
                     service_tier: Any) -> bool:
        """A share's burst cap: a number at synth, between its floor and the allocatable quota, on a share
        that has a floor to borrow beyond (fraction or tpm, not reserved). True when it may be used."""
        if burst_tpm is None:
            return True
        if is_token(burst_tpm):
            return check.fail("burst_tpm is an unresolved CDK token (a deploy-time value); the plan shows it and the "
                              "ledger's consumers are configured with it at synth: pass a number of tokens per minute",
                              id="burst_tpm.deploy-time-share")
        if service_tier == "reserved":
            return check.fail("burst_tpm with service_tier='reserved': a reserved share's TPM is what overflows its part "
                              "of the reservation to the on-demand quota, not a floor to borrow beyond; drop burst_tpm, "
                              "or draw an on-demand share (fraction= or tpm=) with it", id="burst_tpm.reserved")
        if calls is not None:
            return check.fail("burst_tpm with calls=: a fixed-width share draws what its calls draw, so there is nothing "
                              "to borrow up to; draw it with fraction= or tpm= (its floor) to give it a burst cap, or "
                              "drop burst_tpm", id="burst_tpm.fixed-width")
        allocatable = self.allocatable_tpm
        if floor is None:  # the share's amount was refused already: only the burst's own range is checked
            return check.number("burst_tpm", burst_tpm, above=0, maximum=allocatable,
                                fix=f"at most the quota's allocatable {allocatable:,.0f} TPM")
        return check.number("burst_tpm", burst_tpm, minimum=floor, maximum=allocatable,
                            fix=f"between the share's {floor:,.0f} TPM (its floor) and the quota's allocatable "
                            f"{allocatable:,.0f} TPM (tpm_quota x (1 - keep_free))")

    def _with_burst(self, share: Share, burst_tpm: float) -> Share:
        """The share with its burst cap and the plan one execution needs to draw its slice of it (the
        floor's plan holds one call per execution, so a burst at least the floor does too)."""
        rpm = None if self.rpm_quota is None else self.rpm_quota * burst_tpm / self.tpm_quota
        burst = planning.sustainable_rate(
            share.profile, tpm_quota=burst_tpm / share.executions, call_seconds=share.per_execution.call_seconds,
            rpm_quota=None if rpm is None else rpm / share.executions)
        return dataclasses.replace(share, burst_tpm=burst_tpm, burst_per_execution=burst)

    def _reserved(self, share: Share) -> Share:
        """A reserved share: its part of the reservation is what the reserved shares drawn before it left
        at their caps; its TPM, what overflows from that part to the on-demand quota."""
        # share() refuses service_tier="reserved" on a quota without a reservation, and the constructor
        # refuses one budget without the other, so both are set here.
        reserved_input_tpm, reserved_output_tpm = cast(float, self.reserved_input_tpm), cast(float, self.reserved_output_tpm)
        used_in = used_out = 0.0
        for earlier in self._shares.values():
            plan = earlier.reserved_plan()
            if plan is not None:
                used_in += plan.input_tpm * plan.served_fraction
                used_out += plan.output_tpm * plan.served_fraction
        # a budget used up leaves a token a minute: the planner's smallest, which holds no call
        budget = (max(reserved_input_tpm - used_in, 1.0), max(reserved_output_tpm - used_out, 1.0))
        share = dataclasses.replace(share, reserved_budget=budget)
        return dataclasses.replace(share, tpm=share.tpm_at_cap)

    def _fixed_width(self, name: str, profile: planning.TokenProfile, calls: int, executions: int,
                     call_seconds: float) -> Share:
        """A share sized by its calls in flight: the TPM they draw at one call per call_seconds each."""
        per_minute = calls * 60 / call_seconds
        mantle = self.endpoint == ENDPOINTS[1]
        per_execution = planning.RatePlan(per_minute, "input-tpm" if mantle else "tpm", calls, call_seconds)
        tpm = _tpm_at(profile, calls * executions, call_seconds, mantle=mantle)
        rpm = None if self.rpm_quota is None else per_minute * executions
        output = per_minute * executions * profile.output_tokens if mantle else None
        return Share(name, "calls", tpm, rpm, executions, per_execution, profile, output_tpm=output)

    # --- reading the plan ---------------------------------------------------------------------------

    @property
    def shares(self) -> Mapping[str, Share]:
        """The shares drawn so far, by name, in the order they were drawn."""
        return dict(self._shares)

    def _complete_plan(self) -> QuotaPlan:
        """plan(consumers=True) of the complete app, for the tokens resolved at synth (QuotaLedger.shared_tpm):
        the one this synth's validation computed (validation runs once the app is built, before any token is
        resolved), so the census runs once per synth however many tokens read it. A token resolved before
        (by an Aspect such as cdk-nag's, or stack.resolve) computes it once and keeps it until the validation
        computes it again: the template always carries the validation's."""
        if self._synth_plan is None:
            self._synth_plan = self.plan(consumers=True)
        return self._synth_plan

    def plan(self, *, consumers: bool = False) -> QuotaPlan:
        """The quota and its shares as they stand (final once every consumer has drawn).

        consumers=True also finds every construct of the app that may call the model, with the
        share it holds (what synth checks): ask for it once the app is built. Default: False.
        """
        stack = cdk.Stack.of(self)
        # the cross-model daily cap is bedrock-runtime's: other models' runtime quotas in this account and Region
        others = [q for q in _QUOTAS.get(self.node.root, []) if q is not self and q._key()[1:] == self._key()[1:]
                  and q._key() != self._key() and q.endpoint == ENDPOINTS[0]]
        # A bedrock-mantle caller's grant names projects, not models (MANTLE_INVOKE_ACTION): none is looked for.
        consumers = consumers and self.endpoint == ENDPOINTS[0]
        self._in_census += 1  # the census resolves the consumers' states, which hold ledger tokens reading the plan
        try:
            found = tuple(_census(self)) if consumers else ()
        finally:
            self._in_census -= 1
        shares = tuple(dataclasses.replace(share, held_in_flight=_held_in_flight(share, found),
                                           held_max_tokens=_held_max_tokens(share, found),
                                           in_ledger=_held_in_ledger(share, found))
                       for share in self._shares.values())
        return QuotaPlan(
            model_id=_shown(self.model.model_id, "the model's deploy-time ARN"),
            region=_shown(stack.region, "the stack's deploy-time Region"),
            account=_shown(stack.account, "the stack's deploy-time account"),
            tpm_quota=self.tpm_quota,
            rpm_quota=self.rpm_quota,
            burndown=self.burndown,
            keep_free=self.keep_free,
            warn_at=self.warn_at,
            service_quota_code=self.service_quota_code,
            shares=shares,
            daily_token_quota=self.daily_token_quota,
            cross_model_daily_tokens=self.cross_model_daily_tokens,
            other_models_daily_tokens=sum(s.daily_load.daily_tokens for q in others for s in q._shares.values()),
            consumers=found,
            with_consumers=consumers,
            stage=cdk.Stage.of(self).stage_name,  # type: ignore[union-attr]
            reserved_input_tpm=self.reserved_input_tpm,
            reserved_output_tpm=self.reserved_output_tpm,
            output_tpm_quota=self.output_tpm_quota,
        )

    def pacer_environment(self, name: str) -> dict[str, str]:
        """Environment variables that size a `pacer_runtime.QuotaPacer` in each process of a share.

        The share's TPM (and RPM) is split over its executions: pass executions = the processes
        (e.g. a function's reserved concurrency) when drawing it. Read them with
        `QuotaPacer.from_environment()`.
        """
        share = self._shares.get(name)
        if share is None:
            raise KeyError(f"ModelQuota {self.node.id}: no share named {name!r}; drawn: {', '.join(self._shares) or 'none'}")
        if share.output_tpm is not None:  # bedrock-mantle: QuotaPacer(input_tpm=..., output_tpm=...)
            return {variable: f"{value / share.executions:.0f}"
                    for variable, value in zip(PACER_MANTLE_ENVIRONMENT, (share.tpm, share.output_tpm), strict=True)}
        tpm_name, rpm_name, burndown_name = PACER_ENVIRONMENT
        environment = {tpm_name: f"{share.tpm / share.executions:.0f}", burndown_name: f"{self.burndown:g}"}
        if share.rpm is not None:
            environment[rpm_name] = f"{share.rpm / share.executions:g}"
        if share.reserved_budget is not None:
            for variable, budget in zip(PACER_RESERVED_ENVIRONMENT, share.reserved_budget, strict=True):
                environment[variable] = f"{budget / share.executions:.0f}"
        return environment

    # --- synth ----------------------------------------------------------------------------------

    def _key(self) -> tuple[str, str, str]:
        stack = cdk.Stack.of(self)
        return (str(self.model.model_id), str(stack.account), str(stack.region))

    def _twins(self) -> list[ModelQuota]:
        """Other quotas of this app for the same model, account and Region, on the same endpoint (the two
        endpoints keep separate quotas for one model, planning.MANTLE_QUOTAS_DOC)."""
        return [q for q in _QUOTAS.get(self.node.root, [])
                if q is not self and q._key() == self._key() and q.endpoint == self.endpoint]


def _tier_cell(share: Share) -> str:
    """The share's tier for the table: a reserved share with the part of its calls the reservation holds."""
    reserved = share.reserved_plan()
    if reserved is None:
        return share.service_tier or "-"
    return f"reserved ({reserved.served_fraction:.0%} held)"


def _reserved_fields(share: Share) -> dict[str, Any]:
    """A reserved share's reservation figures for the plan file: its budget, the part of its calls the
    budget holds at its cap, and the calls a minute that overflow to the on-demand quota."""
    reserved = share.reserved_plan()
    if reserved is None or share.reserved_budget is None:
        return {}
    return {
        "reserved_input_tpm": round(share.reserved_budget[0], 1),
        "reserved_output_tpm": round(share.reserved_budget[1], 1),
        "reserved_fraction": round(reserved.served_fraction, 4),
        "reserved_binding": reserved.binding,
        "overflow_requests_per_minute": round(reserved.overflow_requests_per_minute, 2),
    }


def _tpm_at(profile: planning.TokenProfile, in_flight: int, call_seconds: float, *, mantle: bool = False) -> float:
    """TPM drawn by `in_flight` calls back to back (Little's law), reservations included; on
    bedrock-mantle, the input tokens per minute (planning.sustainable_mantle_rate's charge per call)."""
    rate = in_flight * 60 / call_seconds
    if mantle:
        return rate * planning._mantle_input(profile, call_seconds)
    return planning.plan_tpm(profile, requests_per_minute=rate, headroom=0, call_seconds=call_seconds).required_tpm


def _held_in_flight(share: Share, consumers: tuple[Consumer, ...]) -> int | None:
    """Calls in flight the share's holders' own caps allow (a state machine's per execution, times the
    share's executions); a holder nothing readable caps counts as the share's plan. None: no holder."""
    holders = [c for c in consumers if c.share == share.name]
    if not holders:
        return None
    return sum(share.planned_in_flight if c.calls_in_flight is None
               else c.calls_in_flight * (share.executions if c.per_execution else 1) for c in holders)


def _held_in_ledger(share: Share, consumers: tuple[Consumer, ...]) -> bool:
    """Whether the share has holders and every one takes part in a QuotaLedger of the quota."""
    holders = [c for c in consumers if c.share == share.name]
    return bool(holders) and all(c.in_ledger for c in holders)


def _held_max_tokens(share: Share, consumers: tuple[Consumer, ...]) -> int | None:
    """The largest max_tokens the share's holders' requests set, where synth read one."""
    read = [c.max_tokens for c in consumers if c.share == share.name and c.max_tokens is not None]
    return max(read) if read else None


def _mantle_props(check: Checks, *, tpm_quota: Any, input_tpm_quota: Any, output_tpm_quota: Any, rpm_quota: Any,
                  burndown: Any, daily_token_quota: Any, cross_model_daily_tokens: Any, reserved: tuple[Any, Any],
                  service_quota_code: Any, require_shares: Any) -> None:
    """A bedrock-mantle quota's props: both of its quotas, and none of bedrock-runtime's, each named."""
    page = planning.MANTLE_QUOTAS_DOC
    for name, value, kind in (("input_tpm_quota", input_tpm_quota, "input"), ("output_tpm_quota", output_tpm_quota, "output")):
        _plan_number(check, name, value, minimum=1, maximum=planning.MAX_TPM_QUOTA, optional=True,
                     fix=f"the model's 'Bedrock Mantle {kind} tokens per minute' quota from Service Quotas")
    check.rule(input_tpm_quota is not None and output_tpm_quota is not None,
               "input_tpm_quota and output_tpm_quota go together: a bedrock-mantle quota is an input and an output "
               f"tokens-per-minute quota per model ({page}); pass both", id="input_tpm_quota.without-output")
    check.rule(tpm_quota is None, "tpm_quota with input_tpm_quota/output_tpm_quota: tpm_quota is bedrock-runtime's one "
               f"combined quota, the other two bedrock-mantle's ({page}); declare one ModelQuota per endpoint",
               id="tpm_quota.with-mantle")
    check.rule(rpm_quota is None, f"rpm_quota with a bedrock-mantle quota: that endpoint enforces no requests-per-minute "
               f"quota ({page}); drop it", id="rpm_quota.no-rpm-on-mantle")
    check.rule(is_token(burndown) or burndown == 1,
               f"burndown={_show(burndown)} with a bedrock-mantle quota: its input and output quotas count tokens 1:1 "
               f"(the page names no burndown, {page}); drop it", id="burndown.mantle")
    check.rule(daily_token_quota is None and cross_model_daily_tokens is None,
               "daily_token_quota/cross_model_daily_tokens with a bedrock-mantle quota: the daily token quotas are "
               f"bedrock-runtime's, and the bedrock-mantle page lists none ({page}); drop them", id="daily_token_quota.no-day-on-mantle")
    check.rule(reserved == (None, None),
               "reserved_input_tpm/reserved_output_tpm with a bedrock-mantle quota: the Reserved tier is planned for "
               "bedrock-runtime calls (Converse and InvokeModel with a service tier); drop them",
               id="reserved_input_tpm.mantle")
    check.rule(service_quota_code is None,
               "service_quota_code with a bedrock-mantle quota: it is two Service Quotas quotas, and quota-check finds "
               "both by name ('Bedrock Mantle input/output tokens per minute for <model>'); drop it",
               id="service_quota_code.mantle")
    check.rule(require_shares is False,
               f"require_shares=True with a bedrock-mantle quota: its callers' grants ({MANTLE_INVOKE_ACTION}) name "
               "projects, not models, so synth cannot find the constructs that call it; drop it (its shares are held "
               "by declaration)", id="require_shares.mantle")


def _plan_number(check: Checks, name: str, value: Any, *, whole: bool = False, optional: bool = False, **limits: Any) -> bool:
    """A number the plan needs at synth: a deploy-time token is refused, as the planner refuses it."""
    if is_token(value):
        return check.fail(f"{name} is an unresolved CDK token (a deploy-time value); the quota plan needs the number "
                          f"at synth time: pass it as a constant or from context; {limits.get('fix', '')}".rstrip("; "), id=f"{name}.deploy-time-plan")
    return check.number(name, value, integer=whole, optional=optional, **limits)


def _shown(value: str, what: str) -> str:
    return f"({what})" if cdk.Token.is_unresolved(value) else value


@jsii.implements(IValidation)
class _Enforced:
    """Synth fails when the shares overdraw the quota, when one share is held by two constructs, and
    (with require_shares) when a construct calls the model without a share."""

    def __init__(self, quota: ModelQuota) -> None:
        self.quota = quota

    def validate(self) -> list[str]:
        # A node.add_validation, not the constructor's Checks: the shares are drawn and the consumers
        # built after the quota, so these rules can only be judged once the app is complete. The same
        # Checks gives them ids; aws-cdk-lib puts the construct's path in front of each.
        quota, plan = self.quota, self.quota.plan(consumers=True)
        quota._synth_plan = plan  # the census of this synth, read by the ledgers' tokens (_complete_plan)
        check = Checks("ModelQuota", scope=quota)
        if plan.over_allocated():
            check.fail(self._over_allocated(plan), id="shares.over-allocated")
        for share in plan.shares:
            holders = plan.holders(share)
            check.rule(
                len(holders) <= 1,
                f"ModelQuota {quota.node.id} ({plan.model_id}): share {share.name!r} ({share.tpm:,.0f} TPM, "
                f"{share.planned_in_flight} calls in flight) is held by {len(holders)} constructs: "
                f"{', '.join(f'{c.kind} {c.path}' for c in holders)}; together they draw {len(holders)} times the "
                "share, each sized as if it held it alone. Fix: draw one share per consumer, each with its own name",
                id="share.held-twice",
            )
            if share.burst_tpm is not None:
                for holder in holders:
                    check.rule(holder.in_ledger, _outside_ledger_message(
                        quota, plan, share, holder, "burst_tpm"), id="share.burst-outside-ledger")
            if share.priority is not None:
                for holder in holders:
                    check.rule(holder.in_ledger, _outside_ledger_message(
                        quota, plan, share, holder, "priority"), id="share.priority-outside-ledger")
        if quota.require_shares:
            for consumer in plan.unshared:
                check.fail(_unshared_message(quota, plan, consumer), id="consumer.unshared")
            for unheld in plan.unheld:
                check.fail(_unheld_message(quota, plan, unheld), id="share.unheld")
        for ledger in quota._ledgers:  # what the ledgers' consumers share depends on the complete plan
            ledger._check_outside(check, plan)
        return check.errors()

    def _over_allocated(self, plan: QuotaPlan) -> str:
        rpm = plan.rpm_allocation
        overdrawn = (
            f"the shares draw {plan.allocated_tpm:,.0f} TPM, {plan.allocation:,.1%} of the {plan.allocatable_tpm:,.0f} "
            f"TPM allocatable"
            + (f" ({plan.tpm_quota:,.0f} TPM quota, {plan.keep_free:.0%} kept free)" if plan.keep_free else "")
        )
        output_over = (plan.output_allocation or 0) > 1 + 1e-9
        if plan.output_tpm_quota is not None:  # bedrock-mantle: the input and output quotas
            overdrawn = overdrawn.replace(" TPM", " input TPM", 2) + (
                f", and {plan.allocated_output_tpm:,.0f} output TPM, {plan.output_allocation:,.1%} of the "
                f"{plan.allocatable_output_tpm:,.0f} output TPM allocatable")
        tpm_over = plan.allocation > 1 + 1e-9 or output_over
        rpm_over = rpm is not None and rpm > 1 + 1e-9
        if rpm_over:
            overdrawn = (overdrawn + ", and" if tpm_over else "the shares draw") + (
                f" {plan.allocated_rpm:,.1f} RPM, {rpm:.1%} of the allocatable legacy RPM (rpm_quota="
                f"{plan.rpm_quota:,.0f}: {planning.RPM_RULE}; a QuotaPacer or tooling given it holds the shares to it)")
        effect = ("Bedrock throttles them" if tpm_over
                  else "whatever paces them by the legacy RPM (QuotaPacer from pacer_environment) holds them back")
        consumers = "\n".join(
            f"  - {share.name}: {share.tpm:,.0f} TPM ({share.tpm / plan.tpm_quota:.1%}), "
            f"{share.per_execution.max_concurrency} calls per execution x {share.executions} execution(s) = "
            f"{share.planned_in_flight} in flight" + _beyond_share(plan, share)
            for share in plan.shares
        )
        beyond = any(share.drawn_tpm > share.tpm for share in plan.shares)
        return (
            f"ModelQuota {self.quota.node.id} ({plan.model_id}): {overdrawn}; when the consumers run together, "
            f"{plan.in_flight} calls are in flight and {effect}. Consumers:\n{consumers}\n"
            + ("Fix: " + ("hold each consumer to its share (give it the share where it takes a cap, or lower its own "
                          "cap to the share's), " if beyond else "")
               + ("send the max_tokens a share's profile says (or draw it with the max_tokens its requests send), "
                  if any(share.draws_beyond_profile for share in plan.shares) else "")
               + "lower a share's fraction, tpm, calls or executions, lower keep_free, or raise the quota in Service "
               "Quotas and tpm_quota with it." if tpm_over else
               "Fix: lower a share's calls or executions, or pass rpm_quota=None (Bedrock does not enforce RPM on "
               "bedrock-runtime) or a higher figure if your own tooling tracks one.")
        )


@jsii.implements(cdk.IAspect)
class _PublishPlan:
    """At synth (prepare phase, after every share is drawn): warn, and write the plan into the assembly."""

    def __init__(self, quota: ModelQuota) -> None:
        self.quota = quota
        self.written: set[str] = set()

    def visit(self, node: IConstruct) -> None:
        if node is not self.quota:
            return
        quota, plan = self.quota, self.quota.plan(consumers=True)
        quota._synth_plan = plan  # this synth's, for the ledgers' tokens an Aspect resolves before the validation
        outdir = cdk.Stage.of(quota).outdir if cdk.Stage.of(quota) is not None else None  # type: ignore[union-attr]
        if outdir is None or outdir in self.written:
            return  # once per assembly, however often it is synthesized
        first = not self.written
        self.written.add(outdir)
        data = plan.as_dict()
        if first:
            self._warn(plan)
            quota.node.add_metadata(PLAN_METADATA_TYPE, data)
        path = os.path.join(outdir, f"{PLAN_FILE_PREFIX}{cdk.Names.unique_id(quota)}.json")
        with open(path, "w", encoding="utf-8") as file:
            json.dump(data, file, indent=2)
            file.write("\n")

    def _warn(self, plan: QuotaPlan) -> None:
        quota = self.quota
        if not plan.shares:
            warn(
                quota,
                "quota-unused",
                f"ModelQuota {quota.node.id} has no shares: no consumer draws from it, so nothing is checked; "
                "pass quota.share(...) as each consumer's max_concurrency (or declare calls= for fixed-width ones)",
            )
        elif not plan.over_allocated() and plan.binding_allocation >= plan.warn_at:
            warn(
                quota,
                "quota-nearly-allocated",
                f"ModelQuota {quota.node.id}: the shares allocate "
                + (f"{plan.allocation:.1%} of the allocatable quota (warn_at {plan.warn_at:.0%}), leaving "
                   f"{plan.headroom_tpm:,.0f} TPM" if plan.output_tpm_quota is None else
                   f"{plan.allocation:.1%} of the allocatable input quota and {plan.output_allocation:.1%} of the "
                   f"output quota (warn_at {plan.warn_at:.0%}), leaving {plan.headroom_tpm:,.0f} input and "
                   f"{cast(float, plan.allocatable_output_tpm) - cast(float, plan.allocated_output_tpm):,.0f} output TPM")
                + " of headroom for estimation error "
                "(input length, output p99, call duration); lower a share or raise the quota if the estimates are "
                "not measured",
            )
        # A warning about one consumer is on that consumer (the quota when it is not in this app), so a user
        # who accepts it for one acknowledges it there and the others still show; one about a share no
        # construct holds, or about the quota as a whole, is on the quota.
        def on(consumer: Consumer) -> IConstruct:
            return _construct_at(quota.node.root, consumer.path) or quota

        for share in plan.shares:
            if share.draws_beyond_profile:
                for holder in plan.holders(share):
                    if holder.max_tokens is not None and holder.max_tokens > share.profile.max_tokens:
                        warn(on(holder), "quota-max-tokens-beyond-profile", _max_tokens_message(quota, plan, share, holder))
        for warning in plan.daily().warnings if plan.output_tpm_quota is None else ():
            warn(quota, "quota-daily", f"ModelQuota {quota.node.id} ({plan.model_id}): {warning}")
        for consumer in plan.consumers:
            held = plan.shares_by_name.get(consumer.share or "")
            # in a ledger, the ledger (not the plan's count of its calls) bounds what a deployed cap draws
            if held is not None and consumer.deploy_time_cap and not consumer.in_ledger:
                warn(on(consumer), "quota-deploy-time-cap", _deploy_time_cap_message(quota, plan, consumer, held))
        if not quota.require_shares:
            for consumer in plan.unshared:
                warn(on(consumer), "quota-unshared-consumer", _unshared_message(quota, plan, consumer))
            for share in plan.unheld:  # no construct to put it on: a share is a name in the plan
                warn(quota, "quota-unheld-share", _unheld_message(quota, plan, share))
        twins = quota._twins()
        if twins:
            warn(
                quota,
                "quota-declared-twice",
                f"ModelQuota {quota.node.id} and {', '.join(t.node.path for t in twins)} declare the same quota "
                f"({quota.model.model_id} in the same account and Region, or both environment-agnostic): each checks "
                "only its own shares, so together they can overdraw it; declare one ModelQuota and draw every share "
                "from it (its shares may serve constructs in other stacks)",
            )


def _beyond_share(plan: QuotaPlan, share: Share) -> str:
    """What a share's holders draw beyond it, in words ('' when they keep to it)."""
    if share.drawn_tpm <= share.tpm:
        return ""
    holders = ", ".join(f"{c.kind} {c.path} ({c.cap})" for c in plan.holders(share))
    why = [f"its caps allow {share.in_flight} in flight"] if share.in_flight > share.planned_in_flight else []
    if share.draws_beyond_profile:
        why.append(f"its requests reserve max_tokens={share.held_max_tokens:,} where its profile says "
                   f"{share.profile.max_tokens:,}")
    return f"; but {' and '.join(why) or 'its caps draw more'}, drawing {share.tpm_at_cap:,.0f} TPM: {holders}"


def _max_tokens_message(quota: ModelQuota, plan: QuotaPlan, share: Share, holder: Consumer) -> str:
    """A holder of a share whose requests reserve more max_tokens than the share's profile, with both numbers."""
    profile, real = share.profile, share.reserving
    return (
        f"ModelQuota {quota.node.id} ({plan.model_id}): share {share.name!r} was drawn with a profile of "
        f"max_tokens={profile.max_tokens:,}, but its holder's requests set more: {holder.kind} {holder.path} "
        f"(max_tokens={holder.max_tokens:,}). Bedrock reserves a request's "
        f"input plus its max_tokens when the call starts, so each call reserves {real.reserved:,} quota tokens, not "
        f"{profile.reserved:,}; the plan counts the share at that real reservation ({share.tpm_at_cap:,.0f} TPM at its "
        f"cap, {plan.allocation:.1%} allocated). Fix: size max_tokens from the p99 answer (planning.size_max_tokens) "
        "and pass the same number to the request and to quota.profile(max_tokens=...)"
    )


def _unshared_message(quota: ModelQuota, plan: QuotaPlan, consumer: Consumer) -> str:
    return (
        f"ModelQuota {quota.node.id} ({plan.model_id}): {consumer.kind} {consumer.path} may call the model but holds no "
        f"share, so its calls are not in the plan ({plan.allocation:.1%} allocated): {consumer.worst_case()}. Fix: give "
        "it quota.share(...) where it takes a cap (max_concurrency, reserved_concurrency), or draw a share named "
        f"{consumer.path.rsplit('/', 1)[-1]!r} with calls= the cap it has, or take the model away from it"
    )


def _deploy_time_cap_message(quota: ModelQuota, plan: QuotaPlan, consumer: Consumer, share: Share) -> str:
    return (
        f"ModelQuota {quota.node.id} ({plan.model_id}): {consumer.kind} {consumer.path} holds share {share.name!r} "
        f"({share.planned_in_flight} calls in flight), but its own cap is unknown at synth: {consumer.cap}. The plan "
        f"counts it at the share's {share.planned_in_flight} calls; a deployed value above that draws more than the "
        "share and is not checked. Fix: give it the share where it takes a cap (max_concurrency, reserved_concurrency), "
        f"or deploy a value of at most {share.planned_in_flight}"
    )


def _outside_ledger_message(quota: ModelQuota, plan: QuotaPlan, share: Share, holder: Consumer, prop: str) -> str:
    """Why a share's burst_tpm or priority does nothing when its holder is outside every ledger of the quota."""
    if prop == "burst_tpm":
        drawn, why = (f"burst_tpm={share.burst_tpm:,.0f} (its floor {share.tpm:,.0f} TPM), but its holder",
                      "a burst is what a consumer of the ledger may borrow up to while the ledger decides how much runs "
                      "at once; outside it, nothing would check its draw beyond the floor, and the burst is never used.")
    else:
        drawn, why = (f"priority={share.priority!r}, but its holder",
                      "a priority decides who waits first for what the ledger's consumers borrow, and outside the "
                      "ledger nothing would read it.")
    return (
        f"ModelQuota {quota.node.id} ({plan.model_id}): share {share.name!r} was drawn with {drawn} {holder.kind} "
        f"{holder.path} takes part in no QuotaLedger of this quota: {why} Fix: give the holder ledger=QuotaLedger(...) "
        f"(or ledger.grant_use(...) and ledger.environment({share.name!r}) for a function of yours), or drop {prop}"
    )


def _unheld_message(quota: ModelQuota, plan: QuotaPlan, share: Share) -> str:
    return (
        f"ModelQuota {quota.node.id} ({plan.model_id}): share {share.name!r} ({share.tpm:,.0f} TPM, "
        f"{share.planned_in_flight} calls in flight) is held by no construct that may call the model in the quota's "
        "account and Region: none was given it and none is named after it. It still counts in the allocation "
        f"({plan.allocation:.1%} allocated), in case a consumer synth cannot see draws it. Fix: give it to its consumer "
        "where it takes a cap (max_concurrency, reserved_concurrency), name it after its consumer's construct id, or "
        "drop it"
    )


# --- finding the model's callers --------------------------------------------------------------------


def _census(quota: ModelQuota) -> list[Consumer]:
    """Every construct of the app that may call the quota's model in its account and Region, once."""
    key = quota._key()[1:]
    # Only the stacks of the quota's account can hold its callers or the functions running with their roles (a
    # role is an account's): reading every construct of a many-stack app once per quota was most of its synth.
    stacks = [stack for stack in _top_stacks(quota.node.root) if str(stack.account) == key[0]]
    users = _role_users(node for stack in stacks for node in stack.node.find_all())
    found: dict[str, tuple[IConstruct, list[iam.IRole | None]]] = {}
    for node in (node for stack in stacks if str(stack.region) == key[1] for node in stack.node.find_all()):
        documents = _policy_documents(node)
        if not documents:
            continue
        stack = cdk.Stack.of(node)  # a nested stack's, which has its parent's account and Region
        # A node that is itself the role its users run with: an immutable role's recorder (_policy_documents)
        role = _role_of(node, users) if node.node.path not in users else cast(iam.IRole, node)
        if role is not None and _assumed_by_bedrock(role):
            continue  # a batch inference job's service role: the batch quotas, not this one
        target = json.dumps(stack.resolve(quota.model._invoke_arn(stack, warn=False)), sort_keys=True)
        if any(_allows_invoke(statement, target) for document in documents for statement in _statements(stack, document)):
            for owner in _owners(node, role, users):
                found.setdefault(owner.node.path, (owner, []))[1].append(role)
    plans = {id(plan): name for plan, name in quota._issued.values()}
    consumers = []
    for path, (owner, roles) in found.items():
        calls, cap, max_tokens, per_execution, deploy_time = _cap(owner, roles)
        given = getattr(owner, "concurrency_plan", None)
        share = plans.get(id(given)) if given is not None else None
        if share is None:
            share = next((name for name in quota._shares if name in (owner.node.id, path)), None)
        role_paths = [role.node.path for role in roles if role is not None]
        in_ledger = any(ledger.takes_part(path, role_paths) for ledger in quota._ledgers)
        consumers.append(Consumer(path, type(owner).__name__, share, calls, cap, max_tokens, per_execution, deploy_time,
                                  in_ledger))
    return consumers


def _top_stacks(scope: IConstruct) -> list[cdk.Stack]:
    """The stacks under scope that are not nested in another stack (whose find_all() covers its nested ones)."""
    stacks: list[cdk.Stack] = []
    for child in scope.node.children:
        if isinstance(child, cdk.Stack):
            stacks.append(child)
        else:  # a Stage, or any construct a user put stacks under
            stacks.extend(_top_stacks(child))
    return stacks


def _role_users(nodes: Iterable[IConstruct]) -> dict[str, list[IConstruct]]:
    """The functions and state machines among `nodes` by the construct path of the role they run with. By
    path, not identity: an imported role (iam.Role.from_role_arn) reaches Python as a new proxy object each time."""
    users: dict[str, list[IConstruct]] = {}
    for node in nodes:
        if isinstance(node, lambda_.Function | sfn.StateMachine) and node.role is not None:
            users.setdefault(node.role.node.path, []).append(node)
    return users


def _construct_at(root: IConstruct, path: str) -> IConstruct | None:
    """The construct at a path, found child by child (a walk of the whole app per lookup was most of a
    large app's synth time)."""
    node: IConstruct | None = root
    for part in filter(None, path.split("/")):
        node = node.node.try_find_child(part) if node is not None else None
    return node


def _policy_documents(node: IConstruct) -> list[Any]:
    from ..step_functions.state_machine import _RoleStatements  # here: step_functions imports this module

    if isinstance(node, _RoleStatements):
        # A role the app cannot change (iam.Role.from_role_arn(..., mutable=False)) gets no policy; the statements
        # the construct would have granted it are kept here (and listed in its immutable-role warning, for the
        # user to add), and they are what its state machine calls the model with.
        return [{"Statement": [s.to_statement_json() for s in node.statements]},
                *(policy.document.to_json() for policy in node.policies)]
    if isinstance(node, iam.CfnPolicy | iam.CfnManagedPolicy):
        return [node.policy_document]
    if isinstance(node, iam.CfnRole):
        policies = cdk.Stack.of(node).resolve(node.policies) or []
        return [p.get("policyDocument", p.get("PolicyDocument")) for p in policies if isinstance(p, dict)]
    return []


def _statements(stack: cdk.Stack, document: Any) -> list[dict[str, Any]]:
    resolved = stack.resolve(document) or {}
    statements = resolved.get("Statement", []) if isinstance(resolved, dict) else []
    return [s for s in (statements if isinstance(statements, list) else [statements]) if isinstance(s, dict)]


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _allows_invoke(statement: dict[str, Any], target: str) -> bool:
    """An Allow of an invoke action on the model's ARN (or "*"), not confined to an inference profile."""
    if statement.get("Effect") != "Allow" or "NotAction" in statement or "NotResource" in statement:
        return False
    actions = [a for a in _listed(statement.get("Action")) if isinstance(a, str)]
    if not any(fnmatch.fnmatchcase(wanted.lower(), a.lower()) for a in actions for wanted in INVOKE_ACTIONS):
        return False
    if any(INFERENCE_PROFILE_CONDITION in (conditions or {}) for conditions in (statement.get("Condition") or {}).values()):
        return False
    return any(r == "*" or json.dumps(r, sort_keys=True) == target for r in _listed(statement.get("Resource")))


def _role_of(node: IConstruct, users: Mapping[str, list[IConstruct]]) -> iam.IRole | None:
    """The role a policy node belongs to: a Role of the app, or one a function or state machine runs with
    (an imported role is no iam.Role in Python, only a proxy of iam.IRole)."""
    return next((cast(iam.IRole, s) for s in reversed(node.node.scopes[:-1])
                 if isinstance(s, iam.Role) or s.node.path in users), None)


def _assumed_by_bedrock(role: iam.IRole) -> bool:
    document = getattr(role, "assume_role_policy", None)  # None on an imported role: its trust is not in the app
    trust = cdk.Stack.of(role).resolve(document) if document else None
    return BEDROCK_SERVICE_PRINCIPAL in json.dumps(trust)


def _genai_pacer_scope(node: IConstruct) -> IConstruct | None:
    """The innermost public genai-pacer construct around `node` (a ModelQuota aside)."""
    for scope in reversed(node.node.scopes[:-1]):
        cls = type(scope)
        if cls.__module__.startswith("genai_pacer.") and not cls.__name__.startswith("_") and not isinstance(scope, ModelQuota):
            return scope
    return None


def _owners(node: IConstruct, role: iam.IRole | None, users: Mapping[str, list[IConstruct]]) -> list[IConstruct]:
    """The constructs a grant belongs to: the innermost genai-pacer construct around it; for a role outside
    any (the user's own, or one imported by ARN, given as StateMachineOptions(role=...)), the genai-pacer
    construct around each function or state machine that runs with it, the construct given the share; else
    what its role serves."""
    around = _genai_pacer_scope(node)
    if around is not None:
        return [around]
    owners: list[IConstruct] = []
    if role is not None:
        for user in users.get(role.node.path, []):
            owner = _genai_pacer_scope(user)
            if owner is None:  # a function or state machine of the user's: as before, what the role serves
                parent = role.node.scope
                owner = role if parent is None or isinstance(parent, cdk.Stack) else parent
            if all(o.node.path != owner.node.path for o in owners):
                owners.append(owner)
        if not owners:
            parent = role.node.scope
            owners.append(role if parent is None or isinstance(parent, cdk.Stack) else parent)
    return owners or [node.node.scope or node]


def _cap(owner: IConstruct, roles: list[iam.IRole | None]) -> tuple[int | None, str, int | None, bool, bool]:
    """(calls in flight, where that comes from, the largest max_tokens, whether the calls are per
    execution: only state machines use the roles, whether the cap is a deploy-time value synth cannot
    read) of what uses the granted roles."""
    stack = cdk.Stack.of(owner)
    granted = {role.node.path for role in roles if role is not None}
    nodes = owner.node.find_all()
    users = [n for n in nodes if isinstance(n, lambda_.Function | sfn.StateMachine)
             and (not granted or (n.role is not None and n.role.node.path in granted))]
    if not users:
        return None, "no function or state machine using its role was found to read a cap from", None, False, False
    per_execution = not any(isinstance(user, lambda_.Function) for user in users)
    states = [n for n in nodes if isinstance(n, sfn.State)]
    # A construct whose function calls the model with a maxTokens ceiling says so (AnswerRouter, QueuedInference)
    ceiling = getattr(owner, "max_output_tokens", None)
    read = [m for m in (_max_tokens(stack, states), ceiling) if isinstance(m, int) and not isinstance(m, bool)]
    max_tokens = max(read) if read else None
    caps: list[tuple[int | None, str]] = []
    for user in users:
        if isinstance(user, lambda_.Function):
            caps.append(_function_cap(stack, user))
        else:
            caps.append(_state_machine_cap(stack, states))
    unread = [source for calls, source in caps if calls is None]
    if unread:
        deploy_time = [source for source in unread if DEPLOY_TIME_CAP in source]
        return None, (deploy_time or unread)[0], max_tokens, per_execution, bool(deploy_time)
    total = sum(calls for calls, _ in caps if calls is not None)
    return total, "; ".join(source for _, source in caps), max_tokens, per_execution, False


def _whole(stack: cdk.Stack, value: Any) -> int | None:
    resolved = stack.resolve(value)
    return resolved if isinstance(resolved, int) and not isinstance(resolved, bool) else None


#: How a cap read from the template says it is a deploy-time value (a CfnParameter, a reference).
DEPLOY_TIME_CAP = "a deploy-time value"


def _deploy_time(stack: cdk.Stack, value: Any) -> str | None:
    """The template's expression for a deploy-time number ('{"Ref": "Cap"}'), None for a literal or none."""
    if value is None:
        return None
    resolved = stack.resolve(value)
    if resolved is None or isinstance(resolved, int | float):
        return None
    return json.dumps(resolved, sort_keys=True)


def _function_cap(stack: cdk.Stack, function: lambda_.Function) -> tuple[int | None, str]:
    """The lower of the function's reserved concurrency and its event sources' maximum concurrency
    (the sum of theirs, when every one has one): invocations beyond either do not start."""
    cfn = function.node.default_child
    raw_reserved = cfn.reserved_concurrent_executions if isinstance(cfn, lambda_.CfnFunction) else None
    reserved = _whole(stack, raw_reserved)
    raw_maxima = [(stack.resolve(m.scaling_config) or {}).get("maximumConcurrency")
                  for m in function.node.find_all() if isinstance(m, lambda_.CfnEventSourceMapping)]
    maxima = [_whole(stack, m) for m in raw_maxima]
    deploy_time = [(what, expression) for what, expression in
                   [("its function's reserved concurrency", _deploy_time(stack, raw_reserved)),
                    *(("its event source's maximum concurrency", _deploy_time(stack, m)) for m in raw_maxima)]
                   if expression is not None]
    if deploy_time and reserved is None and not (maxima and None not in maxima):  # no literal bound either way
        what, expression = deploy_time[0]
        return None, f"{what} is {DEPLOY_TIME_CAP} ({expression})"
    polled = sum(m for m in maxima if m is not None) if maxima and None not in maxima else None
    if polled is not None and (reserved is None or polled < reserved):
        return polled, f"its event source's maximum concurrency of {polled}, " + (
            "with no reserved concurrency on its function" if reserved is None
            else f"below its function's reserved concurrency of {reserved}")
    if reserved is not None:
        return reserved, f"its function's reserved concurrency of {reserved}"
    return None, "its function has no reserved concurrency"


def _state_machine_cap(stack: cdk.Stack, states: list[sfn.State]) -> tuple[int | None, str]:
    maps = [s for s in states if isinstance(s, sfn.MapBase)]
    if maps:
        raw = [s.to_state_json() for s in maps]
        for state in raw:
            expression = _deploy_time(stack, state.get("MaxConcurrency"))
            if expression is not None or "MaxConcurrencyPath" in state:
                shown = expression or f"MaxConcurrencyPath {state['MaxConcurrencyPath']}"
                return None, f"per execution: its Map's MaxConcurrency is {DEPLOY_TIME_CAP} ({shown})"
        caps = [_whole(stack, state.get("MaxConcurrency")) for state in raw]
        if any(not cap for cap in caps):
            return None, "a Map of its state machine has no MaxConcurrency"
        return max(c for c in caps if c), f"per execution: its Map's MaxConcurrency of {max(c for c in caps if c)}"
    widths = [len(s.to_state_json().get("Branches") or []) for s in states if isinstance(s, sfn.Parallel)]
    if widths:
        return max(widths), f"per execution: {max(widths)} Parallel branches"
    return 1, "per execution: one call at a time"


def _max_tokens(stack: cdk.Stack, states: list[sfn.State]) -> int | None:
    """The largest max_tokens (Converse MaxTokens, InvokeModel bodies' max_tokens) the states send."""
    found: list[int] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key in ("MaxTokens", "maxTokens", "max_tokens", "max_new_tokens") and _whole(stack, item):
                    found.append(_whole(stack, item) or 0)
                else:
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for state in states:
        if isinstance(state, sfn.TaskStateBase | sfn.CustomState):
            walk(stack.resolve(state.to_state_json()))
    return max(found) if found else None
