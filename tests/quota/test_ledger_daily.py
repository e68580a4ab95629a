"""The shared ledger's daily token quota (bedrock-runtime's "Model invocation max tokens per day",
TPM x 1,440 by default): a per-day counter in the quota item, added in the same writes as the window,
against moto's DynamoDB on a fake epoch clock."""

from __future__ import annotations

import pytest
from pacer_runtime import ledger as runtime_ledger
from pacer_runtime.ledger import LedgerHold, LedgerRefusal, LedgerView
from test_ledger import TABLE, Clock, consistent, dynamodb, item, ledger

__all__ = ["dynamodb"]  # the fixture, shared with test_ledger

DAY = "2027-01-15"  # EPOCH's UTC day
MIDNIGHT = 1_800_057_600.0  # 2027-01-16T00:00:00Z


def test_the_daily_quota_defaults_to_the_tpm_x_1440(dynamodb):
    assert ledger(dynamodb, Clock()).daily_tokens == 1_000 * 24 * 60
    assert ledger(dynamodb, Clock(), daily_tokens=5_000).daily_tokens == 5_000


def test_a_reservation_and_its_settlement_count_on_the_day_in_the_same_writes(dynamodb):
    clock = Clock()
    a = ledger(dynamodb, clock, daily_tokens=5_000)
    hold = a.try_reserve(300)
    assert isinstance(hold, LedgerHold)
    assert consistent(dynamodb).days == {DAY: 300}
    writes = a.counts["writes"]
    a.settle(hold, 120)  # a return: deferred, then written with the next write (here flush())
    a.flush()
    assert a.counts["writes"] == writes + 1  # the day rides on the settlement's write
    clock.now += 120  # the window is empty again; the day keeps what was charged
    view = consistent(dynamodb)
    assert view.days == {DAY: 120} and a.live_tokens(view, clock.now) == 0
    released = a.try_reserve(200)
    a.release(released)
    assert consistent(dynamodb).days == {DAY: 120}


def test_a_call_past_the_days_tokens_is_refused_until_midnight_utc_with_the_minute_free(dynamodb):
    clock = Clock()
    a, b = ledger(dynamodb, clock, daily_tokens=1_000), ledger(dynamodb, clock, consumer="b", daily_tokens=1_000)
    for owner in (a, b):  # two consumers spend the day between them, a minute apart
        hold = owner.try_reserve(400)
        assert isinstance(hold, LedgerHold)
        owner.settle(hold, 400)
        clock.now += 120
    refusal = a.try_reserve(300)  # a's view missed b's charge: its write fails, and the fresh item refuses
    assert isinstance(refusal, LedgerRefusal)
    assert refusal.reason.startswith("the day's tokens are spent: 800 of the daily token quota of 1,000 on 2027-01-15 (UTC)")
    assert refusal.ready_in == pytest.approx(MIDNIGHT - clock.now)
    assert refusal.retry_in >= refusal.ready_in  # no polling all night
    assert a.live_tokens(consistent(dynamodb), clock.now) == 0  # the minute is free: the day refused it
    assert isinstance(a.try_reserve(200), LedgerHold)  # what still fits the day is admitted
    clock.now = MIDNIGHT + 5
    assert isinstance(a.try_reserve(300), LedgerHold)
    assert consistent(dynamodb).days == {DAY: 1_000, "2027-01-16": 300}


def test_a_concurrent_writer_cannot_overdraw_the_day(dynamodb):
    """The day is in the reservation's condition: a writer whose view missed the other's charge fails
    its write and is refused on the fresh item."""
    clock = Clock()
    a, b = ledger(dynamodb, clock, daily_tokens=1_000), ledger(dynamodb, clock, consumer="b", daily_tokens=1_000)
    assert isinstance(b.try_reserve(10), LedgerHold)  # b has seen the item (an empty day)
    assert isinstance(a.try_reserve(600), LedgerHold)
    refused = b.try_reserve(500)  # b's view says 10 of the day are spent: its write fails, the fresh view refuses
    assert isinstance(refused, LedgerRefusal) and "the day's tokens are spent" in refused.reason
    assert consistent(dynamodb).days == {DAY: 610}


def test_days_before_yesterday_are_removed_and_a_malformed_day_is_repaired(dynamodb):
    clock = Clock()
    a = ledger(dynamodb, clock)
    dynamodb.update_item(TableName="ledger", Key={"pk": {"S": "quota#m"}},
                         UpdateExpression="SET #old = :n, #yesterday = :n",
                         ExpressionAttributeNames={"#old": "d#2027-01-13", "#yesterday": "d#2027-01-14"},
                         ExpressionAttributeValues={":n": {"N": "50"}})
    assert isinstance(a.try_reserve(100), LedgerHold)
    assert consistent(dynamodb).days == {"2027-01-14": 50, DAY: 100}
    dynamodb.update_item(TableName="ledger", Key={"pk": {"S": "quota#m"}}, UpdateExpression="SET #d = :s",
                         ExpressionAttributeNames={"#d": f"d#{DAY}"}, ExpressionAttributeValues={":s": {"S": "lots"}})
    assert any(p.startswith(f"d#{DAY} is not a day's tokens") for p in LedgerView.parse(item(dynamodb)).problems)
    assert isinstance(a.try_reserve(100), LedgerHold)  # repaired (the bad day dropped), then admitted
    assert consistent(dynamodb).days == {"2027-01-14": 50, DAY: 100}
    assert a.counts["repairs"] == 1


