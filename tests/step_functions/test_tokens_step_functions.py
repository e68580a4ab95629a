"""Every prop of BoundedMap, BoundedDistributedMap, ParallelPrompts, SyncExecutionUrl, RuntimeLayer and of
BedrockRetry, ConverseRequest, NativeRequest, TaskOptions and StateMachineOptions given an unresolved token
of each kind (issue 23, "Every prop: a token flows into the template correctly, or is refused by name").

The kinds are what a user passes from a CfnParameter: value_as_number, value_as_string,
cdk.Duration.seconds(value_as_number), cdk.Duration.minutes(value_as_number) (a Duration in a unit the
state machine's seconds fields cannot take without converting at synth) and value_as_list. A token
reaches the template where the value goes to CloudFormation unchanged: as a number where Step Functions
wants a number (MaxConcurrency, ToleratedFailurePercentage, IntervalSeconds...), inside a string where it
wants text. Synth refuses it, naming the prop and why, where the construct decides or computes with the
value at synth (an item reader chosen by format, an output-size estimate, a log group created or not).
Props that take an object (a model, a bucket, a chain) are refused by type. Never a token's number
encoding (about -1.9e289), an AttributeError, a plain TypeError or a jsii error.
"""

from __future__ import annotations

import inspect
import json
import pydoc
import re
from collections.abc import Callable
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.assertions import Annotations, Match, Template
from genai_pacer import (
    BedrockModel,
    BedrockRetry,
    BoundedDistributedMap,
    BoundedMap,
    ConverseRequest,
    InvalidPropsError,
    NativeRequest,
    ParallelPrompts,
    RuntimeLayer,
    StateMachineOptions,
    SyncExecutionUrl,
    TaskOptions,
)
from helpers import all_states, definition_with_refs, new_stack, only, resources, token_of

KINDS = ("number", "string", "duration", "minutes", "list")
ENCODED_NUMBER = re.compile(r"e\+2\d\d|-1\.88815")  # how aws-cdk-lib encodes a number token
REF = {"Ref": "Tok"}
#: How the flattened definition shows the parameter: bare (a JSON number at deploy) or inside a string.
NUM, STR = "<<number Tok>>", "<<text Tok>>"
NOVA = BedrockModel.from_id("amazon.nova-lite-v1:0")
PROMPT = sfn.JsonPath.string_at("$.prompt")
REQUEST = ConverseRequest(prompt=PROMPT, max_tokens=100)


def token(stack: cdk.Stack, kind: str) -> Any:
    """A CfnParameter named Tok, as the kind of token a user would pass."""
    if kind == "minutes":
        return cdk.Duration.minutes(cdk.CfnParameter(stack, "Tok", type="Number").value_as_number)
    return token_of(stack, kind, "Tok")


def holds_ref(value: Any) -> bool:
    if isinstance(value, dict):
        return value == REF or any(holds_ref(v) for v in value.values())
    if isinstance(value, list):
        return any(holds_ref(v) for v in value)
    return False


def flows(value: Any, kind: str) -> bool:
    """The parameter reached this value: as a number for a number or Duration, within text for a string."""
    if kind == "string":
        return (isinstance(value, str) and STR in value) or holds_ref(value)
    return value in (NUM, REF) or holds_ref(value)


def states(template: dict) -> dict[str, dict]:
    return all_states(definition_with_refs(template))


def model_task(template: dict) -> dict:
    return states(template)["InvokeModel"]


def function_props(template: dict) -> dict:
    return only(template, "AWS::Lambda::Function")["Properties"]


# ---- the constructs and value objects, each with the least it needs ------------------------------------


def items_bucket(stack: cdk.Stack) -> s3.IBucket:
    return s3.Bucket.from_bucket_name(stack, "Items", "my-items")


def inline_map(stack: cdk.Stack, **props: Any) -> BoundedMap:
    return BoundedMap(stack, "Map", **{"max_concurrency": 4, "model": NOVA, "request": REQUEST, **props})


