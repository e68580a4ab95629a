"""LlmEndpoint's weights-prefix grant under cdk-nag when the user's bucket lives in another stack (issue 23).

aws-cdk-lib turns the reference into Fn::ImportValue only at synth, and cdk-nag names the finding by
that import; the construct acknowledges the exact flattened ARN then, so its own prefix grant passes
while a user's wildcard on another prefix of the same bucket is still reported.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from genai_pacer import LlmEndpoint

IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-tgi-inference:2.7.0-tgi3.3.6-gpu-py311-cu124-ubuntu22.04"


def findings_in_nag_stack(build) -> list[str]:
    """Synthesize an app with an Owner stack (the user's bucket) and a Nag stack; the Nag stack's findings."""
    from cdk_nag import AwsSolutionsChecks
    from conftest import nag_violations

    outdir = tempfile.mkdtemp()
    app = cdk.App(outdir=outdir)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    env = cdk.Environment(account="111122223333", region="us-east-1")
    owner = cdk.Stack(app, "Owner", env=env)
    bucket = s3.Bucket(owner, "Weights", enforce_ssl=True, server_access_logs_prefix="logs/")
    build(cdk.Stack(app, "Nag", env=env), bucket)
    with contextlib.suppress(RuntimeError):  # ValidationFailed: the findings are in the report
        app.synth()
    return [f for f in nag_violations(Path(outdir)) if " at Nag/" in f]


def test_a_weights_prefix_in_another_stacks_bucket_passes_nag():
    def build(stack, bucket):
        LlmEndpoint(stack, "Llm", instance_type="ml.g5.2xlarge", image_uri=IMAGE, model_data_bucket=bucket,
                    model_data_key="org/mistral-7b/")

    assert findings_in_nag_stack(build) == []


def test_a_users_own_prefix_wildcard_on_that_bucket_still_fails_nag():
    def build(stack, bucket):
        llm = LlmEndpoint(stack, "Llm", instance_type="ml.g5.2xlarge", image_uri=IMAGE, model_data_bucket=bucket,
                          model_data_key="org/mistral-7b/")
        llm.role.add_to_principal_policy(
            iam.PolicyStatement(actions=["s3:GetObject"], resources=[bucket.arn_for_objects("org/*")])
        )

    [finding] = findings_in_nag_stack(build)
    assert finding.startswith("AwsSolutions-IAM5[Resource::Owner:ExportsOutputFnGetAttWeights")
    assert finding.endswith("/org/*] at Nag/Llm/ExecutionRole/DefaultPolicy/Resource")


def test_the_weights_keys_decrypt_grant_passes_nag():
    """A bucket of another stack with its own key, and an imported bucket with its key as a prop."""
    from aws_cdk import aws_kms as kms

    def build(stack, _):
        owner = cdk.Stack.of(_)
        key = kms.Key(owner, "WeightsKey", enable_key_rotation=True)
        encrypted = s3.Bucket(owner, "Encrypted", encryption_key=key, enforce_ssl=True, server_access_logs_prefix="logs/")
        LlmEndpoint(stack, "Llm", instance_type="ml.g5.2xlarge", image_uri=IMAGE, model_data_bucket=encrypted,
                    model_data_key="org/mistral-7b/")
        LlmEndpoint(stack, "Imported", instance_type="ml.g5.2xlarge", image_uri=IMAGE,
                    model_data_bucket=s3.Bucket.from_bucket_name(stack, "Weights", "users-weights"),
                    model_data_bucket_key=kms.Key.from_key_arn(
                        stack, "ImportedKey", "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"),
                    model_data_key="model.tar.gz")

    assert findings_in_nag_stack(build) == []
