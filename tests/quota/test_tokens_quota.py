"""Every prop of ModelQuota and QuotaLedger, and every argument of ModelQuota.share(...), ModelQuota.profile(...)
and QuotaLedger.environment(...), given an unresolved token of each kind a user passes from a CfnParameter
(value_as_number, value_as_string, cdk.Duration.seconds(value_as_number), value_as_list) (issue 35.10).

The quota plan is arithmetic at synth, so every number of ModelQuota, share and profile is refused, naming
the prop; the ledger's settings reach each consumer's environment and grant at synth, checked against the
plan; objects (a model, a table, a key) and switches are refused by type. Never a token's number encoding
(about -1.9e289) in the template or a message, never an AttributeError, TypeError or jsii error.
(AnswerStore's and AnswerRouter's props: tests/precompute/test_tokens_store_router.py.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aws_cdk as cdk
import pytest
from genai_pacer import AnswerRouter, AnswerStore, BedrockModel, ModelQuota, QuotaLedger
from helpers import check_token_case

KINDS = ("number", "string", "duration", "list")
NOVA = BedrockModel.from_id("us.amazon.nova-lite-v1:0")


# ---- the constructs, each with the least it needs -------------------------------------------------------


def quota(stack: cdk.Stack, **props: Any) -> ModelQuota:
    """A bedrock-runtime quota, or a bedrock-mantle one when a prop of that model is given."""
    mantle = bool(set(props) & {"input_tpm_quota", "output_tpm_quota"})
    base = {"input_tpm_quota": 1_000_000, "output_tpm_quota": 60_000} if mantle else {"tpm_quota": 400_000}
    return ModelQuota(stack, "Quota", **{"model": NOVA, **base, **props})


def share(stack: cdk.Stack, **props: Any) -> Any:
    """A share for a router, which holds it (so synth checks it)."""
    drawn = quota(stack)
    amount = {} if set(props) & {"fraction", "tpm", "calls"} else {"fraction": 0.3}
    plan = drawn.share(**{"name": "Router", "profile": drawn.profile(input_tokens=2_000, output_tokens=300, max_tokens=440),
                          "call_seconds": 6, **amount, **props})
    return AnswerRouter(stack, "Router", answer_store=AnswerStore(stack, "Store"), model=NOVA,
                        prompts={"note#{ticker}": "Write a note on {ticker}."}, reserved_concurrency=plan)


def ledger(stack: cdk.Stack, **props: Any) -> QuotaLedger:
    drawn = quota(stack)
    drawn.share("Worker", drawn.profile(input_tokens=2_000, output_tokens=300, max_tokens=440), fraction=0.3, call_seconds=6)
    return QuotaLedger(stack, "Ledger", **{"quota": drawn, **props})


def ledger_environment(stack: cdk.Stack, **props: Any) -> dict[str, str]:
    return ledger(stack).environment(**{"share": "Worker", **props})


def profile(stack: cdk.Stack, **props: Any) -> Any:
    drawn = quota(stack)
    return drawn.profile(**{"input_tokens": 2_000, "output_tokens": 300, "max_tokens": 440, **props})


Where = Callable[[dict], list[Any]]
#: name -> (the class or method, its props, how to build it with one prop given, (prop, kind) -> the template
#: values that must each hold the parameter). Every (prop, kind) here is refused, naming the prop.
TABLE: dict[str, tuple[Callable[..., Any], tuple[str, ...], Callable[..., Any], dict[tuple[str, str], Where]]] = {
    # The plan is computed at synth (shares, allocation, the plan file): no number of it can wait for deploy.
    "ModelQuota": (
        ModelQuota,
        ("model", "tpm_quota", "rpm_quota", "burndown", "keep_free", "warn_at", "service_quota_code",
         "daily_token_quota", "cross_model_daily_tokens", "require_shares", "reserved_input_tpm", "reserved_output_tpm",
         "input_tpm_quota", "output_tpm_quota"),
        quota,
        {},
    ),
    "ModelQuota.share": (
        ModelQuota.share,
        ("name", "profile", "call_seconds", "fraction", "tpm", "calls", "executions", "hours_per_day", "service_tier",
         "burst_tpm", "priority"),
        share,
        {},
    ),
    # The ledger's settings reach each consumer's environment and grant at synth, checked against the plan.
    "QuotaLedger": (
        QuotaLedger,
        ("quota", "table", "encryption_key", "ledger_id", "clock_skew", "sweeper"),
        ledger,
        {},
    ),
    "QuotaLedger.environment": (
        QuotaLedger.environment,
        ("share", "burst_tpm"),
        ledger_environment,
        {},
    ),
    "ModelQuota.profile": (
        ModelQuota.profile,
        ("input_tokens", "output_tokens", "max_tokens", "cache_write_tokens", "cache_read_tokens"),
        profile,
        {},
    ),
}
CASES = [(name, prop, kind) for name, (_, props, *_rest) in TABLE.items() for prop in props for kind in KINDS]


@pytest.mark.parametrize(("name", "prop", "kind"), CASES, ids=["-".join(case) for case in CASES])
def test_every_prop_given_every_kind_of_token_reaches_the_template_or_is_refused_by_name(name, prop, kind):
    check_token_case(TABLE, name, prop, kind)


def test_the_table_counts():
    assert len(CASES) == 4 * (14 + 11 + 6 + 2 + 5)
    assert sum(len(passes) for *_rest, passes in TABLE.values()) == 0
