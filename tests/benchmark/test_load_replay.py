"""LoadReplay (issue 26): the deployable load replay's template (least privilege, the results
prefix's expiry, the share refusal, the annotation) and its state machine executed offline with
StateMachineRunner, its function run in process against the Bedrock emulator and moto's S3."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pacer_runtime.replay as replay
import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template
from genai_pacer import BedrockModel, InvalidPropsError, LoadReplay, ModelQuota, planning
from genai_pacer.benchmark import load_replay
from genai_pacer.testing import BedrockEmulator, ManualClock, ModelSpec, bench
from genai_pacer.testing.sfn import StateMachineRunner
from helpers import new_stack, resources

MODEL = "us.amazon.nova-micro-v1:0"
NOVA = BedrockModel.from_id(MODEL)
PROFILE = planning.TokenProfile(input_tokens=1_000, output_tokens=200, max_tokens=400)
SECRET = "the customer's private question"
#: Offline runs start at the plan (start_lead=0): the runner starts the Map's children in process, so
#: the default 5 s lead would only be 5 s of real sleep per run.
NOW = cdk.Duration.seconds(0)


def replay_stack(**props):
    stack = new_stack()
    prompts = s3.Bucket.from_bucket_name(stack, "Prompts", "prompts-bucket")
    construct = LoadReplay(stack, "Replay", **{
        "model": NOVA, "prompts_bucket": prompts, "prompts_key": "prompts/chat.jsonl", "requests": 200,
        "concurrency": 20, "profile": PROFILE, **props})
    return stack, construct


@pytest.fixture(scope="module")
def default_replay():
    """replay_stack() with no props, synthesized once for the module's tests that only read it."""
    stack, construct = replay_stack()
    return stack, construct, Template.from_stack(stack).to_json()


def replay_settings(template: dict) -> dict:
    """The LOAD_REPLAY document the function reads (a deploy-time part, e.g. a bucket's name, as "X")."""
    function = next(r["Properties"] for r in resources(template, "AWS::Lambda::Function").values()
                    if r["Properties"].get("Handler") == "load_replay.handler.handler")
    value = function["Environment"]["Variables"]["LOAD_REPLAY"]
    return json.loads(value if isinstance(value, str) else
                      "".join(p if isinstance(p, str) else "X" for p in value["Fn::Join"][1]))


def statements(template: dict, policy_part: str) -> list[dict]:
    found = [r["Properties"]["PolicyDocument"]["Statement"] for k, r in resources(template, "AWS::IAM::Policy").items()
             if policy_part in k]
    assert len(found) == 1, policy_part
    return found[0]


def test_the_function_may_invoke_only_the_model_and_touch_only_the_prompts_object_and_the_results_prefix(default_replay):
    stack, construct, template = default_replay
    granted = statements(template, "ReplayReplayRoleDefaultPolicy")
    text = json.dumps(stack.resolve(granted))
    actions = sorted({a for s in granted for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])})
    assert actions == ["bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream", "logs:CreateLogStream",
                       "logs:PutLogEvents", "s3:GetObject", "s3:ListBucket", "s3:PutObject"]
    assert "prompts-bucket/prompts/chat.jsonl" in text and "prompts-bucket/*" not in text
    assert "/load-replay/*" in text and '"s3:prefix": ["load-replay/*"]' in text
    bedrock = [s for s in granted if "bedrock:InvokeModel" in s["Action"]]
    assert all("nova-micro" in json.dumps(s["Resource"]) for s in bedrock)
    assert construct.workers == 20


