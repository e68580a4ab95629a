"""Fault injection for the search-pipeline custom resource handler: OpenSearch answering 429, 503,
slowly, with a dropped connection or malformed JSON (a local server scripted per request), malformed
CloudFormation events, over-long failure reasons, and a ResponseURL that fails (a second local
server standing in for CloudFormation's pre-signed S3 URL). Each case asserts what CloudFormation is
told, what OpenSearch was sent, and what was logged. No real time passes: pauses are recorded."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest
from search_pipeline import handler as h

SESSION = boto3.Session(aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret", region_name="us-east-1")
PIPELINE = {"description": "d", "phase_results_processors": [{"normalization-processor": {
    "normalization": {"technique": "min_max"},
    "combination": {"technique": "arithmetic_mean", "parameters": {"weights": [0.3, 0.7]}}}}]}
BUILD = {"field": "embedding", "dimension": 4, "engine": "faiss", "space_type": "l2", "m": 16, "ef_construction": 100}
INDEX_BODY = {"settings": {"index": {"knn": True}}, "mappings": {"properties": {"embedding": {
    "type": "knn_vector", "dimension": 4,
    "method": {"name": "hnsw", "engine": "faiss", "space_type": "l2", "parameters": {"m": 16, "ef_construction": 100}}}}}}


class Scripted:
    """An OpenSearch stand-in: each (method, path) answers from its script first, then as a small store."""

    def __init__(self) -> None:
        self.script: dict[tuple[str, str], deque] = defaultdict(deque)
        self.sent: list[tuple[str, str]] = []
        self.pipelines: dict[str, Any] = {}
        self.indexes: dict[str, Any] = {}
        self.lock = threading.Lock()

    def then(self, method: str, path: str, *answers: Any) -> None:
        """Queue answers: (status, body), ("slow", seconds, status, body), ("reset",) or ("raw", status, text)."""
        self.script[(method, path)].extend(answers)

    def stored(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        if path.startswith("/_search/pipeline/"):
            name = path.rsplit("/", 1)[1]
            if method == "PUT":
                self.pipelines[name] = body
                return 200, {"acknowledged": True}
            return (200, {name: self.pipelines[name]}) if name in self.pipelines else (404, {"error": "missing"})
        index, _, rest = path[1:].partition("/")
        if rest == "_mapping":
            return (200, {index: {"mappings": self.indexes[index]["mappings"]}}) if index in self.indexes else (404, {})
        if method == "PUT" and not rest:
            if index in self.indexes:
                return 400, {"error": {"type": "resource_already_exists_exception", "reason": f"index [{index}] exists"}}
            self.indexes[index] = body
            return 200, {"acknowledged": True}
        return 400, {"error": f"unexpected {method} {path}"}


@pytest.fixture
def opensearch():
    state = Scripted()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            """Quiet: the tests read `sent`, not the server log."""

        def _serve(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            with state.lock:
                state.sent.append((self.command, self.path))
                queued = state.script[(self.command, self.path)]
                action = queued.popleft() if queued else None
                if action is None or action[0] == "slow":
                    answer = state.stored(self.command, self.path, body)  # a slow answer still does the work
            if action is not None and action[0] == "reset":
                self.close_connection = True
                self.connection.shutdown(2)  # no status line: a dropped connection
                return
            if action is not None and action[0] == "slow":
                threading.Event().wait(action[1])  # not time.sleep: the tests record the handler's sleeps
                status, payload = action[2], json.dumps(action[3]).encode()
            elif action is not None and action[0] == "raw":
                status, payload = action[1], action[2].encode()
            elif action is not None:
                status, payload = action[0], json.dumps(action[1]).encode()
            else:
                status, payload = answer[0], json.dumps(answer[1]).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                return  # the client gave up waiting (the slow case): nothing to answer

        do_GET = do_PUT = do_DELETE = _serve

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def cloudformation():
    """The ResponseURL: records each body; `failures` answers the first N PUTs with 500."""

    class State:
        bodies: list[bytes] = []
        failures = 0

    state = State()
    state.bodies = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            """Quiet."""

        def do_PUT(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if state.failures:
                state.failures -= 1
                self.send_response(500)
            else:
                state.bodies.append(raw)
                self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/response"
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def pauses(monkeypatch):
    """Pauses the handler asks for, recorded instead of slept. The jitter draws its ceiling here, so
    each recorded pause is the backoff schedule's ceiling for that attempt."""
    recorded: list[float] = []
    monkeypatch.setattr(h.time, "sleep", recorded.append)
    monkeypatch.setattr(h.random, "uniform", lambda low, high: high)
    return recorded