def distributed_map(stack: cdk.Stack, **props: Any) -> BoundedDistributedMap:
    base: dict[str, Any] = {"max_concurrency": 8, "items_bucket": items_bucket(stack), "items_key": "items.jsonl",
                            "model": NOVA, "request": REQUEST}
    if "batch_max_items" in props:  # a batch is a list of items: only an item processor of one's own reads it
        base.update(model=None, request=None, item_processor=sfn.Pass(stack, "Own"))
    return BoundedDistributedMap(stack, "Map", **{**base, **props})


def parallel(stack: cdk.Stack, **props: Any) -> ParallelPrompts:
    return ParallelPrompts(stack, "Prompts", **{"prompts": {"a": REQUEST, "b": REQUEST}, "model": NOVA, **props})


def express_machine(stack: cdk.Stack) -> sfn.StateMachine:
    options = StateMachineOptions(state_machine_type=sfn.StateMachineType.EXPRESS, timeout=cdk.Duration.minutes(2))
    return parallel(stack, state_machine_options=options).state_machine


def sync_url(stack: cdk.Stack, **props: Any) -> SyncExecutionUrl:
    if "state_machine" in props:
        return SyncExecutionUrl(stack, "Url", **props)
    return SyncExecutionUrl(stack, "Url", state_machine=express_machine(stack), **props)


def converse(**props: Any) -> ConverseRequest:
    base: dict[str, Any] = {"prompt": PROMPT, "max_tokens": 100}
    if "messages" in props:
        base["prompt"] = None
    return ConverseRequest(**{**base, **props})


def native(**props: Any) -> NativeRequest:
    body = {"messages": [{"role": "user", "content": "$.prompt"}], "max_tokens": 100}
    return NativeRequest(**{"body": body, **props})


#: name -> (the object, its props, how to build it with one prop overridden, how to synthesize it,
#: (prop, kind) -> the template values the Ref must reach). Every other (prop, kind) is refused by name.
Build = Callable[..., Any]
Synth = Callable[[cdk.Stack, Any], Any]
Where = Callable[[dict], list[Any]]


def _in_map(key: str) -> Synth:
    """Synthesize a value object inside a BoundedMap, as the prop `key` of it."""
    return lambda stack, value: inline_map(stack, **{key: value})


def _direct(stack: cdk.Stack, value: Any) -> Any:
    return value  # a construct is built by its builder already


def _inference(template: dict) -> dict:
    return model_task(template)["Parameters"]["InferenceConfig"]


def _retry(template: dict) -> dict:
    return model_task(template)["Retry"][0]


def _distributed(template: dict) -> dict:
    return states(template)["Map"]


def _wait_function(template: dict) -> list[Any]:
    props = function_props(template)
    assert props["Timeout"] == 300 + 5 + 10, props["Timeout"]  # sized for the longest EXPRESS run, margin kept
    return [props["Environment"]["Variables"]["WAIT_SECONDS"]]


