"""Every grant_* method the library offers leaves the caller's role clean under cdk-nag AwsSolutions, with
no acknowledgment on that role (issue 34.10: AnswerRouter.grant_invoke gave the caller aws-cdk-lib's
"<function arn>:*" and so an AwsSolutions-IAM5 finding the user had to acknowledge themselves).

One app holds every construct with a grant; each grant goes to a role of the user's own; the app is
synthesized once with AwsSolutions registered, and each role's findings are read from the validation
report. A coverage test fails when a construct gains a grant_* method this table does not exercise.
"""

from __future__ import annotations

import contextlib
import inspect
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import genai_pacer
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_stepfunctions as sfn
from conftest import nag_violations
from genai_pacer import (
    AnswerRouter,
    AnswerStore,
    BedrockModel,
    ConverseRequest,
    LlmEndpoint,
    ModelQuota,
    ParallelPrompts,
    QueuedInference,
    QuotaLedger,
    StateMachineOptions,
    SyncExecutionUrl,
)
from genai_pacer.experiments.prompt_experiment import ExperimentVariant, PromptExperiment, TextPrompt

REGION = "us-east-1"
NOVA = BedrockModel.from_id("amazon.nova-lite-v1:0")
PROFILE = BedrockModel.from_id("us.amazon.nova-lite-v1:0")
TGI = "763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-tgi-inference:2.7.0-tgi3.3.6-gpu-py311-cu124-ubuntu22.04"


def _constructs(stack: cdk.Stack) -> dict[str, Any]:
    store = AnswerStore(stack, "Store")
    request = ConverseRequest(prompt="hi", max_tokens=10)
    express = ParallelPrompts(stack, "Prompts", model=NOVA, prompts={"A": request, "B": request},
                              state_machine_options=StateMachineOptions(state_machine_type=sfn.StateMachineType.EXPRESS))
    return {
        "store": store,
        "router": AnswerRouter(stack, "Router", answer_store=store, model=NOVA),
        "queue": QueuedInference(stack, "Queue", model=NOVA, max_concurrency=2),
        "url": SyncExecutionUrl(stack, "Url", state_machine=express.state_machine),
        "experiment": PromptExperiment(stack, "Exp", variants=[
            ExperimentVariant("control", NOVA, 90, TextPrompt("Answer: {{question}}")),
            ExperimentVariant("treatment", PROFILE, 10, TextPrompt("Answer briefly: {{question}}")),
        ]),
        "endpoint": LlmEndpoint(stack, "Llm", instance_type="ml.g5.2xlarge", image_uri=TGI, model_data_key="llama/",
                                model_data_bucket=s3.Bucket.from_bucket_name(stack, "Models", "my-models")),
        "model": NOVA,
        "profile": PROFILE,
        "ledger": QuotaLedger(stack, "Ledger", quota=ModelQuota(stack, "Quota", model=NOVA, tpm_quota=400_000),
                              encryption_key=kms.Key(stack, "LedgerKey", enable_key_rotation=True)),
    }


#: (construct, method, keyword arguments): every grant the library offers, each to its own caller role.
GRANTS: list[tuple[str, str, dict[str, Any]]] = [
    ("store", "grant_read", {}),
    ("store", "grant_put", {}),
    ("store", "grant_write", {}),
    ("router", "grant_invoke", {}),
    ("router", "grant_invoke_url", {}),
    ("queue", "grant_send_messages", {}),
    ("url", "grant_invoke_url", {}),
    ("experiment", "grant_evaluate", {}),
    ("experiment", "grant_evaluate", {"streaming": True}),
    ("endpoint", "grant_invoke", {}),
    ("model", "grant_invoke", {}),
    ("model", "grant_invoke", {"streaming": True}),
    ("profile", "grant_invoke", {}),
    ("ledger", "grant_use", {}),
    ("ledger", "grant_read", {}),
]
#: The classes each table key stands for (the coverage test walks their grant_* methods).
CLASSES = {"store": AnswerStore, "router": AnswerRouter, "queue": QueuedInference, "url": SyncExecutionUrl,
           "experiment": PromptExperiment, "endpoint": LlmEndpoint, "model": BedrockModel, "ledger": QuotaLedger}


def _role_id(index: int, construct: str, method: str) -> str:
    return f"Caller{index}{construct.title()}{method.title().replace('_', '')}"


@pytest.fixture(scope="module")
def findings() -> list[str]:
    from cdk_nag import AwsSolutionsChecks

    outdir = Path(tempfile.mkdtemp())
    app = cdk.App(outdir=str(outdir))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    stack = cdk.Stack(app, "Grants", env=cdk.Environment(account="123456789012", region=REGION))
    made = _constructs(stack)
    for index, (construct, method, kwargs) in enumerate(GRANTS):
        role = iam.Role(stack, _role_id(index, construct, method), assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        grant: Callable[..., Any] = getattr(made[construct], method)
        grant(role, **kwargs)
    with contextlib.suppress(RuntimeError):  # nag findings fail the synth; the report says which
        app.synth()
    return nag_violations(outdir)


@pytest.mark.parametrize(("index", "case"), list(enumerate(GRANTS)), ids=[f"{c}.{m}{'+' if k else ''}" for c, m, k in GRANTS])
def test_a_grant_leaves_the_callers_role_clean_with_no_acknowledgment(findings, index, case):
    construct, method, _ = case
    role_path = f"Grants/{_role_id(index, construct, method)}/"  # cdk-nag's construct paths have no leading "/"
    assert [f for f in findings if f.split(" at ", 1)[1].lstrip("/").startswith(role_path)] == []


def test_the_whole_app_is_clean(findings):
    """The library's own resources beside the grants are clean too, so a finding anywhere is news."""
    assert findings == []


def test_the_table_exercises_every_grant_method_the_library_offers():
    offered = set()
    for name in genai_pacer.__all__:
        cls = getattr(genai_pacer, name)
        if inspect.isclass(cls):
            offered |= {(cls, m) for m, _ in inspect.getmembers(cls, inspect.isfunction) if m.startswith("grant_")}
    exercised = {(CLASSES[c], m) for c, m, _ in GRANTS if c in CLASSES} | {(BedrockModel, "grant_invoke")}
    assert offered <= exercised, sorted(f"{cls.__name__}.{m}" for cls, m in offered - exercised)