def cfn_event(opensearch, cloudformation, request_type: str = "Create", **props: Any) -> dict[str, Any]:
    return {
        "RequestType": request_type,
        "ResponseURL": cloudformation.url,
        "StackId": "arn:aws:cloudformation:us-east-1:111122223333:stack/s/1",
        "RequestId": "req-1",
        "LogicalResourceId": "Pipeline",
        "ResourceProperties": {"Kind": "Pipeline", "Endpoint": opensearch.url, "Service": "es", "Region": "us-east-1",
                               "PipelineName": "hybrid", "Body": json.dumps(PIPELINE), **props},
    }


def answer(cloudformation) -> dict[str, Any]:
    assert len(cloudformation.bodies) == 1, f"CloudFormation got {len(cloudformation.bodies)} answers"
    return json.loads(cloudformation.bodies[0])


class Context:
    def __init__(self, seconds: float) -> None:
        self.until = time.monotonic() + seconds

    def get_remaining_time_in_millis(self) -> int:
        return int((self.until - time.monotonic()) * 1000)


# ---------------------------------------------------------------------------------------------
# OpenSearch faults


def test_a_429_then_200_is_retried_once_with_a_jittered_pause(opensearch, cloudformation, pauses):
    opensearch.then("PUT", "/_search/pipeline/hybrid", (429, {"error": "too many requests"}))
    h.handler(cfn_event(opensearch, cloudformation), session=SESSION)
    assert answer(cloudformation)["Status"] == "SUCCESS"
    assert opensearch.sent == [("PUT", "/_search/pipeline/hybrid")] * 2 + [("GET", "/_search/pipeline/hybrid")]
    assert pauses == [h.BACKOFF_BASE_SECONDS * 2]  # full jitter draws from 0 up to base x 2^attempt
    assert opensearch.pipelines["hybrid"] == PIPELINE


def test_503_on_every_attempt_fails_after_max_attempts_with_a_capped_backoff(opensearch, cloudformation, pauses):
    opensearch.then("PUT", "/_search/pipeline/hybrid", *[(503, {"message": "busy"})] * (h.MAX_ATTEMPTS + 2))
    h.handler(cfn_event(opensearch, cloudformation), session=SESSION)
    failed = answer(cloudformation)
    assert failed["Status"] == "FAILED" and "returned 503 on every attempt" in failed["Reason"]
    assert opensearch.sent.count(("PUT", "/_search/pipeline/hybrid")) == h.MAX_ATTEMPTS
    assert ("GET", "/_search/pipeline/hybrid") not in opensearch.sent
    assert pauses == [min(h.BACKOFF_CAP_SECONDS, h.BACKOFF_BASE_SECONDS * 2 ** n) for n in range(1, h.MAX_ATTEMPTS)]
    assert max(pauses) == h.BACKOFF_CAP_SECONDS


def test_retries_stop_where_the_function_would_run_out_of_time(opensearch, cloudformation, pauses):
    """With 12 s left after the response reserve, pauses of 2 and 4 s fit (each leaves the 5 s a
    request needs), 8 s does not: three attempts, then CloudFormation is told, in time."""
    opensearch.then("PUT", "/_search/pipeline/hybrid", *[(503, {"message": "busy"})] * h.MAX_ATTEMPTS)
    h.handler(cfn_event(opensearch, cloudformation), Context(h.RESPONSE_RESERVE_SECONDS + 12), session=SESSION)
    assert answer(cloudformation)["Status"] == "FAILED"
    assert pauses == [2.0, 4.0] and opensearch.sent.count(("PUT", "/_search/pipeline/hybrid")) == 3


def test_a_slow_answer_times_out_and_the_retry_succeeds(opensearch, cloudformation, pauses, monkeypatch):
    monkeypatch.setattr(h, "TIMEOUT_SECONDS", 0.3)
    opensearch.then("PUT", "/_search/pipeline/hybrid", ("slow", 1.5, 200, {"acknowledged": True}))
    h.handler(cfn_event(opensearch, cloudformation), session=SESSION)
    assert answer(cloudformation)["Status"] == "SUCCESS", answer(cloudformation)["Reason"]
    assert opensearch.sent.count(("PUT", "/_search/pipeline/hybrid")) == 2 and len(pauses) == 1


def test_a_timeout_on_every_attempt_fails_with_the_reason(opensearch, cloudformation, pauses, monkeypatch):
    monkeypatch.setattr(h, "TIMEOUT_SECONDS", 0.2)
    monkeypatch.setattr(h, "MAX_ATTEMPTS", 2)
    opensearch.then("PUT", "/_search/pipeline/hybrid", *[("slow", 1.0, 200, {"acknowledged": True})] * 2)
    h.handler(cfn_event(opensearch, cloudformation), session=SESSION)
    failed = answer(cloudformation)
    assert failed["Status"] == "FAILED" and "no complete answer" in failed["Reason"] and "each of 2 attempts" in failed["Reason"]


