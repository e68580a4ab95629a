"""The shared quota ledger's names, written once for both sides: the runtime (`pacer_runtime.ledger`,
SharedLedger) and the constructs (`genai_pacer.quota.QuotaLedger`, which sets ENVIRONMENT in each
consumer's environment, and `genai_pacer.step_functions.ledger_steps`, whose DynamoDB tasks write the
item). The constructs load this file by its path (genai_pacer._internal.runtime_constants), since
importing `pacer_runtime` needs boto3: standard library only, no imports.

The item layout and protocol these names take part in are `pacer_runtime.ledger`'s docstring.
"""

from __future__ import annotations

__all__ = [
    "CONSUMER_PREFIX",
    "DAILY_TOKENS_VARIABLE",
    "DAY_PREFIX",
    "ENVIRONMENT",
    "HELD",
    "KEY_PREFIX",
    "OUTPUT_ENVIRONMENT",
    "PARTITION_KEY",
    "RESERVED_ENVIRONMENT",
    "RESERVED_SUFFIX",
    "PRIORITIES",
    "PRIORITY_VARIABLE",
    "PRIORITY_WAITING",
    "SLOT_PREFIX",
    "TTL_ATTRIBUTE",
    "WANTED",
    "WANT_SECONDS_VARIABLE",
    "WANTED_BY",
    "WANT_PREFIX",
]

#: The ledger's day for every consumer (QuotaLedger.daily_tokens): SharedLedger.from_environment's
#: daily_tokens. Absent (a function configured before it was set), the runtime's default applies.
DAILY_TOKENS_VARIABLE = "GENAI_PACER_LEDGER_DAILY_TOKENS"
#: How long every consumer keeps another's want (SharedLedger's want_seconds), as QuotaLedger sets it: long
#: enough for a state machine's want to last from one of its tries to the next (QuotaLedger.want_seconds).
#: Absent, the runtime's default applies.
WANT_SECONDS_VARIABLE = "GENAI_PACER_LEDGER_WANT_SECONDS"
#: The variables QuotaLedger.environment(share) sets and SharedLedger.from_environment reads, in order.
ENVIRONMENT = (
    "GENAI_PACER_LEDGER_TABLE",
    "GENAI_PACER_LEDGER_ID",
    "GENAI_PACER_LEDGER_CONSUMER",
    "GENAI_PACER_LEDGER_QUOTA_TPM",
    "GENAI_PACER_LEDGER_FLOOR_TPM",
    "GENAI_PACER_LEDGER_BURST_TPM",
    "GENAI_PACER_LEDGER_SKEW_SECONDS",
    DAILY_TOKENS_VARIABLE,
)
#: A bedrock-mantle quota's output window (SharedLedger's output_quota_tpm, output_floor_tpm and
#: output_burst_tpm), set by QuotaLedger.environment(share) for a share of such a quota only; the day
#: variable is then not set (bedrock-mantle has no daily quota).
OUTPUT_ENVIRONMENT = (
    "GENAI_PACER_LEDGER_OUTPUT_QUOTA_TPM",
    "GENAI_PACER_LEDGER_OUTPUT_FLOOR_TPM",
    "GENAI_PACER_LEDGER_OUTPUT_BURST_TPM",
)
#: A share drawn at the Reserved tier (ModelQuota.share(..., service_tier="reserved")): the model's
#: reservation (input and output tokens per minute) and the share's part of it (its floor there),
#: kept in the same table under the quota's id + RESERVED_SUFFIX as a two-budget item (the layout of
#: a bedrock-mantle quota's), so every process of every reserved share draws on one reservation.
RESERVED_ENVIRONMENT = (
    "GENAI_PACER_LEDGER_RESERVED_INPUT_TPM",
    "GENAI_PACER_LEDGER_RESERVED_OUTPUT_TPM",
    "GENAI_PACER_LEDGER_RESERVED_FLOOR_INPUT_TPM",
    "GENAI_PACER_LEDGER_RESERVED_FLOOR_OUTPUT_TPM",
)
RESERVED_SUFFIX = "#reserved"
#: A consumer's priority in the ledger (QuotaLedger.environment(share) sets it only for a share drawn with
#: one; SharedLedger.from_environment reads it), lowest first: a borrowing call leaves free what a waiting
#: consumer of a higher priority waits for, as it does for a consumer waiting within its floor.
PRIORITY_VARIABLE = "GENAI_PACER_LEDGER_PRIORITY"
PRIORITIES = ("batch", "interactive")
#: Present in the item while a consumer above the lowest priority waits to borrow (its want is recent):
#: what a state machine, which cannot read the wants, checks before it borrows (pacer_runtime.ledger).
PRIORITY_WAITING = "priority_waiting"
#: The table's string partition key, the quota item's key ("quota#<ledger id>") and its TTL attribute.
PARTITION_KEY = "pk"
KEY_PREFIX = "quota#"
TTL_ATTRIBUTE = "expires_at"
#: The item's attributes a state machine writes as well: the window's tokens, one consumer's, one slot's
#: (s#<UTC time of day, HH:MM:SS>#<consumer>: the day is left out to keep the item small, and read back
#: from the reader's clock) and one UTC day's (d#<YYYY-MM-DD>).
HELD = "held"
CONSUMER_PREFIX = "h#"
SLOT_PREFIX = "s#"
DAY_PREFIX = "d#"
#: A consumer's want (w#<consumer> = "<time> <tokens>[ <priority>[ borrowing]]") and the time and writer of
#: the latest want write, which a borrower's condition pins: written by a process refused within its floor
#: and by a state machine's refused try within its floor (ledger_steps' LedgerCall.want).
WANT_PREFIX = "w#"
WANTED, WANTED_BY = "wanted", "wanted_by"