def references(value) -> set[str]:
    """The logical ids a template value refers to (Ref, Fn::GetAtt)."""
    if isinstance(value, dict):
        found = {value["Ref"]} if isinstance(value.get("Ref"), str) else set()
        if "Fn::GetAtt" in value:
            target = value["Fn::GetAtt"]
            found.add(target[0] if isinstance(target, list) else target.split(".")[0])
        return found.union(*(references(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(references(v) for v in value))
    return set()


def test_a_replay_call_may_describe_only_its_own_state_machines_executions_without_a_dependency_cycle(default_replay):
    """The function asks whether its run was stopped (DescribeExecution): granted on this state machine's
    executions only, in a policy of its own, so the template has no cycle (the state machine depends on the
    function; CloudFormation refuses a template whose resources depend on each other in a circle)."""
    _, _, template = default_replay
    machine = next(iter(resources(template, "AWS::StepFunctions::StateMachine")))
    policy = next(r for k, r in resources(template, "AWS::IAM::Policy").items() if "StopCheckPolicy" in k)
    [statement] = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Action"] == "states:DescribeExecution" and statement["Effect"] == "Allow"
    resource = json.dumps(statement["Resource"])
    assert ":execution:" in resource and machine in references(statement["Resource"]) and resource.endswith(':*"]]}')
    role = next(k for k, r in resources(template, "AWS::IAM::Role").items() if "ReplayReplayRole" in k)
    assert policy["Properties"]["Roles"] == [{"Ref": role}]
    edges = {k: references(r.get("Properties", {})) | set(r.get("DependsOn", [])) for k, r in template["Resources"].items()}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and not seen.add(n) and reaches(n, goal, seen)) for n in edges.get(start, ()))

    assert not [k for k in edges if reaches(k, k, set())]


def test_converse_mode_gets_no_streaming_permission():
    stack, _ = replay_stack(api="Converse")
    text = json.dumps(Template.from_stack(stack).to_json())
    assert "InvokeModelWithResponseStream" not in text


def test_the_results_prefix_expires_after_the_retention():
    stack, construct = replay_stack(retention=cdk.Duration.days(7))
    bucket = [r["Properties"] for r in resources(Template.from_stack(stack).to_json(), "AWS::S3::Bucket").values()
              if "ServerAccessLogsUseBucketPolicy" not in json.dumps(r) and "LoggingConfiguration" in r["Properties"]]
    rules = bucket[0]["LifecycleConfiguration"]["Rules"]
    assert [(r["Prefix"], r["ExpirationInDays"]) for r in rules if "Prefix" in r] == [("load-replay/", 7)]
    assert bucket[0]["BucketEncryption"] and bucket[0]["PublicAccessBlockConfiguration"]["BlockPublicAcls"]


def test_the_map_runs_one_child_per_virtual_user_at_the_target_concurrency():
    stack, _ = replay_stack(concurrency=50)
    definition = json.loads("".join(
        part if isinstance(part, str) else "X" for part in
        next(iter(resources(Template.from_stack(stack).to_json(), "AWS::StepFunctions::StateMachine").values()))
        ["Properties"]["DefinitionString"]["Fn::Join"][1]))
    workers = definition["States"]["Workers"]
    assert workers["MaxConcurrency"] == 50 and workers["ItemProcessor"]["ProcessorConfig"]["Mode"] == "DISTRIBUTED"
    function = next(r["Properties"] for r in resources(Template.from_stack(stack).to_json(), "AWS::Lambda::Function").values()
                    if r["Properties"].get("Handler") == "load_replay.handler.handler")
    assert function["Timeout"] == load_replay.MAX_LAMBDA_SECONDS == 900


def test_synth_annotates_what_the_run_reserves_and_roughly_costs():
    stack, construct = replay_stack(input_price_per_million=0.035, output_price_per_million=0.14, call_seconds=6)
    messages = [m.entry.data for m in cdk.App.of(stack).synth().get_stack_by_name(stack.stack_name).messages]
    # 20 users at 6 s a call: 200 requests a minute, each reserving 1,000 + 400 tokens.
    assert construct.reserved_tpm == 200 * 1_400
    assert construct.estimated_cost_usd == pytest.approx(208 * (1_000 * 0.035 + 200 * 0.14) / 1e6)
    assert any("reserves about 280,000 tokens a minute" in m and "$0.01" in m for m in messages), messages
    # the replay function's own time, stated, not priced: 208 requests back to back at 6 s + 20 users' 5 s lead
    assert construct.function_seconds == 208 * 6 + 20 * 5
    assert any("the replay function itself runs about 1,348 s at 1,024 MB" in m and "no Lambda price is built in" in m
               for m in messages), messages