TABLE: dict[str, tuple[Callable[..., Any], tuple[str, ...], Build, Synth, dict[tuple[str, str], Where]]] = {
    "BoundedMap": (
        BoundedMap,
        ("max_concurrency", "allow_unbounded", "model", "request", "item_processor", "retry", "task_options",
         "items_path", "expected_items", "state_machine_options", "alarm_actions", "ledger"),
        lambda stack, **p: inline_map(stack, **p),
        _direct,
        {
            ("max_concurrency", "number"): lambda t: [states(t)["Map"]["MaxConcurrency"]],
            ("items_path", "string"): lambda t: [states(t)["Map"]["ItemsPath"]],
        },
    ),
    "BoundedDistributedMap": (
        BoundedDistributedMap,
        ("max_concurrency", "items_bucket", "items_key", "allow_unbounded", "model", "request", "item_processor",
         "retry", "task_options", "items_format", "results_bucket", "results_prefix", "tolerated_failure_percentage",
         "batch_max_items", "child_execution_type", "state_machine_options", "alarm_actions", "items_bucket_key",
         "results_bucket_key", "ledger"),
        lambda stack, **p: distributed_map(stack, **p),
        _direct,
        {
            ("max_concurrency", "number"): lambda t: [_distributed(t)["MaxConcurrency"]],
            ("items_key", "string"): lambda t: [_distributed(t)["ItemReader"]["Parameters"]["Key"]],
            ("results_prefix", "string"): lambda t: [_distributed(t)["ResultWriter"]["Parameters"]["Prefix"]],
            # aws-cdk-lib refuses every number token here as "must be between 0 and 100"
            ("tolerated_failure_percentage", "number"): lambda t: [_distributed(t)["ToleratedFailurePercentage"]],
            ("batch_max_items", "number"): lambda t: [_distributed(t)["ItemBatcher"]["MaxItemsPerBatch"]],
        },
    ),
    "ParallelPrompts": (
        ParallelPrompts,
        ("prompts", "model", "synthesis", "synthesis_model", "retry", "state_machine_options", "alarm_actions", "ledger"),
        lambda stack, **p: parallel(stack, **p),
        _direct,
        {},
    ),
    "SyncExecutionUrl": (
        SyncExecutionUrl,
        ("state_machine", "wait", "max_concurrent_executions", "encryption_key", "log_retention"),
        lambda stack, **p: sync_url(stack, **p),
        _direct,
        {
            ("wait", "duration"): _wait_function,
            ("max_concurrent_executions", "number"): lambda t: [function_props(t)["ReservedConcurrentExecutions"]],
        },
    ),
    "RuntimeLayer": (
        RuntimeLayer,
        ("compatible_architectures", "removal_policy"),
        lambda stack, **p: RuntimeLayer(stack, "Layer", **p),
        _direct,
        {},
    ),
    "BedrockRetry": (
        BedrockRetry,
        ("errors", "interval", "backoff_rate", "max_retries", "max_delay"),
        lambda stack, **p: BedrockRetry(**p),
        _in_map("retry"),
        {
            ("errors", "string"): lambda t: _retry(t)["ErrorEquals"],
            ("interval", "duration"): lambda t: [_retry(t)["IntervalSeconds"]],
            ("backoff_rate", "number"): lambda t: [_retry(t)["BackoffRate"]],
            ("max_retries", "number"): lambda t: [_retry(t)["MaxAttempts"]],
            ("max_delay", "duration"): lambda t: [_retry(t)["MaxDelaySeconds"]],
        },
    ),
    "ConverseRequest": (
        ConverseRequest,
        ("prompt", "messages", "system", "max_tokens", "temperature", "top_p", "stop_sequences", "additional_fields",
         "latency", "service_tier"),
        lambda stack, **p: converse(**p),
        _in_map("request"),
        {
            ("prompt", "string"): lambda t: [model_task(t)["Parameters"]["Messages"][0]["Content"][0]["Text"]],
            ("system", "string"): lambda t: [model_task(t)["Parameters"]["System"][0]["Text"]],
            ("max_tokens", "number"): lambda t: [_inference(t)["MaxTokens"]],
            ("temperature", "number"): lambda t: [_inference(t)["Temperature"]],
            ("top_p", "number"): lambda t: [_inference(t)["TopP"]],
            ("latency", "string"): lambda t: [model_task(t)["Parameters"]["PerformanceConfig"]["Latency"]],
            ("service_tier", "string"): lambda t: [model_task(t)["Parameters"]["ServiceTier"]["Type"]],
        },
    ),
    "NativeRequest": (
        NativeRequest,
        ("body", "max_tokens", "service_tier"),
        lambda stack, **p: native(**p),
        _in_map("request"),
        {},
    ),
    "TaskOptions": (
        TaskOptions,
        ("result_selector", "result_path", "timeout", "heartbeat"),
        lambda stack, **p: TaskOptions(**p),
        _in_map("task_options"),
        {
            # the task's ResultPath and every path the answer-picking states read under it
            ("result_path", "string"): lambda t: [
                model_task(t)["ResultPath"], states(t)["InvokeModel answer"]["ResultPath"],
                states(t)["InvokeModel answer"]["Parameters"]["text.$"],
                states(t)["InvokeModel has text?"]["Choices"][0]["Variable"],
            ],
            ("timeout", "duration"): lambda t: [model_task(t)["TimeoutSeconds"]],
            ("heartbeat", "duration"): lambda t: [model_task(t)["HeartbeatSeconds"]],
        },
    ),
    "StateMachineOptions": (
        StateMachineOptions,
        ("log_group", "encryption_key", "log_retention", "log_execution_data", "role", "state_machine_name",
         "state_machine_type", "timeout", "log_level"),
        lambda stack, **p: StateMachineOptions(**p),
        _in_map("state_machine_options"),
        {
            ("state_machine_name", "string"): lambda t: [
                only(t, "AWS::StepFunctions::StateMachine")["Properties"]["StateMachineName"]],
            ("timeout", "duration"): lambda t: [definition_with_refs(t)["TimeoutSeconds"]],
        },
    ),
}
CASES = [(name, prop, kind) for name, (_, props, *_rest) in TABLE.items() for prop in props for kind in KINDS]


