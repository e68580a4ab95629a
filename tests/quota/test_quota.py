"""ModelQuota: the arithmetic of shares, what each consumer construct receives, and the synth-time
checks (over-allocation error, warning threshold, the plan written into the cloud assembly)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.assertions import Annotations, Match
from genai_pacer import (
    AnswerRouter,
    AnswerStore,
    BatchPrecompute,
    BedrockModel,
    BoundedDistributedMap,
    BoundedMap,
    ConverseRequest,
    ExperimentVariant,
    InvalidPropsError,
    ParallelPrompts,
    PromptExperiment,
    QueuedInference,
    ScheduledPrecompute,
    TextPrompt,
    planning,
)
from genai_pacer.quota.model_quota import (
    PACER_ENVIRONMENT,
    PLAN_FILE_PREFIX,
    PLAN_METADATA_TYPE,
    ModelQuota,
)
from helpers import definition, new_stack, only, resources, template_of
from hypothesis import given, settings
from hypothesis import strategies as st

from constructs import Construct

HAIKU = BedrockModel.from_id("us.anthropic.claude-3-5-haiku-20241022-v1:0")
NOVA = BedrockModel.foundation("amazon.nova-lite-v1:0")
REQUEST = ConverseRequest(prompt="Summarize the news", max_tokens=440)
NAN, INF = math.nan, math.inf

# The reference orchestration stack's workload: 2,500 input, 300 output (burndown 5), max_tokens 440:
# each request settles 2,500 + 300 x 5 = 4,000 tokens, more than it reserves (2,940), so settlement
# binds and a 400,000 TPM quota sustains 100 requests per minute: 10 calls of 6 s in flight.
PROFILE = planning.TokenProfile(input_tokens=2_500, output_tokens=300, max_tokens=440, burndown=5)


def a_token() -> float:
    return cdk.Token.as_number(cdk.Fn.ref("SomeParameter"))


def haiku_quota(stack: cdk.Stack | None = None, **props) -> ModelQuota:
    props = {"model": HAIKU, "tpm_quota": 400_000, "burndown": 5, **props}
    return ModelQuota(stack or new_stack(), "Quota", **props)


def synth(stack: cdk.Stack) -> Path:
    return Path(cdk.Stage.of(stack).synth().directory)


def map_cap(template: dict, construct_id: str) -> int:
    """The MaxConcurrency of the Map state in the state machine of the construct `construct_id`."""
    (machine,) = [r for logical_id, r in resources(template, "AWS::StepFunctions::StateMachine").items()
                  if logical_id.startswith(construct_id)]
    return definition(machine)["States"]["Map"]["MaxConcurrency"]


def warnings_of(stack: cdk.Stack) -> list[str]:
    found = Annotations.from_stack(stack).find_warning("*", Match.any_value())
    return [str(message.entry.data) for message in found]


# --- the arithmetic of shares --------------------------------------------------------------------


def test_a_fraction_share_is_the_sustainable_rate_of_its_slice():
    quota = haiku_quota()
    plan = quota.share("Nightly", PROFILE, fraction=0.3, call_seconds=6)
    assert plan == planning.sustainable_rate(PROFILE, tpm_quota=120_000, call_seconds=6)
    assert (plan.requests_per_minute, plan.max_concurrency) == (30, 3)  # 120,000 / 4,000; 30/min x 6 s
    share = quota.shares["Nightly"]
    assert (share.kind, share.tpm, share.in_flight, share.tpm_at_cap) == ("fraction", 120_000, 3, 120_000)


def test_an_absolute_tpm_share_equals_the_same_fraction():
    quota = haiku_quota()
    assert quota.share("A", PROFILE, tpm=100_000, call_seconds=6) == quota.share("B", PROFILE, fraction=0.25, call_seconds=6)
    share = quota.shares["A"]
    assert share.per_execution.max_concurrency == 2  # 25/min x 6 s = 2.5, rounded down
    assert share.tpm_at_cap == 80_000  # 2 calls in flight draw 20/min x 4,000: the cap never overdraws
    assert (quota.plan().allocated_tpm, quota.plan().tpm_at_caps) == (200_000, 160_000)


def test_executions_split_the_share_so_the_caps_add_up_to_the_plan():
    quota = haiku_quota()
    plan = quota.share("Reports", PROFILE, fraction=0.6, call_seconds=6, executions=3)
    assert plan == planning.sustainable_rate(PROFILE, tpm_quota=80_000, call_seconds=6)
    assert plan.max_concurrency == 2
    assert quota.shares["Reports"].in_flight == 6  # 3 executions x 2: the 240,000 TPM sustain 6


def test_a_slice_below_one_call_is_refused_with_the_tpm_it_needs():
    quota = haiku_quota()
    with pytest.raises(InvalidPropsError) as error:
        quota.share("Reports", PROFILE, fraction=0.3, call_seconds=6, executions=4)  # 30,000 each: 0.75 calls
    text = str(error.value)
    # The planner's one rule and message (planning.holds_one_call): 0.75 calls at a time is not one.
    assert "each of the share's 4 executions (30,000 TPM) cannot sustain one call at a time: each call " \
           "reserves 2,940 tokens and settles 4,000, so one call after another over 6 s each draws 40,000 TPM" in text
    assert "give each execution at least 40,000 TPM (the share 160,000), run fewer executions" in text  # 4 x 40,000
    assert "Reports" not in quota.shares


def test_a_share_below_one_calls_reservation_is_refused_naming_both():
    """Issue 35.7: the planner's one rule. 2,000 TPM cannot hold a 2,940-token reservation at all."""
    quota = haiku_quota(tpm_quota=2_000)
    with pytest.raises(InvalidPropsError) as error:
        quota.share("Tiny", PROFILE, fraction=1, call_seconds=6)
    assert "the share (2,000 TPM) cannot sustain one call at a time: each call reserves 2,940 tokens" in str(error.value)
    assert "Bedrock would throttle every call" in str(error.value)


def test_a_legacy_rpm_slice_below_one_call_is_refused():
    quota = haiku_quota(rpm_quota=10)
    with pytest.raises(InvalidPropsError, match=r"legacy rpm_quota slice of 3 requests per minute per execution "
                       r"sustains 0.30 calls in flight of 6 s, less than one"):
        quota.share("Slow", PROFILE, fraction=0.3, call_seconds=6)


def test_a_fixed_width_share_draws_the_tpm_its_calls_need():
    quota = haiku_quota()
    plan = quota.share("Digest", PROFILE, calls=3, call_seconds=6, executions=2)
    share = quota.shares["Digest"]
    assert plan == planning.RatePlan(30, "tpm", 3, 6)  # one execution: 3 calls of 6 s = 30/min
    expected = planning.plan_tpm(PROFILE, requests_per_minute=60, headroom=0, call_seconds=6).required_tpm
    assert share.tpm == share.tpm_at_cap == expected == 240_000
    assert share.in_flight == 6


def test_when_the_reservation_binds_the_share_counts_it():
    """1,000 input and 4,000 max_tokens reserve 5,000 tokens but settle 1,200: in-flight calls hold the
    difference, so a share sustains fewer calls than settlement alone suggests."""
    quota = ModelQuota(new_stack(), "Quota", model=NOVA, tpm_quota=100_000)
    profile = quota.profile(input_tokens=1_000, output_tokens=200, max_tokens=4_000)
    plan = quota.share("Chat", profile, fraction=1, call_seconds=30)
    assert plan.requests_per_minute == pytest.approx(100_000 / (1_200 + 0.5 * 3_800))  # 32.3/min, not 83
    assert plan.max_concurrency == 16
    width = quota.share("Fixed", profile, calls=16, call_seconds=30)
    assert quota.shares["Fixed"].tpm == pytest.approx(32 * (1_200 + 0.5 * 3_800))
    assert width.max_concurrency == 16


@settings(max_examples=60, deadline=None)
@given(
    fraction=st.floats(0.05, 1),
    executions=st.integers(1, 4),
    call_seconds=st.floats(0.5, 90),
    input_tokens=st.integers(0, 20_000),
    output_tokens=st.integers(1, 2_000),
    extra=st.integers(0, 8_000),
)
def test_property_a_cap_never_overdraws_its_share_and_one_more_call_would(fraction, executions, call_seconds,
                                                                            input_tokens, output_tokens, extra):
    quota = ModelQuota(cdk.Stack(), "Quota", model=NOVA, tpm_quota=2_000_000)
    profile = quota.profile(input_tokens=input_tokens, output_tokens=output_tokens, max_tokens=output_tokens + extra)
    try:
        plan = quota.share("S", profile, fraction=fraction, call_seconds=call_seconds, executions=executions)
    except InvalidPropsError as error:
        assert "cannot sustain one call at a time" in str(error)
        return
    share = quota.shares["S"]

    def tpm_of(calls_per_execution: int) -> float:
        rate = calls_per_execution * executions * 60 / call_seconds
        return planning.plan_tpm(profile, requests_per_minute=rate, headroom=0, call_seconds=call_seconds).required_tpm

    assert share.tpm_at_cap == pytest.approx(tpm_of(plan.max_concurrency))
    assert tpm_of(plan.max_concurrency) <= share.tpm * (1 + 1e-9)
    assert tpm_of(plan.max_concurrency + 1) > share.tpm * (1 - 1e-9)