def test_an_open_loop_runs_its_workers_for_the_whole_schedule():
    """60 requests a minute for 18 requests (warm-up included) is 18 s of arrivals; each worker runs that, its last
    answer (call_seconds=10) and the 5 s lead: 33 s of the function per worker."""
    _, construct = replay_stack(concurrency=None, rate_per_minute=60, requests=10, call_seconds=10)
    assert construct.workers == 1 and construct.function_seconds == pytest.approx(33)


def test_a_share_refuses_a_load_above_what_it_sustains_naming_both_numbers():
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=NOVA, tpm_quota=100_000)
    share = quota.share("Replay", PROFILE, call_seconds=6, fraction=0.5)  # 50,000 TPM
    prompts = s3.Bucket.from_bucket_name(stack, "Prompts", "prompts-bucket")
    common = {"model": NOVA, "prompts_bucket": prompts, "prompts_key": "p.jsonl", "requests": 10, "profile": PROFILE,
              "share": share}
    with pytest.raises(InvalidPropsError) as refused:
        LoadReplay(stack, "Closed", concurrency=share.max_concurrency + 1, **common)
    assert f"concurrency={share.max_concurrency + 1} is above the {share.max_concurrency} calls" in str(refused.value)
    assert [p.id for p in refused.value.problems] == ["LoadReplay.concurrency.above-share"]
    assert "Closed" in str(refused.value)  # the construct's path names which replay
    with pytest.raises(InvalidPropsError) as refused:
        LoadReplay(stack, "Open", rate_per_minute=share.requests_per_minute * 2, **common)
    assert f"the {share.requests_per_minute:,.1f} requests a minute the share sustains" in str(refused.value)
    assert [p.id for p in refused.value.problems] == ["LoadReplay.rate_per_minute.above-share"]
    held = LoadReplay(stack, "Held", concurrency=share.max_concurrency, **common)
    assert held.concurrency_plan is share


@pytest.mark.parametrize(("props", "message"), [
    ({"concurrency": None}, "neither of concurrency and rate_per_minute given"),
    ({"rate_per_minute": 60}, "both concurrency and rate_per_minute given"),
    ({"requests": 9_995, "request_cap": 10_000}, "requests=9,995 + warmup=8 = 10,003 requests is above request_cap=10,000"),
    ({"concurrency": 10_001}, "concurrency=10001"),
    ({"workers": 3}, "workers=3 applies to the open loop"),
    ({"api": "InvokeModel"}, "api="),
    ({"latency": "fast"}, "latency="),
    ({"input_price_per_million": 1.0}, "go together"),
    ({"call_budget": cdk.Duration.minutes(15)}, "call_budget="),
    ({"start_lead": cdk.Duration.minutes(6)}, "start_lead=6 minutes exceeds the maximum of 5 minutes"),
    ({"start_lead": cdk.Duration.minutes(4), "call_budget": cdk.Duration.minutes(12)},
     "start_lead=4 minutes + call_budget=12 minutes + 10 s to write the records is 970 s, above the 900 s"),
    ({"results_prefix": "no-slash"}, "results_prefix='no-slash' must end with '/'"),
    ({"retention": cdk.Duration.hours(36)}, "retention=36 hours is not whole days"),
    ({"admission_timeout": cdk.Duration.minutes(30)}, "admission_timeout applies with ledger="),
    ({"admission_timeout": cdk.Duration.seconds(30)}, "admission_timeout=30 seconds"),
    ({"stop_check_interval": cdk.Duration.minutes(16)}, "stop_check_interval=16 minutes"),
])
def test_bad_props_are_refused_by_name(props, message):
    with pytest.raises(InvalidPropsError, match=message.replace("(", r"\(").replace("+", r"\+")):
        replay_stack(**props)


