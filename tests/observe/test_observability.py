"""LatencyDashboard and its alarms, read from the synthesized dashboard body and alarms; the per-call
metrics the handlers write, and the agreement between the two."""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from genai_pacer import (
    BedrockModel,
    ConverseRequest,
    InvalidPropsError,
    ParallelPrompts,
    QueuedInference,
    StateMachineOptions,
    planning,
)
from genai_pacer.observe.dashboard import HOW_TO_READ, LatencyAlarms, LatencyDashboard, TpmQuota, WatchedModel
from genai_pacer.step_functions.sync_execution import SyncExecutionUrl
from helpers import new_stack, only, resources, template_of
from pacer_runtime import ConverseResult
from pacer_runtime import metrics as written

HAIKU = BedrockModel.from_id("us.anthropic.claude-3-5-haiku-20241022-v1:0")
NOVA = BedrockModel.foundation("amazon.nova-lite-v1:0")
PROFILE = planning.TokenProfile(input_tokens=2_500, output_tokens=300, max_tokens=440, burndown=5)
PLAN = planning.plan_tpm(PROFILE, requests_per_minute=50, call_seconds=6)


def body(template: dict) -> dict:
    """The dashboard body as JSON, each token a placeholder string."""
    raw = only(template, "AWS::CloudWatch::Dashboard")["Properties"]["DashboardBody"]
    if isinstance(raw, dict):
        raw = "".join(p if isinstance(p, str) else "TOKEN" for p in raw["Fn::Join"][1])
    return json.loads(raw)


def widget(template: dict, title_part: str) -> dict:
    found = [w for w in body(template)["widgets"] if title_part in w["properties"].get("title", "")]
    assert len(found) == 1, f"{len(found)} widgets titled with {title_part!r}"
    return found[0]["properties"]


def metric_rows(properties: dict) -> list[tuple]:
    """(namespace, name, options) of each plain metric of a graph widget."""
    return [(row[0], row[1], row[-1]) for row in properties["metrics"] if isinstance(row[0], str)]


def expressions(properties: dict) -> list[dict]:
    return [row[0] for row in properties["metrics"] if isinstance(row[0], dict)]


def alarms_by_name(template: dict) -> dict[str, dict]:
    found = {}
    for logical_id, alarm in resources(template, "AWS::CloudWatch::Alarm").items():
        name = next(n for n in ("TimeToFirstToken", "Throttles", "QuotaUsage", "Reservation", "LatencyFallbacks", "TierDowngrades") if n in logical_id)
        found[name] = alarm["Properties"]
    return found


@pytest.fixture(scope="module")
def watched():
    stack = new_stack()
    topic = sns.Topic(stack, "Pager")
    dashboard = LatencyDashboard(
        stack, "Latency", dashboard_name="genai-latency", alarm_actions=[actions.SnsAction(topic)],
        models=[WatchedModel(HAIKU, quota=TpmQuota.from_plan(PLAN, tpm_quota=400_000), burndown=5, label="haiku")],
    )
    return dashboard, template_of(stack).to_json()


#: The ModelId values AWS/Bedrock may count HAIKU's calls under: the profile id, then the foundation model's.
HAIKU_IDS = ("us.anthropic.claude-3-5-haiku-20241022-v1:0", "anthropic.claude-3-5-haiku-20241022-v1:0")


def model_ids_of(properties: dict, metric: str) -> list[str]:
    """The ModelId of each plain `metric` row of a graph widget, hidden rows included."""
    return [row[3] for row in properties["metrics"] if isinstance(row[0], str) and row[1] == metric]


def test_latency_widgets_show_ttft_and_invocation_latency_percentiles_under_every_model_id(watched):
    """Before: one line per percentile under the profile id only (an empty graph if AWS counts the
    calls under the foundation model). Now each percentile under each id, labelled with it."""
    assert HAIKU.metric_model_ids == HAIKU_IDS
    _, template = watched
    ttft = widget(template, "haiku: time to first token")
    assert [(ns, name, row[3], o["stat"], o["period"], o["label"]) for ns, name, o, row in
            ((r[0], r[1], r[-1], r) for r in ttft["metrics"])] == [
        ("AWS/Bedrock", "TimeToFirstToken", model_id, s, 60, f"{s} ({model_id})") for model_id in HAIKU_IDS
        for s in ("p50", "p90", "p99")]
    assert all(row[2] == "ModelId" for row in ttft["metrics"])
    assert expressions(ttft) == []  # percentiles are never added up
    assert ttft["annotations"]["horizontal"] == [{"value": 2000, "label": "p90 budget (alarm)", "yAxis": "left"}]
    latency = widget(template, "haiku: invocation latency")
    assert [(name, o["stat"]) for _, name, o in metric_rows(latency)] == [
        ("InvocationLatency", s) for _ in HAIKU_IDS for s in ("p50", "p90", "p99")]
    assert model_ids_of(latency, "InvocationLatency") == [HAIKU_IDS[0]] * 3 + [HAIKU_IDS[1]] * 3


def test_a_foundation_model_reads_its_one_id_with_plain_metrics():
    stack = new_stack()
    LatencyDashboard(stack, "D", models=[WatchedModel(NOVA, quota=TpmQuota(400_000))])
    template = template_of(stack).to_json()
    assert NOVA.metric_model_ids == (NOVA.model_id,)
    ttft = widget(template, "time to first token")
    assert [(row[3], row[-1]["label"]) for row in ttft["metrics"]] == [(NOVA.model_id, s) for s in ("p50", "p90", "p99")]
    outcomes = widget(template, "invocations, throttles and errors")
    assert expressions(outcomes) == [] and len(outcomes["metrics"]) == 4
    assert not any("read under ModelId" in w["properties"].get("markdown", "") for w in body(template)["widgets"])
    alarms = alarms_by_name(template)
    for name in ("TimeToFirstToken", "Throttles", "QuotaUsage"):
        assert alarms[name]["Dimensions"] == [{"Name": "ModelId", "Value": NOVA.model_id}]


def test_the_profiles_rows_say_which_ids_they_read_and_how(watched):
    _, template = watched
    (note,) = [w["properties"]["markdown"] for w in body(template)["widgets"]
               if "read under ModelId" in w["properties"].get("markdown", "")]
    assert all(f"`{model_id}`" in note for model_id in HAIKU_IDS)
    assert "summed" in note and "one line per id" in note


