"""The sync-execution handler under faults: hostile requests, a slow, throttling or failing Step
Functions, and outputs it cannot return. Every case is an HTTP answer with a documented status code
(never a function error), and a start is never repeated once its request was sent.

Step Functions is a local HTTP server that speaks enough of its JSON protocol for boto3
(x-amz-target AWSStepFunctions.StartSyncExecution) and counts starts. boto3 sends
StartSyncExecution to `sync-<endpoint host>` (the operation's host prefix), so the server is reached
as an HTTP proxy, which needs no DNS for that name. The handler reads a short wait from its
environment, so a held answer times out in half a second.
"""

from __future__ import annotations

import base64
import importlib
import json
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError

ARN = "arn:aws:states:us-east-1:111122223333:stateMachine:Digest"
TARGET = "AWSStepFunctions.StartSyncExecution"
#: How long the server holds an answer at most; a handler that waits this long fails its test.
HOLD_LIMIT_SECONDS = 30
SECRET = "card 4111 1111 1111 1111"  # a prompt's content, which no log line may carry


def execution(status: str, **fields: Any) -> dict:
    return {"executionArn": ARN.replace("stateMachine", "express") + ":run", "startDate": 1.0, "stopDate": 2.0,
            "status": status, **fields}


class FakeStepFunctions:
    """Answers each StartSyncExecution with the next scripted behaviour (the last one repeats)."""

    def __init__(self) -> None:
        self.starts = 0
        self.inputs: list[str] = []
        self.script: list[tuple[str, Any]] = [("answer", (200, execution("SUCCEEDED", output="{}")))]
        self.release = threading.Event()
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("x-amz-target") != TARGET:
                    self._send(400, {"__type": "UnknownOperationException"})
                    return
                with fake._lock:
                    fake.starts += 1
                    fake.inputs.append(json.loads(body).get("input", ""))
                    kind, value = fake.script.pop(0) if len(fake.script) > 1 else fake.script[0]
                if kind == "hold":  # hold the answer, as StartSyncExecution does while the workflow runs
                    fake.release.wait(HOLD_LIMIT_SECONDS)
                    kind, value = "answer", (200, execution("SUCCEEDED", output='{"late": true}'))
                if kind == "close":  # the connection drops after the request was sent
                    self.close_connection = True
                    self.connection.close()
                    return
                self._send(*value)

            def _send(self, status: int, document: dict) -> None:
                data = json.dumps(document).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/x-amz-json-1.0")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the handler gave up on this answer (its read timed out)
                    self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the tests assert on what the handler returns and logs."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def error_answer(status: int, code: str, message: str = "refused") -> tuple[str, tuple[int, dict]]:
    return "answer", (status, {"__type": code, "message": message})


@pytest.fixture
def fake() -> Iterator[FakeStepFunctions]:
    server = FakeStepFunctions()
    yield server
    server.close()


