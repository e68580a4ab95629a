"""The load replay's function (lambda/load_replay/handler.py, issue 26): a run planned from the
prompts object, each worker's share replayed against the emulator through a real boto3 client and
continued across calls when the time budget runs low, records in moto's S3 holding no prompt or
answer text, and the summary the local bench computes from the same records."""

from __future__ import annotations

import importlib
import json
import math
import sys
from dataclasses import asdict

import boto3
import pacer_runtime.replay as replay
import pytest
from genai_pacer.testing import BedrockEmulator, ModelSpec
from moto import mock_aws

MODEL = "us.amazon.nova-micro-v1:0"
BUCKET, PROMPTS_KEY, RESULTS = "replay-bucket", "prompts/recorded.jsonl", "runs/"
SECRET = "the customer's private question"


def settings_json(*, concurrency=2, rate_per_minute=None, workers=None, in_flight=1, requests=6, warmup=2,
                  streaming=True, call_budget_s=60.0, request_cap=1_000, seed=0, admission_timeout_s=900.0,
                  stop_check_s=None, **config):
    return json.dumps({
        "config": {"model_id": MODEL, "requests": requests, "warmup": warmup, "concurrency": concurrency,
                   "rate_per_minute": rate_per_minute, "streaming": streaming, "seed": seed, "answer_hint": False,
                   **config},
        "prompts_bucket": BUCKET, "prompts_key": PROMPTS_KEY, "results_bucket": BUCKET, "results_prefix": RESULTS,
        "workers": workers or concurrency, "in_flight": in_flight, "call_budget_s": call_budget_s,
        "request_cap": request_cap, "start_lead_s": 0, "admission_timeout_s": admission_timeout_s,
        **({} if stop_check_s is None else {"stop_check_s": stop_check_s}),
    })


def lines(*extra: str) -> str:
    good = [json.dumps({"id": f"chat-{i}", "messages": [{"role": "user", "content": [{"text": f"{SECRET} {i}"}]}],
                        "inferenceConfig": {"maxTokens": 50}}) for i in range(3)]
    return "\n".join([*good, *extra]) + "\n"


