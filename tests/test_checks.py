"""The shared checks module: a deploy-time value is shown by its kind, a number prop refuses a token
of another kind, and every suggested Duration is one the same check accepts (issue 23); every problem
carries a stable id and the construct's path, and every warning comes from one helper (issue 36)."""

from __future__ import annotations

import pickle

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Annotations, Match
from genai_pacer._internal.checks import Checks, InvalidPropsError, token_kind, warn

from constructs import Construct


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


def test_each_generic_check_names_its_rule_by_owner_prop_and_kind():
    with pytest.raises(InvalidPropsError) as raised, Checks("QueuedInference") as check:
        check.integer("batch_size", 11, minimum=1, maximum=10)
        check.integer("max_concurrency", 2.5)
        check.number("rate", float("nan"))
        check.text("name", "  ")
        check.one_of("mode", "fast", ("a", "b"))
        check.duration("timeout", None)
        check.each("alarm_actions", [1], lambda n, v: check.instance(n, v, str, "a str"))
    assert raised.value.ids == [
        "QueuedInference.batch_size.maximum", "QueuedInference.max_concurrency.not-integer",
        "QueuedInference.rate.not-finite", "QueuedInference.name.empty", "QueuedInference.mode.choice",
        "QueuedInference.timeout.required", "QueuedInference.alarm_actions.type",
    ]
    assert "- [QueuedInference.batch_size.maximum] batch_size=11 exceeds the maximum of 10" in str(raised.value)


def test_a_custom_rule_carries_the_id_it_names_after_the_owner():
    with pytest.raises(InvalidPropsError) as raised, Checks("TokenProfile") as check:
        check.rule(False, "output_tokens=5 exceeds max_tokens=4", id="output_tokens.above-max-tokens")
    assert raised.value.ids == ["TokenProfile.output_tokens.above-max-tokens"]
    assert str(raised.value) == "TokenProfile: [TokenProfile.output_tokens.above-max-tokens] output_tokens=5 exceeds max_tokens=4"


def test_a_construct_s_error_names_its_path_and_problems_still_read_as_text():
    stack = cdk.Stack(cdk.App(), "Shop")
    worker = Construct(Construct(stack, "Orders"), "Worker")
    with pytest.raises(InvalidPropsError) as raised, Checks("QueuedInference", scope=worker) as check:
        check.integer("batch_size", 0, minimum=1)
        check.rule(False, "reserved_concurrency=1 is below max_concurrency=2", id="reserved_concurrency.below-cap")
    error = raised.value
    assert error.path == "Shop/Orders/Worker"
    assert str(error).startswith("QueuedInference at Shop/Orders/Worker: 2 problems:\n- [QueuedInference.batch_size.minimum] ")
    assert error.problems == ["batch_size=0 is below the minimum of 1", "reserved_concurrency=1 is below max_concurrency=2"]
    assert [p.id for p in error.problems] == error.ids
    assert isinstance(error, ValueError) and isinstance(error, TypeError)


def test_an_error_keeps_its_ids_and_path_when_pickled():
    """pytest-xdist and multiprocessing pickle an exception: it must come back whole, not fail to rebuild."""
    with pytest.raises(InvalidPropsError) as raised, Checks("Thing") as check:
        check.integer("count", -1, minimum=0)
    again = pickle.loads(pickle.dumps(raised.value))
    assert (str(again), again.ids, again.path, again.problems) == (
        str(raised.value), ["Thing.count.minimum"], None, ["count=-1 is below the minimum of 0"])


def test_a_validator_after_construction_reports_with_ids():
    """For a value known only after construction, node.add_validation returns the same problems, with ids."""
    check = Checks("ModelQuota")
    check.rule(False, "shares allocate 120% of the quota", id="shares.over-allocated")
    assert check.errors() == ["[ModelQuota.shares.over-allocated] shares allocate 120% of the quota"]


def test_every_warning_is_a_genai_pacer_id_on_the_construct():
    stack = cdk.Stack(cdk.App(), "Shop")
    warn(Construct(stack, "Worker"), "queue-unverified", "queue Shop/Q is imported")
    Annotations.from_stack(stack).has_warning("/Shop/Worker", Match.string_like_regexp(
        r"^queue Shop/Q is imported \[ack: genai-pacer:queue-unverified\]$"))


def test_a_custom_rule_without_an_id_is_a_programming_error():
    with pytest.raises(TypeError, match="id"):
        Checks("Thing").rule(False, "count=0 is below 1")  # type: ignore[call-arg]