def test_an_imported_results_bucket_needs_retention_none():
    stack = new_stack()
    mine = s3.Bucket.from_bucket_name(stack, "Mine", "my-results")
    prompts = s3.Bucket.from_bucket_name(stack, "Prompts", "prompts-bucket")
    common = {"model": NOVA, "prompts_bucket": prompts, "prompts_key": "p.jsonl", "requests": 10, "concurrency": 2,
              "profile": PROFILE, "results_bucket": mine}
    with pytest.raises(InvalidPropsError, match="retention expires the results prefix with a lifecycle rule"):
        LoadReplay(stack, "R", **common)
    LoadReplay(stack, "R2", retention=None, **common)


def test_a_results_bucket_of_another_type_is_one_problem():
    """A results_bucket that is no bucket was also reported as an imported bucket that retention cannot
    expire: the one problem is its type."""
    with pytest.raises(InvalidPropsError) as refused:
        replay_stack(results_bucket="my-results")
    assert refused.value.ids == ["LoadReplay.results_bucket.type"]


def test_a_deploy_time_in_flight_per_worker_in_a_closed_loop_is_one_problem():
    """A CfnParameter for in_flight_per_worker was also reported as an open-loop prop given to a closed loop:
    the one problem is that it is deploy-time."""
    stack = new_stack()
    value = cdk.CfnParameter(stack, "InFlight", type="Number").value_as_number
    prompts = s3.Bucket.from_bucket_name(stack, "Prompts", "prompts-bucket")
    with pytest.raises(InvalidPropsError) as refused:
        LoadReplay(stack, "Replay", model=NOVA, prompts_bucket=prompts, prompts_key="p.jsonl", requests=10,
                   concurrency=2, profile=PROFILE, in_flight_per_worker=value)
    assert refused.value.ids == ["LoadReplay.in_flight_per_worker.replay-setting-deploy-time"]


def test_the_function_keeps_the_same_write_margin_as_the_construct(monkeypatch):
    import importlib
    import sys

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    sys.modules.pop("load_replay.handler", None)
    handler = importlib.import_module("load_replay.handler")
    assert handler.WRITE_SECONDS == load_replay.WRITE_SECONDS
    assert handler.MAX_LAMBDA_SECONDS == load_replay.MAX_LAMBDA_SECONDS
    assert load_replay.DEFAULT_START_LEAD.to_seconds() == handler.START_LEAD_SECONDS
    assert load_replay.DEFAULT_ADMISSION_TIMEOUT.to_seconds() == handler.ADMISSION_TIMEOUT_SECONDS


def test_the_start_lead_reaches_the_functions_settings(default_replay, monkeypatch):
    """start_lead is how far ahead of the plan the run's shared clock starts (the plan's start_at):
    the function reads it from the settings the construct writes, 5 s unless given."""
    import importlib
    import sys

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    sys.modules.pop("load_replay.handler", None)
    handler = importlib.import_module("load_replay.handler")
    _, _, template = default_replay
    for template_of, lead in ((template, 5.0), (Template.from_stack(replay_stack(start_lead=cdk.Duration.millis(1_500))[0])
                                                .to_json(), 1.5)):
        settings = handler.Settings.from_environment({"LOAD_REPLAY": json.dumps(replay_settings(template_of))})
        assert settings.start_lead_s == lead


def prompts_text() -> str:
    return "".join(json.dumps({"id": f"chat-{i}", "messages": [{"role": "user", "content": [{"text": f"{SECRET} {i}"}]}],
                               "inferenceConfig": {"maxTokens": 60}}) + "\n" for i in range(4)) + "not json\n"