def load_handler(monkeypatch: pytest.MonkeyPatch, proxy: str, **env: str) -> Any:
    """A freshly imported handler module whose client reaches `proxy`, with `env` in its environment."""
    base = {
        "STATE_MACHINE_ARN": ARN, "AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test", "AWS_ENDPOINT_URL_SFN": "http://states.fake",
        "HTTP_PROXY": proxy, "http_proxy": proxy, "WAIT_SECONDS": "0.2", "READ_MARGIN_SECONDS": "0.3",
    }
    for name in ("NO_PROXY", "no_proxy", "AWS_RETRY_MODE", "AWS_MAX_ATTEMPTS", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in (base | env).items():
        monkeypatch.setenv(name, value)
    sys.modules.pop("sync_execution.handler", None)
    return importlib.import_module("sync_execution.handler")


@pytest.fixture
def handler(monkeypatch: pytest.MonkeyPatch, fake: FakeStepFunctions) -> Any:
    return load_handler(monkeypatch, fake.url)


def post(module: Any, body: Any, *, context: Any = None, **event: Any) -> tuple[int, dict, dict]:
    reply = module.handler({"body": body, **event}, context)
    return reply["statusCode"], json.loads(reply["body"]), reply["headers"]


# --- a start is never repeated once sent ------------------------------------------------------------


@pytest.mark.parametrize(
    "retry_env",
    [{}, {"AWS_RETRY_MODE": "standard", "AWS_MAX_ATTEMPTS": "3"}, {"AWS_RETRY_MODE": "legacy", "AWS_MAX_ATTEMPTS": "5"}],
    ids=["botocore-default", "standard-3", "legacy-5"],
)
def test_an_execution_that_outlasts_the_read_timeout_runs_once_and_answers_504(monkeypatch, fake, retry_env):
    """Whatever retry mode the runtime's botocore or environment picks, a held answer is never started again."""
    module = load_handler(monkeypatch, fake.url, **retry_env)
    fake.script = [("hold", None)]
    status, body, _ = post(module, '{"review": "slow"}')
    fake.release.set()
    assert (status, body["error"]) == (504, "WorkflowTimeout")
    assert "was not started again" in body["cause"]
    assert fake.starts == 1


def test_a_connection_closed_after_the_request_was_sent_is_not_started_again(handler, fake):
    fake.script = [("close", None)]
    status, body, _ = post(handler, "{}")
    # ConnectionClosedError on a direct connection; through the test's proxy urllib3 reports a ProxyError
    assert (status, fake.starts) == (502, 1)
    assert body["error"] in ("ConnectionClosedError", "ProxyConnectionError") and "not started again" in body["cause"]


@pytest.mark.parametrize("code", [500, 503])
def test_a_server_error_is_not_started_again(handler, fake, code):
    """A 5xx may come after the execution ran: botocore's standard mode would retry it; the handler does not."""
    fake.script = [error_answer(code, "InternalServerError")]
    status, body, _ = post(handler, "{}")
    assert (status, body["error"], fake.starts) == (502, "InternalServerError", 1)


def test_a_throttled_start_is_retried_until_it_runs(handler, fake):
    fake.script = [error_answer(400, "ThrottlingException"), error_answer(400, "ThrottlingException"),
                   ("answer", (200, execution("SUCCEEDED", output='{"answers": {"A": "yes"}}')))]
    status, body, _ = post(handler, '{"review": "ok"}')
    assert (status, body, fake.starts) == (200, {"answers": {"A": "yes"}}, 3)
    assert fake.inputs == ['{"review":"ok"}'] * 3


@pytest.mark.parametrize("code", ["ThrottlingException", "KmsThrottlingException"])
def test_a_start_throttled_on_every_attempt_is_a_429_with_retry_after(handler, fake, code):
    fake.script = [error_answer(400, code)]
    status, body, headers = post(handler, "{}")
    assert (status, body["error"], fake.starts) == (429, code, handler.START_ATTEMPTS)
    assert "nothing ran" in body["cause"] and int(headers["retry-after"]) >= 1


def test_a_throttled_start_is_not_retried_when_no_time_is_left_for_the_workflow(handler, fake):
    class LittleTimeLeft:
        def get_remaining_time_in_millis(self) -> int:
            return int(handler.READ_TIMEOUT_SECONDS * 1000)  # enough for one execution, no backoff before it

    fake.script = [error_answer(400, "ThrottlingException"), ("answer", (200, execution("SUCCEEDED", output="{}")))]
    status, body, _ = post(handler, "{}", context=LittleTimeLeft())
    assert (status, body["error"], fake.starts) == (429, "ThrottlingException", 1)


def test_a_start_whose_connection_never_opened_is_retried(handler, monkeypatch):
    calls: list[int] = []

    def flaky(**params: Any) -> dict:
        calls.append(1)
        if len(calls) < 3:
            raise EndpointConnectionError(endpoint_url="https://sync-states.us-east-1.amazonaws.com/")
        return execution("SUCCEEDED", output='{"ok": 1}')

    monkeypatch.setattr(handler.STEP_FUNCTIONS, "start_sync_execution", flaky)
    assert post(handler, "{}")[:2] == (200, {"ok": 1}) and len(calls) == 3


def test_an_unreachable_step_functions_is_a_502_after_the_safe_retries(handler, monkeypatch):
    calls: list[int] = []

    def unreachable(**params: Any) -> dict:
        calls.append(1)
        raise ConnectTimeoutError(endpoint_url="https://sync-states.us-east-1.amazonaws.com/")

    monkeypatch.setattr(handler.STEP_FUNCTIONS, "start_sync_execution", unreachable)
    status, body, _ = post(handler, "{}")
    assert (status, body["error"], len(calls)) == (502, "StepFunctionsUnreachable", handler.START_ATTEMPTS)


# --- the execution's own outcome ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("execution_status", "code"), [("FAILED", 502), ("TIMED_OUT", 504), ("ABORTED", 502)],
)
def test_an_execution_that_did_not_succeed_names_its_status_error_and_cause(handler, fake, execution_status, code):
    fake.script = [("answer", (200, execution(execution_status, error="BedrockRuntime.ValidationException",
                                               cause="max_tokens too large")))]
    status, body, _ = post(handler, "{}")
    assert (status, body["status"], body["error"], body["cause"]) == (
        code, execution_status, "BedrockRuntime.ValidationException", "max_tokens too large"
    )
    assert body["executionArn"].endswith(":run") and fake.starts == 1


@pytest.mark.parametrize(
    ("answer", "status", "error"),
    [
        (error_answer(400, "InvalidExecutionInput", "Invalid State Machine Execution Input"), 400, "InvalidExecutionInput"),
        (error_answer(400, "StateMachineDoesNotExist"), 502, "StateMachineDoesNotExist"),
        (error_answer(400, "KmsAccessDeniedException"), 502, "KmsAccessDeniedException"),
        (error_answer(400, "AccessDeniedException"), 502, "AccessDeniedException"),
    ],
)
def test_a_start_step_functions_refuses_names_the_reason_and_runs_once(handler, fake, answer, status, error):
    fake.script = [answer]
    reply_status, body, _ = post(handler, "{}")
    assert (reply_status, body["error"], fake.starts) == (status, error, 1)


