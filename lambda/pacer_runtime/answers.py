"""The answer store's schema: one DynamoDB table of generated answers, shared by every writer and reader.

Anything that stores or serves answers (the queue worker today; pre-computation and a router later)
goes through this module, so the key rules, the attributes and the write order are defined once.
Every function takes a low-level DynamoDB client (`boto3.client("dynamodb")`: creating the resource
layer costs about 100 ms of cold start) and a table name. The table has one string partition key
`pk` and no sort key.

Keys
    `normalize_key` is the one key rule: Unicode NFC, whitespace trimmed at both ends and each inner
    run (spaces, tabs, newlines) collapsed to one space, then case-folded, so "Review#12 ",
    "review#12" and "REVIEW#12" are one answer. Readers must normalize the same way. A normalized key
    is at most 2,048 UTF-8 bytes (DynamoDB's partition key limit) and may not start with `claim#`,
    the prefix reserved for claims.

Answers (item under pk = the normalized key)
    answer, model_id, request_id, sequence (the order of the request that produced it), sent_at and
    generated_at (ISO-8601 UTC), stop_reason, input_tokens, output_tokens, cache_read_tokens,
    cache_write_tokens, served_latency, and expires_at (epoch seconds) only when a TTL was asked for.

Order
    `put_answer` writes only when no stored answer supersedes the new one: a stored answer wins when
    its sequence is higher, or equal with a request_id that sorts the same or higher. An older
    request redelivered late therefore never replaces a newer answer, whatever order the writes
    arrive in. An item without a sequence (written before sequences existed) is replaced.

Claims (items under pk = "claim#...", never an answer's key)
    Three kinds share the `claim#` prefix, each under its own sub-prefix so no writer can produce
    another's pk: the worker's per-request claims under "claim#req#" + request id (below), the
    router's per-key claims under "claim#key#" + normalized key (`KEY_CLAIM_PREFIX`, reserved for
    the router, which overwrites them with PutItem and never deletes them; see
    pacer_runtime.key_claims), and the pre-computation's run lock under "claim#precompute-run#" +
    state machine name.

Per-request claims (item under pk = "claim#req#" + request id)
    An in-progress marker with an owner token and an expiry, as Powertools' idempotency utility
    keeps: `claim` succeeds for one caller at a time until the claim is released or expires, so
    concurrent deliveries of one request make one model call, and a claim left by a crashed caller
    stops blocking once `expires_at` passes. Claims live under their own prefix, never under an
    answer's key, so a reader never finds a claim where it expects an answer; `expires_at` doubles
    as the table's TTL attribute, which cleans up the claims crashed callers leave behind.
"""

from __future__ import annotations

import math
import os
import time
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

__all__ = [
    "CLAIM_PREFIX",
    "KEY_CLAIM_PREFIX",
    "REQUEST_CLAIM_PREFIX",
    "claim_pk",
    "MAX_KEY_BYTES",
    "MAX_REQUEST_ID_BYTES",
    "PARTITION_KEY",
    "TTL_ATTRIBUTE",
    "Answer",
    "InvalidKeyError",
    "check_key",
    "check_request_id",
    "claim",
    "store_client",
    "get_answer",
    "normalize_key",
    "put_answer",
    "release",
    "supersedes",
]

PARTITION_KEY = "pk"
#: Every claim's pk starts with this; an answer's key may not.
CLAIM_PREFIX = "claim#"
#: The worker's per-request claims: REQUEST_CLAIM_PREFIX + request id. Its own sub-prefix, so no
#: request id (whatever its text) makes a pk under KEY_CLAIM_PREFIX or the pre-computation's lock.
REQUEST_CLAIM_PREFIX = CLAIM_PREFIX + "req#"
#: Reserved for the router's per-key claims (KEY_CLAIM_PREFIX + normalized key), which the router
#: writes and overwrites with PutItem and never deletes. Nothing in this module writes under it.
KEY_CLAIM_PREFIX = CLAIM_PREFIX + "key#"
TTL_ATTRIBUTE = "expires_at"
#: DynamoDB's limit on a partition key value, in UTF-8 bytes.
MAX_KEY_BYTES = 2048
#: A request id is stored under REQUEST_CLAIM_PREFIX + id, so the prefix's bytes come off the limit.
MAX_REQUEST_ID_BYTES = MAX_KEY_BYTES - len(REQUEST_CLAIM_PREFIX.encode())
#: DynamoDB numbers hold 38 significant digits.
MAX_SEQUENCE = 10**38 - 1

# A stored answer wins unless it lacks an order, is older, or is equally old with a smaller request id.
_NEWER_THAN_STORED = (
    "attribute_not_exists(#pk) OR attribute_not_exists(#seq) OR #seq < :seq "
    "OR (#seq = :seq AND #rid < :rid)"
)


class InvalidKeyError(ValueError):
    """A key or request id DynamoDB cannot store, or one that collides with the claim prefix."""


