"""ScheduledPrecompute under hostile input and a throttling store: a bad item fails alone with its
reason, every DynamoDB task retries what a retry can fix under the names Step Functions uses, and
props that cannot work are refused at synth. Also the state machines' log level (issue 27)."""

from __future__ import annotations

import contextlib
import importlib
import sys
import tempfile
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.assertions import Template
from genai_pacer import (
    AnswerStore,
    BedrockModel,
    BoundedMap,
    ConverseRequest,
    InvalidPropsError,
    StateMachineOptions,
)
from genai_pacer.precompute.scheduled import (
    CONDITIONAL_CHECK_FAILED,
    DYNAMODB_RETRY_ERRORS,
    LAMBDA_THROTTLED,
    ScheduledPrecompute,
)
from genai_pacer.testing.sfn import StateMachineRunner
from helpers import all_states, definition, new_stack, only, resources

NOVA = "amazon.nova-lite-v1:0"
REQUEST = ConverseRequest(
    prompt=sfn.JsonPath.format("Morning note for {}", sfn.JsonPath.string_at("$.item.ticker")), max_tokens=120
)
CRON = scheduler.ScheduleExpression.cron(minute="0", hour="6", time_zone=cdk.TimeZone.EUROPE_LONDON)


def prepare(monkeypatch):
    monkeypatch.setenv("LOCK_SECONDS", "21600")
    monkeypatch.setenv("ANSWER_TTL_SECONDS", "")
    sys.modules.pop("scheduled_precompute.handler", None)
    return importlib.import_module("scheduled_precompute.handler")


@pytest.mark.parametrize(("name", "value"), [
    ("LOCK_SECONDS", "six hours"), ("LOCK_SECONDS", None), ("LOCK_SECONDS", "0"), ("LOCK_SECONDS", "-60"),
    ("LOCK_SECONDS", "1.5"), ("LOCK_SECONDS", ""), ("ANSWER_TTL_SECONDS", "a week"), ("ANSWER_TTL_SECONDS", "-1"),
])
def test_a_bad_environment_fails_the_invocation_naming_the_variable_not_the_import(monkeypatch, name, value):
    """An import-time failure is Lambda's Runtime.ImportModuleError on every invocation, with Python's
    'invalid literal for int()' as its message; read per invocation, the run fails naming the variable."""
    prepare(monkeypatch)  # the environment the construct sets, then one variable broken
    if value is None:
        monkeypatch.delenv(name)
    else:
        monkeypatch.setenv(name, value)
    sys.modules.pop("scheduled_precompute.handler", None)
    handler = importlib.import_module("scheduled_precompute.handler")  # imports whatever the environment holds
    with pytest.raises(handler.ConfigurationError, match=rf"^{name}=.* must be a whole number of seconds >= 1"):
        handler.handler({"items": [{"key": "k#1"}]}, now=1.0)


def test_the_second_look_fails_a_key_whose_own_answer_is_invalid_and_needs_its_table(monkeypatch):
    """Only a bug could send an invalid answer item or leave ANSWER_TABLE empty: the key fails with the
    error's name (its Catch), and nothing is written."""
    from pacer_runtime import answers

    handler = prepare(monkeypatch)
    item = {"pk": {"S": "k#1"}, "answer": {"S": "a"}, "model_id": {"S": NOVA}, "request_id": {"S": "precompute#r"},
            "sequence": {"N": "1000"}, "generated_at": {"S": "1970-01-01T00:00:01Z"}}
    monkeypatch.delenv("ANSWER_TABLE", raising=False)
    with pytest.raises(handler.ConfigurationError, match="^ANSWER_TABLE is empty"):
        handler.handler({"answer": item}, now=2.0)
    monkeypatch.setenv("ANSWER_TABLE", "answers")
    monkeypatch.setattr(handler, "_store", lambda: pytest.fail("no write for an invalid answer"))
    for broken in ({"answer": {"S": ""}}, {"output_tokens": {"N": "1.5"}}, {"generated_at": {"S": "soon"}}):
        with pytest.raises(answers.InvalidItemError):
            handler.handler({"answer": {**item, **broken}}, now=2.0)
    with pytest.raises(answers.InvalidItemError, match="not a map"):
        handler.handler({"answer": None}, now=2.0)


