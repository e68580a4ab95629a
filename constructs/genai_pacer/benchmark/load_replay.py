"""LoadReplay: replay recorded prompts against Bedrock from the target Region, at production load.

"Ten short prompts run one at a time from a laptop say almost nothing about a 50-user, long-prompt
workload": a useful benchmark replays representative prompts at production concurrency, from the
Region production runs in, in the API mode production uses, and reports the percentiles users feel.
`genai-pacer bench` does that from the machine it runs on; a LoadReplay does it from the account:

    Plan (Lambda: reads the prompts object once and pins its ETag; the run's start time; run.json)
      -> Workers (Distributed Map over the virtual users, MaxConcurrency = the target concurrency;
         open loop: over the workers the seeded Poisson schedule is split across); per worker:
           Replay (Lambda: the worker's share until done or its time budget runs low; records to
           S3) -> Done? -> no: Replay again, from where the last call stopped
      -> Summarize (Lambda: bench.json and bench.csv beside the records, computed by the local
         bench's own code) -> Replayed, or "Replay incomplete" when a worker failed (the summary of
         what was recorded is written either way)

One Lambda invocation runs at most 15 minutes (MAX_LAMBDA_SECONDS), so a worker's share continues
over as many calls as it needs. Records hold measurements only (times, token counts, attempts,
throttles, the served latency mode and tier, error codes, the prompt's id), never prompt or answer
text, and expire with the results prefix (`retention`). Start a run with
`aws stepfunctions start-execution --state-machine-arn <state_machine_arn>` (its name names the
run's folder); stop it with `aws stepfunctions stop-execution --execution-arn <arn>`, one call (the replay
calls running then send no more once they see it, within stop_check_interval); read
it with `genai-pacer bench report s3://<bucket>/<results_prefix><execution name>/`.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any, Literal, cast

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks

from constructs import Construct

from .._internal.checks import Checks, Default, resolved, token_kind
from .._internal.docs import constructor_doc
from .._internal.nag import acknowledge_exact_resources, flattened, principal_policy
from .._internal.runtime_constants import replay_module
from .._internal.s3 import (
    KMS_READ_ACTIONS,
    KMS_WRITE_ACTIONS,
    bucket_key,
    check_key_bytes,
    data_bucket,
    grant_keys,
    new_access_logs_bucket,
)
from .._internal.secure import handler_function, log_key
from ..models import BedrockModel, as_bedrock_model
from ..quota import planning
from ..quota.ledger import _CONSUMER_LIMIT, QuotaLedger
from ..quota.model_quota import _QUOTAS, ModelQuota
from ..step_functions.orchestration import DISTRIBUTED_MAP_LIMIT
from ..step_functions.state_machine import StateMachineOptions, model_state_machine

__all__ = [
    "API_MODES",
    "DEFAULT_ADMISSION_TIMEOUT",
    "DEFAULT_CALL_BUDGET",
    "DEFAULT_CALL_SECONDS",
    "DEFAULT_IN_FLIGHT_PER_WORKER",
    "DEFAULT_REQUEST_CAP",
    "DEFAULT_RETENTION",
    "DEFAULT_START_LEAD",
    "LATENCY_MODES",
    "LoadReplay",
    "MAX_LAMBDA_SECONDS",
    "MAX_START_LEAD",
]

#: One Lambda invocation runs at most 900 seconds: "Code can run for up to 15 minutes in a single
#: invocation" (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html); the Timeout
#: setting's maximum is 900 seconds (https://docs.aws.amazon.com/lambda/latest/dg/configuration-timeout.html).
#: The replay function runs that long; a worker's share continues over as many calls as it needs.
MAX_LAMBDA_SECONDS = 900
#: The seconds the function keeps after its last request to write that call's records
#: (load_replay.handler.WRITE_SECONDS; a test holds them equal).
WRITE_SECONDS = 10
#: The replay function's memory (MB): enough for the in-flight requests' threads and one call's records.
REPLAY_MEMORY_MB = 1024
#: Where the replay function's time is priced: no Lambda price is built in (prices are props, and this
#: project keeps no price table), so the synth annotation states the function's seconds and points here.
LAMBDA_PRICING = "https://aws.amazon.com/lambda/pricing/"
#: The API modes a run replays in: the Converse operations of botocore's bedrock-runtime model.
API_MODES = ("ConverseStream", "Converse")
#: PerformanceConfiguration.latency's enum (botocore bedrock-runtime model; pacer_runtime.prompts.LATENCY_MODES).
LATENCY_MODES = ("standard", "optimized")
#: The most requests (warm-up included) a run sends unless request_cap says otherwise: a typo in
#: `requests` must not become a bill.
DEFAULT_REQUEST_CAP = 10_000
#: How long one request may take, SDK retries and their backoff included; no request starts in a
#: call with less time left (plus WRITE_SECONDS), so a call never times out mid-request.
DEFAULT_CALL_BUDGET = cdk.Duration.minutes(5)
_CALL_BUDGET = Default("cdk.Duration.minutes(5)", lambda: DEFAULT_CALL_BUDGET)
#: How far the run's start time (the plan's start_at, the shared clock's zero) is ahead of the plan: the
#: Distributed Map starts its workers meanwhile, so every virtual user (and the open loop's first
#: arrival) starts together rather than as the Map reaches it (load_replay.handler.START_LEAD_SECONDS,
#: the function's own default; a test holds them equal).
DEFAULT_START_LEAD = cdk.Duration.seconds(5)
_START_LEAD = Default("cdk.Duration.seconds(5)", lambda: DEFAULT_START_LEAD)
#: The longest start_lead this construct takes: a longer lead only idles the workers (this project's bound,
#: not an AWS limit; a Map of 10,000 children starts them in far less).
MAX_START_LEAD = cdk.Duration.minutes(5)
#: With ledger=: how long a closed-loop user the ledger admits no request waits before it gives up and the run
#: ends "Replay incomplete", the report naming it (load_replay.handler.ADMISSION_TIMEOUT_SECONDS, the function's
#: default; a test holds them equal). Without it a ledger that stays full would keep every user asking, call after
#: call, until the state machine's 24-hour timeout. This project's choice: a run's floor (its share) is its own
#: whatever the others hold, so a quarter hour without one admission means the run cannot run as configured.
DEFAULT_ADMISSION_TIMEOUT = cdk.Duration.minutes(15)
_ADMISSION_TIMEOUT = Default("cdk.Duration.minutes(15)", lambda: DEFAULT_ADMISSION_TIMEOUT)
#: The longest admission_timeout: below the state machine's default 24-hour timeout (this project's bound).
MAX_ADMISSION_TIMEOUT = cdk.Duration.hours(12)
#: How long the results prefix keeps a run's records and report.
DEFAULT_RETENTION = cdk.Duration.days(30)
_RETENTION = Default("cdk.Duration.days(30)", lambda: DEFAULT_RETENTION)
#: The open loop's requests in flight per worker: a worker sends each arrival on time while earlier
#: answers are still streaming.
DEFAULT_IN_FLIGHT_PER_WORKER = 10
#: The average call duration the synth annotation turns a closed loop's concurrency into a rate with.
DEFAULT_CALL_SECONDS = 10.0
_PREFIX_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!-_.*'()/")
_MODEL_HINT = "a BedrockModel, e.g. BedrockModel.from_id('us.amazon.nova-micro-v1:0')"


@constructor_doc
class LoadReplay(Construct):
    """A deployable load replay: recorded prompts sent to the model from this stack's Region at a
    closed-loop concurrency or an open-loop rate, measured and reported as `genai-pacer bench`
    reports (see the module docstring).

    model: the model or inference profile to measure; the function may invoke only it.
    prompts_bucket / prompts_key: the prompts object, JSONL in either of the bench's formats (text
        lines or recorded Converse requests, bench/README.md "Prompts"). The function may read only
        that object. A line that cannot be replayed is left out and listed in the run's run.json.
    prompts_bucket_key: the KMS key of an SSE-KMS prompts_bucket that does not know it. Default: the
        bucket's own encryption_key; none for a bucket imported by name (SSE-S3).
    requests: measured requests per run (1..request_cap - warmup).
    profile: the TokenProfile of one request (planning.TokenProfile, or quota.profile(...)): its
        max_tokens is what a request without one reserves, its burndown the report's, and the synth
        annotation of what the run reserves and costs is computed from it.
    concurrency: closed loop: that many virtual users, each sending its next request when its answer
        ends (1..10,000, the Distributed Map's limit). Give exactly one of concurrency and rate_per_minute.
    rate_per_minute: open loop: Poisson arrivals at this rate (seeded: the same schedule each run).
    workers: open loop: the workers the schedule is split across, each holding up to
        in_flight_per_worker requests in flight. Default: enough for the rate at call_seconds per
        call (rate x call_seconds / 60 / in_flight_per_worker, at least 1). Closed loop: refused
        (the workers are the virtual users).
    in_flight_per_worker: open loop: requests one worker holds in flight (1..100). Default: 10.
    api: "ConverseStream" (TTFT and output tokens per second measured) or "Converse". Default: ConverseStream.
    latency: performanceConfig.latency sent with every request ("standard" or "optimized"). Default:
        none (each recorded request's own, else the model's standard).
    max_tokens: maxTokens sent with every request, replacing the recorded one. Default: the recorded one.
    warmup: requests sent first and left out of the report. Default: 8.
    seed: the open loop's schedule. Default: 0.
    ttft_target / otps_target / e2e_target: goodput targets, as `genai-pacer bench --ttft-target
        --otps-target --e2e-target` takes them: a request counts toward the report's goodput when it
        succeeded with a TTFT at most ttft_target, at least otps_target output tokens a second and an
        end-to-end time at most e2e_target (each only when given; e.g. cdk.Duration.millis(800)).
        TTFT and OTPS need api="ConverseStream" (refused with Converse). Default: none (goodput counts
        every request that succeeded).
    request_cap: the most requests (warm-up included) one run may send; above it synth refuses and
        the function refuses. Default: 10,000.
    share: the plan a ModelQuota share returns (quota.share("LoadReplay", profile, call_seconds=...,
        fraction=0.2)): the run then holds that share, and synth refuses a concurrency (or rate) above
        what it sustains (with ledger= and a share drawn with burst_tpm, what its burst sustains),
        naming both. Default: none.
    ledger: a `QuotaLedger` of the replayed model's ModelQuota: the run then takes part in the quota's
        shared ledger like any consumer. Each request holds its reservation there (input estimate +
        max_tokens x burndown) before it is sent and settles it with the real usage after (a throttle
        returns it at once), through pacer_runtime's QuotaPacer with the quota's SharedLedger, so a
        run never holds more than its floor (the share's TPM) plus what the other consumers leave free,
        and their floors stay theirs. Needs share= drawn from that quota (the run's floor; refused
        without). A request waits for the ledger's room; the wait counts in its e2e_s (as the open
        loop's wait for a free slot does), not in its TTFT. A closed-loop user that cannot be admitted
        before its call's time runs low continues in the next call; an open-loop arrival that cannot is
        recorded as failed with the error AdmissionRejected (it was never sent). While DynamoDB cannot
        be used, each worker falls back to its part of the floor (floor / workers). A closed-loop user the ledger
        admits nothing for admission_timeout gives up: the run ends "Replay incomplete" and its report's
        summary["incomplete"] names the worker and why. A request holding more
        than the run may hold in the ledger (the profile's prompt + max_tokens x burndown above the quota's
        allocatable TPM) could never be admitted: refused, naming both. The function gets
        UpdateItem and GetItem on the quota's item only. Default: none (the run is not paced; a share
        only limits its load at synth).
    admission_timeout: with ledger=: how long a closed-loop user the ledger admits no request keeps asking before
        it gives up (and the run ends, its report naming why). 1 minute..12 hours. Default: 15 minutes. Refused
        without ledger= (nothing waits for admission then).
    call_seconds: the average duration of one call, for the synth annotation of a closed loop's
        rate and the open loop's default workers. Default: the share's, else 10 s.
    input_price_per_million / output_price_per_million: USD per million input / output tokens, for
        the synth annotation of the run's rough cost (no price table is built in). Default: none (no
        cost is annotated).
    call_budget: how long one request may take, retries included: no request starts in a call with
        less time left. 10 s..14 minutes. Default: 5 minutes.
    stop_check_interval: how often a replay call asks Step Functions (DescribeExecution, on this state machine's
        executions only) whether its run was stopped; once it was, the call sends no more requests (Lambda cannot
        end a running invocation). 0..15 minutes; 0 asks before every request (offline tests). Default: every
        workers / 2 seconds, at least every 10 s, so a run's checks stay within 2 a second of the API's
        account-wide 10 a second (load_replay.handler.STOP_CHECKS_PER_SECOND).
    start_lead: how far ahead of the plan the run starts (the shared clock's zero): the Distributed Map
        starts its workers meanwhile, so all virtual users (and the open loop's schedule) start together.
        0..5 minutes, and with call_budget at most a Lambda call's 15 minutes (a first call must have
        room for a request after the lead). 0 starts each worker as the Map reaches it (offline tests).
        Default: 5 seconds.
    results_bucket: where runs are written, under results_prefix + the execution's name. Default: a
        new bucket, encrypted (S3-managed, or encryption_key), TLS-only, public access blocked,
        access-logged.
    results_bucket_key: the KMS key of an SSE-KMS results_bucket that does not know it.
    results_prefix: ends with "/". Default: "load-replay/".
    retention: how long the results prefix keeps a run (a lifecycle rule on the prefix, whole days).
        Default: 30 days. None keeps them; an imported results_bucket, whose lifecycle this stack
        cannot set, needs None.
    encryption_key: KMS key of the new results bucket. Default: S3-managed encryption.
    access_logs_bucket: receives the new results bucket's access logs. Default: a new bucket.
    encryption_key_for_logs: KMS key of the function's and state machine's log groups. Default: the
        construct's one KMS key, with rotation, retained on delete ($1 a month while it exists, AWS KMS
        pricing page; docs/security.md, "KMS keys").
    log_retention: of the function's log group. Default: one month.
    state_machine_options: Default: STANDARD, encrypted logs, X-Ray, a 24-hour timeout. EXPRESS is
        refused (5 minutes).

    Attributes: `state_machine`, `function`, `results_bucket`, `results_prefix`, `workers`,
    `reserved_tpm` (what the run reserves per minute, from the profile), `estimated_cost_usd`
    (the model's tokens at the given prices; None without prices), `function_seconds` (about how long the
    replay function runs in a run, at REPLAY_MEMORY_MB: the requests' time and each worker's start_lead; not
    priced, see the synth annotation), `tpm_quota` (the ModelQuota's tpm_quota the report's tpm.quota and its
    percentages are read against, from the share's or the ledger's quota; None without either),
    `ledger`, `ledger_consumer` and `ledger_floor_tpm` (the run's name and floor in it; None without).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        model: BedrockModel,
        prompts_bucket: s3.IBucket,
        prompts_key: str,
        requests: int,
        profile: planning.TokenProfile,
        concurrency: int | None = None,
        rate_per_minute: float | None = None,
        workers: int | None = None,
        in_flight_per_worker: int = DEFAULT_IN_FLIGHT_PER_WORKER,
        api: Literal["ConverseStream", "Converse"] = "ConverseStream",
        latency: Literal["standard", "optimized"] | None = None,
        max_tokens: int | None = None,
        warmup: int = 8,
        seed: int = 0,
        ttft_target: cdk.Duration | None = None,
        otps_target: float | None = None,
        e2e_target: cdk.Duration | None = None,
        request_cap: int = DEFAULT_REQUEST_CAP,
        share: planning.RatePlan | None = None,
        ledger: QuotaLedger | None = None,
        call_seconds: float | None = None,
        input_price_per_million: float | None = None,
        output_price_per_million: float | None = None,
        call_budget: cdk.Duration | Default = _CALL_BUDGET,
        admission_timeout: cdk.Duration | Default = _ADMISSION_TIMEOUT,
        stop_check_interval: cdk.Duration | None = None,
        start_lead: cdk.Duration | Default = _START_LEAD,
        prompts_bucket_key: kms.IKey | None = None,
        results_bucket: s3.IBucket | None = None,
        results_bucket_key: kms.IKey | None = None,
        results_prefix: str = "load-replay/",
        retention: cdk.Duration | Default | None = _RETENTION,
        encryption_key: kms.IKey | None = None,
        access_logs_bucket: s3.IBucket | None = None,
        encryption_key_for_logs: kms.IKey | None = None,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
        state_machine_options: StateMachineOptions | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.node.set_context("@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy", True)
        model = as_bedrock_model(model)
        budget: cdk.Duration = resolved(call_budget)
        lead: cdk.Duration = resolved(start_lead)
        patience: cdk.Duration = resolved(admission_timeout)
        expiry: cdk.Duration | None = resolved(retention)
        with Checks("LoadReplay", scope=self) as check:
            self._refuse_tokens(check, {
                "prompts_key": prompts_key, "requests": requests, "concurrency": concurrency,
                "rate_per_minute": rate_per_minute, "workers": workers, "in_flight_per_worker": in_flight_per_worker,
                "api": api, "latency": latency, "max_tokens": max_tokens, "warmup": warmup, "seed": seed,
                "ttft_target": ttft_target, "otps_target": otps_target, "e2e_target": e2e_target,
                "request_cap": request_cap, "call_seconds": call_seconds,
                "input_price_per_million": input_price_per_million,
                "output_price_per_million": output_price_per_million, "call_budget": budget, "start_lead": lead,
                "admission_timeout": patience, "stop_check_interval": stop_check_interval,
                "results_prefix": results_prefix, "retention": expiry,
            })
            check.instance("model", model, BedrockModel, _MODEL_HINT)
            check.instance("prompts_bucket", prompts_bucket, s3.IBucket, "an s3.Bucket (or s3.Bucket.from_bucket_name)")
            if check.text("prompts_key", prompts_key, fix="the key of the JSONL prompts object, e.g. 'prompts/chat.jsonl'"):
                check_key_bytes(check, "prompts_key", prompts_key, "the key of the prompts object")
            profile_ok = check.instance("profile", profile, planning.TokenProfile,
                                        "planning.TokenProfile(input_tokens=..., output_tokens=..., max_tokens=...)")
            check.integer("request_cap", request_cap, minimum=1, maximum=10_000_000,
                          fix="the most requests one run may send, warm-up included")
            check.integer("warmup", warmup, minimum=0, maximum=10_000, fix="requests sent first and left out of the report")
            if (check.integer("requests", requests, minimum=1, maximum=10_000_000, fix="measured requests per run")
                    and isinstance(request_cap, int) and isinstance(warmup, int)):
                check.rule(requests + warmup <= request_cap,
                           f"requests={requests:,} + warmup={warmup:,} = {requests + warmup:,} requests is above "
                           f"request_cap={request_cap:,}; lower requests, or raise request_cap if you mean it", id="requests.above-request-cap")
            check.integer("seed", seed, minimum=0, maximum=2**63 - 1, fix="any whole number >= 0")
            check.one_of("api", api, API_MODES)
            if latency is not None:
                check.one_of("latency", latency, LATENCY_MODES, fix="performanceConfig.latency")
            if (check.integer("max_tokens", max_tokens, minimum=1, maximum=planning.MAX_REQUEST_TOKENS, optional=True,
                              fix="maxTokens sent with every request")
                    and max_tokens is not None and profile_ok and isinstance(max_tokens, int)):
                # Bedrock reserves input + maxTokens as a call starts; the share, reserved_tpm and the annotation
                # count the profile's max_tokens, so a larger max_tokens would reserve more than they say.
                check.rule(max_tokens <= profile.max_tokens,
                           f"max_tokens={max_tokens:,} is above the profile's max_tokens={profile.max_tokens:,}, which the "
                           "share and the reserved-tokens annotation count each request reserving: raise the profile's "
                           "max_tokens, or lower max_tokens", id="max_tokens.above-profile")
            check.number("call_seconds", call_seconds, above=0, maximum=MAX_LAMBDA_SECONDS, optional=True,
                         fix="the average duration of one call in seconds, e.g. 6")
            for name, price in (("input_price_per_million", input_price_per_million),
                                ("output_price_per_million", output_price_per_million)):
                check.number(name, price, minimum=0, maximum=100_000, optional=True,
                             fix="USD per million tokens, from the model's Bedrock pricing page")
            check.rule((input_price_per_million is None) == (output_price_per_million is None),
                       "input_price_per_million and output_price_per_million go together (the cost needs both); "
                       "pass both or neither", id="input_price_per_million.without-output-price")
            closed = concurrency is not None
            loop_ok = check.rule(closed != (rate_per_minute is not None),
                                 f"{'both' if closed else 'neither of'} concurrency and rate_per_minute given; pass "
                                 "exactly one: concurrency (closed loop: virtual users) or rate_per_minute (open loop: "
                                 "Poisson arrivals)", id="concurrency.one-load")
            if closed:
                loop_ok &= check.integer("concurrency", concurrency, minimum=1, maximum=DISTRIBUTED_MAP_LIMIT,
                                         fix=f"virtual users, at most the Distributed Map's {DISTRIBUTED_MAP_LIMIT:,}")
                check.rule(workers is None, f"workers={workers!r} applies to the open loop (rate_per_minute); in a "
                           "closed loop each virtual user is a worker: drop it", id="workers.closed-loop")
            else:
                loop_ok &= check.number("rate_per_minute", rate_per_minute, above=0, maximum=1_000_000, optional=True,
                                        fix="requests per minute, e.g. 120")
                check.integer("workers", workers, minimum=1, maximum=DISTRIBUTED_MAP_LIMIT, optional=True,
                              fix=f"workers the open loop's schedule is split across, at most {DISTRIBUTED_MAP_LIMIT:,}")
            check.integer("in_flight_per_worker", in_flight_per_worker, minimum=1, maximum=100,
                          fix="requests one open-loop worker holds in flight")
            if closed and in_flight_per_worker != DEFAULT_IN_FLIGHT_PER_WORKER and token_kind(in_flight_per_worker) is None:
                check.fail(f"in_flight_per_worker={in_flight_per_worker!r} applies to the open loop; a closed loop's "
                           "virtual user holds one request at a time: drop it", id="in_flight_per_worker.closed-loop")
            share_ok = check.instance("share", share, planning.RatePlan,
                                      "the plan quota.share(...) returns", optional=True) and share is not None
            if share_ok and loop_ok:
                # with ledger= and a share drawn with burst_tpm, the run may borrow up to the burst's calls
                self._check_share(check, cast(planning.RatePlan, QuotaLedger.burst_plan(ledger, share)), concurrency,
                                  rate_per_minute, call_seconds)
            consumer = self._check_ledger(check, ledger, model, share if share_ok else None)
            if consumer is not None and profile_ok and (max_tokens is None or (
                    type(max_tokens) is int and 1 <= max_tokens <= profile.max_tokens)):  # else refused above
                self._check_hold(check, cast(QuotaLedger, ledger), cast(planning.TokenProfile, profile), max_tokens)
            if check.duration("admission_timeout", patience, minimum=cdk.Duration.minutes(1),
                              maximum=MAX_ADMISSION_TIMEOUT,
                              fix="how long a user the ledger admits nothing keeps asking, e.g. cdk.Duration.minutes(15)"):
                check.rule(ledger is not None or admission_timeout is _ADMISSION_TIMEOUT,
                           "admission_timeout applies with ledger= (how long a user the quota ledger admits nothing "
                           "waits); without a ledger no request waits for admission: drop it, or pass ledger=",
                           id="admission_timeout.without-ledger")
            check.duration("stop_check_interval", stop_check_interval, minimum=cdk.Duration.seconds(0),
                           maximum=cdk.Duration.seconds(MAX_LAMBDA_SECONDS), optional=True,
                           fix="how often a replay call asks whether its run was stopped, e.g. cdk.Duration.seconds(30)")
            targets = self._check_targets(check, api, ttft_target=ttft_target, otps_target=otps_target,
                                          e2e_target=e2e_target)
            budget_ok = check.duration("call_budget", budget, minimum=cdk.Duration.seconds(10),
                                       maximum=cdk.Duration.seconds(MAX_LAMBDA_SECONDS - 60),
                                       fix=f"one request's longest time, retries included; a Lambda call runs at most "
                                       f"{MAX_LAMBDA_SECONDS // 60} minutes")
            if (check.duration("start_lead", lead, minimum=cdk.Duration.seconds(0), maximum=MAX_START_LEAD,
                               fix="how far ahead of the plan the run starts, e.g. cdk.Duration.seconds(5)")
                    and budget_ok):
                # A worker's first call waits the lead, then starts a request only with call_budget + WRITE_SECONDS
                # left: past MAX_LAMBDA_SECONDS no first call could, and each would return at once to be called again.
                first = lead.to_seconds(integral=False) + budget.to_seconds(integral=False) + WRITE_SECONDS
                check.rule(first <= MAX_LAMBDA_SECONDS,
                           f"start_lead={lead.to_human_string()} + call_budget={budget.to_human_string()} + "
                           f"{WRITE_SECONDS} s to write the records is {first:g} s, above the {MAX_LAMBDA_SECONDS} s one "
                           "Lambda call runs: no worker's first call could start a request; shorten start_lead or "
                           "call_budget", id="start_lead.above-call")
            results_ok = check.instance("results_bucket", results_bucket, s3.IBucket,
                                        "an s3.Bucket (or s3.Bucket.from_bucket_name)", optional=True)
            check.instance("access_logs_bucket", access_logs_bucket, s3.IBucket,
                           "an s3.Bucket (or s3.Bucket.from_bucket_name)", optional=True)
            prompts_kms = bucket_key(check, bucket_name="prompts_bucket", bucket=prompts_bucket,
                                     key_name="prompts_bucket_key", key=prompts_bucket_key)
            results_kms = bucket_key(
                check, bucket_name="results_bucket", bucket=results_bucket, key_name="results_bucket_key",
                key=results_bucket_key,
                without="results_bucket_key is set without results_bucket; the results bucket this construct creates "
                "is encrypted with encryption_key: pass results_bucket too, or use encryption_key")
            check.instance("encryption_key", encryption_key, kms.IKey, "a kms.Key", optional=True)
            check.instance("encryption_key_for_logs", encryption_key_for_logs, kms.IKey, "a kms.Key", optional=True)
            check.instance("log_retention", log_retention, logs.RetentionDays, "a logs.RetentionDays", optional=True)
            if results_ok:  # a results_bucket of another type is refused above, once
                for name, value in (("encryption_key", encryption_key), ("access_logs_bucket", access_logs_bucket)):
                    check.rule(value is None, f"{name} configures the results bucket this construct creates, but "
                               "results_bucket is yours, so it would be ignored: set it on your bucket instead", id=f"{name}.ignored-with-results-bucket")
                check.rule(expiry is None or isinstance(results_bucket, s3.Bucket),
                           "retention expires the results prefix with a lifecycle rule, which this stack cannot add to "
                           "an imported results_bucket: pass retention=None and expire the prefix in your bucket's own "
                           "lifecycle, or pass an s3.Bucket of this app", id="retention.imported-bucket")
            if expiry is not None and check.duration("retention", expiry, minimum=cdk.Duration.days(1),
                                                     fix="S3 expires objects in whole days; None keeps them"):
                check.rule(expiry.to_seconds() % 86_400 == 0,
                           f"retention={expiry.to_hours():g} hours is not whole days (S3 lifecycle ExpirationInDays): "
                           "use cdk.Duration.days(...)", id="retention.whole-days")
            if check.text("results_prefix", results_prefix):
                check.rule(results_prefix.endswith("/") and not results_prefix.startswith("/")
                           and set(results_prefix) <= _PREFIX_CHARS and "//" not in results_prefix,
                           f"results_prefix={results_prefix!r} must end with '/' and hold letters, digits and "
                           "!-_.*'() between single slashes, e.g. 'load-replay/'", id="results_prefix.pattern")
            if check.instance("state_machine_options", state_machine_options, StateMachineOptions,
                              "StateMachineOptions(...)", optional=True) and state_machine_options is not None:
                check.rule(state_machine_options.state_machine_type != sfn.StateMachineType.EXPRESS,
                           "state_machine_options.state_machine_type=EXPRESS runs at most 5 minutes, and a run's "
                           "workers continue over 15-minute calls: use STANDARD (the default)", id="state_machine_options.express-replay")
            check.raise_if_any()
            profile = cast(planning.TokenProfile, profile) if profile_ok else profile
        if share is not None:
            self.concurrency_plan = share  # how ModelQuota tells which construct holds which share
        #: The quota the report's tpm.quota (and its percentages) is read against: the ledger's, or the
        #: ModelQuota the share was drawn from.
        quota = ledger.quota if ledger is not None else _quota_of(self, share)
        self.tpm_quota: float | None = quota.tpm_quota if quota is not None else None
        seconds = float(call_seconds if call_seconds is not None else (share.call_seconds if share else DEFAULT_CALL_SECONDS))
        if closed:
            self.workers = int(cast(int, concurrency))
            in_flight = 1
            rate = self.workers * 60 / seconds
        else:
            rate = float(cast(float, rate_per_minute))
            in_flight = in_flight_per_worker
            self.workers = workers or max(1, math.ceil(rate / 60 * seconds / in_flight))
        self.results_prefix = results_prefix
        self.reserved_tpm = rate * profile.reserved
        self.estimated_cost_usd = (
            None if input_price_per_million is None or output_price_per_million is None
            else (requests + warmup) * ((profile.input_tokens + profile.cache_write_tokens) * input_price_per_million
                                        + profile.output_tokens * output_price_per_million) / 1_000_000)
        # The function's own time: a closed-loop user's call lasts its requests back to back; an open-loop
        # worker's lasts the whole schedule and its last answer; each worker first waits the start lead.
        lead_s = lead.to_seconds(integral=False)
        self.function_seconds = (
            (requests + warmup) * seconds + self.workers * lead_s if closed
            else self.workers * ((requests + warmup) / rate * 60 + seconds + lead_s))

        # ---- the results bucket ---------------------------------------------------------------------
        if results_bucket is None:
            results_bucket = data_bucket(
                self, "Results", key=encryption_key,
                access_logs=access_logs_bucket or new_access_logs_bucket(self, logged="the results bucket's"))
            results_kms = results_bucket.encryption_key
        if expiry is not None:
            cast(s3.Bucket, results_bucket).add_lifecycle_rule(
                id=f"ExpireLoadReplay{cdk.Names.unique_id(self)[-12:]}", prefix=results_prefix, expiration=expiry,
                abort_incomplete_multipart_upload_after=cdk.Duration.days(1))
        self.results_bucket = results_bucket

        # ---- the function ---------------------------------------------------------------------------
        config = replay_module().BenchConfig(
            model_id=model.model_id, requests=requests, concurrency=concurrency, rate_per_minute=rate_per_minute,
            streaming=api == "ConverseStream", warmup=warmup, max_tokens=max_tokens, model_max_tokens=profile.max_tokens,
            latency=latency, burndown=profile.burndown, seed=seed, answer_hint=False, tpm_quota=self.tpm_quota,
            **targets)
        settings = {
            "config": asdict(config),
            "prompts_bucket": prompts_bucket.bucket_name, "prompts_key": prompts_key,
            "results_bucket": results_bucket.bucket_name, "results_prefix": results_prefix,
            "workers": self.workers, "in_flight": in_flight, "call_budget_s": budget.to_seconds(),
            "request_cap": request_cap, "start_lead_s": lead.to_seconds(integral=False),
            "admission_timeout_s": patience.to_seconds(integral=False),
            "stop_check_s": None if stop_check_interval is None else stop_check_interval.to_seconds(integral=False),
        }
        log_encryption = log_key(self, "LogsKey", encryption_key_for_logs)
        self.function = handler_function(
            self, "Replay", handler="load_replay.handler.handler", timeout=cdk.Duration.seconds(MAX_LAMBDA_SECONDS),
            memory_size=REPLAY_MEMORY_MB, environment={"LOAD_REPLAY": cdk.Stack.of(self).to_json_string(settings)},
            encryption_key=log_encryption, log_retention=log_retention,
        )
        model.grant_invoke(self.function, streaming=api == "ConverseStream")
        self.function.add_to_role_policy(iam.PolicyStatement(
            actions=["s3:GetObject"], resources=[prompts_bucket.arn_for_objects(prompts_key)]))
        self.function.add_to_role_policy(iam.PolicyStatement(
            actions=["s3:GetObject", "s3:PutObject"], resources=[results_bucket.arn_for_objects(f"{results_prefix}*")]))
        self.function.add_to_role_policy(iam.PolicyStatement(
            actions=["s3:ListBucket"], resources=[results_bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [f"{results_prefix}*"]}}))
        grant_keys(self.function, (prompts_kms, KMS_READ_ACTIONS), (results_kms, KMS_WRITE_ACTIONS))
        self.ledger = ledger
        self.ledger_consumer: str | None = None
        self.ledger_floor_tpm: float | None = None
        if ledger is not None and consumer is not None:
            # The quota's own wiring for a process consumer: its variables (the share's static TPM, the
            # pacer's fallback, and GENAI_PACER_LEDGER_*) and UpdateItem/GetItem on its item only.
            for variable, setting in ledger.environment(consumer).items():
                self.function.add_environment(variable, setting)
            ledger.grant_use(self.function)
            self.ledger_consumer, self.ledger_floor_tpm = consumer, ledger.quota.shares[consumer].tpm

        # ---- the state machine ------------------------------------------------------------------------
        options = state_machine_options or StateMachineOptions()
        if options.log_group is None and options.encryption_key is None:
            options = StateMachineOptions(**{**options.__dict__, "encryption_key": log_encryption})
        self.state_machine = model_state_machine(
            self, definition=self._definition(), models=[], options=options, default_timeout=cdk.Duration.hours(24))
        # The replay calls ask whether their run was stopped: DescribeExecution on this state machine's executions.
        # A policy of its own, not the function's default one: the state machine depends on the function, so the
        # function may not depend on the state machine's name (a dependency cycle); nothing depends on this one.
        self._stop_check_policy = iam.Policy(self, "StopCheckPolicy", roles=[cast(iam.IRole, self.function.role)],
                                             statements=[iam.PolicyStatement(actions=["states:DescribeExecution"],
                                                                             resources=[f"{self._executions()}:*"])])
        self._acknowledge(results_bucket, results_prefix)
        self._annotate(rate, seconds, closed, profile, requests + warmup)

    # ---- definition ----------------------------------------------------------------------------------

    def _definition(self) -> sfn.IChainable:
        plan = tasks.LambdaInvoke(
            self, "Plan", lambda_function=self.function,
            payload=sfn.TaskInput.from_object({"action": "plan", "run": sfn.JsonPath.string_at("$$.Execution.Name"),
                                               "execution": sfn.JsonPath.string_at("$$.Execution.Id")}),
            result_selector={"run.$": "$.Payload.run", "workers.$": "$.Payload.workers"},
            result_path="$.plan",
        )
        replay = tasks.LambdaInvoke(
            self, "Replay share", lambda_function=self.function,
            payload=sfn.TaskInput.from_json_path_at("$"), output_path="$.Payload",
        )
        done = sfn.Choice(self, "Share done?").when(
            sfn.Condition.boolean_equals("$.done", True),
            sfn.Pass(self, "Worker done", parameters={"worker.$": "$.worker"}),
        ).otherwise(replay)
        workers = sfn.DistributedMap(
            self, "Workers",
            items_path="$.plan.workers",
            item_selector={
                "action": "replay", "worker": sfn.JsonPath.number_at("$$.Map.Item.Value"), "cursor": 0, "part": 0,
                "run": sfn.JsonPath.object_at("$.plan.run"),
            },
            max_concurrency=self.workers,
            map_execution_type=sfn.StateMachineType.STANDARD,
            result_path=sfn.JsonPath.DISCARD,
        )
        workers.item_processor(replay.next(done))
        summarize = tasks.LambdaInvoke(
            self, "Summarize", lambda_function=self.function,
            payload=sfn.TaskInput.from_object({"action": "summarize", "run": sfn.JsonPath.object_at("$.plan.run")}),
            result_selector={"report.$": "$.Payload"}, result_path="$.summary",
        )
        workers.add_catch(summarize, errors=["States.ALL"], result_path="$.failure")
        outcome = sfn.Choice(self, "Complete?").when(
            sfn.Condition.is_present("$.failure"),
            sfn.Fail(self, "Replay incomplete", error="LoadReplay.WorkerFailed",
                     cause="a worker failed: the report covers the requests recorded before it did, and its "
                           "summary's 'incomplete' names a worker that gave up and why (else read the Workers Map "
                           "Run's failed child execution for the error)"),
        ).otherwise(sfn.Succeed(self, "Replayed"))
        return plan.next(workers).next(summarize).next(outcome)

    # ---- checks ----------------------------------------------------------------------------------------

    @staticmethod
    def _refuse_tokens(check: Checks, values: dict[str, Any]) -> None:
        """The run's settings are one JSON document the function reads, computed at synth (the
        workers, the Map's cap, the share check and the annotations use them): a deploy-time value
        cannot be one of them."""
        for name, value in values.items():
            kind = token_kind(value)
            if kind is not None:  # the one problem of this prop: its own checks below say nothing more
                check.refuse(name, f"{name} is a deploy-time {kind}, but the replay's settings are computed at synth "
                             "(the workers, the Map's cap, the share check, the cost annotation): pass the value itself",
                             id=f"{name}.replay-setting-deploy-time")

    @staticmethod
    def _check_ledger(check: Checks, ledger: Any, model: Any, share: planning.RatePlan | None) -> str | None:
        """The run's name in the ledger: the share it holds of the ledger's quota, its floor. A run without a
        share would only borrow, and a benchmark that only borrows measures whatever the others leave: refused."""
        if QuotaLedger.of_model(check, ledger, model, consumer="this run") is None:
            return None
        quota = ledger.quota
        name = QuotaLedger.share_name(quota, share)
        if name is None:
            check.fail(
                f"ledger= needs share= drawn from ModelQuota {quota.node.id} (the ledger's quota): the share is the "
                "run's floor in the ledger, what it may hold whatever others do; pass share=quota.share('LoadReplay', "
                "profile, call_seconds=..., fraction=...)" + (" (the share given is another quota's)" if share else ""),
                id="ledger.replay-no-share")
            return None
        if not check.rule("#" not in name and len(name) <= _CONSUMER_LIMIT,
                          f"ledger: the share {name!r} names the run in the ledger's attribute names, which allow at "
                          f"most {_CONSUMER_LIMIT} characters and no '#'; draw the share under such a name",
                          id="ledger.replay-share-name"):
            return None
        return name

    def _check_hold(self, check: Checks, ledger: QuotaLedger, profile: planning.TokenProfile, max_tokens: int | None) -> None:
        """Each request holds its prompt + max_tokens x burndown in the ledger before it is sent; the run's
        burst cap there is the ledger's allocatable quota (ledger.environment sets no smaller one), and its day
        the ledger's daily_tokens; once the app is complete, what the shares held outside the ledger leave of
        both (QuotaLedger.note_reservation). A request holding more than either could never be admitted: every
        one would fail the worker (SharedLedger refuses it)."""
        prompt = profile.input_tokens + profile.cache_write_tokens + profile.cache_read_tokens
        sent = max_tokens if max_tokens is not None else profile.max_tokens
        hold, burst = ledger.hold(prompt, sent), ledger.quota_tpm
        check.rule(hold <= burst,
                   f"ledger: each request holds {hold:,} tokens in the ledger (the profile's prompt {prompt:,} + "
                   f"max_tokens={sent:,} x burndown {ledger.quota.burndown:g}), more than the run may hold there "
                   f"({burst:,.0f} TPM, ModelQuota {ledger.quota.node.id}'s allocatable quota): no request could ever "
                   "be admitted; lower max_tokens (or the profile's), or raise the quota", id="ledger.hold-above-burst")
        # The day likewise (QuotaLedger.daily_tokens): SharedLedger refuses a reservation above it, as the state
        # machines' ledger steps are refused at synth (step_functions.ledger_steps, request.reservation-above-daily).
        check.rule(hold <= ledger.daily_tokens,
                   f"ledger: each request holds {hold:,} tokens in the ledger (the profile's prompt {prompt:,} + "
                   f"max_tokens={sent:,} x burndown {ledger.quota.burndown:g}), more than the ledger's whole day "
                   f"({ledger.daily_tokens:,} tokens: ModelQuota {ledger.quota.node.id}'s daily_token_quota x "
                   "(1 - keep_free)): no request could ever be admitted; lower max_tokens (or the profile's), or raise "
                   "daily_token_quota", id="ledger.hold-above-daily")
        # and, once the app is complete, against what the shares held outside the ledger leave its consumers
        ledger.note_reservation(f"the run of LoadReplay {self.node.path}", hold)

    @staticmethod
    def _check_targets(check: Checks, api: Any, **targets: Any) -> dict[str, float | None]:
        """The goodput targets as the report's BenchConfig takes them (seconds; output tokens a second).
        TTFT and OTPS are measured from the stream only: with api="Converse" no request could meet them."""
        given = {name: value for name, value in targets.items() if token_kind(value) is None}  # tokens: refused above
        for name in ("ttft_target", "e2e_target"):
            check.duration(name, given.get(name), minimum=cdk.Duration.millis(1),
                           maximum=cdk.Duration.seconds(MAX_LAMBDA_SECONDS), optional=True,
                           fix=f"goodput: {name.split('_')[0].upper()} at most this long, e.g. cdk.Duration.millis(800)")
        check.number("otps_target", given.get("otps_target"), above=0, maximum=100_000, optional=True,
                     fix="goodput: at least this many output tokens a second, e.g. 40")
        if api == "Converse":
            for name in ("ttft_target", "otps_target"):
                check.rule(targets[name] is None,
                           f"{name} needs api='ConverseStream': Converse returns the answer whole, so no time to first "
                           "token or output rate is measured and no request could meet it; stream, or drop it",
                           id=f"{name}.not-streaming")

        def seconds(value: Any) -> float | None:
            ok = isinstance(value, cdk.Duration) and not value.is_unresolved()
            return value.to_milliseconds(integral=False) / 1000 if ok else None

        otps = targets["otps_target"]
        return {"ttft_target_s": seconds(targets["ttft_target"]), "e2e_target_s": seconds(targets["e2e_target"]),
                "otps_target": float(otps) if isinstance(otps, int | float) and not isinstance(otps, bool) else None}

    @staticmethod
    def _check_share(check: Checks, share: planning.RatePlan, concurrency: int | None, rate: float | None,
                     call_seconds: float | None) -> None:
        if concurrency is not None:
            if check.rule(concurrency <= share.max_concurrency,
                          f"concurrency={concurrency:,} is above the {share.max_concurrency:,} calls in flight the share "
                          f"sustains ({share.requests_per_minute:,.1f} requests a minute at {share.call_seconds:g} s a call): "
                          "lower concurrency, or draw a larger share", id="concurrency.above-share") \
                    and isinstance(call_seconds, (int, float)) and call_seconds > 0:
                # The share's calls in flight hold its rate only at its own call_seconds: shorter calls send more.
                sent = concurrency * 60 / call_seconds
                check.rule(sent <= share.requests_per_minute + 1e-9,
                           f"concurrency={concurrency:,} at call_seconds={call_seconds:g} is {sent:,.0f} requests a minute, "
                           f"above the {share.requests_per_minute:,.1f} the share sustains (drawn at {share.call_seconds:g} s "
                           f"a call): lower concurrency, or draw the share with call_seconds={call_seconds:g}",
                           id="call_seconds.above-share")
        elif rate is not None:
            check.rule(rate <= share.requests_per_minute + 1e-9,
                       f"rate_per_minute={rate:,g} is above the {share.requests_per_minute:,.1f} requests a minute the "
                       "share sustains: lower rate_per_minute, or draw a larger share", id="rate_per_minute.above-share")

    # ---- resources ------------------------------------------------------------------------------------

    def _acknowledge(self, results_bucket: s3.IBucket, results_prefix: str) -> None:
        """Exactly this construct's own wildcards: the results prefix (record keys are generated per run,
        worker and call), the function's versions (aws-cdk-lib's LambdaInvoke) and the Distributed Map's
        child executions (names Step Functions generates)."""
        role = cast(iam.IRole, self.function.role)  # handler_function gives every function a role
        acknowledge_exact_resources(
            cast(Construct, role.node.find_child("DefaultPolicy")),
            resources=[flattened(self, results_bucket.arn_for_objects(f"{results_prefix}*"))],
            reason="a run's records and report, whose keys are generated per run, worker and call, under the results "
            "prefix only",
        )
        policy = principal_policy(self.state_machine.role)
        if policy is not None:
            acknowledge_exact_resources(
                policy, resources=[flattened(self, f"{self.function.function_arn}:*")],
                reason="aws-cdk-lib's LambdaInvoke grants the function's versions and aliases (<function arn>:*) beside "
                "the function; only this construct's own function is granted",
            )
        executions = self._executions()
        acknowledge_exact_resources(
            self._stop_check_policy, resources=[flattened(self, f"{executions}:*")],
            reason="a replay call asks whether its own run was stopped (DescribeExecution); the run's execution name "
            "is the user's, so the grant is on this state machine's executions",
        )
        child_policy = self.state_machine.node.try_find_child("DistributedMapPolicy")
        if child_policy is not None:
            acknowledge_exact_resources(
                child_policy,
                resources=[flattened(self, f"{executions}:*"), flattened(self, f"{executions}/*:*")],
                reason="a distributed Map starts, describes and stops child executions whose names Step Functions "
                "generates; the grant is scoped to this state machine's executions",
            )

    def _executions(self) -> str:
        """arn:...:states:<region>:<account>:execution:<this state machine's name> (an execution's ARN less ':<name>')."""
        return cdk.Stack.of(self).format_arn(
            service="states", resource="execution", arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
            resource_name=cdk.Arn.split(self.state_machine.state_machine_arn, cdk.ArnFormat.COLON_RESOURCE_NAME).resource_name,
        )

    def _annotate(self, rate: float, seconds: float, closed: bool, profile: planning.TokenProfile, total: int) -> None:
        how = (f"{self.workers:,} virtual users at about {seconds:g} s a call (call_seconds) is about {rate:,.1f} "
               "requests a minute" if closed else f"{rate:,g} requests a minute")
        cost = ("" if self.estimated_cost_usd is None else
                f"; {total:,} requests (warm-up included) cost roughly ${self.estimated_cost_usd:,.2f} at the given prices "
                f"({profile.input_tokens + profile.cache_write_tokens:,} input and {profile.output_tokens:,} output tokens "
                "a request, from the profile)")
        cdk.Annotations.of(self).add_info(
            f"LoadReplay {self.node.id}: {how}, which reserves about {self.reserved_tpm:,.0f} tokens a minute of the "
            f"model's quota while it runs ({profile.reserved:,} a request: input + max_tokens, the profile's){cost}; "
            f"the replay function itself runs about {self.function_seconds:,.0f} s at {REPLAY_MEMORY_MB:,} MB "
            f"({'the requests back to back at call_seconds' if closed else 'each worker for the whole schedule'}, "
            f"and each worker's start_lead), not priced here (no Lambda price is built in: {LAMBDA_PRICING})",
        )


def _quota_of(scope: Construct, share: planning.RatePlan | None) -> ModelQuota | None:
    """The ModelQuota of this app that drew `share` (plans are known by identity), if any."""
    if share is None:
        return None
    return next((q for q in _QUOTAS.get(scope.node.root, []) if id(share) in q._issued), None)