@pytest.fixture
def load(monkeypatch):
    """Import the handler afresh under LOAD_REPLAY (a cold start), inside moto, with the prompts put."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)

        def _load(endpoint=None, prompts=None, **settings):
            s3.put_object(Bucket=BUCKET, Key=PROMPTS_KEY, Body=(prompts or lines()).encode())
            monkeypatch.setenv("LOAD_REPLAY", settings_json(**settings))
            if endpoint:
                monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", endpoint)
            sys.modules.pop("load_replay.handler", None)
            return importlib.import_module("load_replay.handler"), s3

        yield _load


class Context:
    """The Lambda context's remaining time, on the case's own budget: each call spends `per_check` s."""

    def __init__(self, seconds: float, per_check: float = 0.0) -> None:
        self.left, self.per_check = seconds, per_check

    def get_remaining_time_in_millis(self) -> int:
        left = self.left
        self.left -= self.per_check
        return int(left * 1000)


def run_all(module, context_seconds=900.0, per_check=0.0):
    """What the state machine does: plan, loop each worker until done, summarize."""
    planned = module.handler({"action": "plan", "run": "run-1"}, Context(900))
    calls = []
    for worker in planned["workers"]:
        event = {"action": "replay", "worker": worker, "cursor": 0, "part": 0, "run": planned["run"]}
        while True:
            event = module.handler(event, Context(context_seconds, per_check))
            calls.append(event)
            if event["done"]:
                break
    summary = module.handler({"action": "summarize", "run": planned["run"]}, Context(900))
    return planned, calls, summary


def objects(s3, prefix):
    return sorted(item["Key"] for item in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", []))


def body(s3, key):
    return s3.get_object(Bucket=BUCKET, Key=key)["Body"].read().decode()


@pytest.mark.parametrize("streaming", [True, False])
def test_a_closed_loop_run_records_every_request_and_reports_as_the_local_bench(load, streaming):
    with BedrockEmulator([ModelSpec(MODEL)], time_scale=100) as emulator:
        module, s3 = load(emulator.endpoint_url, streaming=streaming, time_scale=100)
        planned, calls, result = run_all(module)
    records = [replay.Sample(**json.loads(line)) for key in objects(s3, "runs/run-1/records/")
               for line in body(s3, key).splitlines()]
    assert sorted(s.index for s in records) == list(range(8))  # 2 warm-up + 6 measured, each once
    assert [s.index for s in records if s.warmup] == [0, 1]
    assert len(emulator.invocations) == 8 and all(s.ok for s in records)
    assert all((s.ttft_s is not None) == streaming for s in records)
    config = module.SETTINGS.config
    document = json.loads(body(s3, "runs/run-1/bench.json"))
    assert document == json.loads(json.dumps(replay.report_document(config, replay.summarize(records, config))))
    assert document["summary"]["requests"] == 6 and result["succeeded"] == 6
    csv_text = body(s3, "runs/run-1/bench.csv")
    assert csv_text.splitlines()[0].split(",") == replay.CSV_FIELDS and len(csv_text.splitlines()) == 9
    everything = "".join(body(s3, key) for key in objects(s3, "runs/"))
    assert SECRET not in everything and "chat-0" in everything  # ids, never text
    # Worker 0 sends 0, 2, 4, 6 and worker 1 the odd ones, one after another.
    assert [c["worker"] for c in calls] == [0, 1] and all(c["done"] for c in calls)


def test_a_share_longer_than_one_invocation_continues_where_it_stopped(load):
    """Each call stops starting requests when its time left falls below one request's budget plus the
    write; the next call continues at its cursor; no request is lost or sent twice."""
    with BedrockEmulator([ModelSpec(MODEL)], time_scale=100) as emulator:
        module, s3 = load(emulator.endpoint_url, concurrency=1, requests=5, warmup=0, call_budget_s=60)
        # 100 s left, 30 s spent per look at the clock: room for two requests per call (100, 70 >= 70).
        planned, calls, _ = run_all(module, context_seconds=100, per_check=30)
    assert [(c["cursor"], c["part"], c["records"], c["done"]) for c in calls] == [
        (2, 1, 2, False), (4, 2, 2, False), (5, 3, 1, True)]
    assert objects(s3, "runs/run-1/records/") == [f"runs/run-1/records/worker-00000-part-{p:05d}.jsonl" for p in range(3)]
    records = module.read_records(s3, BUCKET, "runs/run-1/")
    assert [(s.index, s.prompt_id) for s in records] == [  # prompts cycled, each request once
        (0, "chat-0"), (1, "chat-1"), (2, "chat-2"), (3, "chat-0"), (4, "chat-1")]
    assert len(emulator.invocations) == 5


def test_a_call_with_no_time_left_sends_nothing_and_returns_its_cursor(load):
    module, s3 = load(concurrency=1, requests=3, warmup=0)
    planned = module.handler({"action": "plan", "run": "run-1"}, Context(900))
    event = {"action": "replay", "worker": 0, "cursor": 1, "part": 4, "run": planned["run"]}
    assert module.handler(event, Context(60 + module.WRITE_SECONDS - 1)) == {**event, "part": 5, "records": 0,
                                                                              "done": False}
    assert objects(s3, "runs/run-1/records/") == []


def test_throttles_are_counted_in_the_records_not_raised(load, no_sdk_backoff):
    """A quota the run exceeds: throttled attempts are retried by the SDK and counted; a request still
    throttled after its retries is a record with its error code; the function does not fail."""
    spec = ModelSpec(MODEL, tpm_quota=300, max_output_tokens=4_096)  # each call reserves ~60: a few fit
    with BedrockEmulator([spec], time_scale=100) as emulator:
        module, s3 = load(emulator.endpoint_url, concurrency=1, requests=12, warmup=0)
        _, _, result = run_all(module)
    document = json.loads(body(s3, "runs/run-1/bench.json"))["summary"]
    throttled = sum(1 for i in emulator.invocations if i.outcome == "throttled")
    assert throttled > 0 and document["throttles"] == throttled
    assert document["requests"] == 12 == result["requests"]
    assert document["failed"] == document["errors"].get("ThrottlingException", 0)


def test_a_bad_prompt_line_fails_alone(load):
    bad = ['{"prompt": "no expected_output_tokens"}', "not json", json.dumps({"modelId": "x", "messages": []})]
    with BedrockEmulator([ModelSpec(MODEL)], time_scale=100) as emulator:
        module, s3 = load(emulator.endpoint_url, prompts=lines(*bad), concurrency=1, requests=3, warmup=0)
        _, _, result = run_all(module)
    run = json.loads(body(s3, "runs/run-1/run.json"))["run"]
    assert (run["prompt_lines"], run["rejected_lines"]) == (3, 3)
    assert [line.split(": ")[0] for line in run["rejected"]] == [
        f"s3://{BUCKET}/{PROMPTS_KEY}:{n}" for n in (4, 5, 6)]
    assert result["succeeded"] == 3 and SECRET not in json.dumps(run)


def test_a_file_with_no_good_line_fails_the_plan(load):
    module, _ = load(prompts="not json\n")
    from pacer_runtime.prompts import PromptError

    with pytest.raises(PromptError, match=r"no prompt to replay \(1 lines refused: s3://.*:1: not JSON"):
        module.handler({"action": "plan", "run": "run-1"}, Context(900))


def test_a_prompts_file_changed_during_the_run_is_not_replayed(load):
    """Every worker replays the version the plan read (GetObject IfMatch its ETag)."""
    from botocore.exceptions import ClientError

    module, s3 = load(concurrency=1, requests=1, warmup=0)
    planned = module.handler({"action": "plan", "run": "run-1"}, Context(900))
    s3.put_object(Bucket=BUCKET, Key=PROMPTS_KEY, Body=b'{"prompt": "changed", "expected_output_tokens": 3}\n')
    module._PROMPTS.clear()
    with pytest.raises(ClientError, match="PreconditionFailed"):
        module.handler({"action": "replay", "worker": 0, "cursor": 0, "part": 0, "run": planned["run"]}, Context(900))


@pytest.mark.parametrize(("event", "message"), [
    (None, "the event is"), ({"action": "drop"}, "the event is"),
    ({"action": "plan"}, "needs 'run'"), ({"action": "plan", "run": "a/b"}, "needs 'run'"),
    ({"action": "replay", "worker": -1, "cursor": 0, "part": 0, "run": {}}, "worker"),
    ({"action": "replay", "worker": 0, "cursor": True, "part": 0, "run": {}}, "cursor"),
    ({"action": "replay", "worker": 0, "cursor": 0, "part": 0, "run": {"prefix": "p"}}, "the plan's run"),
    ({"action": "replay", "worker": 9, "cursor": 0, "part": 0, "run": {"prefix": "p", "etag": "e", "start_at": 0}},
     "not one of the run's 2 workers"),
    ({"action": "summarize", "run": None}, "the plan's run"),
])
def test_a_malformed_event_is_refused_by_name(load, event, message):
    module, _ = load()
    with pytest.raises(module.ReplayInputError, match=message):
        module.handler(event, Context(900))


def test_the_plan_refuses_a_run_above_its_request_cap(load):
    module, _ = load(requests=10, warmup=2, request_cap=11)
    with pytest.raises(module.ReplayInputError, match=r"warm-up \+ requests = 12 is above the run's request cap \(11\)"):
        module.handler({"action": "plan", "run": "run-1"}, Context(900))


class Clock:
    """The run's shared clock for the open loop, advanced only by sleep: requests take no time."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


