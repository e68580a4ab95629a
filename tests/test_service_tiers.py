"""Service tiers (issue 37): the tier each request builder sends, where the API model puts it, and
the requests that cannot carry one refused with the call to make instead."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_stepfunctions as sfn
from genai_pacer import BedrockModel, BoundedMap, ConverseRequest, InvalidPropsError, NativeRequest
from genai_pacer.testing import BedrockEmulator, ModelSpec
from genai_pacer.testing.sfn import StateMachineRunner
from helpers import all_states, definition, resources
from pacer_runtime import RequestError, build_converse_request, converse

NOVA = "amazon.nova-lite-v1:0"


def converse_task_parameters(stack: cdk.Stack) -> list[dict]:
    template = cdk.assertions.Template.from_stack(stack).to_json()
    found = []
    for machine in resources(template, "AWS::StepFunctions::StateMachine").values():
        for state in all_states(definition(machine)).values():
            if state["Type"] == "Task" and state["Resource"].endswith(":aws-sdk:bedrockruntime:converse"):
                found.append(state["Parameters"])
    return found


def bounded_map(stack: cdk.Stack, request: ConverseRequest) -> BoundedMap:
    return BoundedMap(stack, "Map", max_concurrency=4, model=BedrockModel.from_id(NOVA), request=request)


# --- ConverseRequest: the Step Functions task ---------------------------------------------------------


@pytest.mark.parametrize("tier", ["priority", "default", "flex", "reserved"])
def test_a_converse_task_sends_the_tier_beside_the_latency_mode(tier):
    stack = cdk.Stack(cdk.App(), "Tiers")
    bounded_map(stack, ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=300,
                                       latency="optimized", service_tier=tier))
    [parameters] = converse_task_parameters(stack)
    assert parameters["ServiceTier"] == {"Type": tier}
    assert parameters["PerformanceConfig"] == {"Latency": "optimized"}


def test_a_converse_task_without_a_tier_sends_none():
    stack = cdk.Stack(cdk.App(), "Tiers")
    bounded_map(stack, ConverseRequest(prompt="p", max_tokens=300))
    [parameters] = converse_task_parameters(stack)
    assert "ServiceTier" not in parameters


def test_a_deploy_time_tier_flows_into_the_task():
    stack = cdk.Stack(cdk.App(), "Tiers")
    tier = cdk.CfnParameter(stack, "Tier", type="String", allowed_values=["priority", "default", "flex"])
    bounded_map(stack, ConverseRequest(prompt="p", max_tokens=300, service_tier=tier.value_as_string))  # type: ignore[arg-type]
    definition_string = json.dumps(cdk.assertions.Template.from_stack(stack).to_json())
    # the definition is an Fn::Join with the parameter's Ref where the tier goes
    assert '\\"ServiceTier\\":{\\"Type\\":\\"' in definition_string and '{"Ref": "Tier"}' in definition_string


@pytest.mark.parametrize(
    ("tier", "message"),
    [
        ("standard", "service_tier='standard' must be one of 'priority', 'default', 'flex', 'reserved'; Bedrock spells standard 'default'"),
        ("Priority", "service_tier='Priority' must be one of"),
        ("", "service_tier='' must be one of"),
        (1, "service_tier=1 must be one of"),
    ],
)
def test_a_converse_request_refuses_a_tier_bedrock_does_not_have(tier, message):
    with pytest.raises(InvalidPropsError) as caught:
        ConverseRequest(prompt="p", max_tokens=300, service_tier=tier)
    assert message in str(caught.value)


def test_a_converse_request_refuses_a_numeric_deploy_time_tier():
    stack = cdk.Stack(cdk.App(), "Tiers")
    number = cdk.CfnParameter(stack, "Tier", type="Number").value_as_number
    with pytest.raises(InvalidPropsError, match="service_tier is a deploy-time number"):
        ConverseRequest(prompt="p", max_tokens=300, service_tier=number)  # type: ignore[arg-type]


def test_a_native_request_refuses_a_tier_naming_converse():
    with pytest.raises(InvalidPropsError) as caught:
        NativeRequest(body={"messages": [], "max_tokens": 10}, service_tier="flex")
    message = str(caught.value)
    assert "service_tier='flex' cannot be sent" in message
    assert "X-Amzn-Bedrock-Service-Tier" in message
    assert "ConverseRequest(prompt=..., max_tokens=..., service_tier=...)" in message


def test_a_map_run_offline_asks_bedrock_for_its_tier_and_is_served_at_it():
    """The task's PascalCase ServiceTier reaches Converse as serviceTier (the emulator validates the
    call against botocore's model) and the emulator serves the tier asked for."""
    stack = cdk.Stack(cdk.App(), "Offline")
    built = bounded_map(stack, ConverseRequest(prompt=sfn.JsonPath.string_at("$.prompt"), max_tokens=50,
                                               service_tier="flex"))
    spec = ModelSpec(NOVA, tpm_quota=10_000_000, answer_tokens=20)
    with BedrockEmulator([spec], time_scale=600, seed=3) as bedrock, StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run({"items": [{"prompt": f"q{i}"} for i in range(3)]},
                         state_machine=built.state_machine).raise_for_status()
    assert len(run.output) == 3
    assert [(i.service_tier, i.served_tier) for i in run.invocations] == [("flex", "flex")] * 3


# --- the runtime request builder the worker, the router and experiments share ------------------------


def test_the_runtime_builder_puts_the_tier_where_converse_takes_it():
    request = build_converse_request(NOVA, prompt="p", latency="optimized", service_tier="priority")
    assert request["serviceTier"] == {"type": "priority"}
    assert request["performanceConfig"] == {"latency": "optimized"}
    assert "serviceTier" not in build_converse_request(NOVA, prompt="p")


@pytest.mark.parametrize(
    ("tier", "message"),
    [
        ("standard", "service_tier='standard' must be one of 'priority', 'default', 'flex', 'reserved' (Bedrock spells standard 'default')"),
        ("FLEX", "service_tier='FLEX' must be one of"),
        (3, "service_tier=3 must be one of"),
        ("x" * 500, "service_tier (a string) must be one of"),  # a long string is not echoed
        ({"type": "flex"}, "service_tier (an object) must be one of"),
    ],
)
def test_the_runtime_builder_refuses_a_tier_bedrock_does_not_have(tier, message):
    with pytest.raises(RequestError) as caught:
        build_converse_request(NOVA, prompt="p", service_tier=tier)
    assert message in str(caught.value)