def normalize_key(key: str) -> str:
    """The stored form of a key: NFC, whitespace trimmed and collapsed, case-folded."""
    return " ".join(unicodedata.normalize("NFC", key).split()).casefold()


def check_key(key: Any) -> str:
    """The normalized key, or InvalidKeyError saying which rule it breaks (never echoing the key)."""
    if not isinstance(key, str):
        raise InvalidKeyError(f"key must be a string, not a {type(key).__name__}")
    normalized = normalize_key(key)
    if not normalized:
        raise InvalidKeyError("key is empty once whitespace is trimmed")
    size = len(normalized.encode())
    if size > MAX_KEY_BYTES:
        raise InvalidKeyError(
            f"key is {size} UTF-8 bytes once normalized; DynamoDB's partition key limit is {MAX_KEY_BYTES}: "
            "shorten it (e.g. a hash of the long part)"
        )
    if normalized.startswith(CLAIM_PREFIX):
        raise InvalidKeyError(f"key starts with {CLAIM_PREFIX!r}, the prefix reserved for claims: use another prefix")
    return normalized


def check_request_id(request_id: Any) -> str:
    """A request id as given (ids are compared exactly, not normalized), or InvalidKeyError."""
    if not isinstance(request_id, str) or not request_id:
        kind = "an empty string" if request_id == "" else f"a {type(request_id).__name__}"
        raise InvalidKeyError(f"requestId must be a non-empty string, not {kind}")
    size = len(request_id.encode())
    if size > MAX_REQUEST_ID_BYTES:
        raise InvalidKeyError(
            f"requestId is {size} UTF-8 bytes; at most {MAX_REQUEST_ID_BYTES} fit in a claim key "
            f"({MAX_KEY_BYTES} bytes minus the {REQUEST_CLAIM_PREFIX!r} prefix)"
        )
    return request_id


def claim_pk(request_id: str) -> str:
    """The pk of a request's claim: under REQUEST_CLAIM_PREFIX, so never under KEY_CLAIM_PREFIX."""
    return REQUEST_CLAIM_PREFIX + request_id


@dataclass(frozen=True)
class Answer:
    """One stored answer. `sequence` orders answers of one key (see the module docstring)."""

    key: str
    text: str
    model_id: str
    request_id: str
    sequence: int
    stop_reason: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    served_latency: str = "standard"
    generated_at: str = ""
    sent_at: str | None = None
    expires_at: int | None = None

    def to_item(self) -> dict[str, dict[str, str]]:
        """The low-level DynamoDB item."""
        item = {
            PARTITION_KEY: {"S": self.key},
            "answer": {"S": self.text},
            "model_id": {"S": self.model_id},
            "request_id": {"S": self.request_id},
            "sequence": {"N": str(self.sequence)},
            "stop_reason": {"S": self.stop_reason},
            "input_tokens": {"N": str(self.input_tokens)},
            "output_tokens": {"N": str(self.output_tokens)},
            "cache_read_tokens": {"N": str(self.cache_read_tokens)},
            "cache_write_tokens": {"N": str(self.cache_write_tokens)},
            "served_latency": {"S": self.served_latency},
            "generated_at": {"S": self.generated_at or iso_utc(time.time())},
        }
        if self.sent_at is not None:
            item["sent_at"] = {"S": self.sent_at}
        if self.expires_at is not None:
            item[TTL_ATTRIBUTE] = {"N": str(self.expires_at)}
        return item

    @classmethod
    def from_result(
        cls,
        result: Any,
        *,
        key: str,
        model_id: str,
        request_id: str,
        sequence: int,
        sent_at: str | None = None,
        ttl_seconds: int | None = None,
        now: float | None = None,
    ) -> Answer:
        """The answer a Converse call produced (a pacer_runtime ConverseResult), stamped now, expiring
        ttl_seconds from now when the store has a TTL."""
        generated = time.time() if now is None else now
        return cls(
            key=key,
            text=result.text,
            model_id=model_id,
            request_id=request_id,
            sequence=sequence,
            stop_reason=result.stop_reason,
            input_tokens=result.input_tokens,
            output_tokens=result.output_tokens,
            cache_read_tokens=result.cache_read_tokens,
            cache_write_tokens=result.cache_write_tokens,
            served_latency=result.served_latency,
            generated_at=iso_utc(generated),
            sent_at=sent_at,
            expires_at=math.ceil(generated + ttl_seconds) if ttl_seconds else None,
        )

    @classmethod
    def from_item(cls, item: dict[str, dict[str, str]]) -> Answer:
        """An Answer from a low-level item; attributes missing from older items get their defaults."""

        def text(name: str, default: str = "") -> str:
            return item[name]["S"] if name in item else default

        def number(name: str) -> int:
            return int(item[name]["N"]) if name in item else 0

        return cls(
            key=text(PARTITION_KEY),
            text=text("answer"),
            model_id=text("model_id"),
            request_id=text("request_id"),
            sequence=number("sequence") if "sequence" in item else -1,
            stop_reason=text("stop_reason"),
            input_tokens=number("input_tokens"),
            output_tokens=number("output_tokens"),
            cache_read_tokens=number("cache_read_tokens"),
            cache_write_tokens=number("cache_write_tokens"),
            served_latency=text("served_latency", "standard"),
            generated_at=text("generated_at") or text("created_at"),
            sent_at=item["sent_at"]["S"] if "sent_at" in item else None,
            expires_at=int(item[TTL_ATTRIBUTE]["N"]) if TTL_ATTRIBUTE in item else None,
        )