class Instant:
    """A Converse that answers at once, so arrivals are all the test sees."""

    def __init__(self) -> None:
        from unittest.mock import MagicMock

        self.meta = MagicMock()

    def converse(self, **request):
        return {"output": {"message": {"content": [{"text": "ok"}]}}, "stopReason": "end_turn",
                "usage": {"inputTokens": 3, "outputTokens": 1}, "metrics": {"latencyMs": 1}}


def test_the_open_loop_keeps_one_seeded_poisson_schedule_across_its_workers(load):
    """Four workers each send their slice of one schedule at its times on the run's clock: merged,
    the recorded starts are the schedule, and its gaps are exponential at the requested rate."""
    module, s3 = load(concurrency=None, rate_per_minute=1_200, workers=4, in_flight=3, requests=2_000, warmup=0,
                      streaming=False, seed=11, request_cap=2_000)
    clock = Clock(1_000.0)
    planned = module.plan({"action": "plan", "run": "run-1"}, module.SETTINGS, s3=s3, clock=clock)
    for worker in planned["workers"]:
        event = {"action": "replay", "worker": worker, "cursor": 0, "part": 0, "run": planned["run"]}
        clock.t = 1_000.0  # each worker starts before the first arrival (the plan's lead)
        done = module.replay_share(event, module.SETTINGS, client=Instant(), s3=s3, remaining_s=lambda: 900,
                                   clock=clock, sleep=clock.sleep)
        assert done["done"] and done["records"] == 500
    records = module.read_records(s3, BUCKET, "runs/run-1/")
    expected = replay.arrivals(20.0, 2_000, seed=11)
    assert [s.started_s for s in records] == [round(t, 4) for t in expected]
    gaps = [b.started_s - a.started_s for a, b in zip(records, records[1:], strict=False)]
    mean = sum(gaps) / len(gaps)
    assert abs(mean - 1 / 20) < 0.005  # 20 arrivals a second
    assert abs(sum(g > mean for g in gaps) / len(gaps) - math.exp(-1)) < 0.04  # exponential gaps


