"""Sampling presets: repeatable extraction and varied, on-brief text, checked before any call.

Choose sampling by what the task needs, consistency or variety:

- EXTRACTION (temperature 0): the most likely token every time, for pulling fields out of a
  document or classifying. Output becomes highly consistent, not guaranteed identical: still
  validate what comes back.
- VARIED (temperature 0.8): taglines, subject lines, rephrasings that should differ from call to
  call while the system prompt keeps them on brief. topP stays at its widest (unset).

    config = EXTRACTION.inference_config(max_tokens=300, model_id=MODEL)
    request = build_converse_request(MODEL, prompt=..., inference_config=config)

maxTokens sets the answer's length and stop sequences where it ends; neither changes consistency
or variety. Model-specific knobs such as Anthropic's top_k go in additionalModelRequestFields under
the model's own name, not here. A value out of range raises RequestError when the Sampling or the
config is built, before any call. Setting both temperature and topP away from 1.0 logs a warning:
many providers advise changing one of the two (check the model's documentation).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .bedrock import MAX_STOP_SEQUENCES, RequestError

__all__ = [
    "EXTRACTION",
    "KNOWN_MAX_OUTPUT_TOKENS",
    "PRESETS",
    "VARIED",
    "Sampling",
    "check_max_tokens",
    "model_max_output_tokens",
]

logger = logging.getLogger(__name__)

#: The value at which temperature and topP leave the model's distribution as it is (no scaling,
#: no truncation); "away from the default" means away from this.
NEUTRAL = 1.0

#: Largest maxTokens of models whose limit is well established, by foundation-model id. Limits
#: change with model versions: pass model_max_tokens for any other model (its model card says it).
KNOWN_MAX_OUTPUT_TOKENS: Mapping[str, int] = {
    "anthropic.claude-3-haiku-20240307-v1:0": 4_096,
    "anthropic.claude-3-5-haiku-20241022-v1:0": 8_192,
}


def _number(name: str, value: Any, *, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RequestError(f"{name}={value!r} must be a number from {low:g} to {high:g}")
    if not low <= value <= high:
        raise RequestError(
            f"{name}={value!r} is outside {low:g}..{high:g}, the Converse API's range; Bedrock would refuse the call "
            f"with a ValidationException. Use a value from {low:g} to {high:g}"
            + (" (1 is the widest: no truncation)" if name == "topP" else " (0 for repeatable output)")
        )


def model_max_output_tokens(model_id: str | None) -> int | None:
    """The largest maxTokens of a known model (a cross-Region profile id resolves to its model), else None."""
    if not model_id:
        return None
    if model_id in KNOWN_MAX_OUTPUT_TOKENS:
        return KNOWN_MAX_OUTPUT_TOKENS[model_id]
    _, _, rest = model_id.partition(".")  # us.anthropic.claude-... -> anthropic.claude-...
    return KNOWN_MAX_OUTPUT_TOKENS.get(rest)


def check_max_tokens(max_tokens: Any, *, model_id: str | None = None, model_max_tokens: int | None = None) -> int:
    """max_tokens as a positive int within the model's maximum (model_max_tokens, else a known one)."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise RequestError(
            f"maxTokens={max_tokens!r} must be a positive whole number: the longest answer, which is also what "
            "Bedrock reserves from the quota; size it from the real p99 output (planning.size_max_tokens)"
        )
    if model_max_tokens is not None and (
        isinstance(model_max_tokens, bool) or not isinstance(model_max_tokens, int) or model_max_tokens < 1
    ):
        raise RequestError(f"model_max_tokens={model_max_tokens!r} must be a positive whole number (from the model card)")
    limit = model_max_tokens if model_max_tokens is not None else model_max_output_tokens(model_id)
    if limit is not None and max_tokens > limit:
        whose = model_id or "the model"
        raise RequestError(
            f"maxTokens={max_tokens:,} exceeds {whose}'s maximum output of {limit:,} tokens; Bedrock would refuse "
            f"the call. Use at most {limit:,}, ideally just above the real p99 answer length (a larger value only "
            "reserves more quota)"
        )
    return max_tokens


@dataclass(frozen=True)
class Sampling:
    """How a call samples tokens: Converse inferenceConfig's temperature, topP and stopSequences.

    temperature: 0..1; 0 picks the most likely token (repeatable). Default: None (the model's own).
    top_p: 0..1; the probability mass sampled from, 1 is all of it. Default: None (the model's own).
    stop_sequences: text that ends the answer when generated. Default: none.
    """

    temperature: float | None = None
    top_p: float | None = None
    stop_sequences: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.temperature is not None:
            _number("temperature", self.temperature, low=0, high=1)
        if self.top_p is not None:
            _number("topP", self.top_p, low=0, high=1)
        stops = self.stop_sequences
        if isinstance(stops, str) or not isinstance(stops, Sequence):
            raise RequestError(f"stop_sequences must be a list of strings, not {type(stops).__name__}")
        if len(stops) > MAX_STOP_SEQUENCES or not all(isinstance(s, str) and s for s in stops):
            raise RequestError(
                f"stop_sequences must hold at most {MAX_STOP_SEQUENCES} non-empty strings (models may accept fewer)"
            )
        object.__setattr__(self, "stop_sequences", tuple(stops))
        if (
            self.temperature is not None and self.temperature != NEUTRAL
            and self.top_p is not None and self.top_p != NEUTRAL
        ):
            logger.warning(
                "temperature=%s and topP=%s are both set away from 1.0; many providers advise changing one of them "
                "(tune temperature and leave topP unset, or the reverse), so check the model's documentation",
                self.temperature, self.top_p,
            )

    def with_(self, **changes: Any) -> Sampling:
        """A copy with some fields changed, checked again (e.g. EXTRACTION.with_(stop_sequences=["</json>"]))."""
        return replace(self, **changes)

    def inference_config(
        self, *, max_tokens: int, model_id: str | None = None, model_max_tokens: int | None = None
    ) -> dict[str, Any]:
        """Converse inferenceConfig with these settings and max_tokens, checked against the model's maximum
        (model_max_tokens, else KNOWN_MAX_OUTPUT_TOKENS for model_id; unchecked when neither is known)."""
        config: dict[str, Any] = {
            "maxTokens": check_max_tokens(max_tokens, model_id=model_id, model_max_tokens=model_max_tokens)
        }
        if self.temperature is not None:
            config["temperature"] = self.temperature
        if self.top_p is not None:
            config["topP"] = self.top_p
        if self.stop_sequences:
            config["stopSequences"] = list(self.stop_sequences)
        return config


#: Repeatable extraction: the most likely token every time (consistent, not guaranteed identical).
EXTRACTION = Sampling(temperature=0.0)
#: Varied but on-brief text: a moderate temperature, topP left at its widest.
VARIED = Sampling(temperature=0.8)
PRESETS: Mapping[str, Sampling] = {"extraction": EXTRACTION, "varied": VARIED}
