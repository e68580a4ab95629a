"""Shares as guaranteed floors with a burst cap (issue 25): ModelQuota.share(..., burst_tpm=...) declares
what a consumer of the QuotaLedger may borrow up to; the plan allocates the floors and shows the bursts;
every consumer of the ledger (a process given environment(share), the QueuedInference worker, a state
machine) gets the share's burst as its cap in the ledger; and consumers built from those environments
borrow beyond their floors while the others are idle, up to their bursts, and a floor comes back to its
owner. The runtime parts run against moto's DynamoDB on a fake epoch clock; nothing reads the wall clock."""

from __future__ import annotations

import json
import re
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_stepfunctions as sfn
from genai_pacer import BedrockModel, BoundedMap, ConverseRequest, ModelQuota, QueuedInference, QuotaLedger
from genai_pacer.quota.ledger import LEDGER_ENVIRONMENT
from genai_pacer.quota.model_quota import PLAN_FILE_PREFIX
from helpers import definition, new_stack, only, refused, template_of
from pacer_runtime.ledger import LedgerHold, LedgerRefusal, SharedLedger
from test_ledger import TABLE, Clock, consistent, dynamodb, item, own_client

__all__ = ["dynamodb"]  # the fixture, shared with test_ledger

NOVA = BedrockModel.from_id("us.amazon.nova-lite-v1:0")
_, _, _, QUOTA_VAR, FLOOR_VAR, BURST_VAR, _, _ = LEDGER_ENVIRONMENT


def nova_quota(stack: cdk.Stack | None = None, **props) -> ModelQuota:
    return ModelQuota(stack or new_stack(), "Quota", **{"model": NOVA, "tpm_quota": 400_000, "burndown": 1, **props})


def profile(quota: ModelQuota):
    return quota.profile(input_tokens=2_500, output_tokens=300, max_tokens=440)


# --- declaring a burst, and the plan ----------------------------------------------------------------


def test_a_share_returns_its_floors_plan_and_records_the_burst_beside_it():
    quota = nova_quota()
    plain = nova_quota(new_stack("Other")).share("Nightly", profile(quota), fraction=0.25, call_seconds=6)
    plan = quota.share("Nightly", profile(quota), fraction=0.25, call_seconds=6, burst_tpm=300_000)
    assert plan == plain  # a construct given it is capped at its floor, as without a burst
    share = quota.shares["Nightly"]
    assert (share.tpm, share.burst_tpm) == (100_000, 300_000)
    # what one execution needs to draw the burst: three times the floor's rate, rounded down to whole calls
    assert (share.per_execution.max_concurrency, share.burst_per_execution.max_concurrency) == (3, 10)
    assert share.burst_per_execution.requests_per_minute == pytest.approx(3 * share.per_execution.requests_per_minute)


def test_executions_split_the_burst_as_they_split_the_floor():
    quota = nova_quota()
    quota.share("Workers", profile(quota), fraction=0.25, call_seconds=6, executions=2, burst_tpm=300_000)
    whole = nova_quota(new_stack("Whole"))
    whole.share("Workers", profile(whole), fraction=0.375, call_seconds=6)  # 150,000: one execution's slice
    assert quota.shares["Workers"].burst_per_execution == whole.shares["Workers"].per_execution


def test_the_plan_allocates_floors_so_bursts_past_the_quota_synthesize_and_the_plan_shows_them():
    stack = new_stack()
    quota = nova_quota(stack)
    quota.share("Interactive", profile(quota), fraction=0.5, call_seconds=6, burst_tpm=400_000)
    quota.share("Nightly", profile(quota), fraction=0.25, call_seconds=6, burst_tpm=300_000)
    quota.share("Digest", profile(quota), calls=2, call_seconds=6)
    assembly = cdk.Stage.of(stack).synth()  # 700,000 TPM of bursts on a 400,000 quota: no error
    data = json.loads(next(Path(assembly.directory).glob(f"{PLAN_FILE_PREFIX}*.json")).read_text())
    assert data["allocated_tpm"] == pytest.approx(300_000 + quota.shares["Digest"].tpm, abs=0.1)  # floors only
    assert [(s["name"], s["tpm"], s["burst_tpm"], s["burst_calls_per_execution"]) for s in data["shares"]] == [
        ("Interactive", 200_000, 400_000, 14), ("Nightly", 100_000, 300_000, 10),
        ("Digest", round(quota.shares["Digest"].tpm, 1), None, None),
    ]
    header, interactive, nightly, digest = data["table"][1:5]
    assert header.split()[:7] == ["consumer", "tier", "TPM", "of", "quota", "burst", "TPM"]
    assert interactive.split()[:5] == ["Interactive", "-", "200,000", "50.0%", "400,000"]
    assert nightly.split()[:5] == ["Nightly", "-", "100,000", "25.0%", "300,000"]
    assert digest.split()[4] == "-"  # no burst


