"""What the constructs share about S3 objects: the key length limit, the KMS key of an SSE-KMS bucket,
and the data buckets a construct creates with the bucket their server access logs go to.

A bucket encrypted with a customer-managed KMS key (SSE-KMS) serves its objects only to a caller that
may also use the key, so every role that reads or writes a bucket's objects is granted the bucket's
key. The key is the one the bucket knows (`bucket.encryption_key`: an s3.Bucket built with a key, or
s3.Bucket.from_bucket_attributes(encryption_key=...)); a bucket imported by name or ARN knows none, so
every bucket prop has a `<prop>_key` prop beside it for that key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3

from constructs import Construct

from .checks import Checks, is_token

__all__ = [
    "KMS_READ_ACTIONS",
    "KMS_WRITE_ACTIONS",
    "S3_MAX_KEY_BYTES",
    "bucket_key",
    "check_key_bytes",
    "data_bucket",
    "grant_keys",
    "new_access_logs_bucket",
]

#: What a caller of S3 needs on the key of an SSE-KMS object. Amazon S3 user guide, "Using server-side
#: encryption with AWS KMS keys (SSE-KMS)", Permissions (https://docs.aws.amazon.com/AmazonS3/latest/
#: userguide/UsingKMSEncryption.html): "To download an object encrypted with an AWS KMS key, you need
#: kms:Decrypt permissions" ...
KMS_READ_ACTIONS = ("kms:Decrypt",)
#: ... "To upload an object encrypted with an AWS KMS key to Amazon S3, you need kms:GenerateDataKey
#: permissions on the key"; and a multipart upload needs "the kms:Decrypt and kms:GenerateDataKey actions
#: on the key" (S3 API reference, CreateMultipartUpload, general purpose bucket permissions:
#: https://docs.aws.amazon.com/AmazonS3/latest/API/API_CreateMultipartUpload.html; the same text is in
#: botocore's s3 model). Exactly GenerateDataKey, the action the sources name: the GenerateDataKey* family
#: would also allow GenerateDataKeyPair and ...WithoutPlaintext, which no S3 source asks for.
KMS_WRITE_ACTIONS = ("kms:GenerateDataKey", "kms:Decrypt")

#: The longest S3 object key, prefix included: "a maximum length of 1,024 bytes" of UTF-8
#: (https://docs.aws.amazon.com/AmazonS3/latest/userguide/object-keys.html).
S3_MAX_KEY_BYTES = 1024


def check_key_bytes(check: Checks, name: str, value: Any, what: str) -> bool:
    """An S3 key (or key prefix) `name` within S3_MAX_KEY_BYTES of UTF-8; `what` says what the key is.

    Counted in bytes, not characters: 513 'é' are 1,026 bytes. A deploy-time key is S3's to judge, and
    a value that is no string is left to the prop's own type check."""
    if not isinstance(value, str) or is_token(value):
        return True
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as error:
        return check.fail(
            f"{name} is not valid Unicode (a lone surrogate at character {error.start}), so S3 can hold no such "
            "key: fix the string", id=f"{name}.not-unicode"
        )
    return check.rule(
        size <= S3_MAX_KEY_BYTES,
        f"{name} is {size:,} bytes of UTF-8; S3 keys are at most {S3_MAX_KEY_BYTES:,} bytes, prefix included, "
        f"and {name} is {what}: shorten it",
        id=f"{name}.too-long",
    )


