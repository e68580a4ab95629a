"""Bedrock model invocation logging: every call's request, response and metadata, encrypted.

CloudFormation has no resource for it, so this construct sets it with Bedrock's own API from a
custom resource: PutModelInvocationLoggingConfiguration when the stack is created or updated,
DeleteModelInvocationLoggingConfiguration when it is deleted. Logs go to CloudWatch Logs (a
KMS-encrypted log group) and/or S3 (a KMS-encrypted, TLS-only bucket); with both, a body too large
for CloudWatch Logs (and binary data) goes to the bucket's large-data prefix.

One setting per account and Region. Bedrock keeps a single logging configuration per account and
Region: deploying this construct replaces whatever was configured before (in the console, by
another stack), and two of them would overwrite each other. So two in one app and environment are
refused, and an environment-agnostic stack beside an environment-specific one gets a warning.

What deleting the stack (or removing the construct) does: by default the custom resource deletes
the configuration, so Bedrock stops logging invocations in that account and Region, for every
application there, including any configuration someone set after this stack. With
keep_logging_on_delete=True nothing is called on delete and logging continues into the retained
destinations. Either way the log group, the bucket and the key are retained: logs are evidence,
and deleting the key would make them unreadable. With keep_logging_on_delete the delivery role
and the bucket policy are retained too, since logging keeps using them.

What is logged and for how long: every model call in the account and Region (not only this app's),
with its metadata (request id, model, token counts, latency) and, by default, its text: prompts and
answers, which may hold personal data (image, embedding and video payloads only when turned on). The
log group keeps them for `log_retention` (default one month); a new bucket expires each object
`bucket_retention` after it was written (default 30 days, the log group's month) and removes the
previous version that expiry or a delete leaves in the versioned bucket one day later
(`NONCURRENT_DAYS`), so a prompt is gone from the bucket about a day after its retention (S3
applies lifecycle rules asynchronously, usually within a day). Retained on delete stays the default:
the bucket and its lifecycle rules outlive the stack, so retained logs still expire. Your own bucket
keeps its own rules (bucket_retention is then refused).

Renaming or moving the construct replaces its custom resource: CloudFormation creates the new one
(logging on) and then deletes the old one, which turns logging off unless keep_logging_on_delete
is set. Deploy once more after such a change, or set keep_logging_on_delete first.
"""

from __future__ import annotations

import re
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import custom_resources as cr

from constructs import Construct, IConstruct

from .._internal.checks import Checks, is_token, warn
from .._internal.docs import constructor_doc
from .._internal.s3 import bucket_key as bucket_key_of
from .._internal.secure import encrypted_log_group, log_key

__all__ = ["DEFAULT_BUCKET_RETENTION_DAYS", "DELIVERY_PATH", "LOG_STREAM", "NONCURRENT_DAYS", "ModelInvocationLogging"]

#: The log stream Bedrock writes invocation logs to, in the configured log group.
LOG_STREAM = "aws/bedrock/modelinvocations"
#: Where Bedrock writes under a key prefix: <prefix>/AWSLogs/<account>/BedrockModelInvocationLogs/...
DELIVERY_PATH = "AWSLogs/{account}/BedrockModelInvocationLogs/*"
#: The id aws-cdk-lib gives the one Lambda function behind every AwsCustomResource of a stack.
_PROVIDER_ID = "AWS679f53fac002430cb0da5b7982bd2287"
#: The retention of a new bucket's logs when none is given: the default log group's one month.
DEFAULT_BUCKET_RETENTION_DAYS = 30
#: Days a noncurrent version (what an expiration or a delete leaves in a versioned bucket) is kept.
#: S3 lifecycle days are "a non-zero positive integer" (botocore s3 LifecycleExpiration.Days and
#: NoncurrentVersionExpiration.NoncurrentDays); ExpiredObjectDeleteMarker "cannot be specified with
#: ExpirationInDays" (cfn-lint schema AWS::S3::Bucket Rule), so it gets a rule of its own.
NONCURRENT_DAYS = 1
MIN_LIFECYCLE_DAYS = 1
_PREFIX = re.compile(r"^[A-Za-z0-9!_.*'()/-]{1,200}$")
_ACTIONS_REASON = (
    "bedrock:PutModelInvocationLoggingConfiguration and DeleteModelInvocationLoggingConfiguration act on the "
    "account's one logging configuration and support no resource-level permissions"
)