def _names(problems: list[str], prop: str) -> bool:
    return any(p.startswith((f"{prop} ", f"{prop}=", f"{prop}[", f"{prop}:")) for p in problems)


@pytest.mark.parametrize(("name", "prop", "kind"), CASES)
def test_every_prop_given_every_kind_of_token_flows_or_is_refused_by_name(name, prop, kind):
    _, _, build, synth, passes = TABLE[name]
    stack = new_stack()
    where = passes.get((prop, kind))
    if where is None:
        with pytest.raises(InvalidPropsError) as refused:
            synth(stack, build(stack, **{prop: token(stack, kind)}))
        assert _names(refused.value.problems, prop), refused.value.problems
        assert not ENCODED_NUMBER.search(str(refused.value)), str(refused.value)
        return
    synth(stack, build(stack, **{prop: token(stack, kind)}))
    template = Template.from_stack(stack).to_json()
    values = where(template)
    assert values and all(flows(v, kind) for v in values), values
    assert not ENCODED_NUMBER.search(json.dumps(template["Resources"]))


def test_the_passing_cases_name_props_of_the_table():
    """That the props are every prop of each signature is checked by tests/test_tokens_coverage.py."""
    for name, (_, props, *_rest, passes) in TABLE.items():
        assert {prop for prop, _ in passes} <= set(props) and {kind for _, kind in passes} <= set(KINDS), name
    assert sum(len(passes) for *_rest, passes in TABLE.values()) == 26


# ---- what the tokens must not break -------------------------------------------------------------------


def test_a_deploy_time_max_tokens_warns_that_the_map_output_cannot_be_sized():
    """The estimate used to multiply the token's encoding (about -1.9e289) and find nothing to warn of."""
    stack = new_stack()
    max_tokens = cdk.CfnParameter(stack, "Tok", type="Number").value_as_number
    inline_map(stack, request=converse(max_tokens=max_tokens), expected_items=500)
    Annotations.from_stack(stack).has_warning("/Test/Map", Match.string_like_regexp("max_tokens is a deploy-time"))
    assert _inference(Template.from_stack(stack).to_json())["MaxTokens"] == NUM


def test_a_token_inside_a_native_body_or_a_list_flows():
    stack = new_stack()
    number = cdk.CfnParameter(stack, "Tok", type="Number").value_as_number
    text = cdk.CfnParameter(stack, "Text").value_as_string
    body = {"messages": [{"role": "user", "content": "$.prompt"}], "max_tokens": number}
    inline_map(stack, request=NativeRequest(body=body), retry=BedrockRetry(errors=[text, "Bedrock.ThrottlingException"]))
    template = Template.from_stack(stack).to_json()
    task = model_task(template)
    assert task["Parameters"]["Body"]["max_tokens"] == NUM
    assert task["Retry"][0]["ErrorEquals"] == ["<<text Text>>", "Bedrock.ThrottlingException"]
    stack = new_stack()
    stop = cdk.CfnParameter(stack, "Tok").value_as_string
    inline_map(stack, request=converse(stop_sequences=[stop, "END"]))
    assert _inference(Template.from_stack(stack).to_json())["StopSequences"] == [STR, "END"]


