"""What an emulated model is: its quota, its speed, its limits, and the identifiers that reach it.

Also the shared vocabulary of the emulator's modules: the token approximation and EmulatorError.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._internal.checks import Checks
from ..quota.planning import MINUTES_PER_DAY

__all__ = [
    "ANSWER_TOKENS_KEY",
    "FAMILIES",
    "LATENCY_MODES",
    "SERVICE_TIERS",
    "SERVICE_TIER_HEADER",
    "SERVICE_TIER_MEMBER",
    "EmulatorError",
    "LatencyOptimized",
    "ModelSpec",
    "TierLatency",
    "approx_tokens",
]

ANSWER_TOKENS_KEY = "genai-pacer-answer-tokens"
TOKEN_CHARS = 4
#: Values of botocore's PerformanceConfigLatency and ServiceTierType enums (a test compares them
#: with the installed botocore, so a new value shows up as a failing test, not as a silent refusal).
LATENCY_MODES = ("standard", "optimized")
SERVICE_TIERS = ("priority", "default", "flex", "reserved")
#: Where a request names its tier and a response names the tier that served it, per botocore 1.44.8's
#: bedrock-runtime model (botocore/data/bedrock-runtime/2023-09-30/service-2.json.gz): Converse and
#: ConverseStream requests, the Converse response and ConverseStreamMetadataEvent have the member
#: `serviceTier` (shape ServiceTier: {"type": ServiceTierType}); InvokeModel and
#: InvokeModelWithResponseStream requests and responses carry ServiceTierType in this header. The
#: emulator test compares both with the installed botocore.
SERVICE_TIER_MEMBER = "serviceTier"
SERVICE_TIER_HEADER = "X-Amzn-Bedrock-Service-Tier"
#: Standard is spelled `default`; a request without a tier is served at it (botocore's
#: ServiceTierType; https://docs.aws.amazon.com/bedrock/latest/userguide/service-tiers-inference.html).
DEFAULT_TIER = "default"
#: The smallest Reserved tier reservation Bedrock sells, per model, in input and output tokens per
#: minute (https://docs.aws.amazon.com/bedrock/latest/userguide/service-tiers-inference.html, read in
#: AWS's translated copies of the page). ModelSpec does not enforce them, so a test can fill a small
#: reservation with a few calls.
RESERVED_MIN_INPUT_TPM = 100_000
RESERVED_MIN_OUTPUT_TPM = 10_000
#: Native InvokeModel body families the emulator reads and writes.
FAMILIES = ("anthropic", "nova", "llama")
#: Geographic prefixes of cross-Region inference profile ids (us.anthropic... is anthropic...).
GEO_PREFIXES = ("us", "us-gov", "eu", "apac", "ca", "jp", "au", "global")


def approx_tokens(text: str) -> int:
    """Token count of a text by the emulator's approximation: one token per 4 characters."""
    return math.ceil(len(text) / TOKEN_CHARS)


def foundation_id(model_id: str) -> str:
    """The model id without a cross-Region profile's geographic prefix."""
    prefix, _, rest = model_id.partition(".")
    return rest if prefix in GEO_PREFIXES and rest else model_id


class EmulatorError(Exception):
    """An error the service would return: error_type is the modelled exception name, status its HTTP status."""

    def __init__(self, error_type: str, message: str, status: int | None = None):
        super().__init__(f"{error_type}: {message}")
        self.error_type, self.message = error_type, message
        self.status = status or _STATUS.get(error_type, 400)

    @property
    def stream_type(self) -> str:
        """The camelCase name an in-stream exception carries (throttlingException)."""
        return self.error_type[0].lower() + self.error_type[1:]


# The statuses of the errors the emulator raises by itself; injected errors take botocore's.
_STATUS = {
    "ValidationException": 400,
    "ThrottlingException": 429,
    "InternalServerException": 500,
    "BadRequestException": 400,
    "UnknownOperationException": 404,
    "RequestEntityTooLargeException": 413,
    "NotEmulatedException": 501,
    "NotImplementedException": 501,
}


def _count(check: Checks, name: str, value: Any, *, minimum: int = 1, optional: bool = False, fix: str = "") -> None:
    """A whole number of tokens or requests (not a float, not a bool)."""
    if value is None and optional:
        return
    if check.instance(name, value, int, f"a whole number >= {minimum}" + (f"; {fix}" if fix else "")):
        check.number(name, value, minimum=minimum, fix=fix)


