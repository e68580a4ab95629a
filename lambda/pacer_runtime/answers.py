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
    cache_write_tokens, served_latency, and expires_at (epoch seconds) only when a TTL was asked for;
    requested_tier and served_tier only when the writer asked Bedrock for a service tier: the tier it
    asked for, and the tier the response named as the one that served the call ("" when it named none).

Validity (the store is input, not truth)
    `check_item` defines a valid answer: answer (a non-empty string), model_id and request_id
    (strings), generated_at (or, only in items without a sequence, created_at: a UTC ISO-8601 time
    as writers store it, "YYYY-MM-DDTHH:MM:SS[.fraction]" with Z or +00:00, from 1970), and, when
    present, every other attribute with its type above; numbers whole and >= 0; sequence and
    generated_at at most CLOCK_SKEW_SECONDS (60 s) beyond the reader's clock. `get_answer` treats an
    invalid item as absent (logged with the rule it breaks, never a value, and counted in
    INVALID_ITEMS), and put_answer replaces it, whatever its order: its condition tests every rule a
    DynamoDB condition can (types, presence, signs, bounds, sizes), and put_answer judges the item a
    failed write returns for the rest (a fractional number, a stamp that is not a time). The
    scheduled pre-computation's DynamoDB task shares the condition, and sends a failed condition to
    put_answer (its function's second look), so it repairs such a key too.

Order
    `put_answer` writes only when no valid stored answer supersedes the new one: a stored answer
    wins when its sequence is higher, or equal with a request_id that sorts the same or higher. An
    older request redelivered late therefore never replaces a newer answer, whatever order the
    writes arrive in. An item without a sequence (written before sequences existed) is replaced.

    Units and bounds: a sequence is epoch milliseconds (the unit of SQS's SentTimestamp), or a
    producer's own order in the same unit, and is never beyond the writer's clock plus
    CLOCK_SKEW_SECONDS (the queue worker refuses a producer sequence beyond its message's
    SentTimestamp plus SEQUENCE_SKEW_MS; put_answer refuses one beyond now plus the skew). So no
    writer can pin a key: whatever it writes, a write made one skew later outranks it.

    Request ids are namespaced by writer (WRITER_PREFIXES: "batch#", "precompute#", "queue#",
    "router#", then the writer's own id), so at an equal sequence the writer kind decides, in that
    order, and within a kind the id: no producer chooses an id that outranks another writer's.

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
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from . import metrics
from .structured_log import log

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
    "CLOCK_SKEW_SECONDS",
    "INVALID_ITEMS",
    "SEQUENCE_SKEW_MS",
    "WRITER_PREFIXES",
    "InvalidItemError",
    "InvalidKeyError",
    "check_item",
    "check_key",
    "check_request_id",
    "check_sequence",
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
#: The prefix each writer puts before its own request ids (see Order in the module docstring).
WRITER_PREFIXES = {"batch": "batch#", "precompute": "precompute#", "queue": "queue#", "router": "router#"}
#: DynamoDB numbers hold 38 significant digits.
MAX_SEQUENCE = 10**38 - 1

#: How far a clock may run ahead of the reader's (or a producer's ahead of SQS's): a stored sequence
#: or generated_at beyond now plus this is invalid, and a producer sequence beyond its message's
#: SentTimestamp plus this is refused. A minute covers NTP-synchronized hosts by far; it is also the
#: longest an invalid-but-well-typed item can hold a key against a writer whose clock is right.
CLOCK_SKEW_SECONDS = 60
SEQUENCE_SKEW_MS = CLOCK_SKEW_SECONDS * 1000

#: What a valid generated_at (or created_at) looks like, so that the condition below can compare it
#: as a string: UTC in ISO-8601's extended form, "YYYY-MM-DDTHH:MM:SS", an optional fraction of 1 to
#: 6 digits, then "Z" (Step Functions' $$.State.EnteredTime) or "+00:00" (iso_utc): 20 to 32
#: characters, and strings of this form sort in time order. No earlier than the Unix epoch.
MIN_STAMP_CHARS, MAX_STAMP_CHARS = 20, 32
MIN_STAMP = "1970-01-01T00:00:00"

# put_answer's ConditionExpression (ScheduledPrecompute's "Write answer" task uses it too, with the
# names and values below). The new answer is written when nothing valid is stored, or what is stored
# is older. "Not valid" is what readers treat as absent (check_item), as far as a condition can
# test it: a required attribute missing (attribute_type is false for a missing one), any known
# attribute of the wrong type (attribute_type, with the type's name as a value), a number below 0,
# an empty answer, a sequence beyond :maxSeq, a generated_at outside MIN_STAMP..:maxGen (the
# writer's clock plus CLOCK_SKEW_SECONDS) or of a size no valid stamp has. Each comparison is
# guarded by its type test: DynamoDB never compares a string with a number (moto raises). What no
# condition can test (DynamoDB has no arithmetic or pattern in conditions: a fractional number, a
# stamp of the right size and range that is not a time) put_answer finds in the item the failed
# write returns, and replaces that exact item (see put_answer); the Step Functions writer sends a
# failed condition to put_answer (ScheduledPrecompute's "Check stored answer").
# Limits: an expression string holds at most 4 KB, and at most 300 operators or functions
# (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html, "Expression
# parameters"); tests/test_store_integrity.py counts both.
_NEWER_THAN_STORED = (
    "attribute_not_exists(#pk) OR NOT attribute_type(#seq, :typeN) OR NOT attribute_type(#rid, :typeS) "
    "OR NOT attribute_type(#ans, :typeS) OR NOT attribute_type(#mid, :typeS) OR NOT attribute_type(#gen, :typeS) "
    "OR (attribute_exists(#cre) AND NOT attribute_type(#cre, :typeS)) "
    "OR (attribute_exists(#stop) AND NOT attribute_type(#stop, :typeS)) "
    "OR (attribute_exists(#lat) AND NOT attribute_type(#lat, :typeS)) "
    "OR (attribute_exists(#rt) AND NOT attribute_type(#rt, :typeS)) "
    "OR (attribute_exists(#st) AND NOT attribute_type(#st, :typeS)) "
    "OR (attribute_exists(#sent) AND NOT attribute_type(#sent, :typeS)) "
    "OR (attribute_exists(#in) AND NOT (attribute_type(#in, :typeN) AND #in >= :zero)) "
    "OR (attribute_exists(#out) AND NOT (attribute_type(#out, :typeN) AND #out >= :zero)) "
    "OR (attribute_exists(#cr) AND NOT (attribute_type(#cr, :typeN) AND #cr >= :zero)) "
    "OR (attribute_exists(#cw) AND NOT (attribute_type(#cw, :typeN) AND #cw >= :zero)) "
    "OR (attribute_exists(#exp) AND NOT (attribute_type(#exp, :typeN) AND #exp >= :zero)) "
    "OR (attribute_type(#ans, :typeS) AND size(#ans) = :zero) "
    "OR (attribute_type(#seq, :typeN) AND NOT (#seq BETWEEN :zero AND :maxSeq)) "
    "OR (attribute_type(#gen, :typeS) AND NOT ((#gen BETWEEN :minGen AND :maxGen) "
    "AND (size(#gen) BETWEEN :minGenSize AND :maxGenSize))) "
    "OR (attribute_type(#seq, :typeN) AND #seq < :seq) "
    "OR (attribute_type(#seq, :typeN) AND #seq = :seq AND attribute_type(#rid, :typeS) AND #rid < :rid)"
)
#: The condition's ExpressionAttributeNames.
_NEWER_THAN_STORED_NAMES = {
    "#pk": "pk", "#seq": "sequence", "#rid": "request_id", "#ans": "answer", "#mid": "model_id",
    "#gen": "generated_at", "#cre": "created_at", "#stop": "stop_reason", "#lat": "served_latency",
    "#rt": "requested_tier", "#st": "served_tier",
    "#sent": "sent_at", "#in": "input_tokens", "#out": "output_tokens", "#cr": "cache_read_tokens",
    "#cw": "cache_write_tokens", "#exp": "expires_at",
}
#: The condition's constant ExpressionAttributeValues (low-level form; literals, since
#: ScheduledPrecompute reads them from this file's source). The others are per write:
#: :seq (N) and :rid (S), the new answer's sequence and request id; :maxSeq (N), the writer's epoch
#: milliseconds plus SEQUENCE_SKEW_MS; :maxGen (S), iso_utc of that instant (the same form as
#: generated_at, so the strings compare in time order). :minGen is MIN_STAMP, :minGenSize and
#: :maxGenSize are MIN_STAMP_CHARS and MAX_STAMP_CHARS.
_NEWER_THAN_STORED_CONSTANTS = {
    ":typeN": {"S": "N"}, ":typeS": {"S": "S"}, ":zero": {"N": "0"},
    ":minGen": {"S": "1970-01-01T00:00:00"}, ":minGenSize": {"N": "20"}, ":maxGenSize": {"N": "32"},
}


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
    size = _utf8_size(normalized, "key")
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
    size = _utf8_size(request_id, "requestId")
    if size > MAX_REQUEST_ID_BYTES:
        raise InvalidKeyError(
            f"requestId is {size} UTF-8 bytes; at most {MAX_REQUEST_ID_BYTES} fit in a claim key "
            f"({MAX_KEY_BYTES} bytes minus the {REQUEST_CLAIM_PREFIX!r} prefix)"
        )
    return request_id


def _utf8_size(text: str, name: str) -> int:
    """Bytes of UTF-8; InvalidKeyError for a string UTF-8 cannot hold (a lone surrogate such as
    "\ud800", which a JSON escape can carry and a cut emoji leaves)."""
    try:
        return len(text.encode())
    except UnicodeEncodeError as error:
        raise InvalidKeyError(f"{name} is not valid Unicode: a lone surrogate at character {error.start}") from None


def claim_pk(request_id: str, prefix: str = REQUEST_CLAIM_PREFIX) -> str:
    """The pk of a claim: REQUEST_CLAIM_PREFIX + request id by default, so never under KEY_CLAIM_PREFIX.
    Another prefix (e.g. the pre-computation's "claim#precompute-run#") must be a claim prefix of its own."""
    if not prefix.startswith(CLAIM_PREFIX) or prefix == CLAIM_PREFIX or prefix.startswith(KEY_CLAIM_PREFIX):
        raise ValueError(
            f"prefix={prefix!r} must start with {CLAIM_PREFIX!r} plus a kind of its own; {KEY_CLAIM_PREFIX!r} is the router's"
        )
    return prefix + request_id


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
    requested_tier: str | None = None  # the service tier asked for; None: none was
    served_tier: str | None = None  # the tier the response named ("" when it named none)
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
        if self.requested_tier is not None:
            item["requested_tier"] = {"S": self.requested_tier}
            item["served_tier"] = {"S": self.served_tier or ""}
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
        requested_tier: str | None = None,
    ) -> Answer:
        """The answer a Converse call produced (a pacer_runtime ConverseResult), stamped now, expiring
        ttl_seconds from now when the store has a TTL; with the tier the call asked for (requested_tier)
        and the one its response named (result.served_tier) when it asked for one."""
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
            requested_tier=requested_tier,
            served_tier=(getattr(result, "served_tier", None) or "") if requested_tier is not None else None,
            sent_at=sent_at,
            expires_at=math.ceil(generated + ttl_seconds) if ttl_seconds else None,
        )

    @classmethod
    def from_item(cls, item: dict[str, Any], *, now: float | None = None) -> Answer:
        """An Answer from a low-level item; InvalidItemError when check_item finds it invalid.
        Attributes missing from older items (sequence, tokens, stop_reason) get their defaults."""
        problem = check_item(item, now=now)
        if problem is not None:
            raise InvalidItemError(problem)

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
            requested_tier=item["requested_tier"]["S"] if "requested_tier" in item else None,
            served_tier=item["served_tier"]["S"] if "served_tier" in item else None,
            sent_at=item["sent_at"]["S"] if "sent_at" in item else None,
            expires_at=int(item[TTL_ATTRIBUTE]["N"]) if TTL_ATTRIBUTE in item else None,
        )


