"""BatchPrecompute: the state machine executed offline for every way a job ends, the template's
grants and parameters, every prop's bad values, and cdk-nag.

Offline, moto's interpreter runs the synthesized definition, the runner calls the construct's
functions that the state machine invokes (prepare, load, summary: genai-pacer handlers) in this
process, the BatchJobSimulator plays Bedrock's job API (its output is shuffled, as Bedrock's is), and
two stand-ins do what moto cannot:
- `InProcessLambdas` loads the JobEvents function, which EventBridge and a schedule call rather than
  the state machine, in this process with the environment the template gives it;
- `BedrockEvents` plays Bedrock ending a job and EventBridge delivering `Batch Inference Job State
  Change`: when a wait has stored its task token, it ends that job in the simulator (which writes
  the .jsonl.out files and the manifest) and hands the event (checked against the rule's pattern)
  to the JobEvents handler, which completes the token.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.assertions import Template
from botocore.exceptions import ClientError
from genai_pacer import AnswerStore, BedrockModel, InvalidPropsError, StateMachineOptions
from genai_pacer.precompute import batch as batch_module
from genai_pacer.precompute.batch import BatchPrecompute
from genai_pacer.testing.sfn import BatchJobSimulator, BatchRecordError, StateMachineRunner
from genai_pacer.testing.sfn._batch import ServiceError
from helpers import (
    all_states,
    definition,
    kms_statements,
    new_stack,
    only,
    policy_statements,
    resources,
    template_of,
)
from moto.events.models import EventPattern
from pacer_runtime import answers, metrics

NOVA = BedrockModel.foundation("amazon.nova-lite-v1:0")
PROFILE = BedrockModel.from_id("us.anthropic.claude-3-5-haiku-20241022-v1:0")
SMALL_QUOTAS = {"min_records_per_job": 10, "max_records_per_job": 40, "max_records_per_file": 15}
TERMINAL = ("Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired")
HANDLERS = {"job_events_function": "job_events"}  # the state machine's own functions are the runner's
NAN, INF = math.nan, math.inf


def offline_stack() -> cdk.Stack:
    return cdk.Stack(cdk.App(), "Offline")


def pipeline(stack: cdk.Stack, **props: Any) -> BatchPrecompute:
    return BatchPrecompute(stack, "Reviews", **{
        "model": NOVA, "max_tokens": 300, "job_name_prefix": "reviews", **SMALL_QUOTAS, **props})


def items(count: int) -> list[dict]:
    return [{"key": f"Review-Summary#{n}", "prompt": f"Summarize the reviews of product {n}"} for n in range(count)]


def prompt_of(record: dict) -> str:
    return record["modelInput"]["messages"][0]["content"][0]["text"]


def answer(record: dict) -> dict:
    """A Converse modelOutput, as a batch job with modelInvocationType=Converse writes it."""
    return {"output": {"message": {"role": "assistant", "content": [{"text": f"summary: {prompt_of(record)}"}]}},
            "stopReason": "end_turn", "usage": {"inputTokens": 40, "outputTokens": 12}}


# ---- the offline harness --------------------------------------------------------------------------------


class _Context:
    def __init__(self, name: str) -> None:
        self.function_name, self.aws_request_id = name, "offline"

    def get_remaining_time_in_millis(self) -> int:
        return 900_000


class InProcessLambdas:
    """Loads the functions no state machine invokes in this process, each with the environment its
    template gives it."""

    def __init__(self, runner: StateMachineRunner, batch: BatchPrecompute, monkeypatch) -> None:
        stack = cdk.Stack.of(batch)
        self.modules: dict[str, Any] = {}
        monkeypatch.setenv("AWS_DEFAULT_REGION", runner.template.env.region)
        for attribute, name in HANDLERS.items():
            function = getattr(batch, attribute)
            logical_id = stack.resolve(stack.get_logical_id(function.node.default_child))
            props = runner.template.resources[logical_id]["Properties"]
            for key, value in runner.template.resolve(props.get("Environment", {}).get("Variables", {}), where=logical_id).items():
                monkeypatch.setenv(key, str(value))
            sys.modules.pop(f"batch_precompute.{name}", None)
            module = importlib.import_module(f"batch_precompute.{name}")  # clients created inside moto
            self.modules[name] = module


class BedrockEvents(threading.Thread):
    """Ends each job whose wait stored a token and delivers the job's state-change event."""

    def __init__(self, offline: Offline, *, deliver: bool = True, message: str | None = None,
                 tamper=None, hold: float = 0.0, shape: str = "batch", check: bool = False) -> None:
        super().__init__(daemon=True)
        self.offline, self.deliver, self.message, self.tamper, self.hold = offline, deliver, message, tamper, hold
        self.shape, self.check = shape, check
        self.outcomes: list[dict] = []
        self.checks: list[dict] = []
        self.stopped = threading.Event()
        self.seen: set[tuple[str, str]] = set()
        self.events: list[dict] = []
        self.max_in_flight = 0
        self.errors: list[BaseException] = []

    def in_flight(self) -> int:
        return sum(1 for job in self.offline.jobs.jobs if job.status not in TERMINAL)

    def run(self) -> None:
        runner = self.offline.runner
        try:
            while not self.stopped.is_set():
                for item in runner.dynamodb.scan(TableName=self.offline.token_table)["Items"]:
                    arn, token = item["jobArn"]["S"], item["token"]["S"]
                    if (arn, token) in self.seen or not self.deliver:
                        continue
                    self.seen.add((arn, token))
                    self.max_in_flight = max(self.max_in_flight, self.in_flight())
                    time.sleep(self.hold)  # room for an unbounded Map to submit more jobs than allowed
                    self.max_in_flight = max(self.max_in_flight, self.in_flight())
                    job = next(job for job in self.offline.jobs.jobs if job.job_arn == arn)
                    if job.status not in TERMINAL:  # Bedrock runs the job: output and manifest written
                        self.offline.jobs.call("GetModelInvocationJob", {"jobIdentifier": arn}, s3=runner.s3,
                                               region=runner.template.env.region, account=runner.template.env.account)
                    if self.tamper is not None:
                        self.tamper(job)
                    event = self.offline.event(job, self.message, self.shape)
                    self.events.append(event)
                    self.outcomes.append(self.offline.lambdas.modules["job_events"].handler(event, _Context("JobEvents")))
                if self.check and (self.outcomes or not self.deliver):  # the CheckJobs schedule firing, after
                    # the event (when one is delivered): else on a loaded machine the check could end the
                    # wait before the event is seen, and the event's handling would go untested
                    module = self.offline.lambdas.modules["job_events"]
                    self.checks.append(module.handler(dict(module.CHECK_JOBS), _Context("JobEvents")))
                time.sleep(0.02)
        except BaseException as error:  # surfaced by the test, not lost in the thread
            self.errors.append(error)


