"""QuotaLedger's sweeper (lambda/quota_sweeper) against moto's DynamoDB: it removes every consumer's
slots that left the window with the runtime's own removal (SharedLedger.sweep), keeps the live ones,
repairs a hostile item rather than trusting it, leaves other quotas alone and sweeps again within
its invocation while time remains. Then what synth builds: the function, its schedule, its grant
(exactly UpdateItem and GetItem on this quota's item) and the warning it ends. Time is a fake clock."""

from __future__ import annotations

import json
from pathlib import Path

from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk.assertions import Annotations, Match
from genai_pacer import BedrockModel, BoundedMap, ConverseRequest, ModelQuota, QuotaLedger
from genai_pacer.quota import ledger as construct_ledger
from helpers import new_stack, only, policy_statements, refused, resources, template_of
from pacer_runtime.ledger import SharedLedger
from quota_sweeper import handler as sweeper
from test_ledger import TABLE, dynamodb

__all__ = ["dynamodb"]  # the fixture, shared with test_ledger

EPOCH = 1_800_000_000.0  # 2027-01-15T08:00:00Z
KEY = {"pk": {"S": "quota#m"}}
ENVIRON = {"GENAI_PACER_LEDGER_TABLE": TABLE, "GENAI_PACER_LEDGER_ID": "m",
           "GENAI_PACER_LEDGER_CONSUMER": sweeper.SWEEPER_CONSUMER, "GENAI_PACER_LEDGER_QUOTA_TPM": "1000",
           "GENAI_PACER_LEDGER_FLOOR_TPM": "0", "GENAI_PACER_LEDGER_BURST_TPM": "1000",
           "GENAI_PACER_LEDGER_SKEW_SECONDS": "1"}


class Context:
    """A Lambda context whose remaining time goes down as the handler sleeps (no real sleeping)."""

    def __init__(self, remaining_seconds: float) -> None:
        self.remaining = remaining_seconds
        self.slept: list[float] = []

    def get_remaining_time_in_millis(self) -> int:
        return int(self.remaining * 1000)

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.remaining -= seconds


def slot(offset: float, consumer: str) -> str:
    from datetime import UTC, datetime

    return "s#" + datetime.fromtimestamp(EPOCH + offset, UTC).strftime("%Y-%m-%dT%H:%M:%S") + "#" + consumer


def put(client, attributes: dict[str, int], key=KEY) -> None:
    client.put_item(TableName=TABLE, Item={**key, **{k: {"N": str(v)} for k, v in attributes.items()}})


def item(client, key=KEY) -> dict:
    return client.get_item(TableName=TABLE, Key=key, ConsistentRead=True)["Item"]


def sweep(client, now: float, remaining: float = 1.0) -> tuple[dict, Context]:
    context = Context(remaining)
    result = sweeper.handler({}, context, environ=ENVIRON, sleep=context.sleep, client=client, clock=lambda: now)
    return result, context


def test_expired_slots_of_every_consumer_are_removed_and_live_ones_kept(dynamodb):
    # two state machines' holds a minute and more ago, one live; the window at EPOCH + 70 keeps slots
    # started after EPOCH + 70 - 62 (1 s slot + 60 s window + 1 s skew)
    old_a, old_b, live = slot(0, "Summaries"), slot(5, "Notes"), slot(30, "Summaries")
    put(dynamodb, {"held": 900, "h#Summaries": 700, "h#Notes": 200, old_a: 400, old_b: 200, live: 300})
    result, context = sweep(dynamodb, EPOCH + 70)
    after = item(dynamodb)
    assert result == {"sweeps": 1, "tokensRemoved": 600.0} and context.slept == []
    assert old_a not in after and old_b not in after and after[live] == {"N": "300"}
    assert (after["held"], after["h#Summaries"]) == ({"N": "300"}, {"N": "300"})
    assert "h#Notes" not in after  # its h# left with its last slot
    assert int(after["expires_at"]["N"]) == EPOCH + 70 + 86_400  # the TTL every process write sets
    # a slot one second short of leaving stays
    put(dynamodb, {"held": 400, "h#Summaries": 400, slot(0, "Summaries"): 400})
    assert sweep(dynamodb, EPOCH + 61.9)[0]["tokensRemoved"] == 0 and slot(0, "Summaries") in item(dynamodb)


def test_more_expired_slots_than_one_write_removes_are_all_removed(dynamodb):
    from pacer_runtime.ledger import MAX_CLEANUP

    old = {slot(-i, "Summaries"): 10 for i in range(MAX_CLEANUP * 2 + 5)}
    put(dynamodb, {"held": 10 * len(old), "h#Summaries": 10 * len(old), **old})
    result, _ = sweep(dynamodb, EPOCH + 100)
    after = item(dynamodb)
    assert result["tokensRemoved"] == 10 * len(old) and not [n for n in after if n.startswith("s#")]
    assert after["held"] == {"N": "0"} and "h#Summaries" not in after  # its h# left with its last slot