def test_a_deploy_time_list_is_refused_with_a_fix_that_passes():
    """value_as_list in a definition would need a Lambda-backed custom resource aws-cdk-lib adds itself;
    the suggested fix (a list of deploy-time strings) is accepted."""
    stack = new_stack()
    param = cdk.CfnParameter(stack, "Tok", type="CommaDelimitedList")
    with pytest.raises(InvalidPropsError, match=r"errors is a deploy-time list.*cdk\.Fn\.select"):
        BedrockRetry(errors=param.value_as_list)
    inline_map(stack, retry=BedrockRetry(errors=[cdk.Fn.select(0, param.value_as_list)]))
    assert not resources(Template.from_stack(stack).to_json(), "Custom::AWSCDKCfnJsonStringify")


# ---- defects issue 23 names ---------------------------------------------------------------------------


@pytest.mark.parametrize("construct", [inline_map, distributed_map])
@pytest.mark.parametrize("value", [42, "chain", 1.5])
def test_an_item_processor_that_is_no_chain_is_refused_by_name(construct, value):
    """item_processor=42 raised AttributeError ('int' object has no attribute 'start_state')."""
    with pytest.raises(InvalidPropsError) as refused:
        construct(new_stack(), model=None, request=None, item_processor=value)
    assert refused.value.problems == [
        f"item_processor={value!r} is a{'n' if type(value).__name__[0] in 'aeiou' else ''} {type(value).__name__}; "
        "pass an sfn chain (a state or .next() chain)"]


def test_a_request_that_is_no_request_is_refused_by_the_map_not_an_inner_task():
    with pytest.raises(InvalidPropsError) as refused:
        inline_map(new_stack(), request={"prompt": "hi"})
    assert (refused.value.owner, refused.value.path) == ("BoundedMap", "Test/Map")
    assert _names(refused.value.problems, "request"), refused.value.problems


#: Ids ParallelPrompts and its state machine give their own children: a prompt named so used to fail
#: with jsii's "There is already a Construct with name ...".
OWN_CHILD_IDS = ("StateMachine", "Logs", "LogsKey", "TracingAndLogDelivery", "Branches", "SynthesisModel")


def test_prompt_names_like_the_constructs_own_children_are_safe_and_move_no_logical_id():
    plain = new_stack()
    parallel(plain, prompts={f"p{i}": REQUEST for i in range(len(OWN_CHILD_IDS))}, synthesis=REQUEST)
    named = new_stack()
    construct = parallel(named, prompts={name: REQUEST for name in OWN_CHILD_IDS}, synthesis=REQUEST)
    template = Template.from_stack(named).to_json()
    assert sorted(template["Resources"]) == sorted(Template.from_stack(plain).to_json()["Resources"])
    branches = [branch["StartAt"] for branch in definition_with_refs(template)["States"]["Prompts"]["Branches"]]
    assert branches == list(OWN_CHILD_IDS)
    assert set(definition_with_refs(template)["States"]["Prompts"]["ResultSelector"]["answers"]) == {f"{n}.$" for n in OWN_CHILD_IDS}
    assert construct.state_machine.node.id == "StateMachine"


def test_native_prompts_whose_names_differ_by_a_model_suffix_do_not_collide():
    """A native prompt's model reference was the construct '<name>Model': prompts 'a' and 'aModel' collided."""
    stack = new_stack()
    body = NativeRequest(body={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 50})
    parallel(stack, prompts={"a": body, "aModel": body})
    branches = definition_with_refs(Template.from_stack(stack).to_json())["States"]["Prompts"]["Branches"]
    assert [b["StartAt"] for b in branches] == ["a", "aModel"]


def test_a_deploy_time_prompt_name_is_refused_by_name():
    stack = new_stack()
    with pytest.raises(InvalidPropsError) as refused:
        parallel(stack, prompts={token(stack, "string"): REQUEST, "b": REQUEST})
    assert _names(refused.value.problems, "prompts"), refused.value.problems


