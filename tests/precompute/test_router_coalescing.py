"""Concurrent misses for one key make one model call across Lambda environments (issue 22.4).

Each "environment" is the router's handler module loaded separately (its own module object, its
own DynamoDB and Bedrock clients, no shared lock), all against one moto table; real threads call
them at once. Only the store's conditional writes coordinate them, as in Lambda.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.dynamodb.responses import DynamoHandler
from pacer_runtime import answers, key_claims

ROOT = Path(__file__).resolve().parents[2]
HANDLER = ROOT / "lambda" / "answer_router" / "handler.py"
MODEL = "amazon.nova-lite-v1:0"
TABLE = "answers"
KEY = "ticker-morning#aapl"
CALLERS = 50
ENVIRONMENTS = 5


class CountingModel:
    """A Converse stand-in shared by every environment: counts calls, takes `seconds`, answers or fails."""

    def __init__(self, *, seconds: float = 0.5, text: str = "the morning note", error: str | None = None) -> None:
        self.calls = 0
        self.seconds, self.text, self.error = seconds, text, error
        self._lock = threading.Lock()

    def converse(self, **request: Any) -> dict[str, Any]:
        with self._lock:
            self.calls += 1
        time.sleep(self.seconds)
        if self.error is not None:
            from botocore.exceptions import ClientError

            raise ClientError({"Error": {"Code": self.error, "Message": "x"}, "ResponseMetadata": {"HTTPStatusCode": 429}}, "Converse")
        return {"output": {"message": {"role": "assistant", "content": [{"text": self.text}]}},
                "stopReason": "end_turn", "usage": {"inputTokens": 10, "outputTokens": 4}}


class Context:
    def __init__(self, seconds: float = 30.0, clock: Any = time) -> None:
        self.aws_request_id = uuid.uuid4().hex
        self._clock = clock
        self._ends = clock.time() + seconds

    def get_remaining_time_in_millis(self) -> int:
        return int((self._ends - self._clock.time()) * 1000)


class CaseClock:
    """The router's clock on the case's own time: a sleep moves it at once, so how long a waiter waited
    is exact and does not depend on how loaded the machine is."""

    def __init__(self) -> None:
        self.now = time.time()

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)


class StillClock:
    """A clock that does not move while the case runs: waiters sleep for real between polls, but no
    deadline (the coalesce wait, the function's remaining time) ever passes, so however loaded the
    machine is, a waiter ends only when the one paid call's answer (or failure) is in the store."""

    def __init__(self) -> None:
        self.now = time.time()

    def time(self) -> float:
        return self.now

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(seconds)


@pytest.fixture
def environment(monkeypatch) -> Iterator[Any]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
        "MODEL_ID": MODEL, "ANSWER_TABLE": TABLE, "ANSWER_TTL_SECONDS": "", "MAX_AGE_SECONDS": "3600",
        "WRITE_BACK": "true", "MAX_OUTPUT_TOKENS": "400", "COALESCE_WAIT_SECONDS": "10",
        "PROMPTS": json.dumps([{"key": "ticker-morning#{ticker}", "prompt": "Write this morning's note for {ticker}."}]),
    }.items():
        monkeypatch.setenv(name, value)
    # DynamoDB applies a conditional write, and the old item it returns (ReturnValues=ALL_OLD),
    # atomically per item; moto reads the old item, checks and writes in separate Python steps, so
    # concurrent threads could interleave them. One lock around moto's PutItem restores the guarantee.
    original, lock = DynamoHandler.put_item, threading.Lock()

    def atomic_put_item(self, *args, **kwargs):
        with lock:
            return original(self, *args, **kwargs)

    monkeypatch.setattr(DynamoHandler, "put_item", atomic_put_item)
    with mock_aws():
        boto3.client("dynamodb").create_table(
            TableName=TABLE, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST",
        )
        yield load


def load(model: CountingModel, count: int = ENVIRONMENTS, **env: str) -> list[Any]:
    """`count` separately loaded handler modules sharing `model`."""
    modules = []
    for n in range(count):
        spec = importlib.util.spec_from_file_location(f"router_environment_{n}_{uuid.uuid4().hex[:6]}", HANDLER)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
        spec.loader.exec_module(module)
        for name, value in env.items():
            setattr(module, name, value)
        module.BEDROCK = model
        modules.append(module)
    assert len({id(m.DDB) for m in modules}) == count  # no client shared between environments
    return modules


