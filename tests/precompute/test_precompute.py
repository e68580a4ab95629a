"""ScheduledPrecompute: the schedule, the bounded Map, the answer write that agrees with put_answer,
runs executed offline (throttles, failed keys, overlap, newer answers), the reference stack under
cdk-nag, and every bad prop."""

from __future__ import annotations

import copy
import json
import math
import time

import aws_cdk as cdk
import pytest
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.assertions import Annotations, Match, Template
from genai_pacer import (
    AnswerStore,
    BedrockModel,
    BedrockRetry,
    ConverseRequest,
    InvalidPropsError,
    StateMachineOptions,
    planning,
)
from genai_pacer.precompute.scheduled import RUN_LOCK_PREFIX, ScheduledPrecompute, answer_schema
from genai_pacer.testing import BedrockEmulator, ModelSpec
from genai_pacer.testing.sfn import StateMachineRunner
from helpers import all_states, definition, kms_statements, new_stack, only, resources
from pacer_runtime import answers

NOVA = "amazon.nova-lite-v1:0"
MODEL = BedrockModel.from_id(NOVA)
REQUEST = ConverseRequest(
    prompt=sfn.JsonPath.format("Morning note for {}", sfn.JsonPath.string_at("$.item.ticker")), max_tokens=120
)
CRON = scheduler.ScheduleExpression.cron(minute="0", hour="6", week_day="MON-FRI", time_zone=cdk.TimeZone.EUROPE_LONDON)
ITEMS = [{"key": f"ticker-morning#T{i}", "ticker": f"T{i}"} for i in range(3)]


def build(stack: cdk.Stack | None = None, **props) -> tuple[cdk.Stack, ScheduledPrecompute]:
    stack = stack or new_stack()
    store = props.pop("answer_store", None) or AnswerStore(stack, "Store")
    defaults = {"answer_store": store, "model": MODEL, "request": REQUEST, "max_concurrency": 4, "schedule": CRON, "items": ITEMS}
    if "items_bucket" in props:
        defaults.pop("items")
    return stack, ScheduledPrecompute(stack, "Pre", **{**defaults, **props})


def states_of(stack: cdk.Stack) -> dict[str, dict]:
    return all_states(definition(only(Template.from_stack(stack).to_json(), "AWS::StepFunctions::StateMachine")))


# ---- template ------------------------------------------------------------------------------------


def test_the_schedule_is_a_cron_in_the_time_zone_with_no_flexible_window_and_a_dlq():
    stack, _ = build()
    schedule = only(Template.from_stack(stack).to_json(), "AWS::Scheduler::Schedule")["Properties"]
    assert schedule["ScheduleExpression"] == "cron(0 6 ? * MON-FRI *)"
    assert schedule["ScheduleExpressionTimezone"] == "Europe/London"
    assert schedule["FlexibleTimeWindow"] == {"Mode": "OFF"}
    target = schedule["Target"]
    assert target["RetryPolicy"] == {"MaximumEventAgeInSeconds": 3600, "MaximumRetryAttempts": 3}
    assert "Arn" in target["DeadLetterConfig"]
    assert json.loads(target["Input"]) == {"items": ITEMS}


def test_the_map_is_bounded_and_each_model_call_retries_throttles_with_full_jitter():
    stack, _ = build(max_concurrency=7)
    states = states_of(stack)
    assert states["Keys"]["MaxConcurrency"] == 7
    (retry,) = states["Call model"]["Retry"]
    assert "BedrockRuntime.ThrottlingException" in retry["ErrorEquals"]
    assert retry["JitterStrategy"] == "FULL" and retry["MaxAttempts"] == 6
    assert states["Call model"]["Catch"][0]["ErrorEquals"] == ["States.ALL"]


def test_the_answer_write_is_put_answers_item_and_condition():
    stack, _ = build()
    write = states_of(stack)["Write answer"]
    assert write["Resource"].endswith(":states:::dynamodb:putItem")
    parameters = write["Parameters"]
    probe = answers.Answer(key="k", text="t", model_id=NOVA, request_id="r", sequence=1, expires_at=2)
    assert set(parameters["Item"]) == set(probe.to_item())  # sent_at is written only when set; a run has none
    assert parameters["ConditionExpression"] == answers._NEWER_THAN_STORED
    assert parameters["ExpressionAttributeNames"] == answers._NEWER_THAN_STORED_NAMES
    constants = {name: value for name, value in parameters["ExpressionAttributeValues"].items()
                 if name in answers._NEWER_THAN_STORED_CONSTANTS}
    assert constants == answers._NEWER_THAN_STORED_CONSTANTS
    assert set(parameters["ExpressionAttributeValues"]) == (
        set(answers._NEWER_THAN_STORED_CONSTANTS) | {":seq", ":rid", ":maxSeq", ":maxGen"})
    assert [c["ErrorEquals"] for c in write["Catch"]] == [["DynamoDB.ConditionalCheckFailedException"], ["States.ALL"]]