class Offline:
    """A runner with the construct's functions in process and a Bedrock + EventBridge stand-in."""

    def __init__(self, stack: cdk.Stack, batch: BatchPrecompute, jobs: BatchJobSimulator, monkeypatch) -> None:
        self.stack, self.batch, self.jobs, self.monkeypatch = stack, batch, jobs, monkeypatch

    def __enter__(self) -> Offline:
        self.runner = StateMachineRunner(self.stack, batch_jobs=self.jobs, time_scale=600).start()
        try:
            self.lambdas = InProcessLambdas(self.runner, self.batch, self.monkeypatch)
            self.token_table = self.runner.physical_name(self.batch.token_table)
            self.answer_table = self.runner.physical_name(self.batch.answer_store.table)
            rules = resources(self.runner.template.body, "AWS::Events::Rule").values()
            self.pattern = only_one(r["Properties"]["EventPattern"] for r in rules if "EventPattern" in r["Properties"])
            self.lambdas.modules["job_events"].BEDROCK = SimulatedBedrock(self)
        except BaseException:
            self.runner.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.runner.close()

    def get_job(self, arn: str) -> dict:
        try:
            return self.jobs.call("GetModelInvocationJob", {"jobIdentifier": arn}, s3=self.runner.s3,
                                  region=self.runner.template.env.region, account=self.runner.template.env.account)
        except ServiceError as error:
            raise ClientError({"Error": {"Code": error.code, "Message": error.message}}, "GetModelInvocationJob") from None

    def run(self, input: dict, **driver: Any):
        events = BedrockEvents(self, **driver)
        events.start()
        try:
            run = self.runner.run(input, state_machine=self.batch.state_machine, timeout=90)
        finally:
            events.stopped.set()
            events.join(5)
        if events.errors:
            raise events.errors[0]
        return run, events

    def event(self, job, message: str | None, shape: str = "batch") -> dict:
        """The event Bedrock sends when a job ends; the rule's pattern must match it (moto's matcher).

        shape: "batch" (batchJobArn / batchJobName, as public code reads them), "customization" (jobArn /
        jobName, as the model-customization event names them), or "neither" (only status; no resources).
        """
        message = message if message is not None else (job.message or "")
        detail: dict[str, Any] = {"status": job.status, "failureMessage": message}
        if shape == "batch":
            detail.update(batchJobArn=job.job_arn, batchJobName=job.job_name)
        elif shape == "customization":
            detail.update(jobArn=job.job_arn, jobName=job.job_name)
        event = {
            "version": "0", "id": "offline", "detail-type": "Batch Inference Job State Change", "source": "aws.bedrock",
            "account": self.runner.template.env.account, "region": self.runner.template.env.region,
            "time": "2026-12-01T07:00:00Z", "resources": [] if shape == "neither" else [job.job_arn],
            "detail": detail,
        }
        assert EventPattern.load(json.dumps(self.pattern)).matches_event(event), f"the JobEnded rule would not deliver {event}"
        return event

    def stored(self) -> dict[str, answers.Answer]:
        items_ = self.runner.dynamodb.scan(TableName=self.answer_table)["Items"]
        return {item["pk"]["S"]: answers.Answer.from_item(item) for item in items_}

    def lines(self, uri: str) -> list[dict]:
        bucket, _, key = uri[5:].partition("/")
        body = self.runner.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        return [json.loads(line) for line in body.splitlines()]


class SimulatedBedrock:
    """The job-events function's bedrock client, answered by the BatchJobSimulator."""

    def __init__(self, offline: Offline) -> None:
        self.offline = offline

    def get_model_invocation_job(self, *, jobIdentifier: str) -> dict:
        return self.offline.get_job(jobIdentifier)


def only_one(values) -> Any:
    found = list(values)
    assert len(found) == 1, found
    return found[0]


def entered(run) -> list[str]:
    return [event["stateEnteredEventDetails"]["name"] for event in run.history if "stateEnteredEventDetails" in event]


# ---- executed offline: each way a job ends ----------------------------------------------------------------


def test_a_completed_job_is_loaded_joined_on_record_id_from_shuffled_output(monkeypatch):
    stack = offline_stack()
    batch = pipeline(stack)
    jobs = BatchJobSimulator(answer, polls_until_done=0, seed=3)
    with Offline(stack, batch, jobs, monkeypatch) as offline:
        run, events = offline.run({"items": items(30)})
        stored = offline.stored()
        job = run.batch_jobs[0]
        role_arn = offline.runner.template.arn(cdk.Stack.of(batch).resolve(
            cdk.Stack.of(batch).get_logical_id(batch.service_role.node.default_child)))
        sent = offline.lines(f"{job.input_uri}records-0000.jsonl")
        bucket = job.output_uri[5:].split("/", 1)[0]
        outputs = [key for key in job.output_keys if key.endswith(".jsonl.out")]
        returned = offline.lines(f"s3://{bucket}/{outputs[0]}")

    run.raise_for_status()
    assert run.output["outcome"] == "Loaded" and run.output["loaded"] == 30 and run.output["failedRecords"] == 0
    assert len(run.batch_jobs) == 1 and len(outputs) == 2  # 30 records: one job, two files of 15
    assert job.request["modelInvocationType"] == "Converse" and job.request["timeoutDurationInHours"] == 24
    assert job.request["inputDataConfig"]["s3InputDataConfig"]["s3InputFormat"] == "JSONL"
    assert job.role_arn == role_arn and job.model_id == "amazon.nova-lite-v1:0"
    # The output holds the same records in another order, as Bedrock's does.
    sent_ids, returned_ids = [line["recordId"] for line in sent], [line["recordId"] for line in returned]
    assert sorted(sent_ids) == sorted(returned_ids) and sent_ids != returned_ids
    # Every answer is stored under its own key: the join used recordId, not the output order.
    assert {key: a.text for key, a in stored.items()} == {
        f"review-summary#{n}": f"summary: Summarize the reviews of product {n}" for n in range(30)}
    assert {a.model_id for a in stored.values()} == {"amazon.nova-lite-v1:0"}
    assert [e["detail"]["status"] for e in events.events] == ["Completed"]
    assert "Check job" not in entered(run)  # the event ended the wait: no status call


def test_a_partially_completed_job_loads_what_succeeded_and_lists_errored_records_in_s3(monkeypatch):
    stack = offline_stack()
    batch = pipeline(stack)
    too_long = {f"Summarize the reviews of product {n}" for n in (4, 9, 17)}

    def respond(record):
        if prompt_of(record) in too_long:
            raise BatchRecordError("Input is too long for requested model.")
        return answer(record)

    jobs = BatchJobSimulator(respond, polls_until_done=0, seed=5)
    with Offline(stack, batch, jobs, monkeypatch) as offline:
        run, _ = offline.run({"items": items(20)})
        stored = offline.stored()
        listed = offline.lines(run.output["erroredUris"][0])

    run.raise_for_status()
    assert run.batch_jobs[0].status == "PartiallyCompleted"
    assert (run.output["outcome"], run.output["loaded"], run.output["failedRecords"]) == ("Loaded", 17, 3)
    assert run.output["partiallyCompletedJobs"] == 1 and run.output["unreconciledJobs"] == []
    assert sorted(stored) == sorted(f"review-summary#{n}" for n in range(20) if n not in (4, 9, 17))
    assert sorted(entry["key"] for entry in listed) == ["review-summary#17", "review-summary#4", "review-summary#9"]
    assert {entry["errorMessage"] for entry in listed} == {"Input is too long for requested model."}


def test_a_manifest_whose_counts_disagree_is_reported_and_the_answers_still_load(monkeypatch):
    stack = offline_stack()
    batch = pipeline(stack)
    jobs = BatchJobSimulator(answer, polls_until_done=0)

    with Offline(stack, batch, jobs, monkeypatch) as offline:
        def tamper(job):  # the manifest claims records the output files do not hold
            bucket = job.output_uri[5:].split("/", 1)[0]
            manifest = next(key for key in job.output_keys if key.endswith("manifest.json.out"))
            offline.runner.s3.put_object(Bucket=bucket, Key=manifest, Body=json.dumps({
                "totalRecordCount": 12, "processedRecordCount": 14, "successRecordCount": 14, "errorRecordCount": 0}).encode())

        run, _ = offline.run({"items": items(12)}, tamper=tamper)
        stored = offline.stored()

    run.raise_for_status()
    assert run.output["outcome"] == "Loaded" and run.output["loaded"] == 12 and len(stored) == 12
    assert run.output["unreconciledJobs"] == [run.batch_jobs[0].job_name]


@pytest.mark.parametrize(
    ("final_status", "message", "state", "error"),
    [
        ("Failed", "Validation failed: the input file has a malformed record", "Job failed", "BatchPrecompute.JobFailed"),
        ("Stopped", "Stopped by an operator", "Job stopped", "BatchPrecompute.JobStopped"),
        ("Expired", "The job did not complete within 24 hours", "Job expired", "BatchPrecompute.JobExpired"),
    ],
)
def test_a_job_that_ends_without_output_ends_the_run_in_a_named_failure_with_its_message(
    monkeypatch, final_status, message, state, error
):
    stack = offline_stack()
    batch = pipeline(stack)
    jobs = BatchJobSimulator(answer, polls_until_done=0, final_status=final_status,
                             message=message if final_status == "Failed" else None)
    with Offline(stack, batch, jobs, monkeypatch) as offline:
        def report(job):  # the message Bedrock's GetModelInvocationJob gives; the event's is not read
            job.message = message

        run, _ = offline.run({"items": items(12)}, message="what the event says is not used", tamper=report)
        stored = offline.stored()

    assert run.status == "FAILED" and run.error == error
    assert entered(run)[-1] == state
    assert f"ended {final_status}: {message}" in run.cause and run.batch_jobs[0].job_name in run.cause
    assert stored == {}
    assert "Load answers" not in entered(run)