def test_a_burst_of_exactly_the_allocatable_quota_passes_whatever_keep_free_rounds_to():
    quota = nova_quota(keep_free=0.7)  # 400,000 x 0.3 is 120,000.00000000001 in floating point
    quota.share("Nightly", profile(quota), fraction=0.25, call_seconds=6, burst_tpm=120_000)
    assert quota.shares["Nightly"].burst_tpm == 120_000


@pytest.mark.parametrize(("kwargs", "problem_id", "needle"), [
    ({"fraction": 0.25, "burst_tpm": 99_999}, "burst_tpm.minimum",
     "burst_tpm=99999 is below the minimum of 100,000; between the share's 100,000 TPM (its floor)"),
    ({"tpm": 50_000, "burst_tpm": 360_001}, "burst_tpm.maximum",
     "burst_tpm=360001 exceeds the maximum of 360,000; between the share's 50,000 TPM (its floor) and the quota's "
     "allocatable 360,000 TPM"),
    ({"fraction": 0.25, "burst_tpm": "lots"}, "burst_tpm.type", "burst_tpm='lots' is a str"),
    ({"fraction": 0.25, "burst_tpm": float("inf")}, "burst_tpm.not-finite", "burst_tpm=inf is not a finite number"),
    ({"calls": 2, "burst_tpm": 300_000}, "burst_tpm.fixed-width", "burst_tpm with calls=: a fixed-width share"),
    ({"calls": 2, "burst_tpm": 300_000, "service_tier": "reserved"}, "burst_tpm.reserved",
     "burst_tpm with service_tier='reserved'"),
    ({"fraction": 0.25, "burst_tpm": cdk.Token.as_number(cdk.Fn.ref("Burst"))}, "burst_tpm.deploy-time-share",
     "burst_tpm is an unresolved CDK token"),
    # the share's own amount refused: the burst's range is still checked against the quota
    ({"fraction": 2, "burst_tpm": 500_000}, "burst_tpm.maximum", "burst_tpm=500000 exceeds the maximum of 360,000"),
])
def test_a_bad_burst_is_refused_naming_it_and_nothing_is_drawn(kwargs, problem_id, needle):
    quota = nova_quota(keep_free=0.1, reserved_input_tpm=100_000, reserved_output_tpm=10_000)
    problems = refused(lambda: quota.share("Nightly", profile(quota), call_seconds=6, **kwargs))
    (burst,) = [p for p in problems if p.id == f"ModelQuota.share.{problem_id}"]
    assert burst.startswith(needle) or needle in burst, problems
    assert not quota.shares


# --- the burst is the consumer's cap in the ledger ---------------------------------------------------


def test_the_environment_gives_the_shares_burst_and_refuses_another():
    stack = new_stack()
    quota = nova_quota(stack)
    quota.share("Nightly", profile(quota), fraction=0.25, call_seconds=6, burst_tpm=300_000)
    quota.share("Interactive", profile(quota), fraction=0.5, call_seconds=6)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    interactive = ledger.environment("Interactive")  # both shares are the ledger's: none is held outside it
    # the burst cap is a token resolved at synth (at most what the shares outside the ledger leave)
    assert stack.resolve(ledger.environment("Nightly")[BURST_VAR]) == "300000"
    assert stack.resolve(ledger.environment("Nightly", burst_tpm=300_000)[BURST_VAR]) == "300000"  # the same: accepted
    problems = refused(lambda: ledger.environment("Nightly", burst_tpm=250_000))
    assert any(p.startswith("burst_tpm=250000 differs from the burst_tpm=300,000 share 'Nightly' was drawn with")
               for p in problems), problems
    # a share drawn without one: the whole allocatable quota, or what the environment sets
    assert stack.resolve(interactive[BURST_VAR]) == "400000"
    assert stack.resolve(ledger.environment("Interactive", burst_tpm=250_000)[BURST_VAR]) == "250000"