def test_a_hostile_item_is_repaired_from_its_valid_slots_not_trusted(dynamodb, capsys):
    old, live = slot(0, "Summaries"), slot(50, "Summaries")
    dynamodb.put_item(TableName=TABLE, Item={**KEY, "held": {"S": "lots"}, "h#Summaries": {"N": "999999"},
                                             old: {"N": "400"}, live: {"N": "300"}, "mystery": {"BOOL": True},
                                             slot(10_000, "Summaries"): {"N": "500000"}})  # far in the future
    other = {"pk": {"S": "quota#other"}}
    put(dynamodb, {"held": 5, "h#x": 5, slot(0, "x"): 5}, key=other)
    result, _ = sweep(dynamodb, EPOCH + 70)
    after = item(dynamodb)
    assert result["tokensRemoved"] == 400
    assert set(after) == {"pk", "held", "h#Summaries", live, "expires_at"}
    assert (after["held"], after["h#Summaries"]) == ({"N": "300"}, {"N": "300"})
    assert "repaired" in capsys.readouterr().out
    assert item(dynamodb, other)[slot(0, "x")] == {"N": "5"}  # another quota's item is never touched


def test_an_empty_ledger_is_read_and_never_written(dynamodb):
    result, _ = sweep(dynamodb, EPOCH)
    assert result == {"sweeps": 1, "tokensRemoved": 0.0}
    assert "Item" not in dynamodb.get_item(TableName=TABLE, Key=KEY)  # nothing created


def test_each_invocation_sweeps_every_interval_while_time_remains(dynamodb):
    context = Context(65.0)
    clock = {"now": EPOCH}

    def sleep(seconds: float) -> None:
        context.sleep(seconds)
        clock["now"] += seconds

    put(dynamodb, {"held": 100, "h#Summaries": 100, slot(-5, "Summaries"): 100})  # leaves the window at EPOCH + 57
    result = sweeper.handler({}, context, environ=ENVIRON, sleep=sleep, client=dynamodb, clock=lambda: clock["now"])
    stop = sweeper.SWEEP_INTERVAL_SECONDS + sweeper.MARGIN_SECONDS
    assert set(context.slept) == {sweeper.SWEEP_INTERVAL_SECONDS} and context.remaining < stop
    assert result == {"sweeps": len(context.slept) + 1, "tokensRemoved": 100.0}  # removed once it left the window
    assert result["sweeps"] == 1 + int((65 - stop) // sweeper.SWEEP_INTERVAL_SECONDS) + 1


RESERVED_KEY = {"pk": {"S": "quota#m#reserved"}}
#: The Reserved tier reservation's variables QuotaLedger gives its sweeper (the reservation, its floors 0).
RESERVED_ENVIRON = {**ENVIRON, "GENAI_PACER_LEDGER_RESERVED_INPUT_TPM": "1000",
                    "GENAI_PACER_LEDGER_RESERVED_OUTPUT_TPM": "300", "GENAI_PACER_LEDGER_RESERVED_FLOOR_INPUT_TPM": "0",
                    "GENAI_PACER_LEDGER_RESERVED_FLOOR_OUTPUT_TPM": "0"}


def test_the_reservations_item_is_swept_with_the_quotas(dynamodb):
    """With a Reserved tier reservation, one sweep removes the expired slots of both items: the quota's and
    the reservation's (input and output windows), which before only the reserved consumers' writes removed."""
    old, live = slot(0, "Summaries"), slot(30, "Summaries")
    put(dynamodb, {"held": 700, "h#Summaries": 700, old: 400, live: 300})
    old_in, live_in = slot(0, "Interactive"), slot(30, "Interactive")
    old_out, live_out = "o#" + old_in[2:], "o#" + live_in[2:]
    put(dynamodb, {"held": 900, "h#Interactive": 900, old_in: 600, live_in: 300,
                   "oheld": 250, "oh#Interactive": 250, old_out: 200, live_out: 50}, key=RESERVED_KEY)
    context = Context(1.0)
    result = sweeper.handler({}, context, environ=RESERVED_ENVIRON, sleep=context.sleep, client=dynamodb,
                             clock=lambda: EPOCH + 70)
    quota, reserved = item(dynamodb), item(dynamodb, RESERVED_KEY)
    assert old not in quota and quota[live] == {"N": "300"} and quota["held"] == {"N": "300"}
    assert old_in not in reserved and old_out not in reserved
    assert result == {"sweeps": 1, "tokensRemoved": 400.0, "reservedTokensRemoved": 800.0}
    assert (reserved[live_in], reserved[live_out]) == ({"N": "300"}, {"N": "50"})
    assert (reserved["held"], reserved["h#Interactive"], reserved["oheld"], reserved["oh#Interactive"]) == (
        {"N": "300"}, {"N": "300"}, {"N": "50"}, {"N": "50"})
    # without a reservation the sweeper reads one item, as before
    assert set(sweep(dynamodb, EPOCH + 70)[0]) == {"sweeps", "tokensRemoved"}


def test_the_constructs_sweeper_settings_are_the_handlers():
    assert construct_ledger.SWEEPER_CONSUMER == sweeper.SWEEPER_CONSUMER
    # the invocation runs past the schedule's minute, so the next one overlaps it: no gap longer than an interval
    assert construct_ledger.SWEEP_TIMEOUT.to_seconds() - sweeper.SWEEP_INTERVAL_SECONDS - sweeper.MARGIN_SECONDS \
        >= construct_ledger.SWEEP_RATE.to_seconds()
    assert SharedLedger.from_environment(ENVIRON, client=object()).consumer == sweeper.SWEEPER_CONSUMER


# --- synth --------------------------------------------------------------------------------------

MODEL = BedrockModel.from_id("us.amazon.nova-lite-v1:0")


def stack_with(state_machine: bool = True, **props):
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=400_000, burndown=5)
    plan = quota.share("Summaries", quota.profile(input_tokens=1_000, output_tokens=200, max_tokens=400),
                       fraction=0.5, call_seconds=4)
    ledger = QuotaLedger(stack, "Ledger", quota=quota, **props)
    if state_machine:
        BoundedMap(stack, "Summaries", max_concurrency=plan, model=MODEL, ledger=ledger,
                   request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=400))
    return stack, ledger