def test_without_a_ttl_no_expiry_is_written():
    stack = new_stack()
    _, _ = build(stack, answer_store=AnswerStore(stack, "Store", answer_ttl=None))
    assert "expires_at" not in states_of(stack)["Write answer"]["Parameters"]["Item"]


def test_the_schema_is_read_from_the_handlers_module():
    schema = answer_schema()
    assert (schema.partition_key, schema.ttl_attribute, schema.claim_prefix) == (
        answers.PARTITION_KEY, answers.TTL_ATTRIBUTE, answers.CLAIM_PREFIX)
    assert schema.newer_than_stored == answers._NEWER_THAN_STORED


def test_a_rate_plan_is_fitted_to_the_inline_map():
    profile = planning.TokenProfile(input_tokens=500, output_tokens=200, max_tokens=300, burndown=1)
    plan = planning.sustainable_rate(profile, tpm_quota=10_000_000, call_seconds=5)
    stack, _ = build(max_concurrency=plan)
    assert states_of(stack)["Keys"]["MaxConcurrency"] == 40
    Annotations.from_stack(stack).has_warning("/Test/Pre", Match.string_like_regexp("at most 40"))


def test_items_in_s3_use_a_distributed_map_without_a_result_writer():
    stack = new_stack()
    bucket = s3.Bucket(stack, "Keys", enforce_ssl=True)
    build(stack, items_bucket=bucket, items_key="keys.jsonl", max_concurrency=500)
    keys = states_of(stack)["Keys"]
    assert keys["ItemProcessor"]["ProcessorConfig"]["Mode"] == "DISTRIBUTED"
    assert keys["MaxConcurrency"] == 500 and keys["ItemReader"]["ReaderConfig"]["InputType"] == "JSONL"
    assert "ResultWriter" not in keys  # each key's tiny result comes back to the run, to be counted


KEY_ARN = "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def _machine_role_policy(template: dict) -> str:
    (policy,) = [k for k in resources(template, "AWS::IAM::Policy") if k.startswith("PreStateMachineRoleDefaultPolicy")]
    return policy


def test_the_run_may_decrypt_items_in_a_bucket_encrypted_with_its_own_key():
    """The distributed Map reads the items object with the state machine role: kms:Decrypt on exactly
    the bucket's key, on that role only (the store's AWS-managed encryption needs no grant)."""
    stack = new_stack()
    key = kms.Key(stack, "ItemsKey")
    build(stack, items_bucket=s3.Bucket(stack, "Keys", encryption_key=key), items_key="keys.jsonl")
    template = Template.from_stack(stack).to_json()
    key_id = next(k for k in resources(template, "AWS::KMS::Key") if k.startswith("ItemsKey"))  # beside the logs key
    assert kms_statements(template) == {_machine_role_policy(template): [
        {"Action": "kms:Decrypt", "Effect": "Allow", "Resource": {"Fn::GetAtt": [key_id, "Arn"]}}]}


def test_an_imported_items_bucket_takes_its_key_as_a_prop():
    stack = new_stack()
    build(stack, items_bucket=s3.Bucket.from_bucket_name(stack, "Keys", "users-keys"), items_key="keys.jsonl",
          items_bucket_key=kms.Key.from_key_arn(stack, "ItemsKey", KEY_ARN))
    template = Template.from_stack(stack).to_json()
    assert kms_statements(template) == {_machine_role_policy(template): [
        {"Action": "kms:Decrypt", "Effect": "Allow", "Resource": KEY_ARN}]}


def test_an_items_bucket_key_that_cannot_be_the_buckets_key_is_refused():
    stack = new_stack()
    with pytest.raises(InvalidPropsError) as refused:
        build(stack, items_bucket_key=kms.Key.from_key_arn(stack, "ItemsKey", KEY_ARN))
    assert refused.value.problems == [
        "items_bucket_key is set without items_bucket; inline items are in the schedule's input, not in S3: drop "
        "items_bucket_key, or pass items_bucket and items_key"]
    stack = new_stack()
    with pytest.raises(InvalidPropsError) as refused:
        build(stack, items_bucket=s3.Bucket(stack, "Keys", encryption_key=kms.Key(stack, "Own")), items_key="k.jsonl",
              items_bucket_key=kms.Key.from_key_arn(stack, "Other", KEY_ARN))
    assert refused.value.problems == [
        "items_bucket_key is Test/Other but items_bucket already knows its own key, Test/Own: the grants would name a "
        "key that does not encrypt the bucket; drop items_bucket_key"]


def test_a_cron_without_a_time_zone_and_a_rate_are_warned():
    stack, _ = build(schedule=scheduler.ScheduleExpression.cron(minute="0", hour="6"))
    Annotations.from_stack(stack).has_warning("/Test/Pre", Match.string_like_regexp("runs in UTC"))
    stack, _ = build(schedule=scheduler.ScheduleExpression.rate(cdk.Duration.hours(1)))
    Annotations.from_stack(stack).has_warning("/Test/Pre", Match.string_like_regexp("fixed rate"))


