"""genai_pacer.testing.snapshots: a user's own snapshot test is unchanged by a release that only
changes handler code, and still changes when what would be deployed changes."""

from __future__ import annotations

import shutil

import aws_cdk as cdk
import pytest
from genai_pacer import BedrockModel, QueuedInference, _assets
from genai_pacer.testing.snapshots import ASSET_HASH_PLACEHOLDER, normalize_template, snapshot_template


def users_stack(max_concurrency: int = 4) -> cdk.Stack:
    stack = cdk.Stack(cdk.App(), "Mine")
    QueuedInference(stack, "Summaries", model=BedrockModel.from_id("amazon.nova-lite-v1:0"), max_concurrency=max_concurrency)
    return stack


def test_a_release_that_changes_only_handler_code_leaves_the_snapshot_alone(tmp_path, monkeypatch):
    before_raw = cdk.assertions.Template.from_stack(users_stack()).to_json()
    before = normalize_template(before_raw)
    # the next release: the same constructs, one handler changed
    code = tmp_path / "lambda"
    shutil.copytree(_assets.LAMBDA_DIR, code, ignore=shutil.ignore_patterns("__pycache__"))
    with (code / "queued_worker" / "handler.py").open("a") as handler:
        handler.write("\n# a fix in the next release\n")
    monkeypatch.setattr(_assets, "LAMBDA_DIR", code)
    after_stack = users_stack()
    after_raw = cdk.assertions.Template.from_stack(after_stack).to_json()
    assert after_raw != before_raw  # the raw template moved with the code...
    assert snapshot_template(after_stack) == before  # ...the normalized one did not
    assert ASSET_HASH_PLACEHOLDER in str(before)


def test_a_change_in_what_would_be_deployed_still_shows():
    assert snapshot_template(users_stack(4)) != snapshot_template(users_stack(5))


def test_a_template_that_is_not_a_dict_is_refused_clearly():
    with pytest.raises(TypeError, match=r"template must be a dict \(Template.from_stack\(stack\).to_json\(\)\)"):
        normalize_template("{}")  # type: ignore[arg-type]
