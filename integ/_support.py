"""What every integration test app shares: context defaults, the destroy-everything policy, synthesis.

Each `integ_<family>.py` defines `build_app(context=None, outdir=None) -> cdk.App` and synthesizes
it when run as a script (integ-runner runs `python3 integ/integ_<family>.py` from the repository
root). tests/test_integ.py imports the same function to synthesize every app in one process.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # integ-runner runs the file as a script: make `stacks` and `integ` importable
    sys.path.insert(0, str(ROOT))

import aws_cdk as cdk  # noqa: E402
from aws_cdk import aws_kms as kms  # noqa: E402
from aws_cdk import aws_s3 as s3  # noqa: E402
from aws_cdk.integ_tests_alpha import ExpectedResult  # noqa: E402
from genai_pacer import BedrockModel  # noqa: E402

from constructs import Construct, IConstruct  # noqa: E402
from stacks.orchestration_stack import secure_bucket  # noqa: E402

#: context key -> (default, meaning). `make integ INTEG_CONTEXT="-c integ_model_id=..."` overrides.
INTEG_CONTEXT_DEFAULTS: dict[str, tuple[str, str]] = {
    "integ_model_id": (
        "us.amazon.nova-micro-v1:0",
        "the model or inference profile every Bedrock test calls: Amazon Nova Micro, the cheapest "
        "text model with Converse (about $0.035 per million input and $0.14 per million output tokens)",
    ),
    "integ_model_max_tokens": (
        "5000",
        "the largest max_tokens the throttle burst may request of that model (Nova Micro v1: 5,000 "
        "in AWS's model card; a value above the model's maximum is a ValidationException, not a throttle)",
    ),
    "integ_throttle_requests": (
        "1000",
        "prompts in the throttle burst, 40 in flight: their reservations (input + max_tokens each) must "
        "exceed the account's tokens-per-minute quota for the model within a minute (1,000 x 5,000 = "
        "5,000,000 tokens; raise it if your quota is larger)",
    ),
    "integ_throttle_error": (
        "BedrockRuntime.ThrottlingException",
        "the error name the throttle test expects Step Functions to report; a different name fails "
        "the assertion and its message shows the name reported",
    ),
    "integ_endpoint_instance_type": (
        "ml.m5.large",
        "the endpoint-scaling test's instance: 2 vCPU, no GPU (about $0.115 per hour)",
    ),
    "integ_endpoint_image_uri": (
        "",
        "the CPU serving image; empty is the Hugging Face PyTorch inference CPU container in the Region",
    ),
}

#: The Hugging Face PyTorch inference CPU deep learning container (AWS account 763104351884 hosts
#: it in most commercial Regions). It serves the echo model's `code/inference.py`; no weights.
HF_CPU_ACCOUNT = "763104351884"
HF_CPU_REPOSITORY = "huggingface-pytorch-inference"
HF_CPU_TAG = "2.1.0-transformers4.37.0-cpu-py310-ubuntu22.04"


def setting(scope: Construct, key: str) -> str:
    """A context value of INTEG_CONTEXT_DEFAULTS, or its default."""
    value = scope.node.try_get_context(key)
    return str(value) if value is not None else INTEG_CONTEXT_DEFAULTS[key][0]


def int_setting(scope: Construct, key: str, *, minimum: int = 1) -> int:
    text = setting(scope, key)
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"context {key}={text!r} is not an integer; pass e.g. -c {key}={INTEG_CONTEXT_DEFAULTS[key][0]}") from None
    if value < minimum:
        raise ValueError(f"context {key}={value} is below {minimum}; pass e.g. -c {key}={INTEG_CONTEXT_DEFAULTS[key][0]}")
    return value


def model(scope: Construct) -> BedrockModel:
    return BedrockModel.from_id(setting(scope, "integ_model_id"))


def destroy_on_delete(stack: cdk.Stack) -> None:
    """Every resource of the stack is deleted with it: the library retains tables, queues, keys, buckets
    and log groups on purpose (a user's data), which in a test would pile up (and keys are billed monthly)."""
    cdk.RemovalPolicies.of(stack).destroy()


def scratch_bucket(scope: Construct, id: str) -> s3.Bucket:
    """The reference stacks' secure bucket, emptied and deleted with the test stack."""
    return secure_bucket(scope, id, removal_policy=cdk.RemovalPolicy.DESTROY, auto_delete_objects=True)


def grant_assertions_keys(calls: Sequence[Any], stack: cdk.Stack) -> None:
    """Let the assertions' providers use every KMS key of the stack: the library encrypts queues, tables
    and logs with its own keys, so sending a message or reading an item needs the key too. Both the
    provider that makes a call and the one a waiter polls with (wait_for_assertions) get it, once each."""
    arns = [key.key_arn for key in stack.node.find_all() if isinstance(key, kms.Key)]
    providers: dict[str, Any] = {}
    for call in calls:
        for provider in (call.provider, getattr(call, "waiter_provider", None)):
            if provider is not None:  # one singleton function serves many calls: key by its role
                role = json.dumps(cdk.Stack.of(provider).resolve(provider.handler_role_arn), sort_keys=True)
                providers.setdefault(role, provider)
    if arns:
        for provider in providers.values():
            provider.add_to_role_policy(
                {"Effect": "Allow", "Action": ["kms:Decrypt", "kms:GenerateDataKey"], "Resource": arns}
            )


def alarm_exists(assertions: Any, alarm_name: str) -> Any:
    """DescribeAlarms for one metric alarm, expecting it by name. One call per alarm, keeping only the
    name: the assertion handler returns the API response through CloudFormation, which takes at most
    4,096 bytes from a custom resource, and four or five alarm definitions are more than that."""
    # Not ExpectedResult.exact: the handler (integ-tests-alpha 2.275) does not decode its $Exact and
    # compares it as a literal object. A name CloudFormation generates (a token here) holds letters,
    # digits and hyphens only, so the anchored pattern matches it and nothing else; a literal is escaped.
    name = alarm_name if cdk.Token.is_unresolved(alarm_name) else re.escape(alarm_name)
    return assertions.aws_api_call("CloudWatch", "describeAlarms", {"AlarmNames": [alarm_name]}).assert_at_path(
        "MetricAlarms.0.AlarmName", ExpectedResult.string_like_regexp(f"^{name}$")
    )


def new_app(context: dict[str, Any] | None, outdir: str | None) -> cdk.App:
    """The app every test builds: no cdk-nag (the reference app's tests run it on the same constructs;
    the assertion framework's own functions would only add findings that are not ours)."""
    return cdk.App(context=context, outdir=outdir)


def retained_resources(template: dict[str, Any]) -> list[str]:
    """Logical ids of resources CloudFormation would keep after the stack is deleted."""
    return sorted(
        logical_id
        for logical_id, resource in template.get("Resources", {}).items()
        if resource.get("DeletionPolicy", "Delete") != "Delete"
        or resource.get("UpdateReplacePolicy", "Delete") != "Delete"
    )


__all__ = [
    "HF_CPU_ACCOUNT",
    "HF_CPU_REPOSITORY",
    "HF_CPU_TAG",
    "INTEG_CONTEXT_DEFAULTS",
    "IConstruct",
    "alarm_exists",
    "destroy_on_delete",
    "grant_assertions_keys",
    "int_setting",
    "model",
    "new_app",
    "retained_resources",
    "scratch_bucket",
    "setting",
]
