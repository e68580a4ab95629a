"""LoadReplay(ledger=...) (issue 26: "the shared quota ledger ... gives it a floor like any consumer"):
the run takes part in the quota's QuotaLedger as a process consumer, wired by the ledger's own
environment(share) and grant_use; refused without a share of that quota; and, executed offline with
StateMachineRunner, a run's holds are in the one item another consumer (a SharedLedger) reads and
is admitted against."""

from __future__ import annotations

import json
import time

import aws_cdk as cdk
import pacer_runtime.replay as replay
import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template
from genai_pacer import BedrockModel, InvalidPropsError, LoadReplay, ModelQuota, QuotaLedger
from genai_pacer.testing import BedrockEmulator, ModelSpec, StateMachineRunner
from helpers import new_stack, resources
from pacer_runtime.ledger import LedgerHold, LedgerRefusal, SharedLedger

MODEL_ID = "us.amazon.nova-micro-v1:0"
NOVA = BedrockModel.from_id(MODEL_ID)
QUOTA_TPM = 200_000
KEY = {"pk": {"S": "quota#" + MODEL_ID}}


def ledger_stack(*, share_name: str = "Replay", with_share: bool = True, **props):
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=NOVA, tpm_quota=QUOTA_TPM)
    profile = quota.profile(input_tokens=200, output_tokens=60, max_tokens=100)
    share = quota.share(share_name, profile, fraction=0.25, call_seconds=2) if with_share else None
    quota.share("Interactive", profile, fraction=0.5, call_seconds=2)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    prompts = s3.Bucket(stack, "Prompts")
    construct = LoadReplay(stack, "Replay", **{
        "model": NOVA, "prompts_bucket": prompts, "prompts_key": "p.jsonl", "requests": 8, "warmup": 0,
        "concurrency": 2, "profile": profile, "share": share, "ledger": ledger,
        "start_lead": cdk.Duration.seconds(0), **props})  # offline: the run starts at the plan, no 5 s sleep
    return stack, ledger, construct, prompts


def prompts_text() -> str:
    return "".join(json.dumps({"id": f"chat-{i}", "messages": [{"role": "user", "content": [{"text": f"Question {i}?"}]}],
                               "inferenceConfig": {"maxTokens": 60}}) + "\n" for i in range(4))


def test_the_function_gets_the_ledgers_own_environment_and_its_grant_on_the_quotas_item_only():
    stack, ledger, construct, _ = ledger_stack()
    template = Template.from_stack(stack).to_json()
    function = next(r["Properties"] for r in resources(template, "AWS::Lambda::Function").values()
                    if r["Properties"].get("Handler") == "load_replay.handler.handler")
    variables = stack.resolve(function["Environment"]["Variables"])
    expected = stack.resolve(ledger.environment("Replay"))
    assert {name: variables[name] for name in expected} == expected
    assert variables["GENAI_PACER_LEDGER_CONSUMER"] == "Replay"
    assert float(variables["GENAI_PACER_LEDGER_FLOOR_TPM"]) == pytest.approx(0.25 * QUOTA_TPM)
    assert construct.tpm_quota == QUOTA_TPM  # the report's tpm.quota: the ledger's ModelQuota
    assert construct.ledger_consumer == "Replay" and construct.ledger_floor_tpm == pytest.approx(0.25 * QUOTA_TPM)
    granted = [s for k, r in resources(template, "AWS::IAM::Policy").items() if "ReplayReplayRole" in k
               for s in r["Properties"]["PolicyDocument"]["Statement"]]
    dynamodb = [s for s in granted if any(str(a).startswith("dynamodb:") for a in
                                          ([s["Action"]] if isinstance(s["Action"], str) else s["Action"]))]
    assert len(dynamodb) == 1 and sorted(dynamodb[0]["Action"]) == ["dynamodb:GetItem", "dynamodb:UpdateItem"]
    assert dynamodb[0]["Condition"] == {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["quota#" + MODEL_ID]}}