def test_a_real_client_sends_the_built_tier_and_reads_the_tier_that_served_it():
    spec = ModelSpec(NOVA, tpm_quota=10_000_000, answer_tokens=5)
    with BedrockEmulator([spec], time_scale=600, seed=3) as bedrock:
        client = bedrock.client()
        converse(client, build_converse_request(NOVA, prompt="p", service_tier="flex",
                                                inference_config={"maxTokens": 10}))
        [call] = bedrock.invocations
    assert (call.service_tier, call.served_tier) == ("flex", "flex")


# --- the constructs whose Lambda functions call the model --------------------------------------------


def lambda_environment(stack: cdk.Stack, handler: str) -> dict:
    template = cdk.assertions.Template.from_stack(stack).to_json()
    [function] = [f for f in resources(template, "AWS::Lambda::Function").values()
                  if f["Properties"].get("Handler") == handler]
    return function["Properties"]["Environment"]["Variables"]


def test_a_queue_worker_and_a_router_get_their_construct_tier():
    from genai_pacer import AnswerRouter, AnswerStore, QueuedInference

    stack = cdk.Stack(cdk.App(), "Tiers")
    model = BedrockModel.from_id(NOVA)
    QueuedInference(stack, "Queue", model=model, max_concurrency=2, service_tier="flex")
    AnswerRouter(stack, "Router", answer_store=AnswerStore(stack, "Store"), model=model, service_tier="priority")
    assert lambda_environment(stack, "queued_worker.handler.handler")["SERVICE_TIER"] == "flex"
    assert lambda_environment(stack, "answer_router.handler.handler")["SERVICE_TIER"] == "priority"


def test_without_a_tier_the_functions_get_no_tier_variable():
    from genai_pacer import AnswerRouter, AnswerStore, QueuedInference

    stack = cdk.Stack(cdk.App(), "Tiers")
    model = BedrockModel.from_id(NOVA)
    QueuedInference(stack, "Queue", model=model, max_concurrency=2)
    AnswerRouter(stack, "Router", answer_store=AnswerStore(stack, "Store"), model=model)
    assert "SERVICE_TIER" not in lambda_environment(stack, "queued_worker.handler.handler")
    assert "SERVICE_TIER" not in lambda_environment(stack, "answer_router.handler.handler")


def test_a_deploy_time_tier_reaches_the_worker_as_a_reference():
    from genai_pacer import QueuedInference

    stack = cdk.Stack(cdk.App(), "Tiers")
    tier = cdk.CfnParameter(stack, "Tier", type="String")
    QueuedInference(stack, "Queue", model=BedrockModel.from_id(NOVA), max_concurrency=2,
                    service_tier=tier.value_as_string)  # type: ignore[arg-type]
    assert lambda_environment(stack, "queued_worker.handler.handler")["SERVICE_TIER"] == {"Ref": "Tier"}


@pytest.mark.parametrize("construct", ["QueuedInference", "AnswerRouter"])
def test_a_construct_refuses_a_tier_bedrock_does_not_have_naming_itself(construct):
    import genai_pacer

    stack = cdk.Stack(cdk.App(), "Tiers")
    model = BedrockModel.from_id(NOVA)
    props: dict = {"max_concurrency": 2} if construct == "QueuedInference" else {
        "answer_store": genai_pacer.AnswerStore(stack, "Store")}
    with pytest.raises(InvalidPropsError) as caught:
        getattr(genai_pacer, construct)(stack, "It", model=model, service_tier="standard", **props)
    assert caught.value.path == "Tiers/It"
    assert f"{construct}.service_tier.choice" in caught.value.ids
    assert "service_tier='standard' must be one of" in str(caught.value)
    assert "Bedrock spells standard 'default'" in str(caught.value)


# --- the handlers send their construct's tier, and a caller cannot choose another ---------------------

from answer_router_harness import converse_params, converse_response  # noqa: E402
from answer_router_harness import router as router  # noqa: E402,F401  (the fixture)
from queued_worker_harness import answer, item, record, worker_environment  # noqa: E402
from queued_worker_harness import worker as worker  # noqa: E402,F401  (the fixture)


@pytest.fixture
def priority_router(monkeypatch, request):
    monkeypatch.setenv("SERVICE_TIER", "priority")
    return request.getfixturevalue("router")


@pytest.fixture
def flex_worker(monkeypatch, request):
    monkeypatch.setenv("SERVICE_TIER", "flex")
    return request.getfixturevalue("worker")


def test_a_routers_miss_asks_for_the_routers_tier(priority_router):
    expected = {**converse_params("Answer 7."), "serviceTier": {"type": "priority"}}
    priority_router.stub.add_response("converse", converse_response("fresh"), expected)
    assert priority_router.handler({"key": "k#7"})["answer"] == "fresh"


def test_a_routers_miss_records_the_tier_it_asked_for_and_the_tier_that_served_it(priority_router, capsys):
    """The reference stack's Priority caller: a miss Bedrock served at default is logged and counted as
    served below its tier, so the dashboard's tier row and the TierDowngrades alarm see the router too."""
    expected = {**converse_params("Answer 7."), "serviceTier": {"type": "priority"}}
    served_default = {**converse_response("fresh"), "serviceTier": {"type": "default"}}
    priority_router.stub.add_response("converse", served_default, expected)
    assert priority_router.handler({"key": "k#7"})["answer"] == "fresh"
    stored = priority_router.DDB.get_item(TableName="answers", Key={"pk": {"S": "k#7"}})["Item"]
    assert (stored["requested_tier"], stored["served_tier"]) == ({"S": "priority"}, {"S": "default"})  # written back
    calls = [line for line in emf_lines(capsys) if "InputTokens" in line]
    assert [(c["ModelId"], c["RequestedTier"], c["ServedTier"], c["ServedBelowRequestedTier"]) for c in calls] == [
        (priority_router.MODEL_ID, "priority", "default", 1)]
    assert ["FunctionName", "ModelId"] in [sorted(d) for d in calls[0]["_aws"]["CloudWatchMetrics"][0]["Dimensions"]]