def test_otps_comes_from_the_handlers_beside_an_aws_estimate_with_its_caveat(watched):
    _, template = watched
    otps = widget(template, "haiku: output tokens per second")
    visible = [(ns, name, o["stat"]) for ns, name, o in metric_rows(otps) if o.get("visible", True)]
    assert visible == [("GenaiPacer", "OutputTokensPerSecond", "p50"), ("GenaiPacer", "OutputTokensPerSecond", "p10")]
    estimate, *inner = expressions(otps)
    assert estimate["expression"] == "(out / inv) / ((lat - ttft) / 1000)"
    assert "mixes streaming and non-streaming calls" in estimate["label"]
    # over both ids: tokens and calls summed, each average weighted by its calls (sums over sample counts)
    assert {e["id"]: e["expression"] for e in inner} == {
        "out": "SUM([out0, out1])", "inv": "SUM([inv0, inv1])",
        "lat": "lats / latc", "lats": "SUM([latsum0, latsum1])", "latc": "SUM([latn0, latn1])",
        "ttft": "ttfts / ttftc", "ttfts": "SUM([ttftsum0, ttftsum1])", "ttftc": "SUM([ttftn0, ttftn1])"}
    hidden = {o["id"]: (name, o["stat"], row[3]) for row in otps["metrics"] if isinstance(row[0], str)
              for name, o in [(row[1], row[-1])] if o.get("visible") is False}
    expected = {}
    for i, model_id in enumerate(HAIKU_IDS):
        expected |= {f"out{i}": ("OutputTokenCount", "Sum", model_id), f"inv{i}": ("Invocations", "Sum", model_id),
                     f"latsum{i}": ("InvocationLatency", "Sum", model_id),
                     f"latn{i}": ("InvocationLatency", "SampleCount", model_id),
                     f"ttftsum{i}": ("TimeToFirstToken", "Sum", model_id),
                     f"ttftn{i}": ("TimeToFirstToken", "SampleCount", model_id)}
    assert hidden == expected


def test_tokens_per_call_outcomes_and_served_modes(watched):
    _, template = watched
    per_call = widget(template, "haiku: tokens per call")
    assert [(e["expression"], e.get("label")) for e in expressions(per_call) if e.get("visible", True)] == [
        ("inputs / calls", "input tokens per call"), ("outputs / calls", "output tokens per call")]
    assert {e["id"]: e["expression"] for e in expressions(per_call) if e.get("visible") is False} == {
        "inputs": "SUM([inp0, inp1])", "calls": "SUM([inv0, inv1])", "outputs": "SUM([out0, out1])"}
    for metric in ("InputTokenCount", "Invocations", "OutputTokenCount"):
        assert model_ids_of(per_call, metric) == list(HAIKU_IDS)
    # each count is the sum of its metric under both ids, drawn where the single metric was
    outcomes = widget(template, "haiku: invocations, throttles and errors")
    assert [(e["expression"], e["label"], e.get("yAxis", "left")) for e in expressions(outcomes)] == [
        ("SUM([inv0, inv1])", "invocations", "left"), ("SUM([thr0, thr1])", "throttles", "right"),
        ("SUM([cli0, cli1])", "client errors", "right"), ("SUM([srv0, srv1])", "server errors", "right")]
    assert [(name, row[3], o["stat"], o["visible"]) for row in outcomes["metrics"] if isinstance(row[0], str)
            for name, o in [(row[1], row[-1])]] == [
        (name, model_id, "Sum", False) for name in ("Invocations", "InvocationThrottles", "InvocationClientErrors",
                                                    "InvocationServerErrors") for model_id in HAIKU_IDS]
    modes = widget(template, "haiku: served latency mode")
    assert [(ns, name, o["stat"]) for ns, name, o in metric_rows(modes)] == [
        ("GenaiPacer", written.SERVED_OPTIMIZED, "Sum"), ("GenaiPacer", written.SERVED_STANDARD, "Sum"),
        ("GenaiPacer", written.OPTIMIZED_SERVED_STANDARD, "Sum")]


def test_quota_usage_is_drawn_against_quota_threshold_plan_and_the_reservation(watched):
    _, template = watched
    quota = widget(template, "haiku: quota tokens per minute")
    visible = [(ns, name, o["stat"]) for ns, name, o in metric_rows(quota) if o.get("visible", True)]
    assert visible == [("GenaiPacer", written.RESERVED_TOKENS, "Sum")]
    usage, settled = expressions(quota)
    assert (usage["expression"], usage["label"]) == (
        "SUM([quota0, quota1])", "EstimatedTPMQuotaUsage (AWS estimate, without reservations)")
    assert model_ids_of(quota, "EstimatedTPMQuotaUsage") == list(HAIKU_IDS)
    assert settled["expression"] == "inp + cw + out * 5"  # the model's burndown
    hidden = {o["id"]: name for _, name, o in metric_rows(quota) if o.get("visible") is False}
    assert hidden == {"quota0": "EstimatedTPMQuotaUsage", "quota1": "EstimatedTPMQuotaUsage",
                      "inp": written.INPUT_TOKENS, "cw": written.CACHE_WRITE_TOKENS, "out": written.OUTPUT_TOKENS}
    lines = {a["label"]: a["value"] for a in quota["annotations"]["horizontal"]}
    assert lines == {
        "TPM quota": 400_000,
        "alarm at 80% of quota": 320_000,
        "planned TPM": pytest.approx(PLAN.required_tpm),
        "planned reservation peak (state machines hold this)": pytest.approx(PLAN.reservation_peak_tpm),
    }


def test_the_dashboard_opens_with_how_to_read_it(watched):
    _, template = watched
    document = body(template)
    assert document["widgets"][0]["properties"]["markdown"] == HOW_TO_READ
    for phrase in ("TTFT grew", "OTPS fell", "answers got longer", "not a percentage", "maxTokens is oversized"):
        assert phrase in HOW_TO_READ
    assert document["start"] == "-PT3H"
    assert only(template, "AWS::CloudWatch::Dashboard")["Properties"]["DashboardName"] == "genai-latency"


def test_alarms_have_documented_metrics_thresholds_and_comparisons(watched):
    dashboard, template = watched
    alarms = alarms_by_name(template)
    assert sorted(alarms) == ["LatencyFallbacks", "QuotaUsage", "Reservation", "Throttles", "TierDowngrades",
                              "TimeToFirstToken"]
    for alarm in alarms.values():
        assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
        assert alarm["TreatMissingData"] == "notBreaching"
        assert len(alarm["AlarmActions"]) == 1
    ttft = alarms["TimeToFirstToken"]
    assert alarm_reads(ttft) == ("MAX", [("AWS/Bedrock", "TimeToFirstToken", model_id, "p90", 60) for model_id in HAIKU_IDS])
    assert (ttft["Threshold"], ttft["EvaluationPeriods"]) == (2000, 5)
    throttles = alarms["Throttles"]
    assert alarm_reads(throttles) == ("SUM", [("AWS/Bedrock", "InvocationThrottles", model_id, "Sum", 60)
                                              for model_id in HAIKU_IDS])
    assert throttles["Threshold"] == 0
    assert throttles["EvaluationPeriods"] == throttles["DatapointsToAlarm"] == 3
    quota = alarms["QuotaUsage"]
    assert alarm_reads(quota) == ("SUM", [("AWS/Bedrock", "EstimatedTPMQuotaUsage", model_id, "Sum", 60)
                                          for model_id in HAIKU_IDS])
    assert quota["Threshold"] == 320_000  # tokens: 0.8 x the 400,000 TPM quota, never "80"
    assert "320,000 tokens per minute (80% of the 400,000 TPM quota)" in quota["AlarmDescription"]
    fallback = alarms["LatencyFallbacks"]
    assert (fallback["Namespace"], fallback["MetricName"], fallback["Threshold"]) == ("GenaiPacer", written.OPTIMIZED_SERVED_STANDARD, 0)
    assert dashboard.model_alarms["haiku"]["QuotaUsage"] in dashboard.alarms