@pytest.mark.parametrize("api", ["ConverseStream", "Converse"])
def test_a_run_executes_offline_and_reports_as_the_local_bench(monkeypatch, api):
    """Plan, 20 virtual users each replaying its share, the summary (200 requests and 2 warm-up): every request recorded once,
    the report the local bench's code computes from the same records, no prompt text anywhere."""
    stack = new_stack()
    prompts = s3.Bucket(stack, "Prompts")
    construct = LoadReplay(stack, "Replay", model=NOVA, prompts_bucket=prompts, prompts_key="prompts/chat.jsonl",
                           requests=200, warmup=2, concurrency=20, profile=PROFILE, api=api, start_lead=NOW)
    # ManualClock(instant=True): each answer's model time passes at once, so the runner's 202 calls one
    # after another cost no emulated latency (the report is the local bench's over whatever was measured).
    with BedrockEmulator([ModelSpec(MODEL)], clock=ManualClock(instant=True)) as bedrock, \
            StateMachineRunner(stack, bedrock=bedrock) as runner:
        bucket = runner.physical_name(prompts)
        runner.s3.put_object(Bucket=bucket, Key="prompts/chat.jsonl", Body=prompts_text().encode())
        run = runner.run({}, name="run-1").raise_for_status()
        results = runner.physical_name(construct.results_bucket)
        listed = sorted(o["Key"] for o in runner.s3.list_objects_v2(Bucket=results)["Contents"])
        read = {key: runner.s3.get_object(Bucket=results, Key=key)["Body"].read().decode() for key in listed}
    records = sorted((replay.Sample(**json.loads(line)) for key, body in read.items() if "/records/" in key
                      for line in body.splitlines()), key=lambda s: s.index)
    assert [s.index for s in records] == list(range(202)) and run.model_calls == 202
    assert all(s.ok for s in records) and all((s.ttft_s is not None) == (api == "ConverseStream") for s in records)
    document = json.loads(read["load-replay/run-1/bench.json"])
    config = replay.BenchConfig(**document["config"])
    assert document["summary"] == json.loads(json.dumps(bench.summarize(records, config)))
    assert document["summary"]["requests"] == 200 and config.concurrency == 20
    assert json.loads(read["load-replay/run-1/run.json"])["run"]["rejected_lines"] == 1
    assert not any(SECRET in body for body in read.values())


def test_a_run_under_a_quota_that_throttles_records_every_request_and_counts_the_throttles(no_sdk_backoff):
    """12 requests at 4 virtual users against a quota they exceed: each request is one record, the
    throttles the SDK retried are counted in the report, and the report is the local bench's
    computation over the same records."""
    stack = new_stack()
    prompts = s3.Bucket(stack, "Prompts")
    construct = LoadReplay(stack, "Replay", model=NOVA, prompts_bucket=prompts, prompts_key="p.jsonl",
                           requests=12, warmup=0, concurrency=4, profile=PROFILE, api="Converse", start_lead=NOW)
    # ~70 tokens reserved a call: the quota holds ~7 calls a model minute. On ManualClock(instant=True) model
    # time moves only by the answers' own latency (a second or two each), so the 12 requests, even one at a
    # time (the runner calls in-process functions in turn), exceed the window whatever the machine's speed.
    spec = ModelSpec(MODEL, tpm_quota=500, max_output_tokens=4_096)
    with BedrockEmulator([spec], clock=ManualClock(instant=True)) as bedrock, \
            StateMachineRunner(stack, bedrock=bedrock) as runner:
        runner.s3.put_object(Bucket=runner.physical_name(prompts), Key="p.jsonl", Body=prompts_text().encode())
        run = runner.run({}, name="busy").raise_for_status()
        results = runner.physical_name(construct.results_bucket)
        document = json.loads(runner.s3.get_object(Bucket=results, Key="load-replay/busy/bench.json")["Body"].read())
        csv_rows = runner.s3.get_object(Bucket=results, Key="load-replay/busy/bench.csv")["Body"].read().decode()
    summary = document["summary"]
    throttled = sum(1 for i in run.invocations if i.outcome == "throttled")
    assert summary["requests"] == 12 and len(csv_rows.splitlines()) == 13
    assert throttled > 0 and summary["throttles"] == throttled
    assert summary["attempts"] == run.model_calls
    assert summary["succeeded"] + summary["failed"] == 12


