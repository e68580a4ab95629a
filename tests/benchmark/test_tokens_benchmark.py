"""Every prop of LoadReplay given an unresolved token of each kind (a CfnParameter's value_as_number,
value_as_string, cdk.Duration.seconds of a number, value_as_list) is refused by name (issue 23's rule:
a token reaches the template correctly, or is refused naming the prop). None passes: the run's settings
are one JSON document computed at synth (the workers, the Map's cap, the share check, the annotation).
Each is one problem: the refusal, not again by the prop's own number, text, choice or type check.
Props that take an object (a model, a bucket, a key, a profile, a plan) are refused by type."""

from __future__ import annotations

import re
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from genai_pacer import BedrockModel, InvalidPropsError, LoadReplay, planning
from helpers import new_stack, token_of

KINDS = ("number", "string", "duration", "list")
ENCODED_NUMBER = re.compile(r"e\+2\d\d|-1\.88815")
NOVA = BedrockModel.from_id("us.amazon.nova-micro-v1:0")
PROFILE = planning.TokenProfile(input_tokens=1_000, output_tokens=200, max_tokens=400)

PROPS = ("model", "prompts_bucket", "prompts_key", "requests", "profile", "concurrency", "rate_per_minute", "workers",
         "in_flight_per_worker", "api", "latency", "max_tokens", "warmup", "seed", "ttft_target", "otps_target", "e2e_target",
         "request_cap", "share", "ledger", "call_seconds", "input_price_per_million", "output_price_per_million", "call_budget", "admission_timeout", "stop_check_interval", "start_lead", "prompts_bucket_key",
         "results_bucket", "results_bucket_key", "results_prefix", "retention", "encryption_key", "access_logs_bucket",
         "encryption_key_for_logs", "log_retention", "state_machine_options")
TABLE = {"load_replay": (LoadReplay, PROPS)}
#: Props that take an object: every kind of token is refused by type, with this fix.
BY_TYPE = {
    "model": "pass a BedrockModel", "prompts_bucket": "pass an s3.Bucket", "profile": "pass planning.TokenProfile",
    "share": "pass the plan quota.share", "ledger": "pass a QuotaLedger", "prompts_bucket_key": "pass a kms.Key", "results_bucket": "pass an s3.Bucket",
    "results_bucket_key": "pass a kms.Key", "encryption_key": "pass a kms.Key", "access_logs_bucket": "pass an s3.Bucket",
    "encryption_key_for_logs": "pass a kms.Key", "log_retention": "pass a logs.RetentionDays",
    "state_machine_options": "pass StateMachineOptions",
}
#: The prices go together: each is given with the other, so the token is the case's one problem.
PAIRED = {"input_price_per_million": "output_price_per_million", "output_price_per_million": "input_price_per_million"}
#: An open-loop prop is given with rate_per_minute instead of concurrency.
OPEN_LOOP = ("rate_per_minute", "workers", "in_flight_per_worker")
EVERY_TOKEN = [(prop, kind) for prop in PROPS for kind in KINDS]


def build(stack: cdk.Stack, **props: Any) -> LoadReplay:
    prompts = s3.Bucket.from_bucket_name(stack, "Prompts", "prompts-bucket")
    base: dict[str, Any] = {"model": NOVA, "prompts_bucket": prompts, "prompts_key": "p.jsonl", "requests": 10,
                            "profile": PROFILE, "concurrency": 2}
    if any(name in props for name in OPEN_LOOP):
        base = {**base, "concurrency": None, "rate_per_minute": 60}
    base.update({PAIRED[name]: 0.1 for name in props if name in PAIRED})
    return LoadReplay(stack, "Replay", **{**base, **props})


@pytest.mark.parametrize(("prop", "kind"), EVERY_TOKEN, ids=["-".join(case) for case in EVERY_TOKEN])
def test_every_prop_given_every_kind_of_token_is_refused_by_name(prop, kind):
    stack = new_stack()
    with pytest.raises(InvalidPropsError) as refused:
        build(stack, **{prop: token_of(stack, kind, "Tok")})
    named = [p for p in refused.value.problems if p.startswith((f"{prop} ", f"{prop}=", f"{prop}:"))]
    assert named, refused.value.problems
    # reported once: the construct's refusal, not again by the prop's own number, text, choice or type check
    assert len(refused.value.problems) == 1, refused.value.ids
    assert not ENCODED_NUMBER.search(str(refused.value)), str(refused.value)
    assert any(re.search(r"\bpass\b", p) for p in named), named
    if prop in BY_TYPE:
        assert any(BY_TYPE[prop].split("pass ")[1] in p for p in named), (BY_TYPE[prop], named)
    else:
        assert any("deploy-time" in p for p in named), named


def test_the_table_names_every_prop_of_the_signature():
    import inspect

    taken = [name for name in inspect.signature(LoadReplay.__init__).parameters if name not in ("self", "scope", "id")]
    assert list(PROPS) == taken
    assert set(BY_TYPE) <= set(PROPS)
