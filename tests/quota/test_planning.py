"""genai_pacer.planning: the reference notes' worked figures, exact, and the invariants behind them."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import re
import subprocess
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from genai_pacer import planning
from genai_pacer._internal.checks import Checks, InvalidPropsError, fit_concurrency
from genai_pacer.planning import LatencyProfile, TokenProfile
from hypothesis import given
from hypothesis import strategies as st

PROFILE_5X = TokenProfile(input_tokens=2_500, output_tokens=300, max_tokens=440, burndown=5)

# --- worked figures -----------------------------------------------------------------------------


def test_reserve_settle_bill_on_a_5x_burndown_model():
    profile = TokenProfile(input_tokens=2_500, output_tokens=300, max_tokens=6_000, burndown=5)
    assert profile.reserved == 8_500
    assert profile.settled == 4_000
    assert profile.billed == 2_800


def test_cache_reads_are_reserved_but_never_settled_and_cache_writes_count():
    profile = TokenProfile(
        input_tokens=1_000,
        output_tokens=100,
        max_tokens=500,
        burndown=1,
        cache_write_tokens=200,
        cache_read_tokens=3_000,
    )
    assert profile.reserved == 1_000 + 200 + 3_000 + 500
    assert profile.settled == 1_000 + 200 + 100
    assert profile.billed == 1_000 + 200 + 3_000 + 100


def test_oversized_max_tokens_reserves_19000_and_sizing_to_p99_saves_the_waste():
    oversized = TokenProfile(input_tokens=3_000, output_tokens=900, max_tokens=16_000)
    assert oversized.reserved == 19_000
    sizing = planning.size_max_tokens(900, current_max_tokens=16_000)
    assert sizing.max_tokens == 990  # slightly above p99 (10% margin)
    assert sizing.reservation_saved_per_request == 15_010
    resized = TokenProfile(input_tokens=3_000, output_tokens=900, max_tokens=sizing.max_tokens)
    assert resized.reserved == 3_990


@pytest.mark.parametrize(("p99", "margin", "expected"), [
    (901, 0.1, 992),  # 991.1 -> 992: a floor would cut the answers between 991 and 991.1 tokens
    (1, 0.5, 2),  # 1.5 -> 2
    (999, 0.001, 1000),  # 999.999 -> 1000
    (900, 0.1, 990),  # 990.0000000000001 in floating point: exact products are not rounded up
])
def test_max_tokens_is_p99_times_the_margin_rounded_up(p99, margin, expected):
    assert planning.size_max_tokens(p99, margin=margin).max_tokens == expected


def test_tpm_plan_300_rpm_on_a_5x_model_needs_1_65_million():
    profile = TokenProfile(input_tokens=3_000, output_tokens=500, max_tokens=550, burndown=5)
    plan = planning.plan_tpm(profile, requests_per_minute=300, headroom=0)
    assert profile.settled == 5_500
    assert plan.settled_tpm == 1_650_000
    one_to_one = TokenProfile(input_tokens=3_000, output_tokens=500, max_tokens=550, burndown=1)
    assert (
        planning.plan_tpm(one_to_one, requests_per_minute=300, headroom=0).settled_tpm == 1_050_000
    )  # understated
    burndown_on_max_tokens = 300 * (3_000 + 550 * 5)
    assert burndown_on_max_tokens > plan.settled_tpm  # overstated


def test_tpm_plan_adds_headroom():
    profile = TokenProfile(input_tokens=3_000, output_tokens=500, max_tokens=550, burndown=5)
    plan = planning.plan_tpm(profile, requests_per_minute=300, headroom=0.2)
    assert plan.required_tpm == pytest.approx(1_980_000)
    assert not plan.reservation_binds


def test_reservation_binds_when_max_tokens_is_oversized_at_high_concurrency():
    profile = TokenProfile(input_tokens=3_000, output_tokens=900, max_tokens=16_000, burndown=1)
    plan = planning.plan_tpm(profile, requests_per_minute=300, headroom=0.2, concurrency=100)
    assert plan.settled_tpm == 1_170_000
    assert plan.reservation_peak_tpm == 1_170_000 + 100 * (19_000 - 3_900)
    assert plan.reservation_binds
    assert plan.required_tpm == plan.reservation_peak_tpm


def test_a_reservation_peak_equal_to_the_headroom_does_not_bind_and_one_more_call_does():
    """At the limit itself: 60 requests a minute settle 1,000 tokens each (60,000 TPM, 75,000 with 25%
    headroom); 15 calls in flight hold 1,000 more each, exactly the headroom, so it still covers them."""
    profile = TokenProfile(input_tokens=1_000, output_tokens=0, max_tokens=1_000)
    at_limit = planning.plan_tpm(profile, requests_per_minute=60, headroom=0.25, concurrency=15)
    assert at_limit.reservation_peak_tpm == 75_000 == at_limit.settled_tpm * 1.25
    assert not at_limit.reservation_binds and at_limit.required_tpm == 75_000
    above = planning.plan_tpm(profile, requests_per_minute=60, headroom=0.25, concurrency=16)
    assert above.reservation_binds and above.required_tpm == 76_000


def test_concurrency_defaults_to_littles_law():
    profile = TokenProfile(input_tokens=100, output_tokens=10, max_tokens=20)
    assert planning.plan_tpm(profile, requests_per_minute=120, call_seconds=5).concurrency == 10


def test_sustainable_rate_and_max_concurrency():
    profile = TokenProfile(input_tokens=2_000, output_tokens=500, max_tokens=500, burndown=1)
    # reserved == settled, so 1,000,000 TPM / 2,500 tokens = 400 requests per minute
    rate = planning.sustainable_rate(profile, tpm_quota=1_000_000, call_seconds=6)
    assert rate.requests_per_minute == 400
    assert rate.limited_by == "tpm"
    assert rate.max_concurrency == 40  # 400/min = 6.67/s x 6 s


def test_rpm_quota_binds_when_lower():
    profile = TokenProfile(input_tokens=2_000, output_tokens=500, max_tokens=500)
    rate = planning.sustainable_rate(profile, tpm_quota=1_000_000, call_seconds=6, rpm_quota=100)
    assert (rate.requests_per_minute, rate.limited_by, rate.max_concurrency) == (100, "rpm", 10)
    # a legacy figure given binds, and the plan says it is legacy (Bedrock does not enforce it)
    assert rate.binding.startswith("the legacy rpm_quota of 100 requests per minute, lower than the TPM quota sustains; "
                                   "RPM is legacy: Bedrock no longer enforces requests-per-minute quotas on the "
                                   "bedrock-runtime endpoint")
    unbound = planning.sustainable_rate(profile, tpm_quota=1_000_000, call_seconds=6)
    assert unbound.binding == "the tokens-per-minute quota, reservations included" and "legacy" not in unbound.binding


def test_rpm_is_legacy_by_the_english_quotas_page():
    """RPM_DOC is the primary English page (c7d083c cited the ko_kr machine translation and said RPM
    applies to some models); the rule calls RPM legacy and cites that page."""
    assert planning.RPM_DOC == "https://docs.aws.amazon.com/bedrock/latest/userguide/quotas-runtime.html"
    assert planning.RPM_DOC == planning.QUOTAS_DOC
    assert planning.RPM_RULE.startswith("RPM is legacy: Bedrock no longer enforces requests-per-minute quotas")
    assert planning.RPM_RULE.endswith(f"({planning.RPM_DOC})")
    assert "some models" not in planning.RPM_RULE
    for documented in (planning.__doc__, planning.sustainable_rate.__doc__, planning.RatePlan.__doc__):
        assert "legacy" in " ".join((documented or "").split())


def test_reservations_in_flight_lower_the_sustainable_rate():
    oversized = TokenProfile(input_tokens=3_000, output_tokens=900, max_tokens=16_000)
    sized = TokenProfile(input_tokens=3_000, output_tokens=900, max_tokens=990)
    slow = planning.sustainable_rate(oversized, tpm_quota=1_000_000, call_seconds=30)
    fast = planning.sustainable_rate(sized, tpm_quota=1_000_000, call_seconds=30)
    assert fast.requests_per_minute > 1.5 * slow.requests_per_minute


def test_a_quota_smaller_than_one_calls_reservation_gets_no_plan():
    """Issue 35.7: 2,000 TPM against a 2,900-token reservation used to plan max_concurrency 1, a call
    QuotaPacer refuses because Bedrock throttles it every time. The refusal names both numbers."""
    profile = TokenProfile(input_tokens=2_000, output_tokens=300, max_tokens=900)  # reserves 2,900, settles 2,300
    with pytest.raises(InvalidPropsError) as error:
        planning.sustainable_rate(profile, tpm_quota=2_000, call_seconds=6)
    text = str(error.value)
    assert "tpm_quota (2,000 TPM) cannot sustain one call at a time: each call reserves 2,900 tokens" in text
    assert "Bedrock would throttle every call" in text
    assert "give it at least 23,600 TPM, or lower max_tokens or the prompt" in text  # 10 calls a minute x 2,360


def test_a_quota_below_one_call_at_a_time_gets_no_plan_either():
    """5,000 TPM holds the 2,900-token reservation, but one 6-second call after another draws 23,600
    TPM: the plan's cap of 1 (none is lower) would overdraw it. Refused; at one_call_tpm it plans 1."""
    profile = TokenProfile(input_tokens=2_000, output_tokens=300, max_tokens=900)
    assert planning.one_call_tpm(profile, 6) == 23_600  # 60 / 6 x (2,300 + 6/60 x 600)
    with pytest.raises(InvalidPropsError, match=r"tpm_quota \(5,000 TPM\) cannot sustain one call at a time: each "
                       r"call reserves 2,900 tokens and settles 2,300, so one call after another over 6 s each draws "
                       r"23,600 TPM; even one call at a time overdraws it"):
        planning.sustainable_rate(profile, tpm_quota=5_000, call_seconds=6)
    plan = planning.sustainable_rate(profile, tpm_quota=23_600, call_seconds=6)
    assert plan.max_concurrency == 1 and plan.requests_per_minute / 60 * 6 == pytest.approx(1)
    # A call longer than the window holds its reservation all minute: the reservation alone binds.
    assert planning.one_call_tpm(profile, 120) == 2_900