def test_a_run_below_the_minimum_fails_with_the_numbers_and_submits_nothing(monkeypatch):
    stack = offline_stack()
    batch = pipeline(stack)
    jobs = BatchJobSimulator(answer, polls_until_done=0)
    with Offline(stack, batch, jobs, monkeypatch) as offline:
        run, _ = offline.run({"items": items(7)})

    assert run.status == "FAILED" and run.error == "BatchPrecompute.TooFewRecords"
    assert run.cause.startswith("7 records to answer (7 items, 0 rejected) is below the minimum of 10 records per batch")
    assert run.batch_jobs == []


def test_a_large_run_is_split_and_never_has_more_jobs_in_flight_than_allowed(monkeypatch):
    stack = offline_stack()
    batch = pipeline(stack, max_concurrent_jobs=2)
    jobs = BatchJobSimulator(answer, polls_until_done=0)
    with Offline(stack, batch, jobs, monkeypatch) as offline:
        run, events = offline.run({"items": items(95)}, hold=0.3)
        stored = offline.stored()

    run.raise_for_status()
    assert len(run.batch_jobs) == 3  # 95 records, at most 40 per job: 32 + 32 + 31, never 40 + 40 + 15
    assert sorted(len(job.output_keys) - 1 for job in run.batch_jobs) == [3, 3, 3]  # files of at most 15
    assert events.max_in_flight == 2
    assert run.output["loaded"] == 95 and len(stored) == 95


@pytest.mark.parametrize("shape", ["batch", "customization"])
def test_events_naming_the_job_either_way_end_the_wait_with_the_status_bedrock_reports(monkeypatch, shape):
    stack = offline_stack()
    batch = pipeline(stack)
    jobs = BatchJobSimulator(answer, polls_until_done=0)
    with Offline(stack, batch, jobs, monkeypatch) as offline:
        run, events = offline.run({"items": items(12)}, shape=shape)

    run.raise_for_status()
    assert run.output["loaded"] == 12
    assert [o["completed"] for o in events.outcomes] == [True]
    assert "Check job" not in entered(run)


def test_an_event_that_names_no_job_is_ignored_and_the_scheduled_check_ends_the_wait(monkeypatch, capsys):
    stack = offline_stack()
    batch = pipeline(stack)
    jobs = BatchJobSimulator(answer, polls_until_done=0)
    with Offline(stack, batch, jobs, monkeypatch) as offline:
        run, events = offline.run({"items": items(12)}, shape="neither", check=True)

    run.raise_for_status()
    assert run.output["loaded"] == 12
    assert events.outcomes and all(o["completed"] is False and "names no job ARN" in o["reason"] for o in events.outcomes)
    assert sum(c["completed"] for c in events.checks) == 1  # the check completed the wait, once
    assert "Check job" not in entered(run)


def test_a_lost_event_is_covered_by_the_scheduled_check(monkeypatch):
    stack = offline_stack()
    batch = pipeline(stack)
    jobs = BatchJobSimulator(answer, polls_until_done=2)
    with Offline(stack, batch, jobs, monkeypatch) as offline:
        run, events = offline.run({"items": items(12)}, deliver=False, check=True)

    run.raise_for_status()
    assert events.events == [] and run.output["loaded"] == 12
    assert sum(c["running"] for c in events.checks) >= 2 and sum(c["completed"] for c in events.checks) == 1
    assert "Check job" not in entered(run)


def test_without_event_nor_check_the_run_checks_the_job_itself_after_the_last_resort_wait(monkeypatch):
    monkeypatch.setattr(batch_module, "LAST_RESORT_CHECK", cdk.Duration.seconds(2))
    stack = offline_stack()
    batch = pipeline(stack)
    jobs = BatchJobSimulator(answer, polls_until_done=0)
    with Offline(stack, batch, jobs, monkeypatch) as offline:
        run, events = offline.run({"items": items(12)}, deliver=False)

    run.raise_for_status()
    assert events.events == [] and run.output["loaded"] == 12
    assert entered(run).count("Check job") == 1 and run.batch_jobs[0].polls == 1


