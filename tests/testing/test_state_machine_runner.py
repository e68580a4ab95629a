"""State machines executed offline: moto's interpreter, Bedrock served by the emulator.

Each test synthesizes a small stack, runs one of its state machines against an emulated quota and
asserts on the output and on the model calls the emulator saw (throttled ones included). Clocks
run 60x (or faster): a one-minute quota window lasts one second, and retry waits shrink with it.
"""

from __future__ import annotations

import json
from collections import Counter

import aws_cdk as cdk
import pytest
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from genai_pacer import (
    BedrockModel,
    BedrockRetry,
    BoundedDistributedMap,
    BoundedMap,
    ConverseRequest,
    ParallelPrompts,
)
from genai_pacer.testing import BedrockEmulator, ModelSpec
from genai_pacer.testing.sfn import (
    BatchJobSimulator,
    BatchRecordError,
    OfflineExecutionError,
    ServiceError,
    StateMachineRunner,
)

NOVA = "amazon.nova-lite-v1:0"
MICRO = "amazon.nova-micro-v1:0"
CLAUDE = "anthropic.claude-3-5-haiku-20241022-v1:0"
QUOTA = 50_000  # tokens per minute
SCALE = 60  # one model minute per real second


def new_stack() -> cdk.Stack:
    app = cdk.App(context={"@aws-cdk/aws-stepfunctions:useDistributedMapResultWriterV2": True})
    return cdk.Stack(app, "Offline")


def machine(stack: cdk.Stack, id: str, definition: sfn.IChainable) -> sfn.StateMachine:
    return sfn.StateMachine(stack, id, definition_body=sfn.DefinitionBody.from_chainable(definition))


def converse(
    scope, id: str, *, model_id: str | None = NOVA, max_tokens: int = 100, retries: int = 3, **task_props
) -> tasks.CallAwsService:
    """A Converse call the way users write it with aws-cdk-lib: PascalCase parameters, Retry on throttling."""
    task = tasks.CallAwsService(
        scope, id,
        service="bedrockruntime",
        action="converse",
        iam_action="bedrock:InvokeModel",
        iam_resources=["*"],
        parameters={
            "ModelId": model_id if model_id else sfn.JsonPath.string_at("$.model"),
            "Messages": [{"Role": "user", "Content": [{"Text": sfn.JsonPath.string_at("$.prompt")}]}],
            "InferenceConfig": {"MaxTokens": max_tokens},
        },
        result_selector={"text.$": "$.Output.Message.Content[0].Text", "outputTokens.$": "$.Usage.OutputTokens"},
        **task_props,
    )
    task.add_retry(
        errors=["BedrockRuntime.ThrottlingException"],
        interval=cdk.Duration.seconds(2),
        backoff_rate=2,
        max_attempts=retries,
        max_delay=cdk.Duration.seconds(30),
        jitter_strategy=sfn.JitterType.FULL,
    )
    return task


def emulator(*specs: ModelSpec, scale: float = SCALE) -> BedrockEmulator:
    return BedrockEmulator(list(specs) or [slow_model(NOVA)], time_scale=scale, seed=7)


def slow_model(model_id: str) -> ModelSpec:
    """50,000 TPM; 200-token answers at 25 tokens/s (8 model seconds, 133 ms real at 60x), so a burst
    of calls is still in flight, holding its reservations, when the next ones arrive."""
    return ModelSpec(model_id, tpm_quota=QUOTA, answer_tokens=200, output_tokens_per_second=25)


def peak_in_flight(invocations) -> int:
    """The most answered calls whose emulated service times overlap (a lower bound of the real peak)."""
    edges = sorted(
        edge
        for call in invocations
        if call.outcome == "ok"
        for edge in ((call.started, 1), (call.started + call.latency_ms / 1000, -1))
    )
    peak = current = 0
    for _, step in sorted(edges, key=lambda edge: (edge[0], edge[1])):
        current += step
        peak = max(peak, current)
    return peak


def items(count: int) -> list[dict]:
    return [{"prompt": f"Summarize ticket {i} in one line."} for i in range(count)]


def calls_to(run, model_id: str) -> list:
    return [invocation for invocation in run.invocations if invocation.model_id == model_id]


# ---- aws-cdk-lib state machines ------------------------------------------------------------------


def test_a_map_of_50_items_answers_every_item_and_retries_each_throttle():
    """Three throttles are injected, not provoked: how many calls a quota throttles depends on how many
    iterations the interpreter starts at once, which depends on the machine's load (a loaded CI machine
    once saw one item throttled past its 6 retries). The quota itself is the emulator's, tested there."""
    stack = new_stack()
    fan_out = sfn.Map(stack, "Fan out", max_concurrency=20, items_path="$.items")
    fan_out.item_processor(converse(stack, "Ask", max_tokens=4096, retries=6))
    machine(stack, "Machine", fan_out)

    with emulator(ModelSpec(NOVA, tpm_quota=100_000_000, answer_tokens=200, output_tokens_per_second=25)) as bedrock:
        bedrock.fail_next("ThrottlingException", model_id=NOVA, count=3)
        with StateMachineRunner(stack, bedrock=bedrock) as runner:
            run = runner.run({"items": items(50)}).raise_for_status()

    assert len(run.output) == 50
    assert all(answer["text"] and answer["outputTokens"] == 200 for answer in run.output)
    assert (run.throttled, run.outcomes) == (3, Counter({"ok": 50, "throttled": 3}))
    # Every throttled call came back as another attempt: 50 answers plus one call per throttle.
    assert run.model_calls == 53 and run.retries == 3
    assert run.task_errors() == Counter({"BedrockRuntime.ThrottlingException": 3})
    assert peak_in_flight(run.invocations) <= 20  # the interpreter held MaxConcurrency


def test_an_item_that_always_throttles_fails_the_map_after_the_configured_attempts():
    stack = new_stack()
    fan_out = sfn.Map(stack, "Fan out", max_concurrency=5, items_path="$.items")
    fan_out.item_processor(converse(stack, "Ask", model_id=None, retries=3))  # ModelId from the item
    machine(stack, "Machine", fan_out)
    batch = [{**item, "model": NOVA} for item in items(10)]
    batch[6]["model"] = MICRO

    with emulator(ModelSpec(NOVA, tpm_quota=QUOTA), ModelSpec(MICRO, tpm_quota=QUOTA)) as bedrock:
        bedrock.fail_next("ThrottlingException", model_id=MICRO, count=100, message="Too many tokens, please wait")
        with StateMachineRunner(stack, bedrock=bedrock) as runner:
            run = runner.run({"items": batch})

    assert run.status == "FAILED"
    assert run.error == "BedrockRuntime.ThrottlingException"
    assert "Too many tokens, please wait" in run.cause and "Status Code: 429" in run.cause
    # The first call and MaxAttempts=3 retries, no more.
    assert [call.outcome for call in calls_to(run, MICRO)] == ["throttled"] * 4


def test_a_parallel_returns_its_branches_results_in_order_and_each_integration_names_errors_as_aws_does():
    stack = new_stack()
    claude = BedrockModel.foundation(CLAUDE)
    native = tasks.BedrockInvokeModel(
        stack, "Native",
        model=claude.as_imodel(stack, "Claude"),
        body=sfn.TaskInput.from_object({
            "anthropic_version": "bedrock-2023-05-31",
            "max_tokens": 200,
            "messages": [{"role": "user", "content": [{"type": "text", "text": sfn.JsonPath.string_at("$.prompt")}]}],
        }),
        result_selector={"text.$": "$.Body.content[0].text", "contentType.$": "$.ContentType"},
    )
    native.add_retry(errors=["Bedrock.ThrottlingException"], interval=cdk.Duration.seconds(1), max_attempts=2)
    both = sfn.Parallel(stack, "Both").branch(native).branch(converse(stack, "Converse"))
    machine(stack, "Machine", both)

    with emulator(ModelSpec(NOVA, answer_tokens=30), ModelSpec(CLAUDE, answer_tokens=40)) as bedrock:
        bedrock.fail_next("ThrottlingException", model_id=CLAUDE)
        with StateMachineRunner(stack, bedrock=bedrock) as runner:
            run = runner.run({"prompt": "Name three rivers."}).raise_for_status()

    assert isinstance(run.output, list) and len(run.output) == 2
    first, second = run.output
    assert set(first) == {"text", "contentType"} and first["contentType"] == "application/json"
    assert len(first["text"].split()) == 40
    assert set(second) == {"text", "outputTokens"} and second["outputTokens"] == 30
    # The optimized integration names the throttle Bedrock.*, and its Retry ran.
    assert run.task_errors() == Counter({"Bedrock.ThrottlingException": 1})
    assert [call.outcome for call in calls_to(run, CLAUDE)] == ["throttled", "ok"]