@constructor_doc
class ModelInvocationLogging(Construct):
    """Turns on Bedrock model invocation logging for the stack's account and Region.

    cloudwatch_logs: deliver to CloudWatch Logs. Default: True.
    log_group: your log group (with cloudwatch_logs). Default: a new one encrypted with
        encryption_key, retained on delete.
    s3_delivery: deliver to S3 as well (or instead, with cloudwatch_logs=False). Default: False.
    bucket: your bucket, for S3 delivery and, with CloudWatch Logs, for bodies too large for it.
        Its policy must let bedrock.amazonaws.com put objects (added here to a bucket of this app;
        an imported bucket gets a warning). Default: a new bucket when s3_delivery is on: SSE-KMS
        with encryption_key, TLS only, versioned, server access logs, retained on delete.
    bucket_key: the KMS key of an SSE-KMS `bucket` that does not know it (imported with
        s3.Bucket.from_bucket_name or from_bucket_arn): Bedrock writes the logs as
        bedrock.amazonaws.com, so the key's policy gets kms:GenerateDataKey for it (this account and
        Region only); a key whose policy this app cannot change (imported) gets a warning saying what to
        add. Default: the bucket's own encryption_key (an s3.Bucket built with a key, or
        from_bucket_attributes(encryption_key=...)); none for a bucket imported by name, which is then
        taken as SSE-S3. Refused without bucket (a new bucket uses encryption_key) or beside a bucket
        that knows another key. (A KMS key, not S3 Bucket Keys.)
    key_prefix: the S3 prefix of delivered logs (with s3_delivery). Default: "invocation-logs".
    large_data_prefix: the S3 prefix of bodies too large for CloudWatch Logs (with cloudwatch_logs
        and a bucket). Default: "large-data".
    text_data / image_data / embedding_data / video_data: which payloads the logs include.
        Default: text only (False everywhere logs metadata only: ids, model, token counts, latency).
        Prompts and answers may hold personal data: choose destinations and retention with that in mind.
    encryption_key: KMS key of the new log group and bucket (and of the custom resource's own
        log group). Default: the construct's one KMS key, with rotation, retained on delete ($1 a month
        while it exists, AWS KMS pricing page; docs/security.md, "KMS keys").
    log_retention: of the new log groups. Default: one month.
    bucket_retention: how long a new bucket keeps each log object (whole days, at least one); its
        noncurrent versions go NONCURRENT_DAYS later. Default: 30 days, like the log group.
    server_access_logs_bucket: where a new bucket's S3 access logs go. Default: a new bucket
        (SSE-S3, which S3 access logging requires), retained on delete.
    keep_logging_on_delete: leave logging on when the stack is deleted. Default: False (deleting
        the stack turns logging off in the account and Region).

    Attributes: `log_group` (or None), `bucket` (or None), `delivery_role` (Bedrock's role for
    CloudWatch Logs, or None), `encryption_key`, `custom_resource`, `logging_config` (what is sent).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cloudwatch_logs: bool = True,
        log_group: logs.ILogGroup | None = None,
        s3_delivery: bool = False,
        bucket: s3.IBucket | None = None,
        bucket_key: kms.IKey | None = None,
        key_prefix: str | None = None,
        large_data_prefix: str | None = None,
        text_data: bool = True,
        image_data: bool = False,
        embedding_data: bool = False,
        video_data: bool = False,
        encryption_key: kms.IKey | None = None,
        log_retention: logs.RetentionDays | None = None,
        bucket_retention: cdk.Duration | None = None,
        server_access_logs_bucket: s3.IBucket | None = None,
        keep_logging_on_delete: bool = False,
    ) -> None:
        super().__init__(scope, id)
        flags = {
            "cloudwatch_logs": cloudwatch_logs, "s3_delivery": s3_delivery, "text_data": text_data,
            "image_data": image_data, "embedding_data": embedding_data, "video_data": video_data,
            "keep_logging_on_delete": keep_logging_on_delete,
        }
        with Checks("ModelInvocationLogging", scope=self) as check:
            for name, value in flags.items():
                check.instance(name, value, bool, "True or False")
            check.instance("log_group", log_group, logs.ILogGroup, "a logs.LogGroup", optional=True)
            check.instance("bucket", bucket, s3.IBucket, "an s3.Bucket", optional=True)
            users_bucket_key = bucket_key_of(
                check, bucket_name="bucket", bucket=bucket, key_name="bucket_key", key=bucket_key,
                without="bucket_key is set without bucket; a bucket this construct creates is encrypted with "
                "encryption_key: pass bucket too, or use encryption_key",
            )
            check.instance("encryption_key", encryption_key, kms.IKey, "a kms.Key", optional=True)
            check.instance("log_retention", log_retention, logs.RetentionDays, "a logs.RetentionDays", optional=True)
            check.instance("server_access_logs_bucket", server_access_logs_bucket, s3.IBucket, "an s3.Bucket", optional=True)
            for name, prefix in (("key_prefix", key_prefix), ("large_data_prefix", large_data_prefix)):
                if check.text(name, prefix, max_length=200, optional=True) and isinstance(prefix, str) and not is_token(prefix):
                    check.rule(bool(_PREFIX.match(prefix)) and not prefix.startswith("/") and not prefix.endswith("/"),
                               f"{name}={prefix!r} must be an S3 prefix of letters, digits and !_.*'()-/ without a "
                               "leading or trailing /, e.g. 'invocation-logs'", id=f"{name}.not-s3-prefix")
            check.rule(cloudwatch_logs is True or s3_delivery is True,
                       "cloudwatch_logs and s3_delivery are both False, so Bedrock would log nowhere: turn one on", id="cloudwatch_logs.nowhere")
            check.rule(log_group is None or cloudwatch_logs is not False,
                       "log_group is set but cloudwatch_logs=False, so it would be ignored: drop log_group or turn cloudwatch_logs on", id="log_group.without-cloudwatch-logs")
            check.rule(key_prefix is None or s3_delivery is True,
                       "key_prefix is the S3 prefix of delivered logs, but s3_delivery is off: drop it or turn s3_delivery on", id="key_prefix.without-s3-delivery")
            check.rule(large_data_prefix is None or (cloudwatch_logs is True and (bucket is not None or s3_delivery is True)),
                       "large_data_prefix is where CloudWatch Logs delivery puts bodies too large for it, which needs "
                       "cloudwatch_logs and a bucket (bucket, or s3_delivery): drop it or add both", id="large_data_prefix.without-cloudwatch-logs")
            new_log_group = cloudwatch_logs is True and log_group is None
            new_bucket = s3_delivery is True and bucket is None
            check.rule(server_access_logs_bucket is None or new_bucket,
                       "server_access_logs_bucket configures a new bucket, but none is created (bucket is yours, or "
                       "s3_delivery is off): set access logging on your bucket instead, or drop it", id="server_access_logs_bucket.no-new-bucket")
            check.rule(encryption_key is None or new_log_group or new_bucket,
                       "encryption_key encrypts a new log group or bucket, but both destinations are yours: encrypt "
                       "them with your key yourself, or drop encryption_key", id="encryption_key.no-new-destination")
            check.rule(log_retention is None or new_log_group,
                       "log_retention configures a new log group, but log_group is yours (or CloudWatch Logs is off): "
                       "set retention on your log group instead, or drop log_retention", id="log_retention.no-new-log-group")
            retention_days = self._retention_days(check, bucket_retention)
            check.rule(bucket_retention is None or new_bucket,
                       "bucket_retention sets the lifecycle of a new bucket, but none is created (bucket is yours, or "
                       "s3_delivery is off): add an expiration rule to your bucket instead, or drop bucket_retention", id="bucket_retention.no-new-bucket")
            self._refuse_a_second_configuration(check)

        stack = cdk.Stack.of(self)
        self.encryption_key = log_key(self, "Key", encryption_key)
        self.log_group: logs.ILogGroup | None = None
        self.delivery_role: iam.Role | None = None
        self.bucket: s3.IBucket | None = None
        dependencies: list[IConstruct] = []
        retention = log_retention or logs.RetentionDays.ONE_MONTH

        key_prefix = key_prefix or "invocation-logs"
        large_data_prefix = large_data_prefix or "large-data"
        if s3_delivery or bucket is not None:
            self.bucket = bucket or self._new_bucket(server_access_logs_bucket, retention_days)
            prefixes = ([key_prefix] if s3_delivery else []) + ([large_data_prefix] if cloudwatch_logs else [])
            key, key_prop = (users_bucket_key, "bucket_key") if bucket is not None else (self.encryption_key, "encryption_key")
            dependencies.extend(self._allow_bedrock_to_write(stack, self.bucket, prefixes, key, key_prop))

        config: dict[str, Any] = {
            "textDataDeliveryEnabled": text_data,
            "imageDataDeliveryEnabled": image_data,
            "embeddingDataDeliveryEnabled": embedding_data,
            "videoDataDeliveryEnabled": video_data,
        }
        if cloudwatch_logs:
            self.log_group = log_group or encrypted_log_group(self, "Logs", key=self.encryption_key, retention=retention)
            self.delivery_role = self._delivery_role(stack, self.log_group)
            dependencies.extend([self.log_group, self.delivery_role])
            cloudwatch_config: dict[str, Any] = {
                "logGroupName": self.log_group.log_group_name,
                "roleArn": self.delivery_role.role_arn,
            }
            if self.bucket is not None:
                cloudwatch_config["largeDataDeliveryS3Config"] = {
                    "bucketName": self.bucket.bucket_name, "keyPrefix": large_data_prefix,
                }
            config["cloudWatchConfig"] = cloudwatch_config
        if s3_delivery and self.bucket is not None:
            config["s3Config"] = {"bucketName": self.bucket.bucket_name, "keyPrefix": key_prefix}
        self.logging_config = config
        self.custom_resource = self._custom_resource(stack, config, keep_logging_on_delete, retention)
        for dependency in dependencies:
            self.custom_resource.node.add_dependency(dependency)
        if keep_logging_on_delete:
            self._retain_what_logging_uses()

    def _retain_what_logging_uses(self) -> None:
        """Logging continues after the stack is gone, so the role and bucket policy it writes with stay too."""
        kept: list[Any] = []
        if self.delivery_role is not None:
            kept.append(self.delivery_role.node.default_child)
            policy = self.delivery_role.node.try_find_child("DefaultPolicy")
            if policy is not None:
                kept.append(policy.node.default_child)
        if isinstance(self.bucket, s3.Bucket) and self.bucket.policy is not None:
            kept.append(self.bucket.policy.node.default_child)
        for resource in kept:
            if isinstance(resource, cdk.CfnResource):
                resource.apply_removal_policy(cdk.RemovalPolicy.RETAIN)

    # --- one configuration per account and Region ----------------------------------------------------

    def _environment(self) -> tuple[str, str]:
        stack = cdk.Stack.of(self)
        return stack.account, stack.region

    def _refuse_a_second_configuration(self, check: Checks) -> None:
        account, region = self._environment()
        for other in self.node.root.node.find_all():
            if other is self or not isinstance(other, ModelInvocationLogging):
                continue
            other_account, other_region = other._environment()
            if (other_account, other_region) == (account, region):
                where = "an environment-agnostic stack" if is_token(account) or is_token(region) else f"{account}/{region}"
                check.fail(
                    f"{other.node.path} already configures model invocation logging for {where}; Bedrock keeps one "
                    "configuration per account and Region, so the two would overwrite each other on every deploy "
                    "and the first stack deleted would turn logging off for both: keep one ModelInvocationLogging "
                    "per environment", id="environment.configured-twice"
                )
            elif any(is_token(v) for v in (account, region, other_account, other_region)):
                warn(
                    self,
                    "invocation-logging-environment",
                    f"{other.node.path} also configures model invocation logging and one of the two stacks is "
                    "environment-agnostic: if both deploy to the same account and Region they overwrite each other. "
                    "Give both stacks an explicit env",
                )

    # --- destinations ------------------------------------------------------------------------------

    @staticmethod
    def _retention_days(check: Checks, retention: Any) -> Any:
        """bucket_retention in whole days (a deploy-time Duration.days(...) stays a token), or None."""
        if retention is None:
            return DEFAULT_BUCKET_RETENTION_DAYS
        if not check.duration("bucket_retention", retention, minimum=cdk.Duration.days(MIN_LIFECYCLE_DAYS),
                              fix="how long the bucket keeps each log object, e.g. cdk.Duration.days(30)"):
            if isinstance(retention, cdk.Duration) and retention.is_unresolved():
                try:
                    return retention.to_days()
                except Exception:  # aws-cdk-lib cannot scale a token from another unit
                    check.fail("bucket_retention is a deploy-time Duration in another unit, but S3 lifecycle rules count "
                               "whole days: build it with cdk.Duration.days(parameter.value_as_number)", id="bucket_retention.deploy-time-unit")
            return None
        days = retention.to_days(integral=False)
        if not check.rule(float(days).is_integer(), f"bucket_retention={retention.to_human_string()} is not whole days; "
                          "S3 lifecycle rules count whole days: pass e.g. cdk.Duration.days(30)", id="bucket_retention.not-whole-days"):
            return None
        return int(days)

    def _new_bucket(self, access_logs: s3.IBucket | None, retention_days: Any) -> s3.Bucket:
        if access_logs is None:
            access_logs = s3.Bucket(
                self, "AccessLogs",
                encryption=s3.BucketEncryption.S3_MANAGED,  # S3 server access logging accepts SSE-S3 targets only
                enforce_ssl=True,
                block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
                # Without the serverAccessLogsUseBucketPolicy feature flag, aws-cdk-lib grants the log
                # delivery group through an ACL, which needs ACLs enabled.
                object_ownership=s3.ObjectOwnership.BUCKET_OWNER_PREFERRED,
                removal_policy=cdk.RemovalPolicy.RETAIN,
            )
            cdk.Validations.of(access_logs).acknowledge(cdk.Acknowledgment(
                id="AwsSolutions-S1",
                reason="this bucket receives the invocation-log bucket's server access logs; logging it to itself would loop",
            ))
        return s3.Bucket(
            self, "Bucket",
            encryption=s3.BucketEncryption.KMS,
            encryption_key=self.encryption_key,
            bucket_key_enabled=True,
            enforce_ssl=True,
            versioned=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=access_logs,
            server_access_logs_prefix="bedrock-invocation-logs/",
            removal_policy=cdk.RemovalPolicy.RETAIN,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="ExpireInvocationLogs",
                    expiration=cdk.Duration.days(retention_days),
                    noncurrent_version_expiration=cdk.Duration.days(NONCURRENT_DAYS),
                    abort_incomplete_multipart_upload_after=cdk.Duration.days(1),
                ),
                s3.LifecycleRule(id="RemoveExpiredDeleteMarkers", expired_object_delete_marker=True),
            ],
        )

    def _source_conditions(self, stack: cdk.Stack) -> dict[str, Any]:
        """Bedrock acting for this account and Region only (confused-deputy protection)."""
        return {
            "StringEquals": {"aws:SourceAccount": stack.account},
            "ArnLike": {"aws:SourceArn": stack.format_arn(service="bedrock", resource="*",
                                                          arn_format=cdk.ArnFormat.NO_RESOURCE_NAME)},
        }

    def _allow_bedrock_to_write(
        self, stack: cdk.Stack, bucket: s3.IBucket, prefixes: list[str], key: kms.IKey | None, key_prop: str
    ) -> list[IConstruct]:
        """Bedrock may put objects under the delivery paths of our prefixes, and use the bucket's key for them
        (`key`, from the prop `key_prop`; None for an SSE-S3 bucket)."""
        path = DELIVERY_PATH.format(account=stack.account)
        result = bucket.add_to_resource_policy(iam.PolicyStatement(
            sid="AmazonBedrockLogsWrite",
            principals=[iam.ServicePrincipal("bedrock.amazonaws.com")],
            actions=["s3:PutObject"],
            resources=[bucket.arn_for_objects(f"{prefix}/{path}") for prefix in dict.fromkeys(prefixes)],
            conditions=self._source_conditions(stack),
        ))
        if not result.statement_added:
            warn(
                self,
                "invocation-logging-bucket-policy",
                f"bucket {bucket.node.path} is imported, so its policy cannot be changed here: allow bedrock.amazonaws.com "
                f"s3:PutObject on {', '.join(f'{p}/{path}' for p in dict.fromkeys(prefixes))} (conditions aws:SourceAccount "
                "and aws:SourceArn), or Bedrock cannot write the logs",
            )
        # Bedrock writes as its service principal, so the grant is in the key policy: the user guide's S3
        # destination setup adds this statement to the key of an SSE-KMS bucket
        # (https://docs.aws.amazon.com/bedrock/latest/userguide/model-invocation-logging.html). In a key policy,
        # Resource "*" is the key itself (https://docs.aws.amazon.com/kms/latest/developerguide/key-policy-overview.html).
        key_statement = iam.PolicyStatement(
            sid="AmazonBedrockLogsEncrypt",
            principals=[iam.ServicePrincipal("bedrock.amazonaws.com")],
            actions=["kms:GenerateDataKey"],
            resources=["*"],
            conditions=self._source_conditions(stack),
        )
        if key is not None and not key.add_to_resource_policy(key_statement).statement_added:
            warn(
                self,
                "invocation-logging-key-policy",
                f"{key_prop} {key.node.path} is imported, so its policy cannot be changed here: allow "
                "bedrock.amazonaws.com kms:GenerateDataKey (conditions aws:SourceAccount and aws:SourceArn), or "
                "Bedrock cannot write to the encrypted bucket",
            )
        dependencies: list[IConstruct] = []
        if isinstance(bucket, s3.Bucket) and bucket.policy is not None:
            dependencies.append(bucket.policy)
        return dependencies

    def _delivery_role(self, stack: cdk.Stack, log_group: logs.ILogGroup) -> iam.Role:
        """The role Bedrock assumes to write to the log group: one stream, this account and Region only."""
        role = iam.Role(
            self, "DeliveryRole",
            assumed_by=iam.ServicePrincipal("bedrock.amazonaws.com", conditions=self._source_conditions(stack)),
            description="Bedrock model invocation logging: writes the invocation log stream",
        )
        stream = stack.format_arn(
            service="logs", resource="log-group",
            resource_name=f"{log_group.log_group_name}:log-stream:{LOG_STREAM}",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        role.add_to_policy(iam.PolicyStatement(actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[stream]))
        return role

    # --- the custom resource -----------------------------------------------------------------------

    def _custom_resource(self, stack: cdk.Stack, config: dict[str, Any], keep: bool,
                         retention: logs.RetentionDays) -> cr.AwsCustomResource:
        put = cr.AwsSdkCall(
            service="Bedrock",
            action="PutModelInvocationLoggingConfiguration",
            parameters={"loggingConfig": config},
            physical_resource_id=cr.PhysicalResourceId.of("bedrock-model-invocation-logging"),
        )
        delete = None if keep else cr.AwsSdkCall(service="Bedrock", action="DeleteModelInvocationLoggingConfiguration")
        statements = [iam.PolicyStatement(
            actions=["bedrock:PutModelInvocationLoggingConfiguration"]
            + ([] if keep else ["bedrock:DeleteModelInvocationLoggingConfiguration"]),
            resources=["*"],
        )]
        if self.delivery_role is not None:
            statements.append(iam.PolicyStatement(
                actions=["iam:PassRole"], resources=[self.delivery_role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": "bedrock.amazonaws.com"}},
            ))
        provider: dict[str, Any] = {}
        if stack.node.try_find_child(_PROVIDER_ID) is None:
            # This construct creates the stack's AwsCustomResource function: give it an explicit role with
            # inline grants (the default attaches AWSLambdaBasicExecutionRole, cdk-nag IAM4) and an
            # encrypted log group. A function some other AwsCustomResource created first keeps its own.
            provider_logs = encrypted_log_group(self, "ProviderLogs", key=self.encryption_key, retention=retention)
            role = iam.Role(self, "ProviderRole", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
            provider_logs.grant_write(role)
            provider = {"role": role, "log_group": provider_logs}
        resource = cr.AwsCustomResource(
            self, "Configuration",
            resource_type="Custom::BedrockModelInvocationLogging",
            on_create=put,
            on_update=put,
            on_delete=delete,
            policy=cr.AwsCustomResourcePolicy.from_statements(statements),
            install_latest_aws_sdk=False,  # the runtime's SDK has both calls; no npm download at deploy time
            timeout=cdk.Duration.minutes(2),
            **provider,
        )
        policy = resource.node.try_find_child("CustomResourcePolicy")
        if policy is not None:
            cdk.Validations.of(policy).acknowledge(
                cdk.Acknowledgment(id="AwsSolutions-IAM5[Resource::*]", reason=_ACTIONS_REASON)
            )
        return resource
