"""ModelInvocationLogging: the API calls it makes, checked against botocore's Bedrock model; encryption,
least privilege, one configuration per environment, what deletion does, and every bad prop."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import aws_cdk as cdk
import botocore.session
import pytest
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import custom_resources as cr
from aws_cdk.assertions import Annotations, Match
from botocore.validate import validate_parameters
from genai_pacer import InvalidPropsError
from genai_pacer.observe.invocation_logging import ModelInvocationLogging
from helpers import kms_statements, new_stack, only, resources, template_of

ENV = cdk.Environment(account="111122223333", region="us-east-1")
SOURCE = {
    "StringEquals": {"aws:SourceAccount": "111122223333"},
    "ArnLike": {"aws:SourceArn": {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":bedrock:us-east-1:111122223333:*"]]}},
}


def synth(**props) -> tuple[ModelInvocationLogging, dict]:
    stack = new_stack()
    logging = ModelInvocationLogging(stack, "Logging", **props)
    return logging, template_of(stack).to_json()


def call(template: dict, phase: str) -> dict | None:
    """The AwsCustomResource call of a phase (Create, Update, Delete), tokens as placeholders."""
    resource = only(template, "Custom::BedrockModelInvocationLogging")["Properties"]
    raw = resource.get(phase)
    if raw is None:
        return None
    if isinstance(raw, dict):  # Fn::Join around tokens: each token becomes a placeholder the API accepts
        raw = "".join(_placeholder(p) for p in raw["Fn::Join"][1])
    return json.loads(raw)


def _placeholder(part) -> str:
    if isinstance(part, str):
        return part
    text = json.dumps(part)
    if "DeliveryRole" in text:
        return "arn:aws:iam::111122223333:role/delivery"
    if "Bucket" in text or "Logs" in text or "Ref" in text:
        return "amzn-s3-demo-name"
    raise AssertionError(f"unexpected token {part}")


def assert_valid_for_bedrock(parameters: dict) -> None:
    """The request botocore would send: the API model's types, required members and limits."""
    model = botocore.session.get_session().get_service_model("bedrock")
    validate_parameters(parameters, model.operation_model("PutModelInvocationLoggingConfiguration").input_shape)


@pytest.fixture(scope="module")
def default():
    return synth()


@pytest.fixture(scope="module")
def with_s3():
    return synth(s3_delivery=True)


def test_create_and_update_put_the_configuration_delete_removes_it(default):
    _, template = default
    create, update, delete = (call(template, phase) for phase in ("Create", "Update", "Delete"))
    assert create == update
    assert (create["service"], create["action"]) == ("Bedrock", "PutModelInvocationLoggingConfiguration")
    assert create["parameters"]["loggingConfig"] == {
        "textDataDeliveryEnabled": True, "imageDataDeliveryEnabled": False,
        "embeddingDataDeliveryEnabled": False, "videoDataDeliveryEnabled": False,
        "cloudWatchConfig": {"logGroupName": "amzn-s3-demo-name", "roleArn": "arn:aws:iam::111122223333:role/delivery"},
    }
    assert_valid_for_bedrock(create["parameters"])
    assert delete == {"service": "Bedrock", "action": "DeleteModelInvocationLoggingConfiguration"}
    props = only(template, "Custom::BedrockModelInvocationLogging")["Properties"]
    assert props["InstallLatestAwsSdk"] is False  # no npm download during a deployment


def test_the_operations_exist_in_botocores_bedrock_model():
    model = botocore.session.get_session().get_service_model("bedrock")
    assert model.operation_model("DeleteModelInvocationLoggingConfiguration").http["method"] == "DELETE"
    assert model.operation_model("PutModelInvocationLoggingConfiguration").http["requestUri"] == "/logging/modelinvocations"


