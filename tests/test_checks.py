"""The shared checks module: a deploy-time value is shown by its kind, a number prop refuses a token
of another kind, and every suggested Duration is one the same check accepts (issue 23)."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from genai_pacer._internal.checks import Checks, InvalidPropsError, token_kind


def _tokens() -> dict[str, object]:
    stack = cdk.Stack()
    number = cdk.CfnParameter(stack, "N", type="Number").value_as_number
    return {
        "number": number,
        "string": cdk.CfnParameter(stack, "S").value_as_string,
        "list": cdk.CfnParameter(stack, "L", type="CommaDelimitedList").value_as_list,
        "Duration": cdk.Duration.seconds(number),
    }


def test_every_kind_of_deploy_time_value_is_named_and_literals_are_not_tokens():
    assert {kind: token_kind(value) for kind, value in _tokens().items()} == {
        "number": "number", "string": "string", "list": "list", "Duration": "Duration"}
    assert [token_kind(v) for v in (3, 2.5, "text", ["a"], cdk.Duration.seconds(3), None)] == [None] * 6


@pytest.mark.parametrize(("kind", "says"), [
    ("string", "count is a deploy-time string; pass an integer or a number token"),
    ("Duration", "count is a deploy-time Duration; pass an integer or a number token"),
    ("list", "count=<a deploy-time list> is a list; pass an integer"),
])
def test_a_number_prop_refuses_a_token_of_another_kind_by_name(kind, says):
    with pytest.raises(InvalidPropsError, match=says), Checks("Thing") as check:
        check.integer("count", _tokens()[kind], minimum=1)


def test_a_number_token_passes_through_and_is_never_shown_as_its_encoding():
    with Checks("Thing") as check:
        assert check.integer("count", _tokens()["number"], minimum=1) is False  # known only at deploy
    with pytest.raises(InvalidPropsError) as raised, Checks("Thing") as check:
        check.one_of("mode", _tokens()["list"], ("a", "b"))
    assert "<a deploy-time list>" in str(raised.value) and "e+" not in str(raised.value)


@pytest.mark.parametrize(("given", "minimum", "maximum", "suggested"), [
    (30, cdk.Duration.minutes(1), None, "cdk.Duration.seconds(60)"),   # 30 s would itself be refused
    (2, None, None, "cdk.Duration.seconds(2)"),
    (10**6, None, cdk.Duration.hours(1), "cdk.Duration.seconds(3600)"),
    ("soon", cdk.Duration.seconds(5), None, "cdk.Duration.seconds(30)"),
])
def test_a_suggested_duration_is_one_the_check_accepts(given, minimum, maximum, suggested):
    with pytest.raises(InvalidPropsError) as raised, Checks("Thing") as check:
        check.duration("wait", given, minimum=minimum, maximum=maximum)
    assert f"such as {suggested}" in str(raised.value)
    seconds = float(suggested.removeprefix("cdk.Duration.seconds(").removesuffix(")"))
    with Checks("Thing") as check:  # the suggestion passes the same check
        assert check.duration("wait", cdk.Duration.seconds(seconds), minimum=minimum, maximum=maximum)