def store_client(*, max_pool_connections: int = 2, max_attempts: int = 3, read_timeout: float = 5.0) -> Any:
    """The low-level DynamoDB client every writer and reader uses: create it once per process (module
    scope), with a pool for the threads that share it and short, bounded retries (a store call
    takes milliseconds; a slow one is better retried than waited on)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "dynamodb",
        config=Config(
            max_pool_connections=max_pool_connections,
            retries={"total_max_attempts": max_attempts, "mode": "standard"},
            connect_timeout=2,
            read_timeout=read_timeout,
        ),
    )


def iso_utc(epoch_seconds: float) -> str:
    """ISO-8601 in UTC with milliseconds, e.g. 2026-11-30T01:14:43.120+00:00."""
    return datetime.fromtimestamp(epoch_seconds, UTC).isoformat(timespec="milliseconds")


def supersedes(stored: Answer, request_id: str, sequence: int) -> bool:
    """True when `stored` makes a request (request_id, sequence) pointless: it answers that very
    request, or a newer one. The same rule as put_answer's condition, checked before paying for a call."""
    if stored.request_id == request_id:
        return True
    if stored.sequence < 0:  # an item without an order is replaced by anything
        return False
    return stored.sequence > sequence or (stored.sequence == sequence and stored.request_id >= request_id)


def get_answer(client: Any, table: str, key: str) -> Answer | None:
    """The stored answer for an already normalized key (strongly consistent), or None."""
    item = client.get_item(TableName=table, Key={PARTITION_KEY: {"S": key}}, ConsistentRead=True).get("Item")
    if item is None or item.get("answer") is None:
        return None
    return Answer.from_item(item)


def put_answer(client: Any, table: str, answer: Answer) -> bool:
    """Write `answer` unless a stored answer supersedes it; True when written, False when superseded."""
    if not 0 <= answer.sequence <= MAX_SEQUENCE:
        raise ValueError(f"sequence={answer.sequence} must be within 0..{MAX_SEQUENCE} (a DynamoDB number)")
    try:
        client.put_item(
            TableName=table,
            Item=answer.to_item(),
            ConditionExpression=_NEWER_THAN_STORED,
            ExpressionAttributeNames={"#pk": PARTITION_KEY, "#seq": "sequence", "#rid": "request_id"},
            ExpressionAttributeValues={
                ":seq": {"N": str(answer.sequence)},
                ":rid": {"S": answer.request_id},
            },
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
            return False
        raise
    return True


def claim(
    client: Any, table: str, request_id: str, *, seconds: float, now: float | None = None
) -> str | None:
    """Claim a request for `seconds`; returns the owner token, or None while another claim is unexpired.

    The claim expires on its own (a crashed caller never blocks the request for longer than
    `seconds`); release it as soon as the work is done so a redelivery proceeds at once.
    """
    if not seconds > 0 or not math.isfinite(seconds):
        raise ValueError(f"seconds={seconds!r} must be a positive number: how long the work may take")
    now = time.time() if now is None else now
    owner = os.urandom(12).hex()
    try:
        client.put_item(
            TableName=table,
            Item={
                PARTITION_KEY: {"S": claim_pk(request_id)},
                "request_id": {"S": request_id},
                "owner": {"S": owner},
                "claimed_at": {"S": iso_utc(now)},
                TTL_ATTRIBUTE: {"N": str(math.ceil(now + seconds))},
            },
            ConditionExpression="attribute_not_exists(#pk) OR #exp < :now",
            ExpressionAttributeNames={"#pk": PARTITION_KEY, "#exp": TTL_ATTRIBUTE},
            ExpressionAttributeValues={":now": {"N": str(math.floor(now))}},
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
            return None
        raise
    return owner


def release(client: Any, table: str, request_id: str, owner: str) -> bool:
    """Delete a claim if `owner` still holds it (it may have expired and been taken over); True if deleted."""
    try:
        client.delete_item(
            TableName=table,
            Key={PARTITION_KEY: {"S": claim_pk(request_id)}},
            ConditionExpression="#owner = :owner",
            ExpressionAttributeNames={"#owner": "owner"},
            ExpressionAttributeValues={":owner": {"S": owner}},
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
            return False
        raise
    return True
