"""One model quota shared at run time: a QuotaLedger whose consumers are a function pacing its calls with
QuotaPacer, a QueuedInference worker and a BoundedMap, each with a guaranteed floor and a burst cap.

Without a ledger each share is a wall: what one consumer leaves idle, the others cannot use. With it,
each share is a floor its consumer always gets back, and above it the consumer borrows what the
others leave, up to its burst cap (docs/quota.md, "One quota across processes").

The app's other consumers (the orchestration, queue, pre-computation and experiment stacks) take no
part in this ledger: the ledger sees none of their holds, so at synth it leaves their shares' TPM free
(QuotaLedger.shared_tpm: the allocatable quota less the shares held outside every ledger, written into
each consumer's GENAI_PACER_LEDGER_QUOTA_TPM and the Map's reservation). This stack sizes its consumers
from what the others leave: the floors are half of it, the burst caps add up to all of it. (The burst
caps may add up to more: the ledger decides how much of each runs at any moment.)
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from genai_pacer import (
    BoundedMap,
    ConverseRequest,
    ModelQuota,
    QueuedInference,
    QuotaLedger,
    RuntimeLayer,
    planning,
)

from constructs import Construct

from .settings import ReferenceSettings

#: How the room the app's other consumers leave is split: each consumer's floor and burst cap, as a
#: fraction of that room. The floors add up to about half of it (the plan stays under its warning
#: threshold); the bursts add up to all of it.
FLOORS = {"Assistant": 0.25, "TicketTriage": 0.15, "NightlyBackfill": 0.12}
BURSTS = {"Assistant": 0.4, "TicketTriage": 0.35, "NightlyBackfill": 0.25}
CALL_SECONDS = 6

#: The assistant's handler: QuotaPacer.from_environment() reads the quota's and the ledger's variables
#: (GENAI_PACER_*, GENAI_PACER_LEDGER_*), so each call waits until the shared ledger holds its reservation,
#: settles there with its real usage, and falls back to this process's part of the floor if DynamoDB
#: cannot be reached.
ASSISTANT_HANDLER = """\
import os

from pacer_runtime import QuotaPacer, bedrock_client, build_converse_request, call_with_backoff

pacer = QuotaPacer.from_environment()
bedrock = bedrock_client(max_attempts=1)  # retried below instead, each attempt admitted by the ledger again


def handler(event, context):
    request = build_converse_request(os.environ["MODEL_ID"], prompt=event["question"],
                                     inference_config={"maxTokens": int(os.environ["MAX_TOKENS"])})
    outcome = call_with_backoff(lambda: pacer.converse(bedrock, request))
    if outcome.error is not None:
        raise outcome.error
    return {"answer": outcome.value.text}
"""


class SharedQuotaStack(cdk.Stack):
    """quota: the app's ModelQuota for the model; build this stack after every other stack that draws a
    share, since it splits what they leave (ValueError when they leave nothing)."""

    def __init__(self, scope: Construct, id: str, *, quota: ModelQuota, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        settings = ReferenceSettings.from_context(self)
        outside = sum(share.tpm for share in quota.shares.values())  # every share drawn so far: none in the ledger
        self.room = room = quota.allocatable_tpm - outside
        if room < 0.05 * quota.allocatable_tpm:
            raise ValueError(f"SharedQuotaStack: the app's other shares leave {room:,.0f} of the quota's "
                             f"{quota.allocatable_tpm:,.0f} allocatable TPM; raise the context's tpm_quota")
        profile = quota.profile(input_tokens=2_500, output_tokens=300, max_tokens=planning.size_max_tokens(400).max_tokens)

        def share(name: str, **options) -> planning.RatePlan:
            return quota.share(name, profile, tpm=round(FLOORS[name] * room), burst_tpm=round(BURSTS[name] * room),
                               call_seconds=CALL_SECONDS, **options)

        # The assistant's function makes one call at a time per process, and each process falls back to its
        # part of the floor (floor / processes) when DynamoDB cannot be reached, which must sustain one call:
        # so it runs the processes its floor sustains (its reserved concurrency), and its burst cap lets them
        # draw beyond the floor when calls are shorter than the CALL_SECONDS planned.
        processes = planning.sustainable_rate(profile, tpm_quota=round(FLOORS["Assistant"] * room),
                                              call_seconds=CALL_SECONDS).max_concurrency
        # A user waits on the assistant: under contention it is served before the others borrow the room
        # (the worker and the Map take part as batch; floors are kept whatever the priorities).
        share("Assistant", executions=processes, priority="interactive")
        triage = share("TicketTriage")
        backfill = share("NightlyBackfill")
        self.ledger = ledger = QuotaLedger(self, "Ledger", quota=quota)  # on demand, encrypted, TTL, PITR

        # A QuotaPacer in your own function: the share is held by name (the construct around the function and
        # its role is named after it), capped by the function's reserved concurrency, and takes part through
        # grant_use and environment(share).
        assistant = Construct(self, "Assistant")
        logs_group = logs.LogGroup(assistant, "Logs", retention=logs.RetentionDays.ONE_MONTH,
                                   removal_policy=cdk.RemovalPolicy.DESTROY)
        role = iam.Role(assistant, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                        description="the assistant: writes its logs, calls the model, holds its share in the ledger")
        logs_group.grant_write(role)  # an explicit role: the default one would attach a managed policy (cdk-nag IAM4)
        self.assistant = lambda_.Function(
            assistant, "Function",
            runtime=lambda_.Runtime.PYTHON_3_14, architecture=lambda_.Architecture.ARM_64,
            handler="index.handler", code=lambda_.Code.from_inline(ASSISTANT_HANDLER),
            layers=[RuntimeLayer(assistant, "PacerRuntime", compatible_architectures=[lambda_.Architecture.ARM_64])],
            role=role, log_group=logs_group, timeout=cdk.Duration.seconds(60),
            reserved_concurrent_executions=processes,
            # the floor, the burst cap, the table (GENAI_PACER_LEDGER_*) and the fallback (GENAI_PACER_TPM)
            environment={**ledger.environment("Assistant"), "MODEL_ID": settings.model.model_id,
                         "MAX_TOKENS": str(profile.max_tokens)},
        )
        ledger.grant_use(self.assistant)  # UpdateItem and GetItem on this quota's item only
        settings.model.grant_invoke(self.assistant)

        # A queue worker: a message the ledger refuses waits in the queue, not in a throttle.
        self.triage = QueuedInference(
            self, "TicketTriage", model=settings.model, max_concurrency=triage, max_output_tokens=profile.max_tokens,
            ledger=ledger,
        )
        # A Map: each item's call reserves and settles in the same item through DynamoDB tasks (no Lambda per
        # call); its MaxConcurrency is the calls its burst sustains, the ledger decides how many run at once.
        self.backfill = BoundedMap(
            self, "NightlyBackfill", max_concurrency=backfill, model=settings.model, ledger=ledger,
            request=ConverseRequest(prompt=sfn.JsonPath.format("Tag this support ticket: {}",
                                                               sfn.JsonPath.string_at("$.ticket")),
                                    max_tokens=profile.max_tokens),
            items_path="$.tickets",
        )
        cdk.CfnOutput(self, "LedgerTable", value=ledger.table.table_name)
        cdk.CfnOutput(self, "AssistantFunction", value=self.assistant.function_name)
        cdk.CfnOutput(self, "TriageQueueUrl", value=self.triage.queue.queue_url)