@pytest.mark.parametrize("prop", ["items_key", "results_prefix"])
def test_s3_keys_over_1024_utf8_bytes_are_refused_by_bytes_not_characters(prop):
    """S3 keys are at most 1,024 bytes of UTF-8, prefix included; 513 'é' are 513 characters but 1,026 bytes."""
    with pytest.raises(InvalidPropsError) as refused:
        distributed_map(new_stack(), **{prop: "é" * 513})
    assert refused.value.problems == [
        f"{prop} is 1,026 bytes of UTF-8; S3 keys are at most 1,024 bytes, prefix included, and {prop} is "
        + ("the key of the object that lists the items" if prop == "items_key" else "the start of every result "
           "object's key (Step Functions adds the Map Run's own path after it)") + ": shorten it"]
    distributed_map(new_stack(), **{prop: "é" * 512})  # exactly 1,024 bytes


@pytest.mark.parametrize("prop", ["items_key", "results_prefix"])
def test_an_s3_key_with_a_lone_surrogate_is_refused_by_name(prop):
    """UTF-8 cannot hold a lone surrogate (half an emoji): the prop is named, not a UnicodeEncodeError raised."""
    with pytest.raises(InvalidPropsError) as refused:
        distributed_map(new_stack(), **{prop: "items\ud800/"})
    assert refused.value.problems == [
        f"{prop} is not valid Unicode (a lone surrogate at character 5), so S3 can hold no such key: fix the string"]


def test_a_deploy_time_tolerated_failure_percentage_is_a_number_in_the_definition_and_zero_stays_absent():
    stack = new_stack()
    distributed_map(stack, tolerated_failure_percentage=token(stack, "number"))
    assert _distributed(Template.from_stack(stack).to_json())["ToleratedFailurePercentage"] == NUM
    stack = new_stack()
    distributed_map(stack, tolerated_failure_percentage=25)
    assert _distributed(Template.from_stack(stack).to_json())["ToleratedFailurePercentage"] == 25
    stack = new_stack()
    distributed_map(stack)
    assert "ToleratedFailurePercentage" not in _distributed(Template.from_stack(stack).to_json())


def test_help_shows_bedrock_retrys_real_defaults_not_factory():
    """help(BedrockRetry) showed 'interval: ... = <factory>'."""
    text = pydoc.render_doc(BedrockRetry, renderer=pydoc.plaintext)
    assert "<factory>" not in text
    assert "interval: 'cdk.Duration' = cdk.Duration.seconds(2)" in text
    assert "max_delay: 'cdk.Duration' = cdk.Duration.seconds(30)" in text
    for value_object in (BedrockRetry, ConverseRequest, NativeRequest, TaskOptions, StateMachineOptions):
        assert "<factory>" not in str(inspect.signature(value_object)), value_object
    retry = BedrockRetry()
    assert (retry.interval.to_seconds(), retry.max_delay.to_seconds()) == (2, 30)
    stack = new_stack()
    inline_map(stack, retry=retry)
    assert (_retry(Template.from_stack(stack).to_json())["IntervalSeconds"],
            _retry(Template.from_stack(stack).to_json())["MaxDelaySeconds"]) == (2, 30)


def test_bench_help_says_what_warm_up_and_reserved_pct_of_quota_mean_with_their_defaults():
    import argparse

    from genai_pacer.testing import cli
    from genai_pacer.testing.bench import BenchConfig

    (commands,) = [a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction)]
    text = " ".join(commands.choices["bench"].format_help().split())
    assert "--warmup" in text and "left out of the report" in text and "(default 8)" in text
    assert "counts --warmup ones too" in text
    assert "reserved_pct_of_quota" in text and "input + max_tokens" in text and "can pass 100 with no throttle" in text
    assert "settled_pct_of_quota" in text and f"(default {cli.DEFAULT_TPM:,} with --emulator" in text
    doc = " ".join((BenchConfig.__doc__ or "").split())
    assert "warmup: requests sent first and left out of the summary" in doc and "Default: 8" in doc
    assert BenchConfig(model_id="m").warmup == commands.choices["bench"].get_default("warmup") == 8