def test_a_queued_message_is_answered_at_the_workers_tier(flex_worker):
    expected = {"modelId": flex_worker.MODEL_ID, "messages": [{"role": "user", "content": [{"text": "p"}]}],
                "inferenceConfig": {"maxTokens": 4096}, "serviceTier": {"type": "flex"}}
    flex_worker.stub.add_response("converse", {**answer("ok"), "serviceTier": {"type": "flex"}}, expected)
    assert flex_worker.handler({"Records": [record("m1", {"key": "k", "prompt": "p"})]}) == {"batchItemFailures": []}
    stored = item(flex_worker, "k")
    assert stored is not None and (stored["requested_tier"], stored["served_tier"]) == ("flex", "flex")


def test_a_message_cannot_choose_its_own_tier(flex_worker, capsys):
    # no model call is queued: the message fails alone, as a bad request, before any call
    body = {"key": "k", "prompt": "p", "serviceTier": {"type": "priority"}}
    result = flex_worker.handler({"Records": [record("m1", body)]})
    assert result == {"batchItemFailures": [{"itemIdentifier": "m1"}]}
    out = capsys.readouterr().out
    assert "unknown fields ['serviceTier']" in out and '"reason": "invalid-message"' in out


def test_a_worker_given_a_bad_tier_refuses_to_start(monkeypatch):
    import importlib
    import sys

    worker_environment(monkeypatch, SERVICE_TIER="standard")
    sys.modules.pop("queued_worker.handler", None)
    with pytest.raises(RequestError, match="service_tier='standard' must be one of"):
        importlib.import_module("queued_worker.handler")


# --- experiments: one tier for every variant -----------------------------------------------------------


def test_an_experiments_request_carries_the_callers_tier_for_every_variant():
    import sys
    from pathlib import Path

    from pacer_runtime.experiment import Experiment, build_request

    sys.path.insert(0, str(Path(__file__).parent / "experiments"))
    from test_experiment_assignment import PROMPT_ARN, document

    doc = document(50, 50)
    doc["variants"][1] = {"name": "managed", "share": 50, "modelId": NOVA, "prompt": {"promptArn": PROMPT_ARN}}
    experiment = Experiment.from_config(doc)
    template = build_request(experiment, experiment.variant("control"), variables={"question": "q"}, service_tier="flex")
    managed = build_request(experiment, experiment.variant("managed"), variables={"question": "q"}, service_tier="flex")
    assert template["serviceTier"] == managed["serviceTier"] == {"type": "flex"}
    assert "serviceTier" not in build_request(experiment, experiment.variant("managed"), variables={"question": "q"})
    with pytest.raises(RequestError, match="service_tier='standard' must be one of"):
        build_request(experiment, experiment.variant("managed"), variables={"question": "q"}, service_tier="standard")


# --- requested versus served: every call records both, and counts a call served below its tier --------


def emf_lines(capsys) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith('{"_aws"')]


def test_a_reservation_overflow_is_read_from_the_response_and_counted_as_served_below(capsys):
    """The reservation holds one call's 200 output tokens a minute; the second overflows to default."""
    from genai_pacer.testing import ManualClock
    from pacer_runtime import metrics

    spec = ModelSpec(NOVA, tpm_quota=1_000_000, reserved_input_tpm=1_000, reserved_output_tpm=200, answer_tokens=20,
                     jitter=0)
    with BedrockEmulator([spec], clock=ManualClock(instant=True), seed=1) as bedrock:
        client = bedrock.client()
        request = build_converse_request(NOVA, prompt="p", service_tier="reserved", inference_config={"maxTokens": 200})
        first, second = converse(client, request), converse(client, request)
    assert (first.served_tier, second.served_tier) == ("reserved", "default")
    for result in (first, second):
        metrics.emit_call(result, model_id=NOVA, request=request, dimensions={"FunctionName": "worker"})
    lines = emf_lines(capsys)
    calls = [line for line in lines if "InputTokens" in line]
    assert [(c["RequestedTier"], c["ServedTier"], c["ServedBelowRequestedTier"]) for c in calls] == [
        ("reserved", "reserved", 0), ("reserved", "default", 1)]
    assert {"Name": "ServedBelowRequestedTier", "Unit": "Count"} in calls[1]["_aws"]["CloudWatchMetrics"][0]["Metrics"]
    per_tier = [line for line in lines if "InputTokens" not in line]
    assert [(p["ServedTier"], p["_aws"]["CloudWatchMetrics"][0]["Dimensions"]) for p in per_tier] == [
        ("reserved", [["ModelId", "ServedTier"]]), ("default", [["ModelId", "ServedTier"]])]
    assert all(set(p) == {"_aws", "ModelId", "ServedTier", "LatencyMs"} for p in per_tier)


def test_a_stream_reads_the_served_tier_from_its_metadata_event():
    from pacer_runtime import converse_stream

    with BedrockEmulator([ModelSpec(NOVA, answer_tokens=5)], time_scale=600, seed=1) as bedrock:
        result = converse_stream(bedrock.client(), build_converse_request(NOVA, prompt="p", service_tier="flex"))
    assert result.served_tier == "flex" and result.first_token_ms is not None


def test_a_call_without_a_tier_records_default_asked_and_counts_nothing(capsys):
    from pacer_runtime import metrics

    with BedrockEmulator([ModelSpec(NOVA, answer_tokens=5)], time_scale=600, seed=1) as bedrock:
        request = build_converse_request(NOVA, prompt="p")
        result = converse(bedrock.client(), request)
    assert result.served_tier is None  # the emulator, like the API model, names a tier only when asked
    figures = metrics.emit_call(result, model_id=NOVA, request=request)
    [line] = emf_lines(capsys)  # no per-tier line: nothing says which tier served it
    assert line["RequestedTier"] == "default" and "ServedTier" not in line
    assert "ServedBelowRequestedTier" not in line and figures.served_below_requested_tier is None


@pytest.mark.parametrize(
    ("asked", "served", "below"),
    [("priority", "priority", False), ("priority", "default", True), ("priority", "flex", True),
     ("reserved", "default", True), ("default", "flex", True), ("flex", "flex", False), ("default", "priority", False)],
)
def test_served_below_compares_the_tiers_order(asked, served, below):
    from pacer_runtime import metrics
    from pacer_runtime.bedrock import ConverseResult

    result = ConverseResult(text="", input_tokens=1, output_tokens=1, cache_read_tokens=0, cache_write_tokens=0,
                            stop_reason="end_turn", latency_ms=5.0, service_latency_ms=4, served_latency="standard",
                            served_tier=served)
    figures = metrics.call_metrics(result, model_id=NOVA, request={"serviceTier": {"type": asked}})
    assert figures.served_below_requested_tier is below