def test_a_caught_error_carries_the_sdk_integrations_error_name():
    stack = new_stack()
    ask = converse(stack, "Ask")
    ask.add_catch(sfn.Pass(stack, "Denied"), errors=["BedrockRuntime.AccessDeniedException"], result_path="$.error")
    machine(stack, "Machine", ask)

    with emulator() as bedrock:
        bedrock.fail_next("AccessDeniedException", message="no access to this model")
        with StateMachineRunner(stack, bedrock=bedrock) as runner:
            run = runner.run({"prompt": "hello"}).raise_for_status()

    assert run.output["error"]["Error"] == "BedrockRuntime.AccessDeniedException"
    assert "no access to this model" in run.output["error"]["Cause"]
    assert run.model_calls == 1  # access errors are not retried


def test_a_distributed_map_reads_jsonl_items_from_s3_and_writes_each_result_to_s3():
    stack = new_stack()
    bucket = s3.Bucket(stack, "Data")
    fan_out = sfn.DistributedMap(
        stack, "Fan out",
        max_concurrency=8,
        item_reader=sfn.S3JsonLItemReader(bucket=bucket, key="in/items.jsonl"),
        result_writer_v2=sfn.ResultWriterV2(bucket=bucket, prefix="results"),
    )
    fan_out.item_processor(converse(stack, "Ask"))
    machine(stack, "Machine", fan_out)

    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        name = runner.physical_name(bucket)
        lines = "".join(json.dumps(item) + "\n" for item in items(20))
        runner.s3.put_object(Bucket=name, Key="in/items.jsonl", Body=lines.encode())
        run = runner.run().raise_for_status()
        details = run.output["ResultWriterDetails"]
        manifest = json.loads(runner.s3.get_object(Bucket=details["Bucket"], Key=details["Key"])["Body"].read())
        (succeeded,) = manifest["ResultFiles"]["SUCCEEDED"]
        results = json.loads(runner.s3.get_object(Bucket=name, Key=succeeded["Key"])["Body"].read())

    assert details["Bucket"] == name and details["Key"].startswith("results/")
    assert manifest["ResultFiles"]["FAILED"] == [] and manifest["MapRunArn"] == run.output["MapRunArn"]
    assert sorted(json.loads(result["Input"])["prompt"] for result in results) == sorted(i["prompt"] for i in items(20))
    assert all(result["Status"] == "SUCCEEDED" and json.loads(result["Output"])["text"] for result in results)
    assert run.model_calls == 20


def test_a_distributed_map_fails_past_its_tolerated_failure_percentage_and_reports_the_failed_items():
    stack = new_stack()
    bucket = s3.Bucket(stack, "Data")
    for tolerated in (10, 30):
        fan_out = sfn.DistributedMap(
            stack, f"Tolerate {tolerated}",
            max_concurrency=1,  # one item at a time, so the two injected failures hit items 0 and 1
            item_reader=sfn.S3JsonLItemReader(bucket=bucket, key="items.jsonl"),
            result_writer_v2=sfn.ResultWriterV2(bucket=bucket, prefix=f"tolerate-{tolerated}"),
            tolerated_failure_percentage=tolerated,
        )
        fan_out.item_processor(converse(stack, f"Ask {tolerated}"))
        machine(stack, f"Machine{tolerated}", fan_out)

    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        name = runner.physical_name(bucket)
        runner.s3.put_object(Bucket=name, Key="items.jsonl", Body="".join(json.dumps(i) + "\n" for i in items(10)))
        bedrock.fail_next("ValidationException", count=2, message="malformed prompt")
        strict = runner.run(state_machine="Machine10")
        bedrock.fail_next("ValidationException", count=2, message="malformed prompt")
        lenient = runner.run(state_machine="Machine30").raise_for_status()
        details = lenient.output["ResultWriterDetails"]
        manifest = json.loads(runner.s3.get_object(Bucket=name, Key=details["Key"])["Body"].read())
        (failed,) = manifest["ResultFiles"]["FAILED"]
        failures = json.loads(runner.s3.get_object(Bucket=name, Key=failed["Key"])["Body"].read())
        executed = runner.definition("Machine10")["States"]["Tolerate 10"]["ToleratedFailurePercentage"]
        spec = runner.select("Machine10")

    assert strict.status == "FAILED" and strict.error == "States.ExceedToleratedFailureThreshold"
    assert "2 of 10 items failed" in strict.cause and "BedrockRuntime.ValidationException" in strict.cause
    assert [json.loads(f["Input"])["prompt"] for f in failures] == [items(10)[0]["prompt"], items(10)[1]["prompt"]]
    assert {f["Error"] for f in failures} == {"BedrockRuntime.ValidationException"}
    # moto parses only a decimal percentage: the executed copy says 10.0; what CDK synthesized keeps 10.
    assert executed == 10.0 and isinstance(executed, float)
    assert spec.definition["States"]["Tolerate 10"]["ToleratedFailurePercentage"] == 10
    assert isinstance(spec.definition["States"]["Tolerate 10"]["ToleratedFailurePercentage"], int)


def test_an_item_batcher_hands_each_child_a_batch_with_the_batch_input():
    stack = new_stack()
    bucket = s3.Bucket(stack, "Data")
    fan_out = sfn.DistributedMap(
        stack, "Batches",
        max_concurrency=2,
        item_reader=sfn.S3JsonItemReader(bucket=bucket, key="items.json"),
        item_batcher=sfn.ItemBatcher(max_items_per_batch=4, batch_input={"purpose": "triage"}),
    )
    fan_out.item_processor(sfn.Pass(stack, "Count", parameters={
        "size.$": "States.ArrayLength($.Items)", "purpose.$": "$.BatchInput.purpose",
    }))
    machine(stack, "Machine", fan_out)

    with StateMachineRunner(stack) as runner:
        runner.s3.put_object(Bucket=runner.physical_name(bucket), Key="items.json", Body=json.dumps(items(10)).encode())
        run = runner.run().raise_for_status()

    assert run.output == [{"size": 4, "purpose": "triage"}, {"size": 4, "purpose": "triage"}, {"size": 2, "purpose": "triage"}]


