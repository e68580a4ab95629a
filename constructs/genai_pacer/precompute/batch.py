"""BatchPrecompute: answers for a large key set made by Bedrock batch inference and loaded into the AnswerStore.

For keys whose answers may be hours old (each product's review summary, each ticker's note),
batch inference costs less than on-demand calls and stays off the on-demand quota that
interactive users share. No CloudFormation resource starts a job and Step Functions has no
optimized integration for it, so the state machine calls `aws-sdk:bedrock:createModelInvocationJob`.

One execution is one run:

    Prepare input (Lambda: JSONL per job, recordId = hash of the store key, key mapping beside it)
      -> fewer records than a job may hold: fail "Too few records" with the numbers
         (or start `on_demand_fallback` with the run's input)
      -> Map over the jobs, at most `max_concurrent_jobs` at once; per job:
           Submit job -> store the task token under the job ARN and wait
             -> EventBridge `Batch Inference Job State Change`, or the scheduled check every
                `status_check_interval` -> Lambda reads the job (GetModelInvocationJob) and
                completes the token
           Completed / PartiallyCompleted -> Load answers (Lambda: every .jsonl.out into the
           store, counts reconciled with manifest.json.out, records without an answer listed in S3)
           Failed / Stopped / Expired -> recorded with Bedrock's failureMessage
      -> Summarize -> "Loaded", or a named failure state: "Job failed", "Job stopped",
         "Job expired", "Job not submitted", "Load failed", whose cause carries the message

Why a task token rather than a rule that starts the loading when a job ends: each Map iteration
lives until its job has ended, so the Map's MaxConcurrency is exactly the bound on jobs in
flight; a rule-started loader would leave the submitter nothing to count, and a run's outcome
would be scattered over unrelated executions. The job request has no field to carry a token, so
the token is stored under the job's ARN in a small table of its own. Bedrock sends these events on
a best-effort basis, and only their `status` field is documented, so the event only hastens the
end of a wait: a schedule every `status_check_interval` (5 minutes) checks each waiting job with
GetModelInvocationJob, the authority on a job's status, so a lost or unreadable event delays a run
by minutes. The check runs outside the execution, whose history (25,000 events) a wait-and-check
loop every few minutes would fill.

Quotas (per model and Region, adjustable; check Service Quotas, the defaults are common values,
not guarantees, see the constants): minimum records per job (default 100), records per job
(50,000) and per input file (50,000), input file size (1 GB) and job size (5 GB), and batch jobs
in progress or submitted (default 10, conservative). Each is a prop, for an account with raised
quotas; a deploy-time token is passed through to the functions as it resolves. A run is split into near-equal jobs and files under those maxima. The
concurrency bound is per execution: two overlapping runs may together exceed the quota, and the
submission then retries Bedrock's ServiceQuotaExceededException with backoff.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks

from constructs import Construct, IConstruct

from .._internal.alarms import execution_alarms, threshold_alarm
from .._internal.checks import Checks, Default, in_unit, is_token, resolved, token_kind
from .._internal.docs import constructor_doc
from .._internal.metrics import function_metric
from .._internal.nag import (
    acknowledge_exact_resources,
    acknowledge_exact_resources_at_validation,
    flattened,
    principal_policy,
)
from .._internal.runtime_constants import metrics_constants
from .._internal.s3 import (
    KMS_READ_ACTIONS,
    KMS_WRITE_ACTIONS,
    bucket_key,
    data_bucket,
    grant_keys,
    new_access_logs_bucket,
)
from .._internal.secure import handler_function, log_key
from ..models import BedrockModel, as_bedrock_model
from ..step_functions.state_machine import StateMachineOptions, model_state_machine
from .store import AnswerStore

__all__ = [
    "BatchPrecompute",
    "DEFAULT_MAX_CONCURRENT_JOBS",
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_MAX_JOB_BYTES",
    "DEFAULT_MAX_RECORDS_PER_FILE",
    "DEFAULT_MAX_RECORDS_PER_JOB",
    "DEFAULT_MIN_RECORDS_PER_JOB",
    "JOB_STATE_CHANGE",
    "TERMINAL_STATUSES",
]

# ---- batch inference quotas: per model and Region, adjustable (Service Quotas) --------------------------
# The quota NAMES are the Bedrock user guide's ("Format and upload your batch inference data",
# https://docs.aws.amazon.com/bedrock/latest/userguide/batch-inference-data.html); the default VALUES
# are in the General Reference's Bedrock quota table (https://docs.aws.amazon.com/general/latest/gr/bedrock.html#limits_bedrock),
# which no stored copy showed: the values below are the common defaults public code and AWS's examples
# use, so each is a prop. A wrong guess is harmless by design: a maximum set too high or a minimum too
# low makes Bedrock refuse the job at validation, and the run ends "Job failed" with Bedrock's message;
# a maximum too low only splits a run into more jobs; a jobs-in-flight quota too high is met by the
# submission's retry of ServiceQuotaExceededException with backoff.
#: "Minimum number of records per batch inference job".
DEFAULT_MIN_RECORDS_PER_JOB = 100
#: "Records per batch inference job".
DEFAULT_MAX_RECORDS_PER_JOB = 50_000
#: "Records per input file per batch inference job".
DEFAULT_MAX_RECORDS_PER_FILE = 50_000
#: "Batch inference input file size (in GB)": 1. Counted in decimal GB (the smaller reading of "GB").
DEFAULT_MAX_FILE_BYTES = 1_000_000_000
#: "Batch inference job size (in GB)": 5 (some models allow more: raise max_job_bytes to your quota).
DEFAULT_MAX_JOB_BYTES = 5_000_000_000
#: "Sum of in-progress and submitted batch inference jobs using a base model for <model>"; conservative.
DEFAULT_MAX_CONCURRENT_JOBS = 10
#: Each job's timeoutDurationInHours: botocore bedrock service-2.json, ModelInvocationJobTimeoutDurationInHours 24..168.
JOB_TIMEOUT_HOURS_RANGE = (24, 168)
DEFAULT_OBJECT_EXPIRATION = cdk.Duration.days(30)
#: The signature's default, shown by help() as the code that builds it.
_OBJECT_EXPIRATION = Default("cdk.Duration.days(30)", lambda: DEFAULT_OBJECT_EXPIRATION)
#: The loader handles one job per invocation within Lambda's 15 minutes (see bench/batch_loader_bench.py).
MAX_RECORDS_PER_JOB_LIMIT = 1_000_000
#: An inline Map runs at most 40 iterations at once.
INLINE_MAP_LIMIT = 40

# ---- job state-change events -------------------------------------------------------------------------------
#: EventBridge source and detail-type (EventBridge event reference, Amazon Bedrock events:
#: https://docs.aws.amazon.com/eventbridge/latest/ref/events-ref-bedrock.html).
EVENT_SOURCE = "aws.bedrock"
JOB_STATE_CHANGE = "Batch Inference Job State Change"
#: The one detail field a primary source confirms: the user guide's example rule matches
#: {"detail": {"status": ["Completed"]}} (https://docs.aws.amazon.com/bedrock/latest/userguide/monitoring-eventbridge-create-rule-ex.html).
#: The job's name and ARN fields are not confirmed, so the rule does not match on them.
JOB_STATE_CHANGE_STATUS_FIELD = "status"
#: The statuses a job ends in (botocore bedrock service-2.json, ModelInvocationJobStatus).
TERMINAL_STATUSES = ("Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired")
LOADABLE_STATUSES = ("Completed", "PartiallyCompleted")
#: How often the scheduled check looks at each waiting job (one GetModelInvocationJob per job): the
#: most a lost event, or an event this construct cannot read, delays a run.
DEFAULT_STATUS_CHECK_INTERVAL = cdk.Duration.minutes(5)
STATUS_CHECK_INTERVAL_RANGE = (cdk.Duration.minutes(1), cdk.Duration.hours(6))
#: The input the check schedule sends the job-events function (job_events.CHECK_JOBS).
CHECK_JOBS_INPUT = {"action": "check-jobs"}
#: A wait not completed by an event nor a check within this checks the job from inside the run. Long, so
#: a job's loop of waits and checks stays far below Step Functions' 25,000 history events per execution.
LAST_RESORT_CHECK = cdk.Duration.hours(6)
#: Errors a submission is retried on: throttling, and the jobs-in-flight quota that other runs share
#: (CreateModelInvocationJob's errors in botocore bedrock service-2.json; ServiceUnavailableException is
#: not declared there but is what a 503 is named: retrying a name that never occurs costs nothing).
SUBMIT_RETRY_ERRORS = (
    "Bedrock.ThrottlingException",
    "Bedrock.ServiceQuotaExceededException",
    "Bedrock.InternalServerException",
    "Bedrock.ServiceUnavailableException",
)
#: PutItem's transient errors (botocore dynamodb service-2.json) as the Step Functions SDK integration names
#: them: "ServiceName.ErrorName", both PascalCase, with the "Exception" suffix added where the service's
#: name lacks it (Step Functions developer guide, supported-services-awssdk.html). The service part is
#: "DynamoDb" by that rule; "DynamoDB" (the optimized integration's) is listed too: a name that never
#: occurs costs nothing, a missing one would fail a wait on its first throttle.
#: GetModelInvocationJob's transient errors (botocore bedrock service-2.json), for the run's own last-resort check.
CHECK_RETRY_ERRORS = ("Bedrock.ThrottlingException", "Bedrock.InternalServerException")
_TOKEN_TABLE_ERROR_NAMES = (
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceededException",
    "InternalServerErrorException",
)
_TOKEN_TABLE_ERRORS = tuple(f"{prefix}.{name}" for prefix in ("DynamoDb", "DynamoDB") for name in _TOKEN_TABLE_ERROR_NAMES)
# ---- Bedrock's own batch metrics ---------------------------------------------------------------------------
#: Namespace, levels and what is measured: the AWS Machine Learning Blog, "Monitor Amazon Bedrock batch
#: inference using Amazon CloudWatch metrics" (2025-09-18,
#: https://aws.amazon.com/blogs/machine-learning/monitor-amazon-bedrock-batch-inference-using-amazon-cloudwatch-metrics/):
#: published under AWS/Bedrock/Batch at the account level and per model ID; records pending processing,
#: input and output tokens processed per minute, and (Anthropic Claude models) tokens pending processing.
#: They cover every batch job of the account and Region, not only this construct's.
BEDROCK_BATCH_NAMESPACE = "AWS/Bedrock/Batch"
#: The per-model dimension, as public code names it (the blog writes "modelId"); unconfirmed by a
#: reference page, and for an inference profile the value may be the profile or the model: a wrong
#: guess shows an empty graph, and no alarm of this library reads these metrics.
BEDROCK_BATCH_MODEL_DIMENSION = "ModelId"
#: Metric names. The first two appear in public code; the other two follow their pattern for what the
#: blog describes and are unconfirmed (harmless if wrong: an empty graph).
BATCH_RECORDS_PENDING = "NumberOfRecordsPendingProcessing"
BATCH_INPUT_TOKENS_PER_MINUTE = "NumberOfInputTokensProcessedPerMinute"
BATCH_OUTPUT_TOKENS_PER_MINUTE = "NumberOfOutputTokensProcessedPerMinute"
BATCH_TOKENS_PENDING = "NumberOfTokensPendingProcessing"

#: The run's outcome (summary handler) -> the failure state it ends in.
FAILURE_STATES = {
    "JobFailed": ("Job failed", "BatchPrecompute.JobFailed"),
    "JobStopped": ("Job stopped", "BatchPrecompute.JobStopped"),
    "JobExpired": ("Job expired", "BatchPrecompute.JobExpired"),
    "SubmitFailed": ("Job not submitted", "BatchPrecompute.SubmitFailed"),
    "LoadFailed": ("Load failed", "BatchPrecompute.LoadFailed"),
}
_PREFIX_CHARS = re.compile(r"^[A-Za-z0-9!_*'().-]+(/[A-Za-z0-9!_*'().-]+)*/$")
_JOB_NAME_PREFIX = re.compile(r"^[A-Za-z0-9]+(-[A-Za-z0-9]+)*$")
_MODEL_HINT = "a BedrockModel, e.g. BedrockModel.from_id('us.amazon.nova-2-lite-v1:0')"


@constructor_doc
class BatchPrecompute(Construct):
    """Bedrock batch inference jobs whose answers are loaded into an AnswerStore (see the module docstring).

    Run it with `{"items": [{"key": "review-summary#B0C1", "prompt": "Summarize ..."}, ...]}` (a small
    set) or `{"itemsKey": "items/2026-12-01.jsonl"}` (an object under items_prefix in items_bucket,
    JSON Lines or one JSON array). An item may carry `modelInput` instead of `prompt`: the record's
    body as given, in the invocation type's format. Keys are normalized as the store normalizes them.

    model: the model or inference profile the jobs use (provisioned throughput cannot run batch jobs).
    answer_store: where answers are written. Default: a new AnswerStore.
    max_tokens: each prompt's maxTokens (Converse). Required with invocation_type="Converse".
    system_prompt / temperature: for prompts (Converse). Default: none / the model's.
    invocation_type: "Converse" (one body for every model; prompts are turned into it) or
        "InvokeModel" (each item gives modelInput in the model's native body). Default: "Converse".
    input_bucket / output_bucket: where the job input is written and Bedrock writes its output.
        Default: new buckets, encrypted (S3-managed, or `encryption_key`), TLS-only, public access
        blocked, access-logged, objects expiring after object_expiration.
    items_bucket: where `itemsKey` objects are read. Default: the input bucket.
    input_bucket_key / output_bucket_key / items_bucket_key: the KMS key of an SSE-KMS bucket of yours
        that does not know it (imported with s3.Bucket.from_bucket_name or from_bucket_arn). Whoever reads
        a bucket gets kms:Decrypt on its key, whoever writes it kms:GenerateDataKey and kms:Decrypt: the
        Bedrock service role (reads the input, writes the output), the prepare function (reads the
        items, writes the input) and the loader (reads the input and the output, writes the output's
        list of unanswered records). The jobs encrypt their output with the output bucket's key
        (CreateModelInvocationJob's s3EncryptionKeyId). Default: the bucket's own encryption_key
        (encryption_key for a bucket this construct creates); none for a bucket imported by name, which
        is then taken as SSE-S3. Each requires its bucket (without items_bucket the items are read from
        the input bucket, under its key); a key for a bucket that knows another is refused.
    items_prefix / input_prefix / output_prefix: the only prefixes read (items) and written (input,
        output); end with "/". Default: "items/", "batch-input/", "batch-output/".
    encryption_key: KMS key for the new buckets; the jobs then encrypt their output with it too.
        Default: S3-managed encryption.
    access_logs_bucket: receives the new buckets' server access logs. Default: a new bucket.
    object_expiration: how long objects live in the new buckets (prompts and answers). Default:
        30 days. None keeps them.
    min_records_per_job: the model's minimum records per job; a run with fewer is refused with the
        numbers (or handed to on_demand_fallback). Default: 100.
    max_records_per_job / max_records_per_file: the model's maxima; a run is split into near-equal
        jobs and files below them. max_records_per_job must be at least 2 x min_records_per_job, so
        no split leaves a job below the minimum. Defaults: 50,000 and 50,000.
    max_job_bytes / max_file_bytes: the job and input file size quotas. Defaults: 5 GB and 1 GB.
    max_concurrent_jobs: jobs one run keeps submitted or in progress (1..40, the inline Map's
        limit); set it to your quota of batch jobs in flight. Default: 10.
    job_timeout: each job's timeoutDurationInHours (24..168 h, whole hours). Default: 24 h.
    status_check_interval: how often each waiting job is checked with GetModelInvocationJob (the
        cover for a lost or unreadable best-effort event; one cheap call per running job). Whole
        minutes, 1 minute..6 hours. Default: 5 minutes.
    job_name_prefix: job names start with it; the EventBridge rule matches it. Default: derived
        from this construct's path.
    on_demand_fallback: a state machine that answers the keys on demand (e.g. a ScheduledPrecompute's),
        started with this run's input when the run is below min_records_per_job. Default: none (the
        run fails "Too few records").
    write_concurrency: threads the loader writes answers with (1..64). Default: 16.
    encryption_key_for_logs: KMS key of the functions' and state machine's log groups. Default: the
        construct's one KMS key, with rotation, retained on delete ($1 a month while it exists, AWS KMS
        pricing page; docs/security.md, "KMS keys"). encryption_key (the buckets') does not replace
        it: pass both for no key of the construct's own.
    log_retention: of the functions' log groups. Default: one month.
    state_machine_options: Default: STANDARD, encrypted logs, X-Ray, a 30-day timeout (a run with
        more jobs than max_concurrent_jobs runs them in waves). EXPRESS is refused (5 minutes).
    alarm_actions: actions for the alarms (`alarms`): FailedExecutions and TimedOutExecutions (any in 5
        minutes: the run's answers are not loaded) and JobEventsErrors (the job-events function failing for
        15 minutes: runs wait until job_timeout). Default: none.

    Attributes: `state_machine`, `input_bucket`, `output_bucket`, `items_bucket`, `service_role`,
    `token_table`, `job_ended_rule`, `prepare_function`, `load_function`, `summary_function`,
    `job_events_function`, `job_check_rule`, `answer_store`, `job_name_prefix`, `alarms`. Metrics:
    `metric_records_loaded`, `metric_records_failed` (this construct's loader), and Bedrock's own
    batch metrics for this construct's model: `metric_records_pending`,
    `metric_input_tokens_processed`, `metric_output_tokens_processed`, `metric_tokens_pending`
    (per model, in the account and Region: account-wide, other pipelines' jobs included) and
    `metric_account_records_pending` (every model).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        model: BedrockModel,
        answer_store: AnswerStore | None = None,
        max_tokens: int | None = None,
        system_prompt: str | None = None,
        temperature: float | None = None,
        invocation_type: Literal["Converse", "InvokeModel"] = "Converse",
        input_bucket: s3.IBucket | None = None,
        output_bucket: s3.IBucket | None = None,
        items_bucket: s3.IBucket | None = None,
        input_bucket_key: kms.IKey | None = None,
        output_bucket_key: kms.IKey | None = None,
        items_bucket_key: kms.IKey | None = None,
        items_prefix: str = "items/",
        input_prefix: str = "batch-input/",
        output_prefix: str = "batch-output/",
        encryption_key: kms.IKey | None = None,
        access_logs_bucket: s3.IBucket | None = None,
        object_expiration: cdk.Duration | Default | None = _OBJECT_EXPIRATION,
        min_records_per_job: int = DEFAULT_MIN_RECORDS_PER_JOB,
        max_records_per_job: int = DEFAULT_MAX_RECORDS_PER_JOB,
        max_records_per_file: int = DEFAULT_MAX_RECORDS_PER_FILE,
        max_job_bytes: int = DEFAULT_MAX_JOB_BYTES,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        max_concurrent_jobs: int = DEFAULT_MAX_CONCURRENT_JOBS,
        job_timeout: cdk.Duration | None = None,
        status_check_interval: cdk.Duration | None = None,
        job_name_prefix: str | None = None,
        on_demand_fallback: sfn.IStateMachine | None = None,
        write_concurrency: int = 16,
        encryption_key_for_logs: kms.IKey | None = None,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
        state_machine_options: StateMachineOptions | None = None,
        alarm_actions: Sequence[cloudwatch.IAlarmAction] = (),
    ) -> None:
        super().__init__(scope, id)
        # Access logs delivered by bucket policy, not an ACL (new buckets have ACLs disabled).
        # Set on this construct only, before any child exists, so the user's app is untouched.
        self.node.set_context("@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy", True)
        job_timeout = job_timeout if job_timeout is not None else cdk.Duration.hours(24)
        status_check_interval = status_check_interval if status_check_interval is not None else DEFAULT_STATUS_CHECK_INTERVAL
        creates_bucket = input_bucket is None or output_bucket is None
        model = as_bedrock_model(model)  # an aws_bedrock_alpha IBedrockInvokable too
        with Checks("BatchPrecompute", scope=self) as check:
            if check.instance("model", model, BedrockModel, _MODEL_HINT):
                check.rule(
                    model.kind != "provisioned",
                    f"model={model.model_id!r} is a Provisioned Throughput model, which batch inference does not "
                    "support: pass the foundation model or an inference profile",
                    id="model.provisioned-throughput",
                )
            check.instance("answer_store", answer_store, AnswerStore, "an AnswerStore (shared with the router)", optional=True)
            if token_kind(invocation_type) is not None:
                check.fail(
                    f"invocation_type is a deploy-time {token_kind(invocation_type)}, but it decides at synth which props "
                    "apply (Converse needs max_tokens; InvokeModel takes each item's modelInput and refuses max_tokens, "
                    "system_prompt and temperature): pass 'Converse' or 'InvokeModel'", id="invocation_type.deploy-time"
                )
            elif check.one_of("invocation_type", invocation_type, ("Converse", "InvokeModel")):
                if invocation_type == "Converse":
                    check.integer(
                        "max_tokens", max_tokens, minimum=1, maximum=1_000_000,
                        fix="each prompt's maxTokens; size it from the p99 answer with planning.size_max_tokens",
                    )
                else:
                    for name, value in (("max_tokens", max_tokens), ("system_prompt", system_prompt), ("temperature", temperature)):
                        check.rule(
                            value is None,
                            f"{name}={value!r} shapes prompts into a Converse body, but invocation_type='InvokeModel' "
                            "takes each item's modelInput as given, so it would be ignored: drop it, or use Converse",
                            id=f"{name}.ignored-by-invoke-model",
                        )
            if invocation_type == "Converse":
                check.text("system_prompt", system_prompt, optional=True)
                check.number("temperature", temperature, minimum=0, maximum=1, optional=True)
            for name, bucket in (("input_bucket", input_bucket), ("output_bucket", output_bucket), ("items_bucket", items_bucket),
                                 ("access_logs_bucket", access_logs_bucket)):
                check.instance(name, bucket, s3.IBucket, "an s3.Bucket (or s3.Bucket.from_bucket_name)", optional=True)
            keys = {
                name: bucket_key(
                    check, bucket_name=f"{name}_bucket", bucket=bucket, key_name=f"{name}_bucket_key", key=key,
                    without=without,
                )
                for name, bucket, key, without in (
                    ("input", input_bucket, input_bucket_key,
                     "input_bucket_key is set without input_bucket; the input bucket this construct creates is encrypted "
                     "with encryption_key: pass input_bucket too, or use encryption_key"),
                    ("output", output_bucket, output_bucket_key,
                     "output_bucket_key is set without output_bucket; the output bucket this construct creates is "
                     "encrypted with encryption_key: pass output_bucket too, or use encryption_key"),
                    ("items", items_bucket, items_bucket_key,
                     "items_bucket_key is set without items_bucket; the items are then read from the input bucket, under "
                     "its key: drop items_bucket_key"),
                )
            }
            check.instance("encryption_key", encryption_key, kms.IKey, "a kms.Key", optional=True)
            check.instance("encryption_key_for_logs", encryption_key_for_logs, kms.IKey, "a kms.Key", optional=True)
            if not creates_bucket:
                bucket_props: tuple[tuple[str, Any, Any], ...] = (
                    ("encryption_key", encryption_key, None),
                    ("access_logs_bucket", access_logs_bucket, None),
                    ("object_expiration", object_expiration, _OBJECT_EXPIRATION),
                )
                for name, value, unset in bucket_props:
                    check.rule(
                        value is unset,
                        f"{name} configures the buckets this construct creates, but input_bucket and output_bucket are "
                        "both yours, so it would be ignored: set it on your buckets instead",
                        id=f"{name}.ignored-with-own-buckets",
                    )
            expiration: cdk.Duration | None = resolved(object_expiration)
            check.duration(
                "object_expiration", expiration, minimum=cdk.Duration.days(1), optional=True,
                fix="S3 expires objects in whole days; None keeps them",
            )
            in_unit(check, "object_expiration", expiration, "days", why="S3 lifecycle expiration (ExpirationInDays) is")
            prefixes_ok = all([
                _check_prefix(check, "items_prefix", items_prefix),
                _check_prefix(check, "input_prefix", input_prefix),
                _check_prefix(check, "output_prefix", output_prefix),
            ])
            if prefixes_ok:
                self._check_overlaps(check, input_bucket, output_bucket, items_bucket, items_prefix, input_prefix, output_prefix)
            self._check_quotas(
                check, min_records_per_job, max_records_per_job, max_records_per_file, max_job_bytes, max_file_bytes
            )
            check.integer(
                "max_concurrent_jobs", max_concurrent_jobs, minimum=1, maximum=INLINE_MAP_LIMIT,
                fix=f"your quota of batch jobs submitted or in progress for this model; one run submits through an inline "
                f"Map, which runs at most {INLINE_MAP_LIMIT} iterations at once",
            )
            low_hours, high_hours = JOB_TIMEOUT_HOURS_RANGE
            if isinstance(job_timeout, cdk.Duration) and job_timeout.is_unresolved():
                check.rule(
                    job_timeout.unit_label() in ("hour", "hours"),
                    "job_timeout is a deploy-time token not in hours; Bedrock's timeoutDurationInHours takes whole "
                    "hours: pass cdk.Duration.hours(<token>)",
                    id="job_timeout.deploy-time-unit",
                )
            elif check.duration(
                "job_timeout", job_timeout, minimum=cdk.Duration.hours(low_hours), maximum=cdk.Duration.hours(high_hours),
                fix=f"Bedrock's timeoutDurationInHours is {low_hours}..{high_hours}",
            ):
                check.rule(
                    job_timeout.to_seconds() % 3600 == 0,
                    f"job_timeout={job_timeout.to_minutes():g} minutes is not whole hours; Bedrock's timeoutDurationInHours is "
                    "an integer: use cdk.Duration.hours(...)",
                    id="job_timeout.not-whole-hours",
                )
            self._check_status_interval(check, status_check_interval)
            if job_name_prefix is not None and check.text("job_name_prefix", job_name_prefix, max_length=40):
                check.rule(
                    bool(_JOB_NAME_PREFIX.match(job_name_prefix)),
                    f"job_name_prefix={job_name_prefix!r} may hold letters, digits and single hyphens between them "
                    "(Bedrock's job name pattern), e.g. 'reviews-nightly'",
                    id="job_name_prefix.characters",
                )
            check.instance(
                "on_demand_fallback", on_demand_fallback, sfn.IStateMachine,
                "a state machine, e.g. ScheduledPrecompute(...).state_machine", optional=True,
            )
            check.integer(
                "write_concurrency", write_concurrency, minimum=1, maximum=64,
                fix="threads writing answers; 16 keeps an on-demand table well below its throttling limits",
            )
            check.instance("log_retention", log_retention, logs.RetentionDays, "a logs.RetentionDays", optional=True)
            if check.instance(
                "state_machine_options", state_machine_options, StateMachineOptions, "StateMachineOptions(...)", optional=True
            ) and state_machine_options is not None:
                check.rule(
                    state_machine_options.state_machine_type != sfn.StateMachineType.EXPRESS,
                    "state_machine_options.state_machine_type=EXPRESS runs at most 5 minutes, and a run waits hours "
                    "for its jobs: use STANDARD (the default)",
                    id="state_machine_options.express",
                )
            check.alarm_actions("alarm_actions", alarm_actions)
        self.job_name_prefix = job_name_prefix or f"gp{hashlib.sha256(self.node.addr.encode()).hexdigest()[:10]}"
        self.answer_store = answer_store or AnswerStore(self, "Answers")
        self._model = model
        log_encryption = log_key(self, "LogsKey", encryption_key_for_logs)

        # ---- buckets -----------------------------------------------------------------------------
        if creates_bucket and access_logs_bucket is None:
            access_logs_bucket = new_access_logs_bucket(self, logged="the input and output buckets'")
        logs_to = cast(s3.IBucket, access_logs_bucket)  # given, or made just above when a bucket is created
        self.input_bucket = input_bucket or self._bucket("InputBucket", encryption_key, logs_to, expiration)
        self.output_bucket = output_bucket or self._bucket("OutputBucket", encryption_key, logs_to, expiration)
        self.items_bucket = items_bucket or self.input_bucket
        self._prefixes = {"items": items_prefix, "input": input_prefix, "output": output_prefix}
        self._buckets = {"items": self.items_bucket, "input": self.input_bucket, "output": self.output_bucket}
        # A bucket this construct creates knows its key (encryption_key); the items default to the input bucket.
        keys["input"] = keys["input"] or self.input_bucket.encryption_key
        keys["output"] = keys["output"] or self.output_bucket.encryption_key
        keys["items"] = keys["items"] if items_bucket is not None else keys["input"]
        self._keys: dict[str, kms.IKey | None] = keys

        # ---- the Bedrock service role ------------------------------------------------------------
        stack = cdk.Stack.of(self)
        job_arns = stack.format_arn(
            service="bedrock", resource="model-invocation-job", resource_name="*",
            arn_format=cdk.ArnFormat.SLASH_RESOURCE_NAME,
        )
        self.service_role = iam.Role(
            self, "BedrockServiceRole",
            description="Bedrock batch inference jobs of this pipeline: read its input, write its output, invoke its model",
            assumed_by=iam.ServicePrincipal(
                "bedrock.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {"aws:SourceArn": job_arns},
                },
            ),
        )
        # The jobs read their input and write their output with this role: no Bedrock page found names the KMS actions
        # it needs, but it is the caller of S3 (batch-iam-sr.html grants it s3:GetObject/PutObject on both buckets:
        # https://docs.aws.amazon.com/bedrock/latest/userguide/batch-iam-sr.html), so S3's SSE-KMS rules apply.
        self._grant_objects(self.service_role, {"input": "read", "output": "read-write"}, list_buckets=("input", "output"))
        model.grant_invoke(self.service_role)

        # ---- the task token store and the handlers -------------------------------------------------
        self.token_table = dynamodb.Table(
            self, "JobTokens",
            partition_key=dynamodb.Attribute(name="jobArn", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(point_in_time_recovery_enabled=True),
            time_to_live_attribute="expires_at",
            removal_policy=cdk.RemovalPolicy.DESTROY,  # tokens of finished waits: nothing to keep
        )
        self.prepare_function = handler_function(
            self, "Prepare", handler="batch_precompute.prepare.handler", timeout=cdk.Duration.minutes(15),
            memory_size=1024,
            environment={
                "INPUT_BUCKET": self.input_bucket.bucket_name,
                "INPUT_PREFIX": input_prefix,
                "OUTPUT_BUCKET": self.output_bucket.bucket_name,
                "OUTPUT_PREFIX": output_prefix,
                "ITEMS_BUCKET": self.items_bucket.bucket_name,
                "ITEMS_PREFIX": items_prefix,
                "INVOCATION_TYPE": invocation_type,
                "MAX_TOKENS": _env_number(max_tokens),
                "SYSTEM_PROMPT": system_prompt or "",
                "TEMPERATURE": _env_number(temperature),
                "MIN_RECORDS_PER_JOB": _env_number(min_records_per_job),
                "MAX_RECORDS_PER_JOB": _env_number(max_records_per_job),
                "MAX_RECORDS_PER_FILE": _env_number(max_records_per_file),
                "MAX_JOB_BYTES": _env_number(max_job_bytes),
                "MAX_FILE_BYTES": _env_number(max_file_bytes),
                "JOB_NAME_PREFIX": self.job_name_prefix,
                "JOB_TIMEOUT_HOURS": _env_number(_hours(job_timeout)),
            },
            encryption_key=log_encryption, log_retention=log_retention,
        )
        self._grant_objects(self.prepare_function, {"items": "read", "input": "write"})
        self.load_function = handler_function(
            self, "Load", handler="batch_precompute.load.handler", timeout=cdk.Duration.minutes(15), memory_size=1024,
            environment={
                **self.answer_store.environment(),
                "MODEL_ID": model.model_id,
                "WRITE_CONCURRENCY": _env_number(write_concurrency),
            },
            encryption_key=log_encryption, log_retention=log_retention,
        )
        self._grant_objects(self.load_function, {"input": "read", "output": "read-write"}, list_buckets=("output",))
        self.answer_store.grant_put(self.load_function)  # the loader writes answers and deletes nothing
        self.summary_function = handler_function(
            self, "Summary", handler="batch_precompute.summary.handler", timeout=cdk.Duration.seconds(30),
            memory_size=256, environment={}, encryption_key=log_encryption, log_retention=log_retention,
        )
        self.job_events_function = handler_function(
            self, "JobEvents", handler="batch_precompute.job_events.handler", timeout=cdk.Duration.seconds(60),
            memory_size=256, environment={"TOKEN_TABLE": self.token_table.table_name, "JOB_NAME_PREFIX": self.job_name_prefix},
            encryption_key=log_encryption, log_retention=log_retention,
        )
        self.token_table.grant(self.job_events_function, "dynamodb:GetItem", "dynamodb:DeleteItem", "dynamodb:Scan")
        # The job's status comes from GetModelInvocationJob, not from the event (see job_events.py).
        self.job_events_function.add_to_role_policy(
            iam.PolicyStatement(actions=["bedrock:GetModelInvocationJob"], resources=[job_arns])
        )

        # ---- the state machine ---------------------------------------------------------------------
        definition = self._definition(
            model=model, invocation_type=invocation_type, job_timeout=job_timeout,
            max_concurrent_jobs=max_concurrent_jobs,
            on_demand_fallback=on_demand_fallback, job_arns=job_arns,
        )
        options = state_machine_options or StateMachineOptions()
        if options.log_group is None and options.encryption_key is None:
            options = StateMachineOptions(**{**options.__dict__, "encryption_key": log_encryption})
        self.state_machine = model_state_machine(
            self, definition=definition, models=[], options=options, default_timeout=cdk.Duration.days(30),
        )
        self.state_machine.grant_task_response(self.job_events_function)
        self._acknowledge_state_machine_wildcards(job_arns, on_demand_fallback)

        # ---- the job-ended events -------------------------------------------------------------------
        # Matched only on what a primary source confirms (detail.status, JOB_STATE_CHANGE_STATUS_FIELD):
        # the function reads the job's name and status from GetModelInvocationJob and ignores other jobs.
        self.job_ended_rule = events.Rule(
            self, "JobEnded",
            description="Batch inference jobs that ended: the function completes the wait of this pipeline's jobs",
            event_pattern=events.EventPattern(
                source=[EVENT_SOURCE],
                detail_type=[JOB_STATE_CHANGE],
                detail={JOB_STATE_CHANGE_STATUS_FIELD: list(TERMINAL_STATUSES)},
            ),
        )
        self.job_ended_rule.add_target(targets.LambdaFunction(
            self.job_events_function, retry_attempts=8, max_event_age=cdk.Duration.hours(24),
        ))
        # The cover for a lost event, or an event whose fields are not those the function reads.
        self.job_check_rule = events.Rule(
            self, "CheckJobs",
            description="Checks each waiting batch job of this pipeline with GetModelInvocationJob",
            schedule=events.Schedule.rate(status_check_interval),
        )
        self.job_check_rule.add_target(targets.LambdaFunction(
            self.job_events_function, event=events.RuleTargetInput.from_object(CHECK_JOBS_INPUT),
            retry_attempts=0, max_event_age=cdk.Duration.minutes(5),
        ))
        self.job_events_function.configure_async_invoke(retry_attempts=2, max_event_age=cdk.Duration.hours(6))
        self._acknowledge_prefix_wildcards()
        self._acknowledge_job_events_wildcards(job_arns)
        self.alarms = {
            **execution_alarms(self, self.state_machine, alarm_actions, what=f"BatchPrecompute {id}"),
            # Each error is retried (the event twice, the check every status_check_interval); errors in three
            # periods running mean the waits are not being completed, and runs would end only at job_timeout.
            "JobEventsErrors": threshold_alarm(
                self, "JobEventsErrors",
                metric=self.job_events_function.metric_errors(statistic="Sum", period=cdk.Duration.minutes(5)),
                threshold=0, periods=3, actions=alarm_actions,
                description=f"BatchPrecompute {id}: the function that completes the runs' waits for their batch jobs has "
                            "failed for 15 minutes: runs waiting on a job do not finish until job_timeout. Read its "
                            "log group for the error.",
            ),
        }

    # ---- definition ----------------------------------------------------------------------------------

    def _definition(
        self,
        *,
        model: BedrockModel,
        invocation_type: str,
        job_timeout: cdk.Duration,
        max_concurrent_jobs: Any,
        on_demand_fallback: sfn.IStateMachine | None,
        job_arns: str,
    ) -> sfn.IChainable:
        prepare = tasks.LambdaInvoke(
            self, "Prepare input",
            lambda_function=self.prepare_function,
            payload=sfn.TaskInput.from_object({
                "input": sfn.JsonPath.object_at("$"),
                "runId": sfn.JsonPath.string_at("$$.Execution.Name"),
                "startTime": sfn.JsonPath.string_at("$$.Execution.StartTime"),
            }),
            output_path="$.Payload",
        )
        if on_demand_fallback is not None:
            below: sfn.IChainable = tasks.StepFunctionsStartExecution(
                self, "Answer on demand",
                state_machine=on_demand_fallback,
                integration_pattern=sfn.IntegrationPattern.RUN_JOB,
                input=sfn.TaskInput.from_json_path_at("$$.Execution.Input"),
                result_selector={"fallbackExecutionArn.$": "$.ExecutionArn", "fallbackStatus.$": "$.Status"},
            ).next(sfn.Succeed(self, "Answered on demand"))
        else:
            below = sfn.Fail(self, "Too few records", error="BatchPrecompute.TooFewRecords", cause_path="$.message")

        jobs = sfn.Map(
            self, "Jobs", items_path="$.jobs", max_concurrency=max_concurrent_jobs, result_path="$.results",
        )
        jobs.item_processor(self._job(model, invocation_type, job_timeout, job_arns))

        summarize = tasks.LambdaInvoke(
            self, "Summarize",
            lambda_function=self.summary_function,
            payload=sfn.TaskInput.from_object({
                "plan": {
                    "runId": sfn.JsonPath.string_at("$.runId"),
                    "items": sfn.JsonPath.number_at("$.items"),
                    "records": sfn.JsonPath.number_at("$.records"),
                    "rejected": sfn.JsonPath.number_at("$.rejected"),
                    "rejectedUri": sfn.JsonPath.string_at("$.rejectedUri"),
                },
                "jobs": sfn.JsonPath.list_at("$.results"),
            }),
            output_path="$.Payload",
        )
        outcome = sfn.Choice(self, "Outcome").when(
            sfn.Condition.string_equals("$.outcome", "Loaded"), sfn.Succeed(self, "Loaded")
        )
        for name, (state, error) in FAILURE_STATES.items():
            outcome.when(
                sfn.Condition.string_equals("$.outcome", name),
                sfn.Fail(self, state, error=error, cause_path="$.cause"),
            )
        outcome.otherwise(sfn.Fail(self, "Unknown outcome", error="BatchPrecompute.UnknownOutcome", cause_path="$.cause"))

        enough = (
            sfn.Choice(self, "Enough records?")
            .when(sfn.Condition.boolean_equals("$.belowMinimum", True), below)
            .otherwise(jobs.next(summarize).next(outcome))
        )
        return prepare.next(enough)

    def _job(
        self,
        model: BedrockModel,
        invocation_type: str,
        job_timeout: cdk.Duration,
        job_arns: str,
    ) -> sfn.IChainable:
        """One job: submit, wait for its end (event or scheduled check; LAST_RESORT_CHECK), load or record."""
        output_config: dict[str, Any] = {"S3Uri": sfn.JsonPath.string_at("$.outputUri")}
        output_key = self._keys["output"]
        if output_key is not None:
            # "The unique identifier of the key that encrypts the S3 location of the output data" (botocore bedrock
            # 2023-04-20, ModelInvocationJobS3OutputDataConfig.s3EncryptionKeyId; a key ARN matches its pattern)
            output_config["S3EncryptionKeyId"] = output_key.key_arn
        submit = tasks.CallAwsService(
            self, "Submit job",
            service="bedrock",
            action="createModelInvocationJob",
            iam_action="bedrock:CreateModelInvocationJob",
            iam_resources=[job_arns, *model.resource_arns(self)],
            additional_iam_statements=[
                iam.PolicyStatement(
                    actions=["iam:PassRole"],
                    resources=[self.service_role.role_arn],
                    conditions={"StringEquals": {"iam:PassedToService": "bedrock.amazonaws.com"}},
                )
            ],
            parameters={
                "JobName": sfn.JsonPath.string_at("$.jobName"),
                "ClientRequestToken": sfn.JsonPath.string_at("$.clientRequestToken"),
                "RoleArn": self.service_role.role_arn,
                "ModelId": model.model_id,
                "ModelInvocationType": invocation_type,
                "TimeoutDurationInHours": _hours(job_timeout),
                "InputDataConfig": {
                    "S3InputDataConfig": {"S3Uri": sfn.JsonPath.string_at("$.inputUri"), "S3InputFormat": "JSONL"}
                },
                "OutputDataConfig": {"S3OutputDataConfig": output_config},
            },
            result_selector={"jobArn.$": "$.JobArn"},
            result_path="$.job",
        )
        submit.add_retry(
            errors=list(SUBMIT_RETRY_ERRORS), interval=cdk.Duration.seconds(60), backoff_rate=2,
            max_attempts=8, max_delay=cdk.Duration.minutes(30), jitter_strategy=sfn.JitterType.FULL,
        )
        not_submitted = sfn.Pass(self, "Not submitted", parameters={
            "jobIndex.$": "$.jobIndex", "jobName.$": "$.jobName", "jobArn": "",
            "status": "SubmitFailed", "failureMessage.$": "$.error.Cause",
        })
        submit.add_catch(not_submitted, errors=["States.ALL"], result_path="$.error")

        wait = tasks.CallAwsService(
            self, "Wait for job",
            comment="Stores this wait's task token under the job ARN; the JobEnded rule's function completes it",
            service="dynamodb",
            action="putItem",
            iam_action="dynamodb:PutItem",
            iam_resources=[self.token_table.table_arn],
            integration_pattern=sfn.IntegrationPattern.WAIT_FOR_TASK_TOKEN,
            task_timeout=sfn.Timeout.duration(LAST_RESORT_CHECK),
            parameters={
                "TableName": self.token_table.table_name,
                "Item": {
                    "jobArn": {"S": sfn.JsonPath.string_at("$.job.jobArn")},
                    "token": {"S": sfn.JsonPath.task_token},
                    "expires_at": {"N": sfn.JsonPath.format("{}", sfn.JsonPath.string_at("$.tokenExpiresAt"))},
                },
            },
            result_path="$.outcome",
        )
        wait.add_retry(
            errors=list(_TOKEN_TABLE_ERRORS), interval=cdk.Duration.seconds(2), backoff_rate=2, max_attempts=6,
            max_delay=cdk.Duration.seconds(30), jitter_strategy=sfn.JitterType.FULL,
        )
        check = tasks.CallAwsService(
            self, "Check job",
            comment="Only when neither the event nor the scheduled check completed the wait within LAST_RESORT_CHECK",
            service="bedrock",
            action="getModelInvocationJob",
            iam_action="bedrock:GetModelInvocationJob",
            iam_resources=[job_arns],
            parameters={"JobIdentifier": sfn.JsonPath.string_at("$.job.jobArn")},
            result_selector={"status.$": "$.Status", "job.$": "$"},
            result_path="$.check",
        )
        check.add_retry(
            errors=list(CHECK_RETRY_ERRORS), interval=cdk.Duration.seconds(30),
            backoff_rate=2, max_attempts=6, max_delay=cdk.Duration.minutes(10), jitter_strategy=sfn.JitterType.FULL,
        )
        wait.add_catch(check, errors=["States.Timeout"], result_path="$.timedOut")
        wait_failed = sfn.Pass(self, "Wait failed", parameters={
            "jobIndex.$": "$.jobIndex", "jobName.$": "$.jobName", "jobArn.$": "$.job.jobArn",
            "status": "LoadFailed", "failureMessage.$": "$.error.Cause",
        })
        wait.add_catch(wait_failed, errors=["States.ALL"], result_path="$.error")
        check.add_catch(wait_failed, errors=["States.ALL"], result_path="$.error")

        ended = sfn.Condition.or_(*(sfn.Condition.string_equals("$.check.status", s) for s in TERMINAL_STATUSES))
        with_message = sfn.Pass(self, "Status with message", result_path="$.outcome", parameters={
            "jobArn.$": "$.job.jobArn", "status.$": "$.check.status", "failureMessage.$": "$.check.job.Message",
        })
        without_message = sfn.Pass(self, "Status", result_path="$.outcome", parameters={
            "jobArn.$": "$.job.jobArn", "status.$": "$.check.status", "failureMessage": "",
        })
        checked = (
            sfn.Choice(self, "Job ended?")
            .when(sfn.Condition.and_(ended, sfn.Condition.is_present("$.check.job.Message")), with_message)
            .when(ended, without_message)
            .otherwise(wait)
        )
        check.next(checked)

        load = tasks.LambdaInvoke(
            self, "Load answers",
            lambda_function=self.load_function,
            payload=sfn.TaskInput.from_object({
                "jobIndex": sfn.JsonPath.number_at("$.jobIndex"),
                "jobName": sfn.JsonPath.string_at("$.jobName"),
                "jobArn": sfn.JsonPath.string_at("$.job.jobArn"),
                "status": sfn.JsonPath.string_at("$.outcome.status"),
                "outputUri": sfn.JsonPath.string_at("$.outputUri"),
                "keysUri": sfn.JsonPath.string_at("$.keysUri"),
                "sequence": sfn.JsonPath.number_at("$.sequence"),
                "sentAt": sfn.JsonPath.string_at("$.sentAt"),
            }),
            output_path="$.Payload",
        )
        load.add_retry(
            errors=["StoreWriteError"], interval=cdk.Duration.seconds(60), backoff_rate=2, max_attempts=3,
            max_delay=cdk.Duration.minutes(10), jitter_strategy=sfn.JitterType.FULL,
        )
        load.add_catch(
            sfn.Pass(self, "Not loaded", parameters={
                "jobIndex.$": "$.jobIndex", "jobName.$": "$.jobName", "jobArn.$": "$.job.jobArn",
                "status": "LoadFailed", "failureMessage.$": "$.error.Cause",
            }),
            errors=["States.ALL"], result_path="$.error",
        )
        ended_without_output = sfn.Pass(self, "Job ended without output", parameters={
            "jobIndex.$": "$.jobIndex", "jobName.$": "$.jobName", "jobArn.$": "$.job.jobArn",
            "status.$": "$.outcome.status", "failureMessage.$": "$.outcome.failureMessage",
        })
        loadable = sfn.Condition.or_(*(sfn.Condition.string_equals("$.outcome.status", s) for s in LOADABLE_STATUSES))
        route = sfn.Choice(self, "Load?").when(loadable, load).otherwise(ended_without_output)
        with_message.next(route)
        without_message.next(route)
        return submit.next(wait).next(route)

    # ---- grants and buckets ---------------------------------------------------------------------------

    def _bucket(
        self, id: str, key: kms.IKey | None, access_logs: s3.IBucket, expiration: cdk.Duration | None
    ) -> s3.Bucket:
        return data_bucket(
            self, id, key=key, access_logs=access_logs,
            lifecycle_rules=[
                s3.LifecycleRule(
                    expiration=expiration, abort_incomplete_multipart_upload_after=cdk.Duration.days(1),
                )
            ] if expiration is not None else [s3.LifecycleRule(abort_incomplete_multipart_upload_after=cdk.Duration.days(1))],
        )

    def _grant_objects(
        self, grantee: iam.IGrantable, uses: Mapping[str, str], *, list_buckets: tuple[str, ...] = ()
    ) -> None:
        """Exact S3 actions on the prefix of each bucket in `uses` ("items", "input" or "output" -> "read",
        "write" or "read-write"; aws-cdk-lib's grant_read would grant s3:GetObject* and s3:List*), ListBucket
        on `list_buckets`, and each bucket's KMS key: kms:Decrypt to read, kms:GenerateDataKey and
        kms:Decrypt to write (a multipart upload needs both)."""
        principal = grantee.grant_principal
        for name, access in uses.items():
            bucket = self._buckets[name]
            actions = (["s3:GetObject"] if "read" in access else []) + (
                ["s3:PutObject", "s3:AbortMultipartUpload"] if "write" in access else []
            )
            principal.add_to_principal_policy(
                iam.PolicyStatement(actions=actions, resources=[bucket.arn_for_objects(f"{self._prefixes[name]}*")])
            )
            if name in list_buckets:
                principal.add_to_principal_policy(iam.PolicyStatement(actions=["s3:ListBucket"], resources=[bucket.bucket_arn]))
        grant_keys(grantee, *(
            (self._keys[name], KMS_WRITE_ACTIONS if "write" in access else KMS_READ_ACTIONS) for name, access in uses.items()
        ))

    def _check_overlaps(
        self,
        check: Checks,
        input_bucket: s3.IBucket | None,
        output_bucket: s3.IBucket | None,
        items_bucket: s3.IBucket | None,
        items_prefix: str,
        input_prefix: str,
        output_prefix: str,
    ) -> None:
        """Prefixes sharing a bucket must not nest: each role's grant would reach the other's objects."""
        same_input_output = input_bucket is not None and input_bucket is output_bucket
        items_in_input = items_bucket is None or items_bucket is input_bucket
        pairs = [("input_prefix", input_prefix, "output_prefix", output_prefix, same_input_output),
                 ("items_prefix", items_prefix, "input_prefix", input_prefix, items_in_input)]
        for name_a, a, name_b, b, shared in pairs:
            if shared and (a.startswith(b) or b.startswith(a)):
                check.fail(
                    f"{name_a}={a!r} and {name_b}={b!r} nest in the same bucket: the job would read what it writes, or "
                    "a grant on one prefix would reach the other; use disjoint prefixes such as 'batch-input/' and "
                    "'batch-output/'", id=f"{name_a}.nests-in-{name_b}"
                )

    @staticmethod
    def _check_status_interval(check: Checks, interval: Any) -> None:
        """A schedule rate: whole minutes within STATUS_CHECK_INTERVAL_RANGE; a token in minutes flows."""
        low, high = STATUS_CHECK_INTERVAL_RANGE
        fix = "how often each waiting job is checked; a few minutes costs one GetModelInvocationJob per running job"
        if isinstance(interval, cdk.Duration) and interval.is_unresolved():
            check.rule(
                interval.unit_label() in ("minute", "minutes", "hour", "hours", "day", "days"),
                "status_check_interval is a deploy-time token in seconds; an EventBridge rate takes minutes: pass "
                "cdk.Duration.minutes(<token>)",
                id="status_check_interval.deploy-time-unit",
            )
            return
        if check.duration("status_check_interval", interval, minimum=low, maximum=high, fix=fix):
            check.rule(
                interval.to_seconds() % 60 == 0,
                f"status_check_interval={interval.to_human_string()} is not whole minutes; an EventBridge schedule "
                "rate is in minutes: use cdk.Duration.minutes(...)",
                id="status_check_interval.not-whole-minutes",
            )

    @staticmethod
    def _check_quotas(
        check: Checks,
        min_records_per_job: Any,
        max_records_per_job: Any,
        max_records_per_file: Any,
        max_job_bytes: Any,
        max_file_bytes: Any,
    ) -> None:
        quota_fix = "a per-model Service Quota; see the BatchPrecompute docstring for the defaults"
        min_ok = check.integer("min_records_per_job", min_records_per_job, minimum=1, maximum=MAX_RECORDS_PER_JOB_LIMIT, fix=quota_fix)
        max_ok = check.integer(
            "max_records_per_job", max_records_per_job, minimum=1, maximum=MAX_RECORDS_PER_JOB_LIMIT,
            fix=f"{quota_fix}; the loader handles one job per 15-minute Lambda invocation, so at most "
            f"{MAX_RECORDS_PER_JOB_LIMIT:,} are accepted",
        )
        check.integer("max_records_per_file", max_records_per_file, minimum=1, maximum=MAX_RECORDS_PER_JOB_LIMIT, fix=quota_fix)
        job_bytes_ok = check.integer("max_job_bytes", max_job_bytes, minimum=1024, maximum=10**12, fix=quota_fix + " (bytes)")
        file_bytes_ok = check.integer("max_file_bytes", max_file_bytes, minimum=1024, maximum=10**12, fix=quota_fix + " (bytes)")
        if min_ok and max_ok:
            check.rule(
                max_records_per_job >= 2 * min_records_per_job,
                f"max_records_per_job={max_records_per_job:,} is below twice min_records_per_job={min_records_per_job:,}: "
                "a run just over the maximum would be split into jobs below the minimum, which Bedrock refuses; check "
                "both quotas for your model",
                id="max_records_per_job.below-twice-minimum",
            )
        if job_bytes_ok and file_bytes_ok:
            check.rule(
                max_file_bytes <= max_job_bytes,
                f"max_file_bytes={max_file_bytes:,} exceeds max_job_bytes={max_job_bytes:,}: a job holds its files; "
                "check both quotas for your model",
                id="max_file_bytes.above-max-job-bytes",
            )

    # ---- nag --------------------------------------------------------------------------------------------

    def _acknowledge_prefix_wildcards(self) -> None:
        """Object grants on a prefix (bucket/prefix/*) are this construct's least privilege: the objects'
        names are generated per run and per job, so no grant can name them one by one. Exactly those
        ARNs, flattened at validation (a bucket of another stack is an Fn::ImportValue by then), so a
        user's own prefix wildcard on these roles is still reported."""
        reason = (
            "S3 objects under one of this pipeline's prefixes (items, batch input, batch output), whose keys are "
            "generated per run and per job; the grant is limited to that prefix"
        )
        objects = [self._buckets[name].arn_for_objects(f"{prefix}*") for name, prefix in self._prefixes.items()]
        # handler_function gives every function a role of its own, so none of these is None.
        for role in (self.service_role, cast(iam.IRole, self.prepare_function.role), cast(iam.IRole, self.load_function.role)):
            policy = role.node.try_find_child("DefaultPolicy")
            if policy is not None:
                acknowledge_exact_resources_at_validation(
                    policy, resources=functools.partial(_flattened_all, policy, objects), reason=reason
                )

    def _acknowledge_job_events_wildcards(self, job_arns: str) -> None:
        events_role = cast(iam.IRole, self.job_events_function.role)  # handler_function gave it a role
        acknowledge_exact_resources(
            cast(Construct, events_role.node.find_child("DefaultPolicy")),
            resources=[flattened(self, job_arns)],
            reason="batch inference job ids are generated by Bedrock when a job is created; GetModelInvocationJob "
            "(the job's status, read as the authority) on this account's and Region's jobs only",
        )

    def _acknowledge_state_machine_wildcards(self, job_arns: str, fallback: sfn.IStateMachine | None) -> None:
        """Exactly this construct's own wildcards on the state machine's role, which may be the user's
        (StateMachineOptions(role=...)): a wildcard the user granted that role is still reported."""
        policy = principal_policy(self.state_machine.role)
        if policy is None:
            return
        job_ids = (
            "batch inference job ids are generated by Bedrock when a job is created; the grant is limited to "
            "this account's and Region's model invocation jobs"
        )
        acknowledge_exact_resources(policy, resources=[flattened(self, job_arns)], reason=job_ids)
        acknowledge_exact_resources(
            policy,
            resources=[
                flattened(self, f"{function.function_arn}:*")
                for function in (self.prepare_function, self.load_function, self.summary_function)
            ],
            reason="aws-cdk-lib's LambdaInvoke grants the function's versions and aliases (<function arn>:*) beside "
            "the function; only this construct's own functions are granted",
        )
        if fallback is not None:
            # The execution ARNs aws-cdk-lib's StepFunctionsStartExecution (RUN_JOB) grants: <name>* in this stack.
            stack = cdk.Stack.of(self)
            name = cdk.Arn.split(fallback.state_machine_arn, cdk.ArnFormat.COLON_RESOURCE_NAME).resource_name
            executions = stack.format_arn(
                service="states", resource="execution", resource_name=f"{name}*",
                arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
            )
            acknowledge_exact_resources(
                policy,
                resources=[flattened(self, executions)],
                reason="starting the on-demand fallback and waiting for it (.sync) needs DescribeExecution and "
                "StopExecution on that state machine's executions, whose names Step Functions generates",
            )

    # ---- metrics ----------------------------------------------------------------------------------------

    def metric_records_loaded(self, **props: Any) -> cloudwatch.Metric:
        """Answers the loader wrote to the store (Sum); answers superseded by a newer one are not counted."""
        return self._metric(metrics_constants().BATCH_RECORDS_LOADED, props)

    def metric_records_failed(self, **props: Any) -> cloudwatch.Metric:
        """Records of loaded jobs left without an answer: errored, no answer text, or missing from the output (Sum)."""
        return self._metric(metrics_constants().BATCH_RECORDS_FAILED, props)

    def metric_records_pending(self, **props: Any) -> cloudwatch.Metric:
        """Bedrock's batch records not yet processed for this construct's model (Maximum over 5 minutes).
        Account-wide: every batch job of this model in the account and Region, not only this pipeline's."""
        return self._bedrock_batch_metric(BATCH_RECORDS_PENDING, "Maximum", "records pending", props)

    def metric_input_tokens_processed(self, **props: Any) -> cloudwatch.Metric:
        """Input tokens Bedrock's batch jobs process per minute for this construct's model (Average over 5
        minutes). Account-wide, like metric_records_pending."""
        return self._bedrock_batch_metric(BATCH_INPUT_TOKENS_PER_MINUTE, "Average", "input tokens per minute", props)

    def metric_output_tokens_processed(self, **props: Any) -> cloudwatch.Metric:
        """Output tokens per minute, as metric_input_tokens_processed (the name is unconfirmed: see the constant)."""
        return self._bedrock_batch_metric(BATCH_OUTPUT_TOKENS_PER_MINUTE, "Average", "output tokens per minute", props)

    def metric_tokens_pending(self, **props: Any) -> cloudwatch.Metric:
        """Tokens not yet processed (Anthropic Claude models only; Maximum over 5 minutes). Account-wide."""
        return self._bedrock_batch_metric(BATCH_TOKENS_PENDING, "Maximum", "tokens pending", props)

    def metric_account_records_pending(self, **props: Any) -> cloudwatch.Metric:
        """Batch records not yet processed for every model of the account and Region (no model dimension)."""
        options: dict[str, Any] = {"statistic": "Maximum", "period": cdk.Duration.minutes(5),
                                   "label": "Batch records pending (account-wide, all models)", **props}
        return cloudwatch.Metric(namespace=BEDROCK_BATCH_NAMESPACE, metric_name=BATCH_RECORDS_PENDING, **options)

    def _bedrock_batch_metric(self, name: str, statistic: str, what: str, props: Mapping[str, Any]) -> cloudwatch.Metric:
        model_id = self._model.model_id
        options: dict[str, Any] = {"statistic": statistic, "period": cdk.Duration.minutes(5),
                                   "label": f"Batch {what} ({model_id}, account-wide)", **props}
        return cloudwatch.Metric(
            namespace=BEDROCK_BATCH_NAMESPACE, metric_name=name,
            dimensions_map={BEDROCK_BATCH_MODEL_DIMENSION: model_id}, **options,
        )

    def _metric(self, name: str, props: Mapping[str, Any]) -> cloudwatch.Metric:
        """One data point per loaded job, under the loader function's name. Default: Sum over 1 day."""
        options: dict[str, Any] = {"statistic": "Sum", "period": cdk.Duration.days(1), **props}
        return function_metric(self.load_function.function_name, name, **options)


def _flattened_all(scope: IConstruct, arns: list[str]) -> list[str]:
    return [flattened(scope, arn) for arn in arns]


def _check_prefix(check: Checks, name: str, value: Any) -> bool:
    if is_token(value):
        return check.fail(
            f"{name} is a deploy-time token; the prefixes scope IAM grants at synth: pass text such as 'batch-input/'", id=f"{name}.deploy-time-prefix"
        )
    if not check.text(name, value, max_length=200):
        return False
    return check.rule(
        bool(_PREFIX_CHARS.match(value)),
        f"{name}={value!r} must be a key prefix ending in '/', without a leading '/', of letters, digits and "
        "!_*'().- (the characters Bedrock's s3Uri allows), e.g. 'batch-input/'",
        id=f"{name}.not-key-prefix",
    )


def _env_number(value: Any) -> str:
    """A number as a function's environment gets it: a token as the text it resolves to at deploy (never
    the encoded double str() would write), None as empty, an integral float without its '.0'."""
    if value is None:
        return ""
    if is_token(value):
        return cdk.Token.as_string(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _hours(duration: cdk.Duration) -> Any:
    """Whole hours of a Duration; a token in hours stays a token (a number the template resolves)."""
    hours = duration.to_hours()
    return hours if is_token(hours) else int(hours)
