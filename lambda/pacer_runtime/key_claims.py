"""Per-key claims: concurrent misses for one answer key make one model call, across processes.

The queue worker claims a request id (`answers.claim`); a router claims an answer key, so fifty
callers missing "ticker-morning#aapl" at once (in fifty Lambda environments) make one model call:
the caller that takes the claim calls the model and writes the answer, the others poll the store
for it within a deadline.

Items live under pk = "claim#key#" + the normalized key (keys too long for that prefix use
"claim#key#sha256:" + the key's SHA-256 in hex), a prefix that `answers.check_key` refuses for
answers, so a reader never finds a claim where it expects an answer. Every write is a conditional
PutItem: a claim is taken when no claim exists, or the one there has expired (or is unreadable:
a non-number or far-future `expires_at` never blocks a key for good); it is released by
overwriting it with an `expires_at` in the past, conditioned on the owner, so a writer needs no
dynamodb:DeleteItem and a late release never frees a claim someone else took over. `expires_at`
doubles as the table's TTL attribute, which removes released and abandoned claims.

A holder whose call failed transiently (the model throttled) records the failure when it
releases; the next claimant gets it back (`Claim.previous_failure`, read atomically with the
claim through ReturnValues=ALL_OLD) and can answer its own caller with the same retry-after
instead of paying for another call that would fail the same way.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from .answers import KEY_CLAIM_PREFIX, MAX_KEY_BYTES, PARTITION_KEY, TTL_ATTRIBUTE, iso_utc

__all__ = ["KEY_CLAIM_PREFIX", "MAX_CLAIM_SECONDS", "Claim", "Failure", "claim", "claim_pk", "release"]
#: Lambda's maximum timeout (15 minutes) plus a minute of clock skew: a claim that claims to last
#: longer was not written by a router and is treated as expired.
MAX_CLAIM_SECONDS = 15 * 60 + 60
#: DynamoDB's condition failure code (botocore dynamodb service-2.json: ConditionalCheckFailedException).
CONDITION_FAILED = "ConditionalCheckFailedException"

# Free when absent, expired, or unreadable (expires_at not a number, or beyond any router's claim).
# attribute_type(path, type) with type "N": DynamoDB's condition functions
# (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.OperatorsAndFunctions.html).
_FREE = (
    "attribute_not_exists(#pk) OR NOT attribute_type(#exp, :number) OR #exp < :now OR #exp > :far"
)


@dataclass(frozen=True)
class Failure:
    """A transient failure a releasing holder recorded: the status and error its caller got."""

    status: int
    error: str
    failed_at: float  # when the call failed (kept when a claimant passes the failure on)
    retry_after: int


@dataclass(frozen=True)
class Claim:
    """A claim taken: the owner token, and the failure the previous holder recorded (if any)."""

    owner: str
    previous_failure: Failure | None = None


def claim_pk(key: str) -> str:
    """The claim item's partition key for an already normalized answer key."""
    pk = KEY_CLAIM_PREFIX + key
    if len(pk.encode()) <= MAX_KEY_BYTES:
        return pk
    return KEY_CLAIM_PREFIX + "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def claim(client: Any, table: str, key: str, *, seconds: float, now: float | None = None) -> Claim | None:
    """Claim `key` for `seconds`; the Claim, or None while another unexpired claim holds it."""
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_CLAIM_SECONDS):
        raise ValueError(f"seconds={seconds!r} must be within (0, {MAX_CLAIM_SECONDS}]: how long the call may take")
    now = time.time() if now is None else now
    owner = os.urandom(12).hex()
    try:
        response = client.put_item(
            TableName=table,
            Item={
                PARTITION_KEY: {"S": claim_pk(key)},
                "owner": {"S": owner},
                "claimed_at": {"S": iso_utc(now)},
                TTL_ATTRIBUTE: {"N": str(math.ceil(now + seconds))},
            },
            ConditionExpression=_FREE,
            ExpressionAttributeNames={"#pk": PARTITION_KEY, "#exp": TTL_ATTRIBUTE},
            ExpressionAttributeValues={
                ":number": {"S": "N"},
                ":now": {"N": str(math.floor(now))},
                ":far": {"N": str(math.ceil(now + MAX_CLAIM_SECONDS))},
            },
            ReturnValues="ALL_OLD",  # the item replaced, read atomically with the write (botocore ReturnValue enum)
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == CONDITION_FAILED:
            return None
        raise
    return Claim(owner, _failure(response.get("Attributes") or {}))


def _failure(item: dict[str, Any]) -> Failure | None:
    """The failure a released claim records; None when it records none or cannot be read."""
    try:
        return Failure(
            status=int(item["failure_status"]["N"]),
            error=str(item["failure_error"]["S"]),
            failed_at=float(item["failed_epoch"]["N"]),
            retry_after=max(1, int(item["retry_after"]["N"])),
        )
    except (KeyError, TypeError, ValueError):
        return None


def release(
    client: Any, table: str, key: str, owner: str, *, failure: Failure | None = None, now: float | None = None
) -> bool:
    """Expire the claim if `owner` still holds it (PutItem, no DeleteItem), recording `failure` for the
    next claimant; True if released, False if the claim had expired and someone else took it."""
    now = time.time() if now is None else now
    item = {
        PARTITION_KEY: {"S": claim_pk(key)},
        "owner": {"S": owner},
        "released_at": {"S": iso_utc(now)},
        TTL_ATTRIBUTE: {"N": str(math.floor(now) - 1)},
    }
    if failure is not None:
        item |= {
            "failure_status": {"N": str(failure.status)},
            "failure_error": {"S": failure.error},
            "failed_epoch": {"N": f"{failure.failed_at:.3f}"},
            "retry_after": {"N": str(failure.retry_after)},
        }
    try:
        client.put_item(
            TableName=table,
            Item=item,
            ConditionExpression="#owner = :owner",
            ExpressionAttributeNames={"#owner": "owner"},
            ExpressionAttributeValues={":owner": {"S": owner}},
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == CONDITION_FAILED:
            return False
        raise
    return True