def test_max_concurrency_never_below_one():
    assert planning.max_concurrency(1, 1) == 1


def test_a_nightly_run_and_daytime_traffic_against_the_daily_quotas():
    """30,000 records of 4,000 settled tokens in 6 hours (333,333 TPM) plus 50 requests a minute for
    14 hours (200,000 TPM): each fits a 400,000 TPM quota, and the day is 288 million tokens, half
    of the default daily quota (400,000 x 1,440 = 576 million) but above a new account's 250 million."""
    profile = TokenProfile(input_tokens=2_500, output_tokens=300, max_tokens=440, burndown=5)
    nightly = planning.DailyLoad.records("nightly", profile, records=30_000, hours=6)
    daytime = planning.DailyLoad.traffic("daytime", profile, requests_per_minute=50, hours=14)
    assert (nightly.daily_tokens, daytime.daily_tokens) == (pytest.approx(120_000_000), 168_000_000)
    plan = planning.plan_daily_tokens([nightly, daytime], tpm_quota=400_000)
    assert (plan.daily_tokens, plan.daily_quota, plan.fraction, plan.warnings) == (pytest.approx(288_000_000),
                                                                                   576_000_000, pytest.approx(0.5), ())
    reduced = planning.plan_daily_tokens([nightly, daytime], tpm_quota=400_000, daily_token_quota=250_000_000)
    (warning,) = reduced.warnings
    assert "settle 288,000,000 tokens, 115.2% of the model's daily quota of 250,000,000 (given)" in warning
    assert "(daytime 168,000,000, nightly 120,000,000)" in warning