def test_the_open_loop_stops_before_an_arrival_it_could_not_finish(load):
    """A worker whose next arrival lies beyond its time budget returns, and the next call sends it on time."""
    module, s3 = load(concurrency=None, rate_per_minute=6, workers=1, in_flight=2, requests=4, warmup=0,
                      streaming=False, seed=1)
    clock = Clock(0.0)
    planned = module.plan({"action": "plan", "run": "run-1"}, module.SETTINGS, s3=s3, clock=clock)
    budget = 60 + module.WRITE_SECONDS
    event = {"action": "replay", "worker": 0, "cursor": 0, "part": 0, "run": planned["run"]}
    sent = []
    while not event.get("done"):
        call_started = clock.t
        event = module.replay_share(event, module.SETTINGS, client=Instant(), s3=s3,
                                    remaining_s=lambda started=call_started: budget + 20 - (clock.t - started),
                                    clock=clock, sleep=clock.sleep)
        sent.append(event["records"])
    assert sum(sent) == 4 and len(sent) > 1
    starts = [s.started_s for s in module.read_records(s3, BUCKET, "runs/run-1/")]
    assert starts == [round(t, 4) for t in replay.arrivals(0.1, 4, seed=1)]
    assert asdict(module.SETTINGS)["in_flight"] == 2


# ---- LoadReplay(ledger=...): each request admitted by the quota's shared ledger -----------------------

LEDGER_TABLE, QUOTA_TPM = "ledger-table", 100_000


def shared_ledger(consumer: str, floor_tpm: float):
    from pacer_runtime.ledger import SharedLedger

    return SharedLedger(LEDGER_TABLE, ledger_id=MODEL, consumer=consumer, quota_tpm=QUOTA_TPM, floor_tpm=floor_tpm,
                        client=boto3.client("dynamodb", region_name="us-east-1"), poll_seconds=0.01,
                        max_poll_seconds=0.02)