def test_logs_are_encrypted_and_retained_and_bedrock_writes_one_stream_only(default):
    construct, template = default
    groups = resources(template, "AWS::Logs::LogGroup")
    for group in groups.values():
        assert "KmsKeyId" in group["Properties"] and group["DeletionPolicy"] == "Retain"
        assert group["Properties"]["RetentionInDays"] == 30
    role = next(r for r in resources(template, "AWS::IAM::Role").values()
                if r["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "bedrock.amazonaws.com"})
    assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Condition"] == SOURCE
    stack = cdk.Stack.of(construct)
    (statement,) = stack.resolve(construct.delivery_role.node.find_child("DefaultPolicy").document)["Statement"]
    assert statement["Action"] == ["logs:CreateLogStream", "logs:PutLogEvents"]
    arn = "".join(p if isinstance(p, str) else json.dumps(p) for p in statement["Resource"]["Fn::Join"][1])
    assert arn.endswith(":log-stream:aws/bedrock/modelinvocations") and ":logs:us-east-1:111122223333:log-group:" in arn
    key = only(template, "AWS::KMS::Key")
    assert key["Properties"]["EnableKeyRotation"] is True and key["DeletionPolicy"] == "Retain"


def test_the_custom_resource_may_only_configure_logging_and_pass_the_delivery_role(default):
    construct, template = default
    stack = cdk.Stack.of(construct)
    policy = construct.custom_resource.node.find_child("CustomResourcePolicy")
    statements = stack.resolve(policy.document)["Statement"]
    assert statements[0] == {
        "Action": ["bedrock:PutModelInvocationLoggingConfiguration", "bedrock:DeleteModelInvocationLoggingConfiguration"],
        "Effect": "Allow", "Resource": "*",
    }
    assert statements[1]["Action"] == "iam:PassRole"
    assert statements[1]["Resource"] == stack.resolve(construct.delivery_role.role_arn)
    assert statements[1]["Condition"] == {"StringEquals": {"iam:PassedToService": "bedrock.amazonaws.com"}}
    function = only(template, "AWS::Lambda::Function")["Properties"]
    assert function["LoggingConfig"]["LogGroup"] == {"Ref": next(k for k in resources(template, "AWS::Logs::LogGroup") if "Provider" in k)}
    provider_role = resources(template, "AWS::IAM::Role")[function["Role"]["Fn::GetAtt"][0]]
    assert "ManagedPolicyArns" not in provider_role["Properties"]  # inline grants only (cdk-nag IAM4)


def test_s3_delivery_goes_to_an_encrypted_tls_only_bucket_bedrock_may_write_under_its_prefixes(with_s3):
    construct, template = with_s3
    create = call(template, "Create")
    config = create["parameters"]["loggingConfig"]
    assert config["s3Config"] == {"bucketName": "amzn-s3-demo-name", "keyPrefix": "invocation-logs"}
    assert config["cloudWatchConfig"]["largeDataDeliveryS3Config"] == {"bucketName": "amzn-s3-demo-name", "keyPrefix": "large-data"}
    assert_valid_for_bedrock(create["parameters"])
    stack = cdk.Stack.of(construct)
    bucket = resources(template, "AWS::S3::Bucket")[stack.get_logical_id(construct.bucket.node.default_child)]
    encryption = bucket["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert encryption["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms" and encryption["BucketKeyEnabled"]
    assert bucket["Properties"]["LoggingConfiguration"]["LogFilePrefix"] == "bedrock-invocation-logs/"
    assert bucket["DeletionPolicy"] == "Retain"
    statements = stack.resolve(construct.bucket.policy.document)["Statement"]
    deny = next(s for s in statements if s["Effect"] == "Deny")
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    write = next(s for s in statements if s.get("Sid") == "AmazonBedrockLogsWrite")
    assert write["Principal"] == {"Service": "bedrock.amazonaws.com"} and write["Action"] == "s3:PutObject"
    assert write["Condition"] == SOURCE
    paths = ["".join(p if isinstance(p, str) else "<bucket>" for p in r["Fn::Join"][1]) for r in write["Resource"]]
    assert paths == ["<bucket>/invocation-logs/AWSLogs/111122223333/BedrockModelInvocationLogs/*",
                     "<bucket>/large-data/AWSLogs/111122223333/BedrockModelInvocationLogs/*"]
    key_policy = only(template, "AWS::KMS::Key")["Properties"]["KeyPolicy"]["Statement"]
    bedrock_key = next(s for s in key_policy if s.get("Sid") == "AmazonBedrockLogsEncrypt")
    assert bedrock_key["Action"] == "kms:GenerateDataKey" and bedrock_key["Condition"] == SOURCE


def test_s3_only_needs_no_delivery_role_and_passes_none():
    construct, template = synth(s3_delivery=True, cloudwatch_logs=False)
    config = call(template, "Create")["parameters"]["loggingConfig"]
    assert "cloudWatchConfig" not in config and config["s3Config"]["keyPrefix"] == "invocation-logs"
    assert construct.delivery_role is None and construct.log_group is None
    stack = cdk.Stack.of(construct)
    statements = stack.resolve(construct.custom_resource.node.find_child("CustomResourcePolicy").document)["Statement"]
    assert [s["Action"] for s in statements] == [
        ["bedrock:PutModelInvocationLoggingConfiguration", "bedrock:DeleteModelInvocationLoggingConfiguration"]]
    write = next(s for s in stack.resolve(construct.bucket.policy.document)["Statement"] if s.get("Sid"))
    assert len(write["Resource"]) == 1  # only the logs prefix: no large-data delivery without CloudWatch Logs


def test_your_bucket_takes_the_large_bodies_of_cloudwatch_delivery():
    stack = new_stack()
    mine = s3.Bucket(stack, "Mine", enforce_ssl=True)
    construct = ModelInvocationLogging(stack, "Logging", bucket=mine, large_data_prefix="big")
    config = construct.logging_config
    assert "s3Config" not in config
    assert stack.resolve(config["cloudWatchConfig"]["largeDataDeliveryS3Config"]) == {"bucketName": stack.resolve(mine.bucket_name), "keyPrefix": "big"}
    write = next(s for s in stack.resolve(mine.policy.document)["Statement"] if s.get("Sid") == "AmazonBedrockLogsWrite")
    assert "".join(p if isinstance(p, str) else "" for p in write["Resource"]["Fn::Join"][1]).startswith("/big/AWSLogs/")
    assert construct.bucket is mine and "Bucket" not in [c.node.id for c in construct.node.children]


def test_an_imported_bucket_or_key_gets_a_warning_saying_what_to_grant():
    stack = new_stack()
    bucket = s3.Bucket.from_bucket_name(stack, "Imported", "amzn-s3-demo-bucket")
    ModelInvocationLogging(stack, "Logging", s3_delivery=True, bucket=bucket, cloudwatch_logs=False)
    warnings = Annotations.from_stack(stack).find_warning("*", Match.any_value())
    assert any("allow bedrock.amazonaws.com s3:PutObject on invocation-logs/AWSLogs/111122223333/BedrockModelInvocationLogs/*"
               in str(w.entry.data) for w in warnings)
    stack = new_stack()
    key = kms.Key.from_key_arn(stack, "Key", "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab")
    ModelInvocationLogging(stack, "Logging", s3_delivery=True, encryption_key=key)
    assert any("kms:GenerateDataKey" in str(w.entry.data) for w in Annotations.from_stack(stack).find_warning("*", Match.any_value()))


LOGS_KEY_ARN = "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def test_your_bucket_with_its_own_key_lets_bedrock_encrypt_the_logs_with_it():
    """Bedrock writes the logs as bedrock.amazonaws.com, so the grant is in the key policy of the bucket's
    key (not in any role): kms:GenerateDataKey, this account and Region only. It went to the
    construct's own key only, which encrypts nothing of your bucket."""
    stack = new_stack()
    key = kms.Key(stack, "Mine", enable_key_rotation=True)
    mine = s3.Bucket(stack, "Logs", encryption_key=key, enforce_ssl=True)
    ModelInvocationLogging(stack, "Logging", s3_delivery=True, bucket=mine, cloudwatch_logs=False)
    template = template_of(stack).to_json()
    policy = resources(template, "AWS::KMS::Key")[stack.resolve(stack.get_logical_id(key.node.default_child))]
    granted = [s for s in policy["Properties"]["KeyPolicy"]["Statement"] if s.get("Sid") == "AmazonBedrockLogsEncrypt"]
    assert granted == [{"Action": "kms:GenerateDataKey", "Condition": SOURCE, "Effect": "Allow",
                        "Principal": {"Service": "bedrock.amazonaws.com"}, "Resource": "*", "Sid": "AmazonBedrockLogsEncrypt"}]
    assert kms_statements(template) == {}  # no role uses the key: Bedrock writes as its service principal


def test_an_imported_bucket_takes_its_key_as_a_prop_and_a_key_of_the_app_gets_the_statement():
    stack = new_stack()
    key = kms.Key(stack, "Mine", enable_key_rotation=True)
    ModelInvocationLogging(stack, "Logging", s3_delivery=True, cloudwatch_logs=False,
                           bucket=s3.Bucket.from_bucket_name(stack, "Logs", "users-logs"), bucket_key=key)
    statements = stack.resolve(key.node.default_child.key_policy)["Statement"]
    assert [s["Action"] for s in statements if s.get("Sid") == "AmazonBedrockLogsEncrypt"] == ["kms:GenerateDataKey"]


def test_an_imported_bucket_key_gets_a_warning_naming_the_prop():
    stack = new_stack()
    ModelInvocationLogging(stack, "Logging", s3_delivery=True, cloudwatch_logs=False,
                           bucket=s3.Bucket.from_bucket_name(stack, "Logs", "users-logs"),
                           bucket_key=kms.Key.from_key_arn(stack, "LogsKey", LOGS_KEY_ARN))
    warnings = [str(w.entry.data) for w in Annotations.from_stack(stack).find_warning("*", Match.any_value())]
    assert any(w.startswith("bucket_key Test/LogsKey is imported, so its policy cannot be changed here: allow "
                            "bedrock.amazonaws.com kms:GenerateDataKey") for w in warnings), warnings


@pytest.mark.parametrize(
    ("props", "problem"),
    [
        (lambda stack: dict(s3_delivery=True, bucket_key=kms.Key.from_key_arn(stack, "K", LOGS_KEY_ARN)),
         "bucket_key is set without bucket; a bucket this construct creates is encrypted with encryption_key: pass "
         "bucket too, or use encryption_key"),
        (lambda stack: dict(s3_delivery=True, bucket=s3.Bucket(stack, "Logs", encryption_key=kms.Key(stack, "Own")),
                            bucket_key=kms.Key.from_key_arn(stack, "Other", LOGS_KEY_ARN)),
         "bucket_key is Test/Other but bucket already knows its own key, Test/Own: the grants would name a key that "
         "does not encrypt the bucket; drop bucket_key"),
    ],
    ids=["without-bucket", "another-key"],
)
def test_a_bucket_key_that_cannot_be_the_buckets_key_is_refused(props, problem):
    stack = new_stack()
    with pytest.raises(InvalidPropsError) as refused:
        ModelInvocationLogging(stack, "Logging", **props(stack))
    assert refused.value.problems == [problem]


def test_keep_logging_on_delete_calls_nothing_on_delete_and_keeps_what_logging_uses():
    construct, template = synth(keep_logging_on_delete=True, s3_delivery=True)
    assert call(template, "Delete") is None
    stack = cdk.Stack.of(construct)
    statements = stack.resolve(construct.custom_resource.node.find_child("CustomResourcePolicy").document)["Statement"]
    assert statements[0]["Action"] == "bedrock:PutModelInvocationLoggingConfiguration"
    role_id = stack.get_logical_id(construct.delivery_role.node.default_child)
    policy_id = stack.get_logical_id(construct.delivery_role.node.find_child("DefaultPolicy").node.default_child)
    bucket_policy_id = stack.get_logical_id(construct.bucket.policy.node.default_child)
    for logical_id in (role_id, policy_id, bucket_policy_id):
        assert template["Resources"][logical_id]["DeletionPolicy"] == "Retain", logical_id


def test_by_default_deleting_the_stack_removes_the_role_with_the_configuration(default):
    construct, template = default
    stack = cdk.Stack.of(construct)
    role = template["Resources"][stack.get_logical_id(construct.delivery_role.node.default_child)]
    assert "DeletionPolicy" not in role  # the configuration that uses it is deleted first (it depends on the role)
    depends = only(template, "Custom::BedrockModelInvocationLogging")["DependsOn"]
    assert stack.get_logical_id(construct.delivery_role.node.default_child) in depends


# --- one configuration per account and Region -------------------------------------------------------

def test_two_in_one_environment_are_refused_with_both_paths():
    app = cdk.App()
    ModelInvocationLogging(cdk.Stack(app, "A", env=ENV), "Logging")
    with pytest.raises(InvalidPropsError, match=r"A/Logging already configures model invocation logging for 111122223333/us-east-1"):
        ModelInvocationLogging(cdk.Stack(app, "B", env=ENV), "Logging")
    with pytest.raises(InvalidPropsError, match="keep one ModelInvocationLogging per environment"):
        ModelInvocationLogging(app.node.find_child("A"), "Again")


def test_two_environment_agnostic_stacks_are_refused_and_a_mix_is_warned():
    app = cdk.App()
    ModelInvocationLogging(cdk.Stack(app, "A"), "Logging")
    with pytest.raises(InvalidPropsError, match="for an environment-agnostic stack"):
        ModelInvocationLogging(cdk.Stack(app, "B"), "Logging")
    specific = cdk.Stack(app, "C", env=ENV)
    ModelInvocationLogging(specific, "Logging")
    assert any("environment-agnostic" in str(w.entry.data) for w in Annotations.from_stack(specific).find_warning("*", Match.any_value()))


def test_different_regions_each_get_their_own():
    """Issue 35.11: this test built both stacks and asserted nothing. Logging is one setting per account and
    Region, so two Regions of one account are two settings, each in its own stack, and neither is refused."""
    app = cdk.App()
    east = cdk.Stack(app, "East", env=ENV)
    west = cdk.Stack(app, "West", env=cdk.Environment(account="111122223333", region="us-west-2"))
    ModelInvocationLogging(east, "Logging")
    ModelInvocationLogging(west, "Logging")
    for stack in (east, west):
        (setting,) = resources(template_of(stack).to_json(), "Custom::BedrockModelInvocationLogging").values()
        assert "PutModelInvocationLoggingConfiguration" in json.dumps(setting["Properties"]["Create"])


def test_an_existing_aws_custom_resource_function_is_reused_not_reconfigured():
    stack = new_stack()
    cr.AwsCustomResource(stack, "Other", on_create=cr.AwsSdkCall(service="S3", action="listBuckets",
                                                                 physical_resource_id=cr.PhysicalResourceId.of("x")),
                         policy=cr.AwsCustomResourcePolicy.from_sdk_calls(resources=cr.AwsCustomResourcePolicy.ANY_RESOURCE),
                         install_latest_aws_sdk=False)
    construct = ModelInvocationLogging(stack, "Logging")
    assert construct.node.try_find_child("ProviderRole") is None and construct.node.try_find_child("ProviderLogs") is None
    assert len(resources(template_of(stack), "AWS::Lambda::Function")) == 1


# --- nag and cfn-lint ------------------------------------------------------------------------------

@pytest.mark.parametrize("props", [{}, {"s3_delivery": True}, {"s3_delivery": True, "cloudwatch_logs": False}],
                         ids=["cloudwatch", "both", "s3"])
def test_nag_finds_nothing_and_cfn_lint_no_errors(props):
    from cdk_nag import AwsSolutionsChecks
    from conftest import nag_violations

    outdir = Path(tempfile.mkdtemp())
    app = cdk.App(outdir=str(outdir))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    ModelInvocationLogging(cdk.Stack(app, "Nag", env=ENV), "Logging", **props)
    with contextlib.suppress(RuntimeError):
        app.synth()
    assert nag_violations(outdir) == []
    lint = subprocess.run([str(Path(sys.executable).with_name("cfn-lint")), "--format", "parseable",
                           str(outdir / "Nag.template.json")], capture_output=True, text=True)
    assert lint.returncode in (0, 4, 8, 12), lint.stdout + lint.stderr


# --- bad props ---------------------------------------------------------------------------------------

def _a_log_group(stack):
    return logs.LogGroup(stack, "Mine")


BAD = [
    (dict(cloudwatch_logs=False), "cloudwatch_logs and s3_delivery are both False, so Bedrock would log nowhere"),
    (dict(cloudwatch_logs="yes"), "cloudwatch_logs='yes' is a str; pass True or False"),
    (dict(cloudwatch_logs=None), "cloudwatch_logs is required"),
    (dict(s3_delivery=1), "s3_delivery=1 is an int; pass True or False"),
    (dict(text_data="no"), "text_data='no' is a str"),
    (dict(image_data=None), "image_data is required"),
    (dict(embedding_data=0), "embedding_data=0 is an int"),
    (dict(video_data="true"), "video_data='true' is a str"),
    (dict(keep_logging_on_delete="no"), "keep_logging_on_delete='no' is a str"),
    (dict(log_group="/aws/bedrock"), "log_group='/aws/bedrock' is a str; pass a logs.LogGroup"),
    (dict(log_group=_a_log_group, cloudwatch_logs=False, s3_delivery=True), "log_group is set but cloudwatch_logs=False"),
    (dict(bucket="amzn-s3-demo-bucket"), "bucket='amzn-s3-demo-bucket' is a str; pass an s3.Bucket"),
    (dict(encryption_key="alias/logs"), "encryption_key='alias/logs' is a str; pass a kms.Key"),
    (dict(log_retention=30), "log_retention=30 is an int; pass a logs.RetentionDays"),
    (dict(log_group=_a_log_group, log_retention=logs.RetentionDays.ONE_YEAR), "log_retention configures a new log group, but log_group is yours"),
    (dict(log_group=_a_log_group, encryption_key=lambda s: kms.Key(s, "K")), "encryption_key encrypts a new log group or bucket, but both destinations are yours"),
    (dict(server_access_logs_bucket=lambda s: s3.Bucket(s, "AL")), "server_access_logs_bucket configures a new bucket, but none is created"),
    (dict(server_access_logs_bucket="logs"), "server_access_logs_bucket='logs' is a str"),
    (dict(key_prefix="logs"), "key_prefix is the S3 prefix of delivered logs, but s3_delivery is off"),
    (dict(s3_delivery=True, key_prefix="/logs"), "key_prefix='/logs' must be an S3 prefix"),
    (dict(s3_delivery=True, key_prefix="logs/"), "key_prefix='logs/' must be an S3 prefix"),
    (dict(s3_delivery=True, key_prefix="has space"), "key_prefix='has space' must be an S3 prefix"),
    (dict(s3_delivery=True, key_prefix=""), "key_prefix='' is empty"),
    (dict(s3_delivery=True, key_prefix=7), "key_prefix=7 is an int; pass a string"),
    (dict(s3_delivery=True, key_prefix="x" * 201), "key_prefix has 201 characters; at most 200"),
    (dict(large_data_prefix="big"), "large_data_prefix is where CloudWatch Logs delivery puts bodies too large for it"),
    (dict(large_data_prefix="big", s3_delivery=True, cloudwatch_logs=False), "large_data_prefix is where CloudWatch Logs"),
]


@pytest.mark.parametrize(("props", "message"), BAD, ids=[f"{i}-{next(iter(p))}" for i, (p, _) in enumerate(BAD)])
def test_every_bad_prop_is_refused_with_its_rule_and_fix(props, message):
    stack = new_stack()
    props = {k: v(stack) if callable(v) else v for k, v in props.items()}
    with pytest.raises(InvalidPropsError) as caught:
        ModelInvocationLogging(stack, "Logging", **props)
    assert message in str(caught.value)
    assert str(caught.value).startswith("ModelInvocationLogging at Test/Logging: ")  # the construct and its path


def test_a_deploy_time_prefix_is_accepted():
    stack = new_stack()
    prefix = cdk.CfnParameter(stack, "Prefix").value_as_string
    construct = ModelInvocationLogging(stack, "Logging", s3_delivery=True, key_prefix=prefix)
    assert stack.resolve(construct.logging_config["s3Config"]["keyPrefix"]) == {"Ref": "Prefix"}


# ---- data kept: the bucket's lifecycle (issue 27) -------------------------------------------------


def lifecycle(template: dict) -> list[dict]:
    bucket = next(b for k, b in resources(template, "AWS::S3::Bucket").items() if k.startswith("LoggingBucket"))
    assert bucket["DeletionPolicy"] == "Retain"  # logs are evidence: the bucket outlives the stack, rules included
    return bucket["Properties"]["LifecycleConfiguration"]["Rules"]


def test_the_new_bucket_expires_logs_and_their_old_versions_after_a_month_by_default():
    _, template = synth(s3_delivery=True)
    assert lifecycle(template) == [
        {"AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}, "ExpirationInDays": 30, "Id": "ExpireInvocationLogs",
         "NoncurrentVersionExpiration": {"NoncurrentDays": 1}, "Status": "Enabled"},
        {"ExpiredObjectDeleteMarker": True, "Id": "RemoveExpiredDeleteMarkers", "Status": "Enabled"},
    ]
    # the same month the default log group keeps
    groups = [g["Properties"]["RetentionInDays"] for g in resources(template, "AWS::Logs::LogGroup").values()]
    assert groups and set(groups) == {30}


def test_bucket_retention_sets_the_expiration_and_a_deploy_time_number_of_days_reaches_the_template():
    _, template = synth(s3_delivery=True, bucket_retention=cdk.Duration.days(400))
    assert lifecycle(template)[0]["ExpirationInDays"] == 400
    stack = new_stack()
    days = cdk.CfnParameter(stack, "Days", type="Number")
    ModelInvocationLogging(stack, "Logging", s3_delivery=True, bucket_retention=cdk.Duration.days(days.value_as_number))
    assert lifecycle(template_of(stack).to_json())[0]["ExpirationInDays"] == {"Ref": "Days"}


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"s3_delivery": True, "bucket_retention": cdk.Duration.hours(36)}, "bucket_retention=1 day 12 hours is not whole days"),
        ({"s3_delivery": True, "bucket_retention": cdk.Duration.hours(1)}, "bucket_retention=1 hour is below the minimum of 1 day"),
        ({"s3_delivery": True, "bucket_retention": 30}, "bucket_retention=30 is an int; pass a cdk.Duration"),
        ({"bucket_retention": cdk.Duration.days(30)}, "bucket_retention sets the lifecycle of a new bucket, but none is created"),
    ],
)
def test_bad_bucket_retention_is_refused(props, message):
    with pytest.raises(InvalidPropsError, match=message):
        synth(**props)


def test_a_deploy_time_retention_in_seconds_is_refused_naming_the_prop():
    stack = new_stack()
    seconds = cdk.CfnParameter(stack, "Seconds", type="Number")
    with pytest.raises(InvalidPropsError, match="bucket_retention is a deploy-time Duration in another unit"):
        ModelInvocationLogging(stack, "Logging", s3_delivery=True, bucket_retention=cdk.Duration.seconds(seconds.value_as_number))


def test_your_own_bucket_keeps_its_own_rules():
    stack = new_stack()
    mine = s3.Bucket(stack, "Mine", enforce_ssl=True)
    ModelInvocationLogging(stack, "Logging", s3_delivery=True, bucket=mine)
    (bucket,) = resources(template_of(stack).to_json(), "AWS::S3::Bucket").values()
    assert "LifecycleConfiguration" not in bucket.get("Properties", {})