def test_the_queued_worker_borrows_up_to_its_shares_burst():
    stack = new_stack()
    quota = nova_quota(stack)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    plan = quota.share("Reviews", profile(quota), fraction=0.25, call_seconds=6, burst_tpm=300_000)
    worker = QueuedInference(stack, "Queued", model=NOVA, max_concurrency=plan, max_output_tokens=440, ledger=ledger)
    env = only(template_of(stack), "AWS::Lambda::Function")["Properties"]["Environment"]["Variables"]
    assert (env[FLOOR_VAR], env[BURST_VAR]) == ("100000", "300000")
    assert (worker.ledger_floor_tpm, worker.ledger_burst_tpm) == (100_000, 300_000)


MAX_TOKENS = 400
RESERVED = 2_500 + MAX_TOKENS  # the share profile's prompt + max_tokens x burndown 1


def bounded_map(burst_tpm: float | None, max_tokens: int = MAX_TOKENS) -> tuple[cdk.Stack, QuotaLedger]:
    stack = new_stack()
    quota = nova_quota(stack)
    plan = quota.share("Summaries", profile(quota), fraction=0.25, call_seconds=6, burst_tpm=burst_tpm)
    ledger = QuotaLedger(stack, "Ledger", quota=quota)
    BoundedMap(stack, "Summaries", max_concurrency=plan, model=NOVA, ledger=ledger,
               request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=max_tokens))
    return stack, ledger


def test_a_state_machines_reservation_is_held_to_its_shares_burst():
    stack, _ = bounded_map(300_000)
    states = definition(only(template_of(stack), "AWS::StepFunctions::StateMachine"))["States"]["Map"]["ItemProcessor"]["States"]
    values = states["InvokeModel reserve"]["Parameters"]["ExpressionAttributeValues"]
    assert (values[":total"], values[":mine"]) == ({"N": str(400_000 - RESERVED)}, {"N": str(300_000 - RESERVED)})
    stack, _ = bounded_map(None)  # no burst declared: the whole allocatable quota, as before
    states = definition(only(template_of(stack), "AWS::StepFunctions::StateMachine"))["States"]["Map"]["ItemProcessor"]["States"]
    assert states["InvokeModel reserve"]["Parameters"]["ExpressionAttributeValues"][":mine"] == {"N": str(400_000 - RESERVED)}


def test_a_reservation_above_the_shares_burst_is_refused_at_synth_naming_it():
    problems = refused(lambda: bounded_map(100_000, max_tokens=98_000))
    assert any(re.search(r"a call reserves 100,500 tokens .* more than the consumer may hold \(100,000 TPM\).*"
                         r"raise the share's burst_tpm", p) for p in problems), problems


# --- at run time: borrowing up to the burst, and the floor coming back ---------------------------------


def consumer_of(env: dict, client, clock: Clock) -> SharedLedger:
    """What a deployed process builds: SharedLedger.from_environment() on its function's variables (the
    template's, the table's Ref aside)."""
    return SharedLedger.from_environment({**env, LEDGER_ENVIRONMENT[0]: TABLE}, client=client, clock=clock,
                                         sleep=lambda _: None)


def function_env(stack: cdk.Stack, ledger: QuotaLedger, share: str) -> dict:
    function = lambda_.Function(stack, share, runtime=lambda_.Runtime.PYTHON_3_12, handler="index.handler",
                                code=lambda_.Code.from_inline("def handler(event, context): pass"),
                                environment=ledger.environment(share))
    ledger.grant_use(function)
    return function