def test_metric_failed_keys_reads_the_handlers_name():
    _, pre = build()
    metric = pre.metric_failed_keys()
    assert (metric.namespace, metric.metric_name) == ("GenaiPacer", "PrecomputeFailedKeys")
    assert "StateMachine" in metric.dimensions


def test_the_distributed_variant_passes_nag():
    from conftest import nag_findings

    def compose(stack):
        bucket = s3.Bucket(stack, "Keys", enforce_ssl=True, server_access_logs_prefix="logs/")
        build(stack, items_bucket=bucket, items_key="keys.json", items_format="json", max_concurrency=100)

    assert nag_findings(compose) == []


# ---- the prepare function -----------------------------------------------------------------------


def prepare_module(monkeypatch, ttl: str = "604800"):
    import importlib
    import sys

    monkeypatch.setenv("LOCK_SECONDS", "21600")
    monkeypatch.setenv("ANSWER_TTL_SECONDS", ttl)
    sys.modules.pop("scheduled_precompute.handler", None)
    return importlib.import_module("scheduled_precompute.handler")


def test_prepare_returns_the_clock_as_dynamodb_numbers(monkeypatch):
    prepare = prepare_module(monkeypatch)
    run = prepare.handler({}, now=1_800_000_000.25)
    assert (run["sequence"], run["now"], run["lockExpiresAt"], run["expiresAt"]) == (
        "1800000000250", "1800000000", str(1_800_000_000 + 21600 + 1), str(1_800_000_000 + 604800 + 1))
    assert (run["items"], run["invalid"], run["keys"]) == ([], [], 0)
    assert "expiresAt" not in prepare_module(monkeypatch, ttl="").handler({}, now=1.0)


def test_prepare_normalizes_inline_keys_and_lists_the_bad_ones(monkeypatch):
    prepare = prepare_module(monkeypatch)
    run = prepare.handler({"items": [
        {"key": " Ticker-Morning#AAPL ", "ticker": "AAPL"},
        {"key": "ticker-morning#aapl", "ticker": "again"},
        {"key": "claim#x"},
        {"ticker": "no key"},
        "just a string",
    ]})
    assert run["items"] == [{"key": "ticker-morning#aapl", "ticker": "AAPL"}]
    assert [(i["key"], i["error"]) for i in run["invalid"]] == [
        ("ticker-morning#aapl", "DuplicateKey"), ("claim#x", "InvalidKey"), ("items[3]", "InvalidKey"),
        ("items[4]", "InvalidItem")]
    assert run["keys"] == 5


# ---- offline runs -------------------------------------------------------------------------------


def offline(stack: cdk.Stack, items: list | None, monkeypatch, *, ttl: str = "2592000") -> dict:
    """The template with 'Prepare run' replaced by a Pass holding what the real handler returns for
    these items, so a test knows the run's clock (its sequence) before the run. The runner runs the
    prepare function itself (the tests "as built" below); these tests only fix its clock."""
    prepare = prepare_module(monkeypatch, ttl=ttl)
    template = Template.from_stack(stack).to_json()
    (spec,) = StateMachineRunner(template).state_machines
    asl = copy.deepcopy(spec.definition)
    run = prepare.handler({"items": items} if items is not None else {})
    asl["States"]["Prepare run"] = {"Type": "Pass", "Result": run, "ResultPath": "$.run", "Next": "Take run lock"}
    template = copy.deepcopy(template)
    template["Resources"][spec.logical_id]["Properties"]["DefinitionString"] = json.dumps(asl)
    return template


def emulator(**spec) -> BedrockEmulator:
    return BedrockEmulator([ModelSpec(NOVA, **{"tpm_quota": 4_000, "answer_tokens": 100, "output_tokens_per_second": 50, **spec})],
                           time_scale=60, seed=11)


def tickers(n: int) -> list[dict]:
    return [{"key": f"ticker-morning#T{i}", "ticker": f"T{i}"} for i in range(n)]