def build(stack: cdk.Stack | None = None, **props) -> tuple[cdk.Stack, ScheduledPrecompute]:
    stack = stack or new_stack()
    defaults = {"answer_store": AnswerStore(stack, "Store"), "model": BedrockModel.from_id(NOVA), "request": REQUEST,
                "max_concurrency": 4, "schedule": CRON, "items": [{"key": "k#1", "ticker": "A"}]}
    if "items_bucket" in props:
        defaults.pop("items")
    return stack, ScheduledPrecompute(stack, "Pre", **{**defaults, **props})


# ---- one bad item fails alone --------------------------------------------------------------------


def test_a_lone_surrogate_fails_only_its_item_and_names_the_field_not_the_text(monkeypatch):
    run = prepare(monkeypatch).handler({"items": [
        {"key": "ticker#a", "ticker": "ok"},
        {"key": "ticker#b", "ticker": "half an emoji \ud83d"},
        {"key": "ticker#\ud800"},
        {"key": "ticker#c", "notes": {"\udc00bad": 1}},
        {"key": "ticker#d", "ticker": "fine too"},
    ]}, now=1.0)
    assert [item["key"] for item in run["items"]] == ["ticker#a", "ticker#d"]
    refused = {entry["key"]: entry for entry in run["invalid"]}
    assert set(refused) == {"ticker#b", "items[2]", "ticker#c"}
    assert refused["ticker#b"]["cause"] == "items[1].ticker is not valid Unicode (a lone surrogate at character 14)"
    assert "half an emoji" not in str(run["invalid"])
    assert "field name that is not valid Unicode" in refused["ticker#c"]["cause"]
    assert run["keys"] == 5


def test_an_item_nested_too_deeply_fails_alone(monkeypatch):
    handler = prepare(monkeypatch)
    deep: dict = {}
    cursor = deep
    for _ in range(handler.MAX_ITEM_DEPTH + 5):
        cursor["next"] = {}
        cursor = cursor["next"]
    at_limit: dict = {}
    cursor = at_limit
    for _ in range(handler.MAX_ITEM_DEPTH - 1):
        cursor["next"] = {}
        cursor = cursor["next"]
    run = handler.handler({"items": [{"key": "deep", "tree": deep}, {"key": "shallow", "tree": at_limit}]}, now=1.0)
    assert [item["key"] for item in run["items"]] == ["shallow"]
    assert run["invalid"] == [{"key": "deep", "error": "InvalidItem",
                               "cause": f"items[0].tree{'.next' * handler.MAX_ITEM_DEPTH} nests deeper than "
                                        f"{handler.MAX_ITEM_DEPTH} levels"}]


# ---- the store's transient errors are retried under the names Step Functions uses -------------------


def test_every_dynamodb_task_retries_throttles_under_both_spellings_and_catches_the_condition():
    stack, _ = build()
    states = all_states(definition(only(Template.from_stack(stack).to_json(), "AWS::StepFunctions::StateMachine")))
    dynamodb_tasks = {name: state for name, state in states.items()
                      if state.get("Type") == "Task" and ":dynamodb:" in str(state.get("Resource"))}
    assert len(dynamodb_tasks) >= 3, dynamodb_tasks.keys()  # the lock, each answer, the lock's release
    for name, state in dynamodb_tasks.items():
        (retry,) = state["Retry"]
        assert set(retry["ErrorEquals"]) == set(DYNAMODB_RETRY_ERRORS), name
        assert retry["JitterStrategy"] == "FULL", name
    # the optimized integration's prefix is DynamoDB., and a code without the Exception suffix is
    # retried under both spellings, since no AWS page says which one Step Functions raises
    assert {"DynamoDB.RequestLimitExceeded", "DynamoDB.RequestLimitExceededException",
            "DynamoDB.ProvisionedThroughputExceededException", "DynamoDB.ThrottlingException",
            "DynamoDB.InternalServerError", "DynamoDB.InternalServerErrorException"} == set(DYNAMODB_RETRY_ERRORS)
    assert not any(error.startswith("DynamoDb.") for error in DYNAMODB_RETRY_ERRORS)
    catches = [catch["ErrorEquals"] for state in dynamodb_tasks.values() for catch in state.get("Catch", [])]
    assert [CONDITIONAL_CHECK_FAILED] in catches and CONDITIONAL_CHECK_FAILED == "DynamoDB.ConditionalCheckFailedException"