def test_consumers_borrow_beyond_their_floors_up_to_their_bursts_and_an_owner_gets_its_floor_back(dynamodb):
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=NOVA, tpm_quota=10_000, burndown=1)
    small = quota.profile(input_tokens=100, output_tokens=50, max_tokens=100)
    quota.share("Nightly", small, fraction=0.25, call_seconds=10, burst_tpm=7_500)  # floor 2,500
    quota.share("Interactive", small, fraction=0.5, call_seconds=10)  # floor 5,000, burst: the whole quota
    ledger = QuotaLedger(stack, "Ledger", quota=quota, ledger_id="m")
    functions = {name: function_env(stack, ledger, name) for name in ("Nightly", "Interactive")}
    template = template_of(stack).to_json()["Resources"]
    envs = {name: template[stack.get_logical_id(f.node.default_child)]["Properties"]["Environment"]["Variables"]
            for name, f in functions.items()}
    assert [(envs[n][FLOOR_VAR], envs[n][BURST_VAR]) for n in ("Nightly", "Interactive")] == [
        ("2500", "7500"), ("5000", "10000")]

    clock = Clock()
    nightly, interactive = consumer_of(envs["Nightly"], dynamodb, clock), consumer_of(envs["Interactive"], own_client(), clock)
    # Interactive is idle: Nightly runs within its floor, then borrows what Interactive leaves, up to its burst
    within = nightly.try_reserve(2_500)
    assert isinstance(within, LedgerHold) and not within.borrowed
    borrowed = [nightly.try_reserve(2_500), nightly.try_reserve(2_500)]
    assert all(isinstance(h, LedgerHold) and h.borrowed for h in borrowed)
    capped = nightly.try_reserve(100)  # 7,500 held: its burst, though 2,500 of the quota are free
    assert isinstance(capped, LedgerRefusal) and "burst cap" in capped.reason
    assert consistent(dynamodb).consumers == {"Nightly": 7_500}

    # Interactive needs its floor: the free 2,500 at once, then it waits within its floor and says so
    assert isinstance(interactive.try_reserve(2_500), LedgerHold)
    waiting = interactive.try_reserve(2_500)
    assert isinstance(waiting, LedgerRefusal) and waiting.within_floor
    assert item(dynamodb)["w#Interactive"]["S"].endswith(" 2500")
    # Nightly's borrowed calls settle lower: what they return is kept for Interactive, not borrowed again
    for hold in borrowed:
        nightly.settle(hold, 1_000)
    assert isinstance(nightly.try_reserve(1_500), LedgerRefusal)  # 3,000 free, 2,500 of them Interactive's
    assert isinstance(interactive.try_reserve(2_500), LedgerHold)  # its floor is back
    assert consistent(dynamodb).consumers == {"Nightly": 4_500, "Interactive": 5_000}

    # a minute later every hold has left Bedrock's window: Nightly borrows again, up to its burst only
    clock.now += 63
    assert isinstance(nightly.try_reserve(7_500), LedgerHold)
    assert isinstance(nightly.try_reserve(1), LedgerRefusal)


# --- layer 2: the deploy-time cap is the burst's, and the plan counts a ledger holder at its floor ------


def ledger_quota(stack: cdk.Stack, **props) -> tuple[ModelQuota, QuotaLedger]:
    quota = nova_quota(stack, **props)
    return quota, QuotaLedger(stack, "Ledger", quota=quota)


LEDGER_REQUEST = ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=440)


def scheduled(stack, id, cap, ledger):
    from aws_cdk import aws_scheduler as scheduler
    from genai_pacer import AnswerStore, ScheduledPrecompute

    return ScheduledPrecompute(
        stack, id, answer_store=AnswerStore(stack, f"{id}Store"), model=NOVA, max_concurrency=cap, ledger=ledger,
        request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.item.prompt"), max_tokens=440),
        schedule=scheduler.ScheduleExpression.cron(minute="0", hour="6"), items=[{"key": "note#a", "prompt": "a"}])


def distributed(stack, id, cap, ledger):
    from aws_cdk import aws_s3 as s3
    from genai_pacer import BoundedDistributedMap

    return BoundedDistributedMap(stack, id, model=NOVA, request=LEDGER_REQUEST, max_concurrency=cap, ledger=ledger,
                                 items_bucket=s3.Bucket(stack, f"{id}Items"), items_key="k.jsonl")


LEDGER_TAKERS = {
    "BoundedMap": lambda stack, id, cap, ledger: BoundedMap(stack, id, model=NOVA, request=LEDGER_REQUEST,
                                                            max_concurrency=cap, ledger=ledger),
    "BoundedDistributedMap": distributed,
    "ScheduledPrecompute": scheduled,
    "QueuedInference": lambda stack, id, cap, ledger: QueuedInference(stack, id, model=NOVA, max_concurrency=cap,
                                                                      max_output_tokens=440, ledger=ledger),
}