def test_a_day_far_above_the_daily_quota_states_its_percentage_with_thousands_separators():
    """A daily quota set far too low (a typo, a test account's figure): the warning's percentage is read
    as a number, "28,800,000.0%", not "28800000.0%" (found by the fresh-app trial of the ledger)."""
    load = planning.DailyLoad("all day", tokens_per_minute=200_000)  # 288,000,000 tokens a day
    (warning,) = planning.plan_daily_tokens([load], tpm_quota=400_000, daily_token_quota=1_000).warnings
    assert "settle 288,000,000 tokens, 28,800,000.0% of the model's daily quota of 1,000 (given)" in warning
    (cross,) = planning.plan_daily_tokens([load], tpm_quota=400_000, cross_model_daily_tokens=1_000).warnings
    assert "the account settles 288,000,000 tokens a day in this Region, 28,800,000.0% of its cross-model" in cross


def test_the_daily_quota_is_reached_at_the_limit_not_before():
    load = planning.DailyLoad("all day", tokens_per_minute=400_000)  # the whole TPM quota, 24 hours
    assert planning.plan_daily_tokens([load], tpm_quota=400_000).warnings == ()  # exactly the default quota
    assert planning.plan_daily_tokens([load], tpm_quota=400_000, daily_token_quota=576_000_000 - 1).warnings
    capped = planning.plan_daily_tokens([load], tpm_quota=400_000, cross_model_daily_tokens=600_000_000,
                                        other_models_daily_tokens=24_000_000)
    assert capped.cross_model_fraction == 1 and capped.warnings == ()
    over = planning.plan_daily_tokens([load], tpm_quota=400_000, cross_model_daily_tokens=600_000_000,
                                      other_models_daily_tokens=24_000_001)
    (warning,) = over.warnings
    assert "of its cross-model daily cap of 600,000,000: every model is throttled once it is reached" in warning


def test_a_run_faster_than_the_tpm_quota_says_how_long_it_takes():
    profile = TokenProfile(input_tokens=2_500, output_tokens=300, max_tokens=440, burndown=5)
    nightly = planning.DailyLoad.records("nightly", profile, records=60_000, hours=6)  # 666,667 TPM
    (warning,) = planning.plan_daily_tokens([nightly], tpm_quota=400_000).warnings
    assert "nightly settles 666,667 tokens a minute, above the 400,000 TPM quota: at the quota it takes 10.0 hours, not 6" in warning


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: planning.DailyLoad.records("n", PROFILE_5X, records=-1, hours=6), "records=-1"),
        (lambda: planning.DailyLoad.records("n", PROFILE_5X, records=10, hours=25), "hours=25"),
        (lambda: planning.DailyLoad.records("n", None, records=10, hours=6), "profile"),
        (lambda: planning.DailyLoad.traffic("n", PROFILE_5X, requests_per_minute=math.nan, hours=6),
         "requests_per_minute=nan"),
        (lambda: planning.DailyLoad.traffic("n", PROFILE_5X, requests_per_minute=5, hours=0), "hours=0"),
        (lambda: planning.plan_daily_tokens([{"tokens": 1}], tpm_quota=400_000), "loads[0]"),
    ],
)
def test_daily_load_builders_refuse_bad_input_by_name(build, message):
    with pytest.raises(InvalidPropsError, match=re.escape(message)):
        build()


def test_latency_that_doubled_with_steady_ttft_is_longer_answers_not_a_slower_model():
    before = LatencyProfile(ttft_seconds=1, latency_seconds=6, output_tokens=300)
    after = LatencyProfile(ttft_seconds=1, latency_seconds=11, output_tokens=600)
    diagnosis = planning.diagnose_latency(before, after)
    assert (diagnosis.before_otps, diagnosis.after_otps) == (60, 60)
    assert diagnosis.cause == "longer-output"


def test_latency_diagnosis_names_prefill_and_decode():
    base = LatencyProfile(ttft_seconds=1, latency_seconds=6, output_tokens=300)
    assert planning.diagnose_latency(base, LatencyProfile(3, 8, 300)).cause == "prefill"
    assert planning.diagnose_latency(base, LatencyProfile(1, 11, 300)).cause == "decode"
    assert planning.diagnose_latency(base, base).cause == "unchanged"


def test_minute_deadline_stays_on_demand_and_overnight_archive_goes_to_batch():
    assert planning.choose_execution(deadline=timedelta(minutes=15), record_count=1).mode == "on-demand"
    archive = planning.choose_execution(deadline=timedelta(hours=24), record_count=50_000)
    assert archive.mode == "batch"
    small = planning.choose_execution(deadline=timedelta(days=2), record_count=40)
    assert small.mode == "on-demand" and "minimum of 100" in small.reason


# --- errors name the input, the value, the rule and the fix --------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(input_tokens=-1, output_tokens=1, max_tokens=2), "input_tokens=-1 is below the minimum of 0"),
        (dict(input_tokens=1, output_tokens=-5, max_tokens=2), "output_tokens=-5 is below the minimum of 0"),
        (
            dict(input_tokens=1, output_tokens=1, max_tokens=0),
            "max_tokens=0 is below the minimum of 1.*model's maximum",
        ),
        (
            dict(input_tokens=1, output_tokens=10, max_tokens=5),
            "output_tokens=10 exceeds max_tokens=5.*raise max_tokens",
        ),
        (
            dict(input_tokens=1, output_tokens=1, max_tokens=5, burndown=0.5),
            "burndown=0.5 is below the minimum of 1",
        ),
        (dict(input_tokens=1, output_tokens=1, max_tokens=5, cache_read_tokens=-3), "cache_read_tokens=-3"),
        (
            dict(input_tokens=1.5, output_tokens=1, max_tokens=5),
            "input_tokens=1.5 is not a whole number of tokens",
        ),
        (
            dict(input_tokens=2e8, output_tokens=1, max_tokens=5),
            "input_tokens=200000000.0 exceeds.*total over many",
        ),
        (
            dict(input_tokens=1, output_tokens=1, max_tokens=5, burndown=math.inf),
            "burndown=inf is not a finite",
        ),
        (
            dict(input_tokens=1, output_tokens=1, max_tokens=True),
            "max_tokens=True is a bool; pass an integer",
        ),
    ],
)
def test_token_profile_rejects_nonsense(kwargs, message):
    with pytest.raises(InvalidPropsError, match=message):
        TokenProfile(**kwargs)


