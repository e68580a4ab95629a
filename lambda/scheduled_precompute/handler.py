"""ScheduledPrecompute's function: the run's clock and the inline keys normalized (its first step),
and the second look at a key whose answer write failed its condition (a stored answer it may not replace).

Step Functions (JSONPath) can neither read the clock as a number nor change a string's case, and
both are needed before any answer is written:

- Every writer of the answer store orders answers by `sequence`, epoch milliseconds for writers
  that have no producer order of their own (the queue worker's default, the router's write-back).
  A run's answers take the run's start in milliseconds, so tomorrow's run replaces today's
  answers and never a newer one. The router writes back only the answer to its own server-side
  prompt for the key, and only when the stored answer is missing, unreadable or older than the
  router's max_age; a caller's maxAgeSeconds never causes a write. The state machine writes each answer itself (a DynamoDB task); this
  function only returns the numbers, as strings, the form DynamoDB's N takes.
- The keys of an inline run go through `answers.check_key`, the one key rule the router applies
  to lookups, so a stored answer is found under the key the router computes. Keys that break the
  rule, and repeats of a key already listed, come back in `invalid` with the reason, never echoing
  the key text into logs. (Keys read from S3 by the distributed Map must be stored normalized.)

Event: {"items": [{"key": "...", ...}, ...]} (items optional: absent for the S3 path).
Result: {"sequence", "maxSequence", "maxGeneratedAt", "now", "lockExpiresAt", "expiresAt" (only with a TTL), "items", "invalid",
"keys"}: numbers as decimal strings, except "keys" (the item count).

Second look (event {"answer": <the item the "Write answer" task tried to write, low-level form>}):
that task's condition is put_answer's, which cannot see a fractional number or a malformed time in
the stored item, so alone it would report such a key superseded on every run, and a key no other
writer touches would never be repaired. The task's condition failure comes here, and put_answer
writes the same item again: it judges the stored item with `answers.check_item` (the rule readers
apply) and replaces exactly an invalid one (conditioned on it being unchanged), never a valid
newer answer. Result: {"written": 1} or {"superseded": 1}. An answer that is itself invalid
(InvalidItemError) or a sequence put_answer refuses (ValueError) fails the key with that name.

Environment (set by ScheduledPrecompute): LOCK_SECONDS, ANSWER_TTL_SECONDS ("" for none),
ANSWER_TABLE. They are read at each invocation, not at import: a value that is not what the
construct sets fails the invocation with ConfigurationError naming the variable, which the run
reports as its error and cause. Failing at import would turn every invocation into Lambda's
Runtime.ImportModuleError, whose message is Python's ("invalid literal for int()") and names no
variable.
"""

from __future__ import annotations

import math
import os
import time
from functools import cache
from typing import Any

from pacer_runtime import answers


class ConfigurationError(RuntimeError):
    """The function's environment is not what ScheduledPrecompute sets (the run fails with this name)."""


def _seconds(name: str, *, meaning: str, optional: bool = False) -> int:
    """Whole seconds >= 1 from the environment variable `name`; optional: "" or "0" is 0 (none)."""
    raw = os.environ.get(name, "")
    if optional and raw in ("", "0"):
        return 0
    if raw.isascii() and raw.isdigit() and int(raw) >= 1:
        return int(raw)
    raise ConfigurationError(
        f"{name}={raw[:40]!r} must be a whole number of seconds >= 1{' (or empty)' if optional else ''}: {meaning}, "
        "which ScheduledPrecompute sets; redeploy the construct rather than editing the function's environment"
    )


def handler(event: Any, context: Any = None, *, now: float | None = None) -> dict[str, Any]:
    if isinstance(event, dict) and "answer" in event:
        return second_look(event["answer"], now=now)
    # How long the run's lock holds at most: the state machine's timeout, so a run that times out
    # never blocks the next one for longer than it could have run.
    lock_seconds = _seconds("LOCK_SECONDS", meaning="how long the run lock holds, the state machine's timeout")
    # How long an answer lives (0 = until replaced): set by AnswerStore.environment().
    ttl_seconds = _seconds("ANSWER_TTL_SECONDS", meaning="how long an answer lives", optional=True)
    now = time.time() if now is None else now
    # The write condition's bound on a valid stored answer (answers._NEWER_THAN_STORED): the latest
    # instant any write of this run can happen (the lock lasts the state machine's timeout), plus the
    # clock skew. Later than the run start, so a run never replaces an answer valid when it writes.
    max_sequence = int(now * 1000) + lock_seconds * 1000 + answers.SEQUENCE_SKEW_MS
    result: dict[str, Any] = {
        "sequence": str(int(now * 1000)),
        "maxSequence": str(max_sequence),
        "maxGeneratedAt": answers.iso_utc(max_sequence / 1000),
        "now": str(math.floor(now)),
        "lockExpiresAt": str(math.ceil(now + lock_seconds)),
    }
    if ttl_seconds:
        result["expiresAt"] = str(math.ceil(now + ttl_seconds))
    items = event.get("items") if isinstance(event, dict) else None
    kept, invalid = normalized_items(items) if items is not None else ([], [])
    result.update(items=kept, invalid=invalid, keys=len(kept) + len(invalid))
    return result