def _seconds(check: Checks, name: str, value: Any, *, optional: bool = False) -> None:
    check.number(name, value, above=0, optional=optional, fix="pass a positive number of seconds")


@dataclass(frozen=True)
class LatencyOptimized:
    """A model's latency-optimized mode: its own TPM quota and faster serving."""

    tpm_quota: int
    ttft_seconds: float = 0.25
    output_tokens_per_second: float = 120.0

    def __post_init__(self) -> None:
        with Checks("LatencyOptimized") as check:
            _count(check, "tpm_quota", self.tpm_quota, fix="the optimized mode's own tokens-per-minute quota")
            _seconds(check, "ttft_seconds", self.ttft_seconds)
            check.number("output_tokens_per_second", self.output_tokens_per_second, above=0)


@dataclass(frozen=True)
class TierLatency:
    """How fast one service tier (priority, default, flex, reserved) serves; None keeps the model's figure.

    Speed only: which quota a tier charges and when it waits are ModelSpec's service tier rules.
    """

    ttft_seconds: float | None = None
    prefill_tokens_per_second: float | None = None
    output_tokens_per_second: float | None = None

    def __post_init__(self) -> None:
        with Checks("TierLatency") as check:
            _seconds(check, "ttft_seconds", self.ttft_seconds, optional=True)
            check.number("prefill_tokens_per_second", self.prefill_tokens_per_second, above=0, optional=True)
            check.number("output_tokens_per_second", self.output_tokens_per_second, above=0, optional=True)