def test_planner_errors():
    profile = TokenProfile(input_tokens=1, output_tokens=1, max_tokens=5)
    with pytest.raises(ValueError, match="headroom=-0.1 is below the minimum of 0; headroom is a fraction"):
        planning.plan_tpm(profile, requests_per_minute=10, headroom=-0.1)
    with pytest.raises(ValueError, match="headroom=20 exceeds the maximum of 10; .*0.2 keeps 20% spare"):
        planning.plan_tpm(profile, requests_per_minute=10, headroom=20)
    with pytest.raises(ValueError, match="requests_per_minute=0 must be greater than 0"):
        planning.plan_tpm(profile, requests_per_minute=0)
    with pytest.raises(
        ValueError, match="current_max_tokens=800 is below the p99 output \\(900\\).*at least 990"
    ):
        planning.size_max_tokens(900, current_max_tokens=800)
    with pytest.raises(ValueError, match="p99_output_tokens=0 is below the minimum of 1"):
        planning.size_max_tokens(0)
    with pytest.raises(ValueError, match="p99_output_tokens=911.4 is not a whole number.*math.ceil"):
        planning.size_max_tokens(911.4)
    with pytest.raises(ValueError, match="margin=-0.2 is below the minimum of 0"):
        planning.size_max_tokens(100, margin=-0.2)
    with pytest.raises(ValueError, match="tpm_quota=0 is below the minimum of 1"):
        planning.sustainable_rate(profile, tpm_quota=0, call_seconds=1)
    with pytest.raises(ValueError, match="call_seconds=0 is below the minimum of 0.001"):
        planning.max_concurrency(10, 0)
    with pytest.raises(ValueError, match="call_seconds=6000000 exceeds.*milliseconds passed as seconds"):
        planning.max_concurrency(10, 6_000_000)
    with pytest.raises(ValueError, match="latency_seconds=1 must exceed ttft_seconds=2"):
        LatencyProfile(ttft_seconds=2, latency_seconds=1, output_tokens=10)
    with pytest.raises(ValueError, match="tolerance=-1 is below the minimum of 0"):
        planning.diagnose_latency(LatencyProfile(1, 2, 3), LatencyProfile(1, 2, 3), tolerance=-1)
    with pytest.raises(ValueError, match="deadline=.* must be positive"):
        planning.choose_execution(deadline=timedelta(0), record_count=5)
    with pytest.raises(ValueError, match="record_count=0 is below the minimum of 1"):
        planning.choose_execution(deadline=timedelta(hours=30), record_count=0)
    with pytest.raises(TypeError, match="deadline=3600 is an int; pass a datetime.timedelta"):
        planning.choose_execution(deadline=3600, record_count=5)


def test_relations_between_inputs_are_checked():
    profile = TokenProfile(input_tokens=1, output_tokens=1, max_tokens=5)
    with pytest.raises(
        InvalidPropsError, match="concurrency=10 and call_seconds=5 are both given.*pass only one"
    ):
        planning.plan_tpm(profile, requests_per_minute=10, concurrency=10, call_seconds=5)
    # 1 token in 1e-300 s after the first token: an infinite decode speed, a unit mistake.
    with pytest.raises(InvalidPropsError, match="output_tokens=300 in .* tokens/s, above the 1,000,000"):
        LatencyProfile(ttft_seconds=0, latency_seconds=1e-300, output_tokens=300)


def test_every_problem_is_reported_at_once():
    with pytest.raises(InvalidPropsError) as excinfo:
        TokenProfile(
            input_tokens=-1, output_tokens="5", max_tokens=None, burndown=math.nan, cache_read_tokens=1.5
        )
    assert excinfo.value.owner == "TokenProfile"
    assert [problem.split("=")[0].split(" ")[0] for problem in excinfo.value.problems] == [
        "input_tokens",
        "output_tokens",
        "max_tokens",
        "burndown",
        "cache_read_tokens",
    ]
    with pytest.raises(InvalidPropsError) as excinfo:
        planning.choose_execution(
            deadline=None, record_count=-3, batch_min_records=2.5, batch_turnaround="1d"
        )
    assert len(excinfo.value.problems) == 4


def test_whole_floats_are_counts_and_stored_as_ints():
    """A CloudWatch statistic arrives as 2500.0: accepted, and the figures stay exact ints."""
    profile = TokenProfile(input_tokens=2_500.0, output_tokens=300.0, max_tokens=6_000.0, burndown=5)
    assert (profile.input_tokens, profile.output_tokens, profile.max_tokens) == (2_500, 300, 6_000)
    assert all(type(value) is int for value in (profile.input_tokens, profile.max_tokens, profile.reserved))
    assert profile == TokenProfile(input_tokens=2_500, output_tokens=300, max_tokens=6_000, burndown=5)
    sizing = planning.size_max_tokens(900.0, current_max_tokens=16_000.0)
    assert (sizing.p99_output_tokens, sizing.max_tokens, sizing.reservation_saved_per_request) == (
        900,
        990,
        15_010,
    )
    assert type(sizing.current_max_tokens) is int
    assert type(planning.RatePlan(300, "tpm", 12.0, 5).max_concurrency) is int
    with pytest.raises(
        InvalidPropsError, match="max_concurrency=12.5 is not a whole number of calls: round down"
    ):
        planning.RatePlan(300, "tpm", 12.5, 5)