def test_a_dropped_connection_is_retried(opensearch, cloudformation, pauses):
    opensearch.then("PUT", "/_search/pipeline/hybrid", ("reset",))
    h.handler(cfn_event(opensearch, cloudformation), session=SESSION)
    assert answer(cloudformation)["Status"] == "SUCCESS", answer(cloudformation)["Reason"]
    assert opensearch.sent.count(("PUT", "/_search/pipeline/hybrid")) == 2


def test_a_refusal_is_not_retried(opensearch, cloudformation, pauses):
    opensearch.then("PUT", "/_search/pipeline/hybrid", (400, {"error": "unknown normalization technique"}))
    h.handler(cfn_event(opensearch, cloudformation), session=SESSION)
    failed = answer(cloudformation)
    assert failed["Status"] == "FAILED" and "returned 400" in failed["Reason"] and "unknown normalization" in failed["Reason"]
    assert opensearch.sent == [("PUT", "/_search/pipeline/hybrid")] and pauses == []


def test_malformed_json_from_opensearch_fails_clearly(opensearch, cloudformation, pauses):
    opensearch.then("GET", "/_search/pipeline/hybrid", ("raw", 200, "{not json"))
    h.handler(cfn_event(opensearch, cloudformation), session=SESSION)
    failed = answer(cloudformation)
    assert failed["Status"] == "FAILED" and "returned 200 (not JSON)" in failed["Reason"] and "was not stored" in failed["Reason"]
    cloudformation.bodies.clear()
    opensearch.then("PUT", "/_search/pipeline/hybrid", ("raw", 500, "<html>internal error</html>"))
    h.handler(cfn_event(opensearch, cloudformation), session=SESSION)
    assert "returned 500" in answer(cloudformation)["Reason"] and "<html>internal error</html>" in answer(cloudformation)["Reason"]


def test_an_index_put_retried_after_a_timeout_finds_its_own_index_and_succeeds(opensearch, cloudformation, pauses, monkeypatch):
    """The first PUT creates the index but its answer comes too late; the retry is told the index
    exists. Its mapping is the wanted one, so the resource succeeds as created (not adopted)."""
    monkeypatch.setattr(h, "TIMEOUT_SECONDS", 0.3)
    opensearch.then("PUT", "/docs", ("slow", 1.0, 200, {"acknowledged": True}))
    props = {"Kind": "Index", "IndexName": "docs", "Body": json.dumps(INDEX_BODY), "BuildTime": json.dumps(BUILD),
             "EfSearch": "", "DeleteOnRemoval": "true"}
    h.handler(cfn_event(opensearch, cloudformation, **props), session=SESSION)
    created = answer(cloudformation)
    assert created["Status"] == "SUCCESS", created["Reason"]
    assert not created["PhysicalResourceId"].endswith(h.ADOPTED_SUFFIX)
    assert opensearch.sent == [("GET", "/docs/_mapping"), ("PUT", "/docs"), ("PUT", "/docs"), ("GET", "/docs/_mapping")]


# ---------------------------------------------------------------------------------------------
# Malformed events


@pytest.mark.parametrize("request_type", ["Replace", None, "create"])
def test_an_unknown_request_type_is_failed_not_reported_as_success(opensearch, cloudformation, request_type):
    event = cfn_event(opensearch, cloudformation, request_type=request_type)
    h.handler(event, session=SESSION)
    failed = answer(cloudformation)
    assert failed["Status"] == "FAILED" and f"RequestType={request_type!r} must be one of Create, Update, Delete" in failed["Reason"]
    assert opensearch.sent == []


@pytest.mark.parametrize("missing", h.RESPONSE_FIELDS)
def test_an_event_without_what_an_answer_needs_is_logged_and_raised(opensearch, cloudformation, capsys, missing):
    event = cfn_event(opensearch, cloudformation)
    del event[missing]
    with pytest.raises(h.MalformedEvent, match=f"lacks {missing}"):
        h.handler(event, session=SESSION)
    logged = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert logged[-1]["level"] == "error" and logged[-1]["missing"] == [missing]
    assert cloudformation.bodies == [] and opensearch.sent == []


@pytest.mark.parametrize("event", [None, [], "Create", 42])
def test_an_event_that_is_not_an_object_is_a_clear_error(event, capsys):
    with pytest.raises(h.MalformedEvent, match="not a CloudFormation custom resource request"):
        h.handler(event)
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["eventType"] == type(event).__name__