@dataclass(frozen=True)
class ModelSpec:
    """How one emulated model charges its quota, how fast it answers and what it accepts.

    answer_tokens is the default answer length, or a function of the prompt text returning it.
    max_output_tokens is the largest max_tokens the model takes, and what Bedrock reserves when a
    request leaves max_tokens unset. context_window bounds the prompt: a longer one is refused with
    Bedrock's "Input is too long for requested model.". family selects the native InvokeModel body
    (anthropic, nova or llama); None derives it from the model id, and a model of another family
    serves Converse only. application_profiles lists application inference profile ids (the part
    after `application-inference-profile/` in the ARN) that route to this model. tier_latency gives
    service tiers their own speed so a client can compare them. rpm_quota (default None) makes the
    emulator refuse calls beyond it as a legacy requests-per-minute quota would; Bedrock's
    bedrock-runtime quotas are token-based (genai_pacer.planning.RPM_RULE), so leave it unset to
    emulate today's Bedrock.

    daily_token_quota is the model's "Model invocation max tokens per day" on bedrock-runtime
    (default None: tpm_quota x 1,440, the AWS default, `daily_quota`); the emulator refuses calls
    beyond it on its own clock (QuotaModel). output_tpm_quota is the model's bedrock-mantle output
    tokens per minute: with QuotaModel(endpoint="bedrock-mantle") tpm_quota is the input tokens per
    minute and output_tpm_quota is required; with the default bedrock-runtime model it is refused.

    Service tiers (botocore's ServiceTierType: priority, default, flex, reserved), as the Bedrock
    user guide's service tiers page describes them
    (https://docs.aws.amazon.com/bedrock/latest/userguide/service-tiers-inference.html):

    - priority, default and flex share one on-demand pool, tpm_quota; none has a quota of its own
      (latency-optimized calls keep their own quota, LatencyOptimized.tpm_quota, whatever the tier).
    - reserved_input_tpm and reserved_output_tpm are the model's Reserved tier reservation: its own
      input and output tokens per minute, outside tpm_quota. A `reserved` call is admitted to it when
      both budgets hold it (input: input + cache writes, the page's sizing rule; output: max_tokens,
      settled to the tokens generated, without burndown, an assumption) and otherwise overflows to
      the on-demand pool and is served, and echoed, as `default`. A call served from the
      reservation runs at standard latency (whether Reserved combines with latency-optimized
      inference is not documented). Bedrock sells at least RESERVED_MIN_INPUT_TPM and
      RESERVED_MIN_OUTPUT_TPM; smaller budgets are accepted here so a test can fill one quickly.
    - The served tier is echoed where botocore's model puts it (SERVICE_TIER_MEMBER,
      SERVICE_TIER_HEADER); a call that names no tier gets none back (what Bedrock sends then is not
      documented).

    Documented ASSUMPTIONS, not found on an AWS page (a wrong guess costs one clear error):
    - service_tiers lists the tiers the model takes (default: all four; `default` always, since the
      Standard tier is available for every model); any other tier is refused with
      ValidationException (400), the error botocore's model gives every emulated operation for a bad
      input. Which model supports which tier changes by model and Region: set it per test, never
      from a table.
    - `reserved` on a model without a reservation is refused with ValidationException (400): the
      reported refusal is a 400, and ValidationException is the only 400 botocore 1.44.8 models for
      all four operations (ServiceQuotaExceededException is a 400 of InvokeModel* only).
    - serving_slots (default None: unlimited, as before) is how many on-demand calls the model
      serves at once; more wait for a slot, Priority first and Flex last (slots.ASSUMED_TIER_ORDER),
      up to max_queue_seconds of model time, then get ThrottlingException. A call served from the
      reservation does not wait for on-demand slots.
    """

    model_id: str
    tpm_quota: int = 400_000
    rpm_quota: int | None = None
    burndown: float = 1.0
    max_output_tokens: int = 8_192
    context_window: int = 200_000
    ttft_seconds: float = 0.5
    prefill_tokens_per_second: float = 8_000.0
    output_tokens_per_second: float = 60.0
    jitter: float = 0.1
    answer_tokens: int | Callable[[str], int] = 300
    latency_optimized: LatencyOptimized | None = None
    cache_ttl_seconds: float = 300.0
    family: str | None = None
    application_profiles: tuple[str, ...] = ()
    tier_latency: Mapping[str, TierLatency] = field(default_factory=dict)
    service_tiers: tuple[str, ...] = SERVICE_TIERS
    reserved_input_tpm: int | None = None
    reserved_output_tpm: int | None = None
    serving_slots: int | None = None
    max_queue_seconds: float = 60.0
    daily_token_quota: int | None = None
    output_tpm_quota: int | None = None

    def __post_init__(self) -> None:
        with Checks(f"ModelSpec {self.model_id!r}") as check:
            check.text("model_id", self.model_id, fix="the id clients send, e.g. 'us.amazon.nova-lite-v1:0'")
            _count(check, "tpm_quota", self.tpm_quota)
            _count(check, "rpm_quota", self.rpm_quota, optional=True, fix="or None (no RPM quota)")
            _count(check, "daily_token_quota", self.daily_token_quota, optional=True,
                   fix="or None for tpm_quota x 1,440 (the AWS default)")
            _count(check, "output_tpm_quota", self.output_tpm_quota, optional=True,
                   fix="the bedrock-mantle output tokens per minute, or None on bedrock-runtime")
            check.number("burndown", self.burndown, minimum=1, fix="quota tokens per output token: 1, or 5 for older Claude models")
            _count(check, "max_output_tokens", self.max_output_tokens)
            _count(check, "context_window", self.context_window, fix="the model's published context window in tokens")
            _seconds(check, "ttft_seconds", self.ttft_seconds)
            check.number("prefill_tokens_per_second", self.prefill_tokens_per_second, above=0)
            check.number("output_tokens_per_second", self.output_tokens_per_second, above=0)
            check.number("jitter", self.jitter, minimum=0, fix="the log-normal sigma; 0 for none")
            _seconds(check, "cache_ttl_seconds", self.cache_ttl_seconds)
            if not callable(self.answer_tokens):
                _count(check, "answer_tokens", self.answer_tokens, fix="or a function of the prompt text")
            check.instance("latency_optimized", self.latency_optimized, LatencyOptimized,
                           "LatencyOptimized(tpm_quota=...) or None", optional=True)
            if self.family is not None:
                check.one_of("family", self.family, FAMILIES, fix="or None to derive it from the model id")
            if check.instance("application_profiles", self.application_profiles, tuple, "a tuple of profile ids"):
                for profile in self.application_profiles:
                    check.rule(isinstance(profile, str) and bool(re.fullmatch(r"[A-Za-z0-9-:.]+", profile)),
                               f"application_profiles has {profile!r}; pass the id after 'application-inference-profile/'", id="application_profiles.arn-not-id")
            if check.instance("tier_latency", self.tier_latency, Mapping, "a dict of tier name to TierLatency"):
                for tier, speed in self.tier_latency.items():
                    check.one_of("tier_latency key", tier, SERVICE_TIERS)
                    check.instance(f"tier_latency[{tier!r}]", speed, TierLatency, "TierLatency(...)")
            self._check_tiers(check)

    def _check_tiers(self, check: Checks) -> None:
        tiers = self.service_tiers
        if check.instance("service_tiers", tiers, tuple, "a tuple of tier names, e.g. ('default', 'priority')"):
            for tier in tiers:
                check.one_of("service_tiers item", tier, SERVICE_TIERS)
            check.rule(DEFAULT_TIER in tiers, f"service_tiers={tiers!r} lacks {DEFAULT_TIER!r}: the Standard tier "
                       "(default) serves every model and every call that names no tier; add it", id="service_tiers.without-standard")
            if isinstance(self.tier_latency, Mapping):
                extra = sorted(t for t in self.tier_latency if t in SERVICE_TIERS and t not in tiers)
                check.rule(not extra, f"tier_latency has {extra} but service_tiers does not: add them to "
                           "service_tiers or drop their speeds", id="tier_latency.tier-not-served")
        budgets = (self.reserved_input_tpm, self.reserved_output_tpm)
        for name, value in zip(("reserved_input_tpm", "reserved_output_tpm"), budgets, strict=True):
            _count(check, name, value, optional=True, fix="or None (no reservation)")
        check.rule((budgets[0] is None) == (budgets[1] is None),
                   "reserved_input_tpm and reserved_output_tpm go together: a Reserved tier reservation has an "
                   "input and an output tokens-per-minute budget; give both or neither", id="reserved_input_tpm.without-output-spec")
        if budgets[0] is not None and isinstance(tiers, tuple):
            check.rule("reserved" in tiers, "reserved_input_tpm is set but service_tiers lacks 'reserved': add it, "
                       "or drop the reservation", id="reserved_input_tpm.without-reserved-tier")
        _count(check, "serving_slots", self.serving_slots, optional=True,
               fix="or None (every admitted call is served at once)")
        _seconds(check, "max_queue_seconds", self.max_queue_seconds)

    @property
    def daily_quota(self) -> int:
        """The bedrock-runtime daily token quota: daily_token_quota, or tpm_quota x 1,440 (the AWS default)."""
        return self.daily_token_quota if self.daily_token_quota is not None else self.tpm_quota * MINUTES_PER_DAY

    @property
    def has_reservation(self) -> bool:
        """Whether the model has a Reserved tier reservation (reserved_input_tpm and reserved_output_tpm)."""
        return self.reserved_input_tpm is not None and self.reserved_output_tpm is not None

    @property
    def foundation_model_id(self) -> str:
        return foundation_id(self.model_id)

    @property
    def native_family(self) -> str | None:
        """The native body family InvokeModel speaks for this model, or None (Converse only)."""
        if self.family:
            return self.family
        provider, _, name = self.foundation_model_id.partition(".")
        if provider == "anthropic":
            return "anthropic"
        if provider == "amazon" and name.startswith("nova"):
            return "nova"
        if provider == "meta" and name.startswith("llama"):
            return "llama"
        return None

    def speed(self, tier: str | None) -> tuple[float, float, float]:
        """(ttft_seconds, prefill_tokens_per_second, output_tokens_per_second) of a service tier."""
        own = self.tier_latency.get(tier or "default") or TierLatency()
        return (
            own.ttft_seconds or self.ttft_seconds,
            own.prefill_tokens_per_second or self.prefill_tokens_per_second,
            own.output_tokens_per_second or self.output_tokens_per_second,
        )

    def answers(self, identifier: str) -> bool:
        """Whether a model identifier (id, foundation-model ARN, inference-profile ARN, application
        inference profile ARN) reaches this model."""
        arn = _ARN.fullmatch(identifier)
        if arn is None:
            return identifier == self.model_id or foundation_id(identifier) == self.foundation_model_id
        kind, account, resource = arn["type"], arn["account"], arn["resource"]
        if kind == "foundation-model":
            return account == "" and foundation_id(resource) == self.foundation_model_id
        if kind == "inference-profile":
            return account != "" and foundation_id(resource) == self.foundation_model_id
        if kind == "application-inference-profile":
            return account != "" and resource in self.application_profiles
        return False


_ARN = re.compile(r"arn:aws(?:-[a-z-]+)?:bedrock:[a-z0-9-]{1,20}:(?P<account>\d{12}|):(?P<type>[a-z-]+)/(?P<resource>.+)")
