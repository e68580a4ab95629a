"""genai_pacer.planning: the reference notes' worked figures, exact, and the invariants behind them."""

from __future__ import annotations

import ast
from datetime import timedelta
from pathlib import Path

import pytest
from genai_pacer import planning
from genai_pacer.planning import LatencyProfile, TokenProfile
from hypothesis import given
from hypothesis import strategies as st

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


def test_reservations_in_flight_lower_the_sustainable_rate():
    oversized = TokenProfile(input_tokens=3_000, output_tokens=900, max_tokens=16_000)
    sized = TokenProfile(input_tokens=3_000, output_tokens=900, max_tokens=990)
    slow = planning.sustainable_rate(oversized, tpm_quota=1_000_000, call_seconds=30)
    fast = planning.sustainable_rate(sized, tpm_quota=1_000_000, call_seconds=30)
    assert fast.requests_per_minute > 1.5 * slow.requests_per_minute


def test_max_concurrency_never_below_one():
    assert planning.max_concurrency(1, 1) == 1


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


# --- errors name the input and the rule -----------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(input_tokens=-1, output_tokens=1, max_tokens=2), "input_tokens=-1 is negative"),
        (dict(input_tokens=1, output_tokens=-5, max_tokens=2), "output_tokens=-5 is negative"),
        (dict(input_tokens=1, output_tokens=1, max_tokens=0), "max_tokens=0 must be >= 1"),
        (dict(input_tokens=1, output_tokens=10, max_tokens=5), "output_tokens=10 exceeds max_tokens=5"),
        (dict(input_tokens=1, output_tokens=1, max_tokens=5, burndown=0.5), "burndown=0.5 is below 1"),
        (dict(input_tokens=1, output_tokens=1, max_tokens=5, cache_read_tokens=-3), "cache_read_tokens=-3"),
    ],
)
def test_token_profile_rejects_nonsense(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TokenProfile(**kwargs)


def test_planner_errors():
    profile = TokenProfile(input_tokens=1, output_tokens=1, max_tokens=5)
    with pytest.raises(ValueError, match="headroom=-0.1 is below 0"):
        planning.plan_tpm(profile, requests_per_minute=10, headroom=-0.1)
    with pytest.raises(ValueError, match="requests_per_minute=0 must be > 0"):
        planning.plan_tpm(profile, requests_per_minute=0)
    with pytest.raises(ValueError, match="current_max_tokens=800 is below the p99 output \\(900\\)"):
        planning.size_max_tokens(900, current_max_tokens=800)
    with pytest.raises(ValueError, match="p99_output_tokens=0 must be > 0"):
        planning.size_max_tokens(0)
    with pytest.raises(ValueError, match="margin=-0.2 is below 0"):
        planning.size_max_tokens(100, margin=-0.2)
    with pytest.raises(ValueError, match="tpm_quota=0 must be > 0"):
        planning.sustainable_rate(profile, tpm_quota=0, call_seconds=1)
    with pytest.raises(ValueError, match="call_seconds=0 must be > 0"):
        planning.max_concurrency(10, 0)
    with pytest.raises(ValueError, match="latency_seconds=1 must exceed ttft_seconds=2"):
        LatencyProfile(ttft_seconds=2, latency_seconds=1, output_tokens=10)
    with pytest.raises(ValueError, match="tolerance=-1 must be >= 0"):
        planning.diagnose_latency(LatencyProfile(1, 2, 3), LatencyProfile(1, 2, 3), tolerance=-1)
    with pytest.raises(ValueError, match="deadline=.* must be positive"):
        planning.choose_execution(deadline=timedelta(0), record_count=5)
    with pytest.raises(ValueError, match="record_count=0 must be > 0"):
        planning.choose_execution(deadline=timedelta(hours=30), record_count=0)


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
    if profile.settled == 0 and profile.reserved == 0:
        return
    rate = planning.sustainable_rate(profile, tpm_quota=tpm, call_seconds=seconds)
    window = planning.plan_tpm(
        profile, requests_per_minute=rate.requests_per_minute, headroom=0, call_seconds=seconds
    )
    assert window.required_tpm == pytest.approx(tpm, rel=1e-9)
    assert rate.max_concurrency >= 1


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