class RefusingJobs(BatchJobSimulator):
    """Refuses the next job requests with the given service errors, then accepts them."""

    def __init__(self, *args: Any, refusals: list[ServiceError], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refusals = refusals

    def _create(self, params, **kwargs):
        if self.refusals:
            raise self.refusals.pop(0)
        return super()._create(params, **kwargs)


def test_a_full_job_quota_is_retried_with_backoff_until_the_job_is_accepted(monkeypatch):
    stack = offline_stack()
    batch = pipeline(stack)
    quota = ServiceError("ServiceQuotaExceededException", "Too many batch inference jobs are in progress")
    jobs = RefusingJobs(answer, polls_until_done=0, refusals=[quota, quota])
    with Offline(stack, batch, jobs, monkeypatch) as offline:
        run, _ = offline.run({"items": items(12)})

    run.raise_for_status()
    assert run.task_errors()["Bedrock.ServiceQuotaExceededException"] == 2 and run.output["loaded"] == 12


def test_a_refused_job_request_ends_the_run_not_submitted_with_bedrocks_message(monkeypatch):
    stack = offline_stack()
    batch = pipeline(stack)
    jobs = RefusingJobs(answer, refusals=[ServiceError("ValidationException", "The provided model does not support batch")])
    with Offline(stack, batch, jobs, monkeypatch) as offline:
        run, _ = offline.run({"items": items(12)})

    assert run.status == "FAILED" and run.error == "BatchPrecompute.SubmitFailed" and entered(run)[-1] == "Job not submitted"
    assert "The provided model does not support batch" in run.cause and "not submitted" in run.cause


def test_output_that_cannot_be_read_ends_the_run_load_failed(monkeypatch):
    stack = offline_stack()
    batch = pipeline(stack)
    jobs = BatchJobSimulator(answer, polls_until_done=0)
    with Offline(stack, batch, jobs, monkeypatch) as offline:
        def lose_the_mapping(job):
            bucket, _, folder = job.input_uri[5:].partition("/")
            offline.runner.s3.delete_object(Bucket=bucket, Key=folder.rstrip("/") + ".keys.jsonl")

        run, _ = offline.run({"items": items(12)}, tamper=lose_the_mapping)

    assert run.status == "FAILED" and run.error == "BatchPrecompute.LoadFailed" and entered(run)[-1] == "Load failed"
    assert "OutputError" in run.cause and "cannot read the key mapping" in run.cause


def test_items_from_s3_with_rejected_items_run_and_report_the_rejections(monkeypatch):
    stack = offline_stack()
    batch = pipeline(stack)
    jobs = BatchJobSimulator(answer, polls_until_done=0)
    with Offline(stack, batch, jobs, monkeypatch) as offline:
        bucket = offline.runner.physical_name(batch.items_bucket)
        body = "".join(json.dumps(item) + "\n" for item in items(11) + [{"key": "claim#x", "prompt": "p"}])
        offline.runner.s3.put_object(Bucket=bucket, Key="items/nightly.jsonl", Body=body.encode())
        run, _ = offline.run({"itemsKey": "items/nightly.jsonl"})
        rejected = offline.lines(run.output["rejectedUri"])

    run.raise_for_status()
    assert (run.output["items"], run.output["rejected"], run.output["loaded"]) == (12, 1, 11)
    assert rejected[0]["item"] == 11 and "reserved for claims" in rejected[0]["reason"]


def test_a_malformed_run_input_fails_with_the_prepare_functions_error(monkeypatch):
    stack = offline_stack()
    batch = pipeline(stack)
    with Offline(stack, batch, BatchJobSimulator(answer), monkeypatch) as offline:
        run, _ = offline.run({"keys": ["a"]})
    assert run.status == "FAILED" and run.error == "InvalidInputError" and "give exactly one of items" in run.cause


# ---- the template -----------------------------------------------------------------------------------------


def built(**props: Any) -> tuple[cdk.Stack, BatchPrecompute, dict]:
    stack = new_stack()
    batch = BatchPrecompute(stack, "Batch", **{"model": PROFILE, "max_tokens": 400, **props})
    return stack, batch, template_of(stack).to_json()


def states_of(template: dict) -> dict[str, dict]:
    return all_states(definition(only(template, "AWS::StepFunctions::StateMachine")))


def test_the_job_request_is_the_documented_create_model_invocation_job_call():
    _, _, template = built(job_timeout=cdk.Duration.hours(72))
    submit = states_of(template)["Submit job"]
    assert submit["Resource"].endswith(":::aws-sdk:bedrock:createModelInvocationJob")
    assert submit["Parameters"] == {
        "JobName.$": "$.jobName",
        "ClientRequestToken.$": "$.clientRequestToken",
        "RoleArn": "TOKEN",
        "ModelId": "us.anthropic.claude-3-5-haiku-20241022-v1:0",
        "ModelInvocationType": "Converse",
        "TimeoutDurationInHours": 72,
        "InputDataConfig": {"S3InputDataConfig": {"S3Uri.$": "$.inputUri", "S3InputFormat": "JSONL"}},
        "OutputDataConfig": {"S3OutputDataConfig": {"S3Uri.$": "$.outputUri"}},
    }
    assert submit["Retry"][0]["ErrorEquals"] == [
        "Bedrock.ThrottlingException", "Bedrock.ServiceQuotaExceededException",
        "Bedrock.InternalServerException", "Bedrock.ServiceUnavailableException"]
    assert submit["Retry"][0]["JitterStrategy"] == "FULL"


def test_the_wait_stores_its_token_and_the_map_is_bounded_by_the_job_quota():
    _, _, template = built(max_concurrent_jobs=7, status_check_interval=cdk.Duration.minutes(2))
    states = states_of(template)
    wait = states["Wait for job"]
    assert wait["Resource"].endswith(":::aws-sdk:dynamodb:putItem.waitForTaskToken")
    assert wait["Parameters"]["Item"]["token"] == {"S.$": "$$.Task.Token"}
    assert wait["Parameters"]["Item"]["jobArn"] == {"S.$": "$.job.jobArn"}
    assert wait["TimeoutSeconds"] == 6 * 3600  # LAST_RESORT_CHECK, whatever the scheduled check's interval
    assert wait["Catch"][0] == {"ErrorEquals": ["States.Timeout"], "ResultPath": "$.timedOut", "Next": "Check job"}
    assert states["Jobs"]["MaxConcurrency"] == 7 and states["Jobs"]["ItemsPath"] == "$.jobs"
    fails = {name: state["Error"] for name, state in states.items() if state["Type"] == "Fail"}
    assert fails == {
        "Too few records": "BatchPrecompute.TooFewRecords", "Job failed": "BatchPrecompute.JobFailed",
        "Job stopped": "BatchPrecompute.JobStopped", "Job expired": "BatchPrecompute.JobExpired",
        "Job not submitted": "BatchPrecompute.SubmitFailed", "Load failed": "BatchPrecompute.LoadFailed",
        "Unknown outcome": "BatchPrecompute.UnknownOutcome"}


def test_pass_role_is_conditioned_on_bedrock_and_job_calls_are_scoped_to_jobs_and_the_model():
    stack, batch, template = built()
    statements = policy_statements(template)
    pass_role = [s for s in statements if s["Action"] == "iam:PassRole"]
    assert len(pass_role) == 1
    assert pass_role[0]["Condition"] == {"StringEquals": {"iam:PassedToService": "bedrock.amazonaws.com"}}
    assert pass_role[0]["Resource"] == stack.resolve(batch.service_role.role_arn)
    create = next(s for s in statements if s["Action"] == "bedrock:CreateModelInvocationJob")
    flat = json.dumps(create["Resource"])
    assert ":model-invocation-job/*" in flat and "inference-profile/us.anthropic.claude-3-5-haiku" in flat
    get = next(s for s in statements if s["Action"] == "bedrock:GetModelInvocationJob")
    assert ":model-invocation-job/*" in json.dumps(get["Resource"]) and "foundation-model" not in json.dumps(get["Resource"])


def test_the_service_role_is_trusted_by_bedrock_for_this_accounts_jobs_only_and_reaches_two_prefixes():
    stack, batch, template = built()
    role = template["Resources"][stack.resolve(stack.get_logical_id(batch.service_role.node.default_child))]
    trust = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust == [{
        "Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "bedrock.amazonaws.com"},
        "Condition": {
            "StringEquals": {"aws:SourceAccount": "111122223333"},
            "ArnLike": {"aws:SourceArn": {"Fn::Join": ["", [
                "arn:", {"Ref": "AWS::Partition"}, ":bedrock:us-east-1:111122223333:model-invocation-job/*"]]}},
        },
    }]
    role_id = stack.resolve(stack.get_logical_id(batch.service_role.node.default_child))
    policy = next(p for p in resources(template, "AWS::IAM::Policy").values() if p["Properties"]["Roles"] == [{"Ref": role_id}])
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    input_bucket = stack.resolve(stack.get_logical_id(batch.input_bucket.node.default_child))
    output_bucket = stack.resolve(stack.get_logical_id(batch.output_bucket.node.default_child))

    def objects(bucket: str, prefix: str) -> dict:
        return {"Fn::Join": ["", [{"Fn::GetAtt": [bucket, "Arn"]}, prefix]]}

    assert statements[:4] == [
        {"Action": "s3:GetObject", "Effect": "Allow", "Resource": objects(input_bucket, "/batch-input/*")},
        {"Action": "s3:ListBucket", "Effect": "Allow", "Resource": {"Fn::GetAtt": [input_bucket, "Arn"]}},
        {"Action": ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"], "Effect": "Allow",
         "Resource": objects(output_bucket, "/batch-output/*")},
        {"Action": "s3:ListBucket", "Effect": "Allow", "Resource": {"Fn::GetAtt": [output_bucket, "Arn"]}},
    ]
    invoke = statements[4:]
    assert {s["Action"] for s in invoke} == {"bedrock:InvokeModel"}
    regions = {r for s in invoke for r in ("us-east-1", "us-east-2", "us-west-2") if r in json.dumps(s["Resource"])}
    assert regions == {"us-east-1", "us-east-2", "us-west-2"}  # the profile and every Region it routes to
    assert invoke[1]["Condition"]["StringEquals"]["bedrock:InferenceProfileArn"] == invoke[0]["Resource"]


def test_new_buckets_are_encrypted_tls_only_private_logged_and_expiring():
    _, _, template = built()
    buckets = resources(template, "AWS::S3::Bucket")
    assert len(buckets) == 3  # input, output, access logs
    for bucket in buckets.values():
        props = bucket["Properties"]
        assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"] == {
            "SSEAlgorithm": "AES256"}
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True, "RestrictPublicBuckets": True}
    logged = [b for b in buckets.values() if "LoggingConfiguration" in b["Properties"]]
    assert len(logged) == 2
    for bucket in logged:
        rules = bucket["Properties"]["LifecycleConfiguration"]["Rules"]
        assert rules[0]["ExpirationInDays"] == 30 and rules[0]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    for policy in resources(template, "AWS::S3::BucketPolicy").values():
        deny = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
        assert deny and deny[0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_a_kms_key_encrypts_the_buckets_and_the_jobs_output_and_is_granted_to_the_service_role():
    stack = new_stack()
    key = kms.Key(stack, "Key")
    batch = BatchPrecompute(stack, "Batch", model=NOVA, max_tokens=400, encryption_key=key)
    template = template_of(stack).to_json()
    output = states_of(template)["Submit job"]["Parameters"]["OutputDataConfig"]["S3OutputDataConfig"]
    assert output["S3EncryptionKeyId"] == "TOKEN"
    generate = [s for s in policy_statements(template) if "kms:GenerateDataKey" in s["Action"]]
    role_policies = [p for p in resources(template, "AWS::IAM::Policy").values()
                     if {"Ref": stack.resolve(stack.get_logical_id(batch.service_role.node.default_child))} in p["Properties"]["Roles"]]
    assert generate and any("kms:GenerateDataKey" in json.dumps(p) for p in role_policies)
    encrypted = [b for b in resources(template, "AWS::S3::Bucket").values()
                 if b["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"]
    assert len(encrypted) == 2


KEY_ARNS = {name: f"arn:aws:kms:us-east-1:111122223333:key/{n}234abcd-12ab-34cd-56ef-1234567890ab"
            for n, name in enumerate(("input", "output", "items"), start=1)}


def _kms_by_role(stack: cdk.Stack, batch: BatchPrecompute, template: dict) -> dict[str, list[dict]]:
    """The KMS statements of each role that touches the buckets, by role; and no KMS statement elsewhere."""
    roles = {"service": batch.service_role, "prepare": batch.prepare_function.role, "load": batch.load_function.role}
    ids = {name: stack.resolve(stack.get_logical_id(role.node.find_child("DefaultPolicy").node.default_child))
           for name, role in roles.items()}
    found = kms_statements(template)
    assert set(found) <= set(ids.values()), found
    return {name: found.get(logical_id, []) for name, logical_id in ids.items()}


def _read(arn: Any) -> dict:
    return {"Action": "kms:Decrypt", "Effect": "Allow", "Resource": arn}


def _write(arn: Any) -> dict:
    return {"Action": ["kms:GenerateDataKey", "kms:Decrypt"], "Effect": "Allow", "Resource": arn}


def test_your_imported_buckets_keys_given_as_props_go_to_each_role_that_reads_or_writes_and_encrypt_the_output():
    """The Bedrock service role reads the input and writes the output, prepare reads the items and
    writes the input, the loader reads the input and writes the output (its unanswered-records list):
    kms:Decrypt to read, kms:GenerateDataKey and kms:Decrypt to write, on exactly each bucket's key."""
    stack = new_stack()
    props: dict[str, Any] = {}
    for name in ("input", "output", "items"):
        props[f"{name}_bucket"] = s3.Bucket.from_bucket_name(stack, name.title(), f"users-{name}")
        props[f"{name}_bucket_key"] = kms.Key.from_key_arn(stack, f"{name.title()}Key", KEY_ARNS[name])
    batch = BatchPrecompute(stack, "Batch", model=NOVA, max_tokens=400, **props)
    template = template_of(stack).to_json()
    assert _kms_by_role(stack, batch, template) == {
        "service": [_read(KEY_ARNS["input"]), _write(KEY_ARNS["output"])],
        "prepare": [_read(KEY_ARNS["items"]), _write(KEY_ARNS["input"])],
        "load": [_read(KEY_ARNS["input"]), _write(KEY_ARNS["output"])],
    }
    output = states_of(template)["Submit job"]["Parameters"]["OutputDataConfig"]["S3OutputDataConfig"]
    assert output["S3EncryptionKeyId"] == KEY_ARNS["output"]


def test_your_buckets_with_their_own_keys_in_the_stack_are_granted_those_keys():
    """Buckets that know their key (same stack); the items are read from the input bucket by default."""
    stack = new_stack()
    in_key, out_key = kms.Key(stack, "InKey"), kms.Key(stack, "OutKey")
    batch = BatchPrecompute(stack, "Batch", model=NOVA, max_tokens=400,
                            input_bucket=s3.Bucket(stack, "In", encryption_key=in_key),
                            output_bucket=s3.Bucket(stack, "Out", encryption_key=out_key))
    template = template_of(stack).to_json()
    arn = {name: {"Fn::GetAtt": [stack.resolve(stack.get_logical_id(key.node.default_child)), "Arn"]}
           for name, key in (("in", in_key), ("out", out_key))}
    assert _kms_by_role(stack, batch, template) == {
        "service": [_read(arn["in"]), _write(arn["out"])],
        "prepare": [{"Action": ["kms:Decrypt", "kms:GenerateDataKey"], "Effect": "Allow", "Resource": arn["in"]}],
        "load": [_read(arn["in"]), _write(arn["out"])],
    }


def test_no_kms_grant_for_buckets_without_a_customer_managed_key():
    stack = new_stack()
    batch = BatchPrecompute(stack, "Batch", model=NOVA, max_tokens=400,
                            input_bucket=s3.Bucket.from_bucket_name(stack, "In", "users-in"))
    template = template_of(stack).to_json()
    assert _kms_by_role(stack, batch, template) == {"service": [], "prepare": [], "load": []}
    assert "S3EncryptionKeyId" not in json.dumps(states_of(template)["Submit job"])


@pytest.mark.parametrize(
    ("props", "problem"),
    [
        (lambda stack: dict(input_bucket_key=kms.Key.from_key_arn(stack, "K", KEY_ARNS["input"])),
         "input_bucket_key is set without input_bucket; the input bucket this construct creates is encrypted with "
         "encryption_key: pass input_bucket too, or use encryption_key"),
        (lambda stack: dict(output_bucket_key=kms.Key.from_key_arn(stack, "K", KEY_ARNS["output"])),
         "output_bucket_key is set without output_bucket; the output bucket this construct creates is encrypted with "
         "encryption_key: pass output_bucket too, or use encryption_key"),
        (lambda stack: dict(input_bucket=s3.Bucket.from_bucket_name(stack, "In", "users-in"),
                            items_bucket_key=kms.Key.from_key_arn(stack, "K", KEY_ARNS["items"])),
         "items_bucket_key is set without items_bucket; the items are then read from the input bucket, under its key: "
         "drop items_bucket_key"),
        (lambda stack: dict(output_bucket=s3.Bucket(stack, "Out", encryption_key=kms.Key(stack, "Own")),
                            output_bucket_key=kms.Key.from_key_arn(stack, "Other", KEY_ARNS["output"])),
         "output_bucket_key is Test/Other but output_bucket already knows its own key, Test/Own: the grants would "
         "name a key that does not encrypt the bucket; drop output_bucket_key"),
    ],
    ids=["input-key-without-bucket", "output-key-without-bucket", "items-key-without-bucket", "another-key"],
)
def test_a_bucket_key_prop_that_cannot_be_the_buckets_key_is_refused(props, problem):
    stack = new_stack()
    with pytest.raises(InvalidPropsError) as refused:
        BatchPrecompute(stack, "Batch", model=NOVA, max_tokens=400, **props(stack))
    assert refused.value.problems == [problem]


def test_your_own_buckets_are_used_and_no_bucket_is_created():
    stack = new_stack()
    mine_in = s3.Bucket.from_bucket_name(stack, "In", "my-in")
    mine_out = s3.Bucket.from_bucket_name(stack, "Out", "my-out")
    batch = BatchPrecompute(stack, "Batch", model=NOVA, max_tokens=400, input_bucket=mine_in, output_bucket=mine_out)
    template = template_of(stack).to_json()
    assert resources(template, "AWS::S3::Bucket") == {}
    assert batch.items_bucket is mine_in
    assert "my-in" in json.dumps(template) and "my-out" in json.dumps(template)


def test_the_rule_matches_only_the_documented_status_field_and_a_schedule_checks_the_jobs():
    stack, batch, template = built(job_name_prefix="reviews-nightly", status_check_interval=cdk.Duration.minutes(3))
    rules = {r["Properties"].get("Description", ""): r["Properties"] for r in resources(template, "AWS::Events::Rule").values()}
    ended = next(r for r in rules.values() if "EventPattern" in r)
    assert ended["EventPattern"] == {
        "source": ["aws.bedrock"], "detail-type": ["Batch Inference Job State Change"],
        "detail": {"status": ["Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired"]},
    }
    assert ended["Targets"][0]["RetryPolicy"] == {"MaximumEventAgeInSeconds": 86400, "MaximumRetryAttempts": 8}
    scheduled = next(r for r in rules.values() if "ScheduleExpression" in r)
    assert scheduled["ScheduleExpression"] == "rate(3 minutes)"
    assert json.loads(scheduled["Targets"][0]["Input"]) == {"action": "check-jobs"}
    invoke_config = only(template, "AWS::Lambda::EventInvokeConfig")["Properties"]
    assert invoke_config["MaximumRetryAttempts"] == 2
    env = next(f["Properties"]["Environment"]["Variables"] for f in resources(template, "AWS::Lambda::Function").values()
               if f["Properties"]["Handler"] == "batch_precompute.job_events.handler")
    assert env["JOB_NAME_PREFIX"] == "reviews-nightly"
    role = stack.resolve(batch.job_events_function.role.node.default_child.logical_id)
    policy = next(p for p in resources(template, "AWS::IAM::Policy").values() if p["Properties"]["Roles"] == [{"Ref": role}])
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    get_job = next(s for s in statements if s["Action"] == "bedrock:GetModelInvocationJob")
    assert ":model-invocation-job/*" in json.dumps(get_job["Resource"])
    assert any("dynamodb:Scan" in s["Action"] for s in statements)


def test_the_functions_get_their_settings_and_the_loader_writes_to_the_shared_store():
    stack = new_stack()
    store = AnswerStore(stack, "Store", answer_ttl=cdk.Duration.days(2))
    batch = BatchPrecompute(stack, "Batch", model=NOVA, max_tokens=400, answer_store=store, write_concurrency=8,
                            max_records_per_job=20_000, temperature=0.1, system_prompt="Be brief.")
    template = template_of(stack).to_json()
    functions = {f["Properties"]["Handler"]: f["Properties"] for f in resources(template, "AWS::Lambda::Function").values()}
    assert set(functions) == {f"batch_precompute.{m}.handler" for m in ("prepare", "load", "summary", "job_events")}
    assert all(f["Runtime"] == "python3.14" for f in functions.values())
    load_env = functions["batch_precompute.load.handler"]["Environment"]["Variables"]
    assert load_env["ANSWER_TTL_SECONDS"] == "172800" and load_env["WRITE_CONCURRENCY"] == "8"
    assert load_env["MODEL_ID"] == "amazon.nova-lite-v1:0"
    prepare_env = functions["batch_precompute.prepare.handler"]["Environment"]["Variables"]
    assert {k: prepare_env[k] for k in ("MAX_RECORDS_PER_JOB", "MIN_RECORDS_PER_JOB", "TEMPERATURE", "SYSTEM_PROMPT",
                                        "MAX_TOKENS", "INVOCATION_TYPE")} == {
        "MAX_RECORDS_PER_JOB": "20000", "MIN_RECORDS_PER_JOB": "100", "TEMPERATURE": "0.1", "SYSTEM_PROMPT": "Be brief.",
        "MAX_TOKENS": "400", "INVOCATION_TYPE": "Converse"}
    assert batch.answer_store is store
    table_arn = stack.resolve(store.table.table_arn)
    writes = [s for s in policy_statements(template) if "dynamodb:PutItem" in s["Action"] and "dynamodb:GetItem" in s["Action"]]
    assert [s["Resource"] for s in writes] == [[table_arn]]  # the loader writes to the shared store only


def test_a_fallback_state_machine_is_started_with_the_runs_input_below_the_minimum():
    stack = new_stack()
    fallback = sfn.StateMachine(stack, "OnDemand", definition_body=sfn.DefinitionBody.from_chainable(sfn.Pass(stack, "P")))
    BatchPrecompute(stack, "Batch", model=NOVA, max_tokens=400, on_demand_fallback=fallback)
    template = template_of(stack).to_json()
    machine = next(m for m in resources(template, "AWS::StepFunctions::StateMachine").values() if "Jobs" in json.dumps(m))
    states = all_states(definition(machine))
    assert states["Enough records?"]["Choices"][0]["Next"] == "Answer on demand"
    start = states["Answer on demand"]
    assert start["Resource"].endswith(":::states:startExecution.sync:2")
    assert start["Parameters"]["Input.$"] == "$$.Execution.Input"
    assert "Too few records" not in states


def test_the_metrics_read_the_loaders_namespace_names_and_function_dimension():
    stack, batch, _ = built()
    loaded, failed = batch.metric_records_loaded(), batch.metric_records_failed(period=cdk.Duration.hours(1))
    assert (loaded.namespace, loaded.metric_name, failed.metric_name) == (
        metrics.NAMESPACE, metrics.BATCH_RECORDS_LOADED, metrics.BATCH_RECORDS_FAILED)
    assert list(loaded.dimensions) == [metrics.FUNCTION_DIMENSION]
    assert stack.resolve(loaded.dimensions[metrics.FUNCTION_DIMENSION]) == stack.resolve(batch.load_function.function_name)
    assert loaded.statistic == "Sum" and failed.period.to_hours() == 1


def test_deploy_time_values_reach_the_functions_and_the_job_request_as_refs_never_as_encoded_numbers():
    stack = new_stack()
    number = lambda name: cdk.CfnParameter(stack, name, type="Number").value_as_number  # noqa: E731
    batch = BatchPrecompute(
        stack, "Batch", model=NOVA, max_tokens=number("MaxTokens"), temperature=number("Temperature"),
        min_records_per_job=number("Min"), max_records_per_job=number("Max"), max_records_per_file=number("PerFile"),
        max_job_bytes=number("JobBytes"), max_file_bytes=number("FileBytes"), write_concurrency=number("Writers"),
        max_concurrent_jobs=number("Jobs"), job_timeout=cdk.Duration.hours(number("Hours")),
    )
    template = template_of(stack).to_json()
    functions = {f["Properties"]["Handler"]: f["Properties"].get("Environment", {}).get("Variables", {})
                 for f in resources(template, "AWS::Lambda::Function").values()}
    prepare_env, load_env = functions["batch_precompute.prepare.handler"], functions["batch_precompute.load.handler"]
    assert {k: prepare_env[k] for k in ("MAX_TOKENS", "TEMPERATURE", "MIN_RECORDS_PER_JOB", "MAX_RECORDS_PER_JOB",
                                        "MAX_RECORDS_PER_FILE", "MAX_JOB_BYTES", "MAX_FILE_BYTES", "JOB_TIMEOUT_HOURS")} == {
        "MAX_TOKENS": {"Ref": "MaxTokens"}, "TEMPERATURE": {"Ref": "Temperature"}, "MIN_RECORDS_PER_JOB": {"Ref": "Min"},
        "MAX_RECORDS_PER_JOB": {"Ref": "Max"}, "MAX_RECORDS_PER_FILE": {"Ref": "PerFile"},
        "MAX_JOB_BYTES": {"Ref": "JobBytes"}, "MAX_FILE_BYTES": {"Ref": "FileBytes"}, "JOB_TIMEOUT_HOURS": {"Ref": "Hours"}}
    assert load_env["WRITE_CONCURRENCY"] == {"Ref": "Writers"}
    machine = only(template, "AWS::StepFunctions::StateMachine")["Properties"]["DefinitionString"]
    assert {"Ref": "Hours"} in machine["Fn::Join"][1] and {"Ref": "Jobs"} in machine["Fn::Join"][1]
    assert "e+" not in json.dumps(template)  # no encoded token double anywhere
    assert batch.job_name_prefix


def test_bedrocks_batch_metrics_are_per_model_and_labelled_account_wide():
    stack, batch, _ = built()
    pending, tokens_in = batch.metric_records_pending(), batch.metric_input_tokens_processed(period=cdk.Duration.hours(1))
    out, queued, everything = batch.metric_output_tokens_processed(), batch.metric_tokens_pending(), batch.metric_account_records_pending()
    assert {m.namespace for m in (pending, tokens_in, out, queued, everything)} == {"AWS/Bedrock/Batch"}
    assert [m.metric_name for m in (pending, tokens_in, out, queued, everything)] == [
        "NumberOfRecordsPendingProcessing", "NumberOfInputTokensProcessedPerMinute",
        "NumberOfOutputTokensProcessedPerMinute", "NumberOfTokensPendingProcessing", "NumberOfRecordsPendingProcessing"]
    for metric in (pending, tokens_in, out, queued):
        assert metric.dimensions == {"ModelId": PROFILE.model_id} and "account-wide" in metric.label
    assert everything.dimensions is None and "all models" in everything.label
    assert (pending.statistic, tokens_in.statistic, tokens_in.period.to_hours()) == ("Maximum", "Average", 1)


def test_the_default_check_is_every_five_minutes_and_a_token_interval_reaches_the_schedule():
    _, _, template = built()
    assert [r["Properties"]["ScheduleExpression"] for r in resources(template, "AWS::Events::Rule").values()
            if "ScheduleExpression" in r["Properties"]] == ["rate(5 minutes)"]
    stack = new_stack()
    minutes = cdk.CfnParameter(stack, "CheckMinutes", type="Number")
    BatchPrecompute(stack, "Batch", model=NOVA, max_tokens=400, status_check_interval=cdk.Duration.minutes(minutes.value_as_number))
    schedule = next(r["Properties"]["ScheduleExpression"] for r in resources(template_of(stack).to_json(), "AWS::Events::Rule").values()
                    if "ScheduleExpression" in r["Properties"])
    assert schedule == {"Fn::Join": ["", ["rate(", {"Ref": "CheckMinutes"}, " minutes)"]]}


# ---- bad props ---------------------------------------------------------------------------------------------


def a_token() -> float:
    return cdk.Token.as_number(cdk.Fn.ref("SomeParameter"))


def bucket(stack: cdk.Stack, name: str) -> s3.IBucket:
    return s3.Bucket.from_bucket_name(stack, name, f"my-{name.lower()}")


BAD_PROPS = [
    ({"model": "amazon.nova-lite-v1:0"}, "model='amazon.nova-lite-v1:0' is a str; pass a BedrockModel"),
    ({"model": None}, "model is required"),
    ({"model": BedrockModel.provisioned("arn:aws:bedrock:us-east-1:111122223333:provisioned-model/abc123")},
     "Provisioned Throughput model, which batch inference does not support"),
    ({"answer_store": "table"}, "answer_store='table' is a str; pass an AnswerStore"),
    ({"max_tokens": None}, "max_tokens is required"),
    ({"max_tokens": 0}, "max_tokens=0 is below the minimum of 1"),
    ({"max_tokens": 1.5}, "max_tokens=1.5 is not a whole number"),
    ({"max_tokens": NAN}, "max_tokens=nan is not a finite number"),
    ({"max_tokens": True}, "max_tokens=True is a bool"),
    ({"invocation_type": "converse"}, "invocation_type='converse' must be one of 'Converse', 'InvokeModel'"),
    ({"invocation_type": "InvokeModel"}, "max_tokens=400 shapes prompts into a Converse body"),
    ({"invocation_type": "InvokeModel", "max_tokens": None, "temperature": 0.5}, "temperature=0.5 shapes prompts"),
    ({"temperature": 1.5}, "temperature=1.5 exceeds the maximum of 1"),
    ({"temperature": INF}, "temperature=inf is not a finite number"),
    ({"system_prompt": "  "}, "system_prompt='  ' is empty"),
    ({"input_bucket": "my-bucket"}, "input_bucket='my-bucket' is a str; pass an s3.Bucket"),
    ({"encryption_key": "alias/k"}, "encryption_key='alias/k' is a str; pass a kms.Key"),
    ({"output_bucket": 3}, "output_bucket=3 is an int; pass an s3.Bucket"),
    ({"items_bucket": "items"}, "items_bucket='items' is a str; pass an s3.Bucket"),
    ({"access_logs_bucket": True}, "access_logs_bucket=True is a bool; pass an s3.Bucket"),
    ({"encryption_key_for_logs": "k"}, "encryption_key_for_logs='k' is a str; pass a kms.Key"),
    ({"state_machine_options": {"timeout": 1}}, "state_machine_options={'timeout': 1} is a dict; pass StateMachineOptions"),
    ({"max_tokens": a_token()}, None),
    ({"min_records_per_job": a_token()}, None),
    ({"items_prefix": "items"}, "items_prefix='items' must be a key prefix ending in '/'"),
    ({"input_prefix": "/batch/"}, "input_prefix='/batch/' must be a key prefix"),
    ({"output_prefix": "out put/"}, "output_prefix='out put/' must be a key prefix"),
    ({"output_prefix": ""}, "output_prefix='' is empty"),
    ({"items_prefix": "batch-input/items/"}, "items_prefix='batch-input/items/' and input_prefix='batch-input/' nest"),
    ({"min_records_per_job": 0}, "min_records_per_job=0 is below the minimum of 1"),
    ({"min_records_per_job": -5}, "min_records_per_job=-5 is below the minimum of 1"),
    ({"max_records_per_job": 2_000_000}, "max_records_per_job=2000000 exceeds the maximum of 1,000,000"),
    ({"max_records_per_job": 150}, "max_records_per_job=150 is below twice min_records_per_job=100"),
    ({"max_records_per_file": 0}, "max_records_per_file=0 is below the minimum of 1"),
    ({"max_records_per_file": INF}, "max_records_per_file=inf is not a finite number"),
    ({"max_file_bytes": 10**10}, "max_file_bytes=10,000,000,000 exceeds max_job_bytes=5,000,000,000"),
    ({"max_job_bytes": 100}, "max_job_bytes=100 is below the minimum of 1,024"),
    ({"max_concurrent_jobs": 0}, "max_concurrent_jobs=0 is below the minimum of 1"),
    ({"max_concurrent_jobs": 41}, "max_concurrent_jobs=41 exceeds the maximum of 40"),
    ({"max_concurrent_jobs": None}, "max_concurrent_jobs is required"),
    ({"job_timeout": cdk.Duration.hours(12)}, "job_timeout=12 hours is below the minimum of 1 day"),
    ({"job_timeout": cdk.Duration.hours(169)}, "job_timeout=7 days 1 hour exceeds the maximum of 7 days"),
    ({"job_timeout": cdk.Duration.minutes(1530)}, "job_timeout=1530 minutes is not whole hours"),
    ({"job_timeout": 24}, "job_timeout=24 is an int; pass a cdk.Duration"),
    ({"status_check_interval": cdk.Duration.days(8)}, "status_check_interval=8 days exceeds the maximum of 6 hours"),
    ({"status_check_interval": cdk.Duration.seconds(30)}, "status_check_interval=30 seconds is below the minimum of 1 minute"),
    ({"status_check_interval": cdk.Duration.seconds(90)}, "status_check_interval=1 minute 30 seconds is not whole minutes"),
    ({"status_check_interval": cdk.Duration.seconds(cdk.Token.as_number(cdk.Fn.ref("S")))},
     "status_check_interval is a deploy-time token in seconds"),
    ({"job_timeout": cdk.Duration.minutes(cdk.Token.as_number(cdk.Fn.ref("T")))}, "job_timeout is a deploy-time token not in hours"),
    ({"job_name_prefix": "Reviews_Nightly"}, "job_name_prefix='Reviews_Nightly' may hold letters, digits and single hyphens"),
    ({"job_name_prefix": "x" * 41}, "job_name_prefix has 41 characters; at most 40"),
    ({"on_demand_fallback": "arn:aws:states:::stateMachine:x"}, "on_demand_fallback='arn:aws:states:::stateMachine:x' is a str"),
    ({"write_concurrency": 0}, "write_concurrency=0 is below the minimum of 1"),
    ({"write_concurrency": 65}, "write_concurrency=65 exceeds the maximum of 64"),
    ({"object_expiration": cdk.Duration.hours(2)}, "object_expiration=2 hours is below the minimum of 1 day"),
    ({"log_retention": 30}, "log_retention=30 is an int; pass a logs.RetentionDays"),
    ({"state_machine_options": StateMachineOptions(state_machine_type=sfn.StateMachineType.EXPRESS)},
     "EXPRESS runs at most 5 minutes"),
    ({"max_concurrent_jobs": a_token()}, None),  # a deploy-time value is accepted
    ({"input_prefix": cdk.Fn.ref("Prefix")}, "input_prefix is a deploy-time token"),
]


@pytest.mark.parametrize(("props", "message"), BAD_PROPS, ids=[str(i) for i in range(len(BAD_PROPS))])
def test_every_bad_prop_is_refused_with_its_value_rule_and_fix(props, message):
    stack = new_stack()
    build = lambda: BatchPrecompute(stack, "Batch", **{"model": NOVA, "max_tokens": 400, **props})  # noqa: E731
    if message is None:
        build()
        return
    with pytest.raises(InvalidPropsError) as raised:
        build()
    assert message in str(raised.value)


def test_bucket_props_with_both_buckets_given_are_refused_as_ignored():
    stack = new_stack()
    with pytest.raises(InvalidPropsError) as raised:
        BatchPrecompute(stack, "Batch", model=NOVA, max_tokens=400, input_bucket=bucket(stack, "In"),
                        output_bucket=bucket(stack, "Out"), encryption_key=kms.Key(stack, "K"),
                        access_logs_bucket=bucket(stack, "Logs"), object_expiration=None)
    problems = raised.value.problems
    assert [p.split(" ")[0] for p in problems] == ["encryption_key", "access_logs_bucket", "object_expiration"]
    assert all("would be ignored" in p for p in problems)


def test_nested_prefixes_in_one_bucket_given_twice_are_refused():
    stack = new_stack()
    shared = bucket(stack, "Shared")
    with pytest.raises(InvalidPropsError, match="input_prefix='jobs/' and output_prefix='jobs/out/' nest"):
        BatchPrecompute(stack, "Batch", model=NOVA, max_tokens=400, input_bucket=shared, output_bucket=shared,
                        input_prefix="jobs/", output_prefix="jobs/out/")


def test_several_problems_are_reported_together():
    with pytest.raises(InvalidPropsError) as raised:
        BatchPrecompute(new_stack(), "Batch", model=NOVA, max_tokens=0, max_concurrent_jobs=0, write_concurrency=99)
    assert len(raised.value.problems) == 3


# ---- cdk-nag -----------------------------------------------------------------------------------------------


def nag_findings(build) -> list[str]:
    from cdk_nag import AwsSolutionsChecks
    from conftest import nag_violations

    outdir = tempfile.mkdtemp()
    app = cdk.App(outdir=outdir)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    build(app)
    with contextlib.suppress(RuntimeError):  # ValidationFailed: the findings are in the report
        app.synth()
    return nag_violations(Path(outdir))


def in_stack(build):
    return lambda app: build(cdk.Stack(app, "Nag", env=cdk.Environment(account="111122223333", region="us-east-1")))


def test_the_construct_with_a_key_a_fallback_and_a_store_passes_nag():
    def build(stack):
        fallback = sfn.StateMachine(
            stack, "OnDemand", definition_body=sfn.DefinitionBody.from_chainable(sfn.Pass(stack, "P")),
            logs=sfn.LogOptions(destination=logs.LogGroup(stack, "L"), level=sfn.LogLevel.ALL), tracing_enabled=True)
        cdk.Validations.of(fallback).acknowledge(cdk.Acknowledgment(  # the test's own state machine, not the construct's
            id="AwsSolutions-IAM5[Resource::*]", reason="aws-cdk-lib's log delivery and X-Ray grants on this test fixture"))
        BatchPrecompute(stack, "Batch", model=NOVA, max_tokens=400, encryption_key=kms.Key(stack, "K", enable_key_rotation=True),
                        on_demand_fallback=fallback, answer_store=AnswerStore(stack, "Store"))

    assert nag_findings(in_stack(build)) == []


def test_a_users_own_wildcard_on_a_construct_role_still_fails_nag():
    def build(stack):
        batch = BatchPrecompute(stack, "Batch", model=NOVA, max_tokens=400)
        batch.load_function.add_to_role_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=["*"]))

    assert nag_findings(in_stack(build)) == ["AwsSolutions-IAM5[Resource::*] at Nag/Batch/LoadRole/DefaultPolicy/Resource"]