def test_a_batch_inference_job_is_submitted_polled_through_wait_states_and_its_output_written_to_s3():
    stack = new_stack()
    bucket = s3.Bucket(stack, "Batch")
    submit = tasks.CallAwsService(
        stack, "Submit",
        service="bedrock",
        action="createModelInvocationJob",
        iam_resources=["*"],
        parameters={
            "JobName": "nightly",
            "ModelId": NOVA,
            "RoleArn": "arn:aws:iam::123456789012:role/batch",
            "InputDataConfig": {"S3InputDataConfig": {"S3Uri": f"s3://{bucket.bucket_name}/in/records.jsonl"}},
            "OutputDataConfig": {"S3OutputDataConfig": {"S3Uri": f"s3://{bucket.bucket_name}/out/"}},
        },
        result_path="$.job",
    )
    wait = sfn.Wait(stack, "Wait an hour", time=sfn.WaitTime.duration(cdk.Duration.hours(1)))
    poll = tasks.CallAwsService(
        stack, "Poll",
        service="bedrock",
        action="getModelInvocationJob",
        iam_resources=["*"],
        parameters={"JobIdentifier": sfn.JsonPath.string_at("$.job.JobArn")},
        result_selector={"status.$": "$.Status", "arn.$": "$.JobArn"},
        result_path="$.poll",
    )
    done = (
        sfn.Choice(stack, "Done?")
        .when(sfn.Condition.string_equals("$.poll.status", "Completed"), sfn.Succeed(stack, "Completed"))
        .when(sfn.Condition.string_equals("$.poll.status", "PartiallyCompleted"), sfn.Succeed(stack, "Partly"))
        .otherwise(wait)
    )
    machine(stack, "Machine", submit.next(wait).next(poll).next(done))

    def respond(record):
        if record["recordId"] == "r3":
            raise BatchRecordError("Input is too long for requested model.")
        return {"output": {"message": {"content": [{"text": f"answer to {record['recordId']}"}]}}}

    jobs = BatchJobSimulator(respond, polls_until_done=2)
    # An hour's Wait, three times, at 36,000x: 0.3 s. Without the scaling the timeout below would fire.
    with StateMachineRunner(stack, batch_jobs=jobs, time_scale=36_000) as runner:
        name = runner.physical_name(bucket)
        records = "".join(json.dumps({"recordId": f"r{i}", "modelInput": {"n": i}}) + "\n" for i in range(5))
        runner.s3.put_object(Bucket=name, Key="in/records.jsonl", Body=records.encode())
        run = runner.run(timeout=30).raise_for_status()
        keys = sorted(item["Key"] for item in runner.s3.list_objects_v2(Bucket=name, Prefix="out/")["Contents"])
        job = run.batch_jobs[0]
        lines = [json.loads(line) for line in
                 runner.s3.get_object(Bucket=name, Key=f"out/{job.job_id}/records.jsonl.out")["Body"].read().splitlines()]
        manifest = json.loads(runner.s3.get_object(Bucket=name, Key=f"out/{job.job_id}/manifest.json.out")["Body"].read())

    assert run.output["poll"] == {"status": "PartiallyCompleted", "arn": job.job_arn}
    assert run.output["job"] == {"JobArn": job.job_arn}  # the SDK integration's PascalCase result
    assert job.polls == 3 and job.model_id == NOVA
    assert keys == [f"out/{job.job_id}/manifest.json.out", f"out/{job.job_id}/records.jsonl.out"]
    assert sorted(line["recordId"] for line in lines) == [f"r{i}" for i in range(5)]
    by_id = {line["recordId"]: line for line in lines}
    assert by_id["r3"]["error"]["errorMessage"] == "Input is too long for requested model."
    assert by_id["r1"]["modelOutput"]["output"]["message"]["content"][0]["text"] == "answer to r1"
    assert manifest == {"totalRecordCount": 5, "processedRecordCount": 5, "successRecordCount": 4, "errorRecordCount": 1}


def test_the_template_tokens_resolve_to_resources_the_runner_created():
    stack = new_stack()
    table = dynamodb.Table(stack, "Answers", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING))
    ask = converse(stack, "Ask", result_path="$.answer")
    store = tasks.DynamoPutItem(
        stack, "Store",
        table=table,
        item={
            "pk": tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at("$.key")),
            "answer": tasks.DynamoAttributeValue.from_string(sfn.JsonPath.string_at("$.answer.text")),
        },
    )
    machine(stack, "Machine", ask.next(store))

    with emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        runner.run({"key": "q1", "prompt": "What is a token?"}).raise_for_status()
        stored = runner.dynamodb.get_item(TableName=runner.physical_name(table), Key={"pk": {"S": "q1"}})["Item"]

    assert len(stored["answer"]["S"].split()) == 100  # the 200-token answer, cut at MaxTokens


# ---- genai-pacer's own constructs ------------------------------------------------------------------

NOVA_PROFILE = "us.amazon.nova-lite-v1:0"


@pytest.fixture(scope="module")
def pacer_stack():
    """genai-pacer's constructs as a user composes them (one synth for the tests below)."""
    stack = new_stack()
    model = BedrockModel.from_id(NOVA_PROFILE)
    prompt = ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=4096)
    constructs = {
        # 20 at once where 12 reservations of 4,096 tokens fit: a queue that lasts minutes. The default
        # budget (6 retries, ~45 s of waits) lets an unlucky item fail there now and then (seen on a
        # loaded machine), which is what the planner's cap prevents; this Map is given a budget that
        # outlasts the queue, so the test is about the runner retrying every throttle, not luck.
        "bounded": BoundedMap(stack, "Bounded", max_concurrency=20, model=model, request=prompt,
                              retry=BedrockRetry(max_retries=12)),
        "sequential": BoundedMap(stack, "Sequential", max_concurrency=1, model=model, request=prompt),
        "parallel": ParallelPrompts(
            stack, "Parallel", model=model,
            prompts={
                "Pros": ConverseRequest(prompt="List the pros.", max_tokens=300),
                "Cons": ConverseRequest(prompt="List the cons.", max_tokens=300),
            },
            synthesis=ConverseRequest(
                prompt=sfn.JsonPath.format("Weigh these: {}", sfn.JsonPath.json_to_string(sfn.JsonPath.object_at("$.answers"))),
                max_tokens=300,
            ),
        ),
    }
    bucket = s3.Bucket(stack, "Items")
    constructs["distributed"] = BoundedDistributedMap(
        stack, "Distributed", max_concurrency=10, model=model, items_bucket=bucket, items_key="items.jsonl",
        request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=300),
    )
    constructs["bucket"] = bucket
    return stack, constructs


def pacer_emulator() -> BedrockEmulator:
    return emulator(slow_model(NOVA_PROFILE))


def test_bounded_map_of_50_items_under_a_quota_that_throttles_answers_every_item(pacer_stack):
    stack, built = pacer_stack
    with pacer_emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        # How many calls the quota throttles depends on how many iterations the interpreter starts at
        # once, which a loaded machine changes (CI once saw none). Three throttles are injected so
        # the retry path runs on every machine; the quota's own throttles come on top.
        bedrock.fail_next("ThrottlingException", count=3)
        run = runner.run({"items": items(50)}, state_machine=built["bounded"].state_machine).raise_for_status()

    assert len(run.output) == 50
    assert all(set(answer) == {"text", "stopReason", "usage"} and answer["text"] for answer in run.output)
    assert all(answer["usage"]["outputTokens"] == 200 for answer in run.output)
    assert run.throttled >= 3 and run.model_calls == 50 + run.throttled


def test_bounded_map_with_an_item_that_always_throttles_fails_after_bedrock_retrys_attempts(pacer_stack):
    stack, built = pacer_stack
    with pacer_emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        # MaxConcurrency 1: the first item takes the injected throttles, every attempt of it.
        bedrock.fail_next("ThrottlingException", count=7)
        run = runner.run({"items": items(5)}, state_machine=built["sequential"].state_machine)

    assert run.status == "FAILED" and run.error == "BedrockRuntime.ThrottlingException"
    # BedrockRetry's default: the first call and 6 retries.
    assert [call.outcome for call in run.invocations] == ["throttled"] * 7


def test_parallel_prompts_output_and_synthesis_input_have_the_documented_shape(pacer_stack):
    stack, built = pacer_stack
    with pacer_emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run({}, state_machine=built["parallel"]).raise_for_status()

    assert set(run.output) == {"answers", "synthesis"}
    assert set(run.output["answers"]) == {"Pros", "Cons"}
    assert all(len(text.split()) == 200 for text in run.output["answers"].values())
    assert set(run.output["synthesis"]) == {"text", "stopReason", "usage"}
    scheduled = [
        json.loads(event["taskScheduledEventDetails"]["parameters"])
        for event in run.history
        if event["type"] == "TaskScheduled"
    ]
    synthesis_prompt = next(
        p["Messages"][0]["Content"][0]["Text"] for p in scheduled if p["Messages"][0]["Content"][0]["Text"].startswith("Weigh")
    )
    assert json.loads(synthesis_prompt.removeprefix("Weigh these: ")) == run.output["answers"]