def test_with_an_rpm_quota_a_share_takes_the_same_fraction_of_it():
    quota = haiku_quota(rpm_quota=50)
    plan = quota.share("Nightly", PROFILE, fraction=0.4, call_seconds=6)
    assert quota.shares["Nightly"].rpm == 20
    assert plan.limited_by == "rpm" and plan.requests_per_minute == 20  # TPM alone would allow 40/min
    assert plan.max_concurrency == 2


# --- what constructs receive -----------------------------------------------------------------------


def test_every_cap_taking_construct_takes_a_share_unchanged():
    stack = new_stack()
    quota = haiku_quota(stack)
    bucket = s3.Bucket(stack, "Items")
    BoundedMap(stack, "Map", model=HAIKU, request=REQUEST,
               max_concurrency=quota.share("Map", PROFILE, fraction=0.3, call_seconds=6))
    BoundedDistributedMap(stack, "Distributed", model=HAIKU, request=REQUEST, items_bucket=bucket, items_key="k.jsonl",
                          max_concurrency=quota.share("Distributed", PROFILE, fraction=0.25, call_seconds=6))
    QueuedInference(stack, "Queue", model=HAIKU,
                    max_concurrency=quota.share("Queue", PROFILE, fraction=0.2, call_seconds=6))
    template = template_of(stack).to_json()
    caps = {name: map_cap(template, name) for name in ("Map", "Distributed")}
    assert caps == {"Map": 3, "Distributed": 2}
    assert only(template, "AWS::Lambda::EventSourceMapping")["Properties"]["ScalingConfig"] == {"MaximumConcurrency": 2}


def test_a_share_below_a_constructs_minimum_is_refused_by_the_construct():
    stack = new_stack()
    quota = haiku_quota(stack)
    plan = quota.share("Queue", PROFILE, fraction=0.1, call_seconds=6)  # 10/min x 6 s: one call
    with pytest.raises(InvalidPropsError, match="below the SQS event source's maximum concurrency's minimum of 2"):
        QueuedInference(stack, "Queue", model=HAIKU, max_concurrency=plan)


# --- synth-time checks -----------------------------------------------------------------------------


def test_three_consumers_each_sized_against_the_whole_quota_fail_synth_listing_each():
    """The reference stack's mistake: ParallelPrompts (3 branches) and two Maps each planned on the
    whole quota, 23 calls in flight against a plan of 10."""
    stack = new_stack()
    quota = haiku_quota(stack, keep_free=0.1)
    quota.share("ReviewDigest", PROFILE, calls=3, call_seconds=6)
    quota.share("TickerSummaries", PROFILE, fraction=1, call_seconds=6)
    quota.share("CatalogDescriptions", PROFILE, fraction=1, call_seconds=6)
    with pytest.raises(RuntimeError) as error:
        synth(stack)
    text = str(error.value)
    assert ("ModelQuota Quota (us.anthropic.claude-3-5-haiku-20241022-v1:0): the shares draw 920,000 TPM, 255.6% of "
            "the 360,000 TPM allocatable (400,000 TPM quota, 10% kept free)") in text
    assert "23 calls are in flight and Bedrock throttles them" in text
    assert "- ReviewDigest: 120,000 TPM (30.0%), 3 calls per execution x 1 execution(s) = 3 in flight" in text
    assert "- TickerSummaries: 400,000 TPM (100.0%), 10 calls per execution x 1 execution(s) = 10 in flight" in text
    assert "- CatalogDescriptions: 400,000 TPM (100.0%), 10 calls per execution" in text
    assert "Fix: lower a share's fraction, tpm, calls or executions" in text


def test_rpm_over_allocation_fails_synth_naming_the_rpm_legacy():
    """A legacy rpm_quota the shares overdraw still fails synth (QuotaPacer paces each share by it),
    but the error says Bedrock does not enforce RPM and offers rpm_quota=None, instead of claiming
    Bedrock throttles the consumers."""
    stack = new_stack()
    quota = haiku_quota(stack, rpm_quota=50)
    quota.share("Fixed", PROFILE, calls=4, call_seconds=4, executions=1)  # 60/min: more than the 50 RPM
    with pytest.raises(RuntimeError) as error:
        synth(stack)
    text = " ".join(str(error.value).split())
    assert ("the shares draw 60.0 RPM, 120.0% of the allocatable legacy RPM (rpm_quota=50: RPM is legacy: Bedrock no "
            "longer enforces requests-per-minute quotas on the bedrock-runtime endpoint") in text
    assert "Bedrock throttles them" not in text
    assert "pass rpm_quota=None (Bedrock does not enforce RPM on bedrock-runtime)" in text


def test_with_both_overdrawn_the_error_names_tpm_and_the_legacy_rpm():
    stack = new_stack()
    quota = haiku_quota(stack, rpm_quota=50)
    quota.share("Fixed", PROFILE, calls=12, call_seconds=4, executions=1)  # 180/min: over TPM and RPM
    with pytest.raises(RuntimeError) as error:
        synth(stack)
    text = " ".join(str(error.value).split())
    assert "TPM allocatable, and 180.0 RPM, 360.0% of the allocatable legacy RPM" in text
    assert "Bedrock throttles them" in text and "raise the quota in Service Quotas" in text


def test_an_rpm_quota_is_shown_as_legacy_in_the_plan():
    quota = haiku_quota(rpm_quota=50)
    quota.share("Nightly", PROFILE, fraction=0.4, call_seconds=6)
    assert quota.plan().table().splitlines()[0].startswith(
        "us.anthropic.claude-3-5-haiku-20241022-v1:0 in us-east-1: 400,000 TPM, 50 RPM (legacy), burndown 5")
    doc = " ".join((ModelQuota.__doc__ or "").split())
    assert "rpm_quota: legacy;" in doc and "Bedrock no longer enforces RPM on the bedrock-runtime endpoint" in doc


@pytest.mark.parametrize(
    ("fractions", "props", "warned"),
    [
        ((0.5, 0.39), {}, False),  # 89%
        ((0.5, 0.4), {}, True),  # 90%: at warn_at
        ((0.5, 0.3), {"warn_at": 0.75}, True),
        ((0.4, 0.3), {"keep_free": 0.2}, False),  # 70% of 320,000 allocatable is 87.5%
        ((0.4, 0.32), {"keep_free": 0.2}, True),  # 72% of the quota is 90% of the allocatable
    ],
)
def test_allocation_at_the_threshold_warns_below_it_does_not(fractions, props, warned):
    stack = new_stack()
    quota = haiku_quota(stack, **props)
    for i, fraction in enumerate(fractions):
        quota.share(f"Consumer{i}", PROFILE, fraction=fraction, call_seconds=6)
    synth(stack)
    messages = [m for m in warnings_of(stack) if "genai-pacer:quota-nearly-allocated" in m]
    assert bool(messages) is warned
    if warned:
        assert "of the allocatable quota" in messages[0] and "TPM of headroom" in messages[0]


@pytest.mark.parametrize(("burndown", "warned"), [(3, True), (2.5, True), (1, False), (5, False), (10, False)])
def test_a_burndown_no_model_has_is_warned_citing_the_source(burndown, warned):
    stack = new_stack()
    haiku_quota(stack, burndown=burndown)
    found = [w for w in warnings_of(stack) if "quota-unpublished-burndown" in w]
    assert bool(found) == warned
    if warned:
        assert f"ModelQuota Quota: burndown={burndown:g} is a rate no model has" in found[0]
        assert planning.BURNDOWN_DOC in found[0]


def test_a_quota_without_shares_warns():
    stack = new_stack()
    haiku_quota(stack)
    synth(stack)
    assert any("has no shares" in m for m in warnings_of(stack))