def test_the_second_look_retries_lambdas_throttle_and_fails_only_its_key():
    """A failed condition goes to the construct's function (put_answer's second look); Lambda's throttle,
    which aws-cdk-lib's default Retry omits, is retried with full jitter, and anything else fails the key."""
    stack, pre = build()
    states = all_states(definition(only(Template.from_stack(stack).to_json(), "AWS::StepFunctions::StateMachine")))
    (to_second_look,) = [c["Next"] for c in states["Write answer"]["Catch"] if c["ErrorEquals"] == [CONDITIONAL_CHECK_FAILED]]
    look = states[to_second_look]
    assert look["Resource"].endswith(":::lambda:invoke") and look["OutputPath"] == "$.Payload"
    assert set(look["Parameters"]["Payload"]["answer"]) == set(states["Write answer"]["Parameters"]["Item"])
    assert {"ErrorEquals": [LAMBDA_THROTTLED], "IntervalSeconds": 1, "MaxAttempts": 6, "BackoffRate": 2,
            "JitterStrategy": "FULL"} in look["Retry"]
    assert LAMBDA_THROTTLED == "Lambda.TooManyRequestsException"
    assert look["Catch"] == [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Key failed"}]


# ---- props that could never work --------------------------------------------------------------------


def test_an_items_key_longer_than_s3_allows_is_refused():
    stack = new_stack()
    bucket = s3.Bucket(stack, "Keys")
    build(stack, items_bucket=bucket, items_key="k" * 1024)  # at the limit: fine
    with pytest.raises(InvalidPropsError, match="items_key is 1,025 bytes of UTF-8; S3 keys are at most 1,024 bytes"):
        build(new_stack(), items_bucket=s3.Bucket(new_stack(), "Other"), items_key="é" * 512 + "k")


def test_an_items_key_with_a_lone_surrogate_is_refused():
    stack = new_stack()
    with pytest.raises(InvalidPropsError, match=r"items_key is not valid Unicode \(a lone surrogate at character 4\)"):
        build(stack, items_bucket=s3.Bucket(stack, "Keys"), items_key="keys\ud800.jsonl")


def test_a_token_items_format_is_refused_by_name():
    stack = new_stack()
    fmt = cdk.CfnParameter(stack, "Format", type="String").value_as_string
    with pytest.raises(InvalidPropsError, match="items_format is a deploy-time string"):
        build(stack, items_bucket=s3.Bucket(stack, "Keys"), items_key="keys.jsonl", items_format=fmt)


# ---- the state machine's log level is the user's choice (issue 27) ----------------------------------

MODEL = BedrockModel.from_id(NOVA)
MAP_REQUEST = ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=50)


def bounded(stack: cdk.Stack, **options) -> BoundedMap:
    return BoundedMap(stack, "Map", max_concurrency=4, model=MODEL, request=MAP_REQUEST,
                      state_machine_options=StateMachineOptions(**options))


def test_the_log_level_defaults_to_all_without_execution_data():
    stack = new_stack()
    bounded(stack)
    logging = only(Template.from_stack(stack).to_json(), "AWS::StepFunctions::StateMachine")["Properties"]["LoggingConfiguration"]
    assert logging["Level"] == "ALL" and logging["IncludeExecutionData"] is False


@pytest.mark.parametrize("level", [sfn.LogLevel.ERROR, sfn.LogLevel.FATAL])
def test_a_lower_log_level_reaches_the_template(level):
    stack = new_stack()
    bounded(stack, log_level=level)
    logging = only(Template.from_stack(stack).to_json(), "AWS::StepFunctions::StateMachine")["Properties"]["LoggingConfiguration"]
    assert logging["Level"] == level.value and "Destinations" in logging


def test_log_level_off_creates_no_log_group_and_no_log_delivery_grant():
    stack = new_stack()
    bounded(stack, log_level=sfn.LogLevel.OFF)
    template = Template.from_stack(stack).to_json()
    assert only(template, "AWS::StepFunctions::StateMachine")["Properties"]["LoggingConfiguration"] == {"Level": "OFF"}
    assert resources(template, "AWS::Logs::LogGroup") == {}
    actions = str([p["Properties"]["PolicyDocument"] for p in resources(template, "AWS::IAM::Policy").values()])
    assert "logs:CreateLogDelivery" not in actions and "xray:PutTraceSegments" in actions