def call_all(modules: list[Any], callers: int = CALLERS, event: dict | None = None) -> list[dict]:
    barrier = threading.Barrier(callers)
    results: list[dict] = [{}] * callers
    clock = StillClock()
    for module in modules:
        module.time = clock

    def call(n: int) -> None:
        barrier.wait(timeout=30)
        results[n] = modules[n % len(modules)].handler(dict(event or {"key": KEY}), Context(clock=clock))

    threads = [threading.Thread(target=call, args=(n,)) for n in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a caller never returned"
    return results


def stored(module: Any) -> answers.Answer | None:
    return answers.get_answer(module.DDB, TABLE, KEY)


def claim_item(module: Any) -> dict:
    return module.DDB.get_item(TableName=TABLE, Key={"pk": {"S": key_claims.claim_pk(KEY)}}, ConsistentRead=True)["Item"]


def test_fifty_concurrent_misses_make_one_model_call_and_all_get_the_answer(environment):
    model = CountingModel()
    modules = environment(model)
    results = call_all(modules)
    assert model.calls == 1
    assert [r["statusCode"] for r in results] == [200] * CALLERS
    assert {r["answer"] for r in results} == {"the morning note"}
    sources = [(r["source"], r["reason"]) for r in results]
    assert sources.count(("model", "miss")) == 1 and sources.count(("store", "coalesced")) == CALLERS - 1
    assert stored(modules[0]).text == "the morning note"
    claim = claim_item(modules[0])  # released by overwriting with a past expiry, never deleted
    assert int(claim["expires_at"]["N"]) < time.time() and "failure_status" not in claim


def test_concurrent_stale_reads_also_make_one_call(environment):
    model = CountingModel(text="today's note")
    modules = environment(model)
    old = time.time() - 7200
    answers.put_answer(modules[0].DDB, TABLE, answers.Answer(
        key=KEY, text="yesterday's note", model_id=MODEL, request_id="precompute", sequence=int(old * 1000),
        generated_at=answers.iso_utc(old)))
    results = call_all(modules, callers=20)
    assert model.calls == 1
    assert {r["answer"] for r in results} == {"today's note"}
    assert stored(modules[0]).text == "today's note"


def test_a_throttled_holder_makes_every_waiter_answer_429_without_another_call(environment):
    model = CountingModel(error="ThrottlingException")
    modules = environment(model)
    results = call_all(modules, callers=20)
    assert model.calls == 1
    assert {(r["statusCode"], r["error"]) for r in results} == {(429, "Throttled")}
    assert all(r["retryAfterSeconds"] >= 1 for r in results)
    assert stored(modules[0]) is None


def test_a_recorded_failure_blocks_calls_only_for_its_retry_after(environment):
    model = CountingModel(seconds=0.01, error="ThrottlingException")
    (module,) = environment(model, count=1)
    assert module.handler({"key": KEY}, Context())["statusCode"] == 429
    model.error = None
    repeated = module.handler({"key": KEY}, Context())  # within Retry-After: the failure is repeated, no call
    assert (repeated["statusCode"], model.calls) == (429, 1)
    # Retry-After passes on the case's own clock, not by sleeping: the recorded failure is made that much older
    item = claim_item(module)
    older = float(item["failed_epoch"]["N"]) - repeated["retryAfterSeconds"] - 0.1
    module.DDB.update_item(TableName=TABLE, Key={"pk": item["pk"]}, UpdateExpression="SET failed_epoch = :older",
                           ExpressionAttributeValues={":older": {"N": f"{older:.3f}"}})
    answered = module.handler({"key": KEY}, Context())
    assert (answered["statusCode"], answered["answer"], model.calls) == (200, "the morning note", 2)
    assert "failure_status" not in claim_item(module)


def test_waiters_past_the_deadline_get_503_with_retry_after(environment, capsys, monkeypatch):
    model = CountingModel()
    (module,) = environment(model, count=1, COALESCE_WAIT_SECONDS=0.3)
    assert key_claims.claim(module.DDB, TABLE, KEY, seconds=60) is not None  # another environment is generating
    clock = CaseClock()
    monkeypatch.setattr(module, "time", clock)
    started = clock.now
    url = {"requestContext": {"http": {"method": "POST"}}, "body": json.dumps({"key": KEY})}
    result = module.handler(url, Context(clock=clock))
    assert clock.now - started == pytest.approx(0.3)  # waited until its deadline, no longer
    assert result["statusCode"] == 503 and int(result["headers"]["retry-after"]) >= 1
    assert json.loads(result["body"])["error"] == "AnswerPending"
    assert model.calls == 0 and stored(module) is None
    # the coalescing working as designed, not a server error: the ServerErrors alarm does not count it
    assert "AnswerServerErrors" not in capsys.readouterr().out


def test_the_deadline_never_outlasts_the_functions_remaining_time(environment, monkeypatch):
    model = CountingModel()
    (module,) = environment(model, count=1, COALESCE_WAIT_SECONDS=30.0)
    assert key_claims.claim(module.DDB, TABLE, KEY, seconds=60) is not None
    clock = CaseClock()
    monkeypatch.setattr(module, "time", clock)
    started = clock.now
    result = module.handler({"key": KEY}, Context(seconds=1.8, clock=clock))  # 1.8 s left, 1 s kept to answer
    assert result["statusCode"] == 503 and clock.now - started == pytest.approx(0.8, abs=0.002)  # to Lambda's whole milliseconds


def test_a_claim_left_by_a_crashed_environment_stops_blocking_when_it_expires(environment):
    model = CountingModel(seconds=0.05)
    (module,) = environment(model, count=1, COALESCE_WAIT_SECONDS=5.0)
    assert key_claims.claim(module.DDB, TABLE, KEY, seconds=1) is not None  # its holder crashed
    result = module.handler({"key": KEY}, Context())
    assert (result["statusCode"], result["source"], model.calls) == (200, "model", 1)
    assert stored(module).text == "the morning note"


def test_a_late_release_never_frees_a_claim_someone_else_took_over(environment):
    (module,) = environment(CountingModel(), count=1)
    first = key_claims.claim(module.DDB, TABLE, KEY, seconds=1, now=time.time() - 10)  # long expired
    second = key_claims.claim(module.DDB, TABLE, KEY, seconds=60)
    assert first is not None and second is not None
    assert key_claims.release(module.DDB, TABLE, KEY, first.owner) is False
    assert key_claims.claim(module.DDB, TABLE, KEY, seconds=60) is None  # still held by the second
    assert key_claims.release(module.DDB, TABLE, KEY, second.owner) is True
    assert key_claims.claim(module.DDB, TABLE, KEY, seconds=60) is not None


@pytest.mark.parametrize("bad", [{"S": "soon"}, {"N": str(int(time.time()) + 10**9)}])
def test_an_unreadable_or_far_future_claim_never_blocks_a_key(environment, bad):
    (module,) = environment(CountingModel(), count=1)
    module.DDB.put_item(TableName=TABLE, Item={"pk": {"S": key_claims.claim_pk(KEY)}, "owner": {"S": "x"}, "expires_at": bad})
    assert key_claims.claim(module.DDB, TABLE, KEY, seconds=60) is not None


def test_a_claim_lasting_longer_than_any_routers_is_treated_as_expired(environment):
    """A router claims a key for at most its function's remaining time: Lambda's 900-second maximum timeout
    (queue.inference.MAX_LAMBDA_TIMEOUT_SECONDS, from the AWS::Lambda::Function schema) plus a minute of
    clock skew. A claim saying it lasts longer was written by no router and never blocks the key."""
    from genai_pacer.queue.inference import MAX_LAMBDA_TIMEOUT_SECONDS

    (module,) = environment(CountingModel(), count=1)
    now = 1_800_000_000.0  # the case's own clock: claim() is given it, so no wall-clock time is read
    longest = MAX_LAMBDA_TIMEOUT_SECONDS + 60

    def held(expires_in: int) -> bool:
        module.DDB.put_item(TableName=TABLE, Item={"pk": {"S": key_claims.claim_pk(KEY)}, "owner": {"S": "other"},
                                                   "expires_at": {"N": str(int(now) + expires_in)}})
        return key_claims.claim(module.DDB, TABLE, KEY, seconds=60, now=now) is None

    assert held(MAX_LAMBDA_TIMEOUT_SECONDS) and held(longest)  # what a router may claim blocks the key
    assert not held(longest + 1) and not held(2 * 3600)  # beyond any router's claim: free
    with pytest.raises(ValueError, match=rf"within \(0, {longest}\]"):
        key_claims.claim(module.DDB, TABLE, KEY, seconds=longest + 1, now=now)


def test_a_key_too_long_for_the_prefix_is_claimed_under_its_digest():
    key = "k" * answers.MAX_KEY_BYTES
    pk = key_claims.claim_pk(key)
    assert pk.startswith(key_claims.KEY_CLAIM_PREFIX + "sha256:") and len(pk.encode()) <= answers.MAX_KEY_BYTES
    assert key_claims.claim_pk("ticker-morning#aapl") == "claim#key#ticker-morning#aapl"