def test_docs_errors_lists_every_rule_the_shared_checks_name():
    """docs/errors.md tells a user what a shared check's id means; a kind the shared checks build an id from
    (`_broke(name, "<kind>")` or `id=f"{_prop(name)}.<kind>"` in checks.py) but the page does not list leaves
    that user searching for `ModelQuota.tpm_quota.duration-unit` with no explanation."""
    import ast
    import re
    from pathlib import Path

    import genai_pacer._internal.checks as checks

    kinds = set()
    for node in ast.walk(ast.parse(Path(checks.__file__).read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "_broke":
            kinds.add(node.args[1].value)
        if isinstance(node, ast.keyword) and node.arg == "id" and isinstance(node.value, ast.JoinedStr):
            tail = node.value.values[-1]
            if isinstance(tail, ast.Constant) and "_prop(name)" in ast.unparse(node.value):
                kinds.add(tail.value.lstrip("."))
    listed = set(re.findall(r"`([a-z-]+)`", (Path(__file__).parent.parent / "docs" / "errors.md").read_text()))
    assert len(kinds) >= 12
    assert sorted(kinds - listed) == []


def test_a_token_of_the_wrong_kind_is_one_problem_when_its_prop_is_checked_twice():
    """A construct names a wrong-kind token with its own fix (token_of_kind), then checks the number: the user
    reads one problem, not the same one twice (AnswerRouter's server_error_threshold listed it twice)."""
    from genai_pacer._internal.checks import token_of_kind

    with pytest.raises(InvalidPropsError) as raised, Checks("Thing") as check:
        if not token_of_kind(check, "count", _tokens()["string"], "number", fix="pass parameter.value_as_number"):
            check.integer("count", _tokens()["string"], minimum=0)
    assert raised.value.ids == ["Thing.count.token-kind"]
    assert "parameter.value_as_number" in str(raised.value)


def test_a_prop_a_construct_refused_is_not_reported_again_by_its_own_checks():
    """Checks.refuse: the construct's own refusal of a value (LoadReplay: a deploy-time value where the run's
    settings are computed at synth) is that prop's one problem; the number, text, choice and duration checks
    of it after say nothing, and other props are checked as ever."""
    token = _tokens()["string"]
    with pytest.raises(InvalidPropsError) as raised, Checks("Thing") as check:
        check.refuse("count", "count is a deploy-time string, but it is needed at synth: pass the value itself",
                     id="count.deploy-time")
        check.integer("count", token, minimum=0)
        check.text("count", 3)
        check.one_of("count", [token], ("a", "b"))
        check.duration("count", token)
        check.integer("other", "x")
    assert raised.value.ids == ["Thing.count.deploy-time", "Thing.other.type"]


def test_the_router_names_a_wrong_kind_threshold_once():
    from genai_pacer import AnswerRouter, AnswerStore, BedrockModel

    stack = cdk.Stack(cdk.App(), "Probe")
    threshold = cdk.CfnParameter(stack, "Threshold", default="x").value_as_string
    with pytest.raises(InvalidPropsError) as raised:
        AnswerRouter(stack, "Router", answer_store=AnswerStore(stack, "Store"), prompts={"n#{x}": "Note for {x}"},
                     model=BedrockModel.from_id("us.amazon.nova-2-lite-v1:0"), server_error_threshold=threshold)
    assert raised.value.ids == ["AnswerRouter.server_error_threshold.token-kind"]
    assert raised.value.path == "Probe/Router"


def test_a_warning_is_acknowledged_by_the_id_cdk_synth_prints_as_well():
    """`cdk synth` says "Acknowledge with 'Annotation::genai-pacer:<id>'"; docs/errors.md says that works too."""
    app = cdk.App()
    stack = cdk.Stack(app, "Shop")
    accepted, shown = Construct(stack, "Accepted"), Construct(stack, "Shown")
    for scope in (accepted, shown):
        warn(scope, "queue-unverified", "queue Shop/Q is imported")
    cdk.Validations.of(accepted).acknowledge(
        cdk.Acknowledgment(id="Annotation::genai-pacer:queue-unverified", reason="checked by hand"))
    messages = app.synth().get_stack_by_name("Shop").messages
    assert [m.id for m in messages if m.level == cdk.cx_api.SynthesisMessageLevel.WARNING] == ["/Shop/Shown"]