def test_a_run_is_stopped_by_the_one_call_the_docs_name():
    """`aws stepfunctions stop-execution --execution-arn <arn>` (docs/benchmark.md) stops a run: the
    execution ends ABORTED, as Step Functions ends a stopped one (not FAILED: the offline runner counted
    the workers the stop ended as failed items, past the Map's tolerated failures), its Map Run is
    ABORTED, the summary step never runs, and `bench report` computes the summary from the records the
    workers wrote. The emulator's ManualClock holds the first answers until the stop is sent, so it
    lands while the workers run whatever the machine's speed. Lambda's API has no operation that ends a
    running invocation, so a replay call already running asks between requests (DescribeExecution, here
    before each one: stop_check_interval=0) and sends no more: each worker sent at most the request it
    held when the stop came, not its 6."""
    import threading
    import time
    from pathlib import Path

    docs = (Path(__file__).parents[2] / "docs" / "benchmark.md").read_text()
    assert "aws stepfunctions stop-execution --execution-arn" in docs
    stack = new_stack()
    prompts = s3.Bucket(stack, "Prompts")
    construct = LoadReplay(stack, "Replay", model=NOVA, prompts_bucket=prompts, prompts_key="p.jsonl", requests=12,
                           warmup=0, concurrency=2, profile=PROFILE, api="Converse", start_lead=NOW,
                           stop_check_interval=NOW)
    clock = ManualClock()
    stopped: list[str] = []
    with BedrockEmulator([ModelSpec(MODEL)], clock=clock) as bedrock, \
            StateMachineRunner(stack, bedrock=bedrock) as runner:
        runner.s3.put_object(Bucket=runner.physical_name(prompts), Key="p.jsonl", Body=prompts_text().encode())

        def stop_while_the_workers_run() -> None:
            deadline = time.monotonic() + 60
            while clock.sleepers < 1 and time.monotonic() < deadline:  # an answer is held: the Map runs
                time.sleep(0.01)
            machine = runner.sfn.list_state_machines()["stateMachines"][0]["stateMachineArn"]  # created by run()
            arn = runner.sfn.list_executions(stateMachineArn=machine)["executions"][0]["executionArn"]
            runner.sfn.stop_execution(executionArn=arn)  # the one call
            stopped.append(arn)
            clock.instant = True  # release the held answers: the running calls end
            clock.advance(3_600)

        stopper = threading.Thread(target=stop_while_the_workers_run)
        stopper.start()
        run = runner.run({}, name="stopped")
        stopper.join()
        map_run = runner.sfn.list_map_runs(executionArn=run.execution_arn)["mapRuns"][0]["mapRunArn"]
        map_status = runner.sfn.describe_map_run(mapRunArn=map_run)["status"]
        results = runner.physical_name(construct.results_bucket)
        keys = [o["Key"] for o in runner.s3.list_objects_v2(Bucket=results, Prefix="load-replay/stopped/")["Contents"]]
        report = bench.load_run(f"s3://{results}/load-replay/stopped/", s3=runner.s3)
    assert stopped == [run.execution_arn]
    assert run.status == "ABORTED" and map_status == "ABORTED"
    # The history closes as a stopped execution's does: the Map Run and the Map state aborted, nothing after.
    events = [event["type"] for event in run.history]
    after = events[events.index("MapRunAborted"):]
    assert after[:2] == ["MapRunAborted", "MapStateAborted"] and after[-1] == "ExecutionAborted"
    assert not {"MapStateSucceeded", "MapStateFailed", "MapStateExited"} & set(after)
    assert "Summarize" not in run.states_entered and not any(k.endswith("/bench.json") for k in keys)
    assert 0 < report.summary["requests"] == len(report.samples) == run.model_calls <= 2