def test_a_run_answers_every_key_through_throttles_and_the_router_reads_them(monkeypatch):
    # Generous retries: the machine is shared, so how many retries a key needs varies run to run.
    stack, pre = build(max_concurrency=8, retry=BedrockRetry(max_retries=30))
    items = tickers(16)
    with emulator(tpm_quota=900) as bedrock, StateMachineRunner(offline(stack, items, monkeypatch), bedrock=bedrock) as runner:
        run = runner.run({"items": items}, timeout=180).raise_for_status()
        table = runner.physical_name(pre.answer_store.table)
        stored = [answers.get_answer(runner.dynamodb, table, answers.normalize_key(i["key"])) for i in items]
        metrics = runner._boto3.client("cloudwatch", region_name="us-east-1").list_metrics(Namespace="GenaiPacer")["Metrics"]
    assert run.throttled > 0, "900 TPM holds 7 reservations of 125 tokens; 8 calls at once must throttle"
    assert run.model_calls == len(items) + run.throttled  # every throttled call was retried until it succeeded
    assert run.output["written"] == 16 and run.output["failed"] == 0 and run.output["failedKeys"] == []
    assert all(a is not None and a.text and a.model_id == NOVA for a in stored)
    assert {a.sequence for a in stored} == {int(run.output["sequence"])}  # one run, one order
    assert all(a.expires_at and a.served_latency == "standard" and a.output_tokens == 100 for a in stored)
    assert [m["MetricName"] for m in metrics] == ["PrecomputeFailedKeys"]


def test_failed_keys_are_listed_and_counted_without_losing_the_others(monkeypatch):
    stack, pre = build(max_concurrency=1, tolerated_failed_keys=2)
    items = tickers(5) + [{"ticker": "no key"}]
    with emulator(tpm_quota=1_000_000) as bedrock, \
            StateMachineRunner(offline(stack, items, monkeypatch), bedrock=bedrock) as runner:
        bedrock.fail_next("ValidationException", count=1, message="malformed prompt")
        run = runner.run({"items": items}, timeout=120).raise_for_status()
        table = runner.physical_name(pre.answer_store.table)
        written = sum(answers.get_answer(runner.dynamodb, table, f"ticker-morning#t{i}") is not None for i in range(5))
    assert (run.output["written"], run.output["failed"]) == (4, 2)
    assert [k["error"] for k in run.output["failedKeys"]] == ["BedrockRuntime.ValidationException"]
    assert [k["error"] for k in run.output["invalidKeys"]] == ["InvalidKey"]
    assert written == 4


def test_more_failed_keys_than_tolerated_fail_the_run_after_writing_the_rest(monkeypatch):
    stack, pre = build(max_concurrency=2)
    items = tickers(4)
    with emulator(tpm_quota=1_000_000) as bedrock, \
            StateMachineRunner(offline(stack, items, monkeypatch), bedrock=bedrock) as runner:
        bedrock.fail_next("AccessDeniedException", count=1, message="no access")
        run = runner.run({"items": items}, timeout=120)
        table = runner.physical_name(pre.answer_store.table)
        lock = runner.dynamodb.get_item(TableName=table, Key={"pk": {"S": "claim#precompute-run#Pre"}}).get("Item")
        items_in_table = runner.dynamodb.scan(TableName=table)["Count"]
    assert (run.status, run.error) == ("FAILED", "PrecomputeFailedKeys")
    summary = json.loads(run.cause)
    assert (summary["written"], summary["failed"]) == (3, 1)
    assert items_in_table == 3 and lock is None  # the lock was released before the run failed


def test_a_run_that_finds_the_lock_held_skips_without_a_model_call(monkeypatch):
    stack, pre = build()
    items = tickers(3)
    with emulator() as bedrock, StateMachineRunner(offline(stack, items, monkeypatch), bedrock=bedrock) as runner:
        table = runner.physical_name(pre.answer_store.table)
        name = runner.state_machines[0].name
        lock = answers.CLAIM_PREFIX + RUN_LOCK_PREFIX
        owner = answers.claim(runner.dynamodb, table, name, seconds=600, prefix=lock)  # another run
        skipped = runner.run({"items": items}, timeout=60).raise_for_status()
        answers.release(runner.dynamodb, table, name, owner, prefix=lock)
        ran = runner.run({"items": items}, timeout=120).raise_for_status()
        free = answers.claim(runner.dynamodb, table, name, seconds=1, prefix=lock)
    assert skipped.output["skipped"] is True and skipped.model_calls == 0
    assert ran.output["written"] == 3 and free is not None  # the run released its lock


def test_an_expired_lock_does_not_block_a_run(monkeypatch):
    stack, pre = build()
    items = tickers(2)
    with emulator() as bedrock, StateMachineRunner(offline(stack, items, monkeypatch), bedrock=bedrock) as runner:
        table = runner.physical_name(pre.answer_store.table)
        name = runner.state_machines[0].name
        answers.claim(runner.dynamodb, table, name, seconds=60, now=1_000_000,
                      prefix=answers.CLAIM_PREFIX + RUN_LOCK_PREFIX)  # long dead
        run = runner.run({"items": items}, timeout=120).raise_for_status()
    assert run.output["written"] == 2