class InvalidItemError(ValueError):
    """A stored item readers treat as absent; the message names the attribute and the rule, never its value."""


#: Attributes every answer has, and their DynamoDB types (generated_at, or created_at in old items).
_REQUIRED = {"answer": "S", "model_id": "S", "request_id": "S"}
#: Attributes an answer may lack (older items), but never carries with another type.
_OPTIONAL = {
    "sequence": "N", "generated_at": "S", "created_at": "S", "stop_reason": "S", "served_latency": "S",
    "requested_tier": "S", "served_tier": "S", "sent_at": "S", "input_tokens": "N", "output_tokens": "N",
    "cache_read_tokens": "N", "cache_write_tokens": "N", TTL_ATTRIBUTE: "N",
}


def check_item(item: Any, *, now: float | None = None) -> str | None:
    """Why a stored answer item is invalid (attribute and rule, never a value), or None when valid.

    Invalid: not a map; a required attribute missing; any known attribute of the wrong type; an empty
    answer; a number attribute that is not a whole number >= 0; a sequence beyond now plus
    CLOCK_SKEW_SECONDS in milliseconds; a sequence without a generated_at (created_at stands in only
    in items without a sequence, written before both existed); a generated_at (or created_at) that is
    not a UTC ISO-8601 time in the form writers store (see MIN_STAMP_CHARS), is before 1970, or is
    beyond now plus CLOCK_SKEW_SECONDS. Readers treat an invalid item as absent, and put_answer
    replaces it whatever its order (its condition tests what a condition can, and put_answer the rest).
    """
    if not isinstance(item, dict):
        return f"the item is a {type(item).__name__}, not a map"
    now = time.time() if now is None else now
    for name, kind in {**_REQUIRED, **_OPTIONAL}.items():
        if name not in item:
            if name in _REQUIRED:
                return f"{name} is missing"
            continue
        value = item[name]
        if not isinstance(value, dict) or set(value) != {kind} or not isinstance(value[kind], str):
            found = "/".join(sorted(value)) if isinstance(value, dict) else type(value).__name__
            return f"{name} is of type {found}, not {kind}"
        if kind == "N" and not (value["N"].isascii() and value["N"].isdigit()):
            return f"{name} is not a whole number >= 0"
    if not item["answer"]["S"]:
        return "answer is empty"
    if "generated_at" not in item and ("sequence" in item or "created_at" not in item):
        return "generated_at is missing"
    if "sequence" in item and int(item["sequence"]["N"]) > now * 1000 + SEQUENCE_SKEW_MS:
        return f"sequence is beyond now plus {CLOCK_SKEW_SECONDS} s, in milliseconds"
    name = "generated_at" if "generated_at" in item else "created_at"
    stamp = item[name]["S"]
    try:
        generated = datetime.fromisoformat(stamp)
    except ValueError:
        return f"{name} is not an ISO-8601 time"
    if generated.tzinfo is None:
        return f"{name} has no time zone"
    if generated.utcoffset() != timedelta(0) or not MIN_STAMP_CHARS <= len(stamp) <= MAX_STAMP_CHARS \
            or stamp[:19] != generated.strftime("%Y-%m-%dT%H:%M:%S") or stamp[19:20] not in (".", "Z", "+"):
        return f"{name} is not in UTC as YYYY-MM-DDTHH:MM:SS[.fraction] with Z or +00:00"
    if stamp < MIN_STAMP:
        return f"{name} is before 1970"
    if generated.timestamp() > now + CLOCK_SKEW_SECONDS:
        return f"{name} is beyond now plus {CLOCK_SKEW_SECONDS} s"
    return None