def alarm_reads(alarm: dict) -> tuple[str, list[tuple]]:
    """How a metric math alarm combines what it reads (the function of its returned expression over
    every retrieved metric, in order) and what it reads: (namespace, name, ModelId, stat, period)."""
    (returned,) = [q for q in alarm["Metrics"] if q.get("ReturnData", True)]
    stats = [q for q in alarm["Metrics"] if "MetricStat" in q]
    function, _, rest = returned["Expression"].partition("(")
    assert rest == f"[{', '.join(q['Id'] for q in stats)}])", returned["Expression"]
    return function, [(q["MetricStat"]["Metric"]["Namespace"], q["MetricStat"]["Metric"]["MetricName"],
                       q["MetricStat"]["Metric"]["Dimensions"][0]["Value"], q["MetricStat"]["Stat"], q["MetricStat"]["Period"])
                      for q in stats]


def test_an_application_profiles_rows_and_alarms_read_its_arn_and_the_model_it_copies():
    arn = "arn:aws:bedrock:us-east-1:111122223333:application-inference-profile/abc123"
    model = BedrockModel.application_inference_profile(arn, copies=HAIKU.model_id)
    assert model.metric_model_ids == (arn, HAIKU_IDS[1])
    stack = new_stack()
    LatencyDashboard(stack, "D", models=[WatchedModel(model, quota=TpmQuota(400_000), label="app")])
    template = template_of(stack).to_json()
    alarms = alarms_by_name(template)
    assert [row[2] for row in alarm_reads(alarms["QuotaUsage"])[1]] == [arn, HAIKU_IDS[1]]
    assert [row[2] for row in alarm_reads(alarms["Throttles"])[1]] == [arn, HAIKU_IDS[1]]
    assert model_ids_of(widget(template, "app: time to first token"), "TimeToFirstToken") == [arn] * 3 + [HAIKU_IDS[1]] * 3


def test_every_graph_and_alarm_stays_within_cloudwatchs_limits(watched):
    from genai_pacer.observe.dashboard import MAX_ALARM_EXPRESSIONS, MAX_ALARM_METRICS, MAX_GRAPH_METRICS

    _, template = watched
    for w in body(template)["widgets"]:
        assert len(w["properties"].get("metrics", [])) <= MAX_GRAPH_METRICS
    largest = max(len(w["properties"].get("metrics", [])) for w in body(template)["widgets"])
    assert largest == 23  # the OTPS graph of a profile: 2 handler lines, 9 expressions, 12 AWS/Bedrock metrics
    for alarm in alarms_by_name(template).values():
        queries = alarm.get("Metrics", [])
        assert sum("MetricStat" in q for q in queries) <= MAX_ALARM_METRICS
        assert sum("Expression" in q for q in queries) <= MAX_ALARM_EXPRESSIONS


def test_the_reservation_alarm_compares_reserved_with_settled_tokens(watched):
    _, template = watched
    alarm = alarms_by_name(template)["Reservation"]
    queries = {q["Id"]: q for q in alarm["Metrics"]}
    returned = [q for q in alarm["Metrics"] if q.get("ReturnData", True)]
    assert [q["Expression"] for q in returned] == ["reserved / settled"]
    assert queries["settled"]["Expression"] == "inp + cw + out * 5"
    for name, metric in (("reserved", written.RESERVED_TOKENS), ("inp", written.INPUT_TOKENS),
                         ("cw", written.CACHE_WRITE_TOKENS), ("out", written.OUTPUT_TOKENS)):
        stat = queries[name]["MetricStat"]
        assert (stat["Metric"]["Namespace"], stat["Metric"]["MetricName"], stat["Stat"], stat["Period"]) == (
            "GenaiPacer", metric, "Sum", 900)
    assert alarm["Threshold"] == 2 and alarm["EvaluationPeriods"] == 1


def test_a_quota_alarm_cannot_be_built_without_the_quota_in_tokens():
    with pytest.raises(TypeError):
        TpmQuota(alarm_fraction=0.8)  # type: ignore[call-arg]
    with pytest.raises(InvalidPropsError, match="tpm_quota is required"):
        TpmQuota(tpm_quota=None)  # type: ignore[arg-type]
    with pytest.raises(InvalidPropsError, match="alarm_fraction=80 looks like a percentage.*pass 0.8"):
        TpmQuota(tpm_quota=400_000, alarm_fraction=80)
    stack = new_stack()
    LatencyDashboard(stack, "D", models=[HAIKU])  # no quota: no quota alarm, no quota lines
    template = template_of(stack).to_json()
    assert "QuotaUsage" not in alarms_by_name(template)
    assert "annotations" not in widget(template, "quota tokens per minute")


def test_thresholds_are_props_and_none_turns_an_alarm_off():
    stack = new_stack()
    alarms = LatencyAlarms(ttft_p90=cdk.Duration.millis(800), throttle_periods=None, reservation_ratio=3.5,
                           latency_fallbacks=None, evaluation_periods=2, tier_downgrades=None)
    LatencyDashboard(stack, "D", models=[WatchedModel(NOVA, alarms=alarms, quota=TpmQuota(2_000_000, alarm_fraction=0.5))])
    found = alarms_by_name(template_of(stack).to_json())
    assert sorted(found) == ["QuotaUsage", "Reservation", "TimeToFirstToken"]
    assert (found["TimeToFirstToken"]["Threshold"], found["TimeToFirstToken"]["EvaluationPeriods"]) == (800, 2)
    assert found["QuotaUsage"]["Threshold"] == 1_000_000 and found["Reservation"]["Threshold"] == 3.5
    stack = new_stack()
    LatencyDashboard(stack, "D", models=[WatchedModel(NOVA, alarms=None)])
    assert resources(template_of(stack), "AWS::CloudWatch::Alarm") == {}


def test_several_models_each_get_their_rows_and_alarms():
    stack = new_stack()
    dashboard = LatencyDashboard(stack, "D", models=[HAIKU, NOVA])
    template = template_of(stack).to_json()
    assert sorted(dashboard.model_alarms) == sorted([HAIKU.model_id, NOVA.model_id])
    assert len(resources(template, "AWS::CloudWatch::Alarm")) == 10  # five each: no quota given
    titles = [w["properties"].get("title", "") for w in body(template)["widgets"]]
    assert sum("time to first token" in t for t in titles) == 2