@pytest.mark.parametrize("extra", [
    {"log_group": "log_group"}, {"log_retention": logs.RetentionDays.ONE_WEEK}, {"log_execution_data": True},
])
def test_log_level_off_refuses_options_it_would_ignore(extra):
    stack = new_stack()
    if extra.get("log_group") == "log_group":
        extra = {"log_group": logs.LogGroup(stack, "Group")}
    (name,) = extra
    with pytest.raises(InvalidPropsError, match=f"{name}.*log_level is OFF|log_level OFF"):
        StateMachineOptions(log_level=sfn.LogLevel.OFF, **extra)


def test_a_lower_log_level_is_the_users_own_nag_finding():
    from cdk_nag import AwsSolutionsChecks
    from conftest import nag_violations

    def findings(**options) -> list[str]:
        outdir = tempfile.mkdtemp()
        app = cdk.App(outdir=outdir)
        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
        bounded(cdk.Stack(app, "Nag", env=cdk.Environment(account="111122223333", region="us-east-1")), **options)
        with contextlib.suppress(RuntimeError):  # ValidationFailed: the findings are in the report
            app.synth()
        return [line for line in nag_violations(Path(outdir)) if "SF1" in line]

    assert findings() == []
    assert findings(log_level=sfn.LogLevel.ERROR) == ["AwsSolutions-SF1 at Nag/Map/StateMachine/Resource"]


# ---- a corrupted stored answer is repaired by the next run (issue 22.1) -----------------------------


def _newer_than_the_run() -> str:
    """A stored sequence newer than the run about to start (its sequence is its start) and within the
    clock skew, so only the item's invalidity, never its order, can let the run replace it."""
    import time

    return str(int(time.time() * 1000) + 30_000)


@pytest.mark.parametrize("corrupt", [
    {"sequence": {"S": "999"}},                      # a string where a number belongs
    {"sequence": {"N": str(10**38 - 1)}},            # so large that nothing could ever supersede it
    {"generated_at": {"S": "2999-01-01T00:00:00Z"}},  # fresh forever
    {"answer": {"N": "42"}},                          # an answer that is not text
    {"output_tokens": {"S": "5"}},                    # every attribute readers type-check (issue 22 audit)
    {"stop_reason": {"N": "1"}},
    {"input_tokens": {"N": "-1"}},                    # a negative count
    {"generated_at": {"S": "1969-12-31T23:59:59Z"}},  # before any clock that wrote answers
], ids=["string-sequence", "huge-sequence", "future-generated-at", "numeric-answer", "string-output-tokens",
        "numeric-stop-reason", "negative-input-tokens", "generated-before-1970"])
def test_a_run_replaces_a_corrupted_stored_answer(monkeypatch, corrupt):
    from pacer_runtime import answers
    from test_precompute import build as build_reference
    from test_precompute import emulator, offline, tickers

    stack, pre = build_reference()
    items = tickers(1)
    with emulator() as bedrock, StateMachineRunner(offline(stack, items, monkeypatch), bedrock=bedrock) as runner:
        table = runner.physical_name(pre.answer_store.table)
        item = {"pk": {"S": "ticker-morning#t0"}, "answer": {"S": "stale"}, "model_id": {"S": NOVA},
                "request_id": {"S": "router#1"}, "sequence": {"N": _newer_than_the_run()},
                "generated_at": {"S": "2020-01-01T00:00:00Z"}}
        runner.dynamodb.put_item(TableName=table, Item={**item, **corrupt})
        run = runner.run({"items": items}, timeout=120).raise_for_status()
        repaired = answers.get_answer(runner.dynamodb, table, "ticker-morning#t0")
    assert int(item["sequence"]["N"]) > int(run.output["sequence"])  # the order alone would keep the stored item
    assert (run.output["written"], run.output["superseded"]) == (1, 0)
    assert repaired is not None and repaired.text != "stale" and repaired.sequence == int(run.output["sequence"])