def test_a_tier_aws_adds_later_is_recorded_as_served_and_compared_with_nothing(capsys):
    """A new tier must not fail a call that succeeded: it is a new ServedTier value, never a downgrade."""
    from pacer_runtime import metrics
    from pacer_runtime.bedrock import ConverseResult

    result = ConverseResult(text="", input_tokens=1, output_tokens=1, cache_read_tokens=0, cache_write_tokens=0,
                            stop_reason="end_turn", latency_ms=5.0, service_latency_ms=4, served_latency="standard",
                            served_tier="turbo")
    figures = metrics.emit_call(result, model_id=NOVA, request={"serviceTier": {"type": "priority"}})
    assert figures.served_below_requested_tier is None
    assert [line.get("ServedTier") for line in emf_lines(capsys)] == ["turbo", "turbo"]
    with pytest.raises(ValueError, match="requested tier='turbo' must be one of"):
        metrics.call_metrics(result, model_id=NOVA, request={"serviceTier": {"type": "turbo"}})


# --- the dashboard: speed per served tier, calls served below their tier, and AWS's dimensions kept apart


def dashboard_template(model: BedrockModel, **alarms) -> dict:
    from genai_pacer import LatencyAlarms, LatencyDashboard, WatchedModel

    stack = cdk.Stack(cdk.App(), "Tiers")
    LatencyDashboard(stack, "D", models=[WatchedModel(model, alarms=LatencyAlarms(**alarms))])
    return cdk.assertions.Template.from_stack(stack).to_json()


def dashboard_widgets(template: dict) -> list[dict]:
    [dashboard] = resources(template, "AWS::CloudWatch::Dashboard").values()
    raw = dashboard["Properties"]["DashboardBody"]
    if isinstance(raw, dict):
        raw = "".join(p if isinstance(p, str) else "TOKEN" for p in raw["Fn::Join"][1])
    return json.loads(raw)["widgets"]


def titled(template: dict, part: str) -> dict:
    [found] = [w["properties"] for w in dashboard_widgets(template) if part in w["properties"].get("title", "")]
    return found


def test_the_dashboard_compares_the_handlers_speed_per_served_tier():
    template = dashboard_template(BedrockModel.from_id(NOVA))
    latency = titled(template, "latency and TTFT p90 by served tier")
    rows = [(row[0], row[1], row[2:6], row[-1]["stat"]) for row in latency["metrics"]]
    assert rows == [("GenaiPacer", name, ["ModelId", NOVA, "ServedTier", tier], "p90")
                    for name in ("LatencyMs", "TimeToFirstTokenMs") for tier in ("priority", "default", "flex", "reserved")]
    otps = titled(template, "decode speed (OTPS) p50 by served tier")
    assert [(row[1], row[5], row[-1]["stat"]) for row in otps["metrics"]] == [
        ("OutputTokensPerSecond", tier, "p50") for tier in ("priority", "default", "flex", "reserved")]


def test_calls_served_below_their_tier_are_graphed_as_a_count_and_a_share_and_alarmed():
    template = dashboard_template(BedrockModel.from_id(NOVA), tier_downgrades=2, evaluation_periods=3)
    below = titled(template, "served below the tier they asked for")
    assert below["metrics"][0][:4] == ["GenaiPacer", "ServedBelowRequestedTier", "ModelId", NOVA]
    assert below["metrics"][0][-1]["stat"] == "Sum"
    share = [row[0] for row in below["metrics"] if isinstance(row[0], dict) and "SEARCH" not in row[0]["expression"]]
    assert share[0]["expression"] == "100 * share" and below["annotations"]["horizontal"][0]["value"] == 2
    [alarm] = [a["Properties"] for k, a in resources(template, "AWS::CloudWatch::Alarm").items() if "TierDowngrades" in k]
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"]) == ("GenaiPacer", "ServedBelowRequestedTier", "Sum")
    assert (alarm["Threshold"], alarm["EvaluationPeriods"]) == (2, 3)
    assert "Reserved tier reservation overflowing to default" in alarm["AlarmDescription"]


def test_no_alarm_reads_aws_tier_dimensions_and_the_graph_of_them_is_a_search_per_model_id():
    """ServiceTier/ResolvedServiceTier are the page's current scheme, which changed once: a SEARCH graph
    is empty if it changes again, and an alarm on them would never fire (or fire on nothing)."""
    model = BedrockModel.from_id(f"us.{NOVA}")
    template = dashboard_template(model, tier_downgrades=None)
    assert "ServiceTier" not in json.dumps(resources(template, "AWS::CloudWatch::Alarm"))
    aws = titled(template, "AWS/Bedrock invocation latency p90 by requested and served tier")
    expressions = [row[0]["expression"] for row in aws["metrics"]]
    assert expressions == [
        f"SEARCH('{{AWS/Bedrock,ModelId,ResolvedServiceTier,ServiceTier}} MetricName=\"InvocationLatency\" "
        f"ModelId=\"{one}\"', 'p90', 60)" for one in model.metric_model_ids]
    assert "asked ${PROP('Dim.ServiceTier')}, served ${PROP('Dim.ResolvedServiceTier')}" in aws["metrics"][0][0]["label"]


def test_the_tier_dimension_names_are_the_service_tiers_pages():
    from genai_pacer.observe import dashboard

    assert (dashboard.SERVICE_TIER_DIMENSION, dashboard.RESOLVED_SERVICE_TIER_DIMENSION) == ("ServiceTier", "ResolvedServiceTier")


# --- QuotaPacer: three tiers share the on-demand pool; a reservation is held apart and overflows ---------


def pacer_and_emulator(**spec_options):
    """A pacer and the emulator on one model clock; every answer is 200 tokens, a call's whole maxTokens."""
    from genai_pacer.testing import ManualClock
    from pacer_runtime import QuotaPacer

    clock = ManualClock(instant=True)
    spec = ModelSpec(NOVA, jitter=0, answer_tokens=200, **spec_options)
    pacer = QuotaPacer(1_000_000, clock=clock.now, reserved_input_tpm=spec_options.get("reserved_input_tpm"),
                       reserved_output_tpm=spec_options.get("reserved_output_tpm"))
    return pacer, BedrockEmulator([spec], clock=clock, seed=1), clock


