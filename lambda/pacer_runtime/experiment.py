"""Live A/B tests of prompts and models: sticky assignment, the variant's Converse request, and
every metric tagged with the variant.

The experiment's definition is a JSON document held in AWS AppConfig (the `PromptExperiment`
construct creates it), so a split change is a configuration deployment, not a code deployment:

    {"experiment": "support-answer", "salt": "support-answer", "control": "control",
     "variants": [
        {"name": "control", "share": 90, "modelId": "us.amazon.nova-lite-v1:0",
         "prompt": {"template": "Answer the customer: {{question}}"},
         "system": "You are a support agent.", "inferenceConfig": {"maxTokens": 400}},
        {"name": "managed", "share": 10, "modelId": "us.amazon.nova-2-lite-v1:0",
         "prompt": {"promptArn": "arn:aws:bedrock:us-east-1:111122223333:prompt/PROMPT12345:3"},
         "serviceTier": {"type": "priority"}}]}

A variant's `serviceTier` (Converse's own field) is the tier its calls ask for, so an A/B test can
compare Priority with Standard ("default") on the user's path; a variant that names none is called
at the tier the caller passes (`service_tier=`), else at none (default).

Assignment (`assign`) is weighted rendezvous hashing: each variant with a share w scores a unit
`-w / ln(u)`, where u in (0, 1) is a hash of the salt, the variant name and the unit id, and the
highest score wins. So:

- it is deterministic and sticky with no state: the same unit gets the same variant in every
  call, process and host while the configuration stays the same;
- each unit gets exactly one variant with probability share / 100 (the scores are exponential
  races), so shares are disjoint by construction: there is no rule order to get wrong, unlike
  AppConfig's multi-variant flags, whose first matching `split` wins and whose splits are cumulative;
- changing the split scales each variant's scores by new share / old share, so a unit moves from
  a to b only when b's ratio is higher than a's. With two variants (the usual A/B test) raising a
  variant's share never moves its users out, and exactly the minimum moves (10% -> 20% moves 10%
  of users, all into it). With three or more, a variant whose share rises keeps its users unless
  another variant rises by a larger factor in the same change; no stateless scheme can do better
  (if each variant's users depended only on its own share, two variants at 50% and a third at 0%
  would have to hold the same users), so raise one treatment per configuration change;
- a new salt reshuffles everyone: change it only to start a fresh experiment.

The configuration is fetched by `ExperimentSource` from the AppConfig Lambda extension (or agent)
on localhost:2772, or from the appconfigdata API, and cached; after the first load a stale cache is
refreshed by a background thread, so no request waits on the fetch. An invalid document (shares
not summing to 100, duplicate names) is refused and the last good one is kept.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import metrics
from .bedrock import RequestError, build_converse_request, checked_service_tier, converse, is_throttle
from .metrics import SERVICE_TIER_MEMBER, SERVICE_TIERS

__all__ = [
    "EXTENSION_PORT",
    "MAX_REQUEST_METADATA",
    "Experiment",
    "ExperimentConfigError",
    "ExperimentSource",
    "Variant",
    "appconfigdata_fetcher",
    "assign",
    "build_request",
    "call_variant",
    "extension_fetcher",
    "record_call",
    "record_error",
    "record_outcome",
    "render_template",
    "unit_key",
    "variant_dimensions",
]

#: The AppConfig Lambda extension's (and agent's) default HTTP port.
EXTENSION_PORT = 2772
#: Converse accepts at most 16 requestMetadata pairs; two carry the experiment and the variant.
MAX_REQUEST_METADATA = 16
#: Shares must sum to 100 within this (floating-point sums of decimals such as 33.33 + 66.67).
SUM_TOLERANCE = 1e-6
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_PROMPT_ARN = re.compile(r"^arn:aws[a-z-]*:bedrock:[a-z0-9-]+:\d{12}:prompt/[A-Za-z0-9]{10}(:\d{1,5})?$")
_VARIABLE = re.compile(r"\{\{\s*([A-Za-z0-9_]+)\s*\}\}")
_VARIANT_KEYS = frozenset(
    {"name", "share", "modelId", "prompt", "system", "inferenceConfig", "additionalModelRequestFields", "description",
     SERVICE_TIER_MEMBER}
)
_DOCUMENT_KEYS = frozenset({"experiment", "salt", "control", "variants"})
#: requestMetadata keys build_request writes itself.
RESERVED_METADATA = frozenset({"experiment", "variant"})


class ExperimentConfigError(ValueError):
    """The experiment document is invalid: it names the field, the value, the rule and the fix."""


@dataclass(frozen=True)
class Variant:
    """One arm of an experiment: a model, a prompt (template text or a Prompt Management ARN) and sampling."""

    name: str
    share: float
    model_id: str
    template: str | None = None
    prompt_arn: str | None = None
    system: str | None = None
    inference_config: Mapping[str, Any] = field(default_factory=dict)
    additional_fields: Mapping[str, Any] = field(default_factory=dict)
    #: The tier this variant's calls ask for (the document's serviceTier.type); None: the caller's.
    service_tier: str | None = None


@dataclass(frozen=True)
class Experiment:
    """A validated experiment document; build it with `Experiment.from_config`."""

    name: str
    salt: str
    control: str
    variants: tuple[Variant, ...]

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | str | bytes) -> Experiment:
        """Parse and check a document (a dict, or its JSON text); every problem is listed at once."""
        if isinstance(config, bytes | str):
            try:
                config = json.loads(config)
            except ValueError as error:
                raise ExperimentConfigError(f"the experiment document is not JSON: {error}") from None
        if not isinstance(config, Mapping):
            raise ExperimentConfigError(f"the experiment document must be a JSON object, not {type(config).__name__}")
        problems: list[str] = []
        unknown = sorted(str(k) for k in set(config) - _DOCUMENT_KEYS)
        if unknown:
            problems.append(f"the document has unknown fields {unknown}; it takes {sorted(_DOCUMENT_KEYS)} "
                            "(the JSON Schema validator refuses others too)")
        name, salt, control = config.get("experiment"), config.get("salt"), config.get("control")
        if not isinstance(name, str) or not _NAME.match(name):
            problems.append(f"experiment={name!r} must be 1-64 letters, digits, '.', '_' or '-' (it becomes a metric dimension)")
        if not isinstance(salt, str) or not salt:
            problems.append(f"salt={salt!r} must be a non-empty string; changing it reshuffles every user")
        raw = config.get("variants")
        variants: list[Variant] = []
        if not isinstance(raw, list) or len(raw) < 2:
            problems.append(f"variants must be a list of at least two variants (a control and a treatment), not {raw!r:.80}")
            raw = []
        for i, item in enumerate(raw):
            variant = _variant(f"variants[{i}]", item, problems)
            if variant is not None:
                variants.append(variant)
        names = [v.name for v in variants]
        # control is checked against every variant named in the document, valid or not, so one bad
        # variant is reported once, not again as "control must name one of the variants"
        named = [str(item["name"]) for item in raw if isinstance(item, Mapping) and isinstance(item.get("name"), str)]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            problems.append(f"variant names {duplicates} appear more than once; each variant needs its own name")
        if len(variants) == len(raw) and raw:
            total = math.fsum(v.share for v in variants)
            if abs(total - 100) > SUM_TOLERANCE:
                shares = " + ".join(f"{v.name} {v.share:g}" for v in variants)
                problems.append(f"shares sum to {total:g} ({shares}), not 100; adjust them so every user has exactly one variant")
        if not isinstance(control, str) or control not in named:
            problems.append(f"control={control!r} must name one of the variants {named}")
        elif not any(v.share > 0 for v in variants if v.name == control) and not problems:
            problems.append(f"control {control!r} has share 0; the control must serve users (it is the baseline)")
        if problems:
            raise ExperimentConfigError("invalid experiment document:\n" + "\n".join(f"- {p}" for p in problems))
        return cls(str(name), str(salt), str(control), tuple(variants))

    def variant(self, name: str) -> Variant:
        for variant in self.variants:
            if variant.name == name:
                return variant
        raise KeyError(f"experiment {self.name!r} has no variant {name!r}; it has {[v.name for v in self.variants]}")

    @property
    def shares(self) -> dict[str, float]:
        return {v.name: v.share for v in self.variants}


def _variant(where: str, item: Any, problems: list[str]) -> Variant | None:
    if not isinstance(item, Mapping):
        problems.append(f"{where} must be an object with name, share, modelId and prompt, not {type(item).__name__}")
        return None
    before = len(problems)
    unknown = sorted(set(item) - _VARIANT_KEYS)
    if unknown:
        problems.append(f"{where} has unknown fields {unknown}; a variant takes {sorted(_VARIANT_KEYS)}")
    name, share, model_id = item.get("name"), item.get("share"), item.get("modelId")
    if not isinstance(name, str) or not _NAME.match(name):
        problems.append(f"{where}.name={name!r} must be 1-64 letters, digits, '.', '_' or '-'")
    if isinstance(share, bool) or not isinstance(share, int | float) or not math.isfinite(share) or not 0 <= share <= 100:
        problems.append(f"{where}.share={share!r} must be a percentage from 0 to 100")
    if not isinstance(model_id, str) or not model_id.strip():
        problems.append(f"{where}.modelId={model_id!r} must be the model or profile id the variant calls")
    prompt = item.get("prompt")
    template = arn = None
    if isinstance(prompt, Mapping) and set(prompt) == {"template"} and isinstance(prompt["template"], str) and prompt["template"].strip():
        template = prompt["template"]
    elif isinstance(prompt, Mapping) and set(prompt) == {"promptArn"} and isinstance(prompt["promptArn"], str) \
            and _PROMPT_ARN.match(prompt["promptArn"]):
        arn = prompt["promptArn"]
        managed_only = sorted({"system", "inferenceConfig", "additionalModelRequestFields"} & set(item))
        if managed_only:
            problems.append(
                f"{where} sets {managed_only} with a Prompt Management prompt; Converse refuses them with a prompt ARN: "
                "set them in the prompt version instead"
            )
    else:
        problems.append(
            f"{where}.prompt must be {{\"template\": \"...{{{{variable}}}}...\"}} or {{\"promptArn\": "
            "\"arn:aws:bedrock:<region>:<account>:prompt/<id>:<version>\"}}"
        )
    system = item.get("system")
    if system is not None and (not isinstance(system, str) or not system.strip()):
        problems.append(f"{where}.system must be a non-empty string when given")
    tier = None
    if SERVICE_TIER_MEMBER in item:
        raw_tier = item[SERVICE_TIER_MEMBER]
        if not isinstance(raw_tier, Mapping) or set(raw_tier) != {"type"}:
            problems.append(f"{where}.{SERVICE_TIER_MEMBER} must be {{\"type\": <tier>}} as Converse takes it, with "
                            f"<tier> one of {', '.join(repr(t) for t in SERVICE_TIERS)}")
        else:
            try:
                tier = checked_service_tier(raw_tier["type"])
            except RequestError as error:
                problems.append(f"{where}.{SERVICE_TIER_MEMBER}.type: {error}")
    config = item.get("inferenceConfig") or {}
    fields = item.get("additionalModelRequestFields") or {}
    if len(problems) == before:
        try:  # the Converse checks every other request uses
            build_converse_request(str(model_id), prompt="x", inference_config=config, additional_fields=fields)
        except RequestError as error:
            problems.append(f"{where}: {error}")
    if len(problems) > before:
        return None
    return Variant(str(name), float(share), str(model_id), template, arn, system, dict(config), dict(fields),  # type: ignore[arg-type]
                   tier)


def _uniform(salt: str, variant: str, unit_id: str) -> float:
    """A hash of (salt, variant, unit) as a number in (0, 1), the same in every process (no PYTHONHASHSEED)."""
    digest = hashlib.blake2b(f"{salt}\x1f{variant}\x1f{unit_id}".encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / 2**64


def _kind(value: Any) -> str:
    """What a wrong argument is, by type only: its content may be a prompt or a user's data, which an
    error (and so a log line) must not carry."""
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _check_experiment(experiment: Any) -> None:
    if not isinstance(experiment, Experiment):
        raise TypeError(f"experiment is {_kind(experiment)}; pass an Experiment: "
                        "Experiment.from_config(document) or ExperimentSource(...).get()")


def _check_unit(unit_id: Any) -> None:
    if not isinstance(unit_id, str) or not unit_id:
        raise ValueError(f"unit_id is {'empty' if unit_id == '' else _kind(unit_id)}; pass a non-empty string: the user or "
                         "account id assignment sticks to")


def _check_variant(experiment: Experiment, variant: Any) -> None:
    if not isinstance(variant, Variant):
        raise TypeError(f"variant is {_kind(variant)}; pass the Variant assign() returned "
                        "(or experiment.variant(name))")
    if all(variant.name != v.name for v in experiment.variants):  # by name: a split change alters shares, not arms
        raise ValueError(f"variant {variant.name!r} is not one of experiment {experiment.name!r}'s variants "
                         f"{[v.name for v in experiment.variants]}; pass the Variant assign() returned for this experiment")


def assign(experiment: Experiment, unit_id: str) -> Variant:
    """The variant a user or account (`unit_id`) is in: deterministic, sticky, no state (see the module doc)."""
    _check_experiment(experiment)
    _check_unit(unit_id)
    best, best_score = None, -math.inf
    for variant in experiment.variants:
        if variant.share <= 0:
            continue
        score = -variant.share / math.log(_uniform(experiment.salt, variant.name, unit_id))
        if score > best_score:
            best, best_score = variant, score
    assert best is not None  # from_config requires a positive share
    return best


def unit_key(experiment: Experiment, unit_id: str) -> str:
    """A pseudonymous id for logs: a salted hash, so the verdict can count users without their ids."""
    return hashlib.blake2b(f"{experiment.salt}\x1funit\x1f{unit_id}".encode(), digest_size=8).hexdigest()


def variant_dimensions(experiment: Experiment, variant: Variant | str) -> dict[str, str]:
    """{"Experiment": ..., "Variant": ...}, the `variant=` every metrics.emit_* takes."""
    name = variant if isinstance(variant, str) else variant.name
    return {metrics.EXPERIMENT_DIMENSION: experiment.name, metrics.VARIANT_DIMENSION: name}


def render_template(template: str, variables: Mapping[str, str]) -> str:
    """Fill {{name}} placeholders (Prompt Management's syntax); a missing variable is an error, not ''."""
    missing = sorted({m.group(1) for m in _VARIABLE.finditer(template)} - set(variables))
    if missing:
        raise RequestError(f"the prompt template needs variables {missing}; pass them in variables=")
    empty = sorted(m.group(1) for m in _VARIABLE.finditer(template) if variables[m.group(1)] is None)
    if empty:
        raise RequestError(f"variables {empty} are None; the prompt would say 'None': pass text")
    return _VARIABLE.sub(lambda m: str(variables[m.group(1)]), template)


def build_request(
    experiment: Experiment,
    variant: Variant,
    *,
    variables: Mapping[str, str] | None = None,
    messages: Sequence[Mapping[str, Any]] | None = None,
    latency: str | None = None,
    request_metadata: Mapping[str, str] | None = None,
    service_tier: str | None = None,
) -> dict[str, Any]:
    """Converse keyword arguments for `variant`: its model, prompt and sampling, and requestMetadata
    tagged with the experiment and variant (so invocation logs say which arm served each call).
    The tier asked for is the variant's own (its serviceTier in the document), so an experiment can
    compare tiers; for a variant that names none it is `service_tier`, the caller's. Default: none
    (served at default). Each variant's guards judge its own latency against the one limit, so a
    faster tier in one arm biases no guard; the verdict compares the arms' latency, tier included.

    A template variant renders its template with `variables` as the user message (after any
    `messages`); a Prompt Management variant sends the prompt ARN as modelId with promptVariables
    (`messages`, if any, are appended after the prompt's own).
    """
    _check_experiment(experiment)
    _check_variant(experiment, variant)
    if service_tier is not None:
        checked_service_tier(service_tier)  # refused even when the variant names its own tier
    service_tier = variant.service_tier if variant.service_tier is not None else service_tier
    for name, value in (("variables", variables), ("request_metadata", request_metadata)):
        if value is not None and not isinstance(value, Mapping):
            raise RequestError(f"{name} is {_kind(value)}; pass a dict of name to text")
    variables = dict(variables or {})
    reserved = sorted(RESERVED_METADATA & set(request_metadata or {}))
    if reserved:
        raise RequestError(f"request_metadata sets {reserved}, which build_request writes itself (the experiment and "
                           "the assigned variant); use other keys")
    metadata = {**(request_metadata or {}), "experiment": experiment.name, "variant": variant.name}
    if len(metadata) > MAX_REQUEST_METADATA:
        raise RequestError(
            f"requestMetadata would hold {len(metadata)} pairs; Converse accepts at most {MAX_REQUEST_METADATA}, two of "
            "which tag the experiment and variant: pass at most 14"
        )
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise RequestError("requestMetadata keys and values must be strings")
    if variant.prompt_arn is not None:
        request: dict[str, Any] = {"modelId": variant.prompt_arn}
        if variables:
            request["promptVariables"] = {k: {"text": str(v)} for k, v in variables.items()}
        if messages:
            request["messages"] = build_converse_request(variant.model_id, messages=messages)["messages"]
        if latency is not None:
            request["performanceConfig"] = build_converse_request(variant.model_id, prompt="x", latency=latency)["performanceConfig"]
        if service_tier is not None:
            request[SERVICE_TIER_MEMBER] = {"type": checked_service_tier(service_tier)}
    else:
        assert variant.template is not None
        text = render_template(variant.template, variables)
        turns = [*(messages or []), {"role": "user", "content": [{"text": text}]}]
        request = build_converse_request(
            variant.model_id,
            messages=turns,
            system=variant.system,
            inference_config=variant.inference_config or None,
            additional_fields=variant.additional_fields or None,
            latency=latency,
            service_tier=service_tier,
        )
    request["requestMetadata"] = metadata
    return request


def record_call(
    experiment: Experiment,
    variant: Variant,
    unit_id: str,
    result: Any,
    *,
    request: Mapping[str, Any] | None = None,
    dimensions: Mapping[str, str] | None = None,
) -> metrics.CallMetrics:
    """Publish one call's metrics per model and per variant (one EMF line; the verdict reads it back)."""
    _check_experiment(experiment)
    _check_variant(experiment, variant)
    _check_unit(unit_id)
    if result is None or not hasattr(result, "latency_ms"):
        raise TypeError(f"result is {_kind(result)}; pass the ConverseResult converse() returned")
    properties: dict[str, Any] = {"Unit": unit_key(experiment, unit_id)}
    service_ms = getattr(result, "service_latency_ms", None)
    if service_ms is not None:
        properties["ServiceLatencyMs"] = service_ms
    return metrics.emit_call(
        result,
        model_id=variant.model_id,
        request=request,  # maxTokens (the reservation) is read from it; a managed prompt's is not known here
        dimensions=dimensions,
        variant=variant_dimensions(experiment, variant),
        properties=properties,
    )


def record_error(
    experiment: Experiment,
    variant: Variant,
    unit_id: str,
    error: BaseException,
    *,
    dimensions: Mapping[str, str] | None = None,
) -> None:
    """Count one failed call for the model and the variant (the guard alarms' error rate reads it)."""
    _check_experiment(experiment)
    _check_variant(experiment, variant)
    _check_unit(unit_id)
    if not isinstance(error, BaseException):
        raise TypeError(f"error is {_kind(error)}; pass the exception the call raised")
    response = getattr(error, "response", None) or {}
    code = (response.get("Error") or {}).get("Code") or type(error).__name__
    metrics.emit_call_error(
        variant.model_id,
        error_code=code,
        throttled=is_throttle(error),
        dimensions=dimensions,
        variant=variant_dimensions(experiment, variant),
        properties={"Unit": unit_key(experiment, unit_id)},
    )


def record_outcome(
    experiment: Experiment,
    unit_id: str,
    outcome: str,
    *,
    value: int = 1,
    dimensions: Mapping[str, str] | None = None,
) -> Variant:
    """Record an outcome event (thumbs_up, thumbs_down, escalation, resolution) for a user, with one
    call: the variant is the one `assign` gives (sticky), so the caller needs only the user's id."""
    variant = assign(experiment, unit_id)
    metrics.emit_outcome(
        outcome,
        model_id=variant.model_id,
        value=value,
        dimensions=dimensions,
        variant=variant_dimensions(experiment, variant),
        properties={"Unit": unit_key(experiment, unit_id)},
    )
    return variant


def call_variant(
    client: Any,
    experiment: Experiment,
    unit_id: str,
    *,
    variables: Mapping[str, str] | None = None,
    messages: Sequence[Mapping[str, Any]] | None = None,
    latency: str | None = None,
    request_metadata: Mapping[str, str] | None = None,
    dimensions: Mapping[str, str] | None = None,
    service_tier: str | None = None,
) -> tuple[Variant, Any]:
    """Assign, build, call Converse and record: the whole experiment path of one request.

    service_tier: the tier of a variant whose document names none (a variant's own serviceTier wins);
    the call's metrics record the tier asked for and the tier that served it.
    Returns (variant, ConverseResult). A failed call is counted (CallErrors) and re-raised.
    """
    variant = assign(experiment, unit_id)
    request = build_request(experiment, variant, variables=variables, messages=messages, latency=latency,
                            request_metadata=request_metadata, service_tier=service_tier)
    try:
        result = converse(client, request)
    except Exception as error:
        record_error(experiment, variant, unit_id, error, dimensions=dimensions)
        raise
    record_call(experiment, variant, unit_id, result, request=request, dimensions=dimensions)
    return variant, result


# ---- fetching the configuration ---------------------------------------------------------------


def extension_fetcher(
    application: str, environment: str, profile: str, *, port: int = EXTENSION_PORT, timeout: float = 2.0
) -> Callable[[], bytes]:
    """Read the configuration from the AppConfig Lambda extension (or agent) on localhost."""
    for name, value in (("application", application), ("environment", environment), ("profile", profile)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name}={value!r} must be the AppConfig {name} id or name (environment_variables() has them)")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"port={port!r} must be a TCP port 1..65535 (the extension's default is {EXTENSION_PORT})")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < math.inf:
        raise ValueError(f"timeout={timeout!r} must be a finite number of seconds > 0")
    url = f"http://localhost:{port}/applications/{application}/environments/{environment}/configurations/{profile}"

    def fetch() -> bytes:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - a fixed localhost URL
            return bytes(response.read())

    return fetch


def appconfigdata_fetcher(client: Any, application: str, environment: str, profile: str) -> Callable[[], bytes | None]:
    """Read the configuration with the appconfigdata API (a session token chain; None when unchanged).

    A failed call ends the chain: the token it was given may be spent or expired (a token is good for
    24 hours and once), so the next fetch starts a new session instead of failing forever.
    """
    state: dict[str, str | None] = {"token": None}

    def fetch() -> bytes | None:
        try:
            if state["token"] is None:
                state["token"] = client.start_configuration_session(
                    ApplicationIdentifier=application,
                    EnvironmentIdentifier=environment,
                    ConfigurationProfileIdentifier=profile,
                    RequiredMinimumPollIntervalInSeconds=15,
                )["InitialConfigurationToken"]
            response = client.get_latest_configuration(ConfigurationToken=state["token"])
        except Exception:
            state["token"] = None
            raise
        state["token"] = response["NextPollConfigurationToken"]
        content = response["Configuration"].read()
        return bytes(content) or None  # empty: unchanged since the last call

    return fetch


class ExperimentSource:
    """The current Experiment, cached; refreshed off the request path.

    The first `get()` loads synchronously (at cold start, module scope in Lambda). Later calls
    return the cached experiment at once and, when it is older than `max_age_seconds`, start one
    background refresh. A fetch error or an invalid document keeps the last good experiment (and
    is counted in `errors`, last one in `last_error`).
    """

    def __init__(self, fetch: Callable[[], bytes | str | Mapping[str, Any] | None], *, max_age_seconds: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not callable(fetch):
            raise TypeError(f"fetch={fetch!r:.80} must be a function returning the document: extension_fetcher(...) "
                            "or appconfigdata_fetcher(...)")
        if isinstance(max_age_seconds, bool) or not isinstance(max_age_seconds, int | float) \
                or not 0 < max_age_seconds < math.inf:
            raise ValueError(f"max_age_seconds={max_age_seconds!r} must be a finite number of seconds > 0 (a split "
                             "change reaches the process within it)")
        self._fetch, self.max_age_seconds, self._clock = fetch, float(max_age_seconds), clock
        self._experiment: Experiment | None = None
        self._loaded_at = -math.inf
        self._lock = threading.Lock()
        self._refreshing: threading.Thread | None = None
        self.errors = 0
        self.last_error: BaseException | None = None

    @classmethod
    def from_environment(cls, **options: Any) -> ExperimentSource:
        """From the variables PromptExperiment.environment_variables() sets, read through the Lambda extension."""
        names = ("EXPERIMENT_APPLICATION_ID", "EXPERIMENT_ENVIRONMENT_ID", "EXPERIMENT_PROFILE_ID")
        missing = [n for n in names if not os.environ.get(n)]
        if missing:
            raise ExperimentConfigError(
                f"environment variables {missing} are not set; give the function PromptExperiment.environment_variables() "
                "(PromptExperiment.add_to_function(fn) does it, with the extension layer and the grant)")
        text = os.environ.get("AWS_APPCONFIG_EXTENSION_HTTP_PORT", str(EXTENSION_PORT))
        if not text.isdigit():
            raise ExperimentConfigError(f"AWS_APPCONFIG_EXTENSION_HTTP_PORT={text!r} must be a port number")
        port = int(text)
        return cls(extension_fetcher(*(os.environ[n] for n in names), port=port), **options)

    def get(self) -> Experiment:
        if self._experiment is None:
            self.refresh()
            if self._experiment is None:
                raise ExperimentConfigError(f"no experiment configuration could be loaded: {self.last_error!r}")
            return self._experiment
        if self._clock() - self._loaded_at >= self.max_age_seconds:
            with self._lock:
                if self._refreshing is None or not self._refreshing.is_alive():
                    self._refreshing = threading.Thread(target=self.refresh, daemon=True, name="experiment-refresh")
                    self._refreshing.start()
        return self._experiment

    def refresh(self) -> None:
        """Fetch and parse now (the background thread runs this)."""
        try:
            content = self._fetch()
            if content is not None:
                self._experiment = Experiment.from_config(content)
            self._loaded_at = self._clock()
        except Exception as error:
            self.errors += 1
            self.last_error = error
            self._loaded_at = self._clock()  # retry after max_age, not on every request