@cache
def _store() -> Any:
    """The DynamoDB client, made on the first second look (the prepare step never needs it)."""
    return answers.store_client(max_attempts=5)


def second_look(item: Any, *, now: float | None = None) -> dict[str, int]:
    """Write the answer item a failed condition kept out, if the stored answer is invalid (see the docstring)."""
    table = os.environ.get("ANSWER_TABLE", "")
    if not table:
        raise ConfigurationError("ANSWER_TABLE is empty: the answer store's table name, which ScheduledPrecompute sets")
    now = time.time() if now is None else now
    answer = answers.Answer.from_item(item, now=now)  # the same rule for the run's own answer
    return {"written": 1} if answers.put_answer(_store(), table, answer, now=now) else {"superseded": 1}


def normalized_items(items: Any) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Items with their key normalized, first occurrence kept; the rest with the reason they were refused."""
    if not isinstance(items, list):
        return [], [{"key": "", "error": "InvalidItems", "cause": f"items must be a list, not a {type(items).__name__}"}]
    kept: list[dict[str, Any]] = []
    invalid: list[dict[str, str]] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        raw = item.get("key") if isinstance(item, dict) else None
        shown = raw if isinstance(raw, str) and _storable(raw) else f"items[{index}]"
        if not isinstance(item, dict):
            invalid.append({"key": shown, "error": "InvalidItem",
                            "cause": f"items[{index}] must be an object with a key, not a {type(item).__name__}"})
            continue
        problem = _unencodable(item, f"items[{index}]")
        if problem is not None:
            invalid.append({"key": shown, "error": "InvalidItem", "cause": problem})
            continue
        try:
            key = answers.check_key(raw)
        except answers.InvalidKeyError as error:
            invalid.append({"key": shown, "error": "InvalidKey", "cause": f"items[{index}]: {error}"})
            continue
        if key in seen:
            invalid.append({"key": key, "error": "DuplicateKey",
                            "cause": f"items[{index}] repeats a key listed before it once normalized; one answer per key"})
            continue
        seen.add(key)
        kept.append({**item, "key": key})
    return kept, invalid


def _storable(key: Any) -> bool:
    """A key that may appear in the run's output as it is: valid Unicode within DynamoDB's key size."""
    if not isinstance(key, str):
        return False
    try:
        return len(key.encode()) <= answers.MAX_KEY_BYTES
    except UnicodeEncodeError:
        return False


#: How deep an item may nest: Step Functions' JSONPath and the model's request need no more, and a
#: deeper one (a JSON line nested 100,000 deep) would otherwise cost a RecursionError.
MAX_ITEM_DEPTH = 32


def _unencodable(value: Any, where: str) -> str | None:
    """Why an item cannot go to the model or the store (a string that is not valid Unicode, such as
    the lone surrogate JavaScript leaves when it cuts an emoji in half; nesting past MAX_ITEM_DEPTH),
    naming the field, never its text; None when it can."""
    pending: list[tuple[Any, str, int]] = [(value, where, 0)]
    while pending:
        current, path, depth = pending.pop()
        if depth > MAX_ITEM_DEPTH:
            return f"{path} nests deeper than {MAX_ITEM_DEPTH} levels"
        if isinstance(current, str):
            try:
                current.encode()
            except UnicodeEncodeError as error:
                return f"{path} is not valid Unicode (a lone surrogate at character {error.start})"
        elif isinstance(current, dict):
            for name, field in current.items():
                label = name if _storable(name) and len(name) <= 64 else "<a field name>"
                if label != name and not _storable(name):
                    return f"{path} has a field name that is not valid Unicode"
                pending.append((field, f"{path}.{label}", depth + 1))
        elif isinstance(current, list):
            pending.extend((field, f"{path}[{i}]", depth + 1) for i, field in enumerate(current))
    return None