def test_the_largest_accepted_inputs_give_finite_results():
    """The bounds exist so that no accepted input reaches inf, NaN or an OverflowError."""
    biggest = TokenProfile(
        input_tokens=planning.MAX_REQUEST_TOKENS,
        output_tokens=planning.MAX_REQUEST_TOKENS,
        max_tokens=planning.MAX_REQUEST_TOKENS,
        burndown=planning.MAX_BURNDOWN,
        cache_write_tokens=planning.MAX_REQUEST_TOKENS,
        cache_read_tokens=planning.MAX_REQUEST_TOKENS,
    )
    reservation_only = TokenProfile(input_tokens=0, output_tokens=0, max_tokens=1)  # settles to 0 tokens
    for profile in (biggest, reservation_only):
        for seconds in (planning.MIN_CALL_SECONDS, planning.MAX_CALL_SECONDS):
            assert math.isfinite(planning.one_call_tpm(profile, seconds))
            for tpm in (1, planning.MAX_TPM_QUOTA):
                if tpm < planning.one_call_tpm(profile, seconds):  # refused, never planned
                    with pytest.raises(InvalidPropsError, match="cannot sustain one call at a time"):
                        planning.sustainable_rate(profile, tpm_quota=tpm, call_seconds=seconds)
                    continue
                rate = planning.sustainable_rate(profile, tpm_quota=tpm, call_seconds=seconds)
                assert 0 < rate.requests_per_minute <= planning.MAX_RATE
                assert_finite(rate)
                assert_finite(
                    planning.plan_tpm(
                        profile, requests_per_minute=rate.requests_per_minute, call_seconds=seconds
                    )
                )
        assert_finite(
            planning.plan_tpm(
                profile, requests_per_minute=planning.MAX_RATE, headroom=10, concurrency=planning.MAX_RATE
            )
        )
    assert planning.max_concurrency(planning.MAX_RATE, planning.MAX_CALL_SECONDS) == math.floor(
        1e18 / 60 * 86_400
    )
    assert planning.size_max_tokens(planning.MAX_REQUEST_TOKENS, margin=10).max_tokens == 1_100_000_000
    fast = LatencyProfile(
        ttft_seconds=0, latency_seconds=planning.MAX_REQUEST_TOKENS / 1e6, output_tokens=1e8
    )
    assert_finite(planning.diagnose_latency(fast, fast, tolerance=10))


def test_an_infinite_burndown_is_named_not_blamed_on_the_rate():
    """It used to surface as 'requests_per_minute=0.0 must be > 0' from deep inside sustainable_rate."""
    with pytest.raises(InvalidPropsError, match=r"^TokenProfile: \[TokenProfile\.burndown\.not-finite\] burndown=inf is not a finite number"):
        TokenProfile(input_tokens=1, output_tokens=1, max_tokens=5, burndown=math.inf)


def test_a_rate_plan_is_what_constructs_fit_to_their_range():
    """_checks.fit_concurrency recognises a plan by its class name and reads these two attributes."""
    profile = TokenProfile(input_tokens=2_000, output_tokens=500, max_tokens=500)
    plan = planning.sustainable_rate(profile, tpm_quota=1_000_000, call_seconds=6)
    assert type(plan).__name__ == "RatePlan" and (plan.max_concurrency, plan.requests_per_minute) == (40, 400)
    check = Checks("BoundedMap")
    assert fit_concurrency(check, None, "max_concurrency", plan, minimum=1, maximum=40, limit="x") == 40
    assert planning.as_max_concurrency(plan) == 40
    assert planning.as_max_concurrency(12.0) == 12 and type(planning.as_max_concurrency(12.0)) is int


def test_planning_stays_pure_python_at_run_time():
    code = "import genai_pacer.planning, sys; assert 'aws_cdk' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


# --- bad input: every parameter of every public function and value object -------------------------
#
# Each row: (target, parameter, label of the bad value, expected outcome). A target is called with
# valid values for everything else, so a refusal must name exactly that parameter. "accepted" rows
# are documented: 0 tokens, a 0 headroom, None for an optional input, a fractional rate or duration,
# and as_max_concurrency's 0 and negatives (the range is the construct's: 0 means an unbounded Map).
# The same table runs against any version of the module (python tests/test_planning.py [git-rev]),
# which is how the before/after counts in the closing note of issue 8 were made.

NUMBERS = {
    "str": "5",
    "None": None,
    "True": True,
    "0": 0,
    "-1": -1,
    "1.5": 1.5,
    "NaN": math.nan,
    "inf": math.inf,
    "-inf": -math.inf,
    "1e308": 1e308,
    "10**400": 10**400,
    "CDK token": "cdk-token",  # replaced by cdk.Token.as_number(...) when the row runs
}
DURATIONS = {
    "str": "5",
    "None": None,
    "True": True,
    "seconds int": 3_600,
    "zero": timedelta(0),
    "negative": timedelta(hours=-1),
    "timedelta.max": timedelta.max,
}
OBJECTS = {"str": "5", "None": None, "True": True, "dict": {"input_tokens": 1}}
LIMITED_BY = {"str": "TPM", "None": None, "True": True, "int": 5}
TEXTS = {"empty": "", "None": None, "int": 5, "81 characters": "x" * 81}
LOADS = {"str": "5", "None": None, "True": True, "dict": {"input_tokens": 1}, "list of dicts": [{"tokens": 1}]}

