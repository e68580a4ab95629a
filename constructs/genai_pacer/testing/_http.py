"""The emulator's HTTP/1.1 server: keep-alive connections, bounded reads, and the service's error shape.

Hardening, because a test bed meets broken clients too: every connection has a socket timeout (an
idle or half-open connection frees its thread), a body larger than the cap is refused with a 413
before it is read, a Content-Length that is not a byte count gets a 400, chunked request bodies are
read (within the same cap), and any other transfer coding gets a 501. After such an error the
connection is closed, since the rest of its bytes cannot be trusted.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from . import eventstream
from .specs import EmulatorError

# (method, path, body, lower-cased headers, response) -> None
Dispatch = Callable[[str, str, bytes, dict[str, str], "Response"], None]


class Response:
    """Writes one HTTP/1.1 response: a JSON body, an error, or a chunked event stream."""

    def __init__(self, handler: Handler):
        self.handler = handler
        self.request_id = str(uuid.uuid4())
        self.streaming = False

    def _head(self, status: int, headers: dict[str, str]) -> None:
        self.handler.send_response(status)
        self.handler.send_header("x-amzn-RequestId", self.request_id)
        for name, value in headers.items():
            self.handler.send_header(name, value)
        self.handler.end_headers()

    def json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(body).encode()
        self._head(status, {"Content-Type": "application/json", "Content-Length": str(len(raw))} | (headers or {}))
        self.handler.wfile.write(raw)
        self.handler.wfile.flush()

    def error(self, error: EmulatorError, *, close: bool = False) -> None:
        if self.streaming:  # headers already sent: end the stream with the exception
            self.chunk(eventstream.exception(error.stream_type, error.message))
            self.end_stream()
            return
        # The header's form as Bedrock sends it; botocore keeps the part before the colon.
        headers = {"x-amzn-ErrorType": f"{error.error_type}:http://internal.amazon.com/coral/com.amazon.bedrock/"}
        if close:
            headers["Connection"] = "close"
            self.handler.close_connection = True
            self.handler.linger = True
        self.json(error.status, {"message": error.message}, headers)

    def start_stream(self, headers: dict[str, str]) -> None:
        self.streaming = True
        self._head(200, {"Content-Type": "application/vnd.amazon.eventstream", "Transfer-Encoding": "chunked"} | headers)

    def chunk(self, data: bytes) -> None:
        if not data:  # an empty HTTP chunk would end the stream
            return
        self.handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.handler.wfile.flush()

    def end_stream(self) -> None:
        self.handler.wfile.write(b"0\r\n\r\n")
        self.handler.wfile.flush()


def _refusal(status: int, error_type: str, message: str) -> EmulatorError:
    return EmulatorError(error_type, message, status)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so a client's connection pool is what it seems
    disable_nagle_algorithm = True  # headers and body go out in separate writes: no 40 ms delayed-ACK stall
    server_version = "genai-pacer-bedrock-emulator"
    server: Server
    linger = False  # set when a refused body may still be arriving
    LINGER_SECONDS = 2.0

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.connection_timeout)  # reads and writes of this connection

    def finish(self) -> None:
        super().finish()
        if self.linger:
            self._drain()

    def _drain(self) -> None:
        """A lingering close: stop sending, then discard what the client still sends for a moment, so
        a client that writes its whole body before reading sees the error instead of a reset."""
        deadline = time.monotonic() + self.LINGER_SECONDS
        with contextlib.suppress(OSError):  # the client closed first, or the moment passed
            self.connection.shutdown(socket.SHUT_WR)
            while (left := deadline - time.monotonic()) > 0:
                self.connection.settimeout(left)
                if not self.connection.recv(1 << 16):
                    break

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: BedrockEmulator.invocations records what each request did."""

    def handle(self) -> None:
        self.server.before_connection()
        with contextlib.suppress(TimeoutError, ConnectionError):  # an idle, half-open or vanished client:
            super().handle()  # the connection, and its thread, end here

    def handle_expect_100(self) -> bool:
        """Refuse an oversized body before the client sends it."""
        try:
            self._declared_length()
        except EmulatorError as refusal:
            Response(self).error(refusal, close=True)
            return False
        return super().handle_expect_100()

    def _declared_length(self) -> int | None:
        """The Content-Length, checked against the cap; None when the body is chunked or absent."""
        codings = self.headers.get_all("Transfer-Encoding") or []
        lengths = self.headers.get_all("Content-Length") or []
        if codings:
            if [c.strip().lower() for c in ",".join(codings).split(",")] != ["chunked"]:
                raise _refusal(501, "NotImplementedException",
                               f"Transfer-Encoding {', '.join(codings)!r} is not supported; send the body with "
                               "Content-Length or Transfer-Encoding: chunked")
            if lengths:
                raise _refusal(400, "BadRequestException", "a request cannot carry both Content-Length and Transfer-Encoding")
            return None
        if not lengths:
            return None
        if len(set(lengths)) > 1 or not lengths[0].strip().isdigit():
            raise _refusal(400, "BadRequestException",
                           f"Content-Length {', '.join(lengths)!r} is not a byte count; send one non-negative integer")
        length = int(lengths[0])
        self._check_size(length)
        return length

    def _check_size(self, length: int) -> None:
        cap = self.server.max_body_bytes
        if length > cap:
            raise _refusal(413, "RequestEntityTooLargeException",
                           f"the request body of {length} bytes exceeds the emulator's cap of {cap} bytes "
                           "(BedrockEmulator(max_body_bytes=...)); Bedrock itself takes at most 25,000,000 bytes of body")

    def _read_chunked(self) -> bytes:
        body, size = bytearray(), -1
        while size != 0:
            line = self.rfile.readline(1026)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise _refusal(400, "BadRequestException", f"malformed chunk size line {line[:40]!r} in a chunked body") from None
            if size < 0:
                raise _refusal(400, "BadRequestException", "negative chunk size in a chunked body")
            self._check_size(len(body) + size)
            body += self.rfile.read(size)
            if size and self.rfile.read(2) != b"\r\n":
                raise _refusal(400, "BadRequestException", "a chunk of a chunked body does not end with CRLF")
        trailer = self.rfile.readline(1026).strip()
        while trailer:  # trailer fields, discarded up to the blank line
            trailer = self.rfile.readline(1026).strip()
        return bytes(body)

    def _read_body(self) -> bytes:
        length = self._declared_length()
        if length is None:
            return self._read_chunked() if self.headers.get("Transfer-Encoding") else b""
        body = self.rfile.read(length)
        if len(body) < length:
            raise ConnectionError(f"the client sent {len(body)} of {length} body bytes and closed")
        return body

    def _dispatch(self) -> None:
        out = Response(self)
        try:
            body = self._read_body()
        except EmulatorError as refusal:
            out.error(refusal, close=True)
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        try:
            self.server.dispatch(self.command, self.path, body, headers, out)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True  # the client went away or stopped reading; its charge was settled

    do_POST = do_GET = do_PUT = do_DELETE = do_PATCH = _dispatch


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # many clients connect at once in a load test

    def __init__(self, address: tuple[str, int], dispatch: Dispatch, *, connection_timeout: float,
                 max_body_bytes: int, on_connection: Callable[[], None]):
        super().__init__(address, Handler)
        self.dispatch, self.connection_timeout, self.max_body_bytes = dispatch, connection_timeout, max_body_bytes
        self._on_connection = on_connection

    def before_connection(self) -> None:
        self._on_connection()
