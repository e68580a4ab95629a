"""Every prop of QueuedInference, ScheduledPrecompute and BatchPrecompute given an unresolved token of each
kind (a CfnParameter's value_as_number, value_as_string, cdk.Duration.seconds of a number, value_as_list)
(issue 23, "Every prop: a token flows into the template correctly, or is refused by name").

A token reaches the template as a Ref where the value goes to CloudFormation unchanged (a cap, a count,
a threshold, a timeout, an environment value as a token-aware string), with the construct's logic intact
(an alarm's description names the parameter, the Map's cap is the parameter). Synth refuses it, naming the
prop and why, where the construct computes with the value at synth (a time budget, a timeout derived from
a batch, a visibility timeout derived from a timeout, an item reader chosen by format, a Duration in the
wrong unit for a field counted in hours or days). Props that take an object (a queue, a model, a bucket)
are refused by type. Never a token's number encoding (about -1.9e289) in the template or a message, never
an AttributeError, TypeError or jsii error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.assertions import Template
from genai_pacer import (
    AnswerStore,
    BedrockModel,
    ConverseRequest,
    InvalidPropsError,
    QueuedInference,
    StateMachineOptions,
)
from genai_pacer.precompute.batch import BatchPrecompute
from genai_pacer.precompute.scheduled import ScheduledPrecompute
from helpers import new_stack, only, resources, token_of

KINDS = ("number", "string", "duration", "list")
ENCODED_NUMBER = re.compile(r"e\+2\d\d|-1\.88815")  # how aws-cdk-lib encodes a number token
REF = {"Ref": "Tok"}
NOVA = BedrockModel.from_id("amazon.nova-lite-v1:0")
REQUEST = ConverseRequest(prompt=sfn.JsonPath.format("Morning note for {}", sfn.JsonPath.string_at("$.item.ticker")),
                          max_tokens=120)
CRON = scheduler.ScheduleExpression.cron(minute="0", hour="6", week_day="MON-FRI", time_zone=cdk.TimeZone.EUROPE_LONDON)
ITEMS = [{"key": "ticker-morning#aapl", "ticker": "AAPL"}]
#: ScheduledPrecompute props that apply only to items in S3: given with items_bucket and items_key.
DISTRIBUTED = ("items_bucket", "items_key", "items_format", "items_bucket_key")


def token(stack: cdk.Stack, kind: str) -> Any:
    """A CfnParameter named Tok, as the kind of token a user would pass."""
    return token_of(stack, kind, "Tok")


def holds_ref(value: Any) -> bool:
    if isinstance(value, dict):
        return value == REF or any(holds_ref(v) for v in value.values())
    if isinstance(value, list):
        return any(holds_ref(v) for v in value)
    return False


# ---- the constructs, each with the least it needs -------------------------------------------------------


def queued(stack: cdk.Stack, **props: Any) -> QueuedInference:
    return QueuedInference(stack, "Q", **{"model": NOVA, "max_concurrency": 8, **props})


def precompute(stack: cdk.Stack, **props: Any) -> ScheduledPrecompute:
    defaults: dict[str, Any] = {"answer_store": AnswerStore(stack, "Store"), "model": NOVA, "request": REQUEST,
                                "max_concurrency": 4, "schedule": CRON}
    if set(props) & set(DISTRIBUTED):
        defaults.update(items_bucket=s3.Bucket(stack, "Keys"), items_key="keys/today.jsonl")
    else:
        defaults["items"] = ITEMS
    return ScheduledPrecompute(stack, "Pre", **{**defaults, **props})


def batch(stack: cdk.Stack, **props: Any) -> BatchPrecompute:
    return BatchPrecompute(stack, "Batch", **{"model": NOVA, "max_tokens": 300, **props})


BUILDERS: dict[str, Callable[..., Any]] = {"queued": queued, "precompute": precompute, "batch": batch}

QUEUED_PROPS = ("model", "max_concurrency", "queue", "dead_letter_queue", "max_receive_count", "batch_size",
                "max_batching_window", "timeout", "visibility_timeout", "reserved_concurrency", "memory_size",
                "answer_store", "latency_optimized", "service_tier", "bedrock_max_attempts", "max_output_tokens",
                "output_tokens_per_second", "time_to_first_token", "encryption_key", "queue_encryption_key",
                "dead_letter_queue_encryption_key", "log_retention", "max_message_age", "worker_error_threshold",
                "worker_throttle_threshold", "dead_letter_threshold", "alarm_actions", "ledger")
PRECOMPUTE_PROPS = ("answer_store", "model", "request", "max_concurrency", "schedule", "items", "items_bucket",
                    "items_key", "items_format", "tolerated_failed_keys", "retry", "schedule_retry_attempts",
                    "schedule_max_event_age", "dead_letter_queue", "state_machine_options", "alarm_actions", "items_bucket_key",
                    "ledger")
BATCH_PROPS = ("model", "answer_store", "max_tokens", "system_prompt", "temperature", "invocation_type", "input_bucket",
               "output_bucket", "items_bucket", "items_prefix", "input_prefix", "output_prefix", "encryption_key",
               "access_logs_bucket", "object_expiration", "min_records_per_job", "max_records_per_job",
               "max_records_per_file", "max_job_bytes", "max_file_bytes", "max_concurrent_jobs", "job_timeout",
               "status_check_interval", "job_name_prefix", "on_demand_fallback", "write_concurrency",
               "encryption_key_for_logs", "log_retention", "state_machine_options", "alarm_actions", "input_bucket_key", "output_bucket_key", "items_bucket_key")
TABLE = {"queued": (QueuedInference, QUEUED_PROPS), "precompute": (ScheduledPrecompute, PRECOMPUTE_PROPS),
         "batch": (BatchPrecompute, BATCH_PROPS)}
EVERY_TOKEN = [(construct, prop, kind) for construct, (_, props) in TABLE.items() for prop in props for kind in KINDS]


# ---- where a passing token lands ------------------------------------------------------------------------


def typed(template: dict, type_name: str, suffix: str = "") -> dict:
    found = [r["Properties"] for k, r in resources(template, type_name).items() if suffix in k]
    assert len(found) == 1, f"expected one {type_name} *{suffix}*, found {len(found)}"
    return found[0]


def mapping(t: dict) -> dict:
    return only(t, "AWS::Lambda::EventSourceMapping")["Properties"]


def worker(t: dict) -> dict:
    return typed(t, "AWS::Lambda::Function", "QWorker")


def queue(t: dict) -> dict:
    return typed(t, "AWS::SQS::Queue", "QQueue")


def alarm(t: dict, name: str) -> dict:
    return typed(t, "AWS::CloudWatch::Alarm", name)


def machine(t: dict) -> Any:
    return only(t, "AWS::StepFunctions::StateMachine")["Properties"]["DefinitionString"]


def retry_policy(t: dict) -> dict:
    return only(t, "AWS::Scheduler::Schedule")["Properties"]["Target"]["RetryPolicy"]


def env(t: dict, function: str) -> dict:
    return typed(t, "AWS::Lambda::Function", f"Batch{function}")["Environment"]["Variables"]


def alarm_threshold_and_description(name: str) -> Callable[[dict], list[Any]]:
    return lambda t: [alarm(t, name)["Threshold"], alarm(t, name)["AlarmDescription"]]


#: (construct, prop, kind) -> the values that must each hold the parameter. Every other case is refused,
#: naming the prop.
PASSES: dict[tuple[str, str, str], Callable[[dict], list[Any]]] = {
    ("queued", "max_concurrency", "number"): lambda t: [mapping(t)["ScalingConfig"]["MaximumConcurrency"]],
    ("queued", "max_receive_count", "number"): lambda t: [queue(t)["RedrivePolicy"]["maxReceiveCount"]],
    ("queued", "max_batching_window", "duration"): lambda t: [mapping(t)["MaximumBatchingWindowInSeconds"]],
    ("queued", "visibility_timeout", "duration"): lambda t: [queue(t)["VisibilityTimeout"]],
    ("queued", "reserved_concurrency", "number"): lambda t: [worker(t)["ReservedConcurrentExecutions"]],
    ("queued", "memory_size", "number"): lambda t: [worker(t)["MemorySize"]],
    ("queued", "service_tier", "string"): lambda t: [worker(t)["Environment"]["Variables"]["SERVICE_TIER"]],
    ("queued", "max_message_age", "duration"): alarm_threshold_and_description("OldestMessageAge"),
    ("queued", "worker_error_threshold", "number"): alarm_threshold_and_description("WorkerErrors"),
    ("queued", "worker_throttle_threshold", "number"): alarm_threshold_and_description("WorkerThrottles"),
    ("queued", "dead_letter_threshold", "number"): alarm_threshold_and_description("DeadLetters"),
    ("precompute", "max_concurrency", "number"): lambda t: [machine(t)],
    ("precompute", "items_key", "string"): lambda t: [machine(t)],
    ("precompute", "tolerated_failed_keys", "number"): lambda t: [machine(t)],
    ("precompute", "schedule_retry_attempts", "number"): lambda t: [retry_policy(t)["MaximumRetryAttempts"]],
    ("precompute", "schedule_max_event_age", "duration"): lambda t: [retry_policy(t)["MaximumEventAgeInSeconds"]],
    ("batch", "max_tokens", "number"): lambda t: [env(t, "Prepare")["MAX_TOKENS"]],
    ("batch", "system_prompt", "string"): lambda t: [env(t, "Prepare")["SYSTEM_PROMPT"]],
    ("batch", "temperature", "number"): lambda t: [env(t, "Prepare")["TEMPERATURE"]],
    ("batch", "min_records_per_job", "number"): lambda t: [env(t, "Prepare")["MIN_RECORDS_PER_JOB"]],
    ("batch", "max_records_per_job", "number"): lambda t: [env(t, "Prepare")["MAX_RECORDS_PER_JOB"]],
    ("batch", "max_records_per_file", "number"): lambda t: [env(t, "Prepare")["MAX_RECORDS_PER_FILE"]],
    ("batch", "max_job_bytes", "number"): lambda t: [env(t, "Prepare")["MAX_JOB_BYTES"]],
    ("batch", "max_file_bytes", "number"): lambda t: [env(t, "Prepare")["MAX_FILE_BYTES"]],
    ("batch", "max_concurrent_jobs", "number"): lambda t: [machine(t)],
    ("batch", "job_name_prefix", "string"): lambda t: [env(t, "Prepare")["JOB_NAME_PREFIX"],
                                                       env(t, "JobEvents")["JOB_NAME_PREFIX"]],
    ("batch", "write_concurrency", "number"): lambda t: [env(t, "Load")["WRITE_CONCURRENCY"]],
}

#: Props that take an object (or a bool, or an enum): every kind of token is refused by type, with this fix.
BY_TYPE: dict[tuple[str, str], str] = {
    ("queued", "model"): "pass a BedrockModel",
    ("queued", "queue"): "pass an sqs.IQueue",
    ("queued", "dead_letter_queue"): "pass an sqs.IQueue",
    ("queued", "answer_store"): "pass an AnswerStore",
    ("queued", "latency_optimized"): "pass True or False",
    ("queued", "encryption_key"): "pass a kms.IKey",
    ("queued", "queue_encryption_key"): "pass a kms.IKey",
    ("queued", "dead_letter_queue_encryption_key"): "pass a kms.IKey",
    ("queued", "log_retention"): "pass a logs.RetentionDays",
    ("queued", "alarm_actions"): "cloudwatch_actions.SnsAction",
    ("queued", "ledger"): "a QuotaLedger of the ModelQuota of this worker's model",
    ("precompute", "answer_store"): "pass an AnswerStore",
    ("precompute", "model"): "pass a BedrockModel",
    ("precompute", "items_bucket_key"): "pass a kms.Key",
    ("batch", "input_bucket_key"): "pass a kms.Key",
    ("batch", "output_bucket_key"): "pass a kms.Key",
    ("batch", "items_bucket_key"): "pass a kms.Key",
    ("precompute", "request"): "pass ConverseRequest",
    ("precompute", "schedule"): "pass scheduler.ScheduleExpression.cron",
    ("precompute", "items"): "pass a list of {'key': ...} objects",
    ("precompute", "items_bucket"): "pass an s3 bucket",
    ("precompute", "retry"): "pass BedrockRetry",
    ("precompute", "dead_letter_queue"): "pass an sqs.Queue",
    ("precompute", "state_machine_options"): "pass StateMachineOptions",
    ("precompute", "alarm_actions"): "cloudwatch_actions.SnsAction",
    ("batch", "model"): "pass a BedrockModel",
    ("batch", "answer_store"): "pass an AnswerStore",
    ("batch", "input_bucket"): "pass an s3.Bucket",
    ("batch", "output_bucket"): "pass an s3.Bucket",
    ("batch", "items_bucket"): "pass an s3.Bucket",
    ("batch", "encryption_key"): "pass a kms.Key",
    ("batch", "access_logs_bucket"): "pass an s3.Bucket",
    ("batch", "on_demand_fallback"): "pass a state machine",
    ("batch", "encryption_key_for_logs"): "pass a kms.Key",
    ("batch", "log_retention"): "pass a logs.RetentionDays",
    ("batch", "state_machine_options"): "pass StateMachineOptions",
    ("batch", "alarm_actions"): "cloudwatch_actions.SnsAction",
}

#: Tokens of the right kind refused because the construct computes with the value at synth: the reason.
AT_SYNTH: dict[tuple[str, str, str], str] = {
    ("queued", "batch_size", "number"): "the timeout cannot be derived from it: pass timeout",
    ("queued", "timeout", "duration"): "the queue's visibility timeout cannot be derived: pass visibility_timeout",
    ("queued", "bedrock_max_attempts", "number"): "sizes the worker's time budget at synth",
    ("queued", "max_output_tokens", "number"): "sizes the worker's time budget at synth",
    ("queued", "output_tokens_per_second", "number"): "sizes the worker's time budget at synth",
    ("queued", "time_to_first_token", "duration"): "sizes the worker's time budget at synth",
    ("precompute", "items_format", "string"): "chooses the Map's item reader",
    ("batch", "invocation_type", "string"): "decides at synth which props apply",
    ("batch", "items_prefix", "string"): "the prefixes scope IAM grants at synth",
    ("batch", "input_prefix", "string"): "the prefixes scope IAM grants at synth",
    ("batch", "output_prefix", "string"): "the prefixes scope IAM grants at synth",
    # cdk.Duration.seconds(<token>) where the field counts whole hours, minutes or days: CloudFormation
    # cannot divide, so a token in the field's own unit passes (test_a_deploy_time_duration_in_the_fields_unit_...)
    ("batch", "object_expiration", "duration"): r"S3 lifecycle expiration .* in days: build it with cdk.Duration.days",
    ("batch", "job_timeout", "duration"): r"pass cdk.Duration.hours\(<token>\)",
    ("batch", "status_check_interval", "duration"): r"pass cdk.Duration.minutes\(<token>\)",
}


def synth(construct: str, **props: Any) -> dict:
    stack = new_stack()
    BUILDERS[construct](stack, **{name: token(stack, value) if value in KINDS else value for name, value in props.items()})
    return Template.from_stack(stack).to_json()


def naming(prop: str, problems: list[str]) -> list[str]:
    return [p for p in problems if p.startswith((f"{prop} ", f"{prop}=", f"{prop}[", f"{prop}:"))]


@pytest.mark.parametrize(("construct", "prop", "kind"), EVERY_TOKEN, ids=["-".join(case) for case in EVERY_TOKEN])
def test_every_prop_given_every_kind_of_token_reaches_the_template_or_is_refused_by_name(construct, prop, kind):
    where = PASSES.get((construct, prop, kind))
    if where is None:
        with pytest.raises(InvalidPropsError) as refused:
            synth(construct, **{prop: kind})
        named = naming(prop, refused.value.problems)
        assert named, refused.value.problems
        assert not ENCODED_NUMBER.search(str(refused.value)), str(refused.value)
        # the token is blamed as a deploy-time value, and the message says what to pass instead
        assert any("deploy-time" in p and re.search(r"\bpass\b|build it with", p) for p in named), named
        expected = BY_TYPE.get((construct, prop)) or AT_SYNTH.get((construct, prop, kind))
        if expected is not None:
            assert any(re.search(expected, p) or expected in p for p in named), (expected, named)
        return
    template = synth(construct, **{prop: kind})
    values = where(template)
    assert values and all(holds_ref(v) for v in values), json.dumps(values)[:2000]
    text = json.dumps(template["Resources"])
    assert not ENCODED_NUMBER.search(text), text[max(0, ENCODED_NUMBER.search(text).start() - 300):][:400]


def test_the_expectations_name_props_of_the_table():
    """That the props are every prop of each signature is checked by tests/test_tokens_coverage.py."""
    for construct, prop, kind in [*PASSES, *AT_SYNTH]:
        assert prop in TABLE[construct][1] and kind in KINDS, (construct, prop, kind)
    for construct, prop in BY_TYPE:
        assert prop in TABLE[construct][1], (construct, prop)
    assert not {(c, p) for c, p, _ in PASSES} & set(BY_TYPE)


# ---- the defects this table found: each failed before ----------------------------------------------------


@pytest.mark.parametrize("kind", ["number", "string"])
def test_a_deploy_time_number_or_string_timeout_is_refused_by_name_not_by_an_attribute_error(kind):
    """Before: AttributeError: 'float' object has no attribute 'is_unresolved' (and 'str' ...)."""
    with pytest.raises(InvalidPropsError, match=f"timeout is a deploy-time {kind}; pass a cdk.Duration"):
        synth("queued", timeout=kind)


def test_a_deploy_time_schedule_retry_count_is_the_schedules_retry_policy():
    """Before: aws-cdk-lib's 'Number of retry attempts should be greater or equal than 0' (a RuntimeError):
    it compared the token's encoding, a large negative number, with 0."""
    policy = retry_policy(synth("precompute", schedule_retry_attempts="number"))
    assert policy == {"MaximumRetryAttempts": REF, "MaximumEventAgeInSeconds": 3600}