def test_two_quotas_for_the_same_model_and_region_warn_and_other_models_do_not():
    app = cdk.App()
    env = cdk.Environment(account="111122223333", region="us-east-1")
    first, second = cdk.Stack(app, "First", env=env), cdk.Stack(app, "Second", env=env)
    haiku_quota(first).share("A", PROFILE, fraction=0.5, call_seconds=6)
    haiku_quota(second).share("B", PROFILE, fraction=0.5, call_seconds=6)
    ModelQuota(second, "Nova", model=NOVA, tpm_quota=100_000).share("C", planning.TokenProfile(10, 10, 10), fraction=0.5,
                                                                     call_seconds=6)
    app.synth()
    twice = [m for m in warnings_of(second) if "declare the same quota" in m]
    assert len(twice) == 1 and "First/Quota" in twice[0]
    assert not any("Nova" in m for m in twice)


def test_the_plan_is_written_into_the_cloud_assembly_and_the_construct_metadata():
    stack = new_stack()
    quota = haiku_quota(stack, keep_free=0.1, service_quota_code="L-12345678")
    quota.share("ReviewDigest", PROFILE, calls=3, call_seconds=6)
    quota.share("TickerSummaries", PROFILE, fraction=0.3, call_seconds=6)
    assembly = synth(stack)
    (path,) = assembly.glob(f"{PLAN_FILE_PREFIX}*.json")
    data = json.loads(path.read_text())
    assert {k: data[k] for k in ("model_id", "region", "account", "tpm_quota", "allocated_tpm", "headroom_tpm",
                                 "in_flight", "service_quota_code")} == {
        "model_id": "us.anthropic.claude-3-5-haiku-20241022-v1:0", "region": "us-east-1", "account": "111122223333",
        "tpm_quota": 400_000, "allocated_tpm": 240_000, "headroom_tpm": 120_000, "in_flight": 6,
        "service_quota_code": "L-12345678",
    }
    assert [(s["name"], s["tpm"], s["calls_per_execution"], s["executions"]) for s in data["shares"]] == [
        ("ReviewDigest", 120_000, 3, 1), ("TickerSummaries", 120_000, 3, 1),
    ]
    assert data["table"][1].split() == ["consumer", "tier", "TPM", "of", "quota", "burst", "TPM", "RPM", "calls/execution",
                                        "executions", "in", "flight", "TPM", "at", "cap", "tokens/day"]
    # 3 calls of 6 s back to back all day: 30 a minute x 4,000 settled x 1,440 minutes
    assert data["table"][2].split() == ["ReviewDigest", "-", "120,000", "30.0%", "-", "-", "3", "1", "3", "120,000",
                                        "172,800,000"]
    assert data["table"][-2].split()[:3] == ["(kept", "free)", "40,000"]
    assert data["table"][-1].split()[:3] == ["(headroom)", "120,000", "30.0%"]
    metadata = json.loads((assembly / f"{stack.artifact_id}.metadata.json").read_text())
    entries = [e for e in metadata[f"/{quota.node.path}"] if e["type"] == PLAN_METADATA_TYPE]
    # the same plan (jsii leaves out keys whose value is None)
    assert len(entries) == 1
    assert entries[0]["data"]["shares"] == [{k: v for k, v in s.items() if v is not None} for s in data["shares"]]


def test_the_plan_table_names_deploy_time_values_instead_of_tokens():
    stack = cdk.Stack(cdk.App(), "Agnostic")  # environment-agnostic: account and Region are tokens
    quota = ModelQuota(stack, "Quota", model=NOVA, tpm_quota=100_000)
    assert (quota.plan().region, quota.plan().account) == ("(the stack's deploy-time Region)",
                                                           "(the stack's deploy-time account)")


def test_pacer_environment_splits_the_share_over_its_processes():
    quota = haiku_quota(rpm_quota=100)
    quota.share("Workers", PROFILE, fraction=0.5, call_seconds=6, executions=4)
    assert quota.pacer_environment("Workers") == {
        "GENAI_PACER_TPM": "50000", "GENAI_PACER_RPM": "12.5", "GENAI_PACER_BURNDOWN": "5",
    }
    assert set(quota.pacer_environment("Workers")) == set(PACER_ENVIRONMENT)
    with pytest.raises(KeyError, match="no share named 'Nope'; drawn: Workers"):
        quota.pacer_environment("Nope")


# --- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"model": "us.anthropic.claude"}, "model='us.anthropic.claude' is a str; pass a BedrockModel"),
        ({"model": None}, "model is required"),
        ({"tpm_quota": 0}, "tpm_quota=0 is below the minimum of 1"),
        ({"tpm_quota": -5}, "tpm_quota=-5 is below the minimum of 1"),
        ({"tpm_quota": NAN}, "tpm_quota=nan is not a finite number"),
        ({"tpm_quota": INF}, "tpm_quota=inf is not a finite number"),
        ({"tpm_quota": True}, "tpm_quota=True is a bool"),
        ({"tpm_quota": "400000"}, "tpm_quota='400000' is a str"),
        ({"tpm_quota": None}, "tpm_quota is required"),
        ({"tpm_quota": 1e13}, "exceeds the maximum of 1,000,000,000,000"),
        ({"tpm_quota": a_token()}, "tpm_quota is an unresolved CDK token"),
        ({"rpm_quota": 0}, "rpm_quota=0 must be greater than 0"),
        ({"rpm_quota": NAN}, "rpm_quota=nan is not a finite number"),
        ({"burndown": 0.5}, "burndown=0.5 is below the minimum of 1"),
        ({"burndown": 500}, "burndown=500 exceeds the maximum of 100"),
        ({"keep_free": -0.1}, "keep_free=-0.1 is below the minimum of 0"),
        ({"keep_free": 1}, "keep_free=1 keeps the whole quota free"),
        ({"keep_free": 20}, "keep_free=20 keeps the whole quota free"),
        ({"warn_at": 0}, "warn_at=0 must be greater than 0"),
        ({"warn_at": 90}, "warn_at=90 exceeds the maximum of 1"),
        ({"service_quota_code": "1-ABC"}, "service_quota_code='1-ABC' is not a Service Quotas code"),
        ({"service_quota_code": "L_A1B2"}, "service_quota_code='L_A1B2' is not a Service Quotas code"),
        ({"service_quota_code": ""}, "service_quota_code='' is empty"),
    ],
)
def test_bad_quota_props_are_refused_with_the_fix(props, message):
    with pytest.raises(InvalidPropsError) as error:
        haiku_quota(**props)
    assert message in str(error.value)


def test_several_bad_quota_props_are_reported_together():
    with pytest.raises(InvalidPropsError) as error:
        haiku_quota(tpm_quota=0, burndown=0, keep_free=2)
    assert len(error.value.problems) == 3


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        ("", {"fraction": 0.1}, "name='' is empty"),
        ("x" * 81, {"fraction": 0.1}, "name has 81 characters; at most 80"),
        (7, {"fraction": 0.1}, "name=7 is an int; pass a string"),
        ("S", {}, "none of fraction, tpm and calls given; pass exactly one"),
        ("S", {"fraction": 0.1, "tpm": 1000}, "fraction and tpm given; pass exactly one"),
        ("S", {"fraction": 0}, "fraction=0 must be greater than 0"),
        ("S", {"fraction": 1.5}, "fraction=1.5 exceeds the maximum of 1"),
        ("S", {"fraction": NAN}, "fraction=nan is not a finite number"),
        ("S", {"fraction": True}, "fraction=True is a bool"),
        ("S", {"fraction": a_token()}, "fraction is an unresolved CDK token"),
        ("S", {"tpm": 0}, "tpm=0 is below the minimum of 1"),
        ("S", {"tpm": 500_000}, "tpm=500000 exceeds the maximum of 400,000"),
        ("S", {"calls": 0}, "calls=0 is below the minimum of 1"),
        ("S", {"calls": 2.5}, "calls=2.5 is not a whole number"),
        ("S", {"calls": INF}, "calls=inf is not a finite number"),
        ("S", {"fraction": 0.1, "executions": 0}, "executions=0 is below the minimum of 1"),
        ("S", {"fraction": 0.1, "executions": 1.5}, "executions=1.5 is not a whole number"),
        ("S", {"fraction": 0.1, "executions": None}, "executions is required"),
        ("S", {"fraction": 0.1, "call_seconds": 0}, "call_seconds=0 is below the minimum of 0.001"),
        ("S", {"fraction": 0.1, "call_seconds": 6000 * 1000}, "call_seconds=6000000 exceeds the maximum of 86,400"),
        ("S", {"fraction": 0.1, "call_seconds": None}, "call_seconds is required"),
        ("S", {"fraction": 0.1, "profile": None}, "profile is required"),
        ("S", {"fraction": 0.1, "profile": {"input_tokens": 1}}, "profile={'input_tokens': 1} is a dict"),
        ("S", {"fraction": 0.1, "profile": dataclasses.replace(PROFILE, burndown=1)},
         "profile.burndown=1 differs from the quota's burndown=5"),
    ],
)
def test_bad_shares_are_refused_with_the_fix(name, kwargs, message):
    quota = haiku_quota()
    arguments = {"call_seconds": 6, "profile": PROFILE, **kwargs}
    profile = arguments.pop("profile")
    with pytest.raises(InvalidPropsError) as error:
        quota.share(name, profile, **arguments)
    assert message in str(error.value)
    assert not quota.shares