def test_bounded_distributed_map_writes_its_results(pacer_stack):
    stack, built = pacer_stack
    with pacer_emulator() as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        name = runner.physical_name(built["bucket"])
        runner.s3.put_object(Bucket=name, Key="items.jsonl", Body="".join(json.dumps(i) + "\n" for i in items(25)))
        run = runner.run(state_machine=built["distributed"]).raise_for_status()
        manifest_key = run.output["ResultWriterDetails"]["Key"]
        manifest = json.loads(runner.s3.get_object(Bucket=name, Key=manifest_key)["Body"].read())
        (succeeded,) = manifest["ResultFiles"]["SUCCEEDED"]
        results = json.loads(runner.s3.get_object(Bucket=name, Key=succeeded["Key"])["Body"].read())

    assert manifest_key.startswith("genai-pacer-results/")
    assert len(results) == 25
    assert all(set(json.loads(result["Output"])) == {"text", "stopReason", "usage"} for result in results)


# ---- what the runner refuses, and how it is used --------------------------------------------------


def template(states: dict, *, start: str | None = None, extra: dict | None = None) -> dict:
    definition = {"StartAt": start or next(iter(states)), "States": states}
    resources = {"Machine": {"Type": "AWS::StepFunctions::StateMachine",
                             "Properties": {"DefinitionString": json.dumps(definition)}}}
    return {"Resources": {**resources, **(extra or {})}}


def task(resource: str, **fields) -> dict:
    return {"Type": "Task", "Resource": resource, "End": True, **fields}


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (task("arn:aws:states:::lambda:invoke", Parameters={"FunctionName": "f"}), "invokes AWS Lambda"),
        (task("arn:aws:lambda:us-east-1:1:function:f"), "invokes AWS Lambda"),
        (task("arn:aws:states:::aws-sdk:bedrockruntime:converseStream"), "cannot call streaming operations"),
        (task("arn:aws:states:::bedrock:invokeModel", Parameters={"ModelId": NOVA, "Body": {}, "Output": {"S3Uri": "s3://b/k"}}),
         "Output.S3Uri"),
        (task("arn:aws:states:::bedrock:createModelCustomizationJob.sync"), "does not emulate"),
        (task("arn:aws:states:::aws-sdk:bedrock:createGuardrail"), "only the batch inference calls"),
        ({"Type": "Map", "End": True, "ItemReader": {"Resource": "arn:aws:states:::s3:getObject",
                                                      "ReaderConfig": {"InputType": "MANIFEST"}},
          "ItemProcessor": {"ProcessorConfig": {"Mode": "DISTRIBUTED"}, "StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}},
         "InputType 'MANIFEST'"),
        ({"Type": "Map", "End": True, "ItemBatcher": {"MaxItemsPerBatch": 2}, "ItemSelector": {"x.$": "$$.Map.Item.Value"},
          "ItemProcessor": {"ProcessorConfig": {"Mode": "DISTRIBUTED"}, "StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}},
         "ItemBatcher with ItemSelector"),
        ({"Type": "Pass", "QueryLanguage": "JSONata", "Output": "{% $states.input %}", "End": True}, "uses JSONata"),
        ({"Type": "Map", "End": True, "ItemsPath": "$.items", "ResultWriter": {"WriterConfig": {"OutputType": "JSONL"}},
          "ItemProcessor": {"ProcessorConfig": {"Mode": "DISTRIBUTED"}, "StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}},
         "OutputType 'JSONL' is not executed offline"),
    ],
)
def test_what_cannot_run_offline_is_refused_naming_the_state_and_the_reason(state, expected):
    with StateMachineRunner(template({"The state": state})) as runner, pytest.raises(OfflineExecutionError) as raised:
        runner.run()
    assert "The state" in str(raised.value) and expected in str(raised.value)


def formatted(template_text: str, *values: str) -> dict:
    """A Pass state whose Parameters build `prompt` with JsonPath.format, as aws-cdk-lib writes it."""
    stack = new_stack()
    pass_state = sfn.Pass(stack, "Fmt", parameters={
        "prompt": sfn.JsonPath.format(template_text, *(sfn.JsonPath.string_at(v) for v in values))})
    machine(stack, "M", pass_state)
    return cdk.assertions.Template.from_stack(stack).to_json()


@pytest.mark.parametrize(
    ("template_text", "expected"),
    [
        ("Write today's {} desk note.", "Write today's tech desk note."),
        ("It's {}'s {} \\ 'quoted'", "It's tech's news \\ 'quoted'"),
        ("\\{literal braces\\} and {}", "{literal braces} and tech"),
    ],
)
def test_an_escaped_character_in_an_intrinsic_runs_as_on_aws(capfd, template_text, expected):
    """aws-cdk-lib escapes ' { } and \\ in a JsonPath.format template (\\' in the intrinsic, \\\\' in its JSON);
    moto parsed the JSON text undecoded, printed "mismatched input" and SUCCEEDED with the prompt cut at the
    apostrophe (trial finding F3)."""
    values = ("$.desk", "$.kind") if template_text.count("{}") == 2 else ("$.desk",)
    with StateMachineRunner(formatted(template_text, *values)) as runner:
        run = runner.run({"desk": "tech", "kind": "news"}).raise_for_status()
    assert run.output == {"prompt": expected}
    assert "mismatched input" not in capfd.readouterr().err


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("States.Format('Write today\\'s {} note.', $.desk", "does not parse"),
        ("States.Format('tab\\there {}', $.desk)", "escapes \\t in a string literal"),
    ],
)
def test_an_intrinsic_the_runner_cannot_execute_as_aws_does_is_refused_naming_the_state(capfd, expression, expected):
    state = {"Type": "Pass", "Parameters": {"prompt.$": expression}, "End": True}
    with StateMachineRunner(template({"Build prompt": state})) as runner, pytest.raises(OfflineExecutionError) as raised:
        runner.run({"desk": "tech"})
    assert "Pass 'Build prompt'" in str(raised.value) and "Parameters.prompt.$" in str(raised.value)
    assert expected in str(raised.value)
    assert "mismatched input" not in capfd.readouterr().err


def test_the_sdk_integrations_invoke_model_sends_the_body_and_returns_it_as_text():
    invoke = task(
        "arn:aws:states:::aws-sdk:bedrockruntime:invokeModel",
        Parameters={"ModelId": CLAUDE, "ContentType": "application/json", "Body": {
            "anthropic_version": "bedrock-2023-05-31", "max_tokens": 50,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        }},
        ResultSelector={"body.$": "States.StringToJson($.Body)", "contentType.$": "$.ContentType"},
    )
    with emulator(ModelSpec(CLAUDE, answer_tokens=12)) as bedrock, \
            StateMachineRunner(template({"Invoke": invoke}), bedrock=bedrock) as runner:
        run = runner.run().raise_for_status()
    assert run.output["contentType"] == "application/json"
    assert len(run.output["body"]["content"][0]["text"].split()) == 12
    assert run.invocations[0].operation.lower() in ("invoke", "invokemodel") and run.invocations[0].max_tokens == 50


def test_a_jsonata_state_machine_is_refused_as_a_whole():
    jsonata = template({"P": {"Type": "Pass", "End": True}})
    definition = json.loads(jsonata["Resources"]["Machine"]["Properties"]["DefinitionString"])
    jsonata["Resources"]["Machine"]["Properties"]["DefinitionString"] = json.dumps({"QueryLanguage": "JSONata", **definition})
    with StateMachineRunner(jsonata) as runner, pytest.raises(OfflineExecutionError, match="its QueryLanguage is JSONata"):
        runner.run()


def test_a_parameter_not_in_pascal_case_fails_the_task_with_the_name_to_use():
    bad = task("arn:aws:states:::aws-sdk:bedrockruntime:converse",
               Parameters={"modelId": NOVA, "Messages": [{"Role": "user", "Content": [{"Text": "hi"}]}]})
    with emulator() as bedrock, StateMachineRunner(template({"Ask": bad}), bedrock=bedrock) as runner:
        run = runner.run()
    assert run.status == "FAILED" and run.error == "States.Runtime"
    assert "Parameters.modelId" in run.cause and "'ModelId'" in run.cause
    assert run.model_calls == 0


def test_a_model_task_without_an_emulator_says_what_is_missing():
    ask = task("arn:aws:states:::aws-sdk:bedrockruntime:converse", Parameters={"ModelId": NOVA, "Messages": []})
    # refused before it starts: inside a Map the interpreter would report its own artifact instead
    with StateMachineRunner(template({"Ask": ask})) as runner, pytest.raises(
        OfflineExecutionError, match="calls a model in Ask, and the runner has no emulator.*pass bedrock=BedrockEmulator"
    ):
        runner.run()


def test_state_machines_are_chosen_by_logical_id_path_or_construct_and_the_only_one_by_default():
    two = template({"P": {"Type": "Pass", "Result": 1, "End": True}})
    second = json.loads(json.dumps(two["Resources"]["Machine"]))
    second["Properties"]["DefinitionString"] = json.dumps({"StartAt": "P", "States": {"P": {"Type": "Pass", "Result": 2, "End": True}}})
    second["Metadata"] = {"aws:cdk:path": "App/Reports/StateMachine/Resource"}
    two["Resources"]["Second"] = second

    with StateMachineRunner(two) as runner:
        with pytest.raises(OfflineExecutionError, match="has 2 state machines; pass state_machine= one of: Machine, Second"):
            runner.run()
        assert runner.run(state_machine="Machine").output == 1
        assert runner.run(state_machine="Reports/StateMachine").output == 2
        assert runner.run(state_machine="App/Reports/StateMachine/Resource").output == 2
        with pytest.raises(OfflineExecutionError, match="'Nope' matches 0 state machines"):
            runner.run(state_machine="Nope")


def test_a_run_that_outlasts_its_timeout_is_stopped_and_reported():
    waiting = template({"Wait": {"Type": "Wait", "Seconds": 3600, "End": True}})
    with StateMachineRunner(waiting, time_scale=1) as runner, pytest.raises(TimeoutError, match="was stopped"):
        runner.run(timeout=0.3)


def test_the_runner_patches_moto_only_while_it_is_open():
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import state_task_factory

    original = state_task_factory.state_task_service_for
    passing = template({"P": {"Type": "Pass", "End": True}})
    with StateMachineRunner(passing) as runner:
        assert state_task_factory.state_task_service_for is not original
        with pytest.raises(RuntimeError, match="another StateMachineRunner is active"):
            StateMachineRunner(passing).start()
        assert runner.run().succeeded  # the refused second runner left the first one working
    assert state_task_factory.state_task_service_for is original


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ({"Resources": {}}, "no AWS::StepFunctions::StateMachine"),
        (template({"P": {"Type": "Pass", "End": True}}, extra={}) | {"Resources": {"Machine": {
            "Type": "AWS::StepFunctions::StateMachine",
            "Properties": {"DefinitionString": {"Fn::Join": ["", ["{\"x\":\"", {"Ref": "Missing"}, "\"}"]]}}}}},
         "Ref 'Missing' names no resource"),
        (42, "pass a cdk.Stack, a template dict or the path"),
    ],
)
def test_a_template_that_cannot_be_read_is_refused_with_the_reason(source, expected):
    with pytest.raises(OfflineExecutionError, match=expected):
        StateMachineRunner(source)