# --- the library's other constructs on the same dashboard ------------------------------------------

def test_add_queued_inference_shows_queue_worker_calls_and_alarms():
    stack = new_stack()
    queued = QueuedInference(stack, "Summaries", model=HAIKU, max_concurrency=8)
    dashboard = LatencyDashboard(stack, "D")
    dashboard.add_queued_inference(queued, title="summaries")
    template = template_of(stack).to_json()
    queue = widget(template, "summaries: queue")
    assert [(name, o["stat"]) for _, name, o in metric_rows(queue)] == [
        ("ApproximateAgeOfOldestMessage", "Maximum"), ("ApproximateNumberOfMessagesVisible", "Maximum")]
    calls = widget(template, "summaries: worker calls")
    rows = metric_rows(calls)
    assert [name for _, name, _ in rows] == [written.INPUT_TOKENS, written.OUTPUT_TOKENS, written.RESERVED_TOKENS]
    function_dimension = [row for row in calls["metrics"]][0]
    assert "FunctionName" in function_dimension and "ModelId" in function_dimension
    failures = widget(template, "summaries: worker failures")
    assert [name for _, name, _ in metric_rows(failures)] == ["Errors", "Throttles", written.THROTTLES]
    assert len(widget(template, "summaries: alarms")["alarms"]) == 4


def test_add_state_machine_shows_executions_of_any_workflow():
    stack = new_stack()
    prompts = ParallelPrompts(stack, "Digest", model=NOVA, prompts={"A": ConverseRequest(prompt="a", max_tokens=5),
                                                                    "B": ConverseRequest(prompt="b", max_tokens=5)})
    dashboard = LatencyDashboard(stack, "D")
    dashboard.add_state_machine(prompts)
    dashboard.add_state_machine(prompts.state_machine, title="raw machine")
    template = template_of(stack).to_json()
    executions = widget(template, "Test/Digest: executions")
    assert [(name, o["stat"]) for _, name, o in metric_rows(executions)] == [
        ("ExecutionsStarted", "Sum"), ("ExecutionsFailed", "Sum"), ("ExecutionsTimedOut", "Sum"), ("ExecutionThrottled", "Sum")]
    assert [o["stat"] for _, _, o in metric_rows(widget(template, "raw machine: execution time"))] == ["p50", "p90"]


def test_add_sync_execution_url_and_add_endpoint():
    stack = new_stack()
    prompts = ParallelPrompts(stack, "Digest", model=NOVA,
                              prompts={"A": ConverseRequest(prompt="a", max_tokens=5), "B": ConverseRequest(prompt="b", max_tokens=5)},
                              state_machine_options=StateMachineOptions(state_machine_type=sfn.StateMachineType.EXPRESS))
    url = SyncExecutionUrl(stack, "Url", state_machine=prompts.state_machine)

    class Endpoint(cdk.Resource):  # what LlmEndpoint and EndpointScaling expose
        def metric_concurrent_requests(self, **props):
            return cdk.aws_cloudwatch.Metric(namespace="AWS/SageMaker", metric_name="ConcurrentRequestsPerModel",
                                             dimensions_map={"EndpointName": "e", "VariantName": "v"}, **props)

    dashboard = LatencyDashboard(stack, "D")
    dashboard.add_sync_execution_url(url)
    dashboard.add_endpoint(Endpoint(stack, "Endpoint"), title="llm")
    template = template_of(stack).to_json()
    assert [(name, o["stat"]) for _, name, o in metric_rows(widget(template, "Test/Url: what a caller waits"))] == [
        ("Duration", "p50"), ("Duration", "p90")]
    assert [(name, o.get("stat", "Average")) for _, name, o in metric_rows(widget(template, "llm: concurrent requests"))] == [
        ("ConcurrentRequestsPerModel", "Average"), ("ConcurrentRequestsPerModel", "Maximum")]


@pytest.mark.parametrize(
    ("method", "argument", "message"),
    [
        ("add_queued_inference", "queue", "queued='queue' is a str; pass a QueuedInference"),
        ("add_state_machine", "machine", r"workflow=.machine. is a str; pass a workflow with a .state_machine \(BoundedMap, BoundedDistributedMap, ParallelPrompts, ScheduledPrecompute, BatchPrecompute\) or an sfn.StateMachine"),
        ("add_answer_router", "router", "router=.router. is a str; pass an AnswerRouter"),
        ("add_sync_execution_url", None, "url is required: pass a SyncExecutionUrl"),
        ("add_endpoint", "endpoint", "endpoint=str has no metric_concurrent_requests()"),
        ("add_model", "amazon.nova-lite-v1:0", "model='amazon.nova-lite-v1:0' is a str; pass a BedrockModel or WatchedModel"),
    ],
)
def test_add_methods_refuse_what_they_cannot_show(method, argument, message):
    dashboard = LatencyDashboard(new_stack(), "D")
    with pytest.raises(InvalidPropsError, match=message):
        getattr(dashboard, method)(argument)


def test_a_model_is_added_once_and_labels_are_unique():
    dashboard = LatencyDashboard(new_stack(), "D", models=[HAIKU])
    with pytest.raises(InvalidPropsError, match="is already on the dashboard"):
        dashboard.add_model(HAIKU)
    dashboard.add_model(WatchedModel(NOVA, label="fast"))
    with pytest.raises(InvalidPropsError, match="label 'fast' is taken"):
        dashboard.add_model(WatchedModel(BedrockModel.foundation("amazon.nova-pro-v1:0"), label="fast"))


def test_title_is_checked():
    stack = new_stack()
    queued = QueuedInference(stack, "Q", model=NOVA, max_concurrency=2)
    with pytest.raises(InvalidPropsError, match="title has 101 characters"):
        LatencyDashboard(stack, "D").add_queued_inference(queued, title="x" * 101)


# --- bad props ---------------------------------------------------------------------------------------

A_TOKEN = cdk.Token.as_number({"Ref": "Quota"})