def test_a_share_name_is_drawn_once():
    quota = haiku_quota()
    quota.share("Nightly", PROFILE, fraction=0.1, call_seconds=6)
    with pytest.raises(InvalidPropsError, match=r"name='Nightly' is already drawn from this quota"):
        quota.share("Nightly", PROFILE, fraction=0.1, call_seconds=6)


# --- the day: daily token quotas ------------------------------------------------------------------


def test_a_nightly_share_and_a_daytime_share_are_checked_against_the_daily_quota():
    """Night: 3 calls of 6 s for 6 hours (43.2 million); day: 3 calls for 14 hours (100.8 million).
    144 million a day fit the default daily quota (400,000 x 1,440) but not a new account's 100 million."""
    stack = new_stack()
    quota = haiku_quota(stack, daily_token_quota=100_000_000)
    quota.share("Nightly", PROFILE, fraction=0.3, call_seconds=6, hours_per_day=6)
    quota.share("Daytime", PROFILE, fraction=0.3, call_seconds=6, hours_per_day=14)
    plan = quota.plan()
    assert plan.daily().daily_tokens == pytest.approx(144_000_000)
    assert plan.daily().daily_quota == 100_000_000
    assembly = synth(stack)
    (daily,) = [m for m in warnings_of(stack) if "genai-pacer:quota-daily" in m]
    assert "the day's workloads settle 144,000,000 tokens, 144.0% of the model's daily quota of 100,000,000" in daily
    (path,) = assembly.glob(f"{PLAN_FILE_PREFIX}*.json")
    data = json.loads(path.read_text())
    assert (data["daily_token_quota"], data["daily_tokens"]) == (100_000_000, 144_000_000)
    assert [(s["name"], s["hours_per_day"], s["daily_tokens"]) for s in data["shares"]] == [
        ("Nightly", 6, 43_200_000), ("Daytime", 14, 100_800_000)]


def test_the_default_daily_quota_is_the_tpm_quota_times_1440_and_a_full_day_fits_it():
    stack = new_stack()
    quota = haiku_quota(stack)
    quota.share("AllDay", PROFILE, fraction=1, call_seconds=6)  # 10 calls, 400,000 TPM, 24 hours
    assert quota.plan().daily().daily_quota == 400_000 * 1_440
    assert quota.plan().daily().fraction == pytest.approx(1)
    synth(stack)
    assert not [m for m in warnings_of(stack) if "genai-pacer:quota-daily" in m]


def test_the_cross_model_cap_counts_every_quota_of_the_account_and_region():
    stack = new_stack()
    haiku = haiku_quota(stack, cross_model_daily_tokens=500_000_000)
    haiku.share("Haiku", PROFILE, fraction=1, call_seconds=6)  # 576 million a day
    nova = ModelQuota(stack, "Nova", model=NOVA, tpm_quota=100_000)
    nova.share("Nova", planning.TokenProfile(1_000, 200, 300), fraction=1, call_seconds=6, hours_per_day=1)
    assert haiku.plan().other_models_daily_tokens == pytest.approx(nova.plan().daily().daily_tokens)
    synth(stack)
    (capped,) = [m for m in warnings_of(stack) if "cross-model daily cap" in m]
    assert "of its cross-model daily cap of 500,000,000: every model is throttled once it is reached" in capped


# --- every caller of the model counts -------------------------------------------------------------


def notes(stack: cdk.Stack, name: str = "Notes", **props) -> ScheduledPrecompute:
    store = props.pop("answer_store", None) or AnswerStore(stack, f"{name}Store")
    return ScheduledPrecompute(
        stack, name, answer_store=store, model=HAIKU,
        request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.item.prompt"), max_tokens=400),
        schedule=scheduler.ScheduleExpression.cron(minute="0", hour="6"), items=[{"key": "note#a", "prompt": "a"}],
        **{"max_concurrency": 4, **props})


def consumer_warnings(stack: cdk.Stack) -> list[str]:
    return [m for m in warnings_of(stack) if "genai-pacer:quota-unshared-consumer" in m]


def test_consumers_holding_shares_named_after_them_are_not_reported():
    """The README's app: each consumer's share has its construct id."""
    stack = new_stack()
    quota = haiku_quota(stack)
    BoundedMap(stack, "Nightly", model=HAIKU, request=REQUEST,
               max_concurrency=quota.share("Nightly", PROFILE, fraction=0.3, call_seconds=6))
    QueuedInference(stack, "Interactive", model=HAIKU,
                    max_concurrency=quota.share("Interactive", PROFILE, fraction=0.5, call_seconds=6))
    assembly = synth(stack)
    assert consumer_warnings(stack) == []
    assert [(c.path, c.share) for c in quota.plan(consumers=True).consumers] == [("Test/Nightly", "Nightly"),
                                                                    ("Test/Interactive", "Interactive")]
    data = json.loads(next(assembly.glob(f"{PLAN_FILE_PREFIX}*.json")).read_text())
    assert [s["holders"] for s in data["shares"]] == [["Test/Nightly"], ["Test/Interactive"]]
    assert data["unshared_consumers"] == []


def test_a_capped_caller_without_a_share_is_reported_with_its_worst_case_draw():
    stack = new_stack()
    quota = haiku_quota(stack)
    quota.share("Nightly", PROFILE, fraction=0.3, call_seconds=6)
    notes(stack)
    synth(stack)
    (warning,) = consumer_warnings(stack)
    assert "ScheduledPrecompute Test/Notes may call the model but holds no share, so its calls are not in the plan" in warning
    assert ("up to 4 calls in flight (per execution: its Map's MaxConcurrency of 4), each reserving its prompt + 400 "
            "max_tokens, at least 1,600 tokens held at once") in warning
    assert ("Fix: give it quota.share(...) where it takes a cap (max_concurrency, reserved_concurrency), or draw a "
            "share named 'Notes' with calls= the cap it has") in warning


def test_callers_are_found_in_stages_and_nested_stacks_of_the_quotas_account_and_region_only():
    """The census reads only the stacks of the quota's account (and its Region for the callers): a caller in a
    Stage or a nested stack counts, one in another account or Region does not."""
    app = cdk.App()
    stage = cdk.Stage(app, "Prod", env=cdk.Environment(account="111111111111", region="us-east-1"))
    stack = cdk.Stack(stage, "Test")
    quota = haiku_quota(stack)
    store = AnswerStore(stack, "Store")
    AnswerRouter(cdk.NestedStack(stack, "Nested"), "Nested", answer_store=store, model=HAIKU, reserved_concurrency=2)
    AnswerRouter(cdk.Stack(stage, "Same"), "Same", answer_store=store, model=HAIKU, reserved_concurrency=3)
    for name, account, region in (("OtherAccount", "222222222222", "us-east-1"), ("OtherRegion", "111111111111", "us-west-2")):
        other = cdk.Stack(app, name, env=cdk.Environment(account=account, region=region))
        AnswerRouter(other, "Router", answer_store=AnswerStore(other, "Store"), model=HAIKU, reserved_concurrency=4)
    found = {c.path: c.calls_in_flight for c in quota.plan(consumers=True).consumers}
    assert found == {"Prod/Test/Nested/Nested": 2, "Prod/Same/Same": 3}


def test_a_caller_with_no_cap_is_reported_as_unbounded_and_a_reserved_concurrency_is_its_cap():
    stack = new_stack()
    quota = haiku_quota(stack)
    store = AnswerStore(stack, "Store")
    AnswerRouter(stack, "Router", answer_store=store, model=HAIKU)
    AnswerRouter(stack, "Capped", answer_store=store, model=HAIKU, reserved_concurrency=5)
    found = {c.path: c for c in quota.plan(consumers=True).consumers}
    assert (found["Test/Router"].calls_in_flight, found["Test/Router"].share) == (None, None)
    assert found["Test/Capped"].calls_in_flight == 5
    synth(stack)
    router, capped = sorted(consumer_warnings(stack), key=lambda m: "Test/Capped" in m)
    assert "AnswerRouter Test/Router may call the model" in router
    assert "unbounded: its function has no reserved concurrency, so nothing limits its calls in flight" in router
    assert "up to 5 calls in flight (its function's reserved concurrency of 5)" in capped