def test_a_newer_stored_answer_is_kept(monkeypatch):
    stack, pre = build()
    items = tickers(2)
    with emulator() as bedrock, StateMachineRunner(offline(stack, items, monkeypatch), bedrock=bedrock) as runner:
        table = runner.physical_name(pre.answer_store.table)
        newer = answers.Answer(key="ticker-morning#t0", text="router wrote this later", model_id=NOVA,
                               request_id="router#1", sequence=int(time.time() * 1000) + 30_000)  # within the skew
        answers.put_answer(runner.dynamodb, table, newer)
        run = runner.run({"items": items}, timeout=120).raise_for_status()
        kept = answers.get_answer(runner.dynamodb, table, "ticker-morning#t0")
    assert (run.output["written"], run.output["superseded"], run.output["failed"]) == (1, 1, 0)
    assert kept.text == "router wrote this later"


def test_keys_in_s3_run_through_the_distributed_map(monkeypatch):
    stack = new_stack()
    bucket = s3.Bucket(stack, "Keys", enforce_ssl=True)
    _, pre = build(stack, items_bucket=bucket, items_key="keys.jsonl", max_concurrency=5)
    items = tickers(6)
    with emulator(tpm_quota=1_000_000) as bedrock, \
            StateMachineRunner(offline(stack, None, monkeypatch), bedrock=bedrock) as runner:
        runner.s3.put_object(Bucket=runner.physical_name(bucket), Key="keys.jsonl",
                             Body="\n".join(json.dumps({**i, "key": i["key"].lower()}) for i in items).encode())
        run = runner.run({}, timeout=180).raise_for_status()
        table = runner.physical_name(pre.answer_store.table)
        stored = answers.get_answer(runner.dynamodb, table, "ticker-morning#t5")
    assert run.output["written"] == 6 and run.output["invalidKeys"] == []
    assert stored is not None and stored.text


# ---- runs as built: the prepare function called in process by the runner -----------------------------


def claim_of(runner: StateMachineRunner, table: str) -> dict | None:
    key = answers.CLAIM_PREFIX + RUN_LOCK_PREFIX + runner.state_machines[0].name
    return runner.dynamodb.get_item(TableName=table, Key={"pk": {"S": key}}).get("Item")


def test_a_run_as_built_calls_its_prepare_function_in_process_and_writes_every_answer():
    """No Pass in place of the Lambda task: the runner recognizes genai-pacer's handler asset and calls
    scheduled_precompute's handler with the function's environment from the template."""
    stack, pre = build(max_concurrency=3, tolerated_failed_keys=1)
    items = [{"key": " Ticker-Morning#AAPL ", "ticker": "AAPL"}, {"key": "ticker-morning#msft", "ticker": "MSFT"},
             {"key": "TICKER-MORNING#aapl", "ticker": "again"}]
    before = time.time()
    with emulator(tpm_quota=1_000_000) as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run({"items": items}, timeout=120).raise_for_status()
        table = runner.physical_name(pre.answer_store.table)
        stored = {key: answers.get_answer(runner.dynamodb, table, key) for key in ("ticker-morning#aapl", "ticker-morning#msft")}
        lock = claim_of(runner, table)
        count = runner.dynamodb.scan(TableName=table)["Count"]
    prepare_id = stack.resolve(stack.get_logical_id(pre.prepare_function.node.default_child))
    assert run.lambda_calls == [prepare_id]
    assert (run.output["written"], run.output["failed"]) == (2, 1)  # the repeated key, once normalized
    assert [(k["key"], k["error"]) for k in run.output["invalidKeys"]] == [("ticker-morning#aapl", "DuplicateKey")]
    assert all(a is not None and a.text and a.model_id == NOVA for a in stored.values())  # under the normalized keys
    assert {a.sequence for a in stored.values()} == {int(run.output["sequence"])} and int(run.output["sequence"]) >= before * 1000
    ttl = 30 * 86_400  # AnswerStore's default, from the function's ANSWER_TTL_SECONDS in the template
    assert all(before + ttl <= a.expires_at <= time.time() + ttl + 1 for a in stored.values())
    assert lock is None and count == 2  # the run lock released: only the answers remain


def test_a_prompt_with_an_apostrophe_reaches_the_model_whole_offline(capfd):
    """JsonPath.format escapes the template's apostrophe (\\' in the intrinsic); moto read the JSON text
    undecoded, printed "mismatched input" and ran with the prompt cut at the apostrophe (trial finding F3)."""
    stack, _ = build(request=ConverseRequest(
        prompt=sfn.JsonPath.format("Write today's {} desk note, \\{not a slot\\}.", sfn.JsonPath.string_at("$.item.ticker")),
        max_tokens=100))
    prompts: list[str] = []
    with emulator(tpm_quota=1_000_000, answer_tokens=lambda prompt: prompts.append(prompt) or 10) as bedrock, \
            StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run({"items": ITEMS[:1]}, timeout=120).raise_for_status()
    assert run.output["written"] == 1
    assert prompts == ["Write today's T0 desk note, {not a slot}."]
    assert "mismatched input" not in capfd.readouterr().err


