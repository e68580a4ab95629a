"""A share's priority in the QuotaLedger (`ModelQuota.share(..., priority=...)`), at synth: checked by
name, recorded in the plan, given to each consumer that takes part (a function's environment, the queue
worker's), refused where nothing would read it (a holder outside every ledger) or where it cannot be
kept (an interactive state machine: its want is never a priority's)."""

from __future__ import annotations

import json
import re

import aws_cdk as cdk
import pytest
from genai_pacer import BoundedMap, QueuedInference
from genai_pacer.quota.ledger import LEDGER_PRIORITY_VARIABLE
from genai_pacer.quota.model_quota import PLAN_FILE_PREFIX, PRIORITIES
from helpers import new_stack, only, refused, template_of
from test_quota_burst import LEDGER_REQUEST, NOVA, function_holding, ledger_quota, profile, synth_error


def test_a_share_drawn_with_a_priority_gives_it_to_its_consumers_environment_and_the_plan(tmp_path):
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Test", env=cdk.Environment(account="111122223333", region="us-east-1"))
    quota, ledger = ledger_quota(stack)
    quota.share("Assistant", profile(quota), fraction=0.25, call_seconds=6, priority="interactive")
    quota.share("Nightly", profile(quota), fraction=0.25, call_seconds=6, priority="batch")
    quota.share("Reports", profile(quota), fraction=0.25, call_seconds=6)
    assert ledger.environment("Assistant")[LEDGER_PRIORITY_VARIABLE] == "interactive"
    assert ledger.environment("Nightly")[LEDGER_PRIORITY_VARIABLE] == "batch"
    assert LEDGER_PRIORITY_VARIABLE not in ledger.environment("Reports")  # none given: the runtime's lowest
    for name in ("Assistant", "Nightly", "Reports"):
        function_holding(stack, ledger, name, 1, quota)
    app.synth()
    (plan_file,) = tmp_path.glob(f"{PLAN_FILE_PREFIX}*.json")
    plan = json.loads(plan_file.read_text())
    assert {s["name"]: s["priority"] for s in plan["shares"]} == {
        "Assistant": "interactive", "Nightly": "batch", "Reports": None}
    assert PRIORITIES == ("batch", "interactive")


@pytest.mark.parametrize(("priority", "needle"), [
    ("urgent", "priority='urgent' must be one of 'batch', 'interactive'"),
    ("Interactive", "priority='Interactive' must be one of"),
])
def test_a_priority_that_is_not_one_is_refused_by_name(priority, needle):
    stack = new_stack()
    quota, _ = ledger_quota(stack)
    problems = refused(lambda: quota.share("A", profile(quota), fraction=0.25, call_seconds=6, priority=priority))
    assert any(needle in p for p in problems), problems


def test_a_deploy_time_priority_is_refused_by_name():
    stack = new_stack()
    quota, _ = ledger_quota(stack)
    token = cdk.CfnParameter(stack, "Priority").value_as_string
    problems = refused(lambda: quota.share("A", profile(quota), fraction=0.25, call_seconds=6, priority=token))
    assert any("priority is an unresolved CDK token" in p for p in problems), problems


def test_a_priority_held_outside_every_ledger_fails_synth_naming_its_holder():
    stack = new_stack()
    quota, ledger = ledger_quota(stack)
    quota.share("Outside", profile(quota), fraction=0.25, call_seconds=6, priority="interactive")
    function_holding(stack, None, "Outside", 1, quota)
    quota.share("Inside", profile(quota), fraction=0.25, call_seconds=6, priority="interactive")
    function_holding(stack, ledger, "Inside", 1, quota)
    text = synth_error(stack)
    refusals = re.findall(r"\[ModelQuota\.share\.priority-outside-ledger\] .*?share '(\w+)' was drawn with "
                          r"priority='interactive', but its holder \w+ (\S+) takes part in no QuotaLedger", text)
    assert refusals == [("Outside", "Test/Outside")], text


def test_the_queue_worker_takes_its_shares_priority():
    stack = new_stack()
    quota, ledger = ledger_quota(stack)
    plan = quota.share("Reviews", profile(quota), fraction=0.25, call_seconds=6, priority="interactive")
    worker = QueuedInference(stack, "Reviews", model=NOVA, max_concurrency=plan, max_output_tokens=440, ledger=ledger)
    function = template_of(stack).to_json()["Resources"][stack.get_logical_id(worker.function.node.default_child)]
    assert function["Properties"]["Environment"]["Variables"][LEDGER_PRIORITY_VARIABLE] == "interactive"


def test_an_interactive_state_machine_is_refused_and_a_batch_one_takes_part():
    stack = new_stack()
    quota, ledger = ledger_quota(stack)
    plan = quota.share("Map", profile(quota), fraction=0.25, call_seconds=6, priority="interactive")
    problems = refused(lambda: BoundedMap(stack, "Map", model=NOVA, max_concurrency=plan, ledger=ledger,
                                          request=LEDGER_REQUEST))
    assert any("priority='interactive'" in p and "state machine" in p for p in problems), problems
    stack = new_stack()
    quota, ledger = ledger_quota(stack)
    plan = quota.share("Map", profile(quota), fraction=0.25, call_seconds=6, priority="batch")
    BoundedMap(stack, "Map", model=NOVA, max_concurrency=plan, ledger=ledger, request=LEDGER_REQUEST)
    only(template_of(stack).to_json(), "AWS::StepFunctions::StateMachine")