# (target, parameter, bad values, labels accepted). Every other label must be refused.
PARAMETERS: list[tuple[str, str, dict[str, Any], set[str]]] = [
    *[("TokenProfile", name, NUMBERS, {"0"}) for name in ("input_tokens", "output_tokens")],
    *[("TokenProfile", name, NUMBERS, {"0"}) for name in ("cache_write_tokens", "cache_read_tokens")],
    ("TokenProfile", "max_tokens", NUMBERS, set()),
    ("TokenProfile", "burndown", NUMBERS, {"1.5"}),
    ("plan_tpm", "profile", OBJECTS, set()),
    ("plan_tpm", "requests_per_minute", NUMBERS, {"1.5"}),
    ("plan_tpm", "headroom", NUMBERS, {"0", "1.5"}),
    ("plan_tpm", "concurrency", NUMBERS, {"None", "0", "1.5"}),
    ("plan_tpm", "call_seconds", NUMBERS, {"None", "1.5"}),
    ("plan_reserved", "profile", OBJECTS, set()),
    ("plan_reserved", "requests_per_minute", NUMBERS, {"1.5"}),
    ("plan_reserved", "reserved_input_tpm", NUMBERS, {"1.5"}),
    ("plan_reserved", "reserved_output_tpm", NUMBERS, {"1.5"}),
    ("plan_reserved", "call_seconds", NUMBERS, {"1.5"}),
    ("plan_reserved", "headroom", NUMBERS, {"0", "1.5"}),
    ("size_max_tokens", "p99_output_tokens", NUMBERS, set()),
    ("size_max_tokens", "margin", NUMBERS, {"0", "1.5"}),
    ("size_max_tokens", "current_max_tokens", NUMBERS, {"None"}),
    ("sustainable_rate", "profile", OBJECTS, set()),
    ("sustainable_rate", "tpm_quota", NUMBERS, set()),  # 1.5 TPM cannot hold one call (holds_one_call)
    ("sustainable_rate", "call_seconds", NUMBERS, {"1.5"}),
    ("sustainable_rate", "rpm_quota", NUMBERS, {"None", "1.5"}),
    ("sustainable_mantle_rate", "profile", OBJECTS, set()),
    ("sustainable_mantle_rate", "input_tpm_quota", NUMBERS, set()),  # 1.5 cannot admit one call
    ("sustainable_mantle_rate", "output_tpm_quota", NUMBERS, set()),  # 1.5 cannot sustain one call at a time
    ("sustainable_mantle_rate", "call_seconds", NUMBERS, {"1.5"}),
    ("one_call_tpm", "profile", OBJECTS, set()),
    ("one_call_tpm", "call_seconds", NUMBERS, {"1.5"}),
    ("max_concurrency", "requests_per_minute", NUMBERS, {"1.5"}),
    ("max_concurrency", "call_seconds", NUMBERS, {"1.5"}),
    ("as_max_concurrency", "value", NUMBERS, {"0", "-1", "CDK token"}),
    ("choose_execution", "deadline", DURATIONS, {"timedelta.max"}),
    ("choose_execution", "record_count", NUMBERS, set()),
    ("choose_execution", "batch_min_records", NUMBERS, set()),
    ("choose_execution", "batch_turnaround", DURATIONS, {"timedelta.max"}),
    ("LatencyProfile", "ttft_seconds", NUMBERS, {"0", "1.5"}),
    ("LatencyProfile", "latency_seconds", NUMBERS, {"1.5"}),
    ("LatencyProfile", "output_tokens", NUMBERS, {"0", "1.5"}),
    ("diagnose_latency", "before", OBJECTS, set()),
    ("diagnose_latency", "after", OBJECTS, set()),
    ("diagnose_latency", "tolerance", NUMBERS, {"0", "1.5"}),
    ("RatePlan", "requests_per_minute", NUMBERS, {"1.5"}),
    ("RatePlan", "limited_by", LIMITED_BY, set()),
    ("RatePlan", "max_concurrency", NUMBERS, set()),
    ("RatePlan", "call_seconds", NUMBERS, {"1.5"}),
    ("DailyLoad", "name", TEXTS, set()),
    ("DailyLoad", "tokens_per_minute", NUMBERS, {"0", "1.5"}),
    ("DailyLoad", "hours", NUMBERS, {"1.5"}),
    ("plan_daily_tokens", "loads", LOADS, set()),
    ("plan_daily_tokens", "tpm_quota", NUMBERS, {"1.5"}),
    ("plan_daily_tokens", "daily_token_quota", NUMBERS, {"None", "1.5"}),
    ("plan_daily_tokens", "cross_model_daily_tokens", NUMBERS, {"None", "1.5"}),
    ("plan_daily_tokens", "other_models_daily_tokens", NUMBERS, {"0", "1.5"}),
]
# as_max_concurrency(value) reports the construct prop the value stands for.
REPORTED_AS = {("as_max_concurrency", "value"): "max_concurrency"}
ROWS = [
    (target, param, label, value, "accepted" if label in accepted else "refused")
    for target, param, values, accepted in PARAMETERS
    for label, value in values.items()
]


def valid_arguments(module: Any, target: str) -> dict[str, Any]:
    """Valid values for every required input of `target` (optional ones stay at their defaults)."""
    profile = module.TokenProfile(input_tokens=2_500, output_tokens=300, max_tokens=6_000, burndown=5)
    latency = module.LatencyProfile(ttft_seconds=1, latency_seconds=6, output_tokens=300)
    return {
        "TokenProfile": dict(input_tokens=2_500, output_tokens=300, max_tokens=6_000, burndown=5),
        "plan_tpm": dict(profile=profile, requests_per_minute=300),
        "plan_reserved": dict(profile=profile, requests_per_minute=300, reserved_input_tpm=100_000,
                              reserved_output_tpm=10_000, call_seconds=6),
        "size_max_tokens": dict(p99_output_tokens=900, current_max_tokens=16_000),
        "sustainable_rate": dict(profile=profile, tpm_quota=1_000_000, call_seconds=6),
        "sustainable_mantle_rate": dict(profile=profile, input_tpm_quota=1_000_000, output_tpm_quota=100_000,
                                        call_seconds=6),
        "one_call_tpm": dict(profile=profile, call_seconds=6),
        "max_concurrency": dict(requests_per_minute=400, call_seconds=6),
        "as_max_concurrency": dict(value=8),
        "choose_execution": dict(deadline=timedelta(hours=30), record_count=500),
        "LatencyProfile": dict(ttft_seconds=1, latency_seconds=6, output_tokens=300),
        "diagnose_latency": dict(before=latency, after=latency),
        "RatePlan": dict(requests_per_minute=400, limited_by="tpm", max_concurrency=40, call_seconds=6),
        "DailyLoad": dict(name="nightly", tokens_per_minute=300_000, hours=6),
        "plan_daily_tokens": dict(loads=[module.DailyLoad("nightly", 300_000, 6)], tpm_quota=400_000),
    }[target]


def call_row(module: Any, target: str, param: str, value: Any) -> Any:
    if isinstance(value, str) and value == "cdk-token":
        import aws_cdk as cdk

        value = cdk.Token.as_number({"Ref": "Quota"})
    return getattr(module, target)(**{**valid_arguments(module, target), param: value})


def outcome(module: Any, target: str, param: str, value: Any) -> str:
    """refused (a ValueError/TypeError that names the parameter), accepted, or unclear (anything else)."""
    try:
        call_row(module, target, param, value)
    except (ValueError, TypeError) as error:
        named = REPORTED_AS.get((target, param), param)
        return "refused" if re.search(rf"\b{named}\b", str(error)) else "unclear"
    except Exception:
        return "unclear"
    return "accepted"


