"""ConverseStream, one complete sentence at a time, with TTFT and output tokens per second measured.

Streaming does not make the model finish sooner; it lets the listener start sooner. A voice
assistant hands each complete sentence to speech synthesis while the model writes the next one, so
the reply starts about one time-to-first-token plus one sentence after the request, not after the
whole answer.

    stream = stream_sentences(BEDROCK, build_converse_request(MODEL, prompt=question, latency="optimized"))
    for sentence in stream:
        speak(sentence)                       # each one as soon as it is complete
    metrics.emit_call(stream.result, model_id=MODEL, request=stream.request)

Sentences end at ., !, ? or an ellipsis (closing quotes and brackets included) followed by a space
and a word that does not start in lower case, at a line break, or right after a full-width 。！？.
Common abbreviations (Dr., e.g.), initials (J.) and list markers (1.) do not end a sentence. The
split never depends on where the deltas break the text: the same text gives the same sentences
however it arrives.

An error inside the stream (a throttle after the first tokens, a timeout) propagates from the
loop as botocore's EventStreamError (is_throttle works on it), after every sentence completed
before it was yielded. Retrying would generate a different answer than the one already spoken:
`stream.text` holds what arrived, so the caller can apologise, or ask again with that text as the
start of the assistant's turn.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .replay import ConverseResult, _result  # the one reading of a response (replay.py)

__all__ = ["ABBREVIATIONS", "SentenceSplitter", "SentenceStream", "sentences", "stream_sentences"]

_TERMINALS = frozenset(".!?…")
_FULL_WIDTH_TERMINALS = frozenset("。！？")
_CLOSERS = frozenset(")]}\"'”’»」』）")
_SPACES = frozenset(" \t\r\f\v\u00a0\u3000")
#: Words that end in a period without ending a sentence (compared in lower case, without the period).
ABBREVIATIONS = frozenset(
    {"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "mt", "vs", "e.g", "i.e", "cf", "fig", "no", "approx", "dept", "est"}
)
_WAIT = -1  # a candidate boundary whose decision needs text that has not arrived yet


class SentenceSplitter:
    """Turns text deltas into complete sentences, whatever the deltas' boundaries.

    feed(delta) returns the sentences the text so far completes; finish() returns the rest.
    max_chars: cut a sentence longer than this at its last space (a speech engine's request limit);
    Default: None (sentences are never cut).
    """

    def __init__(self, *, max_chars: int | None = None) -> None:
        if max_chars is not None and (isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1):
            raise ValueError(f"max_chars={max_chars!r} must be a positive whole number of characters, or None")
        self.max_chars = max_chars
        self._buffer = ""
        self._scan = 0  # where the next candidate search starts; earlier candidates are decided
        self._finished = False

    def feed(self, delta: str) -> list[str]:
        if self._finished:
            raise ValueError("feed() after finish(): create a new SentenceSplitter for a new answer")
        if not isinstance(delta, str):
            raise TypeError(f"a delta must be text (str), not {type(delta).__name__}")
        # A sentence never starts with white space, whether it arrived with the previous delta or
        # this one: the length limit and the boundaries are then counted on the same text.
        self._buffer = (self._buffer + delta).lstrip()
        return self._drain(final=False)

    def finish(self) -> list[str]:
        """The sentences left when the answer is complete, the last one without its end mark if it has none."""
        if self._finished:
            return []
        self._finished = True
        out = self._drain(final=True)
        rest = self._buffer.strip()
        self._buffer, self._scan = "", 0
        return [*out, rest] if rest else out

    def _drain(self, *, final: bool) -> list[str]:
        out: list[str] = []
        while True:
            end, resume = self._next_boundary(final)
            if self.max_chars is not None and self._too_long(end, final):
                end, resume = self._soft_cut(self.max_chars)
            if end is None or end == _WAIT:
                return out
            sentence = self._buffer[:end].strip()
            self._buffer = self._buffer[resume:].lstrip()
            self._scan = 0
            if sentence:
                out.append(sentence)

    def _too_long(self, end: int | None, final: bool) -> bool:
        """Whether the current sentence passes max_chars before (or without) a boundary. Decided on
        the same text whether a boundary was found or the scan merely went past the limit, so the
        cut does not depend on where the deltas break."""
        assert self.max_chars is not None
        if end is not None and end != _WAIT:
            upto = end
        elif end is None and final:
            upto = len(self._buffer)
        else:
            upto = self._scan
        return len(self._buffer[:upto].rstrip()) > self.max_chars

    def _soft_cut(self, limit: int) -> tuple[int, int]:
        """Cut the current sentence at its last space within `limit` characters (or at the limit)."""
        head = self._buffer[: limit + 1]
        space = max(head.rfind(" "), head.rfind("\t"))
        cut = space if space > 0 and head[:space].strip() else limit
        return cut, cut

    def _next_boundary(self, final: bool) -> tuple[int | None, int]:
        """(end of the sentence, where the rest starts), (_WAIT, 0) when undecidable yet, (None, 0) when none."""
        buffer, i = self._buffer, self._scan
        size = len(buffer)
        while i < size:
            char = buffer[i]
            if char == "\n":
                if buffer[:i].strip():
                    return i, i + 1
                i += 1
                continue
            if char in _FULL_WIDTH_TERMINALS or char in _TERMINALS:
                end = i
                while end < size and (buffer[end] in _TERMINALS or buffer[end] in _FULL_WIDTH_TERMINALS):
                    end += 1
                while end < size and buffer[end] in _CLOSERS:
                    end += 1
                if end == size:
                    if final:
                        return end, end
                    self._scan = i
                    return _WAIT, 0
                if char in _FULL_WIDTH_TERMINALS:
                    return end, end
                after = end
                while after < size and buffer[after] in _SPACES:
                    after += 1
                if after == end:  # no space: 3.14, e.g.x, "Hi!"said
                    i = end
                    continue
                if after == size:
                    if final:
                        return end, after
                    self._scan = i
                    return _WAIT, 0
                if buffer[after] == "\n" or (
                    not buffer[after].islower() and not self._abbreviation(i, buffer[i:end])
                ):
                    return end, after
                i = after
                continue
            i += 1
        self._scan = size
        return None, 0

    def _abbreviation(self, at: int, mark: str) -> bool:
        """A single period after an abbreviation, an initial, or a list number at the start."""
        if mark.rstrip("".join(_CLOSERS)) != ".":
            return False
        start = at
        while start > 0 and (self._buffer[start - 1].isalnum() or self._buffer[start - 1] == "."):
            start -= 1
        word = self._buffer[start:at]
        if word.lower() in ABBREVIATIONS:
            return True
        if len(word) == 1 and word.isalpha() and word.isupper():
            return True  # an initial: J. R. R. Tolkien
        return word.isdigit() and len(word) <= 3 and not self._buffer[:start].strip()  # "1. First step"


def sentences(deltas: Iterable[str], *, max_chars: int | None = None) -> Iterator[str]:
    """Complete sentences from text deltas, each yielded as soon as the text completes it."""
    splitter = SentenceSplitter(max_chars=max_chars)
    for delta in deltas:
        yield from splitter.feed(delta)
    yield from splitter.finish()


class SentenceStream:
    """One ConverseStream call, iterated as complete sentences.

    Iterate it once. When the loop ends normally, `result` holds the ConverseResult: text, usage,
    stop reason, served latency mode, first_token_ms (TTFT as the caller saw it) and
    output_tokens_per_second. If the loop stops early (break) the stream is closed and result stays
    None. Meanwhile: `text` (everything received), `first_token_ms`, `delivered` (sentences yielded).
    """

    def __init__(self, client: Any, request: Mapping[str, Any], *, max_chars: int | None = None) -> None:
        self.client = client
        self.request = request
        self._splitter = SentenceSplitter(max_chars=max_chars)
        self.result: ConverseResult | None = None
        self.first_token_ms: float | None = None
        self.delivered: list[str] = []
        self._parts: list[str] = []
        self._started = False

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def __iter__(self) -> Iterator[str]:
        if self._started:
            raise RuntimeError("a SentenceStream is read once; call stream_sentences again for a new answer")
        self._started = True
        return self._sentences()

    def _sentences(self) -> Iterator[str]:
        started = time.perf_counter()
        response = self.client.converse_stream(**self.request)
        stream = response["stream"]
        summary: dict[str, Any] = {}
        completed = False
        try:
            for event in stream:
                if "contentBlockDelta" in event:
                    text = event["contentBlockDelta"].get("delta", {}).get("text", "")
                    if not text:
                        continue
                    if self.first_token_ms is None:
                        self.first_token_ms = (time.perf_counter() - started) * 1000
                    self._parts.append(text)
                    for sentence in self._splitter.feed(text):
                        self.delivered.append(sentence)
                        yield sentence
                elif "messageStop" in event:
                    summary["stopReason"] = event["messageStop"].get("stopReason", "")
                elif "metadata" in event:
                    summary.update(event["metadata"])
            for sentence in self._splitter.finish():
                self.delivered.append(sentence)
                yield sentence
            completed = True
        finally:
            if not completed:
                close = getattr(stream, "close", None)
                if close is not None:
                    close()  # release the connection of a stream the caller stopped reading
        elapsed_ms = (time.perf_counter() - started) * 1000
        self.result = _result(self.text, summary, elapsed_ms, first_token_ms=self.first_token_ms)


def stream_sentences(client: Any, request: Mapping[str, Any], *, max_chars: int | None = None) -> SentenceStream:
    """Call ConverseStream when iteration starts and yield each complete sentence of the answer.

    client: a bedrock-runtime client (bedrock_client()); request: Converse keyword arguments
    (build_converse_request(...)). See SentenceStream for the result and timings.
    """
    return SentenceStream(client, request, max_chars=max_chars)