def test_admission_timeout_reaches_the_functions_settings_15_minutes_unless_given():
    """How long a user the ledger admits nothing keeps asking: the function's setting, so a ledger that stays
    full ends the run with a reason rather than at the state machine's 24-hour timeout."""
    for props, seconds in (({}, 900.0), ({"admission_timeout": cdk.Duration.minutes(40)}, 2_400.0)):
        stack, *_ = ledger_stack(**props)
        function = next(r["Properties"] for r in resources(Template.from_stack(stack).to_json(), "AWS::Lambda::Function")
                        .values() if r["Properties"].get("Handler") == "load_replay.handler.handler")
        settings = json.loads("".join(p if isinstance(p, str) else "X" for p in
                                      stack.resolve(function["Environment"]["Variables"]["LOAD_REPLAY"])["Fn::Join"][1]))
        assert settings["admission_timeout_s"] == seconds


def test_a_ledger_without_a_share_of_its_quota_is_refused_by_name():
    with pytest.raises(InvalidPropsError) as refused:
        ledger_stack(with_share=False)
    assert [p.id for p in refused.value.problems] == ["LoadReplay.ledger.replay-no-share"]
    assert "ledger= needs share= drawn from ModelQuota Quota" in str(refused.value)

    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=NOVA, tpm_quota=QUOTA_TPM)
    other = ModelQuota(stack, "Other", model=BedrockModel.from_id("us.amazon.nova-lite-v1:0"), tpm_quota=QUOTA_TPM)
    profile = quota.profile(input_tokens=200, output_tokens=60, max_tokens=100)
    theirs = other.share("Replay", profile, fraction=0.25, call_seconds=2)
    prompts = s3.Bucket.from_bucket_name(stack, "Prompts", "prompts")
    common = {"prompts_bucket": prompts, "prompts_key": "p.jsonl", "requests": 8, "concurrency": 2, "profile": profile}
    with pytest.raises(InvalidPropsError) as refused:
        LoadReplay(stack, "R1", model=NOVA, share=theirs, ledger=QuotaLedger(stack, "L1", quota=quota), **common)
    assert "(the share given is another quota's)" in str(refused.value)
    with pytest.raises(InvalidPropsError) as refused:
        LoadReplay(stack, "R2", model=NOVA, share=theirs, ledger=QuotaLedger(stack, "L2", quota=other), **common)
    assert [p.id for p in refused.value.problems] == ["LoadReplay.ledger.other-model"]
    with pytest.raises(InvalidPropsError, match=r"ledger=.* pass a QuotaLedger"):
        LoadReplay(stack, "R3", model=NOVA, ledger=quota, **common)  # type: ignore[arg-type]


def _replay_in_ledger(stack, quota_props, tokens, share_props, **props):
    """(the ledger, a 4-request LoadReplay holding share "Replay" in it): the quota's props, the profile's
    (input, output, max_tokens) and the share's props vary by test."""
    quota = ModelQuota(stack, "Quota", model=NOVA, **quota_props)
    input_tokens, output_tokens, max_tokens = tokens
    profile = quota.profile(input_tokens=input_tokens, output_tokens=output_tokens, max_tokens=max_tokens)
    share = quota.share("Replay", profile, **share_props)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    prompts = s3.Bucket.from_bucket_name(stack, "Prompts", "prompts-bucket")
    return ledger, LoadReplay(stack, "Replay", model=NOVA, prompts_bucket=prompts, prompts_key="p.jsonl",
                              requests=4, concurrency=1, profile=profile, share=share, ledger=ledger, **props)