def test_goodput_targets_and_the_shares_quota_reach_the_deployed_report():
    """Targets in the props and the ModelQuota's tpm_quota (from the share) are the report's: its goodput
    counts the requests within every target, and its tpm percentages are read against the quota, as a
    local `genai-pacer bench --ttft-target --otps-target --e2e-target --tpm` reports them."""
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=NOVA, tpm_quota=400_000)
    share = quota.share("Replay", PROFILE, call_seconds=6, fraction=0.5)
    prompts = s3.Bucket(stack, "Prompts")
    construct = LoadReplay(stack, "Replay", model=NOVA, prompts_bucket=prompts, prompts_key="p.jsonl", requests=20,
                           warmup=0, concurrency=4, profile=PROFILE, share=share,
                           ttft_target=cdk.Duration.millis(250), otps_target=20, e2e_target=cdk.Duration.seconds(30),
                           start_lead=NOW)
    assert construct.tpm_quota == 400_000
    with BedrockEmulator([ModelSpec(MODEL)], time_scale=200) as bedrock, \
            StateMachineRunner(stack, bedrock=bedrock) as runner:
        runner.s3.put_object(Bucket=runner.physical_name(prompts), Key="p.jsonl", Body=prompts_text().encode())
        runner.run({}, name="goodput").raise_for_status()
        results = runner.physical_name(construct.results_bucket)
        document = json.loads(runner.s3.get_object(Bucket=results, Key="load-replay/goodput/bench.json")["Body"].read())
        records = [replay.Sample(**json.loads(line)) for item in runner.s3.list_objects_v2(
            Bucket=results, Prefix="load-replay/goodput/records/")["Contents"]
            for line in runner.s3.get_object(Bucket=results, Key=item["Key"])["Body"].read().decode().splitlines()]
    summary, config = document["summary"], replay.BenchConfig(**document["config"])
    assert (config.ttft_target_s, config.otps_target, config.e2e_target_s, config.tpm_quota) == (0.25, 20, 30, 400_000)
    assert summary["goodput"]["targets"] == {"ttft_s": 0.25, "otps": 20.0, "e2e_s": 30.0}
    assert summary["tpm"]["quota"] == 400_000
    assert summary["tpm"]["settled_pct_of_quota"] == round(100 * summary["tpm"]["settled"] / 400_000, 1) > 0
    assert summary["tpm"]["reserved_pct_of_quota"] is not None
    # goodput counts exactly the records within every target: the local bench's own arithmetic
    within = sum(1 for s in records if s.ok and s.ttft_s <= 0.25 and s.otps is not None and s.otps >= 20 and s.e2e_s <= 30)
    assert summary["goodput"]["requests"] == within == bench.summarize(records, config)["goodput"]["requests"]


@pytest.mark.parametrize(("props", "message"), [
    ({"api": "Converse", "ttft_target": cdk.Duration.millis(500)}, "ttft_target needs api='ConverseStream'"),
    ({"api": "Converse", "otps_target": 30}, "otps_target needs api='ConverseStream'"),
    ({"e2e_target": cdk.Duration.minutes(20)}, "e2e_target=20 minutes exceeds the maximum"),
    ({"otps_target": 0}, "otps_target="),
])
def test_goodput_targets_no_request_could_meet_are_refused_by_name(props, message):
    with pytest.raises(InvalidPropsError, match=message):
        replay_stack(**props)


def test_without_a_share_the_report_has_no_quota_and_the_targets_stay_empty(default_replay):
    _, construct, template = default_replay
    config = replay_settings(template)["config"]
    assert construct.tpm_quota is None
    names = ("tpm_quota", "ttft_target_s", "otps_target", "e2e_target_s")
    assert {name: config.get(name) for name in names} == dict.fromkeys(names)  # to_json_string drops nulls