@pytest.mark.parametrize("imported", [False, True], ids=["new-role", "imported-role"])
def test_on_the_users_own_role_only_the_users_own_wildcards_fail_nag(imported):
    """StateMachineOptions(role=...): the construct's grants on the user's role (its functions' <arn>:*, this
    account's and Region's batch jobs, the fallback's executions) are acknowledged by their exact ARNs; the
    user's own wildcards on that role, in the same shapes, are still reported."""
    at = "Nag/UserRole/Policy/Resource" if imported else "Nag/UserRole/DefaultPolicy/Resource"

    def build(stack):
        if imported:
            role = iam.Role.from_role_arn(stack, "UserRole", f"arn:aws:iam::{stack.account}:role/users-machine-role")
        else:
            role = iam.Role(stack, "UserRole", assumed_by=iam.ServicePrincipal("states.amazonaws.com"))
        fallback = sfn.StateMachine.from_state_machine_arn(
            stack, "OnDemand", f"arn:aws:states:us-east-1:{stack.account}:stateMachine:on-demand")
        for resource in (
            f"arn:aws:bedrock:us-west-2:{stack.account}:model-invocation-job/*",
            "arn:aws:lambda:us-east-1:111122223333:function:users-own:*",
            f"arn:aws:states:us-east-1:{stack.account}:execution:users-own*",
        ):
            role.add_to_principal_policy(iam.PolicyStatement(actions=["bedrock:GetModelInvocationJob"], resources=[resource]))
        BatchPrecompute(stack, "Batch", model=NOVA, max_tokens=400, on_demand_fallback=fallback,
                        state_machine_options=StateMachineOptions(role=role))

    assert sorted(nag_findings(in_stack(build))) == [
        f"AwsSolutions-IAM5[Resource::{resource}] at {at}"
        for resource in (
            "arn:aws:bedrock:us-west-2:111122223333:model-invocation-job/*",
            "arn:aws:lambda:us-east-1:111122223333:function:users-own:*",
            "arn:aws:states:us-east-1:111122223333:execution:users-own*",
        )
    ]