def deployed_caps(stack: cdk.Stack) -> list[int]:
    """Each Map's MaxConcurrency and each event source's maximum concurrency in the template."""
    text = json.dumps(template_of(stack).to_json())
    maps = [int(n) for n in re.findall(r'\\"MaxConcurrency\\":(\d+)', text)]
    sources = [int(n) for n in re.findall(r'"MaximumConcurrency": (\d+)', text)]
    return maps + sources


@pytest.mark.parametrize("kind", LEDGER_TAKERS)
@pytest.mark.parametrize(("burst_tpm", "cap"), [(300_000, 10), (None, 3)])
def test_a_construct_in_the_ledger_is_capped_at_the_calls_its_burst_sustains(kind, burst_tpm, cap):
    stack = new_stack()
    quota, ledger = ledger_quota(stack)
    plan = quota.share("Nightly", profile(quota), fraction=0.25, call_seconds=6, burst_tpm=burst_tpm)
    construct = LEDGER_TAKERS[kind](stack, "Nightly", plan, ledger)
    assert deployed_caps(stack) == [cap]  # 3: the floor's calls, as without a burst
    data = json.loads(next(Path(cdk.Stage.of(stack).synth().directory).glob(f"{PLAN_FILE_PREFIX}*.json")).read_text())
    (share,) = data["shares"]
    # held by the construct, in the ledger: counted at its floor whatever its cap
    assert (share["holders"], share["in_ledger"], share["in_flight"], share["drawn_tpm"]) == (
        [construct.node.path], True, cap, 100_000)
    assert data["allocated_tpm"] == 100_000


def test_bursts_that_together_pass_the_quota_synthesize_when_their_holders_are_in_the_ledger():
    """Two Maps whose floors split the quota, each capped at the calls of the whole quota: counted at their
    caps they would draw twice the quota (and did before the ledger counted floors)."""
    stack = new_stack()
    quota, ledger = ledger_quota(stack)
    for name in ("Interactive", "Nightly"):
        plan = quota.share(name, profile(quota), fraction=0.5, call_seconds=6, burst_tpm=400_000)
        BoundedMap(stack, name, model=NOVA, request=LEDGER_REQUEST, max_concurrency=plan, ledger=ledger)
    assert deployed_caps(stack) == [14, 14]  # each may borrow up to the whole quota
    plan = quota.plan(consumers=True)
    assert plan.allocated_tpm == 400_000 and plan.in_flight == 28
    assert not plan.over_allocated()


def function_holding(stack: cdk.Stack, ledger: QuotaLedger | None, share: str, reserved: int,
                     quota: ModelQuota) -> lambda_.Function:
    function = lambda_.Function(stack, share, runtime=lambda_.Runtime.PYTHON_3_12, handler="index.handler",
                                code=lambda_.Code.from_inline("def handler(event, context): pass"),
                                reserved_concurrent_executions=reserved)
    quota.model.grant_invoke(function)
    if ledger is not None:
        for variable, value in ledger.environment(share).items():
            function.add_environment(variable, value)
        ledger.grant_use(function)
    return function


def test_a_function_of_yours_granted_the_ledger_is_counted_at_its_floor_and_without_the_grant_at_its_cap():
    stack = new_stack()
    quota, ledger = ledger_quota(stack)
    quota.share("Worker", profile(quota), fraction=0.5, call_seconds=6)  # 7 calls; no burst: the whole quota
    function_holding(stack, ledger, "Worker", 14, quota)
    plan = quota.plan(consumers=True)
    (share,) = plan.shares
    assert (share.in_ledger, share.in_flight, share.drawn_tpm) == (True, 14, 200_000)
    cdk.Stage.of(stack).synth()  # fits: the ledger, not its 14 calls, bounds it

    stack = new_stack("Unpaced")
    quota = nova_quota(stack)
    quota.share("Worker", profile(quota), fraction=0.5, call_seconds=6)
    function_holding(stack, None, "Worker", 14, quota)
    plan = quota.plan(consumers=True)
    (share,) = plan.shares  # 14 calls outside any ledger: counted at its cap, almost the whole quota
    assert not share.in_ledger and share.drawn_tpm == share.tpm_at_cap > 390_000


def synth_error(stack: cdk.Stack) -> str:
    with pytest.raises(RuntimeError) as error:
        cdk.Stage.of(stack).synth()
    return str(error.value)