def bucket_key(
    check: Checks, *, bucket_name: str, bucket: Any, key_name: str, key: Any, without: str | None = None
) -> kms.IKey | None:
    """The KMS key that encrypts `bucket` (the prop `bucket_name`): the one the bucket knows, else `key`,
    the prop `key_name` a user passes for a bucket imported without it. None: no customer-managed key.

    `key` is refused when its bucket is not given (`without` says why, e.g. where the objects go then)
    and beside a bucket that knows another key, whose grants would name a key that encrypts nothing
    there. The same key twice (the object, or the same ARN) is accepted."""
    known: kms.IKey | None = getattr(bucket, "encryption_key", None)  # None too for a wrong type, refused by its own check
    if key is None:
        return known
    if not check.instance(key_name, key, kms.IKey, "a kms.Key, e.g. kms.Key.from_key_arn(scope, id, key_arn)"):
        return None
    if bucket is None:
        check.fail(without or f"{key_name} is set without {bucket_name}, so it would be ignored: pass {bucket_name} too, or drop {key_name}", id=f"{key_name}.without-bucket")
        return None
    if known is not None and known.key_arn != key.key_arn:
        check.fail(
            f"{key_name} is {key.node.path} but {bucket_name} already knows its own key, {known.node.path}: the "
            f"grants would name a key that does not encrypt the bucket; drop {key_name}", id=f"{key_name}.other-than-bucket-key"
        )
        return known
    return key


def grant_keys(grantee: iam.IGrantable, *uses: tuple[kms.IKey | None, Sequence[str]]) -> None:
    """Each (key, actions) to `grantee`, one statement per key (a key read and written gets both sets), on
    exactly the key's ARN: an IAM policy names a KMS key by its key ARN (AWS KMS developer guide,
    https://docs.aws.amazon.com/kms/latest/developerguide/cmks-in-iam-policies.html). A use without a key
    (SSE-S3, or a bucket whose key is not known) grants nothing.

    An identity-policy statement of its own, not kms.IKey.grant(): aws-cdk-lib 2.275's KeyGrants.actions
    writes "*" as the resource of a key in another account or Region. Neither form has a kms:ViaService
    condition (aws-cdk-lib's key grants add none either): the grantee may use the key outside S3 too, for
    these actions only. A key policy that does not trust the account's IAM policies must grant the role
    itself; that is the key owner's to add."""
    actions: dict[str, tuple[kms.IKey, dict[str, None]]] = {}
    for key, wanted in uses:
        if key is not None:
            actions.setdefault(key.key_arn, (key, {}))[1].update(dict.fromkeys(wanted))
    for key, names in actions.values():
        grantee.grant_principal.add_to_principal_policy(iam.PolicyStatement(actions=list(names), resources=[key.key_arn]))


def new_access_logs_bucket(scope: Construct, *, logged: str) -> s3.Bucket:
    """A new bucket ("AccessLogs") for the server access logs of `scope`'s own buckets (`logged` names
    them, for the cdk-nag acknowledgement: e.g. "the results bucket's"). S3-managed encryption, the
    only one S3 log delivery supports; the logs expire after a year. `scope` sets the
    @aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy context before its first child, so delivery is
    granted by bucket policy, not an ACL."""
    bucket = s3.Bucket(
        scope, "AccessLogs",
        encryption=s3.BucketEncryption.S3_MANAGED,  # the only encryption S3 log delivery supports
        enforce_ssl=True,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        removal_policy=cdk.RemovalPolicy.RETAIN,
        lifecycle_rules=[s3.LifecycleRule(expiration=cdk.Duration.days(365))],
    )
    cdk.Validations.of(bucket).acknowledge(cdk.Acknowledgment(
        id="AwsSolutions-S1",
        reason=f"this bucket receives {logged} server access logs; logging it too would log its own log deliveries",
    ))
    return bucket


def data_bucket(
    scope: Construct, id: str, *, key: kms.IKey | None, access_logs: s3.IBucket,
    lifecycle_rules: Sequence[s3.LifecycleRule] | None = None,
) -> s3.Bucket:
    """A bucket a construct creates for its data: encrypted with `key` (SSE-KMS, bucket key on) or
    S3-managed, TLS only, public access blocked, its server access logs under "<id>/" in
    `access_logs`, retained on delete."""
    return s3.Bucket(
        scope, id,
        encryption=s3.BucketEncryption.KMS if key is not None else s3.BucketEncryption.S3_MANAGED,
        encryption_key=key,
        bucket_key_enabled=key is not None or None,
        enforce_ssl=True,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        server_access_logs_bucket=access_logs,
        server_access_logs_prefix=f"{id}/",
        removal_policy=cdk.RemovalPolicy.RETAIN,
        lifecycle_rules=lifecycle_rules,
    )
