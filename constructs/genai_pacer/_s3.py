"""What the constructs share about S3 objects: the key length limit, checked one way everywhere."""

from __future__ import annotations

from typing import Any

from ._checks import Checks, is_token

__all__ = ["S3_MAX_KEY_BYTES", "check_key_bytes"]

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
            "key: fix the string"
        )
    return check.rule(
        size <= S3_MAX_KEY_BYTES,
        f"{name} is {size:,} bytes of UTF-8; S3 keys are at most {S3_MAX_KEY_BYTES:,} bytes, prefix included, "
        f"and {name} is {what}: shorten it",
    )
