"""AnswerRouter under hostile data and failing dependencies (issues 22.2, 22.5, 27 logging).

The real handler against a moto table; the model is a real botocore client talking to a local HTTP
server that answers as each test chooses (429, 503, slow, empty, refused); DynamoDB faults are
injected in front of the moto client. Each case asserts the status a caller gets, what the store
holds afterwards and how many model calls were made. Every log line is checked for the prompt's
text: a key that carries a card number must not reach the log on any error path.
"""

from __future__ import annotations

import base64
import importlib
import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from moto import mock_aws
from pacer_runtime import answers, bedrock_client

MODEL = "amazon.nova-lite-v1:0"
TABLE = "answers"
MAX_AGE = 3600
CARD = "4111 1111 1111 1111"
PROMPTS = [
    {"key": "ticker-morning#{ticker}", "prompt": "Write this morning's note for {ticker}."},
    {"key": "k#{n}", "prompt": "Answer {n}."},
]


class ModelServer:
    """A Bedrock Runtime stand-in on loopback: each Converse gets `reply` (status, error code, text, delay)."""

    def __init__(self) -> None:
        self.calls = 0
        self.status, self.code, self.text, self.delay = 200, "", "model answer", 0.0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                """Quiet: the tests assert on what the router returns and logs."""

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                outer.calls += 1
                time.sleep(outer.delay)
                if outer.status == 200:
                    body = {"output": {"message": {"role": "assistant", "content": [{"text": outer.text}]}},
                            "stopReason": "end_turn", "usage": {"inputTokens": 5, "outputTokens": 2, "totalTokens": 7},
                            "metrics": {"latencyMs": 10}}
                    headers = {}
                else:  # the service's message quotes the request, as botocore's and Bedrock's can
                    body = {"message": f"refused the prompt 'Answer {CARD}.'"}
                    headers = {"x-amzn-ErrorType": f"{outer.code}:http://internal.amazon.com/coral/com.amazon.bedrock/"}
                data = json.dumps(body).encode()
                try:
                    self.send_response(outer.status)
                    for name, value in {"content-type": "application/json", "content-length": str(len(data)), **headers}.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out first
                    self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # shutdown() waits for one poll: the default 0.5 s was 29 s of every run (64 tests)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def reply(self, status: int = 200, code: str = "", text: str = "model answer", delay: float = 0.0) -> None:
        self.status, self.code, self.text, self.delay = status, code, text, delay

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class FaultyStore:
    """The moto DynamoDB client with injected failures: faults[operation] = (error, when(kwargs))."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.faults: dict[str, tuple[Exception, Callable[[dict], bool]]] = {}

    def fail(self, operation: str, error: Exception, when: Callable[[dict], bool] = lambda kwargs: True) -> None:
        self.faults[operation] = (error, when)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.real, name)

        def call(**kwargs: Any) -> Any:
            fault = self.faults.get(name)
            if fault is not None and fault[1](kwargs):
                raise fault[0]
            return method(**kwargs)

        return call


def store_error(code: str, status: int, operation: str = "GetItem") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": f"item 'k#{CARD}' refused"},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, operation)


@pytest.fixture
def model() -> Iterator[ModelServer]:
    server = ModelServer()
    yield server
    server.close()


@pytest.fixture
def router(monkeypatch, model):
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
        "MODEL_ID": MODEL, "ANSWER_TABLE": TABLE, "ANSWER_TTL_SECONDS": "86400", "MAX_AGE_SECONDS": str(MAX_AGE),
        "WRITE_BACK": "true", "MAX_OUTPUT_TOKENS": "100", "PROMPTS": json.dumps(PROMPTS), "COALESCE_WAIT_SECONDS": "1",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        boto3.client("dynamodb").create_table(
            TableName=TABLE, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST",
        )
        sys.modules.pop("answer_router.handler", None)
        module = importlib.import_module("answer_router.handler")
        module.BEDROCK = bedrock_client(endpoint_url=model.url, region_name="us-east-1", max_attempts=1, read_timeout=0.5)
        module.DDB = FaultyStore(module.DDB)
        yield module


def put_raw(module: Any, key: str, **attributes: dict) -> dict:
    item = {"pk": {"S": key}, **attributes}
    module.DDB.real.put_item(TableName=TABLE, Item=item)
    return item


def raw(module: Any, key: str) -> dict | None:
    return module.DDB.real.get_item(TableName=TABLE, Key={"pk": {"S": key}}, ConsistentRead=True).get("Item")


def put_answer(module: Any, key: str, text: str, *, age: float = 0.0) -> None:
    generated = time.time() - age
    answers.put_answer(module.DDB.real, TABLE, answers.Answer(
        key=key, text=text, model_id=MODEL, request_id="precompute", sequence=int(generated * 1000),
        generated_at=answers.iso_utc(generated)))


def url_event(body: Any, **extra: Any) -> dict:
    return {"requestContext": {"http": {"method": "POST"}}, "body": body, **extra}


def logged(capsys) -> list[str]:
    return [line for line in capsys.readouterr().out.splitlines() if line and not line.startswith('{"_aws"')]


# Failing model: the status names the model and what it did; nothing is written; one call.

@pytest.mark.parametrize(
    ("reply", "status", "error"),
    [
        (dict(status=429, code="ThrottlingException"), 429, "Throttled"),
        (dict(status=503, code="ServiceUnavailableException"), 503, "ModelUnavailable"),
        (dict(status=500, code="InternalServerException"), 503, "ModelUnavailable"),
        (dict(status=408, code="ModelTimeoutException"), 504, "ModelTimeout"),
        (dict(status=400, code="ValidationException"), 502, "ModelError"),
        (dict(status=403, code="AccessDeniedException"), 502, "ModelError"),
        (dict(delay=2.0), 504, "ModelTimeout"),  # past the client's read timeout
        (dict(text=""), 502, "EmptyAnswer"),
        (dict(text="  \n "), 502, "EmptyAnswer"),
    ],
)
def test_a_failing_model_gets_a_status_naming_it_and_nothing_is_written(router, model, capsys, reply, status, error):
    put_answer(router, "k#1", "stale answer", age=MAX_AGE + 10)
    before = raw(router, "k#1")
    model.reply(**reply)
    result = router.handler(url_event(json.dumps({"key": "k#1"})))
    body = json.loads(result["body"])
    assert (result["statusCode"], body["error"]) == (status, error)
    assert model.calls == 1
    assert raw(router, "k#1") == before  # the stale answer stays; an empty answer is never written back
    if status in (429, 503, 504):
        assert int(result["headers"]["retry-after"]) >= 1 and body["retryAfterSeconds"] >= 1
    assert all("Traceback" not in line for line in logged(capsys))


def test_an_unreachable_model_is_a_502_not_a_500(router, model):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    router.BEDROCK = bedrock_client(endpoint_url=f"http://127.0.0.1:{closed}", region_name="us-east-1", max_attempts=1)
    result = router.handler({"key": "k#2"})
    assert (result["statusCode"], result["error"]) == (502, "ModelUnreachable")
    assert raw(router, "k#2") is None


# Failing store: never reported as the model's quota; no model call.

@pytest.mark.parametrize(
    ("error", "status", "name"),
    [
        (store_error("ProvisionedThroughputExceededException", 400), 503, "StoreThrottled"),
        (store_error("ThrottlingException", 400), 503, "StoreThrottled"),
        (store_error("RequestLimitExceeded", 400), 503, "StoreThrottled"),
        (store_error("InternalServerError", 500), 503, "StoreUnavailable"),
        (store_error("ServiceUnavailable", 503), 503, "StoreUnavailable"),
        (EndpointConnectionError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com"), 503, "StoreUnavailable"),
        (store_error("ResourceNotFoundException", 400), 500, "StoreError"),
        (store_error("AccessDeniedException", 400), 500, "StoreError"),
    ],
)
def test_a_failing_store_read_names_the_store(router, model, error, status, name):
    router.DDB.fail("get_item", error)
    result = router.handler(url_event(json.dumps({"key": "k#3"})))
    body = json.loads(result["body"])
    assert (result["statusCode"], body["error"]) == (status, name)
    assert "model" not in body["message"] and "quota" not in body["message"]
    assert model.calls == 0
    if status == 503:
        assert int(result["headers"]["retry-after"]) >= 1


def test_a_throttled_claim_is_503_store_throttled_with_no_model_call(router, model):
    router.DDB.fail("put_item", store_error("ProvisionedThroughputExceededException", 400, "PutItem"))
    result = router.handler({"key": "k#4"})
    assert (result["statusCode"], result["error"], model.calls) == (503, "StoreThrottled", 0)


def test_a_throttled_write_back_still_returns_the_answer(router, model):
    router.DDB.fail("put_item", store_error("ProvisionedThroughputExceededException", 400, "PutItem"),
                    when=lambda kwargs: "answer" in kwargs["Item"])
    result = router.handler({"key": "k#5"})
    assert (result["statusCode"], result["answer"], result["writtenBack"], model.calls) == (200, "model answer", False, 1)
    assert raw(router, "k#5") is None
    claim = raw(router, "claim#key#k#5")
    assert claim is not None and int(claim["expires_at"]["N"]) < time.time()  # released all the same


# Bad items: treated as absent and replaced; never a 500, never served.

NOW = int(time.time())
GOOD = {"model_id": {"S": MODEL}, "request_id": {"S": "precompute"}, "sequence": {"N": str(NOW * 1000 - 10)},
        "generated_at": {"S": answers.iso_utc(NOW - 10)}}


@pytest.mark.parametrize(
    "item",
    [
        {**GOOD, "answer": {"N": "42"}},
        {**GOOD, "answer": {"BOOL": True}},
        {**GOOD, "answer": {"S": ""}},
        {**GOOD, "answer": {"S": "   "}},
        {**GOOD, "answer": {"S": "x"}, "sequence": {"S": "later"}},
        {**GOOD, "answer": {"S": "x"}, "generated_at": {"N": "5"}},
        {**GOOD, "answer": {"S": "x"}, "generated_at": {"S": "yesterday"}},
        {**GOOD, "answer": {"S": "x"}, "generated_at": {"S": answers.iso_utc(NOW + 10 * 365 * 86400)}},
        {**GOOD, "answer": {"S": "x"}, "expires_at": {"S": "never"}},
        {**GOOD, "answer": {"S": "x"}, "input_tokens": {"S": "many"}},
        {**{k: v for k, v in GOOD.items() if k != "model_id"}, "answer": {"S": "x"}},
    ],
    ids=["answer-number", "answer-bool", "answer-empty", "answer-blank", "sequence-string", "generated-number",
         "generated-text", "generated-future", "expires-string", "tokens-string", "no-model-id"],
)
def test_a_bad_stored_item_is_a_miss_and_is_replaced(router, model, item):
    put_raw(router, "k#6", **item)
    result = router.handler({"key": "k#6"})
    assert (result["statusCode"], result["source"], result["answer"], model.calls) == (200, "model", "model answer", 1)
    assert result["writtenBack"] is True
    assert raw(router, "k#6")["answer"] == {"S": "model answer"}
    again = router.handler({"key": "k#6"})
    assert (again["source"], again["reason"], model.calls) == ("store", "hit", 1)


#: A stored sequence newer than the router's write (within the clock skew): only the item's invalidity,
#: never its order, lets the write-back replace it. The sequence itself is stamped when each case runs
#: (see the test), not at import: under xdist a case can run minutes after collection.
NEWER = {**GOOD, "answer": {"S": "x"}}


@pytest.mark.parametrize(
    "item",
    [
        {**NEWER, "answer": {"N": "42"}},
        {**NEWER, "output_tokens": {"S": "5"}},
        {**NEWER, "cache_read_tokens": {"BOOL": True}},
        {**NEWER, "stop_reason": {"N": "1"}},
        {**NEWER, "served_latency": {"L": []}},
        {**NEWER, "sent_at": {"N": "1"}},
        {**NEWER, "input_tokens": {"N": "-1"}},
        {**NEWER, "output_tokens": {"N": "2.5"}},  # no condition can tell 2.5 from 2: put_answer judges it
        {**NEWER, "generated_at": {"S": "1969-12-31T23:59:59Z"}},
        {**NEWER, "generated_at": {"S": answers.iso_utc(NOW - 10).replace("+00:00", "-05:00")}},  # not UTC
    ],
    ids=["answer-number", "output-tokens-string", "cache-read-bool", "stop-reason-number", "served-latency-list",
         "sent-at-number", "input-tokens-negative", "output-tokens-fractional", "generated-before-1970",
         "generated-not-utc"],
)
def test_a_bad_stored_item_with_a_newer_sequence_is_still_replaced(router, model, item):
    item = {**item, "sequence": {"N": str(int(time.time() * 1000) + 30_000)}}
    put_raw(router, "k#7", **item)
    result = router.handler({"key": "k#7"})
    assert (result["statusCode"], result["source"], result["answer"], model.calls) == (200, "model", "model answer", 1)
    assert result["writtenBack"] is True and raw(router, "k#7")["answer"] == {"S": "model answer"}
    assert int(raw(router, "k#7")["sequence"]["N"]) < int(item["sequence"]["N"])  # replaced despite its order
    again = router.handler({"key": "k#7"})
    assert (again["source"], again["reason"], model.calls) == ("store", "hit", 1)


def test_a_bad_item_without_a_prompt_is_404_not_500(router, model):
    put_raw(router, "digest#1", **{**GOOD, "answer": {"N": "1"}})
    result = router.handler({"key": "digest#1"})
    assert (result["statusCode"], result["error"], model.calls) == (404, "NoAnswer", 0)


# Malformed events: 400 with a reason, no model call, nothing written.

@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (None, "must be a JSON object"),
        ([], "must be a JSON object"),
        ("k#1", "must be a JSON object"),
        ({"key": None}, "key must be a string"),
        ({"key": 5}, "key must be a string"),
        ({"key": ["k#1"]}, "key must be a string"),
        ({"key": "k#\ud800"}, "not valid Unicode"),
        ({"key": "k#1", "maxAgeSeconds": float("nan")}, "maxAgeSeconds"),
        ({"key": "k#1", "maxAgeSeconds": None}, "maxAgeSeconds"),
        (url_event(None), "body is not JSON"),
        (url_event(5), "body is an int"),
        (url_event({"key": "k#1"}), "body is a dict"),
        (url_event(""), "body is not JSON"),
        (url_event("null"), "must be a JSON object"),
        (url_event('"k#1"'), "must be a JSON object"),
        (url_event("%%% not base64 %%%", isBase64Encoded=True), "body is not JSON"),
        (url_event(base64.b64encode(b"\xff\xfe{").decode(), isBase64Encoded=True), "body is not JSON"),
        (url_event("[" * 100_000 + "]" * 100_000), "body is not JSON"),
        (url_event('{"key": "k#\\udc00"}'), "not valid Unicode"),
        (url_event('{"key": "k#\ud800"}'), "not valid Unicode"),
        (url_event('{"key": "k#1", "key2": 1}'), "unknown fields ['key2']"),
    ],
)
def test_a_malformed_event_is_a_400_with_no_model_call(router, model, event, reason):
    result = router.handler(event)
    body = json.loads(result["body"]) if "body" in result else result
    assert (result["statusCode"], body["error"]) == (400, "InvalidRequest")
    assert reason in body["message"]
    assert model.calls == 0 and raw(router, "k#1") is None


# Logs: the key (and so the prompt built from it) never reaches a log line, on any error path.

def _every_error_path(router: Any, model: ModelServer) -> list[tuple[int, Callable[[], dict]]]:
    key = {"key": f"k#{CARD}"}

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"cannot read k#{CARD}")

    def bad_write(*args: Any, **kwargs: Any) -> Any:
        raise ValueError(f"cannot write Answer {CARD}.")

    def with_model(**reply: Any) -> Callable[[], dict]:
        return lambda: (model.reply(**reply), router.handler(dict(key)))[1]

    def with_store(operation: str, error: Exception) -> Callable[[], dict]:
        def run() -> dict:
            router.DDB.fail(operation, error)
            try:
                return router.handler(dict(key))
            finally:
                router.DDB.faults.clear()
        return run

    def with_patch(name: str, replacement: Any) -> Callable[[], dict]:
        def run() -> dict:
            original = getattr(router.answers, name)  # router.answers is pacer_runtime.answers itself
            setattr(router.answers, name, replacement)
            try:
                return router.handler(dict(key))
            finally:
                setattr(router.answers, name, original)
        return run

    def bad_item() -> dict:
        put_raw(router, f"k#{CARD}", **{**GOOD, "answer": {"N": "1"}, "request_id": {"S": f"r {CARD}"}})
        model.reply(status=429, code="ThrottlingException")
        return router.handler(dict(key))

    return [
        (429, with_model(status=429, code="ThrottlingException")),
        (503, with_model(status=503, code="ServiceUnavailableException")),
        (502, with_model(status=400, code="ValidationException")),
        (504, with_model(delay=2.0)),
        (502, with_model(text="")),
        (503, with_store("get_item", store_error("ProvisionedThroughputExceededException", 400))),
        (503, with_store("get_item", store_error("InternalServerError", 500))),
        (500, with_store("get_item", store_error("AccessDeniedException", 400))),
        (503, with_store("put_item", store_error("ProvisionedThroughputExceededException", 400, "PutItem"))),
        (500, with_patch("get_answer", boom)),
        (200, lambda: (model.reply(), with_patch("put_answer", bad_write)())[1]),
        (429, bad_item),
        (400, lambda: router.handler({"key": f"k#{CARD}", "prompt": f"charge {CARD}"})),
        (400, lambda: router.handler(url_event(f'{{"key": "k#{CARD}", ')))
    ]


def test_no_log_line_holds_the_prompt_on_any_error_path(router, model, capsys):
    paths = _every_error_path(router, model)
    statuses = []
    for _, run in paths:
        time.sleep(0)  # each path starts from a fresh failure window below
        router.RETRY_AFTER_SECONDS = 1
        statuses.append(run()["statusCode"])
        raw_claim = raw(router, f"claim#key#k#{CARD}")
        if raw_claim is not None:  # let the next path call the model rather than repeat this failure
            router.DDB.real.put_item(TableName=TABLE, Item={"pk": raw_claim["pk"], "owner": {"S": "t"}, "expires_at": {"N": "1"}})
    assert statuses == [status for status, _ in paths]
    lines = logged(capsys)
    assert lines, "the error paths log why they failed"
    digits = CARD.replace(" ", "")
    leaks = [line for line in lines if CARD in line or digits in line or "4111" in line]
    assert leaks == []