@pytest.mark.parametrize(
    ("target", "param", "label", "value", "expected"),
    ROWS,
    ids=[f"{target}.{param}={label}" for target, param, label, _, _ in ROWS],
)
def test_bad_input_table(target, param, label, value, expected):
    if expected == "accepted":
        assert_finite(call_row(planning, target, param, value))
        return
    with pytest.raises(InvalidPropsError) as excinfo:
        call_row(planning, target, param, value)
    (problem,) = excinfo.value.problems  # only the bad input is reported, and it is named first
    assert re.match(rf"{REPORTED_AS.get((target, param), param)}\b", problem), problem
    assert ";" in problem or ":" in problem  # the rule is followed by a fix or a reason


def test_the_table_covers_every_public_parameter():
    covered = {(target, param) for target, param, _, _ in PARAMETERS}
    from genai_pacer import capacity

    for name in planning.__all__:
        obj = getattr(planning, name)
        if name in {"TpmPlan", "MaxTokensSizing", "ExecutionChoice", "LatencyDiagnosis", "DailyPlan", "ReservedPlan"}:
            continue  # results the planner builds, never inputs
        if name in capacity.__all__:
            continue  # re-exported from capacity, whose own table is in tests/endpoints/test_capacity.py
        for param in inspect.signature(obj).parameters:
            assert (name, param) in covered, f"{name}({param}) has no bad-input rows"


def tally(module: Any) -> Counter[str]:
    """Outcome counts of the table for one version of the planner, and how many match the expectation."""
    counts: Counter[str] = Counter()
    for target, param, _, value, expected in ROWS:
        got = outcome(module, target, param, value)
        counts[got] += 1
        counts["as expected" if got == expected else "not as expected"] += 1
    return counts


def assert_finite(result: Any) -> None:
    """No number in a result (a dataclass or a number) is inf or NaN."""
    values = dataclasses.astuple(result) if dataclasses.is_dataclass(result) else (result,)
    for value in values:
        if isinstance(value, float):
            assert math.isfinite(value), result