TPM_QUOTA_BAD = [
    (dict(tpm_quota=0), "tpm_quota=0 is below the minimum of 1"),
    (dict(tpm_quota=-5), "tpm_quota=-5 is below the minimum of 1"),
    (dict(tpm_quota=math.nan), "tpm_quota=nan is not a finite number"),
    (dict(tpm_quota=math.inf), "tpm_quota=inf is not a finite number"),
    (dict(tpm_quota=True), "tpm_quota=True is a bool"),
    (dict(tpm_quota="400000"), "tpm_quota='400000' is a str"),
    (dict(tpm_quota=2e12), "tpm_quota=2000000000000.0 exceeds the maximum"),
    (dict(tpm_quota=A_TOKEN), "tpm_quota is a deploy-time token"),
    (dict(alarm_fraction=0), "alarm_fraction=0 must be greater than 0; a fraction of the quota in (0, 1]"),
    (dict(alarm_fraction=-0.5), "alarm_fraction=-0.5 must be greater than 0"),
    (dict(alarm_fraction=1.5), "alarm_fraction=1.5 looks like a percentage"),
    (dict(alarm_fraction=80), "alarm_fraction=80 looks like a percentage"),
    (dict(alarm_fraction=101), "alarm_fraction=101 exceeds the maximum of 1"),
    (dict(alarm_fraction=math.nan), "alarm_fraction=nan is not a finite number"),
    (dict(alarm_fraction=None), "alarm_fraction is required"),
    (dict(alarm_fraction="0.8"), "alarm_fraction='0.8' is a str"),
    (dict(planned_tpm=0), "planned_tpm=0 must be greater than 0"),
    (dict(planned_tpm=math.inf), "planned_tpm=inf is not a finite number"),
    (dict(planned_reservation_tpm=-1), "planned_reservation_tpm=-1 must be greater than 0"),
    (dict(planned_reservation_tpm="lots"), "planned_reservation_tpm='lots' is a str"),
]


@pytest.mark.parametrize(("kwargs", "message"), TPM_QUOTA_BAD, ids=[f"{i}-{next(iter(k))}" for i, (k, _) in enumerate(TPM_QUOTA_BAD)])
def test_tpm_quota_refuses_bad_values(kwargs, message):
    with pytest.raises(InvalidPropsError) as caught:
        TpmQuota(**{"tpm_quota": 400_000, **kwargs})
    assert message in str(caught.value)


def test_from_plan_takes_a_plan_only():
    with pytest.raises(InvalidPropsError, match="plan=400000 is an int; pass a planning.TpmPlan"):
        TpmQuota.from_plan(400_000, tpm_quota=400_000)  # type: ignore[arg-type]
    quota = TpmQuota.from_plan(PLAN, tpm_quota=400_000, alarm_fraction=0.9)
    assert (quota.planned_tpm, quota.alarm_threshold_tokens) == (PLAN.required_tpm, 360_000)


ALARMS_BAD = [
    (dict(ttft_p90=2), "ttft_p90=2 is an int; pass a cdk.Duration"),
    (dict(ttft_p90=cdk.Duration.minutes(16)), "ttft_p90=16 minutes exceeds the maximum of 15 minutes"),
    (dict(ttft_p90=cdk.Duration.seconds(0)), "ttft_p90=0 seconds is below the minimum of 1 milli"),
    (dict(ttft_p90=cdk.Duration.seconds(cdk.Token.as_number({"Ref": "T"}))), "ttft_p90 is a deploy-time token"),
    (dict(throttle_periods=0), "throttle_periods=0 is below the minimum of 1"),
    (dict(throttle_periods=1441), "throttle_periods=1441 exceeds the maximum of 1,440"),
    (dict(throttle_periods=2.5), "throttle_periods=2.5 is not a whole number"),
    (dict(throttle_periods=math.inf), "throttle_periods=inf is not a finite number"),
    (dict(throttle_periods=True), "throttle_periods=True is a bool"),
    (dict(reservation_ratio=1), "reservation_ratio=1 must be greater than 1"),
    (dict(reservation_ratio=0.5), "reservation_ratio=0.5 must be greater than 1"),
    (dict(reservation_ratio=math.nan), "reservation_ratio=nan is not a finite number"),
    (dict(reservation_ratio="2"), "reservation_ratio='2' is a str"),
    (dict(reservation_ratio=A_TOKEN), "reservation_ratio is a deploy-time token"),
    (dict(latency_fallbacks=-1), "latency_fallbacks=-1 is below the minimum of 0"),
    (dict(latency_fallbacks=0.5), "latency_fallbacks=0.5 is not a whole number"),
    (dict(evaluation_periods=0), "evaluation_periods=0 is below the minimum of 1"),
    (dict(evaluation_periods=None), "evaluation_periods is required"),
    (dict(evaluation_periods=2000), "evaluation_periods=2000 exceeds the maximum of 1,440"),
]


@pytest.mark.parametrize(("kwargs", "message"), ALARMS_BAD, ids=[f"{i}-{next(iter(k))}" for i, (k, _) in enumerate(ALARMS_BAD)])
def test_latency_alarms_refuse_bad_thresholds(kwargs, message):
    with pytest.raises(InvalidPropsError) as caught:
        LatencyAlarms(**kwargs)
    assert message in str(caught.value)


WATCHED_BAD = [
    (dict(model="amazon.nova-lite-v1:0"), "model='amazon.nova-lite-v1:0' is a str; pass a BedrockModel"),
    (dict(model=None), "model is required"),
    (dict(quota=400_000), "quota=400000 is an int; pass a TpmQuota"),
    (dict(burndown=0.5), "burndown=0.5 is below the minimum of 1"),
    (dict(burndown=101), "burndown=101 exceeds the maximum of 100"),
    (dict(burndown=math.nan), "burndown=nan is not a finite number"),
    (dict(alarms={"ttft_p90": 2}), "alarms={'ttft_p90': 2} is a dict; pass LatencyAlarms"),
    (dict(label=""), "label='' is empty"),
    (dict(label="x" * 101), "label has 101 characters; at most 100"),
    (dict(label=7), "label=7 is an int; pass a string"),
]


@pytest.mark.parametrize(("kwargs", "message"), WATCHED_BAD, ids=[f"{i}-{next(iter(k))}" for i, (k, _) in enumerate(WATCHED_BAD)])
def test_watched_model_refuses_bad_values(kwargs, message):
    with pytest.raises(InvalidPropsError) as caught:
        WatchedModel(**{"model": NOVA, **kwargs})
    assert message in str(caught.value)


DASHBOARD_BAD = [
    (dict(dashboard_name="has space"), "dashboard_name='has space' may hold letters, digits, - and _ only"),
    (dict(dashboard_name=""), "dashboard_name='' is empty"),
    (dict(dashboard_name="x" * 256), "may hold letters, digits, - and _ only (1-255 characters)"),
    (dict(models=HAIKU), "models=BedrockModel("),
    (dict(models=["us.amazon.nova-lite-v1:0"]), "models[0]='us.amazon.nova-lite-v1:0' is a str; pass a BedrockModel or WatchedModel"),
    (dict(alarm_actions=["arn:aws:sns:us-east-1:111122223333:pager"]), "alarm_actions[0]='arn:aws:sns:us-east-1:111122223333:pager' is a str"),
    (dict(alarm_actions="topic"), "alarm_actions='topic' is a str; pass a list"),
    (dict(default_interval=3), "default_interval=3 is an int; pass a cdk.Duration"),
    (dict(default_interval=cdk.Duration.minutes(1)), "default_interval=1 minute is below the minimum of 5 minutes"),
]


