"""Snapshot tests of your own stacks that survive a genai-pacer upgrade.

The constructs ship their Lambda handlers and the runtime layer as assets, so every release that
touches handler code changes the asset hashes in your template (S3 keys, asset paths, layer
content). `snapshot_template` returns the template with each 64-hex-digit asset hash replaced by
`ASSET_HASH`, the same normalization genai-pacer's own snapshot tests use: your snapshot then changes
only when what CloudFormation would deploy changes in substance. Needs only aws-cdk-lib.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["ASSET_HASH", "ASSET_HASH_PLACEHOLDER", "normalize_template", "snapshot_template"]

#: An asset hash as the CDK writes it: the SHA-256 of the asset's content, in lower-case hex.
ASSET_HASH = re.compile(r"[0-9a-f]{64}")
ASSET_HASH_PLACEHOLDER = "ASSET_HASH"


def normalize_template(template: dict[str, Any]) -> dict[str, Any]:
    """A copy of a synthesized template (a dict) with every asset hash replaced by ASSET_HASH."""
    if not isinstance(template, dict):
        raise TypeError(f"template must be a dict (Template.from_stack(stack).to_json()), not a {type(template).__name__}")
    return json.loads(ASSET_HASH.sub(ASSET_HASH_PLACEHOLDER, json.dumps(template, sort_keys=True)))


def snapshot_template(stack: Any) -> dict[str, Any]:
    """The stack's template, synthesized and normalized: compare it with your snapshot (syrupy, a JSON
    file). Synthesizes the stack's app, like aws_cdk.assertions.Template.from_stack."""
    from aws_cdk.assertions import Template  # here, so the emulator and bench never load the CDK

    return normalize_template(dict(Template.from_stack(stack).to_json()))
