"""Every prop of EndpointScaling, PeakWindow and the capacity helpers given every kind of token
(issue 23, "Every prop: a token flows into the template correctly, or is refused by name").

A token reaches the template as a Ref where the value goes to CloudFormation unchanged (names,
capacities, targets, cooldowns); where the construct computes with the value at synth (cron times
from a lead, overlap checks, evaluation periods, the planner's arithmetic) synth refuses it, naming
the prop. Never a token's number encoding (about -1.9e289) in the template or a message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import aws_cdk as cdk
import pytest
from genai_pacer import InvalidPropsError, capacity
from genai_pacer.endpoints.scaling import EndpointScaling, PeakWindow
from helpers import new_stack, only, token_of

KINDS = ("number", "string", "duration", "list")
ENCODED_NUMBER = re.compile(r"e\+2\d\d|-1\.88815")  # how aws-cdk-lib encodes a number token
PEAK = dict(capacity=6, start="08:00", end="09:00", days="MON-FRI", time_zone="Europe/Berlin")


def token(stack: cdk.Stack, kind: str) -> Any:
    """A CfnParameter named Tok, as the kind of token a user would pass."""
    return token_of(stack, kind, "Tok")


def holds_ref(value: Any) -> bool:
    if isinstance(value, dict):
        return value.get("Ref") == "Tok" or any(holds_ref(v) for v in value.values())
    if isinstance(value, list):
        return any(holds_ref(v) for v in value)
    return False


def target(template: dict) -> dict:
    return only(template, "AWS::ApplicationAutoScaling::ScalableTarget")["Properties"]


def tracking(template: dict) -> dict:
    policies = [r["Properties"] for r in template["Resources"].values()
                if r["Type"] == "AWS::ApplicationAutoScaling::ScalingPolicy"]
    return policies[0]["TargetTrackingScalingPolicyConfiguration"]


def action(template: dict, name: str) -> dict:
    return next(a for a in target(template)["ScheduledActions"] if a["ScheduledActionName"] == name)


def shortfall_alarm(template: dict) -> dict:
    return only(template, "AWS::CloudWatch::Alarm")["Properties"]


SCALING_PROPS = ("endpoint", "max_capacity", "target_concurrency", "variant_name", "inference_component_name", "min_capacity",
                 "scale_out_cooldown", "scale_in_cooldown", "disable_scale_in", "peaks", "lead_time", "model_load_time",
                 "scale_to_zero", "endpoint_config", "metric", "target_value", "allow_non_concurrency_metric", "alarm_actions")
#: (prop, kind) -> where the Ref lands; every other pair is refused naming the prop.
SCALING_PASSES: dict[tuple[str, str], Callable[[dict], list[Any]]] = {
    ("endpoint", "string"): lambda t: [target(t)["ResourceId"]],
    ("variant_name", "string"): lambda t: [target(t)["ResourceId"]],
    ("inference_component_name", "string"): lambda t: [target(t)["ResourceId"]],
    ("max_capacity", "number"): lambda t: [target(t)["MaxCapacity"], shortfall_alarm(t)["AlarmDescription"]],
    # the baseline and every restore action: the minimum the peaks return to
    ("min_capacity", "number"): lambda t: [target(t)["MinCapacity"], action(t, "peak1-restore")["ScalableTargetAction"]],
    ("target_concurrency", "number"): lambda t: [tracking(t)["TargetValue"], shortfall_alarm(t)["Threshold"]],
    ("target_value", "number"): lambda t: [tracking(t)["TargetValue"]],
    ("scale_out_cooldown", "duration"): lambda t: [tracking(t)["ScaleOutCooldown"]],
    ("scale_in_cooldown", "duration"): lambda t: [tracking(t)["ScaleInCooldown"]],
}


def scaling_props(prop: str) -> dict:
    props: dict[str, Any] = dict(endpoint="my-endpoint", target_concurrency=6.4, max_capacity=12,
                                 peaks=[PeakWindow(**PEAK)])
    if prop == "target_value":
        props.update(metric="invocations", allow_non_concurrency_metric=True, target_concurrency=None)
    return props


@pytest.mark.parametrize(("prop", "kind"), [(p, k) for p in SCALING_PROPS for k in KINDS])
def test_every_endpoint_scaling_prop_given_every_kind_of_token(prop, kind):
    stack = new_stack()
    props = {**scaling_props(prop), prop: token(stack, kind)}
    where = SCALING_PASSES.get((prop, kind))
    if where is None:
        with pytest.raises(InvalidPropsError) as refused:
            EndpointScaling(stack, "Scaling", **props)
        assert any(p.startswith((f"{prop} ", f"{prop}=")) for p in refused.value.problems), refused.value.problems
        assert not ENCODED_NUMBER.search(str(refused.value)), str(refused.value)
        return
    EndpointScaling(stack, "Scaling", **props)
    template = cdk.assertions.Template.from_stack(stack).to_json()
    for value in where(template):
        assert holds_ref(value), json.dumps(value)
    assert not ENCODED_NUMBER.search(json.dumps(template["Resources"]))


PEAK_PROPS = ("capacity", "start", "end", "time_zone", "days", "name")
PEAK_PASSES: dict[tuple[str, str], Callable[[dict], list[Any]]] = {
    ("capacity", "number"): lambda t: [action(t, "peak1-raise")["ScalableTargetAction"]],
    ("name", "string"): lambda t: [a["ScheduledActionName"] for a in target(t)["ScheduledActions"]],
}


@pytest.mark.parametrize(("prop", "kind"), [(p, k) for p in PEAK_PROPS for k in KINDS])
def test_every_peak_window_prop_given_every_kind_of_token(prop, kind):
    stack = new_stack()
    where = PEAK_PASSES.get((prop, kind))
    if where is None:
        with pytest.raises(InvalidPropsError) as refused:
            PeakWindow(**{**PEAK, prop: token(stack, kind)})
        assert any(p.startswith((f"{prop} ", f"{prop}=")) for p in refused.value.problems), refused.value.problems
        assert not ENCODED_NUMBER.search(str(refused.value)), str(refused.value)
        return
    peak = PeakWindow(**{**PEAK, prop: token(stack, kind)})
    EndpointScaling(stack, "Scaling", endpoint="my-endpoint", target_concurrency=6.4, max_capacity=12, peaks=[peak])
    template = cdk.assertions.Template.from_stack(stack).to_json()
    values = where(template)
    assert values and all(holds_ref(v) for v in values), values
    assert not ENCODED_NUMBER.search(json.dumps(template["Resources"]))


#: The capacity helpers plan at synth: every token is refused, naming the input.
HELPERS: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {
    "concurrent_requests": (capacity.concurrent_requests, dict(requests_per_minute=900, latency_seconds=4)),
    "target_concurrency": (capacity.target_concurrency,
                           dict(sustained_requests_per_minute=120, latency_seconds=4, headroom=0.2)),
    "capacity_for_peak(concurrent)": (capacity.capacity_for_peak, dict(target_concurrency=6.4, concurrent_requests=60)),
    "capacity_for_peak(rate)": (capacity.capacity_for_peak,
                                dict(target_concurrency=6.4, requests_per_minute=900, latency_seconds=4)),
    "lead_time": (capacity.lead_time, dict(model_load_seconds=600, margin=0.25)),
    "ConcurrencyTarget": (capacity.ConcurrencyTarget, dict(saturation=8.0, headroom=0.2, target_value=6.4)),
    "PeakCapacity": (capacity.PeakCapacity, dict(concurrent_requests=60.0, target_concurrency=6.4, capacity=10)),
    "LeadTime": (capacity.LeadTime, dict(load_seconds=600.0, margin=0.25, minutes=13)),
}
#: The construct and props class with every one of their props (tests/test_tokens_coverage.py checks it is all).
TABLE = {"EndpointScaling": (EndpointScaling, SCALING_PROPS), "PeakWindow": (PeakWindow, PEAK_PROPS)}
HELPER_CASES = [(helper, prop, kind) for helper, (_, args) in HELPERS.items() for prop in args for kind in KINDS]


@pytest.mark.parametrize(("helper", "prop", "kind"), HELPER_CASES)
def test_every_capacity_helper_input_given_every_kind_of_token_is_refused_by_name(helper, prop, kind):
    function, args = HELPERS[helper]
    function(**args)  # the literal arguments pass
    with pytest.raises(InvalidPropsError) as refused:
        function(**{**args, prop: token(new_stack(), kind)})
    assert any(p.startswith((f"{prop} ", f"{prop}=")) for p in refused.value.problems), refused.value.problems
    assert not ENCODED_NUMBER.search(str(refused.value)), str(refused.value)


def test_the_helper_table_names_real_inputs_and_the_counts_hold():
    """The construct's and PeakWindow's props are checked by tests/test_tokens_coverage.py."""
    import inspect

    for helper, (function, args) in HELPERS.items():
        assert set(inspect.signature(function).parameters) >= set(args), helper
    assert len(SCALING_PROPS) * len(KINDS) + len(PEAK_PROPS) * len(KINDS) + len(HELPER_CASES) == 72 + 24 + 84