def warnings_of(stack) -> list[str]:
    return [str(m.entry.data) for m in Annotations.from_stack(stack).find_warning("*", Match.any_value())
            if "ledger-state-machines-only" in str(m.entry.data)]


def test_a_state_machine_consumer_adds_the_sweeper_on_a_one_minute_schedule_granted_only_its_item():
    stack, ledger = stack_with()
    template = template_of(stack).to_json()
    assert ledger.sweeper_function is not None and warnings_of(stack) == []
    function = stack.get_logical_id(ledger.sweeper_function.node.default_child)
    props = template["Resources"][function]["Properties"]
    assert props["Handler"] == "quota_sweeper.handler.handler" and props["Timeout"] == 70
    env = props["Environment"]["Variables"]
    assert env["GENAI_PACER_LEDGER_ID"] == "us.amazon.nova-lite-v1:0" and env["GENAI_PACER_LEDGER_CONSUMER"] == "quota-sweeper"
    rule = only(template_of(stack), "AWS::Events::Rule")["Properties"]
    assert rule["ScheduleExpression"] == "rate(1 minute)" and rule["Targets"][0]["Arn"] == {"Fn::GetAtt": [function, "Arn"]}
    assert rule["Targets"][0]["RetryPolicy"] == {"MaximumRetryAttempts": 0}
    role = stack.get_logical_id(ledger.sweeper_function.role.node.default_child)
    policies = [p for p in resources(template, "AWS::IAM::Policy").values()
                if {"Ref": role} in p["Properties"]["Roles"]]
    on_table = [s for p in policies for s in p["Properties"]["PolicyDocument"]["Statement"]
                if "dynamodb" in json.dumps(s["Action"])]
    assert [(s["Action"], s["Condition"]) for s in on_table] == [(
        ["dynamodb:UpdateItem", "dynamodb:GetItem"],
        {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["quota#us.amazon.nova-lite-v1:0"]}})]