def test_each_caller_without_a_share_is_warned_on_itself_so_it_is_acknowledged_alone():
    """docs/errors.md: acknowledge a warning on the construct it is about. A caller without a share is
    warned about on that caller (the quota only found it), in its own stack, so accepting one of them
    (an unbounded router of another team) leaves the others shown."""
    app = cdk.App()
    stack = cdk.Stack(app, "Test", env=cdk.Environment(account="111111111111", region="us-east-1"))
    other = cdk.Stack(app, "Other", env=cdk.Environment(account="111111111111", region="us-east-1"))
    haiku_quota(stack).share("Nightly", PROFILE, fraction=0.3, call_seconds=6)
    accepted = AnswerRouter(stack, "Router", answer_store=AnswerStore(stack, "Store"), model=HAIKU)
    cdk.Annotations.of(accepted).acknowledge_warning("genai-pacer:quota-unshared-consumer", "another team's router")
    notes(other)
    assembly = app.synth()

    def unshared(name: str) -> list[str]:
        return [m.id for m in assembly.get_stack_by_name(name).messages
                if m.level == cdk.cx_api.SynthesisMessageLevel.WARNING and "holds no share" in str(m.entry.data)]

    assert unshared("Test") == []
    assert unshared("Other") == ["/Other/Notes"]


def test_require_shares_makes_an_unshared_caller_a_synth_error():
    stack = new_stack()
    quota = haiku_quota(stack, require_shares=True)
    quota.share("Notes", PROFILE, calls=4, call_seconds=6)
    notes(stack)  # holds the share named after it
    AnswerRouter(stack, "Router", answer_store=AnswerStore(stack, "Store"), model=HAIKU)
    with pytest.raises(RuntimeError) as error:
        synth(stack)
    assert "AnswerRouter Test/Router may call the model but holds no share" in str(error.value)
    assert "Test/Notes" not in str(error.value)


def test_one_share_held_by_two_constructs_is_a_synth_error_naming_both():
    app = cdk.App()
    stack = cdk.Stack(app, "Test", env=cdk.Environment(account="111122223333", region="us-east-1"))
    quota = haiku_quota(stack)
    plan = quota.share("Nightly", PROFILE, fraction=0.3, call_seconds=6)
    BoundedMap(stack, "Nightly", model=HAIKU, request=REQUEST, max_concurrency=plan)
    other = cdk.Stack(app, "Other", env=cdk.Environment(account="111122223333", region="us-east-1"))
    BoundedMap(other, "Nightly", model=HAIKU, request=REQUEST, max_concurrency=plan)
    with pytest.raises(RuntimeError) as error:
        app.synth()
    text = str(error.value)
    assert "share 'Nightly' (120,000 TPM, 3 calls in flight) is held by 2 constructs: BoundedMap Test/Nightly, " \
           "BoundedMap Other/Nightly; together they draw 2 times the share" in text