def test_a_request_the_ledger_could_never_admit_is_refused_at_synth_naming_both_numbers(monkeypatch):
    """Each request holds its prompt + max_tokens x burndown in the ledger; the run may hold at most the
    quota's allocatable TPM there. 1,000 + 4,000 x 5 = 21,000 > 20,000: the share (which counts input +
    max_tokens, 5,000) sustains it, but the ledger refuses every such request at run time (SharedLedger:
    "can never be held"), so every worker would fail. Refused at synth, naming both numbers; max_tokens=3,000
    (16,000 held) is taken."""
    def build(stack, **props):
        return _replay_in_ledger(stack, dict(tpm_quota=20_000, burndown=5), (1_000, 100, 4_000),
                                 dict(fraction=1.0, call_seconds=60), **props)

    with pytest.raises(InvalidPropsError) as refused:
        build(new_stack())
    assert refused.value.ids == ["LoadReplay.ledger.hold-above-burst"]
    assert "each request holds 21,000 tokens in the ledger" in str(refused.value)
    assert "more than the run may hold there (20,000 TPM" in str(refused.value)
    ledger, construct = build(new_stack(), max_tokens=3_000)
    assert construct.ledger_consumer == "Replay" and ledger.hold(1_000, 3_000) == 16_000
    # the same numbers at run time: the run's SharedLedger (burst cap = the allocatable quota) refuses 21,000
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")  # the client is made, never called
    runtime = SharedLedger("table", ledger_id=MODEL_ID, consumer="Replay", quota_tpm=ledger.quota_tpm)
    with pytest.raises(ValueError, match="a reservation of 21,000 tokens exceeds the consumer's burst cap of 20,000"):
        runtime.try_reserve(ledger.hold(1_000, 4_000))


def test_a_request_the_ledgers_day_could_never_admit_is_refused_at_synth_naming_both_numbers(monkeypatch):
    """The ledger's day is the ModelQuota's daily_token_quota x (1 - keep_free) (QuotaLedger.daily_tokens),
    and the run's SharedLedger refuses a reservation above it ("can never be held"), as the state machines'
    ledger steps are refused at synth (request.reservation-above-daily). A daily quota of 2,000 x 0.5 =
    1,000 tokens with requests holding 200 + 1,000 = 1,200: refused at synth naming both numbers, not
    left for every worker to fail on; max_tokens=800 (1,000 held, the whole day) is taken."""
    def build(stack, **props):
        return _replay_in_ledger(stack, dict(tpm_quota=QUOTA_TPM, daily_token_quota=2_000, keep_free=0.5),
                                 (200, 60, 1_000), dict(fraction=0.25, call_seconds=2), **props)

    with pytest.raises(InvalidPropsError) as refused:
        build(new_stack())
    assert refused.value.ids == ["LoadReplay.ledger.hold-above-daily"]
    assert "each request holds 1,200 tokens in the ledger" in str(refused.value)
    assert "more than the ledger's whole day (1,000 tokens" in str(refused.value)
    ledger, construct = build(new_stack(), max_tokens=800)
    assert construct.ledger_consumer == "Replay" and ledger.daily_tokens == 1_000
    # the same numbers at run time: the run's SharedLedger refuses 1,200 on a day of 1,000
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")  # the client is made, never called
    runtime = SharedLedger("table", ledger_id=MODEL_ID, consumer="Replay", quota_tpm=ledger.quota_tpm,
                           daily_tokens=ledger.daily_tokens)
    with pytest.raises(ValueError, match="a reservation of 1,200 tokens exceeds the daily token quota of 1,000"):
        runtime.try_reserve(ledger.hold(200, 1_000))


def _replay_beside_an_outside_share(quota_props, tokens, share_props, outside_props):
    """A LoadReplay in the ledger beside a share ("Elsewhere") no construct in the ledger holds."""
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=NOVA, **quota_props)
    input_tokens, output_tokens, max_tokens = tokens
    profile = quota.profile(input_tokens=input_tokens, output_tokens=output_tokens, max_tokens=max_tokens)
    quota.share("Elsewhere", profile, call_seconds=60, **outside_props)
    share = quota.share("Replay", profile, call_seconds=60, **share_props)
    LoadReplay(stack, "Replay", model=NOVA, prompts_bucket=s3.Bucket.from_bucket_name(stack, "Prompts", "prompts-bucket"),
               prompts_key="p.jsonl", requests=4, concurrency=1, profile=profile, share=share,
               ledger=QuotaLedger(stack, "Ledger", quota=quota))
    with pytest.raises(Exception) as refused:  # noqa: B017 - aws-cdk-lib's validation error lists every problem
        Template.from_stack(stack)
    return str(refused.value)