def test_priority_default_and_flex_calls_are_held_against_the_one_on_demand_share():
    pacer, emulator, _ = pacer_and_emulator()
    with emulator as bedrock:
        client = bedrock.client()
        for tier in ("priority", "default", "flex", None):
            pacer.converse(client, build_converse_request(NOVA, prompt="p", service_tier=tier,
                                                          inference_config={"maxTokens": 100}))
    stats = pacer.stats()
    assert stats.admitted == 4 and stats.in_window == 4  # all four on the on-demand ledger
    assert dict(stats.tiers) == {"priority->priority": 1, "default->default": 2, "flex->flex": 1}
    assert stats.served_below_requested == 0 and stats.reserved_input_held == 0


def test_a_reserved_call_is_held_against_the_reservation_until_it_overflows_to_on_demand():
    """Output budget 250 a minute, maxTokens 200: the first call fits the reservation, the second
    overflows client-side (admitted against the on-demand share) and Bedrock serves it at default."""
    pacer, emulator, _ = pacer_and_emulator(reserved_input_tpm=1_000, reserved_output_tpm=250)
    request = build_converse_request(NOVA, prompt="p", service_tier="reserved", inference_config={"maxTokens": 200})
    with emulator as bedrock:
        client = bedrock.client()
        first = pacer.converse(client, request)
        second = pacer.converse(client, request)
    assert (first.served_tier, second.served_tier) == ("reserved", "default")
    stats = pacer.stats()
    assert stats.admitted == 1 and stats.in_window == 1  # only the overflow drew on the on-demand share
    assert stats.reserved_overflows == 1 and stats.served_below_requested == 1
    assert dict(stats.tiers) == {"reserved->reserved": 1, "reserved->default": 1}
    # the reservation holds the first call's settled usage: its input and its 200 output tokens
    assert (stats.reserved_input_held, stats.reserved_output_held) == (first.input_tokens, 200)


def test_a_reserved_call_bedrock_serves_at_default_moves_to_the_on_demand_ledger():
    """The pacer's part of the reservation fits, but Bedrock's reservation is full (another process
    shares it): the usage is charged where Bedrock charged it."""
    pacer, emulator, _ = pacer_and_emulator(reserved_input_tpm=1_000, reserved_output_tpm=250)
    request = build_converse_request(NOVA, prompt="p", service_tier="reserved", inference_config={"maxTokens": 200})
    with emulator as bedrock:
        client = bedrock.client()
        client.converse(**request)  # another process takes the reservation's output budget
        result = pacer.converse(client, request)
    assert result.served_tier == "default"
    stats = pacer.stats()
    assert stats.admitted == 0 and stats.in_window == 1  # never admitted on-demand, yet charged there
    assert stats.held_tokens == pacer.settlement(result.input_tokens, result.output_tokens)
    assert (stats.reserved_input_held, stats.reserved_output_held) == (0, 0)
    assert dict(stats.tiers) == {"reserved->default": 1} and stats.served_below_requested == 1


def test_the_reservation_frees_after_the_window_as_bedrocks_does():
    pacer, emulator, clock = pacer_and_emulator(reserved_input_tpm=1_000, reserved_output_tpm=250)
    request = build_converse_request(NOVA, prompt="p", service_tier="reserved", inference_config={"maxTokens": 200})
    with emulator as bedrock:
        client = bedrock.client()
        pacer.converse(client, request)
        clock.advance(61)
        assert pacer.converse(client, request).served_tier == "reserved"
    assert pacer.stats().reserved_overflows == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [({"reserved_input_tpm": 1_000}, "reserved_input_tpm and reserved_output_tpm go together"),
     ({"reserved_input_tpm": 0, "reserved_output_tpm": 10}, "reserved_input_tpm=0")],
)
def test_a_reservation_needs_both_budgets(options, message):
    from pacer_runtime import QuotaPacer

    with pytest.raises(ValueError, match=message):
        QuotaPacer(100_000, **options)


def test_the_pacer_reads_its_reservation_from_the_environment():
    from pacer_runtime import QuotaPacer

    pacer = QuotaPacer.from_environment({"GENAI_PACER_TPM": "50000", "GENAI_PACER_RESERVED_INPUT_TPM": "100000",
                                         "GENAI_PACER_RESERVED_OUTPUT_TPM": "10000"})
    assert (pacer._reservation.input.tpm, pacer._reservation.output.tpm) == (100_000, 10_000)


# --- the planner: what a reservation holds of a load, and what overflows to the on-demand quota ---------


def test_plan_reserved_worked_figures():
    """60 calls a minute of 2,000 input, 300 output, maxTokens 500, 6 s each: the input budget asks
    120,000 a minute, the output budget 60 x 300 + 6 in flight x 200 held above the output = 19,200.
    A reservation of 100,000 / 10,000 holds 10,000 / 19,200 of the calls (output binds); 28.75 calls
    a minute overflow, settling 28.75 x 2,300 = 66,125 on-demand tokens a minute (79,350 with 20%)."""
    from genai_pacer import planning

    profile = planning.TokenProfile(input_tokens=2_000, output_tokens=300, max_tokens=500)
    plan = planning.plan_reserved(profile, requests_per_minute=60, reserved_input_tpm=100_000,
                                  reserved_output_tpm=10_000, call_seconds=6)
    assert (plan.input_tpm, plan.output_tpm, plan.binding) == (120_000, 19_200, "output")
    assert plan.served_fraction == pytest.approx(10_000 / 19_200)
    assert plan.overflow_requests_per_minute == pytest.approx(28.75)
    assert plan.overflow is not None
    assert plan.overflow.settled_tpm == pytest.approx(66_125) and plan.overflow.required_tpm == pytest.approx(79_350)


def test_plan_reserved_with_room_overflows_nothing_and_counts_cache_writes_on_input():
    from genai_pacer import planning

    profile = planning.TokenProfile(input_tokens=1_000, output_tokens=100, max_tokens=200, cache_write_tokens=500,
                                    cache_read_tokens=4_000)
    plan = planning.plan_reserved(profile, requests_per_minute=10, reserved_input_tpm=100_000,
                                  reserved_output_tpm=10_000, call_seconds=3)
    assert plan.input_tpm == 15_000  # input + cache writes; cache reads are not charged to it
    assert (plan.served_fraction, plan.binding, plan.overflow_requests_per_minute, plan.overflow) == (1.0, "none", 0, None)