def test_a_deploy_time_schedule_event_age_is_the_schedules_retry_policy():
    """Before: aws-cdk-lib's 'Minimum event age is 1 minute' (a RuntimeError)."""
    policy = retry_policy(synth("precompute", schedule_max_event_age="duration"))
    assert policy == {"MaximumRetryAttempts": 3, "MaximumEventAgeInSeconds": REF}


def test_a_schedule_event_age_in_minutes_of_a_token_is_refused_by_name():
    stack = new_stack()
    with pytest.raises(InvalidPropsError, match=r"schedule_max_event_age is a deploy-time Duration in another unit, "
                                                r"but .* in seconds: build it with cdk.Duration.seconds"):
        precompute(stack, schedule_max_event_age=cdk.Duration.minutes(token(stack, "number")))


@pytest.mark.parametrize("kind", ["number", "duration"])
def test_a_deploy_time_invocation_type_of_another_kind_is_refused_by_name_not_by_jsii(kind):
    """Before: jsii 'Unable to deserialize value as aws-cdk-lib.aws_lambda.FunctionProps' (the token, a float
    or a Duration, went into the prepare function's environment)."""
    with pytest.raises(InvalidPropsError, match="invocation_type is a deploy-time"):
        synth("batch", invocation_type=kind)


def test_a_deploy_time_invocation_type_string_is_refused_since_it_decides_which_props_apply():
    """Before: accepted, and neither max_tokens nor the InvokeModel rules were checked: a token that resolves to
    Converse with no max_tokens gave every prompt maxTokens 0."""
    stack = new_stack()
    with pytest.raises(InvalidPropsError, match="invocation_type is a deploy-time string, but it decides at synth"):
        BatchPrecompute(stack, "Batch", model=NOVA, invocation_type=token(stack, "string"))