def distributed_over_input(tolerated_count: int) -> dict:
    """A distributed Map over the input's items whose children fail for items 3 and 7."""
    fail_some = {
        "StartAt": "Bad?",
        "States": {
            "Bad?": {"Type": "Choice", "Default": "Fine", "Choices": [
                {"Or": [{"Variable": "$.n", "NumericEquals": 3}, {"Variable": "$.n", "NumericEquals": 7}], "Next": "Broken"}]},
            "Broken": {"Type": "Fail", "Error": "Item.Broken", "Cause": "bad item"},
            "Fine": {"Type": "Pass", "End": True},
        },
        "ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
    }
    return {"Type": "Map", "ItemsPath": "$.items", "ItemProcessor": fail_some, "MaxConcurrency": 2,
            "ToleratedFailureCount": tolerated_count, "End": True}


@pytest.mark.parametrize(("tolerated", "status", "error"), [
    (1, "FAILED", "States.ExceedToleratedFailureThreshold"),
    (2, "SUCCEEDED", None),
])
def test_a_tolerated_failure_count_lets_that_many_children_fail(tolerated, status, error):
    with StateMachineRunner(template({"Fan out": distributed_over_input(tolerated)})) as runner:
        run = runner.run({"items": [{"n": n} for n in range(10)]})
    assert (run.status, run.error) == (status, error)
    if error:
        assert "2 of 10 items failed" in run.cause and "item 3, Item.Broken: bad item" in run.cause
    else:  # the output is COMPACT: each child's output, a failed child's whole result in its place
        assert [entry for i, entry in enumerate(run.output) if i not in (3, 7)] == [{"n": n} for n in range(10) if n not in (3, 7)]
        assert [(run.output[i]["Status"], run.output[i]["Error"], json.loads(run.output[i]["Input"])) for i in (3, 7)] == [
            ("FAILED", "Item.Broken", {"n": 3}), ("FAILED", "Item.Broken", {"n": 7})]


def test_a_writer_config_flatten_joins_the_childrens_arrays_in_the_maps_output():
    fan_out = {
        "Type": "Map", "ItemsPath": "$.items", "End": True, "ResultWriter": {"WriterConfig": {"Transformation": "FLATTEN"}},
        "ItemProcessor": {
            "ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"}, "StartAt": "Twice",
            "States": {"Twice": {"Type": "Pass", "Parameters": {"v.$": "States.Array($.n, $.n)"}, "OutputPath": "$.v", "End": True}},
        },
    }
    with StateMachineRunner(template({"Fan out": fan_out})) as runner:
        run = runner.run({"items": [{"n": n} for n in range(3)]}).raise_for_status()
    assert run.output == [0, 0, 1, 1, 2, 2]


PASS_ONLY = template({"P": {"Type": "Pass", "End": True}})


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        ({"bedrock": "http://127.0.0.1:8000"}, "bedrock='http://127.0.0.1:8000' is a str; pass a running BedrockEmulator"),
        ({"batch_jobs": {}}, "batch_jobs={} is a dict; pass BatchJobSimulator"),
        ({"time_scale": 0}, "time_scale=0 must be greater than 0"),
        ({"time_scale": -1}, "time_scale=-1 must be greater than 0"),
        ({"time_scale": float("nan")}, "time_scale=nan is not a finite number"),
        ({"time_scale": float("inf")}, "time_scale=inf is not a finite number"),
        ({"time_scale": True}, "time_scale=True is a bool"),
        ({"time_scale": "fast"}, "time_scale='fast' is a str"),
        ({"values": [("Bucket", "b")]}, "values=.* is a list; pass a dict"),
        ({"region": ""}, "region='' is empty"),
        ({"account": "123"}, "account='123' is not a 12-digit AWS account id"),
        ({"account": 123456789012}, "account=123456789012 is an int; pass a string"),
    ],
)
def test_bad_runner_props_are_refused_naming_the_prop_and_the_fix(props, expected):
    with pytest.raises(ValueError, match=expected):
        StateMachineRunner(PASS_ONLY, **props)


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        ({"respond": None}, "respond=None is not callable"),
        ({"polls_until_done": -1}, "polls_until_done=-1 is below the minimum of 0"),
        ({"polls_until_done": 1.5}, "polls_until_done=1.5 is not a whole number"),
        ({"polls_until_done": True}, "polls_until_done=True is a bool"),
        ({"final_status": "Done"}, "final_status='Done' must be one of 'Completed'"),
        ({"message": ""}, "message='' is empty"),
        ({"seed": "x"}, "seed='x' is a str"),
    ],
)
def test_bad_batch_simulator_props_are_refused(props, expected):
    with pytest.raises(ValueError, match=expected):
        BatchJobSimulator(**{"respond": lambda record: {}, **props})


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"timeout": 0}, "timeout=0 must be greater than 0"),
        ({"timeout": float("inf")}, "timeout=inf is not a finite number"),
        ({"input": {"when": object()}}, "input is not JSON"),
        ({"name": ""}, "name='' is empty"),
    ],
)
def test_bad_run_arguments_are_refused(kwargs, expected):
    with StateMachineRunner(PASS_ONLY) as runner, pytest.raises(ValueError, match=expected):
        runner.run(**kwargs)