#: Invalid items met by this process, by reason (log lines carry the same reasons).
INVALID_ITEMS: Counter[str] = Counter()


def _count_invalid(problem: str, met_by: str) -> None:
    """Count one invalid item: in INVALID_ITEMS, and as the InvalidStoredItems metric (EMF, per function
    inside Lambda), with the rule broken and who met it ("read" or "write") as log fields."""
    INVALID_ITEMS[problem] += 1
    metrics.emit({metrics.INVALID_STORED_ITEMS: 1}, metrics.lambda_dimensions(),
                 properties={"InvalidItemRule": problem, "MetBy": met_by})


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


def get_answer(client: Any, table: str, key: str, *, now: float | None = None) -> Answer | None:
    """The stored answer for an already normalized key (strongly consistent), or None: also when the
    stored item is invalid (check_item), which is logged (the rule broken, never a value), counted in
    INVALID_ITEMS, and left for the next put_answer to replace."""
    item = client.get_item(TableName=table, Key={PARTITION_KEY: {"S": key}}, ConsistentRead=True).get("Item")
    if item is None:
        return None
    try:
        return Answer.from_item(item, now=now)
    except InvalidItemError as error:
        _count_invalid(str(error), "read")
        log("WARN", "stored answer is invalid; treated as absent and replaced by the next write",
            reason="invalid-stored-item", problem=str(error), keyBytes=len(key.encode()))
        return None