def test_plan_reserved_refuses_what_it_cannot_plan_naming_each_input():
    from genai_pacer import planning

    profile = planning.TokenProfile(input_tokens=1_000, output_tokens=100, max_tokens=200)
    with pytest.raises(InvalidPropsError) as caught:
        planning.plan_reserved(profile, requests_per_minute=0, reserved_input_tpm=0, reserved_output_tpm=float("nan"),
                               call_seconds=6)
    text = str(caught.value)
    assert "requests_per_minute=0" in text and "reserved_input_tpm=0" in text and "reserved_output_tpm=nan" in text


def test_plan_reserved_properties():
    from genai_pacer import planning
    from hypothesis import given
    from hypothesis import strategies as st

    @given(st.integers(0, 50_000), st.integers(0, 4_000), st.integers(1, 4_000), st.floats(0.1, 5_000),
           st.floats(1, 1e7), st.floats(1, 1e6), st.floats(0.05, 120))
    def check(input_tokens, output_tokens, extra, rpm, reserved_in, reserved_out, seconds):
        profile = planning.TokenProfile(input_tokens=input_tokens, output_tokens=output_tokens,
                                        max_tokens=output_tokens + extra)
        plan = planning.plan_reserved(profile, requests_per_minute=rpm, reserved_input_tpm=reserved_in,
                                      reserved_output_tpm=reserved_out, call_seconds=seconds)
        assert 0 <= plan.served_fraction <= 1
        served = rpm * plan.served_fraction
        assert served + plan.overflow_requests_per_minute == pytest.approx(rpm)
        # what the reservation holds fits both budgets
        assert served * (input_tokens) <= reserved_in * (1 + 1e-9)
        assert plan.served_fraction * plan.output_tpm <= reserved_out * (1 + 1e-9)
        assert (plan.overflow is None) == (plan.served_fraction == 1)

    check()


# --- ModelQuota: tiers on shares, a reservation apart, the overflow in the allocation ---------------------


def tiered_quota(**options):
    from genai_pacer import ModelQuota

    stack = cdk.Stack(cdk.App(), "Quota", env=cdk.Environment(account="111122223333", region="us-east-1"))
    quota = ModelQuota(stack, "Q", model=BedrockModel.from_id(f"us.{NOVA}"), tpm_quota=400_000, **options)
    return quota, quota.profile(input_tokens=2_000, output_tokens=300, max_tokens=500)


def test_priority_default_and_flex_shares_draw_on_the_one_quota_as_an_untiered_share_does():
    quota, profile = tiered_quota()
    plans = {tier: quota.share(f"s-{tier}", profile, call_seconds=6, fraction=0.2, service_tier=tier)
             for tier in ("priority", "default", "flex")}
    untiered = quota.share("s-none", profile, call_seconds=6, fraction=0.2)
    assert {plan.max_concurrency for plan in plans.values()} == {untiered.max_concurrency}
    shares = quota.plan().shares
    assert [(s.service_tier, s.tpm) for s in shares] == [("priority", 80_000), ("default", 80_000), ("flex", 80_000),
                                                         (None, 80_000)]
    assert quota.plan().allocated_tpm == 320_000


def test_a_reserved_share_allocates_only_its_overflow_and_the_plan_says_how_much_overflows():
    """The planner's worked figures: 6 calls of 6 s (60 a minute) against 100,000 / 10,000 hold 52% of
    the calls; the other 28.75 a minute draw 66,700 TPM from the on-demand quota (no headroom: a cap)."""
    quota, profile = tiered_quota(reserved_input_tpm=100_000, reserved_output_tpm=10_000)
    plan = quota.share("Router", profile, call_seconds=6, calls=6, service_tier="reserved")
    assert plan.max_concurrency == 6
    (share,) = quota.plan().shares
    assert share.tpm == pytest.approx(66_700) and quota.plan().allocated_tpm == pytest.approx(66_700)
    data = quota.plan().as_dict()
    fields = {k: data["shares"][0][k] for k in ("service_tier", "reserved_input_tpm", "reserved_output_tpm",
                                                "reserved_fraction", "reserved_binding", "overflow_requests_per_minute")}
    assert fields == {"service_tier": "reserved", "reserved_input_tpm": 100_000, "reserved_output_tpm": 10_000,
                      "reserved_fraction": 0.5208, "reserved_binding": "output", "overflow_requests_per_minute": 28.75}
    assert (data["reserved_input_tpm"], data["reserved_output_tpm"]) == (100_000, 10_000)
    table = quota.plan().table()
    assert "reserved (52% held)" in table and "Reserved tier reservation 100,000 input and 10,000 output TPM" in table
    assert quota.pacer_environment("Router") == {
        "GENAI_PACER_TPM": "66700", "GENAI_PACER_BURNDOWN": "1",
        "GENAI_PACER_RESERVED_INPUT_TPM": "100000", "GENAI_PACER_RESERVED_OUTPUT_TPM": "10000"}


def test_reserved_shares_split_the_reservation_in_the_order_they_are_drawn():
    quota, profile = tiered_quota(reserved_input_tpm=100_000, reserved_output_tpm=10_000)
    quota.share("First", profile, call_seconds=6, calls=2, service_tier="reserved")  # 20 a minute: 6,400 output
    quota.share("Second", profile, call_seconds=6, calls=2, service_tier="reserved")
    first, second = quota.plan().shares
    assert first.reserved_budget == (100_000, 10_000) and first.tpm == 0  # all held
    assert second.reserved_budget == pytest.approx((60_000, 3_600))  # what First leaves at its cap
    assert second.reserved_plan().served_fraction == pytest.approx(3_600 / 6_400)


@pytest.mark.parametrize(
    ("options", "share", "message"),
    [
        ({}, {"calls": 2, "service_tier": "reserved"}, "this quota has none: pass reserved_input_tpm and reserved_output_tpm"),
        ({"reserved_input_tpm": 100_000, "reserved_output_tpm": 10_000}, {"fraction": 0.2, "service_tier": "reserved"},
         "service_tier='reserved' needs calls="),
        ({}, {"fraction": 0.2, "service_tier": "standard"}, "service_tier='standard' must be one of"),
    ],
)
def test_a_share_refuses_a_tier_it_cannot_plan(options, share, message):
    quota, profile = tiered_quota(**options)
    with pytest.raises(InvalidPropsError, match=message):
        quota.share("S", profile, call_seconds=6, **share)


def test_a_reservation_needs_both_of_its_budgets():
    with pytest.raises(InvalidPropsError, match="reserved_input_tpm and reserved_output_tpm go together"):
        tiered_quota(reserved_input_tpm=100_000)