def test_a_request_above_what_the_shares_outside_the_ledger_leave_is_refused_at_synth():
    """The ledger's consumers share the quota less what the shares held outside it draw (QuotaLedger.shared_tpm,
    shared_daily_tokens): a run whose every request holds more could never be admitted. 1,000 + 3,000 x 5 =
    16,000 is within the 20,000 allocatable TPM (taken at construction) but above the 15,000 the outside
    share leaves; a day of 62,000 less the outside share's 100,000 TPM for 36 s a day leaves 2,000, below a
    request's 200 + 3,000 = 3,200."""
    message = _replay_beside_an_outside_share(dict(tpm_quota=20_000, burndown=5), (1_000, 100, 3_000),
                                              dict(fraction=0.75), dict(tpm=5_000))
    assert "the run of LoadReplay Test/Replay reserves 16,000 tokens a call, more than the 15,000 TPM" in message, message
    assert "('Elsewhere' (5,000 TPM))" in message and "ledger.reservation-above-shared" in message, message
    message = _replay_beside_an_outside_share(dict(tpm_quota=QUOTA_TPM, daily_token_quota=62_000), (200, 60, 3_000),
                                              dict(fraction=0.25), dict(tpm=100_000, hours_per_day=0.01))
    assert "the run of LoadReplay Test/Replay reserves 3,200 tokens a call, more than the 2,000 tokens a day" in message, message
    assert "ledger.reservation-above-shared-day" in message, message


def test_a_runs_holds_are_in_the_shared_item_another_consumer_is_admitted_against():
    """A LoadReplay run and a process consumer (the Interactive share's SharedLedger) share one ledger:
    every request of the run was held and settled there under the run's share, to what its record
    says Bedrock charged, and the other consumer's room is the quota less those holds."""
    stack, ledger, construct, prompts = ledger_stack()
    with BedrockEmulator([ModelSpec(MODEL_ID, answer_tokens=40)], time_scale=200) as bedrock, \
            StateMachineRunner(stack, bedrock=bedrock) as runner:
        runner.s3.put_object(Bucket=runner.physical_name(prompts), Key="p.jsonl", Body=prompts_text().encode())
        run = runner.run({}, name="paced").raise_for_status()
        results = runner.physical_name(construct.results_bucket)
        keys = [o["Key"] for o in runner.s3.list_objects_v2(Bucket=results, Prefix="load-replay/paced/records/")["Contents"]]
        records = [replay.Sample(**json.loads(line)) for key in keys
                   for line in runner.s3.get_object(Bucket=results, Key=key)["Body"].read().decode().splitlines()]
        table = runner.physical_name(ledger.table)
        item = runner.dynamodb.get_item(TableName=table, Key=KEY, ConsistentRead=True)["Item"]
        other = SharedLedger(table, ledger_id=MODEL_ID, consumer="Interactive", quota_tpm=ledger.quota_tpm,
                             floor_tpm=0.5 * QUOTA_TPM, client=runner.dynamodb, poll_seconds=0.01, max_poll_seconds=0.02)
        view = other.view(refresh=True)
        held = int(item["h#Replay"]["N"])
        room = int(ledger.quota_tpm) - held
        refused = other.try_reserve(room + 1)
        admitted = other.try_reserve(room)
    assert len(records) == 8 and all(s.ok for s in records) and run.model_calls == 8
    # each request settled to input + cache writes + output x burndown: the record's own charge
    assert held == sum(s.settled for s in records) > 0
    assert sum(1 for name in item if name.startswith("s#") and name.endswith("#Replay")) >= 1
    assert view.problems == [] and other.live_tokens(view, time.time(), "Replay") == held
    assert isinstance(refused, LedgerRefusal) and isinstance(admitted, LedgerHold)