def test_an_emulator_that_is_not_running_is_refused_when_the_runner_starts():
    stopped = emulator()
    with pytest.raises(RuntimeError, match="the BedrockEmulator is not running: start it before the runner"):
        StateMachineRunner(PASS_ONLY, bedrock=stopped).start()


def test_a_filter_that_matches_nothing_selects_an_empty_list_as_on_aws():
    # model_call's "no text" branch depends on it: an answer of only a reasoning block has no Text.
    from genai_pacer.testing.sfn import _interpreter

    content = {"Output": {"Message": {"Content": [{"ReasoningContent": {"Text": "..."}}]}}}
    assert _interpreter._extract_json("$.Output.Message.Content[?(@.Text)].Text", content) == []
    assert _interpreter._extract_json("$.Output.Message.Content[0].ReasoningContent.Text", content) == "..."
    from moto.stepfunctions.parser.asl.utils import json_path

    with pytest.raises(json_path.NoSuchJsonPathError):
        _interpreter._extract_json("$.Output.Missing", content)



# ---- user fakes for aws-sdk services (services=) ---------------------------------------------------

APP = {"ApplicationId": "app", "EnvironmentId": "env"}


def deploy_state(**fields) -> dict:
    parameters = {**APP, "DeploymentStrategyId": "s", "ConfigurationProfileId": "p", "ConfigurationVersion": "2"}
    return task("arn:aws:states:::aws-sdk:appconfig:startDeployment", Parameters=parameters, **fields)


def then(state: dict, next_state: str) -> dict:
    """`state` going on to `next_state` instead of ending."""
    return {**{k: v for k, v in state.items() if k != "End"}, "Next": next_state}


class AppConfigAnswering:
    """Answers StartDeployment with `errors` first (ServiceError or ClientError), then deployment 3."""

    def __init__(self, *errors: Exception) -> None:
        self.errors, self.calls = list(errors), []

    def start_deployment(self, **params):
        self.calls.append(params)
        if self.errors:
            raise self.errors.pop(0)
        return {"DeploymentNumber": 3, "State": "DEPLOYING", "ConfigurationVersion": params["ConfigurationVersion"]}


def test_an_error_a_fake_raises_is_named_as_step_functions_names_it_so_retry_and_catch_match():
    from botocore.exceptions import ClientError

    conflict = ServiceError("ConflictException", "a deployment is in progress", 409)
    throttled = ClientError({"Error": {"Code": "Throttling", "Message": "Rate exceeded"},
                             "ResponseMetadata": {"HTTPStatusCode": 400, "RequestId": "r-1"}}, "StartDeployment")
    missing = ServiceError("ResourceNotFoundException", "environment env not found", 404)
    retried = deploy_state(
        Retry=[{"ErrorEquals": ["AppConfig.ConflictException", "AppConfig.AppConfigException"], "IntervalSeconds": 1,
                "MaxAttempts": 3}],
        Catch=[{"ErrorEquals": ["AppConfig.ResourceNotFoundException"], "ResultPath": "$.error", "Next": "Gone"}],
    )
    machine = template({"Deploy": then(retried, "Done"), "Done": {"Type": "Succeed"},
                        "Gone": {"Type": "Pass", "End": True}})
    fake = AppConfigAnswering(conflict, throttled, missing)
    with StateMachineRunner(machine, services={"appconfig": fake}, time_scale=1000) as runner:
        run = runner.run({"n": 1}).raise_for_status()

    # Retried on the modeled ConflictException and on Throttling, which AppConfig's model does not
    # declare (the SDK's base exception, AppConfig.AppConfigException); caught on ResourceNotFound.
    assert run.task_errors() == Counter({"AppConfig.ConflictException": 1, "AppConfig.AppConfigException": 1,
                                         "AppConfig.ResourceNotFoundException": 1})
    assert run.output["error"]["Error"] == "AppConfig.ResourceNotFoundException"
    assert run.output["error"]["Cause"].startswith("environment env not found (Service: AppConfig, Status Code: 404")
    assert len(fake.calls) == 3 and fake.calls[0]["ConfigurationVersion"] == "2"  # API-shaped parameters

    fake = AppConfigAnswering()
    with StateMachineRunner(machine, services={"appconfig": fake}) as runner:
        run = runner.run().raise_for_status()
    assert run.output == {"DeploymentNumber": 3, "State": "DEPLOYING", "ConfigurationVersion": "2"}
    assert [e["stateEnteredEventDetails"]["name"] for e in run.history if "stateEnteredEventDetails" in e] == ["Deploy", "Done"]


@pytest.mark.parametrize(("service_id", "prefix"), [
    ("ACM PCA", "AcmPca"), ("DynamoDB", "DynamoDb"), ("SFN", "Sfn"), ("AppConfig", "AppConfig"), ("S3", "S3"),
    ("Bedrock Runtime", "BedrockRuntime"), ("CloudWatch Logs", "CloudWatchLogs"), ("EC2", "Ec2"),
])
def test_error_names_take_the_service_name_step_functions_uses(service_id, prefix):
    from genai_pacer.testing.sfn._interpreter import error_prefix_for

    assert error_prefix_for(service_id) == prefix


@pytest.mark.parametrize(("api", "code", "name"), [
    ("appconfig", "ConflictException", "AppConfig.ConflictException"),
    ("appconfig", "Throttling", "AppConfig.AppConfigException"),
    ("cloudwatch", "Throttling", "CloudWatch.CloudWatchException"),
    ("s3", "NoSuchKey", "S3.NoSuchKeyException"),
    ("dynamodb", "ConditionalCheckFailedException", "DynamoDb.ConditionalCheckFailedException"),
    ("sfn", "ExecutionDoesNotExist", "Sfn.ExecutionDoesNotExistException"),
    ("acmpca", "ResourceNotFoundException", "AcmPca.ResourceNotFoundException"),
])
def test_a_service_error_is_named_by_its_modeled_exception_or_the_sdks_base_exception(api, code, name):
    from genai_pacer.testing.sfn._interpreter import error_name

    assert error_name(api, code) == name


def test_the_service_index_reads_each_models_service_id_as_botocore_loads_it():
    """The aws-sdk name index reads serviceId from the head of each model file, not the loaded model."""
    from botocore.session import get_session
    from genai_pacer.testing.sfn._interpreter import _model_metadata_from_head, _service_id

    session = get_session()
    names = session.get_available_services()
    sample = {*names[::8], "stepfunctions", "logs", "acm-pca", "mediapackage"}
    assert {name: _service_id(session, name) for name in sample} == {
        name: session.get_service_model(name).metadata["serviceId"] for name in sample}
    # read from the head but where the metadata runs past it (mediapackage's, in botocore 1.44)
    assert {name for name in sample if _model_metadata_from_head(session, name) is None} <= {"mediapackage"}


def test_a_model_that_does_not_begin_with_its_metadata_is_loaded_whole(tmp_path):
    import botocore.loaders
    import botocore.session
    from genai_pacer.testing.sfn._interpreter import _model_metadata_from_head, _service_id

    model = tmp_path / "stepfunctions" / "2099-01-01" / "service-2.json"
    model.parent.mkdir(parents=True)
    model.write_text(json.dumps({"version": "2.0", "operations": {}, "shapes": {},
                                 "metadata": {"serviceId": "Later SFN", "protocol": "json", "apiVersion": "2099-01-01"}}))
    session = botocore.session.Session()
    session.register_component("data_loader", botocore.loaders.Loader(extra_search_paths=[str(tmp_path)]))
    assert _model_metadata_from_head(session, "stepfunctions") is None
    assert _service_id(session, "stepfunctions") == "Later SFN"
    assert _service_id(session, "appconfig") == "AppConfig"  # the others still come from their heads