def test_a_deploy_time_object_expiration_in_seconds_is_refused_by_name_not_by_jsii():
    """Before: jsii 'Duration must be specified as 'Duration.days()' here' at synth."""
    with pytest.raises(InvalidPropsError, match="object_expiration is a deploy-time Duration in another unit"):
        synth("batch", object_expiration="duration")


def test_a_deploy_time_state_machine_timeout_reaches_the_run_lock_as_text_not_its_encoding():
    """Before: LOCK_SECONDS held the token's encoding ('-188815458970875...'), so the run lock never expired."""
    stack = new_stack()
    precompute(stack, state_machine_options=StateMachineOptions(timeout=cdk.Duration.seconds(token(stack, "number"))))
    template = Template.from_stack(stack).to_json()
    prepare = typed(template, "AWS::Lambda::Function", "PrePrepareRun")
    assert prepare["Environment"]["Variables"]["LOCK_SECONDS"] == REF
    assert only(template, "AWS::StepFunctions::StateMachine")["Properties"]["DefinitionString"]["Fn::Join"]
    assert not ENCODED_NUMBER.search(json.dumps(template["Resources"]))


def test_a_deploy_time_state_machine_timeout_in_minutes_is_refused_by_name():
    """The run lock's expiry is in seconds (refused by ScheduledPrecompute, or already by StateMachineOptions,
    since the state machine's TimeoutSeconds is too)."""
    stack = new_stack()
    with pytest.raises(InvalidPropsError) as refused:
        precompute(stack, state_machine_options=StateMachineOptions(timeout=cdk.Duration.minutes(token(stack, "number"))))
    assert any("timeout is a deploy-time Duration in another unit" in p for p in refused.value.problems), refused.value