@pytest.mark.parametrize(("kwargs", "message"), DASHBOARD_BAD, ids=[f"{i}-{next(iter(k))}" for i, (k, _) in enumerate(DASHBOARD_BAD)])
def test_dashboard_refuses_bad_props(kwargs, message):
    with pytest.raises(InvalidPropsError) as caught:
        LatencyDashboard(new_stack(), "D", **kwargs)
    assert message in str(caught.value)
    assert str(caught.value).startswith("LatencyDashboard at Test/D: ")  # the construct and its path


def test_a_deploy_time_dashboard_name_is_accepted():
    stack = new_stack()
    name = cdk.CfnParameter(stack, "Name").value_as_string
    LatencyDashboard(stack, "D", dashboard_name=name)
    assert only(template_of(stack), "AWS::CloudWatch::Dashboard")["Properties"]["DashboardName"] == {"Ref": "Name"}


def test_the_dashboard_alone_passes_nag():
    from cdk_nag import AwsSolutionsChecks
    from conftest import nag_violations

    outdir = Path(tempfile.mkdtemp())
    app = cdk.App(outdir=str(outdir))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    stack = cdk.Stack(app, "Nag", env=cdk.Environment(account="111122223333", region="us-east-1"))
    LatencyDashboard(stack, "D", models=[WatchedModel(HAIKU, quota=TpmQuota(400_000))])
    with contextlib.suppress(RuntimeError):
        app.synth()
    assert nag_violations(outdir) == []


# --- the handlers' per-call metrics ------------------------------------------------------------------

def result(**changes) -> ConverseResult:
    base = dict(text="ok", input_tokens=3_000, output_tokens=600, cache_read_tokens=200, cache_write_tokens=100,
                stop_reason="end_turn", latency_ms=11_000.0, service_latency_ms=10_500, served_latency="standard",
                first_token_ms=1_000.0)
    return ConverseResult(**{**base, **changes})