def full_ledger_pacer(module):
    """The run's pacer (the Replay share, a quarter floor) on a ledger another consumer has filled."""
    boto3.client("dynamodb", region_name="us-east-1").create_table(
        TableName=LEDGER_TABLE, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")
    assert shared_ledger("Interactive", 0.75 * QUOTA_TPM).try_reserve(QUOTA_TPM).tokens == QUOTA_TPM
    return module.ledger_pacer(module.SETTINGS, {"GENAI_PACER_LEDGER_TABLE": LEDGER_TABLE},
                               ledger=shared_ledger("Replay", 0.25 * QUOTA_TPM))


def test_a_closed_loop_user_the_ledger_cannot_admit_in_time_sends_nothing_and_continues_next_call(load):
    """The quota is full (another consumer holds it): a request is not sent past the call's time, its
    user's cursor stays where it was, and no record is written, so the next call replays it."""
    module, s3 = load(concurrency=1, requests=3, warmup=0)
    pacer = full_ledger_pacer(module)
    planned = module.handler({"action": "plan", "run": "run-1"}, Context(900))
    event = {"action": "replay", "worker": 0, "cursor": 1, "part": 0, "run": planned["run"]}
    left = module.SETTINGS.call_budget_s + module.WRITE_SECONDS  # room to start, none to wait
    result = module.replay_share(event, module.SETTINGS, client=module.BEDROCK, s3=s3, pacer=pacer,
                                 remaining_s=lambda: left)
    assert (result["cursor"], result["records"], result["done"]) == (1, 0, False)
    assert objects(s3, "runs/run-1/records/") == []
    stats = pacer.stats()
    assert stats.admitted == 0 and stats.ledger_refusals >= 1 and stats.rejected_late + stats.rejected_at_once == 1


def test_a_closed_loop_user_the_ledger_admits_nothing_for_admission_timeout_gives_up_and_the_report_says_why(load):
    """A ledger that stays full: the user's calls carry since when it waits (stalled_since, on the run's clock);
    once that reaches admission_timeout the worker fails with AdmissionTimeout (the run then ends "Replay
    incomplete", not at the state machine's 24-hour timeout), and the summary names the worker and why."""
    module, s3 = load(concurrency=1, requests=3, warmup=0, admission_timeout_s=600.0)
    pacer = full_ledger_pacer(module)
    planned = module.plan({"run": "run-1"}, module.SETTINGS, s3=s3, clock=lambda: 1_000.0)
    event = {"action": "replay", "worker": 0, "cursor": 0, "part": 0, "run": planned["run"]}
    left = module.SETTINGS.call_budget_s + module.WRITE_SECONDS  # room to start, none to wait

    def call(at: float, event: dict) -> dict:
        return module.replay_share(event, module.SETTINGS, client=module.BEDROCK, s3=s3, pacer=pacer,
                                   remaining_s=lambda: left, clock=lambda: at)

    first = call(1_000.0, event)
    assert (first["cursor"], first["done"], first["stalled_since"]) == (0, False, 1_000.0)
    second = call(1_599.0, first)  # 599 s without an admission: it keeps asking
    assert (second["cursor"], second["stalled_since"]) == (0, 1_000.0)
    with pytest.raises(module.AdmissionTimeout, match=r"worker 0: the quota ledger admitted none of its requests "
                                                      r"for 600 s \(admission_timeout 600 s; request 0 waits\)"):
        call(1_600.0, second)
    summary = module.summarize_run({"run": planned["run"]}, module.SETTINGS, s3=s3)
    document = json.loads(body(s3, "runs/run-1/bench.json"))
    assert summary["requests"] == 0 and [(r["worker"], r["error"]) for r in document["summary"]["incomplete"]] == [
        (0, "AdmissionTimeout")]
    assert "admission_timeout 600 s" in document["summary"]["incomplete"][0]["cause"]


def test_a_call_that_was_admitted_again_starts_its_wait_afresh(load):
    """Progress ends a wait: a call that sent a request returns no stalled_since, so an earlier wait
    never adds to a later one."""
    with BedrockEmulator([ModelSpec(MODEL)], time_scale=100) as emulator:
        module, s3 = load(endpoint=emulator.endpoint_url, concurrency=1, requests=1, warmup=0)
        planned = module.handler({"action": "plan", "run": "run-1"}, Context(900))
        event = {"action": "replay", "worker": 0, "cursor": 0, "part": 0, "run": planned["run"],
                 "stalled_since": 1.0}
        result = module.handler(event, Context(900))
    assert result["done"] and result["records"] == 1 and "stalled_since" not in result


class Executions:
    """DescribeExecution of the run's execution: RUNNING until `stop_after` checks, then ABORTED; a
    ThrottlingException where `throttled` says."""

    def __init__(self, stop_after: int, throttled: tuple[int, ...] = ()) -> None:
        self.asked: list[str] = []
        self.stop_after, self.throttled = stop_after, throttled

    def describe_execution(self, executionArn):
        from botocore.exceptions import ClientError

        self.asked.append(executionArn)
        if len(self.asked) in self.throttled:
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "DescribeExecution")
        return {"status": "ABORTED" if len(self.asked) > self.stop_after else "RUNNING"}