def test_an_open_loop_run_executes_offline():
    """The run's settings reach the function through Stack.to_json_string, which leaves out null values:
    the open loop's concurrency=None must not come back as BenchConfig's default of 8 (every open-loop
    run failed at the function's cold start: 'set exactly one of concurrency ... or rate_per_minute')."""
    stack = new_stack()
    prompts = s3.Bucket(stack, "Prompts")
    construct = LoadReplay(stack, "Replay", model=NOVA, prompts_bucket=prompts, prompts_key="prompts/chat.jsonl",
                           requests=20, warmup=0, rate_per_minute=6_000, workers=2, in_flight_per_worker=4,
                           profile=PROFILE, api="Converse", start_lead=NOW)
    with BedrockEmulator([ModelSpec(MODEL)], time_scale=200) as bedrock, \
            StateMachineRunner(stack, bedrock=bedrock) as runner:
        runner.s3.put_object(Bucket=runner.physical_name(prompts), Key="prompts/chat.jsonl", Body=prompts_text().encode())
        run = runner.run({}, name="open-1").raise_for_status()
        results = runner.physical_name(construct.results_bucket)
        document = json.loads(runner.s3.get_object(Bucket=results, Key="load-replay/open-1/bench.json")["Body"].read())
    config = replay.BenchConfig(**document["config"])
    assert (config.concurrency, config.rate_per_minute) == (None, 6_000)
    assert document["summary"]["requests"] == 20 and run.model_calls == 20


def test_a_share_refuses_a_closed_loop_whose_call_seconds_send_more_than_it_sustains():
    """The share's calls in flight are counted at its own call_seconds; a replay told its calls last 1 s
    sends 50 x 60 / 1 = 3,000 requests a minute, four times what a share drawn at 4 s sustains, though
    its 50 users are below the share's 51 calls in flight: refused, not run against production's quota."""
    stack = new_stack()
    quota = ModelQuota(stack, "Quota", model=NOVA, tpm_quota=2_000_000)
    profile = planning.TokenProfile(input_tokens=1_800, output_tokens=250, max_tokens=400)
    share = quota.share("Replay", profile, call_seconds=4, fraction=0.8)
    prompts = s3.Bucket.from_bucket_name(stack, "Prompts", "prompts-bucket")
    common = {"model": NOVA, "prompts_bucket": prompts, "prompts_key": "p.jsonl", "requests": 10, "profile": profile,
              "share": share, "concurrency": 50}
    with pytest.raises(InvalidPropsError) as refused:
        LoadReplay(stack, "Fast", call_seconds=1, **common)
    assert refused.value.ids == ["LoadReplay.call_seconds.above-share"]
    assert "concurrency=50 at call_seconds=1 is 3,000 requests a minute" in str(refused.value)
    assert LoadReplay(stack, "AtTheShares", call_seconds=4, **common).reserved_tpm <= share.requests_per_minute * 2_200


def test_max_tokens_above_the_profiles_is_refused_since_the_share_and_the_annotation_count_the_profile(default_replay):
    """Bedrock reserves input + maxTokens when a call starts; the share, reserved_tpm and the synth
    annotation count the profile's max_tokens. max_tokens=4,000 on a profile of 400 reserved 5,800 a
    request while the annotation said 2,200: refused by name rather than under-stated."""
    with pytest.raises(InvalidPropsError) as refused:
        replay_stack(max_tokens=4_000)
    assert refused.value.ids == ["LoadReplay.max_tokens.above-profile"]
    assert "max_tokens=4,000 is above the profile's max_tokens=400" in str(refused.value)
    assert replay_stack(max_tokens=PROFILE.max_tokens)[1].reserved_tpm == default_replay[1].reserved_tpm