def test_a_call_the_fake_does_not_implement_is_refused_before_the_run_naming_the_method_to_add():
    read = task("arn:aws:states:::aws-sdk:appconfig:getDeployment", Parameters={**APP, "DeploymentNumber": 1},
                Catch=[{"ErrorEquals": ["States.ALL"], "Next": "Hidden"}])
    machine = template({"Read": then(read, "Done"), "Done": {"Type": "Succeed"},
                        "Hidden": {"Type": "Pass", "End": True}})
    with StateMachineRunner(machine, services={"appconfig": AppConfigAnswering()}) as runner, pytest.raises(
        OfflineExecutionError,
        match=r"Task 'Read' calls appconfig:GetDeployment, and the fake given as services\['appconfig'\] "
              r"\(AppConfigAnswering\) has no method get_deployment: add `def get_deployment\(self, \*\*params\)`",
    ):
        runner.run()


def test_parameters_the_api_does_not_take_fail_the_task_before_the_fake_is_called():
    fake = AppConfigAnswering()
    lower = deploy_state()
    lower["Parameters"]["applicationId"] = lower["Parameters"].pop("ApplicationId")
    with StateMachineRunner(template({"Deploy": lower}), services={"appconfig": fake}) as runner:
        run = runner.run()
    assert run.status == "FAILED" and run.error == "States.Runtime"
    assert "Parameters.applicationId" in run.cause and "'ApplicationId'" in run.cause

    missing = deploy_state()
    del missing["Parameters"]["ConfigurationVersion"]
    with StateMachineRunner(template({"Deploy": missing}), services={"appconfig": fake}) as runner:
        run = runner.run()
    assert run.status == "FAILED" and run.error == "States.Runtime"
    assert "Missing required parameter" in run.cause and "ConfigurationVersion" in run.cause
    assert fake.calls == []


class Broken:
    def __init__(self, answer) -> None:
        self.answer = answer

    def start_deployment(self, **params):
        return self.answer(params)


@pytest.mark.parametrize(("answer", "expected"), [
    (lambda params: params["Nope"], r"raised KeyError: 'Nope' in start_deployment"),
    (lambda params: {"deploymentNumber": 3}, r"answered appconfig:StartDeployment with what the API never returns: "
                                             r"StartDeployment.deploymentNumber \(write 'DeploymentNumber'\)"),
    (lambda params: [3], r"it returned list, not a dict"),
])
def test_a_fake_that_misbehaves_fails_the_run_instead_of_passing_as_an_outcome(answer, expected):
    caught = deploy_state(Catch=[{"ErrorEquals": ["States.ALL"], "Next": "Hidden"}])
    machine = template({"Deploy": then(caught, "Done"), "Done": {"Type": "Succeed"},
                        "Hidden": {"Type": "Pass", "End": True}})
    with StateMachineRunner(machine, services={"appconfig": Broken(answer)}) as runner, pytest.raises(
        OfflineExecutionError, match=r"ended SUCCEEDED, but a fake of `services` misbehaved(.|\n)*" + expected,
    ):
        runner.run()


class OnlyCamel:
    def startDeployment(self, **params):  # noqa: N802 - the mistake this test is about
        return {}


CALLS_APPCONFIG = template({"Deploy": deploy_state()})


@pytest.mark.parametrize(("services", "expected"), [
    ([("appconfig", object())], r"services=.* is a list; pass a dict of aws-sdk service name -> fake"),
    ({"appconfig": None}, r"services\['appconfig'\]=None is None; pass an object whose methods are appconfig's operations"),
    ({"appconfig": 0}, r"services\['appconfig'\]=0 is an int; pass an object"),
    ({"appconfig": "fake"}, r"services\['appconfig'\]='fake' is a str; pass an object"),
    ({"appconfig": {"start_deployment": lambda **p: {}}}, r"services\['appconfig'\]=.* is a dict; pass an object"),
    ({"appconfig": float("nan")}, r"services\['appconfig'\]=nan is a float; pass an object"),
    ({"appconfig": True}, r"services\['appconfig'\]=True is a bool; pass an object"),
    ({"appconfig": AppConfigAnswering}, r"services\['appconfig'\]=AppConfigAnswering is a class; pass an instance, AppConfigAnswering\(\)"),
    ({"appconfig": OnlyCamel()}, r"services\['appconfig'\].startDeployment: name the method start_deployment"),
    ({"appconfig": object()}, r"services\['appconfig'\] \(object\) has no method named after an operation of appconfig"),
    ({"AppConfig": AppConfigAnswering()}, r"'AppConfig' is not an AWS SDK service Step Functions can call; write the service name"),
    ({"stepfunctions": AppConfigAnswering()}, r"'stepfunctions' is not an AWS SDK service .*; write 'sfn' \(the aws-sdk name"),
    ({"bedrockruntime": AppConfigAnswering()}, r"services\['bedrockruntime'\]: Bedrock is served by the runner itself; pass bedrock="),
    ({"": AppConfigAnswering()}, r"services key '' is a str; key each fake by the aws-sdk service name"),
    ({3: AppConfigAnswering()}, r"services key 3 is an int; key each fake by the aws-sdk service name"),
])
def test_bad_services_are_refused_naming_the_key_and_the_fix(services, expected):
    with pytest.raises(ValueError, match=expected):
        StateMachineRunner(CALLS_APPCONFIG, services=services)


def test_a_fake_for_a_service_no_state_machine_calls_is_refused_listing_those_it_calls():
    class FakeCloudWatch:
        def enable_alarm_actions(self, **params):
            return {}

    with pytest.raises(ValueError, match=r"services\['cloudwatch'\]: no state machine of this template calls "
                                         r"aws-sdk:cloudwatch:\*, so the fake would never answer; the aws-sdk services "
                                         r"its state machines call are appconfig"):
        StateMachineRunner(CALLS_APPCONFIG, services={"appconfig": AppConfigAnswering(), "cloudwatch": FakeCloudWatch()})


# ---- Lambda tasks: your functions through functions=, failures kept short ---------------------------------


class OutOfStock(Exception):
    """What the order function raises for a sold-out item: a Catch names it."""


def orders_stack(*, catch: bool = True, payload_only: bool = False) -> cdk.Stack:
    """A user's own function (not genai-pacer's code) invoked through lambda:invoke, its OutOfStock caught."""
    from aws_cdk import aws_lambda as lambda_

    stack = new_stack()
    function = lambda_.Function(stack, "Enrich", runtime=lambda_.Runtime.PYTHON_3_12, handler="index.handler",
                                code=lambda_.Code.from_inline("def handler(event, context):\n    return event\n"))
    selector = None if payload_only else {"total.$": "$.Payload.total", "status.$": "$.StatusCode",
                                          "version.$": "$.ExecutedVersion", "requestId.$": "$.SdkResponseMetadata.RequestId"}
    invoke = tasks.LambdaInvoke(stack, "Enrich order", lambda_function=function, payload_response_only=payload_only,
                                payload=sfn.TaskInput.from_object({"order.$": "$.order"}), result_selector=selector)
    if catch:
        invoke.add_catch(sfn.Pass(stack, "Sold out", parameters={"error.$": "$.Error", "cause.$": "States.StringToJson($.Cause)"}),
                         errors=["OutOfStock"])
    machine(stack, "Orders", invoke)
    return stack


def enrich(event, context):
    if event["order"]["sku"] == "none-left":
        raise OutOfStock("sku none-left is sold out")
    return {"total": event["order"]["qty"] * 3, "remaining_ms": context.get_remaining_time_in_millis()}