def check_sequence(sequence: Any, *, now: float) -> int:
    """`sequence` when a writer may store it: a whole number of epoch milliseconds from 0 to now plus
    CLOCK_SKEW_SECONDS; else ValueError naming it and the range (readers would treat a later one as
    invalid, and it could hold the key against every later writer)."""
    max_sequence = int(now * 1000) + SEQUENCE_SKEW_MS
    if isinstance(sequence, bool) or not isinstance(sequence, int) or not 0 <= sequence <= max_sequence:
        raise ValueError(
            f"sequence={sequence!r} must be a whole number from 0 to now plus {CLOCK_SKEW_SECONDS} s "
            f"in epoch milliseconds (0..{max_sequence:,} now)"
        )
    return sequence


#: How many times put_answer judges the stored item again when it changes under a repair (another
#: writer wrote in between): each round is one conditional write and at most one repair.
_REPAIR_ROUNDS = 3


def put_answer(client: Any, table: str, answer: Answer, *, now: float | None = None) -> bool:
    """Write `answer` unless a valid stored answer supersedes it; True when written, False when superseded.

    The write's condition (_NEWER_THAN_STORED) replaces what it can tell is invalid. When it fails,
    DynamoDB returns the stored item (ReturnValuesOnConditionCheckFailure, at no read cost); if
    check_item finds that item invalid in a way no condition can test (a fractional number, a stamp
    that is not a time), the answer replaces that exact item: a second write conditioned on every
    attribute still being what was returned, so a valid answer written meanwhile is never lost.

    ValueError for a sequence outside 0..now + CLOCK_SKEW_SECONDS in milliseconds: readers would
    treat such an answer as invalid (and it could hold the key against every later writer).
    """
    now = time.time() if now is None else now
    check_sequence(answer.sequence, now=now)
    max_sequence = int(now * 1000) + SEQUENCE_SKEW_MS
    item = answer.to_item()
    for _ in range(_REPAIR_ROUNDS):
        stored = _conditional_put(
            client, table, item, _NEWER_THAN_STORED, dict(_NEWER_THAN_STORED_NAMES),
            {
                **_NEWER_THAN_STORED_CONSTANTS,
                ":seq": {"N": str(answer.sequence)},
                ":rid": {"S": answer.request_id},
                ":maxSeq": {"N": str(max_sequence)},
                ":maxGen": {"S": iso_utc(max_sequence / 1000)},
            },
        )
        if stored is _WRITTEN:
            return True
        problem = check_item(stored, now=now) if stored is not None else None
        if problem is None:  # a valid answer that supersedes this one (or no item returned)
            return False
        log("WARN", "stored answer is invalid in a way the write condition cannot test; replacing that exact item",
            reason="invalid-stored-item-replaced", problem=problem, keyBytes=len(answer.key.encode()))
        _count_invalid(problem, "write")
        condition, names, values = _unchanged(stored)
        if _conditional_put(client, table, item, condition, names, values) is _WRITTEN:
            return True
        # Changed since it was returned: judge what is stored now.
    return False