def test_a_deploy_time_oldest_message_age_is_named_in_the_alarm_description():
    """Before: 'messages wait longer than <token> seconds', the parameter's value lost."""
    description = alarm(synth("queued", max_message_age="duration"), "OldestMessageAge")["AlarmDescription"]
    parts = description["Fn::Join"][1]
    assert parts[0] == "messages wait longer than " and parts[1] == REF and parts[2].startswith(" seconds:")


def test_deploy_time_items_and_alarm_actions_are_refused_with_what_to_pass():
    """Before: 'items[0]=<a deploy-time list> is a str' and 'alarm_actions[0] is a str' blamed an element."""
    with pytest.raises(InvalidPropsError, match=r"items is a deploy-time list, but .* items_key"):
        synth("precompute", items="list")
    with pytest.raises(InvalidPropsError, match=r"alarm_actions is a deploy-time list; .*sns.Topic.from_topic_arn"):
        synth("queued", alarm_actions="list")


# ---- the companion props that let a refused token pass ---------------------------------------------------


def test_a_deploy_time_timeout_passes_with_a_visibility_timeout():
    stack = new_stack()
    queued(stack, timeout=token(stack, "duration"), visibility_timeout=cdk.Duration.minutes(30))
    template = Template.from_stack(stack).to_json()
    assert worker(template)["Timeout"] == REF and queue(template)["VisibilityTimeout"] == 1800
    assert not ENCODED_NUMBER.search(json.dumps(template["Resources"]))