def test_a_run_as_built_reads_its_keys_from_s3_through_the_distributed_map():
    """The JSONL item reader moto rejects ('JSONL' is not a valid InputTypeValue) is the runner's own."""
    stack = new_stack()
    bucket = s3.Bucket(stack, "Keys", enforce_ssl=True)
    _, pre = build(stack, items_bucket=bucket, items_key="keys/morning.jsonl", max_concurrency=4)
    items = tickers(5)
    with emulator(tpm_quota=1_000_000) as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        runner.s3.put_object(Bucket=runner.physical_name(bucket), Key="keys/morning.jsonl",
                             Body="\n".join(json.dumps({**i, "key": i["key"].lower()}) for i in items).encode())
        run = runner.run({}, timeout=180).raise_for_status()
        table = runner.physical_name(pre.answer_store.table)
        stored = [answers.get_answer(runner.dynamodb, table, i["key"].lower()) for i in items]
        lock = claim_of(runner, table)
    assert len(run.lambda_calls) == 1 and run.output["written"] == 5 and run.output["invalidKeys"] == []
    assert all(a is not None and a.sequence == int(run.output["sequence"]) for a in stored)
    assert lock is None


def test_the_prepare_function_gets_its_environment_resolved_and_its_failure_is_reported_short():
    """A deploy-time answer TTL reaches the function as a Ref to a parameter: without a value the run is
    refused naming it; with one the handler reads it; with a bad one the handler's ConfigurationError fails
    'Prepare run' as Step Functions names a raised exception, in a short message."""
    from genai_pacer.testing.sfn import OfflineExecutionError

    stack = new_stack()
    seconds = cdk.CfnParameter(stack, "AnswerTtl", type="Number").value_as_number
    _, pre = build(stack, answer_store=AnswerStore(stack, "Store", answer_ttl=cdk.Duration.seconds(seconds)))
    items = tickers(2)
    with emulator(tpm_quota=1_000_000) as bedrock:
        with StateMachineRunner(stack, bedrock=bedrock) as runner, pytest.raises(OfflineExecutionError) as refused:
            runner.run({"items": items})
        with StateMachineRunner(stack, bedrock=bedrock, values={"AnswerTtl": "3600"}) as runner:
            ran = runner.run({"items": items}, timeout=120).raise_for_status()
            expires = answers.get_answer(runner.dynamodb, runner.physical_name(pre.answer_store.table), "ticker-morning#t0").expires_at
        with StateMachineRunner(stack, bedrock=bedrock, values={"AnswerTtl": "a week"}) as runner:
            failed = runner.run({"items": items}, timeout=60)
            untouched = runner.dynamodb.scan(TableName=runner.physical_name(pre.answer_store.table))["Count"]
    assert "the environment of function" in str(refused.value) and "pass values={'AnswerTtl': ...}" in str(refused.value)
    assert 0 < expires - int(ran.output["sequence"]) / 1000 <= 3601
    assert (failed.status, failed.error, failed.failed_state) == ("FAILED", "ConfigurationError", "Prepare run")
    assert json.loads(failed.cause)["errorMessage"].startswith("ANSWER_TTL_SECONDS='a week' must be a whole number")
    assert failed.model_calls == 0 and untouched == 0  # no lock taken, no answer written
    message = failed.failure()
    assert message.startswith(f"{failed.state_machine} ended FAILED in state 'Prepare run': ConfigurationError")
    assert "ANSWER_TTL_SECONDS='a week'" in message and "handler.py" in message
    assert len(message) < 800 and len(message.splitlines()) <= 4, message