def test_emit_call_publishes_tokens_reservation_ttft_otps_and_mode_in_emf(capsys, monkeypatch):
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "worker")
    request = {"inferenceConfig": {"maxTokens": 16_000}, "performanceConfig": {"latency": "optimized"}}
    figures = written.emit_call(result(), model_id=HAIKU.model_id, request=request, dimensions=written.lambda_dimensions())
    line = json.loads(capsys.readouterr().out)
    directive = line["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == "GenaiPacer"
    assert directive["Dimensions"] == [["ModelId"], ["ModelId", "FunctionName"]]
    assert (line["ModelId"], line["FunctionName"]) == (HAIKU.model_id, "worker")
    # The worked figures: 3,000 input + 16,000 max_tokens reserved; 600 tokens in 10 s after the first token.
    assert line[written.RESERVED_TOKENS] == 3_000 + 200 + 100 + 16_000
    assert (line[written.TIME_TO_FIRST_TOKEN_MS], line[written.OUTPUT_TOKENS_PER_SECOND]) == (1_000.0, 60.0)
    assert (line[written.SERVED_OPTIMIZED], line[written.SERVED_STANDARD], line[written.OPTIMIZED_SERVED_STANDARD]) == (0, 1, 1)
    assert {m["Name"]: m["Unit"] for m in directive["Metrics"]}[written.OUTPUT_TOKENS_PER_SECOND] == "Count/Second"
    assert figures.reserved_tokens == 19_300 and figures.fell_back


def test_a_non_streamed_call_has_no_ttft_and_an_unknown_max_tokens_no_reservation(capsys):
    written.emit_call(result(first_token_ms=None), model_id="amazon.nova-lite-v1:0")
    line = json.loads(capsys.readouterr().out)
    names = {m["Name"] for m in line["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert written.TIME_TO_FIRST_TOKEN_MS not in names and written.OUTPUT_TOKENS_PER_SECOND not in names
    assert written.RESERVED_TOKENS not in names  # maxTokens unset: Bedrock reserved the model's maximum, unknown here
    assert line["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["ModelId"]]


def test_emit_throttle_counts_failed_calls(capsys):
    written.emit_throttle(NOVA.model_id, count=2, dimensions={"FunctionName": "worker"})
    line = json.loads(capsys.readouterr().out)
    assert line[written.THROTTLES] == 2 and line["_aws"]["CloudWatchMetrics"][0]["Dimensions"][1] == ["ModelId", "FunctionName"]
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="count=.* must be a whole number of throttled calls"):
            written.emit_throttle(NOVA.model_id, count=bad)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: written.emf_line({"Bogus": 1}, {"ModelId": "m"}), "unknown metric names \\['Bogus'\\]"),
        (lambda: written.emf_line({written.LATENCY_MS: math.nan}, {"ModelId": "m"}), "are not finite numbers"),
        (lambda: written.emf_line({written.LATENCY_MS: True}, {"ModelId": "m"}), "are not finite numbers"),
        (lambda: written.emf_line({written.LATENCY_MS: 1}, {"ModelId": "m"}, dimension_sets=[["Nope"]]), "name \\['Nope'\\]"),
        (lambda: written.emf_line({written.LATENCY_MS: 1}, {"ModelId": "m"}, properties={"ModelId": "x"}), "would overwrite"),
        (lambda: written.call_metrics(result(), model_id=""), "model_id='' must be the non-empty id"),
        (lambda: written.call_metrics(result(served_latency="fast"), model_id="m"), "served latency='fast'"),
        (lambda: written.call_metrics(result(), model_id="m", request={"performanceConfig": {"latency": "turbo"}}), "requested latency='turbo'"),
        (lambda: written.call_metrics(result(input_tokens=-1), model_id="m"), "input_tokens=-1 must be a whole number"),
        (lambda: written.call_metrics(result(latency_ms=math.nan), model_id="m"), "latency_ms=nan must be a number"),
        (lambda: written.call_metrics(result(), model_id="m", max_tokens=0.5), "max_tokens=0.5 must be a whole number"),
    ],
)
def test_bad_metric_input_is_refused_with_why(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_every_handler_metric_the_constructs_read_is_one_the_handlers_write(watched, capsys):
    """The names on the dashboard, in the alarms and in QueuedInference's metric_* exist in what
    emit_call and emit_throttle print, so no graph waits for a metric nobody writes."""
    written.emit_call(result(), model_id="m", max_tokens=100)
    written.emit_call(result(served_latency="optimized"), model_id="m", max_tokens=100)
    written.emit_call(result(served_tier="default"), model_id="m", max_tokens=100, request={"serviceTier": {"type": "priority"}})
    written.emit_throttle("m")
    emitted = {m["Name"] for line in capsys.readouterr().out.splitlines()
               for m in json.loads(line)["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    _, template = watched
    read = set()
    for w in body(template)["widgets"]:
        for row in w["properties"].get("metrics", []):
            if row[0] == written.NAMESPACE:
                read.add(row[1])
    for alarm in resources(template, "AWS::CloudWatch::Alarm").values():
        props = alarm["Properties"]
        if props.get("Namespace") == written.NAMESPACE:
            read.add(props["MetricName"])
        for query in props.get("Metrics", []):
            if "MetricStat" in query and query["MetricStat"]["Metric"]["Namespace"] == written.NAMESPACE:
                read.add(query["MetricStat"]["Metric"]["MetricName"])
    stack = new_stack()
    queued = QueuedInference(stack, "Q", model=NOVA, max_concurrency=2)
    read |= {getattr(queued, m)().metric_name for m in dir(queued)
             if m.startswith("metric_") and getattr(queued, m)() is not None and getattr(queued, m)().namespace == written.NAMESPACE}
    assert read and read <= emitted, read - emitted


def test_the_constructs_read_the_metric_names_without_boto3():
    root = Path(__file__).resolve().parents[2]
    code = ("import sys; sys.modules['boto3'] = None; sys.modules['botocore'] = None\n"
            "from genai_pacer._internal.runtime_constants import metrics_constants\n"
            "m = metrics_constants(); print(m.NAMESPACE, m.RESERVED_TOKENS, metrics_constants() is m)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(root / "constructs"), "PATH": ""})
    assert run.stdout.split() == ["GenaiPacer", "ReservedTokens", "True"], run.stderr


# --- the reference stack -------------------------------------------------------------------------

def _synth_with_nag(build) -> Path:
    from cdk_nag import AwsSolutionsChecks
    from conftest import nag_violations

    outdir = Path(tempfile.mkdtemp())
    app = cdk.App(outdir=str(outdir))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    build(app)
    with contextlib.suppress(RuntimeError):  # ValidationFailed: the findings are in the report
        app.synth()
    assert nag_violations(outdir) == []
    return outdir


def _cfn_lint(*templates: Path) -> None:
    lint = subprocess.run([str(Path(sys.executable).with_name("cfn-lint")), "--format", "parseable", *map(str, templates)],
                          capture_output=True, text=True)
    # exit status is a bit mask: 2 = errors, 4 = warnings, 8 = informational
    assert lint.returncode in (0, 4, 8, 12), lint.stdout + lint.stderr


def test_the_reference_stack_draws_the_plan(reference_templates):
    # synthesized once per session in the reference app, which checks nag and cfn-lint
    from stacks.settings import CONTEXT_DEFAULTS

    template = reference_templates["GenaiPacerObservability"]
    model_id = CONTEXT_DEFAULTS["model_id"][0]
    quota = float(CONTEXT_DEFAULTS["tpm_quota"][0])
    lines = {a["label"]: a["value"] for a in widget(template, "quota tokens per minute")["annotations"]["horizontal"]}
    assert lines["TPM quota"] == quota and lines["alarm at 80% of quota"] == 0.8 * quota
    assert alarms_by_name(template)["QuotaUsage"]["Threshold"] == 0.8 * quota
    # the reference model is a cross-Region profile: its quota alarm reads the profile id and the model's
    ids = BedrockModel.from_id(model_id).metric_model_ids
    assert len(ids) == 2 and ids[0] == model_id
    assert [row[2] for row in alarm_reads(alarms_by_name(template)["QuotaUsage"])[1]] == list(ids)
    (settled,) = [e for e in expressions(widget(template, "quota tokens per minute")) if e.get("label", "").startswith("settled")]
    assert settled["expression"].endswith(f"out * {float(CONTEXT_DEFAULTS['burndown'][0]):g}")
    assert "DashboardName" in template["Outputs"]


def test_the_reference_stack_shows_the_other_reference_stacks_constructs(reference_templates):
    template = reference_templates["GenaiPacerObservability"]
    titles = [w["properties"].get("title", "") for w in body(template)["widgets"]]
    assert any(t.startswith("GenaiPacerQueuedInference/ReviewSummaries: queue") for t in titles)
    # digest, ticker and catalog workflows, the scheduled and the batch pre-computation
    assert sum(t.endswith(": executions (5 minutes)") for t in titles) == 5
    assert any(t.startswith("GenaiPacerPrecompute/Router") for t in titles), titles
    assert any(t.startswith("GenaiPacerExperiment/SupportAnswer") for t in titles), titles


def test_the_quota_graph_can_read_a_model_quotas_plan():
    from genai_pacer import ModelQuota

    stack = cdk.Stack(cdk.App(), "Q", env=cdk.Environment(account="111122223333", region="us-east-1"))
    model = BedrockModel.from_id("us.anthropic.claude-3-5-haiku-20241022-v1:0")
    quota = ModelQuota(stack, "Quota", model=model, tpm_quota=400_000, burndown=5)
    profile = quota.profile(input_tokens=2_500, output_tokens=300, max_tokens=440)
    quota.share("Nightly", profile, fraction=0.3, call_seconds=6)
    tpm = TpmQuota.from_model_quota(quota)
    assert (tpm.tpm_quota, tpm.planned_tpm) == (400_000, quota.plan().tpm_at_caps)
    assert 0 < tpm.planned_tpm <= 0.3 * 400_000
    with pytest.raises(InvalidPropsError, match="quota=.* pass a ModelQuota"):
        TpmQuota.from_model_quota(400_000)


def test_a_watched_model_takes_the_model_quotas_burndown_and_plan():
    """WatchedModel(model, quota=TpmQuota.from_model_quota(q)) used burndown 1 though the quota said 5:
    the settled-tokens line and the reservation alarm under-counted output tokens five-fold."""
    from genai_pacer import ModelQuota

    stack = cdk.Stack(cdk.App(), "Q", env=cdk.Environment(account="111122223333", region="us-east-1"))
    quota = ModelQuota(stack, "Quota", model=HAIKU, tpm_quota=400_000, burndown=5)
    quota.share("Nightly", quota.profile(input_tokens=2_500, output_tokens=300, max_tokens=440), fraction=0.3, call_seconds=6)
    tpm = TpmQuota.from_model_quota(quota)
    watched = WatchedModel(HAIKU, quota=tpm)
    assert (tpm.burndown, watched.burndown, tpm.planned_tpm) == (5, 5, quota.plan().tpm_at_caps)
    LatencyDashboard(stack, "D", models=[watched])
    template = template_of(stack).to_json()
    expressions = {q["Expression"] for a in resources(template, "AWS::CloudWatch::Alarm").values()
                   for q in a["Properties"].get("Metrics", []) if "Expression" in q}
    assert "inp + cw + out * 5" in expressions  # the reservation alarm's settled tokens
    assert "inp + cw + out * 5" in json.dumps(body(template))  # and the quota graph's settled line
    with pytest.raises(InvalidPropsError, match="burndown=1 differs from the quota's burndown=5"):
        WatchedModel(HAIKU, quota=tpm, burndown=1)
    assert WatchedModel(HAIKU, quota=TpmQuota(400_000)).burndown == 1.0  # a plain quota knows no burndown
    assert WatchedModel(HAIKU, quota=TpmQuota(400_000), burndown=5).burndown == 5


# ---- the constructs that serve answers or pre-compute them (issue 23, issue 21 section 3) ------------


def test_add_answer_router_shows_hit_miss_and_stale_rates_of_what_the_router_emits():
    from genai_pacer import AnswerRouter, AnswerStore

    stack = new_stack()
    router = AnswerRouter(stack, "Router", answer_store=AnswerStore(stack, "Store"), model=NOVA)
    dashboard = LatencyDashboard(stack, "D")
    dashboard.add_answer_router(router)
    template = template_of(stack).to_json()
    rates = widget(template, "Test/Router: answers served from the store, missing and stale")
    assert [(e["expression"], e["label"]) for e in expressions(rates)] == [
        ("100 * FILL(hits, 0) / (FILL(hits, 0) + FILL(misses, 0) + FILL(stale, 0))", "hit rate (%)"),
        ("100 * FILL(misses, 0) / (FILL(hits, 0) + FILL(misses, 0) + FILL(stale, 0))", "miss rate (%)"),
        ("100 * FILL(stale, 0) / (FILL(hits, 0) + FILL(misses, 0) + FILL(stale, 0))", "stale rate (%)"),
    ]
    # the counts behind them are the names the router's handler emits, under its function's name
    counts = widget(template, "Test/Router: requests by outcome")
    assert [(ns, name, o["stat"]) for ns, name, o in metric_rows(counts)] == [
        (written.NAMESPACE, written.ANSWER_HITS, "Sum"), (written.NAMESPACE, written.ANSWER_MISSES, "Sum"),
        (written.NAMESPACE, written.ANSWER_STALE, "Sum")]
    assert all(row[2] == written.FUNCTION_DIMENSION for row in counts["metrics"] if isinstance(row[0], str))


def test_add_state_machine_takes_a_scheduled_and_a_batch_precompute_with_their_own_widgets():
    from aws_cdk import aws_scheduler as scheduler
    from genai_pacer import AnswerStore, BatchPrecompute, ScheduledPrecompute

    stack = new_stack()
    store = AnswerStore(stack, "Store")
    scheduled = ScheduledPrecompute(stack, "Nightly", answer_store=store, model=NOVA, max_concurrency=4,
                                    request=ConverseRequest(prompt=sfn.JsonPath.string_at("$.item.text"), max_tokens=120),
                                    schedule=scheduler.ScheduleExpression.cron(minute="0", hour="3"),
                                    items=[{"key": "a", "text": "x"}])
    batch = BatchPrecompute(stack, "Batch", model=NOVA, max_tokens=400, answer_store=store)
    dashboard = LatencyDashboard(stack, "D")
    dashboard.add_state_machine(scheduled)
    dashboard.add_state_machine(batch)
    template = template_of(stack).to_json()
    assert widget(template, "Test/Nightly: executions")
    (failed,) = metric_rows(widget(template, "Test/Nightly: keys a run could not answer"))
    assert failed[1] == written.PRECOMPUTE_FAILED_KEYS
    assert widget(template, "Test/Batch: executions")
    records = widget(template, "Test/Batch: records loaded into the store and left unanswered")
    assert [name for _, name, _ in metric_rows(records)] == [written.BATCH_RECORDS_LOADED, written.BATCH_RECORDS_FAILED]
    pending = widget(template, "Test/Batch: Bedrock batch records and tokens pending (account-wide")
    processed = widget(template, "Test/Batch: Bedrock batch tokens processed per minute (account-wide")
    rows = metric_rows(pending) + metric_rows(processed)
    assert {ns for ns, _, _ in rows} == {"AWS/Bedrock/Batch"}
    by_model = [row for row in pending["metrics"] + processed["metrics"] if NOVA.model_id in json.dumps(row)]
    assert len(by_model) == 4  # records and tokens pending, input and output processed: this model's
    assert [o["label"] for _, _, o in metric_rows(pending)][1] == "records pending, every model"  # and the account's
    assert "account-wide" in pending["title"] and "account-wide" in processed["title"]


def test_add_prompt_experiment_shows_what_each_variants_guards_read_and_their_states():
    from genai_pacer.experiments.prompt_experiment import ExperimentVariant, PromptExperiment, TextPrompt

    stack = new_stack()
    experiment = PromptExperiment(stack, "Exp", experiment_name="support", variants=[
        ExperimentVariant("control", NOVA, 80, TextPrompt("q")), ExperimentVariant("treatment", HAIKU, 20, TextPrompt("r"))])
    dashboard = LatencyDashboard(stack, "D")
    dashboard.add_prompt_experiment(experiment)
    template = template_of(stack).to_json()
    latency = widget(template, "Test/Exp: p90 latency per variant")
    assert [(name, o["stat"], o["label"]) for _, name, o in metric_rows(latency)] == [
        (written.LATENCY_MS, "p90", "control"), (written.LATENCY_MS, "p90", "treatment")]
    errors = widget(template, "Test/Exp: failed calls per variant")
    assert [(name, o["stat"]) for _, name, o in metric_rows(errors)] == [(written.CALL_ERRORS, "Sum")] * 2
    assert len(widget(template, "Test/Exp: guard alarms")["alarms"]) == 4
    with pytest.raises(InvalidPropsError, match="experiment='x' is a str; pass a PromptExperiment"):
        dashboard.add_prompt_experiment("x")


def test_help_shows_the_real_defaults_of_latency_alarms_and_watched_model():
    """Before: help() showed `ttft_p90: ... = <factory>` and `alarms: ... = <factory>`."""
    import inspect
    import pydoc

    assert "ttft_p90: 'cdk.Duration | None' = cdk.Duration.seconds(2)" in str(inspect.signature(LatencyAlarms))
    assert "alarms: 'LatencyAlarms | None' = LatencyAlarms()" in str(inspect.signature(WatchedModel))
    for cls in (LatencyAlarms, WatchedModel):
        text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
        assert "<factory>" not in text and " object at 0x" not in text
    # and the defaults are built when a value is: a Duration of 2 s, a LatencyAlarms of its own defaults
    assert LatencyAlarms().ttft_p90.to_milliseconds() == 2000
    alarms = WatchedModel(NOVA).alarms
    assert isinstance(alarms, LatencyAlarms) and alarms.ttft_p90.to_seconds() == 2 and alarms.throttle_periods == 3
    assert WatchedModel(NOVA, alarms=None).alarms is None