def test_a_deploy_time_batch_size_passes_with_a_timeout():
    stack = new_stack()
    queued(stack, batch_size=token(stack, "number"), timeout=cdk.Duration.minutes(5))
    template = Template.from_stack(stack).to_json()
    assert mapping(template)["BatchSize"] == REF and worker(template)["Timeout"] == 300
    assert queue(template)["VisibilityTimeout"] == 1800  # still 6 x the timeout


@pytest.mark.parametrize(("prop", "unit", "where"), [
    ("object_expiration", "days", lambda t: [r["Properties"]["LifecycleConfiguration"] for k, r in
                                             resources(t, "AWS::S3::Bucket").items() if "Input" in k or "Output" in k]),
    ("job_timeout", "hours", lambda t: [env(t, "Prepare")["JOB_TIMEOUT_HOURS"], machine(t)]),
    ("status_check_interval", "minutes", lambda t: [typed(t, "AWS::Events::Rule", "CheckJobs")["ScheduleExpression"]]),
])
def test_a_deploy_time_duration_in_the_fields_unit_reaches_the_template(prop, unit, where):
    stack = new_stack()
    batch(stack, **{prop: getattr(cdk.Duration, unit)(token(stack, "number"))})
    template = Template.from_stack(stack).to_json()
    values = where(template)
    assert values and all(holds_ref(v) for v in values), values
    assert not ENCODED_NUMBER.search(json.dumps(template["Resources"]))