def test_with_a_reservation_the_sweepers_environment_carries_it_and_its_grant_covers_its_item():
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=400_000, burndown=5, reserved_input_tpm=1_000,
                       reserved_output_tpm=300)
    plan = quota.share("Summaries", quota.profile(input_tokens=1_000, output_tokens=200, max_tokens=400),
                       fraction=0.5, call_seconds=4)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    BoundedMap(stack, "Summaries", max_concurrency=plan, model=MODEL, ledger=ledger,
               request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=400))
    template = template_of(stack).to_json()
    function = stack.get_logical_id(ledger.sweeper_function.node.default_child)
    env = template["Resources"][function]["Properties"]["Environment"]["Variables"]
    assert [env[name] for name in construct_ledger.LEDGER_RESERVED_ENVIRONMENT] == ["1000", "300", "0", "0"]
    reservation = SharedLedger.reservation_from_environment({**env, "GENAI_PACER_LEDGER_TABLE": TABLE}, client=object())
    assert reservation is not None and reservation.ledger_id == "us.amazon.nova-lite-v1:0#reserved"
    role = stack.get_logical_id(ledger.sweeper_function.role.node.default_child)
    (statement,) = [s for p in resources(template, "AWS::IAM::Policy").values() if {"Ref": role} in p["Properties"]["Roles"]
                    for s in p["Properties"]["PolicyDocument"]["Statement"] if "dynamodb:UpdateItem" in s["Action"]]
    assert statement["Condition"]["ForAllValues:StringEquals"]["dynamodb:LeadingKeys"] == [
        "quota#us.amazon.nova-lite-v1:0", "quota#us.amazon.nova-lite-v1:0#reserved"]
    # without one, none of these variables
    stack, ledger = stack_with()
    function = stack.get_logical_id(ledger.sweeper_function.node.default_child)
    env = template_of(stack).to_json()["Resources"][function]["Properties"]["Environment"]["Variables"]
    assert not set(construct_ledger.LEDGER_RESERVED_ENVIRONMENT) & set(env)


def test_no_state_machine_no_sweeper():
    stack, ledger = stack_with(state_machine=False)
    ledger.grant_use(iam.Role(stack, "Worker", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com")))
    assert ledger.sweeper_function is None and resources(template_of(stack), "AWS::Events::Rule") == {}


def test_sweeper_false_keeps_the_warning_and_a_non_bool_is_refused_by_name():
    stack, ledger = stack_with(sweeper=False)
    assert ledger.sweeper_function is None
    (warning,) = warnings_of(stack)
    assert "sweeper=False turned off the function that removes them" in warning
    problems = refused(lambda: stack_with(sweeper="yes"))
    assert any(p.startswith("sweeper='yes' is a str") for p in problems), problems


def test_a_customer_managed_table_key_is_granted_to_the_sweeper_through_dynamodb_only():
    stack = new_stack()
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    quota = ModelQuota(stack, "Quota", model=MODEL, tpm_quota=400_000, burndown=5)
    plan = quota.share("Summaries", quota.profile(input_tokens=1_000, output_tokens=200, max_tokens=400),
                       fraction=0.5, call_seconds=4)
    ledger = QuotaLedger(stack, "Ledger", quota=quota, encryption_key=key)
    BoundedMap(stack, "Summaries", max_concurrency=plan, model=MODEL, ledger=ledger,
               request=ConverseRequest(prompt="Hi", max_tokens=400))
    key_id = stack.get_logical_id(key.node.default_child)
    on_key = [s for s in policy_statements(template_of(stack)) if s["Resource"] == {"Fn::GetAtt": [key_id, "Arn"]}]
    # the state machine's and the sweeper's, each through DynamoDB only
    assert len(on_key) == 2 and all(s["Action"] == ["kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKey"]
                                    and s["Condition"] == {"StringEquals": {"kms:ViaService": "dynamodb.us-east-1.amazonaws.com"}}
                                    for s in on_key)


def test_the_sweepers_monthly_cost_is_what_it_runs_and_docs_quota_states_it(dynamodb):
    """The sweeper runs every minute whether or not a state machine does: a user must read its cost
    before deploying a ledger (docs/quota.md, the QuotaLedger docstring), computed from what an
    invocation really runs (the handler against its 70 s timeout) and the memory the template sets."""
    context = Context(construct_ledger.SWEEP_TIMEOUT.to_seconds())
    sweeper.handler({}, context, environ=ENVIRON, sleep=context.sleep, client=dynamodb, clock=lambda: EPOCH)
    assert construct_ledger.SWEEP_TIMEOUT.to_seconds() - context.remaining == construct_ledger.SWEEPER_BILLED_SECONDS
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=BedrockModel.from_id("us.amazon.nova-2-lite-v1:0"), tpm_quota=100_000)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    BoundedMap(stack, "Map", max_concurrency=quota.share("Map", quota.profile(input_tokens=100, output_tokens=10,
                                                                                    max_tokens=50), fraction=0.5, call_seconds=4),
               model=quota.model, ledger=ledger, request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.p"), max_tokens=50))
    (function,) = [f["Properties"] for f in resources(template_of(stack), "AWS::Lambda::Function").values()
                   if f["Properties"].get("Handler") == "quota_sweeper.handler.handler"]
    assert (function["MemorySize"], function["Architectures"]) == (construct_ledger.SWEEPER_MEMORY_MB, ["arm64"])
    monthly = f"about ${construct_ledger.SWEEPER_MONTHLY_USD:.2f} a month"
    docs = (Path(__file__).parents[2] / "docs" / "quota.md").read_text().replace("**", "")
    assert monthly in " ".join(docs.split()) and monthly in " ".join((QuotaLedger.__doc__ or "").split())