def test_a_reservation_beyond_the_whole_day_is_refused_by_name(dynamodb):
    with pytest.raises(ValueError, match="exceeds the daily token quota of 500"):
        ledger(dynamodb, Clock(), daily_tokens=500).try_reserve(600)
    with pytest.raises(ValueError, match="daily_tokens=0 must be a finite number >= 1"):
        ledger(dynamodb, Clock(), daily_tokens=0)
    assert runtime_ledger.DAILY_QUOTA_DOC.startswith("https://docs.aws.amazon.com/bedrock/")


def test_a_quota_pacer_on_the_ledger_rejects_at_once_a_call_the_day_cannot_hold(dynamodb):
    from pacer_runtime import AdmissionRejected, QuotaPacer

    clock = Clock()
    shared = ledger(dynamodb, clock, daily_tokens=1_000, poll_seconds=0.01, max_poll_seconds=0.01)
    pacer = QuotaPacer(1_000, clock=clock, poll_seconds=0.005, ledger=shared, fallback_tpm=100)
    pacer.admit(800).settle(input_tokens=500, output_tokens=300)
    clock.now += 120  # the minute is free again
    with pytest.raises(AdmissionRejected, match=r"the shared ledger: the day's tokens are spent: 800 of the daily "
                       r"token quota of 1,000") as rejected:
        pacer.admit(300, max_wait_seconds=600)
    assert rejected.value.earliest_start_seconds == pytest.approx(MIDNIGHT - clock.now)
    assert pacer.admit(200, max_wait_seconds=0).hold is not None  # what the day still holds goes at once


def test_the_runtime_and_the_planner_agree_on_the_daily_quota():
    """The runtime cannot import genai_pacer: its copies of the planner's figures are held equal here."""
    from genai_pacer import planning

    assert runtime_ledger.MINUTES_PER_DAY == planning.MINUTES_PER_DAY
    assert runtime_ledger.DAILY_QUOTA_DOC == planning.QUOTAS_DOC


def test_a_consumer_built_from_a_granted_functions_environment_enforces_the_daily_quota(dynamodb):
    """What a deployed worker builds: QuotaPacer.from_environment() on the variables QuotaLedger gave its
    function (the template's, the table's Ref aside) keeps the ModelQuota's daily_token_quota, the
    day the Step Functions consumers count too (QuotaLedger.daily_tokens)."""
    from aws_cdk import aws_lambda as lambda_
    from genai_pacer import BedrockModel, ModelQuota, QuotaLedger
    from genai_pacer.quota.ledger import LEDGER_DAILY_TOKENS_VARIABLE
    from helpers import new_stack, template_of
    from pacer_runtime import AdmissionRejected, QuotaPacer
    from pacer_runtime.ledger import SharedLedger

    stack = new_stack()
    model = BedrockModel.from_id("us.amazon.nova-lite-v1:0")
    quota = ModelQuota(stack, "Quota", model=model, tpm_quota=10_000, daily_token_quota=2_000, keep_free=0.1)
    quota.share("Worker", quota.profile(input_tokens=100, output_tokens=50, max_tokens=100), fraction=0.5,
                call_seconds=6, hours_per_day=0.01)
    ledger = QuotaLedger(stack, "Ledger", quota=quota, ledger_id="m")
    worker = lambda_.Function(stack, "Worker", runtime=lambda_.Runtime.PYTHON_3_12, handler="index.handler",
                              code=lambda_.Code.from_inline("def handler(event, context): pass"),
                              environment=ledger.environment("Worker"))
    ledger.grant_use(worker)
    function = template_of(stack).to_json()["Resources"][stack.get_logical_id(worker.node.default_child)]
    env = {**function["Properties"]["Environment"]["Variables"], "GENAI_PACER_LEDGER_TABLE": TABLE}
    assert env[LEDGER_DAILY_TOKENS_VARIABLE] == "1800" == str(ledger.daily_tokens)  # 2,000 less keep_free

    clock = Clock()
    shared = SharedLedger.from_environment(env, client=dynamodb, clock=clock, sleep=lambda _: None,
                                           poll_seconds=0.01, max_poll_seconds=0.01)
    pacer = QuotaPacer.from_environment(env, ledger=shared, clock=clock, poll_seconds=0.005)
    pacer.admit(1_000).settle(input_tokens=700, output_tokens=300)  # burndown 1: 1,000 of the day
    clock.now += 120  # the minute is free again, the day is not
    with pytest.raises(AdmissionRejected, match=r"the day's tokens are spent: 1,000 of the daily token quota of 1,800"):
        pacer.admit(900, max_wait_seconds=600)
    assert pacer.admit(800, max_wait_seconds=0).hold is not None  # what the day still holds goes at once
    assert consistent(dynamodb).days == {DAY: 1_800}
