"""genai_pacer.endpoints.capacity: endpoint capacity arithmetic, worked figures exact, every bad input refused."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from genai_pacer import InvalidPropsError, capacity
from genai_pacer.endpoints.capacity import ConcurrencyTarget, LeadTime, PeakCapacity
from hypothesis import given
from hypothesis import strategies as st

NAN, INF = math.nan, math.inf

# --- worked figures -----------------------------------------------------------------------------


def test_littles_law_900_requests_per_minute_at_4_seconds_keeps_60_in_flight():
    assert capacity.concurrent_requests(900, 4) == 60


def test_an_instance_that_sustains_120_per_minute_at_4_seconds_is_tracked_at_6_4():
    target = capacity.target_concurrency(sustained_requests_per_minute=120, latency_seconds=4)
    assert target == ConcurrencyTarget(saturation=8.0, headroom=0.2, target_value=6.4)


def test_no_headroom_tracks_the_saturation_itself():
    target = capacity.target_concurrency(sustained_requests_per_minute=30, latency_seconds=12, headroom=0)
    assert (target.saturation, target.target_value) == (6.0, 6.0)


def test_a_peak_of_60_in_flight_at_6_4_each_needs_10_instances():
    target = capacity.target_concurrency(sustained_requests_per_minute=120, latency_seconds=4)
    by_rate = capacity.capacity_for_peak(target_concurrency=target, requests_per_minute=900, latency_seconds=4)
    assert by_rate == PeakCapacity(concurrent_requests=60.0, target_concurrency=6.4, capacity=10)
    measured = capacity.capacity_for_peak(target_concurrency=6.4, concurrent_requests=60)
    assert measured == by_rate


def test_an_exact_multiple_is_not_rounded_up_by_float_noise():
    # 64 / 6.4 is 10.000000000000002 in floats; ten instances hold it
    assert capacity.capacity_for_peak(target_concurrency=6.4, concurrent_requests=64).capacity == 10
    assert capacity.capacity_for_peak(target_concurrency=6.4, concurrent_requests=64.1).capacity == 11


def test_a_quiet_peak_still_needs_one_instance():
    assert capacity.capacity_for_peak(target_concurrency=8, concurrent_requests=0).capacity == 1


def test_a_10_minute_load_needs_13_minutes_of_lead():
    assert capacity.lead_time(600) == LeadTime(load_seconds=600.0, margin=0.25, minutes=13)


def test_lead_time_is_whole_minutes_and_never_zero():
    assert capacity.lead_time(60, margin=0).minutes == 1
    assert capacity.lead_time(61, margin=0).minutes == 2
    assert capacity.lead_time(1, margin=0).minutes == 1


# --- properties ---------------------------------------------------------------------------------


@given(
    st.floats(min_value=0.01, max_value=100_000),
    st.floats(min_value=0.01, max_value=600),
    st.floats(min_value=0, max_value=0.9),
)
def test_the_target_is_the_saturation_less_the_headroom(rate, latency, headroom):
    try:
        target = capacity.target_concurrency(
            sustained_requests_per_minute=rate, latency_seconds=latency, headroom=headroom
        )
    except InvalidPropsError as error:  # only when the arithmetic leaves 0..10,000
        assert "outside 0..10,000" in str(error)
        return
    assert target.target_value <= target.saturation
    assert math.isclose(target.saturation, rate / 60 * latency, rel_tol=1e-6, abs_tol=1e-9)


@given(st.floats(min_value=0.1, max_value=1_000), st.floats(min_value=0, max_value=100_000))
def test_peak_capacity_holds_at_most_the_target_per_instance_and_no_instance_is_spare(target, load):
    if load / target > 9_999:  # beyond MAX_CAPACITY: refused, tested below
        return
    peak = capacity.capacity_for_peak(target_concurrency=target, concurrent_requests=load)
    assert load / peak.capacity <= target * (1 + 1e-9)
    if peak.capacity > 1:  # one instance fewer would exceed the target
        assert load / (peak.capacity - 1) > target * (1 - 1e-9)


@given(st.floats(min_value=0.001, max_value=7_200), st.floats(min_value=0, max_value=10))
def test_the_lead_covers_the_load_and_its_margin(load, margin):
    lead = capacity.lead_time(load, margin=margin)
    assert lead.minutes * 60 >= load * (1 + margin) - 1e-6
    assert (lead.minutes - 1) * 60 < load * (1 + margin) or lead.minutes == 1


# --- refused inputs -----------------------------------------------------------------------------


def a_token() -> float:
    import aws_cdk as cdk

    return cdk.Token.as_number(cdk.Fn.ref("SomeParameter"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(sustained_requests_per_minute=0, latency_seconds=4), "sustained_requests_per_minute=0 must be greater than 0"),
        (dict(sustained_requests_per_minute=-5, latency_seconds=4), "sustained_requests_per_minute=-5 must be greater than 0"),
        (dict(sustained_requests_per_minute=None, latency_seconds=4), "sustained_requests_per_minute is required"),
        (dict(sustained_requests_per_minute="120", latency_seconds=4), "sustained_requests_per_minute='120' is a str"),
        (dict(sustained_requests_per_minute=True, latency_seconds=4), "sustained_requests_per_minute=True is a bool"),
        (dict(sustained_requests_per_minute=NAN, latency_seconds=4), "sustained_requests_per_minute=nan is not a finite number"),
        (dict(sustained_requests_per_minute=INF, latency_seconds=4), "sustained_requests_per_minute=inf is not a finite number"),
        (dict(sustained_requests_per_minute=1e13, latency_seconds=4), "exceeds the maximum of 1,000,000,000,000"),
        (dict(sustained_requests_per_minute=10**400, latency_seconds=4), "beyond any float's range"),
        (dict(sustained_requests_per_minute=120, latency_seconds=0), "latency_seconds=0 is below the minimum of 0.001"),
        (dict(sustained_requests_per_minute=120, latency_seconds=-1), "latency_seconds=-1 is below the minimum"),
        (dict(sustained_requests_per_minute=120, latency_seconds=4000), "latency_seconds=4000 exceeds the maximum of 3,600.*milliseconds"),
        (dict(sustained_requests_per_minute=120, latency_seconds=NAN), "latency_seconds=nan is not a finite number"),
        (dict(sustained_requests_per_minute=120, latency_seconds=None), "latency_seconds is required"),
        (dict(sustained_requests_per_minute=120, latency_seconds=4, headroom=1), "headroom=1 exceeds the maximum of 0.9"),
        (dict(sustained_requests_per_minute=120, latency_seconds=4, headroom=-0.1), "headroom=-0.1 is below the minimum of 0"),
        (dict(sustained_requests_per_minute=120, latency_seconds=4, headroom=20), "headroom=20 exceeds.*0.2 is 20%"),
        (dict(sustained_requests_per_minute=120, latency_seconds=4, headroom=INF), "headroom=inf is not a finite number"),
        (dict(sustained_requests_per_minute=6e8, latency_seconds=3600), "outside 0..10,000.*per instance and per minute"),
    ],
)
def test_target_concurrency_refuses(kwargs, message):
    with pytest.raises(InvalidPropsError, match=message):
        capacity.target_concurrency(**kwargs)


def test_target_concurrency_refuses_a_token_because_a_plan_needs_the_number():
    with pytest.raises(InvalidPropsError, match="sustained_requests_per_minute is an unresolved CDK token"):
        capacity.target_concurrency(sustained_requests_per_minute=a_token(), latency_seconds=4)


def test_every_problem_is_reported_at_once():
    with pytest.raises(InvalidPropsError) as raised:
        capacity.target_concurrency(sustained_requests_per_minute=NAN, latency_seconds=-1, headroom=5)
    assert len(raised.value.problems) == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(target_concurrency=None, concurrent_requests=60), "target_concurrency is required"),
        (dict(target_concurrency=0, concurrent_requests=60), "target_concurrency=0 must be greater than 0"),
        (dict(target_concurrency=-2, concurrent_requests=60), "target_concurrency=-2 must be greater than 0"),
        (dict(target_concurrency=NAN, concurrent_requests=60), "target_concurrency=nan is not a finite number"),
        (dict(target_concurrency=INF, concurrent_requests=60), "target_concurrency=inf is not a finite number"),
        (dict(target_concurrency="8", concurrent_requests=60), "target_concurrency='8' is a str"),
        (dict(target_concurrency=20_000, concurrent_requests=60), "target_concurrency=20000 exceeds the maximum of 10,000"),
        (dict(target_concurrency=8), "pass either concurrent_requests"),
        (dict(target_concurrency=8, concurrent_requests=60, requests_per_minute=900), "not both or neither"),
        (dict(target_concurrency=8, requests_per_minute=900), "requests_per_minute and latency_seconds go together"),
        (dict(target_concurrency=8, latency_seconds=4), "requests_per_minute and latency_seconds go together"),
        (dict(target_concurrency=8, concurrent_requests=-1), "concurrent_requests=-1 is below the minimum of 0"),
        (dict(target_concurrency=8, concurrent_requests=NAN), "concurrent_requests=nan is not a finite number"),
        (dict(target_concurrency=8, concurrent_requests=True), "concurrent_requests=True is a bool"),
        (dict(target_concurrency=8, requests_per_minute=0, latency_seconds=4), "requests_per_minute=0 must be greater than 0"),
        (dict(target_concurrency=8, requests_per_minute=900, latency_seconds=0), "latency_seconds=0 is below the minimum"),
        (dict(target_concurrency=0.001, concurrent_requests=1e6), "needs 1,000,000,000 instances.*above 10,000"),
    ],
)
def test_capacity_for_peak_refuses(kwargs, message):
    with pytest.raises(InvalidPropsError, match=message):
        capacity.capacity_for_peak(**kwargs)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((0,), {}, "model_load_seconds=0 must be greater than 0"),
        ((-60,), {}, "model_load_seconds=-60 must be greater than 0"),
        ((None,), {}, "model_load_seconds is required"),
        ((NAN,), {}, "model_load_seconds=nan is not a finite number"),
        ((INF,), {}, "model_load_seconds=inf is not a finite number"),
        (("600",), {}, "model_load_seconds='600' is a str"),
        ((600_000,), {}, "model_load_seconds=600000 exceeds the maximum of 7,200.*milliseconds"),
        ((600,), {"margin": -0.1}, "margin=-0.1 is below the minimum of 0"),
        ((600,), {"margin": 25}, "margin=25 exceeds the maximum of 10.*0.25 is 25%"),
        ((600,), {"margin": NAN}, "margin=nan is not a finite number"),
    ],
)
def test_lead_time_refuses(args, kwargs, message):
    with pytest.raises(InvalidPropsError, match=message):
        capacity.lead_time(*args, **kwargs)


def test_concurrent_requests_refuses_bad_units():
    with pytest.raises(InvalidPropsError, match="latency_seconds=5000 exceeds the maximum of 3,600"):
        capacity.concurrent_requests(900, 5000)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(saturation=8, headroom=0.2, target_value=7), r"target_value=7 is not saturation x \(1 - headroom\) = 6.4"),
        (dict(saturation=0, headroom=0.2, target_value=0), "saturation=0 must be greater than 0"),
        (dict(saturation=8, headroom=0.95, target_value=0.4), "headroom=0.95 exceeds the maximum of 0.9"),
        (dict(saturation=8, headroom=0.2, target_value=NAN), "target_value=nan is not a finite number"),
    ],
)
def test_a_hand_built_target_must_be_consistent(kwargs, message):
    with pytest.raises(InvalidPropsError, match=message):
        ConcurrencyTarget(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(concurrent_requests=60, target_concurrency=6.4, capacity=0), "capacity=0 is below the minimum of 1"),
        (dict(concurrent_requests=60, target_concurrency=6.4, capacity=2.5), "capacity=2.5 is not a whole number"),
        (dict(concurrent_requests=60, target_concurrency=6.4, capacity=20_000), "capacity=20000 exceeds the maximum of 10,000"),
        (dict(concurrent_requests=60, target_concurrency=0, capacity=10), "target_concurrency=0 must be greater than 0"),
    ],
)
def test_a_hand_built_peak_capacity_is_checked(kwargs, message):
    with pytest.raises(InvalidPropsError, match=message):
        PeakCapacity(**kwargs)


def test_capacity_imports_no_cdk():
    """The planner runs where the CDK is not installed (a notebook, a load-test script)."""
    src = Path(__file__).resolve().parents[2] / "constructs"
    code = ("import sys; import genai_pacer.endpoints.capacity, genai_pacer.capacity; "
            "assert 'aws_cdk' not in sys.modules and 'jsii' not in sys.modules")
    result = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(src)}, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