def test_your_own_function_runs_through_functions_and_returns_what_lambda_invoke_returns():
    from genai_pacer.testing.sfn._lambda import INVOKE_RESULT_MEMBERS

    with StateMachineRunner(orders_stack(), functions={"Enrich": enrich}) as runner:
        run = runner.run({"order": {"sku": "a", "qty": 2}}).raise_for_status()
    assert run.output["total"] == 6 and run.output["status"] == 200 and run.output["version"] == "$LATEST"
    assert run.output["requestId"] and run.lambda_calls == [run.lambda_calls[0]] and run.lambda_calls[0].startswith("Enrich")
    with StateMachineRunner(orders_stack(payload_only=True), functions={"Enrich": enrich}) as runner:
        payload_only = runner.run({"order": {"sku": "a", "qty": 2}}).raise_for_status()
    assert payload_only.output == {"total": 6, "remaining_ms": payload_only.output["remaining_ms"]}  # the value itself
    assert 0 < payload_only.output["remaining_ms"] <= 3_000  # the function's timeout: CDK's default, Lambda's 3 s
    whole = {"StartAt": "Invoke", "States": {"Invoke": task("arn:aws:states:::lambda:invoke", Parameters={
        "FunctionName": "arn:aws:lambda:us-east-1:123456789012:function:pricing:live", "Payload": {"order": {"sku": "a", "qty": 1}}})}}
    shaped = {"Resources": {"Machine": {"Type": "AWS::StepFunctions::StateMachine",
                                        "Properties": {"DefinitionString": json.dumps(whole)}}}}
    with StateMachineRunner(shaped, functions={"pricing": enrich}) as runner:  # an imported function, by name
        result = runner.run().raise_for_status().output
    assert tuple(sorted(result)) == INVOKE_RESULT_MEMBERS and result["Payload"]["total"] == 3
    assert result["SdkHttpMetadata"]["HttpStatusCode"] == 200 == result["StatusCode"]


def test_an_exception_of_your_function_fails_the_task_with_its_class_name_as_step_functions_does():
    with StateMachineRunner(orders_stack(), functions={"Enrich": enrich}) as runner:
        caught = runner.run({"order": {"sku": "none-left", "qty": 1}}).raise_for_status()
    with StateMachineRunner(orders_stack(catch=False), functions={"Enrich": enrich}) as runner:
        failed = runner.run({"order": {"sku": "none-left", "qty": 1}})
    assert caught.output["error"] == "OutOfStock"  # the Catch on the exception's name matched
    cause = caught.output["cause"]
    assert (cause["errorType"], cause["errorMessage"]) == ("OutOfStock", "sku none-left is sold out")
    assert sorted(cause) == ["errorMessage", "errorType", "requestId", "stackTrace"]
    assert "in enrich" in cause["stackTrace"][-1] and not any("_lambda.py" in frame for frame in cause["stackTrace"])
    assert (failed.status, failed.error, failed.failed_state) == ("FAILED", "OutOfStock", "Enrich order")
    assert failed.task_errors() == {"OutOfStock": 1}  # the Lambda service Retry CDK adds does not match it


def test_your_own_function_without_functions_is_refused_with_the_fix_that_runs_it():
    import re

    with StateMachineRunner(orders_stack()) as runner, pytest.raises(OfflineExecutionError) as raised:
        runner.run({"order": {"sku": "a", "qty": 2}})
    message = str(raised.value)
    assert "Task 'Enrich order' invokes AWS Lambda function Enrich" in message
    assert "whose code is not one of genai-pacer's handlers" in message
    (key,) = re.findall(r"functions=\{'(\w+)': handler\}", message)
    with StateMachineRunner(orders_stack(), functions={key: enrich}) as runner:  # the fix, as the message words it
        assert runner.run({"order": {"sku": "a", "qty": 2}}).raise_for_status().output["total"] == 6


def test_a_function_that_returns_what_lambda_cannot_return_is_reported_as_the_test_s_bug():
    with StateMachineRunner(orders_stack(), functions={"Enrich": lambda event, context: {"skus": {"a", "b"}}}) as runner, \
            pytest.raises(OfflineExecutionError, match=r"but a function misbehaved(.|\n)*the callable given in functions= "
                                                       r"for Enrich\w+ \(.*\) returned dict, which is not JSON"):
        runner.run({"order": {"sku": "a", "qty": 2}})


@pytest.mark.parametrize(("functions", "expected"), [
    ({"Nope": enrich}, r"functions\['Nope'\] matches 0 of the Lambda functions the state machines invoke; .*Enrich"),
    ({"Enrich": "index.handler"}, r"functions\['Enrich'\] is a str; pass handler\(event, context\)"),
    ({3: enrich}, r"functions key 3 is an int; key each handler by the function's logical id"),
    ([("Enrich", enrich)], r"functions=.* is a list; pass a dict of function logical id"),
])
def test_bad_functions_are_refused_naming_the_key_and_the_fix(functions, expected):
    with pytest.raises(ValueError, match=expected):
        StateMachineRunner(orders_stack(), functions=functions)


def test_a_failed_run_says_where_and_why_in_a_few_lines_and_keeps_moto_s_log_out_of_logging(caplog):
    """moto logs each failing state with the repr of its whole subtree: tens of KB that pytest would print
    with the failure. The runner keeps those records on the run and reports a few lines."""
    def out_of_stock_every_time(event, context):
        raise OutOfStock("sold out: " + "x" * 5_000)  # a long cause, as a stack trace can be

    stack = new_stack()
    from aws_cdk import aws_lambda as lambda_

    function = lambda_.Function(stack, "Enrich", runtime=lambda_.Runtime.PYTHON_3_12, handler="index.handler",
                                code=lambda_.Code.from_inline("def handler(event, context):\n    return event\n"))
    each = sfn.Map(stack, "Orders", items_path="$.orders", max_concurrency=2)
    each.item_processor(tasks.LambdaInvoke(stack, "Enrich order", lambda_function=function))
    machine(stack, "Machine", each)
    with caplog.at_level("WARNING"), StateMachineRunner(stack, functions={"Enrich": out_of_stock_every_time}) as runner:
        run = runner.run({"orders": [{"n": n} for n in range(3)]})
    assert (run.status, run.error) == ("FAILED", "OutOfStock")
    message = run.failure()
    assert "in state 'Orders > Enrich order'" in message and "OutOfStock: sold out: xxx" in message
    assert len(message) < 1_200 and len(message.splitlines()) <= 5, message
    with pytest.raises(AssertionError) as raised:
        run.raise_for_status()
    assert str(raised.value) == message
    assert len(repr(run)) < 200  # what pytest prints for `assert run.succeeded`
    assert sum(len(record) for record in run.moto_log) > 5_000  # kept, for who asks
    assert not [r for r in caplog.records if r.name.startswith("moto.stepfunctions")]
    with caplog.at_level("WARNING"), StateMachineRunner(stack, functions={"Enrich": out_of_stock_every_time},
                                                        debug=True) as runner:
        runner.run({"orders": [{"n": 0}]})
    assert [r for r in caplog.records if r.name.startswith("moto.stepfunctions")]  # debug=True passes them on


def test_the_lambda_facts_are_botocore_s():
    from botocore.session import get_session
    from genai_pacer.testing.sfn import _lambda

    model = get_session().get_service_model("lambda")
    invoke = model.operation_model("Invoke").output_shape.members
    create = model.operation_model("CreateFunction").input_shape.members
    assert f"For the <code>RequestResponse</code> invocation type, this status code is {_lambda.INVOKE_STATUS_CODE}." \
        in invoke["StatusCode"].documentation
    assert "FunctionError" in invoke and "ExecutedVersion" in invoke
    assert f"The default is {_lambda.DEFAULT_TIMEOUT_SECONDS} seconds" in create["Timeout"].documentation
    assert f"The default value is {_lambda.DEFAULT_MEMORY_MB} MB" in create["MemorySize"].documentation


def test_a_definition_is_parsed_once_and_each_execution_builds_its_own_states():
    """The runner keeps a definition's ANTLR parse (moto parsed it at creation and at every execution);
    each execution still evaluates components of its own, so two runs with different inputs do not mix."""
    from genai_pacer.testing.sfn._interpreter import _definition_tree

    machine = template({"Double": {"Type": "Pass", "Parameters": {"n.$": "States.MathAdd($.n, $.n)"}, "End": True}})
    _definition_tree.cache_clear()
    with StateMachineRunner(machine) as runner:
        first = runner.run({"n": 2}).raise_for_status()
        second = runner.run({"n": 5}).raise_for_status()
    assert (first.output, second.output) == ({"n": 4}, {"n": 10})
    parsed = _definition_tree.cache_info()
    assert parsed.misses == 1 and parsed.hits >= 2, parsed  # created once, executed twice: one ANTLR parse