def test_the_control_a_valid_newer_item_is_kept_by_the_run(monkeypatch):
    """The same stored item, uncorrupted: the run's write is superseded (so the cases above pass only
    because the condition judges the item invalid)."""
    from pacer_runtime import answers
    from test_precompute import build as build_reference
    from test_precompute import emulator, offline, tickers

    stack, pre = build_reference()
    items = tickers(1)
    with emulator() as bedrock, StateMachineRunner(offline(stack, items, monkeypatch), bedrock=bedrock) as runner:
        table = runner.physical_name(pre.answer_store.table)
        runner.dynamodb.put_item(TableName=table, Item={
            "pk": {"S": "ticker-morning#t0"}, "answer": {"S": "newer"}, "model_id": {"S": NOVA},
            "request_id": {"S": "router#1"}, "sequence": {"N": _newer_than_the_run()},
            "generated_at": {"S": "2020-01-01T00:00:00Z"}})
        run = runner.run({"items": items}, timeout=120).raise_for_status()
        kept = answers.get_answer(runner.dynamodb, table, "ticker-morning#t0")
    assert (run.output["written"], run.output["superseded"]) == (0, 1)
    assert kept is not None and kept.text == "newer"


@pytest.mark.parametrize("corrupt", [
    {"output_tokens": {"N": "2.5"}},  # fractional: DynamoDB conditions have no arithmetic
    {"sequence": {"N": "{newer}.5"}},  # fractional, and newer than the run
    {"generated_at": {"S": "2020-02-30T00:00:00Z"}},  # of a stamp's size and range, but no such day
    {"generated_at": {"S": "2020-01-01 00:00:00+00:00"}},  # a time, but not the form writers store
], ids=["fractional-output-tokens", "fractional-sequence", "30-february", "not-the-writers-time-form"])
def test_what_no_condition_can_judge_is_repaired_by_the_run_itself(monkeypatch, corrupt):
    """The run's DynamoDB task cannot tell 2.5 from 2 or a 30 February from a day, so its condition keeps
    the item; the failed condition's second look (put_answer in the construct's prepare function, judging
    with answers.check_item as readers do) replaces exactly that item, though its sequence is newer, and
    keeps the valid newer item beside it. No other writer has to touch the key. The runner calls the
    prepare function itself (genai-pacer's handler asset), with the environment the template gives it."""
    from pacer_runtime import answers
    from test_precompute import build as build_reference
    from test_precompute import emulator, offline, tickers

    stack, pre = build_reference()
    items = tickers(2)
    newer = _newer_than_the_run()
    corrupt = {name: {kind: text.format(newer=newer)} for name, value in corrupt.items() for kind, text in value.items()}
    with emulator() as bedrock, StateMachineRunner(offline(stack, items, monkeypatch), bedrock=bedrock) as runner:
        table = runner.physical_name(pre.answer_store.table)
        valid = {"answer": {"S": "newer"}, "model_id": {"S": NOVA}, "request_id": {"S": "router#1"},
                 "sequence": {"N": newer}, "generated_at": {"S": "2020-01-01T00:00:00Z"}}
        runner.dynamodb.put_item(TableName=table, Item={"pk": {"S": "ticker-morning#t0"}, **valid, **corrupt})
        runner.dynamodb.put_item(TableName=table, Item={"pk": {"S": "ticker-morning#t1"}, **valid})  # the control
        stored = {key: runner.dynamodb.get_item(TableName=table, Key={"pk": {"S": key}})["Item"]
                  for key in ("ticker-morning#t0", "ticker-morning#t1")}
        run = runner.run({"items": items}, timeout=120).raise_for_status()
        repaired = answers.get_answer(runner.dynamodb, table, "ticker-morning#t0")
        kept = answers.get_answer(runner.dynamodb, table, "ticker-morning#t1")
    prepare_id = stack.resolve(stack.get_logical_id(pre.prepare_function.node.default_child))
    assert answers.check_item(stored["ticker-morning#t0"]) is not None  # invalid to readers
    assert answers.check_item(stored["ticker-morning#t1"]) is None
    assert int(newer) > int(run.output["sequence"])  # the order alone would keep both stored items
    assert (run.output["written"], run.output["superseded"], run.output["failed"]) == (1, 1, 0)
    assert repaired is not None and repaired.text != "newer" and repaired.sequence == int(run.output["sequence"])
    assert repaired.request_id.startswith("precompute#") and repaired.output_tokens == 100
    assert kept is not None and kept.text == "newer" and kept.sequence == int(newer)
    assert run.lambda_calls == [prepare_id, prepare_id]  # both writes failed the condition: one second look each