#: Every Duration prop given cdk.Duration.minutes(<token>): aws-cdk-lib cannot turn it into seconds, so it
#: passes where the field is in minutes (or coarser) or is refused by name, never with jsii's error.
#: A companion prop that lets the token get past the derivations refused above.
COMPANION: dict[tuple[str, str], dict[str, Any]] = {("queued", "timeout"): {"visibility_timeout": cdk.Duration.hours(1)}}
MINUTES_OF_A_TOKEN = [
    ("queued", "max_batching_window"), ("queued", "timeout"), ("queued", "visibility_timeout"),
    ("queued", "time_to_first_token"), ("queued", "max_message_age"),
    ("precompute", "schedule_max_event_age"),
    ("batch", "object_expiration"), ("batch", "job_timeout"),
]


@pytest.mark.parametrize(("construct", "prop"), MINUTES_OF_A_TOKEN)
def test_a_deploy_time_duration_in_minutes_is_refused_by_name_where_the_field_is_finer(construct, prop):
    stack = new_stack()
    with pytest.raises(InvalidPropsError) as refused:
        BUILDERS[construct](stack, **{prop: cdk.Duration.minutes(token(stack, "number")),
                                      **COMPANION.get((construct, prop), {})})
    assert naming(prop, refused.value.problems), refused.value.problems
    assert not ENCODED_NUMBER.search(str(refused.value))