# ---- bad props ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"answer_store": "table"}, "pass an AnswerStore"),
        ({"model": None}, "model is required"),
        ({"request": None}, "request is required"),
        ({"request": {"prompt": "x"}}, "ConverseRequest"),
        ({"request": ConverseRequest(prompt="x", max_tokens=10, latency="optimized")}, "nobody waits for"),
        ({"schedule": "cron(0 6 * * ? *)"}, "ScheduleExpression"),
        ({"schedule": None}, "schedule is required"),
        ({"max_concurrency": 0}, "unbounded"),
        ({"max_concurrency": -1}, "1..40"),
        ({"max_concurrency": 41}, "1..40"),
        ({"max_concurrency": math.nan}, "not a finite number"),
        ({"max_concurrency": math.inf}, "not a finite number"),
        ({"max_concurrency": True}, "is a bool"),
        ({"max_concurrency": None}, "max_concurrency is required"),
        ({"max_concurrency": 2.5}, "not a whole number"),
        ({"items": None}, "exactly one of items"),
        ({"items": []}, "items is empty"),
        ({"items": "k1,k2"}, "pass a list"),
        ({"items": [{"ticker": "AAPL"}]}, "has no 'key' string"),
        ({"items": ["ticker-morning#aapl"]}, r"items\[0\]"),
        ({"items_key": "keys.jsonl"}, "items_key is set without items_bucket"),
        ({"items_format": "json"}, "applies to items_bucket only"),
        ({"items_format": "csv"}, "must be one of"),
        ({"tolerated_failed_keys": -1}, "below the minimum of 0"),
        ({"tolerated_failed_keys": 0.5}, "not a whole number"),
        ({"tolerated_failed_keys": math.inf}, "not a finite number"),
        ({"tolerated_failed_keys": None}, "tolerated_failed_keys is required"),
        # Issue 35.5: no more keys can fail than a run has (3 inline keys here).
        ({"tolerated_failed_keys": 4}, r"tolerated_failed_keys=4 exceeds the maximum of 3; .*at most 3 \(the run's 3 "
         r"inline keys\)"),
        ({"retry": 3}, "BedrockRetry"),
        ({"schedule_retry_attempts": 186}, "0..185"),
        ({"schedule_retry_attempts": -1}, "0..185"),
        ({"schedule_retry_attempts": math.nan}, "not a finite number"),
        ({"schedule_max_event_age": cdk.Duration.seconds(30)}, "60 s..24 h"),
        ({"schedule_max_event_age": cdk.Duration.hours(25)}, "60 s..24 h"),
        ({"schedule_max_event_age": 3600}, "pass a cdk.Duration"),
        ({"dead_letter_queue": "arn:aws:sqs:us-east-1:111122223333:dlq"}, "pass an sqs.Queue"),
        ({"state_machine_options": StateMachineOptions(state_machine_type=sfn.StateMachineType.EXPRESS)}, "EXPRESS"),
        ({"state_machine_options": {"timeout": 5}}, "StateMachineOptions"),
    ],
)
def test_bad_props_are_refused_with_the_rule(props, message):
    with pytest.raises(InvalidPropsError, match=message):
        build(**props)


def test_tolerated_failed_keys_is_bounded_by_what_a_run_can_list():
    """Issue 35.5: items in S3 are counted only at run time, but a run lists its failed keys in a state of
    at most 256 KiB, 24 bytes a key at the least: a tolerance above 10,922 could never apply."""
    build(tolerated_failed_keys=3)  # every inline key may fail

    def in_s3(tolerated: int) -> None:
        stack = new_stack()
        build(stack, items_bucket=s3.Bucket(stack, "Items"), items_key="keys.jsonl", tolerated_failed_keys=tolerated)

    in_s3(10_922)
    with pytest.raises(InvalidPropsError, match=r"tolerated_failed_keys=10923 exceeds the maximum of 10,922; .*a run "
                       r"lists its failed keys in its state, which Step Functions limits to 256 KiB, 24 bytes a key"):
        in_s3(10_923)


def test_distributed_bad_props():
    stack = new_stack()
    bucket = s3.Bucket(stack, "Keys")
    with pytest.raises(InvalidPropsError, match="items_key is required"):
        build(stack, items_bucket=bucket)
    with pytest.raises(InvalidPropsError, match="1..10000"):
        build(new_stack(), items_bucket=s3.Bucket(new_stack(), "B"), items_key="k", max_concurrency=10_001)


def test_tokens_and_your_own_queue_and_retry_are_accepted():
    stack = new_stack()
    token = cdk.Token.as_number(cdk.Fn.ref("Cap"))
    queue = sqs.Queue(stack, "MyDlq", enforce_ssl=True)
    _, pre = build(stack, max_concurrency=token, tolerated_failed_keys=token,
                   dead_letter_queue=queue, retry=BedrockRetry(max_retries=2))
    assert pre.dead_letter_queue is queue
    text = json.dumps(only(Template.from_stack(stack).to_json(), "AWS::StepFunctions::StateMachine"))
    assert '\\"MaxAttempts\\":2,' in text and '\\"MaxConcurrency\\":' in text


def test_inline_items_beyond_the_run_input_limit_are_refused_and_many_warn():
    big = [{"key": f"product-summary#{i:06d}", "ticker": "x" * 60} for i in range(3_000)]
    with pytest.raises(InvalidPropsError, match=r"items make a [\d,]+-byte run input, above the 256 KiB .* items_bucket"):
        build(items=big)
    from aws_cdk.assertions import Annotations, Match

    stack, _ = build(items=[{"key": f"k#{i}"} for i in range(1_001)])
    Annotations.from_stack(stack).has_warning(
        "/Test/Pre", Match.string_like_regexp("1,001 inline items: each key adds about 18 events")
    )


# ---- alarms (issue 34.12) ----------------------------------------------------------------------------


