"""What the constructs that keep items in a DynamoDB table of the user's share (AnswerStore, QuotaLedger):
the check of a `table=` they are given, and the grant of its customer-managed key."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms

from constructs import Construct

from .checks import Checks, warn

__all__ = ["KMS_VIA_SERVICE", "check_existing_table", "grant_table_key", "table_or_new"]

#: KMS condition key: the request must come through the named service ("kms:ViaService", AWS KMS
#: Developer Guide, conditions-kms.html#conditions-kms-via-service); DynamoDB's value is
#: "dynamodb.<region>.amazonaws.com" (the aws/dynamodb key policy shown in services-dynamodb.html).
KMS_VIA_SERVICE = "kms:ViaService"
_TYPE_NAMES = {"S": "a string", "N": "a number", "B": "binary"}


def check_existing_table(scope: Construct, check: Checks, table: Any, *, partition_key: str, ttl_attribute: str,
                         purpose: str) -> bool:
    """Refuse a table defined in this app unless its partition key is the string `partition_key` with no
    sort key (every call is by that key alone); warn that an imported one cannot be checked. purpose
    completes the refusal: "<purpose> by a string partition key named ...". True when the table's
    schema was read (a table defined in this app), so a caller may check more of it."""
    if not (hasattr(table, "table_arn") and hasattr(table, "node")):
        return False  # not a table: check.instance already refused it
    keys = _table_keys(table)
    if keys is None:
        warn(
            scope,
            "table-unverified",
            f"table {table.node.path} is imported, so its key schema cannot be read: check that its partition "
            f"key is a string named '{partition_key}', that it has no sort key, and that its TTL attribute is "
            f"'{ttl_attribute}'",
        )
        return False
    partition, sort = keys
    check.rule(
        partition == (partition_key, "S") and not sort,
        f"table {table.node.path} has partition key {partition[0]!r} ({_TYPE_NAMES.get(partition[1], partition[1])})"
        + (f" and sort key {sort[0][0]!r}" if sort else "")
        + f"; {purpose} by a string partition key named '{partition_key}' and no sort key. "
        "Use such a table or omit table to get one",
        id="table.key-schema",
    )
    return True



def table_or_new(scope: Construct, table: dynamodb.ITable | None, *, partition_key: str, ttl_attribute: str,
                 encryption_key: kms.IKey | None, removal_policy: cdk.RemovalPolicy) -> dynamodb.ITable:
    """`table`, or a new one (id "Table") keyed by the string `partition_key` alone: on-demand, point-in-time
    recovery, TTL on `ttl_attribute`, encrypted with `encryption_key` or else an AWS-managed key."""
    return table or dynamodb.Table(
        scope,
        "Table",
        partition_key=dynamodb.Attribute(name=partition_key, type=dynamodb.AttributeType.STRING),
        billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
        point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(point_in_time_recovery_enabled=True),
        time_to_live_attribute=ttl_attribute,
        removal_policy=removal_policy,
        **(
            dict(encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED, encryption_key=encryption_key)
            if encryption_key is not None
            else dict(encryption=dynamodb.TableEncryption.AWS_MANAGED)
        ),
    )

def grant_table_key(table: Any, grantee: iam.IGrantable, key_actions: tuple[str, ...]) -> None:
    """Table.grant grants no KMS actions; a table's customer-managed key needs them, and only through
    DynamoDB in the table's Region: the role cannot use the key directly."""
    key = getattr(table, "encryption_key", None)
    if key is not None:
        iam.Grant.add_to_principal(
            grantee=grantee,
            actions=list(key_actions),
            resource_arns=[key.key_arn],
            conditions={"StringEquals": {KMS_VIA_SERVICE: f"dynamodb.{cdk.Stack.of(table).region}.amazonaws.com"}},
        )


def _table_keys(table: Any) -> tuple[tuple[str, str], list[tuple[str, str]]] | None:
    """((partition name, type), [(sort name, type)]) of a table defined in this app, None if imported."""
    if isinstance(table, dynamodb.Table):
        schema = table.schema_v2()
        codes = {dynamodb.AttributeType.STRING: "S", dynamodb.AttributeType.NUMBER: "N", dynamodb.AttributeType.BINARY: "B"}
        (partition, *more) = schema.partition_keys
        if more:  # a multi-attribute partition key is not a plain 'pk'
            return (("+".join(a.name for a in schema.partition_keys), "composite"), [])
        return (partition.name, codes[partition.type]), [(a.name, codes[a.type]) for a in schema.sort_keys]
    if isinstance(table, dynamodb.TableV2):
        stack = cdk.Stack.of(table)
        cfn = table.node.default_child
        types = {d["attributeName"]: d["attributeType"] for d in stack.resolve(cfn.attribute_definitions)}  # type: ignore[union-attr]
        schema = stack.resolve(cfn.key_schema)  # type: ignore[union-attr]
        hash_keys = [k["attributeName"] for k in schema if k["keyType"] == "HASH"]
        ranges = [(k["attributeName"], types.get(k["attributeName"], "?")) for k in schema if k["keyType"] == "RANGE"]
        return (hash_keys[0], types.get(hash_keys[0], "?")), ranges
    return None