#: What _conditional_put returns for a write that succeeded.
_WRITTEN: Any = object()


def _conditional_put(
    client: Any, table: str, item: dict, condition: str, names: dict[str, str], values: dict[str, Any]
) -> Any:
    """_WRITTEN, or the stored item that failed the condition (None if DynamoDB returned none)."""
    try:
        client.put_item(
            TableName=table, Item=item, ConditionExpression=condition, ExpressionAttributeNames=names,
            ExpressionAttributeValues=values, ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
            return error.response.get("Item")
        raise
    return _WRITTEN


def _unchanged(stored: dict[str, Any]) -> tuple[str, dict[str, str], dict[str, Any]]:
    """A condition true only while the item under the key still has exactly `stored`'s value for every
    attribute the schema knows (and lacks the ones it lacked). Only a well-typed item reaches it (the
    main condition replaces every other), so each comparison is of like types."""
    parts, names, values = [], {}, {}
    for index, name in enumerate([PARTITION_KEY, *_REQUIRED, *_OPTIONAL]):
        names[f"#a{index}"] = name
        if name in stored:
            values[f":a{index}"] = stored[name]
            parts.append(f"#a{index} = :a{index}")
        else:
            parts.append(f"attribute_not_exists(#a{index})")
    return " AND ".join(parts), names, values


def claim(
    client: Any, table: str, request_id: str, *, seconds: float, now: float | None = None,
    prefix: str = REQUEST_CLAIM_PREFIX,
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
                PARTITION_KEY: {"S": claim_pk(request_id, prefix)},
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


def release(client: Any, table: str, request_id: str, owner: str, *, prefix: str = REQUEST_CLAIM_PREFIX) -> bool:
    """Delete a claim if `owner` still holds it (it may have expired and been taken over); True if deleted."""
    try:
        client.delete_item(
            TableName=table,
            Key={PARTITION_KEY: {"S": claim_pk(request_id, prefix)}},
            ConditionExpression="#owner = :owner",
            ExpressionAttributeNames={"#owner": "owner"},
            ExpressionAttributeValues={":owner": {"S": owner}},
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
            return False
        raise
    return True