class PlanTaker(Construct):
    """A consumer that says which plan it was given (`concurrency_plan`), as ModelQuota reads it."""

    def __init__(self, scope: Construct, id: str, *, max_concurrency: planning.RatePlan) -> None:
        super().__init__(scope, id)
        self.concurrency_plan = max_concurrency
        role = iam.Role(self, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        HAIKU.grant_invoke(role)
        lambda_.Function(self, "Function", runtime=lambda_.Runtime.PYTHON_3_14, handler="index.handler", role=role,
                         code=lambda_.Code.from_inline("def handler(event, context): pass"),
                         reserved_concurrent_executions=max_concurrency.max_concurrency)


def test_a_share_passed_to_two_consumers_is_found_by_the_plan_they_were_given():
    stack = new_stack()
    quota = haiku_quota(stack)
    shared = quota.share("Workers", PROFILE, fraction=0.3, call_seconds=6)
    PlanTaker(stack, "First", max_concurrency=shared)
    PlanTaker(stack, "Second", max_concurrency=shared)
    with pytest.raises(RuntimeError, match="is held by 2 constructs: PlanTaker Test/First, PlanTaker Test/Second"):
        synth(stack)


def test_a_share_given_once_is_held_whatever_the_consumers_id():
    stack = new_stack()
    quota = haiku_quota(stack)
    PlanTaker(stack, "SomethingElse", max_concurrency=quota.share("Workers", PROFILE, fraction=0.3, call_seconds=6))
    synth(stack)
    assert [(c.path, c.share, c.calls_in_flight) for c in quota.plan(consumers=True).consumers] == [("Test/SomethingElse", "Workers", 3)]
    assert consumer_warnings(stack) == []


# Every genai-pacer construct that takes a share where it takes a cap, built with `cap` (an int or a plan).
CAP_TAKERS = {
    "BoundedMap": lambda stack, id, cap: BoundedMap(stack, id, model=HAIKU, request=REQUEST, max_concurrency=cap),
    "BoundedDistributedMap": lambda stack, id, cap: BoundedDistributedMap(
        stack, id, model=HAIKU, request=REQUEST, items_bucket=s3.Bucket(stack, f"{id}Items"), items_key="k.jsonl",
        max_concurrency=cap),
    "QueuedInference": lambda stack, id, cap: QueuedInference(stack, id, model=HAIKU, max_concurrency=cap),
    "ScheduledPrecompute": lambda stack, id, cap: notes(stack, id, max_concurrency=cap),
    "AnswerRouter": lambda stack, id, cap: AnswerRouter(stack, id, answer_store=AnswerStore(stack, f"{id}Store"),
                                                        model=HAIKU, reserved_concurrency=cap),
}


def plan_file(assembly: Path) -> dict:
    (path,) = assembly.glob(f"{PLAN_FILE_PREFIX}*.json")
    return json.loads(path.read_text())


@pytest.mark.parametrize("kind", CAP_TAKERS)
def test_a_share_is_held_by_the_construct_it_is_given_to_whatever_its_id(kind):
    stack = new_stack()
    quota = haiku_quota(stack)
    CAP_TAKERS[kind](stack, "SomethingElse", quota.share("Workers", PROFILE, fraction=0.3, call_seconds=6))
    data = plan_file(synth(stack))
    assert [(s["name"], s["holders"]) for s in data["shares"]] == [("Workers", ["Test/SomethingElse"])]
    assert data["unshared_consumers"] == []
    assert consumer_warnings(stack) == []


@pytest.mark.parametrize("kind", CAP_TAKERS)
def test_one_share_given_to_two_constructs_is_a_synth_error_naming_both(kind):
    """Each holds it by the plan it was given, not by its name (neither is named after the share)."""
    stack = new_stack()
    quota = haiku_quota(stack)
    shared = quota.share("Workers", PROFILE, fraction=0.3, call_seconds=6)
    CAP_TAKERS[kind](stack, "First", shared)
    CAP_TAKERS[kind](stack, "Second", shared)
    with pytest.raises(RuntimeError) as error:
        synth(stack)
    assert (f"share 'Workers' (120,000 TPM, 3 calls in flight) is held by 2 constructs: {kind} Test/First, "
            f"{kind} Test/Second; together they draw 2 times the share") in str(error.value)


# Every construct that takes a share and builds a state machine, given the user's own role (trial finding F2).
STATE_MACHINE_CAP_TAKERS = {
    "BoundedMap": lambda stack, id, cap, options: BoundedMap(
        stack, id, model=HAIKU, request=REQUEST, max_concurrency=cap, state_machine_options=options),
    "BoundedDistributedMap": lambda stack, id, cap, options: BoundedDistributedMap(
        stack, id, model=HAIKU, request=REQUEST, items_bucket=s3.Bucket(stack, f"{id}Items"), items_key="k.jsonl",
        max_concurrency=cap, state_machine_options=options),
    "ScheduledPrecompute": lambda stack, id, cap, options: notes(
        stack, id, max_concurrency=cap, state_machine_options=options),
}
USERS_ROLES = {
    "imported": lambda stack: iam.Role.from_role_arn(stack, "Runner", "arn:aws:iam::111122223333:role/runner"),
    "own": lambda stack: iam.Role(stack, "Runner", assumed_by=iam.ServicePrincipal("states.amazonaws.com")),
    # the app cannot change it: no grant lands anywhere (the construct warns, immutable-role, listing them)
    "immutable": lambda stack: iam.Role.from_role_arn(stack, "Runner", "arn:aws:iam::111122223333:role/runner",
                                                      mutable=False),
}


@pytest.mark.parametrize("role", USERS_ROLES)
@pytest.mark.parametrize("kind", STATE_MACHINE_CAP_TAKERS)
def test_a_share_is_held_by_the_construct_given_it_when_its_state_machine_runs_with_the_users_role(kind, role):
    """The model grant lands on the user's role, outside the construct (an imported role's policy is a child
    of the import): the construct given the share still holds it, capped by its Map's MaxConcurrency, and
    the role is no unshared caller, so require_shares=True synthesizes. A role the app cannot change
    (mutable=False) gets no grant at all, and the construct given the share holds it all the same (the
    fresh-app trial found it reported unheld: "none was given it")."""
    from genai_pacer import StateMachineOptions

    stack = new_stack()
    quota = haiku_quota(stack, require_shares=True)
    STATE_MACHINE_CAP_TAKERS[kind](stack, "SomethingElse", quota.share("Workers", PROFILE, fraction=0.3, call_seconds=6),
                                   StateMachineOptions(role=USERS_ROLES[role](stack)))
    data = plan_file(synth(stack))
    assert [(s["name"], s["holders"], s["in_flight"]) for s in data["shares"]] == [("Workers", ["Test/SomethingElse"], 3)]
    assert (data["unshared_consumers"], data["unheld_shares"]) == ([], [])
    (consumer,) = quota.plan(consumers=True).consumers
    assert (consumer.kind, consumer.calls_in_flight, consumer.cap) == (kind, 3, "per execution: its Map's MaxConcurrency of 3")
    assert [m for m in warnings_of(stack) if "quota-unshared-consumer" in m or "quota-unheld-share" in m] == []


def test_a_role_shared_by_two_constructs_counts_each_at_its_own_cap():
    from genai_pacer import StateMachineOptions

    stack = new_stack()
    quota = haiku_quota(stack, require_shares=True)
    role = USERS_ROLES["imported"](stack)
    for name, fraction in (("First", 0.3), ("Second", 0.2)):
        BoundedMap(stack, name, model=HAIKU, request=REQUEST, state_machine_options=StateMachineOptions(role=role),
                   max_concurrency=quota.share(name + "Share", PROFILE, fraction=fraction, call_seconds=6))
    data = plan_file(synth(stack))
    assert [(s["name"], s["holders"], s["in_flight"]) for s in data["shares"]] == [
        ("FirstShare", ["Test/First"], 3), ("SecondShare", ["Test/Second"], 2)]


# --- a holder's own caps count --------------------------------------------------------------------


def experiment_handler(stack: cdk.Stack, id: str, cap: int) -> lambda_.Function:
    """A function of yours made a handler of a PromptExperiment (it calls the variants' model), its
    reserved concurrency `cap`."""
    experiment = PromptExperiment(stack, f"{id}Experiment", experiment_name="support", variants=[
        ExperimentVariant("control", HAIKU, 50, TextPrompt("Answer: {{question}}"), max_tokens=400),
        ExperimentVariant("brief", HAIKU, 50, TextPrompt("Answer briefly: {{question}}"), max_tokens=400),
    ])
    function = lambda_.Function(stack, id, runtime=lambda_.Runtime.PYTHON_3_14, handler="index.handler",
                                code=lambda_.Code.from_inline("def handler(event, context): pass"),
                                reserved_concurrent_executions=cap)
    experiment.add_to_function(function)
    return function


# Every kind of consumer, built with its own cap of `cap` calls in flight (an int, not a share).
OWN_CAPS = {
    **CAP_TAKERS,
    "ParallelPrompts": lambda stack, id, cap: ParallelPrompts(stack, id, model=HAIKU,
                                                              prompts={f"Prompt{i}": REQUEST for i in range(cap)}),
    "PromptExperiment handler": experiment_handler,
}


@pytest.mark.parametrize("kind", OWN_CAPS)
def test_a_holder_whose_own_cap_is_above_its_share_draws_at_its_cap(kind):
    """A share of 2 calls held by name (80,000 TPM) by a consumer whose own cap is 5: the plan counts
    the 5 calls, 200,000 TPM, not the 2 the share planned."""
    stack = new_stack()
    quota = haiku_quota(stack)
    quota.share("Worker", PROFILE, calls=2, call_seconds=6)
    OWN_CAPS[kind](stack, "Worker", 5)
    data = plan_file(synth(stack))
    (share,) = data["shares"]
    assert (share["holders"], share["tpm"], share["in_flight"], share["tpm_at_cap"]) == (["Test/Worker"], 80_000, 5, 200_000)
    assert (data["allocated_tpm"], data["in_flight"]) == (200_000, 5)
    assert (share["planned_in_flight"], share["drawn_tpm"]) == (2, 200_000)
    assert data["table"][2].split()[8:11] == ["5", "(plan", "2)"]


def test_a_construct_given_a_share_draws_the_lower_of_the_share_and_its_own_caps():
    """A queue's share of 3 calls with reserved_concurrency=10 has 3 in flight (its event source's
    cap), not 10; a share of 50 calls given to an inline Map has the Map's 40."""
    stack = new_stack()
    quota = haiku_quota(stack, tpm_quota=4_000_000)
    QueuedInference(stack, "Queue", model=HAIKU, reserved_concurrency=10,
                    max_concurrency=quota.share("Interactive", PROFILE, fraction=0.03, call_seconds=6))
    BoundedMap(stack, "Map", model=HAIKU, request=REQUEST,
               max_concurrency=quota.share("Nightly", PROFILE, fraction=0.5, call_seconds=6))
    (queue, _) = quota.plan(consumers=True).consumers
    assert (queue.calls_in_flight, queue.cap) == (
        3, "its event source's maximum concurrency of 3, below its function's reserved concurrency of 10")
    data = plan_file(synth(stack))
    shares = {s["name"]: (s["planned_in_flight"], s["in_flight"], s["tpm_at_cap"], s["drawn_tpm"]) for s in data["shares"]}
    assert shares == {"Interactive": (3, 3, 120_000, 120_000), "Nightly": (50, 40, 1_600_000, 2_000_000)}
    assert (data["allocated_tpm"], data["in_flight"]) == (2_120_000, 43)


def test_real_caps_that_overdraw_the_quota_fail_synth_though_the_shares_fit():
    """1,000,000 TPM, 10% kept free: 900,000 allocatable. A Map's share of 0.75 (750,000 TPM, 18 calls)
    and a router's of 0.1 (100,000 TPM, 2 calls of 40,000) allocate 94.4%; the router built with
    reserved_concurrency=5 draws 5 x 40,000 = 200,000, so the real caps draw 950,000 TPM."""
    stack = new_stack()
    quota = haiku_quota(stack, tpm_quota=1_000_000, keep_free=0.1)
    BoundedMap(stack, "Nightly", model=HAIKU, request=REQUEST,
               max_concurrency=quota.share("Nightly", PROFILE, fraction=0.75, call_seconds=6))
    quota.share("Router", PROFILE, fraction=0.1, call_seconds=6)
    AnswerRouter(stack, "Router", answer_store=AnswerStore(stack, "Store"), model=HAIKU, reserved_concurrency=5)
    assert f"{quota.plan().allocation:.1%}" == "94.4%"  # the shares as declared
    with pytest.raises(RuntimeError) as error:
        synth(stack)
    text = str(error.value)
    assert ("the shares draw 950,000 TPM, 105.6% of the 900,000 TPM allocatable (1,000,000 TPM quota, 10% kept "
            "free); when the consumers run together, 23 calls are in flight and Bedrock throttles them") in text
    assert ("- Router: 100,000 TPM (10.0%), 2 calls per execution x 1 execution(s) = 2 in flight; but its caps allow "
            "5 in flight, drawing 200,000 TPM: AnswerRouter Test/Router (its function's reserved concurrency of 5)") in text
    assert "- Nightly: 750,000 TPM (75.0%), 18 calls per execution x 1 execution(s) = 18 in flight\n" in text
    assert "Fix: hold each consumer to its share (give it the share where it takes a cap" in text


def test_the_same_router_given_its_share_as_its_cap_fits():
    stack = new_stack()
    quota = haiku_quota(stack, tpm_quota=1_000_000, keep_free=0.1)
    BoundedMap(stack, "Nightly", model=HAIKU, request=REQUEST,
               max_concurrency=quota.share("Nightly", PROFILE, fraction=0.75, call_seconds=6))
    AnswerRouter(stack, "Router", answer_store=AnswerStore(stack, "Store"), model=HAIKU,
                 reserved_concurrency=quota.share("Router", PROFILE, fraction=0.1, call_seconds=6))
    data = plan_file(synth(stack))
    assert (data["allocated_tpm"], data["allocation"], data["in_flight"]) == (850_000, 0.9444, 20)


def reserving_app(max_tokens: int, *, fraction: float = 0.8) -> tuple[cdk.Stack, ModelQuota]:
    """400,000 TPM, burndown 5; a Map's share drawn with a profile of max_tokens=400 (2,000 in, 300 out: each
    call reserves 2,400 and settles 3,500, so settlement binds), its requests built with `max_tokens`."""
    stack = new_stack()
    quota = haiku_quota(stack)
    profile = quota.profile(input_tokens=2_000, output_tokens=300, max_tokens=400)
    BoundedMap(stack, "Notes", model=HAIKU, request=ConverseRequest(prompt="Write a note", max_tokens=max_tokens),
               max_concurrency=quota.share("Notes", profile, fraction=fraction, call_seconds=6))
    return stack, quota


def test_a_holder_whose_requests_reserve_more_than_the_profile_is_planned_at_its_real_reservation():
    """Trial F5: requests with max_tokens=8,000 against a profile of 400. Each call reserves 10,000 tokens,
    not 2,400: the share's 9 calls draw 315,000 + 9 x (10,000 - 3,500) = 373,500 TPM at its cap, not 315,000,
    and the warning names both numbers."""
    stack, _ = reserving_app(8_000)
    data = plan_file(synth(stack))
    (share,) = data["shares"]
    assert (share["in_flight"], share["held_max_tokens"], share["tpm_at_cap"]) == (9, 8_000, 373_500)
    assert (data["allocated_tpm"], data["allocation"]) == (373_500, 0.9337)
    (warning,) = [w for w in warnings_of(stack) if "max_tokens=400" in w]
    assert ("share 'Notes' was drawn with a profile of max_tokens=400, but its holder's requests set more: "
            "BoundedMap Test/Notes (max_tokens=8,000)") in warning
    assert "each call reserves 10,000 quota tokens, not 2,400" in warning and "373,500 TPM at its cap" in warning


def test_a_holder_whose_requests_reserve_more_is_warned_on_itself_so_it_is_acknowledged_alone():
    """docs/quota.md: a warning about one holder is on that holder, so accepting it for one Map (its long
    answers are measured) leaves the other's shown; on the quota, acknowledging one silenced both."""
    stack, quota = reserving_app(8_000, fraction=0.4)
    profile = quota.profile(input_tokens=2_000, output_tokens=300, max_tokens=400)
    BoundedMap(stack, "Digest", model=HAIKU, request=ConverseRequest(prompt="Write a digest", max_tokens=8_000),
               max_concurrency=quota.share("Digest", profile, fraction=0.4, call_seconds=6))
    cdk.Annotations.of(stack.node.find_child("Notes")).acknowledge_warning(
        "genai-pacer:quota-max-tokens-beyond-profile", "its long notes are measured")
    found = [(m.id, str(m.entry.data)) for m in Annotations.from_stack(stack).find_warning("*", Match.any_value())
             if "genai-pacer:quota-max-tokens-beyond-profile" in str(m.entry.data)]
    assert [id for id, _ in found] == ["/Test/Digest"]
    assert "share 'Digest' was drawn with a profile of max_tokens=400, but its holder's requests set more: " \
           "BoundedMap Test/Digest (max_tokens=8,000)" in found[0][1]


def test_a_holder_with_a_deploy_time_cap_is_warned_on_itself():
    stack = new_stack()
    cap = cdk.CfnParameter(stack, "Cap", type="Number", default=5).value_as_number
    quota = haiku_quota(stack)
    for name in ("Router", "Faq"):
        quota.share(name, PROFILE, calls=2, call_seconds=6)
        AnswerRouter(stack, name, answer_store=AnswerStore(stack, f"{name}Store"), model=HAIKU, reserved_concurrency=cap,
                     max_output_tokens=440)
    cdk.Annotations.of(stack.node.find_child("Faq")).acknowledge_warning("genai-pacer:quota-deploy-time-cap",
                                                                         "deployed at 2")
    found = [m.id for m in Annotations.from_stack(stack).find_warning("*", Match.any_value())
             if "genai-pacer:quota-deploy-time-cap" in str(m.entry.data)]
    assert found == ["/Test/Router"]


def test_a_holder_whose_requests_reserve_what_the_profile_says_is_planned_as_before():
    stack, _ = reserving_app(400)
    data = plan_file(synth(stack))
    assert (data["shares"][0]["held_max_tokens"], data["allocated_tpm"]) == (400, 320_000)
    assert not [w for w in warnings_of(stack) if "max_tokens=400" in w]


def test_a_real_reservation_that_overdraws_the_quota_fails_synth_naming_both_numbers():
    stack, _ = reserving_app(20_000, fraction=0.9)
    with pytest.raises(RuntimeError) as error:
        synth(stack)
    # 10 calls, each settling 3,500 and reserving 22,000: 350,000 + 10 x 18,500
    assert ("- Notes: 360,000 TPM (90.0%), 10 calls per execution x 1 execution(s) = 10 in flight; but its requests "
            "reserve max_tokens=20,000 where its profile says 400, drawing 535,000 TPM: BoundedMap Test/Notes") in str(error.value)
    assert "send the max_tokens a share's profile says" in str(error.value)


def test_a_routers_max_output_tokens_is_the_reservation_of_its_calls():
    """AnswerRouter's max_output_tokens is the maxTokens of every miss: a share of 2 calls drawn with a profile
    of max_tokens=400 held by a router with max_output_tokens=20,000 reserves 22,000 a call."""
    stack = new_stack()
    quota = haiku_quota(stack)
    profile = quota.profile(input_tokens=2_000, output_tokens=300, max_tokens=400)
    AnswerRouter(stack, "Router", answer_store=AnswerStore(stack, "Store"), model=HAIKU, max_output_tokens=20_000,
                 reserved_concurrency=quota.share("Router", profile, calls=2, call_seconds=6))
    (share,) = plan_file(synth(stack))["shares"]
    assert (share["held_max_tokens"], share["in_flight"], share["tpm_at_cap"]) == (20_000, 2, 2 * 10 * 3_500 + 2 * 18_500)
    assert any("AnswerRouter Test/Router (max_tokens=20,000)" in w for w in warnings_of(stack))


def test_a_deploy_time_cap_is_described_as_unknown_at_synth_not_as_no_cap():
    """Trial F6: a Map whose MaxConcurrency is a CfnParameter was reported 'unbounded: a Map of its state machine has
    no MaxConcurrency', and a queue's deploy-time maximum concurrency 'its function has no reserved concurrency'."""
    stack = new_stack()
    cap = cdk.CfnParameter(stack, "Cap", type="Number", default=5).value_as_number
    haiku_quota(stack)
    BoundedMap(stack, "Map", model=HAIKU, request=REQUEST, max_concurrency=cap)
    QueuedInference(stack, "Queue", model=HAIKU, max_concurrency=cap)
    found = {w.split(" may call")[0].rsplit(" ", 1)[-1]: w for w in consumer_warnings(stack)}
    assert ('unknown at synth: per execution: its Map\'s MaxConcurrency is a deploy-time value ({"Ref": "Cap"}), so '
            "the plan cannot count its calls in flight") in found["Test/Map"]
    assert ('unknown at synth: its event source\'s maximum concurrency is a deploy-time value ({"Ref": "Cap"})'
            in found["Test/Queue"])
    assert not any("unbounded" in w or "has no" in w for w in found.values())


def test_a_holder_by_name_with_a_deploy_time_cap_is_warned_that_the_plan_counts_the_share():
    stack = new_stack()
    cap = cdk.CfnParameter(stack, "Cap", type="Number", default=5).value_as_number
    quota = haiku_quota(stack)
    quota.share("Router", PROFILE, calls=2, call_seconds=6)
    AnswerRouter(stack, "Router", answer_store=AnswerStore(stack, "Store"), model=HAIKU, reserved_concurrency=cap,
                 max_output_tokens=440)
    (warning,) = [w for w in warnings_of(stack) if "quota-deploy-time-cap" in w]
    assert ("AnswerRouter Test/Router holds share 'Router' (2 calls in flight), but its own cap is unknown at synth: its "
            'function\'s reserved concurrency is a deploy-time value ({"Ref": "Cap"}). The plan counts it at the share\'s '
            "2 calls; a deployed value above that draws more than the share") in warning


def test_an_experiments_handler_counts_at_its_whole_cap_in_each_variant_models_quota():
    """Trial F9, as PromptExperiment's docstring and docs/experiments.md say: the handler holds the share named
    after it in each model's quota, at its whole reserved concurrency; the 90/10 split does not divide it."""
    stack = new_stack()
    experiment = PromptExperiment(stack, "Experiment", experiment_name="support", variants=[
        ExperimentVariant("control", NOVA, 90, TextPrompt("Answer: {{question}}"), max_tokens=400),
        ExperimentVariant("haiku", HAIKU, 10, TextPrompt("Answer: {{question}}"), max_tokens=400),
    ])
    function = lambda_.Function(stack, "Answer", runtime=lambda_.Runtime.PYTHON_3_14, handler="index.handler",
                                code=lambda_.Code.from_inline("def handler(event, context): pass"),
                                reserved_concurrent_executions=4)
    experiment.add_to_function(function)
    quotas = [ModelQuota(stack, "NovaQuota", model=NOVA, tpm_quota=400_000), haiku_quota(stack)]
    for quota in quotas:
        quota.share("Answer", quota.profile(input_tokens=800, output_tokens=200, max_tokens=400), calls=4, call_seconds=3)
    for quota in quotas:
        plan = quota.plan(consumers=True)
        (share,) = plan.shares
        assert ([c.path for c in plan.holders(share)], share.in_flight) == (["Test/Answer"], 4)
        assert not plan.unshared  # the experiment's own fallback workflow calls no model


# --- shares nobody holds ---------------------------------------------------------------------------


def unheld_app(**props) -> tuple[cdk.Stack, ModelQuota]:
    """'Nightly' is held; 'Spare' is drawn for no one, and 'Elsewhere' is given to a Map that calls another model."""
    stack = new_stack()
    quota = haiku_quota(stack, **props)
    BoundedMap(stack, "Nightly", model=HAIKU, request=REQUEST,
               max_concurrency=quota.share("Nightly", PROFILE, fraction=0.3, call_seconds=6))
    quota.share("Spare", PROFILE, fraction=0.2, call_seconds=6)
    BoundedMap(stack, "Other", model=NOVA, request=REQUEST,
               max_concurrency=quota.share("Elsewhere", PROFILE, fraction=0.1, call_seconds=6))
    return stack, quota


def test_a_share_no_construct_holds_is_reported_and_still_counts():
    stack, _ = unheld_app()
    data = plan_file(synth(stack))
    unheld = sorted(m for m in warnings_of(stack) if "genai-pacer:quota-unheld-share" in m)
    assert len(unheld) == 2
    assert ("share 'Spare' (80,000 TPM, 2 calls in flight) is held by no construct that may call the model in the "
            "quota's account and Region: none was given it and none is named after it. It still counts in the "
            "allocation (60.0% allocated)") in unheld[1]
    assert "share 'Elsewhere' (40,000 TPM, 1 calls in flight) is held by no construct" in unheld[0]
    assert "Fix: give it to its consumer where it takes a cap (max_concurrency, reserved_concurrency)" in unheld[0]
    assert (data["allocated_tpm"], data["allocation"]) == (240_000, 0.6)  # 0.3 + 0.2 + 0.1: both still counted
    assert data["unheld_shares"] == ["Spare", "Elsewhere"]


def test_require_shares_makes_an_unheld_share_a_synth_error():
    stack, _ = unheld_app(require_shares=True)
    with pytest.raises(RuntimeError) as error:
        synth(stack)
    text = str(error.value)
    assert "share 'Spare' (80,000 TPM, 2 calls in flight) is held by no construct" in text
    assert "share 'Elsewhere' (40,000 TPM, 1 calls in flight) is held by no construct" in text
    assert "'Nightly'" not in text


def test_callers_of_other_quotas_are_not_counted():
    """A batch job's service role (the batch quotas), a stack in another Region, and a caller of the
    cross-Region profile (its grant on the foundation model is confined to the profile) draw nothing
    from an on-demand quota of the foundation model in this Region."""
    app = cdk.App()
    here = cdk.Stack(app, "Here", env=cdk.Environment(account="111122223333", region="us-east-1"))
    there = cdk.Stack(app, "There", env=cdk.Environment(account="111122223333", region="us-west-2"))
    haiku_on_demand = BedrockModel.foundation("anthropic.claude-3-5-haiku-20241022-v1:0")
    quota = ModelQuota(here, "OnDemand", model=haiku_on_demand, tpm_quota=400_000, burndown=5)
    store = AnswerStore(here, "Store")
    BatchPrecompute(here, "Batch", model=haiku_on_demand, answer_store=store, max_tokens=400)
    AnswerRouter(there, "Elsewhere", answer_store=AnswerStore(there, "Store"), model=haiku_on_demand)
    AnswerRouter(here, "ThroughProfile", answer_store=store, model=HAIKU)
    AnswerRouter(here, "Direct", answer_store=store, model=haiku_on_demand)
    assert [c.path for c in quota.plan(consumers=True).consumers] == ["Here/Direct"]


# --- tokens: every prop of ModelQuota and share() --------------------------------------------------


def _tokens() -> dict[str, object]:
    number = cdk.Token.as_number(cdk.Fn.ref("Param"))
    return {
        "number": number,
        "string": cdk.Token.as_string(cdk.Fn.ref("Param")),
        "Duration": cdk.Duration.seconds(number),
        "list": cdk.Token.as_list(cdk.Fn.ref("Params")),
    }


QUOTA_PROPS = ["tpm_quota", "rpm_quota", "burndown", "keep_free", "warn_at", "service_quota_code", "daily_token_quota",
               "cross_model_daily_tokens", "require_shares", "model"]
SHARE_ARGS = ["name", "profile", "call_seconds", "fraction", "tpm", "calls", "executions", "hours_per_day", "burst_tpm"]


@pytest.mark.parametrize("kind", ["number", "string", "Duration", "list"])
@pytest.mark.parametrize("prop", QUOTA_PROPS)
def test_a_token_for_any_quota_prop_is_refused_naming_the_prop(prop, kind):
    """A plan is computed and read at synth (and by quota-check before deploying), and ModelQuota
    writes nothing into the template: a deploy-time value has nowhere to go, so it is refused."""
    with pytest.raises(InvalidPropsError) as error:
        haiku_quota(**{prop: _tokens()[kind]})
    assert re.match(rf"{prop}\b", error.value.problems[0]), error.value.problems


def test_the_quota_model_may_be_a_deploy_time_arn_and_the_plan_says_so():
    stack = new_stack()
    arn = cdk.Token.as_string(cdk.Fn.ref("ProfileArn"))
    model = BedrockModel.application_inference_profile(arn, copies=HAIKU)
    quota = ModelQuota(stack, "Quota", model=model, tpm_quota=400_000)
    assert quota.plan().model_id == "(the model's deploy-time ARN)"
    data = json.loads(next(synth(stack).glob(f"{PLAN_FILE_PREFIX}*.json")).read_text())
    assert data["model_id"] == "(the model's deploy-time ARN)" and "${Token" not in json.dumps(data)


@pytest.mark.parametrize("kind", ["number", "string", "Duration", "list"])
@pytest.mark.parametrize("argument", SHARE_ARGS)
def test_a_token_for_any_share_argument_is_refused_naming_it(argument, kind):
    quota = haiku_quota()
    arguments = {"name": "S", "profile": PROFILE, "call_seconds": 6, "fraction": 0.3}
    if argument in ("tpm", "calls"):
        del arguments["fraction"]
    arguments[argument] = _tokens()[kind]
    with pytest.raises(InvalidPropsError) as error:
        quota.share(arguments.pop("name"), arguments.pop("profile"), **arguments)
    assert any(re.match(rf"{argument}\b", problem) for problem in error.value.problems), error.value.problems
    assert not quota.shares


PROFILE_ARGS = ["input_tokens", "output_tokens", "max_tokens", "cache_write_tokens", "cache_read_tokens"]


@pytest.mark.parametrize("kind", ["number", "string", "Duration", "list"])
@pytest.mark.parametrize("argument", PROFILE_ARGS)
def test_a_token_for_any_profile_argument_is_refused_naming_it(argument, kind):
    """quota.profile() feeds the plan, computed at synth: every kind of token is refused by name
    (a Duration built from a parameter used to pass as a token count and reach the plan)."""
    arguments = {"input_tokens": 2_500, "output_tokens": 300, "max_tokens": 440, argument: _tokens()[kind]}
    with pytest.raises(InvalidPropsError) as error:
        haiku_quota().profile(**arguments)
    assert any(re.match(rf"{argument}\b", problem) for problem in error.value.problems), error.value.problems


def test_a_quota_accepts_an_ibedrockinvokable_and_plans_for_the_model_it_names():
    from invokables import FakeCrossRegionProfile, FakeFoundationModel

    alpha_like = FakeCrossRegionProfile("us", FakeFoundationModel("anthropic.claude-3-5-haiku-20241022-v1:0"))
    quota = ModelQuota(new_stack(), "Quota", model=alpha_like, tpm_quota=400_000, burndown=5)
    assert quota.model == HAIKU
    assert quota.plan().model_id == HAIKU.model_id