def test_planning_imports_no_cdk():
    tree = ast.parse(Path(planning.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not {name for name in imported if name.startswith(("aws_cdk", "constructs"))}


# --- invariants -----------------------------------------------------------------------------------

tokens = st.integers(min_value=0, max_value=200_000)
burndowns = st.sampled_from([1, 1.5, 5, 10, 15])


@st.composite
def profiles(draw, burndown=burndowns):
    max_tokens = draw(st.integers(min_value=1, max_value=100_000))
    return TokenProfile(
        input_tokens=draw(tokens),
        output_tokens=draw(st.integers(min_value=0, max_value=max_tokens)),
        max_tokens=max_tokens,
        burndown=draw(burndown),
        cache_write_tokens=draw(tokens),
        cache_read_tokens=draw(tokens),
    )


@given(profiles())
def test_settled_never_exceeds_reserved_while_burned_output_fits_max_tokens(profile):
    # With burndown 1 this holds for every output <= max_tokens. With burndown > 1 the settled charge
    # can exceed the reservation (300 x 5 > 1,000-token max_tokens), so the invariant is conditional.
    if profile.output_tokens * profile.burndown <= profile.max_tokens:
        assert profile.settled <= profile.reserved


@given(profiles(burndown=st.just(1)))
def test_with_1x_burndown_settled_is_at_most_reserved(profile):
    assert profile.settled <= profile.reserved


@given(profiles(), st.integers(min_value=1, max_value=10_000))
def test_reserved_and_settled_grow_with_each_input(profile, extra):
    fields = ("input_tokens", "cache_write_tokens", "cache_read_tokens")
    for name in fields:
        grown = TokenProfile(**{**profile.__dict__, name: getattr(profile, name) + extra})
        assert grown.reserved > profile.reserved
        assert grown.settled >= profile.settled
    bigger_max = TokenProfile(**{**profile.__dict__, "max_tokens": profile.max_tokens + extra})
    assert bigger_max.reserved > profile.reserved and bigger_max.settled == profile.settled


@given(profiles(), st.floats(min_value=1, max_value=1_000), st.floats(min_value=0, max_value=2))
def test_plan_covers_settled_consumption_with_headroom(profile, rpm, headroom):
    plan = planning.plan_tpm(profile, requests_per_minute=rpm, headroom=headroom, call_seconds=10)
    assert plan.required_tpm >= plan.settled_tpm * (1 + headroom) - 1e-6
    assert plan.required_tpm >= plan.reservation_peak_tpm - 1e-6


@given(profiles(), st.floats(min_value=10_000, max_value=10_000_000), st.floats(min_value=0.1, max_value=120))
def test_sustainable_rate_spends_exactly_the_quota(profile, tpm, seconds):
    if tpm < planning.one_call_tpm(profile, seconds):  # refused: below one call at a time
        with pytest.raises(InvalidPropsError, match="cannot sustain one call at a time"):
            planning.sustainable_rate(profile, tpm_quota=tpm, call_seconds=seconds)
        return
    rate = planning.sustainable_rate(profile, tpm_quota=tpm, call_seconds=seconds)
    window = planning.plan_tpm(
        profile, requests_per_minute=rate.requests_per_minute, headroom=0, call_seconds=seconds
    )
    assert window.required_tpm == pytest.approx(tpm, rel=1e-9)
    assert rate.max_concurrency >= 1


def test_mantle_rate_is_bound_by_whichever_of_its_input_and_output_quotas_runs_out_first():
    # A 5x model on bedrock-runtime: 2,500 in, 300 out, max_tokens 440, 6 s calls. On bedrock-mantle the
    # input quota charges 2,500 + 440 x 6/60 = 2,544 a call and the output quota 300 (no burndown).
    by_input = planning.sustainable_mantle_rate(PROFILE_5X, input_tpm_quota=1_000_000, output_tpm_quota=1_000_000,
                                                call_seconds=6)
    assert by_input.requests_per_minute == pytest.approx(1_000_000 / 2_544)
    assert (by_input.limited_by, by_input.max_concurrency) == ("input-tpm", 39)  # 393 a minute x 6 s
    by_output = planning.sustainable_mantle_rate(PROFILE_5X, input_tpm_quota=1_000_000, output_tpm_quota=60_000,
                                                 call_seconds=6)
    assert (by_output.requests_per_minute, by_output.limited_by, by_output.max_concurrency) == (200, "output-tpm", 20)
    assert "output tokens-per-minute" in by_output.binding
    # The same profile on bedrock-runtime's combined quota settles input + 300 x 5 = 4,000 a call.
    combined = planning.sustainable_rate(PROFILE_5X, tpm_quota=1_000_000, call_seconds=6)
    assert combined.requests_per_minute < by_input.requests_per_minute


def test_mantle_rate_refuses_quotas_that_cannot_hold_one_call():
    with pytest.raises(InvalidPropsError, match=r"input_tpm_quota=2000 cannot admit one call: .* = 2,940"):
        planning.sustainable_mantle_rate(PROFILE_5X, input_tpm_quota=2_000, output_tpm_quota=100_000, call_seconds=6)
    with pytest.raises(InvalidPropsError, match=r"output_tpm_quota=1000 cannot sustain one call at a time"):
        planning.sustainable_mantle_rate(PROFILE_5X, input_tpm_quota=100_000, output_tpm_quota=1_000, call_seconds=6)


@given(profiles(), st.floats(min_value=10_000, max_value=10_000_000), st.floats(min_value=1_000, max_value=10_000_000),
       st.floats(min_value=0.1, max_value=120))
def test_mantle_rate_spends_at_most_each_quota_and_exactly_the_binding_one(profile, input_tpm, output_tpm, seconds):
    try:
        plan = planning.sustainable_mantle_rate(profile, input_tpm_quota=input_tpm, output_tpm_quota=output_tpm,
                                                call_seconds=seconds)
    except InvalidPropsError as error:
        assert "cannot" in str(error)
        return
    rate = plan.requests_per_minute
    held = min(seconds / 60, 1) * profile.max_tokens
    input_used = rate * (profile.input_tokens + profile.cache_write_tokens + held)
    output_used = rate * profile.output_tokens
    assert input_used <= input_tpm * (1 + 1e-9) and output_used <= output_tpm * (1 + 1e-9)
    spent = input_used / input_tpm if plan.limited_by == "input-tpm" else output_used / output_tpm
    assert spent == pytest.approx(1, rel=1e-9)


@given(
    st.floats(min_value=0.01, max_value=1e6),
    st.floats(min_value=0.01, max_value=600),
    st.floats(min_value=1, max_value=10),
)
def test_max_concurrency_grows_with_rate_and_duration(rpm, seconds, factor):
    base = planning.max_concurrency(rpm, seconds)
    assert planning.max_concurrency(rpm * factor, seconds) >= base
    assert planning.max_concurrency(rpm, seconds * factor) >= base
    assert base <= max(1, rpm / 60 * seconds)


@given(st.integers(min_value=1, max_value=200_000), st.floats(min_value=0, max_value=1))
def test_sized_max_tokens_never_truncates_the_p99(p99, margin):
    assert planning.size_max_tokens(p99, margin=margin).max_tokens >= p99


# Anything a caller might pass: floats of every size (NaN and inf included), ints beyond a float's
# range, bools, None and strings.
anything = st.one_of(
    st.floats(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.integers(min_value=-10, max_value=300_000),
    st.booleans(),
    st.none(),
    st.text(max_size=2),
)


def refused_or_finite(build: Any) -> Any:
    """Only InvalidPropsError may escape, and an accepted call's result holds no inf or NaN."""
    try:
        result = build()
    except InvalidPropsError:
        return None
    assert_finite(result)
    return result


@given(anything, anything, anything, anything, anything, anything, anything, anything)
def test_any_token_profile_and_rate_is_refused_or_finite(
    inp, out, max_tokens, burndown, tpm, seconds, rpm, headroom
):
    profile = refused_or_finite(
        lambda: TokenProfile(input_tokens=inp, output_tokens=out, max_tokens=max_tokens, burndown=burndown)
    )
    profile = profile or TokenProfile(input_tokens=0, output_tokens=0, max_tokens=1)
    for value in (profile.reserved, profile.settled, profile.billed):
        assert math.isfinite(value)
    refused_or_finite(
        lambda: planning.sustainable_rate(profile, tpm_quota=tpm, call_seconds=seconds, rpm_quota=rpm)
    )
    refused_or_finite(
        lambda: planning.plan_tpm(profile, requests_per_minute=tpm, headroom=headroom, concurrency=rpm)
    )
    refused_or_finite(lambda: planning.plan_tpm(profile, requests_per_minute=tpm, call_seconds=seconds))
    refused_or_finite(lambda: planning.max_concurrency(tpm, seconds))
    refused_or_finite(lambda: planning.size_max_tokens(out, margin=headroom, current_max_tokens=max_tokens))


@given(anything, anything, anything, anything)
def test_any_latency_reading_is_refused_or_finite(ttft, latency, output, tolerance):
    reading = refused_or_finite(
        lambda: LatencyProfile(ttft_seconds=ttft, latency_seconds=latency, output_tokens=output)
    )
    if reading is not None:
        assert math.isfinite(reading.output_tokens_per_second)
        refused_or_finite(lambda: planning.diagnose_latency(reading, reading, tolerance=tolerance))


if __name__ == "__main__":  # python tests/test_planning.py [git-rev]: the table's counts for a revision
    import importlib.util

    revision = sys.argv[1] if len(sys.argv) > 1 else None
    if revision is None:
        target_module: Any = planning
    else:
        source = subprocess.run(
            ["git", "show", f"{revision}:constructs/genai_pacer/planning.py"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        spec = importlib.util.spec_from_loader("genai_pacer.planning_at_revision", loader=None)
        assert spec is not None
        target_module = importlib.util.module_from_spec(spec)
        target_module.__package__ = "genai_pacer"
        sys.modules[spec.name] = target_module
        exec(compile(source, f"{revision}:planning.py", "exec"), target_module.__dict__)
    print(f"{len(ROWS)} rows at {revision or 'the working tree'}: {dict(tally(target_module))}")