def test_a_replay_call_stops_sending_once_its_run_was_stopped_asking_at_most_every_interval(load):
    """Lambda cannot end a running call: it asks Step Functions between requests (every stop_check_s on the
    run's clock, none at its start) and, once its execution is no longer RUNNING, sends no more, writes what
    it recorded and says so. A check that fails (throttled) never ends a run."""
    module, s3 = load(concurrency=1, requests=20, warmup=0, stop_check_s=5.0, streaming=False)
    planned = module.plan({"run": "run-1", "execution": "arn:aws:states:us-east-1:1:execution:M:run-1"},
                          module.SETTINGS, s3=s3, clock=lambda: 1_000.0)
    assert planned["run"]["execution"] == "arn:aws:states:us-east-1:1:execution:M:run-1"
    moments, executions = [1_000.0], Executions(stop_after=2, throttled=(1,))

    class Timed(Instant):
        def converse(self, **request):
            moments[0] += 2.0  # each answer takes 2 s of the run's clock
            return super().converse(**request)

    event = {"action": "replay", "worker": 0, "cursor": 0, "part": 0, "run": planned["run"]}
    result = module.replay_share(event, module.SETTINGS, client=Timed(), s3=s3, remaining_s=lambda: 900.0,
                                 clock=lambda: moments[0], sleep=lambda s: None, sfn=executions)
    # the call starts at 1000; checks before the requests at 1006 (throttled: it goes on), 1012 (RUNNING) and
    # 1018 (ABORTED): requests 0..8 sent, 9 of 20
    assert executions.asked == ["arn:aws:states:us-east-1:1:execution:M:run-1"] * 3
    assert (result["cursor"], result["records"], result["stopped"], result["done"]) == (9, 9, "ABORTED", False)
    assert len(module.read_records(s3, BUCKET, "runs/run-1/")) == 9


def test_the_stop_checks_of_a_run_stay_within_two_describe_execution_calls_a_second(load):
    module, _ = load(concurrency=50)
    assert module.SETTINGS.stop_check_interval() == 25.0  # 50 workers / 2 a second
    module, _ = load(concurrency=4)
    assert module.SETTINGS.stop_check_interval() == module.MIN_STOP_CHECK_SECONDS == 10.0
    assert module.STOP_CHECKS_PER_SECOND < module.DESCRIBE_EXECUTION_REFILL_PER_SECOND


def test_an_open_loop_arrival_the_ledger_cannot_admit_is_recorded_as_shed_never_sent(load):
    module, s3 = load(concurrency=None, rate_per_minute=6_000, workers=1, in_flight=2, requests=2, warmup=0)
    pacer = full_ledger_pacer(module)
    planned = module.plan({"run": "run-1"}, module.SETTINGS, s3=s3, clock=lambda: 1_000.0)
    event = {"action": "replay", "worker": 0, "cursor": 0, "part": 0, "run": planned["run"]}
    moments = [1_000.0]
    left = module.SETTINGS.call_budget_s + module.WRITE_SECONDS + 1
    result = module.replay_share(event, module.SETTINGS, client=module.BEDROCK, s3=s3, pacer=pacer,
                                 remaining_s=lambda: left, clock=lambda: moments[0],
                                 sleep=lambda s: moments.__setitem__(0, moments[0] + s))
    records = module.read_records(s3, BUCKET, "runs/run-1/")
    assert result["done"] and [(s.index, s.error, s.attempts) for s in records] == [
        (0, "AdmissionRejected", 0), (1, "AdmissionRejected", 0)]
    assert pacer.stats().admitted == 0


def test_an_admitted_request_settles_its_hold_to_what_its_record_says_bedrock_charged(load):
    with BedrockEmulator([ModelSpec(MODEL)], time_scale=100) as emulator:
        module, s3 = load(emulator.endpoint_url, concurrency=1, requests=3, warmup=0)
        boto3.client("dynamodb", region_name="us-east-1").create_table(
            TableName=LEDGER_TABLE, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")
        pacer = module.ledger_pacer(module.SETTINGS, {"GENAI_PACER_LEDGER_TABLE": LEDGER_TABLE},
                                    ledger=shared_ledger("Replay", 0.25 * QUOTA_TPM))
        planned = module.handler({"action": "plan", "run": "run-1"}, Context(900))
        event = {"action": "replay", "worker": 0, "cursor": 0, "part": 0, "run": planned["run"]}
        result = module.replay_share(event, module.SETTINGS, client=module.BEDROCK, s3=s3, pacer=pacer,
                                     remaining_s=lambda: 900.0)
    records = module.read_records(s3, BUCKET, "runs/run-1/")
    item = boto3.client("dynamodb", region_name="us-east-1").get_item(
        TableName=LEDGER_TABLE, Key={"pk": {"S": "quota#" + MODEL}}, ConsistentRead=True)["Item"]
    assert result["done"] and len(records) == 3 and all(s.ok for s in records)
    assert int(item["h#Replay"]["N"]) == sum(s.settled for s in records) == pacer.stats().settled_tokens
    assert pacer.stats().admitted == 3 and pacer.fallback_tpm == 0.25 * QUOTA_TPM / 1  # the floor over 1 worker