# --- a role given one tier is denied the others ---------------------------------------------------------


def denies(stack: cdk.Stack) -> list[dict]:
    from helpers import policy_statements

    return [s for s in policy_statements(cdk.assertions.Template.from_stack(stack).to_json()) if s["Effect"] == "Deny"]


def test_the_worker_and_the_router_roles_are_denied_every_tier_but_their_own():
    from genai_pacer import AnswerRouter, AnswerStore, QueuedInference
    from genai_pacer.models import SERVICE_TIER_KEY

    stack = cdk.Stack(cdk.App(), "Tiers", env=cdk.Environment(account="111122223333", region="us-east-1"))
    model = BedrockModel.from_id(f"us.{NOVA}")
    QueuedInference(stack, "Queue", model=model, max_concurrency=2, service_tier="flex")
    AnswerRouter(stack, "Router", answer_store=AnswerStore(stack, "Store"), model=model, service_tier="priority")
    fences = sorted((s["Condition"]["StringEquals"][SERVICE_TIER_KEY] for s in denies(stack)), key=len)
    assert sorted(map(sorted, fences)) == [["default", "flex", "reserved"], ["default", "priority", "reserved"]]
    for statement in denies(stack):
        assert statement["Action"] == "bedrock:InvokeModel"
        # the same resources the grant allows: the profile and every model it routes to
        assert len(statement["Resource"]) == len(model.resource_arns(stack))


def test_without_a_tier_no_role_is_fenced():
    from genai_pacer import QueuedInference

    stack = cdk.Stack(cdk.App(), "Tiers")
    QueuedInference(stack, "Plain", model=BedrockModel.from_id(NOVA), max_concurrency=2)
    assert denies(stack) == []


def deny_applies(statement: dict, context: dict[str, str]) -> bool:
    """Whether a rendered Deny's Condition matches a request context (the keys the call carries), by the
    IAM user guide's condition operators page: a key absent from the request fails StringEquals and
    passes a negated operator; Null "false" needs the key present; a statement's operators are ANDed, an
    operator's values ORed (NOR-ed for a negated one)."""
    results = []
    for operator, keys in statement["Condition"].items():
        for key, values in keys.items():
            values = values if isinstance(values, list) else [values]
            present = key in context
            if operator == "StringEquals":
                results.append(present and context[key] in values)
            elif operator == "StringNotEquals":
                results.append(not present or context[key] not in values)
            elif operator == "Null":
                results.append(present == (values == ["false"]))
            else:
                raise AssertionError(f"no rule here for {operator}")
    return all(results)


def resolved_deny(stack: cdk.Stack, parameter_value: str) -> dict:
    """The one tier Deny of the stack, with the Tier parameter's Ref replaced by the value it takes at deploy."""
    [statement] = denies(stack)
    text = json.dumps(statement).replace('{"Ref": "Tier"}', json.dumps(parameter_value))
    return json.loads(text)


@pytest.mark.parametrize("construct", ["QueuedInference", "AnswerRouter", "BoundedMap"])
def test_a_deploy_time_tier_fences_the_role_to_the_parameters_value_leaving_untiered_calls_allowed(construct):
    """Part 3 with a CfnParameter: the other tiers are unknown at synth, so the Deny names the tier the role
    may use (StringNotEquals on the parameter) and applies only where a call carries the key (Null false):
    the parameter's own tier and untiered calls stay allowed, "default" included when it resolves so."""
    from genai_pacer import AnswerRouter, AnswerStore, QueuedInference
    from genai_pacer.models import SERVICE_TIER_KEY

    stack = cdk.Stack(cdk.App(), "Tiers", env=cdk.Environment(account="111122223333", region="us-east-1"))
    tier = cdk.CfnParameter(stack, "Tier", type="String", allowed_values=["priority", "default", "flex"]).value_as_string
    model = BedrockModel.from_id(f"us.{NOVA}")
    if construct == "QueuedInference":
        QueuedInference(stack, "It", model=model, max_concurrency=2, service_tier=tier)  # type: ignore[arg-type]
    elif construct == "AnswerRouter":
        AnswerRouter(stack, "It", answer_store=AnswerStore(stack, "Store"), model=model, service_tier=tier)  # type: ignore[arg-type]
    else:
        BoundedMap(stack, "It", max_concurrency=2, model=model,
                   request=ConverseRequest(prompt="p", max_tokens=50, service_tier=tier))  # type: ignore[arg-type]
    [statement] = denies(stack)
    assert statement["Condition"] == {"StringNotEquals": {SERVICE_TIER_KEY: [{"Ref": "Tier"}]}, "Null": {SERVICE_TIER_KEY: "false"}}
    assert statement["Action"] == "bedrock:InvokeModel" and len(statement["Resource"]) == len(model.resource_arns(stack))
    for value in ("flex", "default"):
        deny = resolved_deny(stack, value)
        assert not deny_applies(deny, {}), "a call naming no tier is served at default and stays allowed"
        assert not deny_applies(deny, {SERVICE_TIER_KEY: value})
        assert [t for t in ("priority", "default", "flex", "reserved") if deny_applies(deny, {SERVICE_TIER_KEY: t})] == [
            t for t in ("priority", "default", "flex", "reserved") if t != value]


def test_the_literal_fence_and_the_deploy_time_fence_agree_on_every_call():
    """The same tier given at synth and at deploy allows and denies the same calls."""
    literal, token = cdk.Stack(cdk.App(), "Literal"), cdk.Stack(cdk.App(), "Tier")
    bounded_map(literal, ConverseRequest(prompt="p", max_tokens=50, service_tier="flex"))
    tier = cdk.CfnParameter(token, "Tier", type="String").value_as_string
    bounded_map(token, ConverseRequest(prompt="p", max_tokens=50, service_tier=tier))  # type: ignore[arg-type]
    [fixed], deploy_time = denies(literal), resolved_deny(token, "flex")
    contexts = [{}, *({"bedrock:ServiceTier": t} for t in ("priority", "default", "flex", "reserved"))]
    assert [deny_applies(fixed, c) for c in contexts] == [deny_applies(deploy_time, c) for c in contexts]