def test_the_second_look_keeps_the_tiers_of_the_answer_it_writes(monkeypatch):
    """The second look rebuilds the answer from the run's item (answers.Answer.from_item): the tier the
    call asked for and the tier that served it reach the store through it too."""
    from pacer_runtime import answers
    from test_precompute import REQUEST, emulator, offline, tickers
    from test_precompute import build as build_reference

    tiered = ConverseRequest(prompt=REQUEST.prompt, max_tokens=REQUEST.max_tokens, service_tier="flex")
    stack, pre = build_reference(request=tiered)
    items = tickers(1)
    newer = _newer_than_the_run()
    with emulator() as bedrock, StateMachineRunner(offline(stack, items, monkeypatch), bedrock=bedrock) as runner:
        table = runner.physical_name(pre.answer_store.table)
        runner.dynamodb.put_item(TableName=table, Item={
            "pk": {"S": "ticker-morning#t0"}, "answer": {"S": "newer"}, "model_id": {"S": NOVA}, "request_id": {"S": "router#1"},
            "sequence": {"N": newer}, "generated_at": {"S": "2020-01-01T00:00:00Z"}, "output_tokens": {"N": "2.5"}})
        run = runner.run({"items": items}, timeout=120).raise_for_status()
        repaired = answers.get_answer(runner.dynamodb, table, "ticker-morning#t0")
    assert run.output["written"] == 1 and len(run.lambda_calls) == 1  # written by the second look
    assert repaired is not None and (repaired.requested_tier, repaired.served_tier) == ("flex", "flex")


# ---- 27.3: what a run writes under its own names -----------------------------------------------------


def test_a_run_writes_its_execution_id_the_run_start_sequence_and_locks_under_its_own_claim(monkeypatch):
    """Every answer of a run carries request_id "precompute#<execution name>" and the run's start as its
    sequence (the prepare step's clock), and the run lock is "claim#precompute-run#<state machine name>":
    in the synthesized definition and in what an executed run sends and stores."""
    import json
    import time

    from pacer_runtime import answers
    from test_precompute import build as build_reference
    from test_precompute import emulator, offline, tickers

    stack, pre = build_reference()
    states = all_states(definition(only(Template.from_stack(stack).to_json(), "AWS::StepFunctions::StateMachine")))
    assert states["Take run lock"]["Parameters"]["Item"]["pk"] == {
        "S.$": "States.Format('claim#precompute-run#{}', $$.StateMachine.Name)"}
    assert states["Keys"]["ItemSelector"]["requestId.$"] == "States.Format('precompute#{}', $$.Execution.Name)"
    assert states["Keys"]["ItemSelector"]["sequence.$"] == "$.run.sequence"

    items = tickers(2)
    before = int(time.time() * 1000)
    template = offline(stack, items, monkeypatch)
    after = int(time.time() * 1000)
    (machine,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::StepFunctions::StateMachine"]
    prepared = json.loads(machine["Properties"]["DefinitionString"])["States"]["Prepare run"]["Result"]
    assert before <= int(prepared["sequence"]) <= after  # the run's start, in epoch milliseconds
    with emulator() as bedrock, StateMachineRunner(template, bedrock=bedrock) as runner:
        table = runner.physical_name(pre.answer_store.table)
        name = runner.state_machines[0].name
        run = runner.run({"items": items}, name="morning-run-1", timeout=120).raise_for_status()
        stored = [answers.get_answer(runner.dynamodb, table, item["key"].casefold()) for item in items]
    assert [(a.request_id, a.sequence) for a in stored] == [("precompute#morning-run-1", int(prepared["sequence"]))] * 2
    assert run.output["sequence"] == prepared["sequence"]
    sent = [json.loads(event["taskScheduledEventDetails"]["parameters"]) for event in run.history
            if event["type"] == "TaskScheduled" and event["taskScheduledEventDetails"]["resource"] in ("putItem", "deleteItem")]
    locks = [p for p in sent if "Key" in p or p["Item"]["pk"]["S"].startswith(answers.CLAIM_PREFIX)]
    assert [p.get("Item", p.get("Key"))["pk"]["S"] for p in locks] == [f"claim#precompute-run#{name}"] * 2  # take, release
    assert locks[0]["Item"]["owner"]["S"] == "morning-run-1"