def test_a_burst_share_held_outside_the_ledger_fails_synth_naming_its_holder():
    from genai_pacer import AnswerRouter, AnswerStore

    stack = new_stack()
    quota, ledger = ledger_quota(stack)
    plan = quota.share("Router", profile(quota), fraction=0.25, call_seconds=6, burst_tpm=300_000)
    AnswerRouter(stack, "Router", answer_store=AnswerStore(stack, "Store"), model=NOVA, reserved_concurrency=plan,
                 prompts={"note#{ticker}": "Write a note on {ticker}."})
    quota.share("Map", profile(quota), fraction=0.25, call_seconds=6, burst_tpm=300_000)
    BoundedMap(stack, "Map", model=NOVA, request=LEDGER_REQUEST, max_concurrency=3)  # by name, no ledger=
    quota.share("Worker", profile(quota), fraction=0.25, call_seconds=6, burst_tpm=300_000)
    function_holding(stack, ledger, "Worker", 10, quota)  # in the ledger: fine
    text = synth_error(stack)
    refusals = re.findall(r"\[ModelQuota\.share\.burst-outside-ledger\] ModelQuota Quota \(us\.amazon\.nova-lite-v1:0\): "
                          r"share '(\w+)' was drawn with burst_tpm=300,000 \(its floor 100,000 TPM\), but its holder "
                          r"(\w+) (\S+) takes part in no QuotaLedger", text)
    assert refusals == [("Router", "AnswerRouter", "Test/Router"), ("Map", "BoundedMap", "Test/Map")], text
    assert "Fix: give the holder ledger=QuotaLedger(...)" in text


def test_a_load_replay_in_the_ledger_may_run_up_to_the_calls_its_burst_sustains():
    from aws_cdk import aws_s3 as s3
    from genai_pacer import LoadReplay

    def replay(concurrency: int, *, with_ledger: bool = True, burst_tpm: float | None = 300_000) -> list[str]:
        stack = new_stack()
        quota, ledger = ledger_quota(stack)
        share = quota.share("Replay", profile(quota), fraction=0.25, call_seconds=6, burst_tpm=burst_tpm)
        try:
            LoadReplay(stack, "Replay", model=NOVA, prompts_bucket=s3.Bucket(stack, "Prompts"), prompts_key="p.jsonl",
                       requests=8, warmup=0, concurrency=concurrency, profile=profile(quota), share=share,
                       ledger=ledger if with_ledger else None)
        except Exception as error:  # noqa: BLE001 - the refusal's problems are what the test reads
            return [p.id for p in getattr(error, "problems", [error])]
        return []

    assert replay(10) == []  # the burst's 10 calls
    assert replay(11) == ["LoadReplay.concurrency.above-share"]
    assert replay(4, burst_tpm=None) == ["LoadReplay.concurrency.above-share"]  # the floor's 3
    assert replay(4, with_ledger=False) == ["LoadReplay.concurrency.above-share"]  # outside a ledger: the floor's


def test_a_holder_in_the_ledger_with_a_deploy_time_cap_is_not_warned_that_the_plan_cannot_check_it():
    from aws_cdk.assertions import Annotations, Match

    stack = new_stack()
    quota, ledger = ledger_quota(stack)
    quota.share("Worker", profile(quota), fraction=0.25, call_seconds=6, burst_tpm=300_000)
    quota.share("Other", profile(quota), fraction=0.25, call_seconds=6)
    cap = cdk.CfnParameter(stack, "Cap", type="Number", default=5).value_as_number
    for name, in_ledger in (("Worker", True), ("Other", False)):
        function = lambda_.Function(stack, name, runtime=lambda_.Runtime.PYTHON_3_12, handler="index.handler",
                                    code=lambda_.Code.from_inline("def handler(event, context): pass"),
                                    reserved_concurrent_executions=cap)
        quota.model.grant_invoke(function)
        if in_ledger:
            ledger.grant_use(function)
    warned = [m.id for m in Annotations.from_stack(stack).find_warning("*", Match.any_value())
              if "genai-pacer:quota-deploy-time-cap" in str(m.entry.data)]
    assert warned == ["/Test/Other"]  # the ledger bounds the Worker's deployed cap; nothing bounds the Other's