def test_tier_fence_on_your_own_role_fences_a_deploy_time_tier_as_docs_tiers_says():
    """docs/tiers.md guards add_to_principal_policy: only all four tiers leave nothing to deny."""
    from aws_cdk import aws_iam as iam

    stack = cdk.Stack(cdk.App(), "Roles")
    model = BedrockModel.from_id(NOVA)
    fence = model.tier_fence(stack, cdk.CfnParameter(stack, "Tier", type="String").value_as_string)
    assert fence is not None and stack.resolve(fence.to_statement_json())["Condition"]["Null"] == {"bedrock:ServiceTier": "false"}
    role = iam.Role(stack, "Batch", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    with pytest.raises(TypeError):  # what the unguarded call gives: the reason docs/tiers.md guards it
        role.add_to_principal_policy(model.tier_fence(stack, ["priority", "default", "flex", "reserved"]))  # type: ignore[arg-type]


def test_an_experiment_variant_with_a_deploy_time_tier_fences_its_model_to_its_variants_tiers():
    from genai_pacer.models import SERVICE_TIER_KEY, tier_fences

    stack = cdk.Stack(cdk.App(), "Tiers")
    tier = cdk.CfnParameter(stack, "Tier", type="String").value_as_string
    model = BedrockModel.from_id(NOVA)
    [fence] = tier_fences(stack, [(model, "priority"), (model, tier)])
    condition = stack.resolve(fence.to_statement_json())["Condition"]
    assert sorted(condition["StringNotEquals"][SERVICE_TIER_KEY], key=str) == sorted(["priority", {"Ref": "Tier"}], key=str)
    assert tier_fences(stack, [(model, None), (model, tier)]) == []  # the handler's own tier: nothing to fence


def test_a_deploy_time_tier_fence_passes_cdk_nag():
    from conftest import nag_findings
    from genai_pacer import AnswerRouter, AnswerStore, QueuedInference

    def compose(stack: cdk.Stack) -> None:
        tier = cdk.CfnParameter(stack, "Tier", type="String", allowed_values=["priority", "default", "flex"]).value_as_string
        model = BedrockModel.from_id(f"us.{NOVA}")
        QueuedInference(stack, "Queue", model=model, max_concurrency=2, service_tier=tier)  # type: ignore[arg-type]
        AnswerRouter(stack, "Router", answer_store=AnswerStore(stack, "Store"), model=model, service_tier=tier)  # type: ignore[arg-type]
        BoundedMap(stack, "Map", max_concurrency=2, model=model,
                   request=ConverseRequest(prompt="p", max_tokens=50, service_tier=tier))  # type: ignore[arg-type]

    assert nag_findings(compose) == []


def test_a_quota_still_finds_a_fenced_consumer_by_its_grant():
    """ModelQuota reads the roles' Allow statements; the tier Deny on the same model is not a caller."""
    from genai_pacer import ModelQuota, QueuedInference

    stack = cdk.Stack(cdk.App(), "Tiers", env=cdk.Environment(account="111122223333", region="us-east-1"))
    model = BedrockModel.from_id(f"us.{NOVA}")
    quota = ModelQuota(stack, "Quota", model=model, tpm_quota=400_000)
    profile = quota.profile(input_tokens=2_000, output_tokens=300, max_tokens=440)
    QueuedInference(stack, "Queue", model=model, service_tier="flex", max_output_tokens=440,
                    max_concurrency=quota.share("Queue", profile, call_seconds=6, fraction=0.5, service_tier="flex"))
    plan = quota.plan(consumers=True)
    assert [c.path for c in plan.consumers] == ["Tiers/Queue"] and plan.unshared == ()


def test_a_state_machine_role_is_denied_every_tier_but_its_requests():
    from genai_pacer.models import SERVICE_TIER_KEY

    stack = cdk.Stack(cdk.App(), "Tiers", env=cdk.Environment(account="111122223333", region="us-east-1"))
    bounded_map(stack, ConverseRequest(prompt="p", max_tokens=300, service_tier="flex"))
    [fence] = denies(stack)
    assert sorted(fence["Condition"]["StringEquals"][SERVICE_TIER_KEY]) == ["default", "priority", "reserved"]
    plain = cdk.Stack(cdk.App(), "Plain")
    bounded_map(plain, ConverseRequest(prompt="p", max_tokens=300))
    assert denies(plain) == []


def test_settling_a_reserved_call_changes_only_its_own_hold():
    """Two calls that started at the same instant with the same tokens are two holds: settling one
    (or releasing one the window already dropped) leaves the other as it was."""
    from pacer_runtime.quota_pacer import _Reservation

    reservation = _Reservation(1_000, 1_000)
    first, second = reservation.take(0.0, 100, 200), reservation.take(0.0, 100, 200)
    assert first is not None and second is not None
    reservation.settle(second, 100, 50)
    assert (first[1][1], second[1][1], reservation.output_held) == (200, 50, 250)
    reservation.expire(1.0)
    reservation.release(first)  # already dropped by the window: nothing to give back
    assert (reservation.input_held, reservation.output_held) == (0, 0)


def test_calls_of_every_caller_served_below_their_tier_are_graphed_from_aws_bedrock_step_functions_included():
    """A Step Functions task runs no genai-pacer handler, so no ServedBelowRequestedTier counts its calls;
    AWS/Bedrock publishes Invocations per ServiceTier and ResolvedServiceTier for every call of the model
    (the service tiers page): the downgrade graph searches the lower served tier for each requested one,
    for each ModelId value, and no alarm reads it."""
    model = BedrockModel.from_id(f"us.{NOVA}")
    template = dashboard_template(model)
    below = titled(template, "served below the tier they asked for")
    searches = [row[0] for row in below["metrics"] if isinstance(row[0], dict) and "SEARCH" in row[0]["expression"]]
    pairs = ('(ServiceTier="priority" AND ResolvedServiceTier="default") OR (ServiceTier="priority" AND '
             'ResolvedServiceTier="flex") OR (ServiceTier="reserved" AND ResolvedServiceTier="default") OR '
             '(ServiceTier="reserved" AND ResolvedServiceTier="flex") OR (ServiceTier="default" AND ResolvedServiceTier="flex")')
    assert [s["expression"] for s in searches] == [
        f"SEARCH('{{AWS/Bedrock,ModelId,ResolvedServiceTier,ServiceTier}} MetricName=\"Invocations\" "
        f"ModelId=\"{one}\" ({pairs})', 'Sum', 60)" for one in model.metric_model_ids]
    assert all("every caller" in s["label"] for s in searches)
    assert "ServiceTier" not in json.dumps(resources(template, "AWS::CloudWatch::Alarm"))