def test_output_too_large_for_a_function_url_is_a_502(handler, fake):
    huge = json.dumps("x" * (handler.RESPONSE_LIMIT_BYTES + 1))
    fake.script = [("answer", (200, execution("SUCCEEDED", output=huge)))]
    reply = handler.handler({"body": "{}"})
    body = json.loads(reply["body"])
    assert (reply["statusCode"], body["error"]) == (502, "OutputTooLarge")
    assert len(reply["body"]) < 1_000  # the answer itself fits


def test_output_that_is_not_json_is_a_502(handler, fake):
    fake.script = [("answer", (200, execution("SUCCEEDED", output="{not json")))]
    status, body, _ = post(handler, "{}")
    assert (status, body["error"]) == (502, "OutputNotJson")


# --- hostile requests: refused before anything starts ------------------------------------------------


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize(
    ("event", "status", "cause"),
    [
        (None, 400, "not a function URL request"),
        ([], 400, "not a function URL request"),
        ("{}", 400, "not a function URL request"),
        ({}, 400, "body is not JSON"),
        ({"body": None}, 400, "body is not JSON"),
        ({"body": {"review": "x"}}, 400, "body must be text"),
        ({"body": "not json"}, 400, "body is not JSON"),
        ({"body": "[1, 2]"}, 400, "must be a JSON object"),
        ({"body": '"text"'}, 400, "must be a JSON object"),
        ({"body": '{"a": NaN}'}, 400, "NaN is not JSON"),
        ({"body": '{"a": Infinity}'}, 400, "Infinity is not JSON"),
        ({"body": '{"a": ' + "9" * 5_000 + "}"}, 400, "body is not JSON"),
        ({"body": '{"a": "\\ud800"}'}, 400, "lone surrogate"),
        ({"body": "[" * 100_000 + "]" * 100_000}, 400, "nested too deeply"),
        ({"body": "!!not base64!!", "isBase64Encoded": True}, 400, "not UTF-8"),
        ({"body": b64(b'{"a": "\xff\xfe"}'), "isBase64Encoded": True}, 400, "not UTF-8"),
        ({"body": json.dumps({"a": "x" * 262_144})}, 413, "Step Functions accepts at most 262,144"),
        ({"body": json.dumps({"a": "é" * 131_072})}, 413, "bytes"),  # 2 bytes per character in UTF-8
    ],
    ids=["null", "list", "string", "no-body", "null-body", "dict-body", "not-json", "array", "json-string", "nan",
         "infinity", "huge-integer", "lone-surrogate", "deep-nesting", "bad-base64", "bad-utf8", "huge", "huge-utf8"],
)
def test_a_hostile_request_gets_a_clear_answer_and_starts_nothing(handler, fake, event, status, cause):
    reply = handler.handler(event)
    body = json.loads(reply["body"])
    assert reply["statusCode"] == status, body
    assert cause in body["cause"] and body["error"] in ("InvalidRequest", "InputTooLarge")
    assert fake.starts == 0


def test_input_at_the_limit_is_sent(handler, fake):
    text = json.dumps({"a": "x" * (262_144 - len('{"a":""}'))}, separators=(",", ":"))
    assert len(text.encode()) == 262_144
    assert post(handler, text)[0] == 200 and fake.starts == 1


def test_a_base64_body_is_decoded(handler, fake):
    assert post(handler, b64('{"review": "große"}'.encode()), isBase64Encoded=True)[0] == 200
    assert fake.inputs == ['{"review":"große"}']


# --- what the logs carry ----------------------------------------------------------------------------


def every_outcome(fake: FakeStepFunctions, handler: Any) -> Iterator[Callable[[], Any]]:
    body = json.dumps({"prompt": SECRET})
    scripts = [
        [("answer", (200, execution("SUCCEEDED", output=json.dumps({"answer": SECRET}))))],
        [("answer", (200, execution("FAILED", error="States.TaskFailed", cause=SECRET)))],
        [error_answer(400, "InvalidExecutionInput", SECRET)],
        [error_answer(500, "InternalServerError", SECRET)],
    ]
    for script in scripts:
        fake.script = script
        yield lambda: handler.handler({"body": body})
    yield lambda: handler.handler({"body": body[:-1]})  # not JSON


def test_no_log_line_carries_the_prompt_or_the_answer(handler, fake, capsys):
    replies = [call() for call in every_outcome(fake, handler)]
    assert [r["statusCode"] for r in replies] == [200, 502, 400, 502, 400]
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == len(replies) and all(json.loads(line)["level"] for line in lines)
    assert not [line for line in lines if "4111" in line]