def test_buckets_of_another_stack_pass_nag_and_a_users_own_prefix_wildcard_there_still_fails():
    """The prefix grants on the user's buckets in another stack are acknowledged by their exact ARNs once
    aws-cdk-lib has made them Fn::ImportValue; the user's own wildcard on another prefix is still reported."""
    def build(app):
        env = cdk.Environment(account="111122223333", region="us-east-1")
        owner = cdk.Stack(app, "Owner", env=env)
        given = {name: s3.Bucket(owner, name, enforce_ssl=True, server_access_logs_prefix="logs/") for name in ("In", "Out")}
        batch = BatchPrecompute(cdk.Stack(app, "Nag", env=env), "Batch", model=NOVA, max_tokens=400,
                                input_bucket=given["In"], output_bucket=given["Out"])
        batch.prepare_function.add_to_role_policy(
            iam.PolicyStatement(actions=["s3:GetObject"], resources=[given["In"].arn_for_objects("archive/*")]))

    [finding] = [f for f in nag_findings(build) if " at Nag/" in f]
    assert finding.startswith("AwsSolutions-IAM5[Resource::Owner:ExportsOutputFnGetAttIn")
    assert finding.endswith("/archive/*] at Nag/Batch/PrepareRole/DefaultPolicy/Resource")