def test_failed_timed_out_and_missed_runs_alarm_with_the_users_actions():
    """A failed run, a run past its timeout and a start Scheduler gave up on all went unnoticed."""
    from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
    from aws_cdk import aws_sns as sns
    from helpers import resources

    stack = new_stack()
    topic = sns.Topic(stack, "Pager")
    _, pre = build(stack, alarm_actions=[cloudwatch_actions.SnsAction(topic)])
    template = Template.from_stack(stack).to_json()
    alarms = {r["Properties"]["MetricName"]: r["Properties"] for r in resources(template, "AWS::CloudWatch::Alarm").values()}
    assert sorted(pre.alarms) == ["FailedExecutions", "MissedStarts", "TimedOutExecutions"]
    assert sorted(alarms) == ["ApproximateNumberOfMessagesVisible", "ExecutionsFailed", "ExecutionsTimedOut"]
    machine = next(iter(resources(template, "AWS::StepFunctions::StateMachine")))
    for name in ("ExecutionsFailed", "ExecutionsTimedOut"):
        assert alarms[name]["Dimensions"] == [{"Name": "StateMachineArn", "Value": {"Ref": machine}}]
    missed = alarms["ApproximateNumberOfMessagesVisible"]
    dead_letters = next(k for k in resources(template, "AWS::SQS::Queue") if "DeadLetter" in k)
    assert missed["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [dead_letters, "QueueName"]}}]
    assert (missed["Namespace"], missed["Statistic"], missed["Threshold"]) == ("AWS/SQS", "Maximum", 0)
    topic_id = next(iter(resources(template, "AWS::SNS::Topic")))
    assert all(alarm["AlarmActions"] == [{"Ref": topic_id}] for alarm in alarms.values())


def test_a_users_dead_letter_queue_is_the_one_watched():
    from helpers import resources

    stack = new_stack()
    mine = sqs.Queue(stack, "MyDlq", enforce_ssl=True)
    build(stack, dead_letter_queue=mine)
    template = Template.from_stack(stack).to_json()
    (missed,) = [r["Properties"] for r in resources(template, "AWS::CloudWatch::Alarm").values()
                 if r["Properties"]["MetricName"] == "ApproximateNumberOfMessagesVisible"]
    mine_id = next(k for k in resources(template, "AWS::SQS::Queue") if k.startswith("MyDlq"))
    assert missed["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [mine_id, "QueueName"]}}]


# ---- service tiers (issue 37): the tier asked for and the tier that served, in every stored answer ----------


def test_a_tiered_run_stores_the_tier_each_answer_asked_for_and_the_tier_that_served_it(monkeypatch):
    """A reservation that holds the first call only: the next key's answer was served at default, and its
    item says so beside the tier the run asked for."""
    stack, pre = build(max_concurrency=1, request=ConverseRequest(
        prompt=sfn.JsonPath.format("Morning note for {}", sfn.JsonPath.string_at("$.item.ticker")), max_tokens=120,
        service_tier="reserved"))
    items = tickers(2)
    with emulator(reserved_input_tpm=10_000, reserved_output_tpm=150) as bedrock, \
            StateMachineRunner(offline(stack, items, monkeypatch), bedrock=bedrock) as runner:
        run = runner.run({"items": items}, timeout=120).raise_for_status()
        table = runner.physical_name(pre.answer_store.table)
        stored = [answers.get_answer(runner.dynamodb, table, i["key"].lower()) for i in items]
    served = [(call.service_tier, call.served_tier) for call in run.invocations]
    assert served == [("reserved", "reserved"), ("reserved", "default")]
    assert [(a.requested_tier, a.served_tier) for a in stored] == served
    assert run.output["written"] == 2


def test_a_response_that_names_no_tier_stores_an_empty_served_tier(monkeypatch):
    from genai_pacer.testing import responses

    monkeypatch.setattr(responses, "served_tier", lambda record: {})
    stack, pre = build(request=ConverseRequest(prompt="Morning note", max_tokens=120, service_tier="flex"))
    items = tickers(1)
    with emulator() as bedrock, StateMachineRunner(offline(stack, items, monkeypatch), bedrock=bedrock) as runner:
        runner.run({"items": items}, timeout=120).raise_for_status()
        item = runner.dynamodb.get_item(TableName=runner.physical_name(pre.answer_store.table),
                                        Key={"pk": {"S": "ticker-morning#t0"}})["Item"]
    assert (item["requested_tier"], item["served_tier"]) == ({"S": "flex"}, {"S": ""})
    assert answers.check_item(item) is None


def test_an_untiered_run_writes_no_tier_attributes():
    stack, _ = build()
    attributes = states_of(stack)["Write answer"]["Parameters"]["Item"]
    assert "requested_tier" not in attributes and "served_tier" not in attributes
    assert not [name for name in states_of(stack) if "tier" in name.lower()]


def test_a_deploy_time_tier_is_written_as_the_parameters_value():
    stack = new_stack()
    tier = cdk.CfnParameter(stack, "Tier", type="String").value_as_string
    build(stack, request=ConverseRequest(prompt="Morning note", max_tokens=120, service_tier=tier))  # type: ignore[arg-type]
    write = Template.from_stack(stack).to_json()
    text = json.dumps(write)
    assert '\\"requested_tier\\":{\\"S\\":\\"' in text and '{"Ref": "Tier"}' in text