@pytest.mark.parametrize(("change", "reason"), [
    ({"ResourceProperties": None}, "ResourceProperties is NoneType, not an object"),
    ({"ResourceProperties": "Kind=Pipeline"}, "ResourceProperties is str, not an object"),
])
def test_missing_properties_fail_the_resource_with_the_reason(opensearch, cloudformation, change, reason):
    h.handler({**cfn_event(opensearch, cloudformation), **change}, session=SESSION)
    failed = answer(cloudformation)
    assert failed["Status"] == "FAILED" and reason in failed["Reason"] and failed["PhysicalResourceId"].startswith(h.FAILED_CREATE)


def test_an_index_update_without_old_properties_fails_without_touching_the_index(opensearch, cloudformation):
    props = {"Kind": "Index", "IndexName": "docs", "Body": json.dumps(INDEX_BODY), "BuildTime": json.dumps(BUILD)}
    event = {**cfn_event(opensearch, cloudformation, request_type="Update", **props), "PhysicalResourceId": "host/docs"}
    h.handler(event, session=SESSION)
    failed = answer(cloudformation)
    assert failed["Status"] == "FAILED" and "OldResourceProperties" in failed["Reason"] and opensearch.sent == []


# ---------------------------------------------------------------------------------------------
# The answer to CloudFormation


def test_a_long_non_ascii_reason_is_cut_to_fit_4096_bytes_of_the_whole_body(opensearch, cloudformation):
    """3,000 non-ASCII characters used to become an 18 KB response (JSON escapes of 6 bytes each),
    which CloudFormation refuses: the stack then waited for the timeout."""
    event = cfn_event(opensearch, cloudformation)
    body = h.response_body(event, "FAILED", "failed-create-req-1", "é" * 3000)
    assert len(body) <= h.MAX_RESPONSE_BYTES
    decoded = json.loads(body)
    assert decoded["Reason"].startswith("é" * 100) and decoded["Reason"].endswith(h.TRUNCATED)
    assert decoded["StackId"] == event["StackId"] and decoded["LogicalResourceId"] == "Pipeline"
    short = json.loads(h.response_body(event, "FAILED", "x", "short reason"))
    assert short["Reason"] == "short reason"  # cut only when needed
    surrogate = json.loads(h.response_body(event, "FAILED", "x", "bad \ud800 text"))
    assert surrogate["Reason"] == "bad ? text"  # a lone surrogate cannot be encoded: replaced, not a crash


def test_a_reason_from_opensearch_reaches_cloudformation_within_the_limit(opensearch, cloudformation, pauses):
    opensearch.then("PUT", "/_search/pipeline/hybrid", (400, {"error": "ошибка " * 500}))
    h.handler(cfn_event(opensearch, cloudformation), session=SESSION)
    assert len(cloudformation.bodies[0]) <= h.MAX_RESPONSE_BYTES and "returned 400" in answer(cloudformation)["Reason"]


def test_an_answer_the_response_url_refuses_once_is_sent_again(opensearch, cloudformation, pauses):
    cloudformation.failures = 1
    h.handler(cfn_event(opensearch, cloudformation), session=SESSION)
    assert answer(cloudformation)["Status"] == "SUCCESS" and len(pauses) == 1


def test_an_answer_that_never_arrives_is_logged_and_raised(opensearch, cloudformation, pauses, capsys):
    cloudformation.failures = h.RESPONSE_ATTEMPTS
    with pytest.raises(OSError):
        h.handler(cfn_event(opensearch, cloudformation), session=SESSION)
    logged = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    undelivered = [line for line in logged if line["message"] == "the answer to CloudFormation was not delivered"]
    assert [line["attempt"] for line in undelivered] == [1, 2, 3] and undelivered[0]["httpStatus"] == 500


def test_an_unexpected_error_is_reported_by_type_and_place_never_by_its_text(opensearch, cloudformation, capsys, monkeypatch):
    def broken(props, session=None):
        raise RuntimeError("the quarterly numbers are 4.2M")  # stands for any value an error message may carry

    monkeypatch.setattr(h, "put_pipeline", broken)
    h.handler(cfn_event(opensearch, cloudformation), session=SESSION)
    failed = answer(cloudformation)
    assert failed["Status"] == "FAILED" and failed["Reason"].startswith("RuntimeError in the search handler at ")
    out = capsys.readouterr().out
    assert "quarterly" not in out and "quarterly" not in failed["Reason"]
    assert json.loads(out.splitlines()[-1])["errorType"] == "RuntimeError"