def test_the_loader_may_write_answers_but_never_delete():
    """The loader deletes nothing, so its role has no dynamodb:DeleteItem on the answer store (issue 27)."""
    stack = new_stack()
    batch = BatchPrecompute(stack, "Batch", model=BedrockModel.from_id("amazon.nova-lite-v1:0"),
                            answer_store=AnswerStore(stack, "Store"), max_tokens=100)
    role = stack.resolve(batch.load_function.role.role_name)  # {"Ref": <the role's logical id>}
    policies = [p for p in resources(Template.from_stack(stack).to_json(), "AWS::IAM::Policy").values()
                if role in p["Properties"].get("Roles", [])]
    actions = {a for policy in policies for statement in policy["Properties"]["PolicyDocument"]["Statement"]
               for a in ([statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"])}
    assert "dynamodb:PutItem" in actions
    assert not any(a.startswith("dynamodb:Delete") for a in actions), sorted(actions)


def test_failed_and_timed_out_runs_and_a_failing_job_events_function_alarm_with_the_users_actions():
    """Issue 34.12: a run that failed or a wait nobody completes went unnoticed."""
    from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
    from aws_cdk import aws_sns as sns

    stack = new_stack()
    topic = sns.Topic(stack, "Pager")
    built = pipeline(stack, alarm_actions=[cloudwatch_actions.SnsAction(topic)])
    template = Template.from_stack(stack).to_json()
    alarms = {r["Properties"]["MetricName"]: r["Properties"] for r in resources(template, "AWS::CloudWatch::Alarm").values()}
    assert sorted(built.alarms) == ["FailedExecutions", "JobEventsErrors", "TimedOutExecutions"]
    assert sorted(alarms) == ["Errors", "ExecutionsFailed", "ExecutionsTimedOut"]
    events_fn = next(k for k in resources(template, "AWS::Lambda::Function") if "JobEvents" in k)
    errors = alarms["Errors"]
    assert errors["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": events_fn}}]
    assert (errors["EvaluationPeriods"], errors["DatapointsToAlarm"], errors["Period"]) == (3, 3, 300)
    topic_id = next(iter(resources(template, "AWS::SNS::Topic")))
    assert all(alarm["AlarmActions"] == [{"Ref": topic_id}] for alarm in alarms.values())
