"""Sticky assignment over 100,000 synthetic users: the same variant in every call and process, shares
within statistical tolerance, a raised share moves nobody out, bad documents refused; the Converse
request, the variant-tagged metrics, outcomes in one call, and the cached configuration."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest
from pacer_runtime import metrics
from pacer_runtime.bedrock import ConverseResult, RequestError
from pacer_runtime.experiment import (
    Experiment,
    ExperimentConfigError,
    ExperimentSource,
    Variant,
    assign,
    build_request,
    extension_fetcher,
    record_call,
    record_error,
    record_outcome,
    render_template,
    unit_key,
)

ROOT = Path(__file__).resolve().parents[2]
USERS = [f"user-{i}" for i in range(100_000)]
NOVA, HAIKU = "us.amazon.nova-lite-v1:0", "us.anthropic.claude-3-5-haiku-20241022-v1:0"
PROMPT_ARN = "arn:aws:bedrock:us-east-1:111122223333:prompt/PROMPT12AB:3"


def document(*shares: float, names=("control", "concise", "steps"), salt="s1", **extra) -> dict:
    variants = [
        {"name": name, "share": share, "modelId": NOVA if i % 2 == 0 else HAIKU,
         "prompt": {"template": f"{name}: {{{{question}}}}"}, "inferenceConfig": {"maxTokens": 200}}
        for i, (name, share) in enumerate(zip(names, shares, strict=False))
    ]
    return {"experiment": "support", "salt": salt, "control": "control", "variants": variants, **extra}


def assignments(doc: dict) -> list[str]:
    experiment = Experiment.from_config(doc)
    return [assign(experiment, user).name for user in USERS]


@pytest.fixture(scope="module")
def split_90_10() -> list[str]:
    return assignments(document(90, 10))


# ---- stickiness and shares --------------------------------------------------------------------


def test_every_user_keeps_their_variant_across_calls_and_a_reparsed_document(split_90_10):
    again = assignments(json.loads(json.dumps(document(90, 10))))
    assert again == split_90_10


def test_another_process_assigns_every_user_the_same_variant(split_90_10, tmp_path):
    """Assignment hashes with blake2b, not Python's per-process salted hash(): a fresh interpreter agrees."""
    script = tmp_path / "assign.py"
    script.write_text(
        "import json, sys\n"
        f"sys.path.insert(0, {str(ROOT / 'lambda')!r})\n"
        "from pacer_runtime.experiment import Experiment, assign\n"
        "e = Experiment.from_config(sys.stdin.read())\n"
        "print(''.join(assign(e, f'user-{i}').name[0] for i in range(100_000)))\n"
    )
    out = subprocess.run([sys.executable, str(script)], input=json.dumps(document(90, 10)), capture_output=True,
                         text=True, check=True, env={"PYTHONHASHSEED": "random", "PATH": ""})
    assert out.stdout.strip() == "".join(name[0] for name in split_90_10)


@pytest.mark.parametrize("shares", [(90, 10), (50, 50), (80, 10, 10), (33.34, 33.33, 33.33), (99, 1)])
def test_observed_shares_are_within_statistical_tolerance_of_the_split(shares):
    counts = Counter(assignments(document(*shares)))
    n = len(USERS)
    for (name, share) in zip(("control", "concise", "steps"), shares, strict=False):
        p = share / 100
        tolerance = 4.5 * math.sqrt(n * p * (1 - p))  # 4.5 sigma: a false failure about once in 150,000 runs
        assert abs(counts[name] - n * p) <= tolerance, (name, counts[name], n * p)
    assert sum(counts.values()) == n  # disjoint and complete: every user has exactly one variant


def test_raising_a_variant_from_10_to_20_percent_moves_no_existing_user_out(split_90_10):
    after = assignments(document(80, 20))
    stayed = [b for a, b in zip(split_90_10, after, strict=True) if a == "concise"]
    assert stayed and all(b == "concise" for b in stayed)
    moved = sum(a != b for a, b in zip(split_90_10, after, strict=True))
    # Only control users move, into concise, about 10% of all users: the minimum this change needs.
    assert all(a == "control" and b == "concise" for a, b in zip(split_90_10, after, strict=True) if a != b)
    assert abs(moved - 10_000) <= 4.5 * math.sqrt(100_000 * 0.1 * 0.9)


def test_with_three_variants_a_user_moves_only_to_a_variant_whose_share_grew_relatively_more():
    """Rendezvous scores scale with new/old share, so a user moves from a to b only if b's ratio is
    higher: the variant with the largest rise (concise, x2.5) loses nobody, and no user moves into a
    variant from one that shrank less (steps halves, control loses an eighth)."""
    before = assignments(document(80, 10, 10))
    after = assignments(document(70, 25, 5))
    ratio = {"control": 70 / 80, "concise": 25 / 10, "steps": 5 / 10}
    moves = Counter((a, b) for a, b in zip(before, after, strict=True) if a != b)
    assert moves and all(ratio[b] > ratio[a] for a, b in moves)
    assert all(b == "concise" for a, b in zip(before, after, strict=True) if a == "concise")


def test_zero_share_variants_get_nobody_and_the_fallback_document_sends_everyone_to_control():
    assert set(assignments(document(100, 0, 0))) == {"control"}


def test_a_new_salt_reshuffles_users():
    before, after = assignments(document(50, 50)), assignments(document(50, 50, salt="s2"))
    changed = sum(a != b for a, b in zip(before, after, strict=True)) / len(USERS)
    assert 0.45 < changed < 0.55


# ---- bad documents -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (document(90, 20), r"shares sum to 110 \(control 90 \+ concise 20\), not 100"),
        (document(50, 40), r"shares sum to 90"),
        (document(50, 50, names=("control", "control")), r"variant names \['control'\] appear more than once"),
        (document(100), "at least two variants"),
        (document(0, 100), "control 'control' has share 0"),
        (document(-10, 110), r"share=-10 must be a percentage"),
        (document(math.nan, 100), r"share=nan must be a percentage"),
        (document(True, 99), r"share=True must be a percentage"),
        (document(50, 50, control="nobody"), r"control='nobody' must name one of the variants"),
        (document(50, 50, salt=""), "salt='' must be a non-empty string"),
        (document(50, 50, experiment="has space"), "experiment='has space' must be 1-64"),
        ({**document(50, 50), "variants": "x"}, "variants must be a list"),
        ("{not json", "not JSON"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_bad_documents_are_refused_with_the_numbers(doc, message):
    with pytest.raises(ExperimentConfigError, match=message):
        Experiment.from_config(doc if isinstance(doc, str | list) else json.dumps(doc) if isinstance(doc, dict) else doc)


def test_bad_variant_fields_are_refused():
    doc = document(50, 50)
    doc["variants"][0]["prompt"] = {"promptArn": "not-an-arn"}
    doc["variants"][1]["inferenceConfig"] = {"temperature": 3}
    doc["variants"][1]["color"] = "red"
    with pytest.raises(ExperimentConfigError) as error:
        Experiment.from_config(doc)
    text = str(error.value)
    assert "variants[0].prompt must be" in text and "unknown fields ['color']" in text
    doc = document(50, 50)
    doc["variants"][1]["prompt"] = {"promptArn": PROMPT_ARN}
    with pytest.raises(ExperimentConfigError, match=r"sets \['inferenceConfig'\] with a Prompt Management prompt"):
        Experiment.from_config(doc)


@pytest.mark.parametrize("unit", ["", None, 42])
def test_a_unit_id_must_be_a_non_empty_string(unit):
    with pytest.raises(ValueError, match="unit_id"):
        assign(Experiment.from_config(document(50, 50)), unit)


# ---- the request ---------------------------------------------------------------------------


def test_a_template_variant_builds_its_model_prompt_sampling_and_tags_the_call():
    experiment = Experiment.from_config(document(50, 50))
    request = build_request(experiment, experiment.variant("concise"), variables={"question": "Where is my order?"},
                            request_metadata={"tenant": "acme"})
    assert request["modelId"] == HAIKU
    assert request["messages"] == [{"role": "user", "content": [{"text": "concise: Where is my order?"}]}]
    assert request["inferenceConfig"] == {"maxTokens": 200}
    assert request["requestMetadata"] == {"tenant": "acme", "experiment": "support", "variant": "concise"}


def test_a_managed_prompt_variant_sends_the_prompt_arn_with_prompt_variables_only():
    doc = document(50, 50)
    doc["variants"][1] = {"name": "managed", "share": 50, "modelId": HAIKU, "prompt": {"promptArn": PROMPT_ARN}}
    experiment = Experiment.from_config(doc)
    request = build_request(experiment, experiment.variant("managed"), variables={"question": "Hi"})
    assert request == {"modelId": PROMPT_ARN, "promptVariables": {"question": {"text": "Hi"}},
                       "requestMetadata": {"experiment": "support", "variant": "managed"}}


def test_request_metadata_is_capped_at_16_pairs_and_templates_need_every_variable():
    experiment = Experiment.from_config(document(50, 50))
    variant = experiment.variant("control")
    build_request(experiment, variant, variables={"question": "q"}, request_metadata={f"k{i}": "v" for i in range(14)})
    with pytest.raises(RequestError, match="at most 16"):
        build_request(experiment, variant, variables={"question": "q"}, request_metadata={f"k{i}": "v" for i in range(15)})
    with pytest.raises(RequestError, match=r"needs variables \['question'\]"):
        build_request(experiment, variant)
    assert render_template("{{ a }} and {{b}}", {"a": "1", "b": "2"}) == "1 and 2"


# ---- service tiers per variant ----------------------------------------------------------------


def tiered(tier, **variant) -> dict:
    doc = document(50, 50)
    doc["variants"][1] = {**doc["variants"][1], "modelId": NOVA, "serviceTier": tier, **variant}
    return doc


@pytest.mark.parametrize(
    ("tier", "message"),
    [
        ({"type": "standard"}, r"variants\[1\]\.serviceTier\.type: service_tier='standard' must be one of 'priority', "
                               r"'default', 'flex', 'reserved' \(Bedrock spells standard 'default'\)"),
        ({"type": "Priority"}, r"variants\[1\]\.serviceTier\.type: service_tier='Priority' must be one of"),
        ({"type": None}, r"variants\[1\]\.serviceTier\.type: service_tier \(null\) must be one of"),
        ("priority", r"variants\[1\]\.serviceTier must be \{\"type\": <tier>\} as Converse takes it"),
        ({"type": "flex", "x": 1}, r"variants\[1\]\.serviceTier must be \{\"type\": <tier>\}"),
    ],
)
def test_a_variants_tier_outside_botocores_four_is_refused_naming_the_variant_and_field(tier, message):
    with pytest.raises(ExperimentConfigError, match=message):
        Experiment.from_config(tiered(tier))


def test_the_variants_tier_is_sent_and_a_variant_naming_none_takes_the_callers():
    experiment = Experiment.from_config(tiered({"type": "priority"}))
    control, treatment = experiment.variant("control"), experiment.variant("concise")
    assert (control.service_tier, treatment.service_tier) == (None, "priority")
    assert "serviceTier" not in build_request(experiment, control, variables={"question": "q"})
    assert build_request(experiment, treatment, variables={"question": "q"})["serviceTier"] == {"type": "priority"}
    assert build_request(experiment, control, variables={"question": "q"}, service_tier="flex")["serviceTier"] == {"type": "flex"}
    assert build_request(experiment, treatment, variables={"question": "q"},
                         service_tier="flex")["serviceTier"] == {"type": "priority"}
    with pytest.raises(RequestError, match="service_tier='standard' must be one of"):  # refused though unused
        build_request(experiment, treatment, variables={"question": "q"}, service_tier="standard")


def test_a_variants_calls_record_the_tier_asked_for_and_the_tier_that_served_them(capsys):
    """The treatment asks for its Reserved tier reservation, which holds one call's 200 output tokens a
    minute; the second call overflows to default, and its variant's metrics say so."""
    from genai_pacer.testing import BedrockEmulator, ManualClock, ModelSpec
    from pacer_runtime.experiment import call_variant

    spec = ModelSpec(NOVA, tpm_quota=1_000_000, reserved_input_tpm=1_000, reserved_output_tpm=200, answer_tokens=20,
                     jitter=0)
    experiment = Experiment.from_config(tiered({"type": "reserved"}))
    users = [u for u in USERS[:100] if assign(experiment, u).name == "concise"][:2]
    control_user = next(u for u in USERS if assign(experiment, u).name == "control")
    with BedrockEmulator([spec], clock=ManualClock(instant=True), seed=1) as bedrock:
        client = bedrock.client()
        served = [call_variant(client, experiment, user, variables={"question": "q"})[1].served_tier for user in users]
        _, untiered = call_variant(client, experiment, control_user, variables={"question": "q"})
    assert served == ["reserved", "default"] and untiered.served_tier is None
    calls = [line for line in lines(capsys) if "InputTokens" in line]
    assert [(c["Variant"], c["RequestedTier"], c.get("ServedTier"), c.get("ServedBelowRequestedTier")) for c in calls] == [
        ("concise", "reserved", "reserved", 0), ("concise", "reserved", "default", 1), ("control", "default", None, None)]
    (directive,) = calls[1]["_aws"]["CloudWatchMetrics"]
    assert ["ModelId", "Experiment", "Variant"] in directive["Dimensions"]
    assert {"Name": "ServedBelowRequestedTier", "Unit": "Count"} in directive["Metrics"]


# ---- metrics and outcomes ----------------------------------------------------------------------


def result(**overrides) -> ConverseResult:
    values = dict(text="ok", input_tokens=10, output_tokens=20, cache_read_tokens=0, cache_write_tokens=0,
                  stop_reason="end_turn", latency_ms=812.0, service_latency_ms=700, served_latency="standard")
    return ConverseResult(**{**values, **overrides})


def lines(capsys) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_a_call_is_published_per_model_and_again_with_experiment_and_variant(capsys):
    experiment = Experiment.from_config(document(50, 50))
    variant = experiment.variant("concise")
    request = build_request(experiment, variant, variables={"question": "q"})
    record_call(experiment, variant, "user-1", result(), request=request, dimensions={"FunctionName": "fn"})
    (line,) = lines(capsys)
    assert line["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [
        ["ModelId"], ["ModelId", "FunctionName"],
        ["ModelId", "Experiment", "Variant"], ["ModelId", "FunctionName", "Experiment", "Variant"],
    ]
    assert (line["Experiment"], line["Variant"], line["ModelId"]) == ("support", "concise", HAIKU)
    assert line["LatencyMs"] == 812.0 and line["ReservedTokens"] == 210 and line["ServiceLatencyMs"] == 700
    assert line["Unit"] == unit_key(experiment, "user-1") and "user-1" not in json.dumps(line)


def test_model_level_metrics_are_unchanged_outside_an_experiment(capsys):
    metrics.emit_call(result(), model_id=NOVA, max_tokens=100, dimensions={"FunctionName": "fn"})
    (line,) = lines(capsys)
    assert line["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["ModelId"], ["ModelId", "FunctionName"]]
    assert "Variant" not in line


def test_errors_and_outcomes_are_counted_for_the_users_variant_in_one_call(capsys):
    from botocore.exceptions import ClientError

    experiment = Experiment.from_config(document(50, 50))
    user = "user-7"
    variant = record_outcome(experiment, user, "thumbs_up")
    assert variant == assign(experiment, user)
    throttle = ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "Converse")
    record_error(experiment, variant, user, throttle)
    outcome, error = lines(capsys)
    assert outcome["ThumbsUp"] == 1 and outcome["Variant"] == variant.name and outcome["Outcome"] == "thumbs_up"
    assert error["CallErrors"] == 1 and error["Throttles"] == 1 and error["ErrorCode"] == "ThrottlingException"
    assert ["ModelId", "Experiment", "Variant"] in error["_aws"]["CloudWatchMetrics"][0]["Dimensions"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda e: record_outcome(e, "u", "like"), "outcome='like' must be one of"),
        (lambda e: record_outcome(e, "u", "thumbs_up", value=0), "value=0 must be a whole number"),
        (lambda e: metrics.emit_outcome("thumbs_up", model_id="m", variant={"Variant": "x"}), "variant=.* must be"),
        (lambda e: metrics.emit_throttle("m", variant={"Experiment": "e", "Variant": "v"},
                                         dimensions={"Variant": "w"}), r"dimensions \['Variant'\] are set by variant="),
        (lambda e: metrics.emit_call_error("m", error_code=""), "error_code='' must name the error"),
    ],
)
def test_bad_metric_and_outcome_input_is_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call(Experiment.from_config(document(50, 50)))


# ---- the cached configuration ---------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_source_loads_once_then_refreshes_in_the_background_and_keeps_the_last_good_document():
    documents = [json.dumps(document(90, 10)), json.dumps(document(80, 20)), "{broken"]
    fetched, gate = threading.Event(), threading.Event()
    gate.set()

    def fetch() -> str:
        fetched.set()
        gate.wait(5)  # a slow AppConfig: a refresh on the request path would hold get() here
        return documents.pop(0) if len(documents) > 1 else documents[0]

    clock = Clock()
    source = ExperimentSource(fetch, max_age_seconds=30, clock=clock)
    assert source.get().shares == {"control": 90, "concise": 10}  # first load: synchronous
    fetched.clear()
    assert source.get().shares == {"control": 90, "concise": 10}  # fresh: no fetch
    assert not fetched.is_set()
    gate.clear()
    clock.now = 31
    assert source.get().shares == {"control": 90, "concise": 10}  # stale: served at once, refreshed behind
    assert fetched.wait(5) and source._refreshing is not None and source._refreshing.is_alive()
    gate.set()
    source._refreshing.join(5)
    assert source.get().shares == {"control": 80, "concise": 20}
    clock.now = 62
    source.get()
    source._refreshing.join(5)
    assert source.get().shares == {"control": 80, "concise": 20}  # the broken document is refused
    assert source.errors == 1 and isinstance(source.last_error, ExperimentConfigError)


def test_the_source_fails_loudly_when_nothing_was_ever_loaded_and_reads_the_extension(monkeypatch):
    source = ExperimentSource(lambda: (_ for _ in ()).throw(OSError("connection refused")))
    with pytest.raises(ExperimentConfigError, match="connection refused"):
        source.get()
    with pytest.raises(ValueError, match="max_age_seconds=0"):
        ExperimentSource(lambda: "{}", max_age_seconds=0)
    monkeypatch.delenv("EXPERIMENT_PROFILE_ID", raising=False)
    with pytest.raises(ExperimentConfigError, match="EXPERIMENT_APPLICATION_ID"):
        ExperimentSource.from_environment()


def test_the_extension_fetcher_reads_the_appconfig_path_on_localhost(monkeypatch):
    import http.server

    body = json.dumps(document(50, 50)).encode()
    paths = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            paths.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            """Quiet: the tests read the requests, not the server log."""

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.handle_request, daemon=True)
    thread.start()
    for name, value in (("EXPERIMENT_APPLICATION_ID", "app1"), ("EXPERIMENT_ENVIRONMENT_ID", "env1"),
                        ("EXPERIMENT_PROFILE_ID", "prof1"), ("AWS_APPCONFIG_EXTENSION_HTTP_PORT", str(server.server_port))):
        monkeypatch.setenv(name, value)
    try:
        assert ExperimentSource.from_environment().get().name == "support"
    finally:
        thread.join(5)
        server.server_close()
    assert paths == ["/applications/app1/environments/env1/configurations/prof1"]


def test_the_appconfigdata_fetcher_follows_the_token_chain_and_keeps_the_document_when_unchanged():
    import boto3
    from botocore.response import StreamingBody
    from botocore.stub import Stubber
    from pacer_runtime.experiment import appconfigdata_fetcher

    client = boto3.client("appconfigdata", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    body = json.dumps(document(70, 30)).encode()

    def streamed(data: bytes) -> StreamingBody:
        import io

        return StreamingBody(io.BytesIO(data), len(data))

    with Stubber(client) as stub:
        stub.add_response("start_configuration_session", {"InitialConfigurationToken": "t0"},
                          {"ApplicationIdentifier": "app", "EnvironmentIdentifier": "env",
                           "ConfigurationProfileIdentifier": "prof", "RequiredMinimumPollIntervalInSeconds": 15})
        stub.add_response("get_latest_configuration", {"NextPollConfigurationToken": "t1", "Configuration": streamed(body)},
                          {"ConfigurationToken": "t0"})
        stub.add_response("get_latest_configuration", {"NextPollConfigurationToken": "t2", "Configuration": streamed(b"")},
                          {"ConfigurationToken": "t1"})
        clock = Clock()
        source = ExperimentSource(appconfigdata_fetcher(client, "app", "env", "prof"), clock=clock)
        assert source.get().shares == {"control": 70, "concise": 30}
        clock.now = 60
        source.get()
        source._refreshing.join(5)
        assert source.get().shares == {"control": 70, "concise": 30} and source.errors == 0
        stub.assert_no_pending_responses()


def test_the_appconfigdata_fetcher_starts_a_new_session_after_a_failed_call_and_serves_the_new_document():
    """The token a failed call was given may be spent or expired: reusing it made every later refresh
    fail forever (one throttle froze the split a process served)."""
    import io

    import boto3
    from botocore.response import StreamingBody
    from botocore.stub import Stubber
    from pacer_runtime.experiment import appconfigdata_fetcher

    client = boto3.client("appconfigdata", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    session = {"ApplicationIdentifier": "app", "EnvironmentIdentifier": "env", "ConfigurationProfileIdentifier": "prof",
               "RequiredMinimumPollIntervalInSeconds": 15}

    def streamed(data: dict) -> StreamingBody:
        body = json.dumps(data).encode()
        return StreamingBody(io.BytesIO(body), len(body))

    with Stubber(client) as stub:
        stub.add_response("start_configuration_session", {"InitialConfigurationToken": "t0"}, session)
        stub.add_response("get_latest_configuration",
                          {"NextPollConfigurationToken": "t1", "Configuration": streamed(document(70, 30))},
                          {"ConfigurationToken": "t0"})
        stub.add_client_error("get_latest_configuration", "ThrottlingException", http_status_code=429,
                              expected_params={"ConfigurationToken": "t1"})
        stub.add_response("start_configuration_session", {"InitialConfigurationToken": "s0"}, session)
        stub.add_response("get_latest_configuration",
                          {"NextPollConfigurationToken": "s1", "Configuration": streamed(document(50, 50))},
                          {"ConfigurationToken": "s0"})
        clock = Clock()
        source = ExperimentSource(appconfigdata_fetcher(client, "app", "env", "prof"), clock=clock)
        assert source.get().shares == {"control": 70, "concise": 30}
        clock.now = 60
        source.refresh()  # the throttled call: the last good document stays
        assert source.errors == 1 and source.get().shares == {"control": 70, "concise": 30}
        clock.now = 120
        source.refresh()
        assert source.get().shares == {"control": 50, "concise": 50} and source.errors == 1
        stub.assert_no_pending_responses()


# ---- bad arguments found by a new-user sweep: each was accepted, or failed deep with an AttributeError ----


def test_a_document_with_an_unknown_top_level_field_is_refused_like_the_schema_refuses_it():
    with pytest.raises(ExperimentConfigError, match=r"unknown fields \['split'\]; it takes \['control', 'experiment'"):
        Experiment.from_config(document(50, 50, split=[50, 50]))


def test_one_bad_variant_is_reported_once_not_again_as_a_missing_control():
    doc = document(50, 50)
    doc["variants"][0]["share"] = "50"
    with pytest.raises(ExperimentConfigError) as error:
        Experiment.from_config(doc)
    assert "variants[0].share='50'" in str(error.value) and "control=" not in str(error.value)


@pytest.mark.parametrize(
    ("call", "kind", "message"),
    [
        (lambda e: assign(None, "u"), TypeError, "experiment is a NoneType; pass an Experiment"),
        (lambda e: assign(document(50, 50), "u"), TypeError, r"experiment is a dict; pass an Experiment: Experiment.from_config"),
        (lambda e: build_request(e, "control", variables={"question": "q"}), TypeError,
         "variant is a str; pass the Variant assign"),
        (lambda e: build_request(e, Variant("other", 50, NOVA, template="x")), ValueError,
         r"variant 'other' is not one of experiment 'support''s variants"),
        (lambda e: build_request(e, e.variant("control"), variables=["question"]), RequestError,
         r"variables is a list; pass a dict"),
        (lambda e: build_request(e, e.variant("control"), variables={"question": None}), RequestError,
         r"variables \['question'\] are None; the prompt would say 'None'"),
        (lambda e: build_request(e, e.variant("control"), variables={"question": "q"}, request_metadata={"variant": "b"}),
         RequestError, r"request_metadata sets \['variant'\], which build_request writes itself"),
        (lambda e: record_call(e, e.variant("control"), "u", None), TypeError, "result is a NoneType; pass the ConverseResult"),
        (lambda e: record_call(e, e.variant("control"), None, result()), ValueError, "unit_id is a NoneType; pass a non-empty string"),
        (lambda e: record_call(e, "control", "u", result()), TypeError, "variant is a str; pass the Variant"),
        (lambda e: record_error(e, e.variant("control"), "u", "throttled"), TypeError, "error is a str; pass the exception"),
        (lambda e: record_error(e, e.variant("control"), "", RuntimeError()), ValueError, "unit_id is empty; pass a non-empty string"),
        (lambda e: ExperimentSource(None), TypeError, "fetch=None must be a function"),
        (lambda e: ExperimentSource(lambda: "{}", max_age_seconds=math.inf), ValueError, "max_age_seconds=inf must be a finite"),
        (lambda e: ExperimentSource(lambda: "{}", max_age_seconds=math.nan), ValueError, "max_age_seconds=nan"),
        (lambda e: extension_fetcher("a", "e", "p", port=0), ValueError, "port=0 must be a TCP port"),
        (lambda e: extension_fetcher("a", "e", "p", port=True), ValueError, "port=True must be a TCP port"),
        (lambda e: extension_fetcher("a", "e", "p", timeout=-1), ValueError, "timeout=-1 must be a finite number"),
        (lambda e: extension_fetcher("", "e", "p"), ValueError, "application='' must be the AppConfig application id"),
    ],
)
def test_bad_runtime_arguments_are_refused_with_what_to_pass(call, kind, message):
    with pytest.raises(kind, match=message):
        call(Experiment.from_config(document(50, 50)))


SECRET = "card 4111 1111 1111 1111, my order 7781"


@pytest.mark.parametrize(
    "call",
    [
        lambda e: build_request(e, e.variant("control"), variables=SECRET),
        lambda e: build_request(e, e.variant("control"), variables=[SECRET]),
        lambda e: build_request(e, e.variant("control"), variables={"question": "q"}, request_metadata=SECRET),
        lambda e: build_request(e, SECRET, variables={"question": "q"}),
        lambda e: assign(SECRET, "u"),
        lambda e: record_call(e, e.variant("control"), "u", SECRET),
        lambda e: record_error(e, e.variant("control"), "u", SECRET),
        lambda e: record_error(e, e.variant("control"), [SECRET], RuntimeError()),
    ],
)
def test_a_mistyped_argument_is_named_with_its_type_never_its_content(call):
    """An error (and so the log line a handler writes from it) names the argument and its type: the
    value may be a prompt or a user's data."""
    with pytest.raises((TypeError, ValueError)) as error:
        call(Experiment.from_config(document(50, 50)))
    assert "4111" not in str(error.value) and "order" not in str(error.value)
    assert " is a " in str(error.value)


def test_a_variant_from_an_earlier_split_of_the_same_experiment_is_still_accepted(capsys):
    """A handler may hold a Variant parsed before a split change: the arm is the same, only shares differ."""
    old = Experiment.from_config(document(90, 10))
    new = Experiment.from_config(document(80, 20))
    request = build_request(new, old.variant("concise"), variables={"question": "q"})
    assert request["requestMetadata"]["variant"] == "concise"
    record_call(new, old.variant("concise"), "u", result())
    assert '"Variant": "concise"' in capsys.readouterr().out


def test_the_environment_error_names_the_method_that_exists(monkeypatch):
    for name in ("EXPERIMENT_APPLICATION_ID", "EXPERIMENT_ENVIRONMENT_ID", "EXPERIMENT_PROFILE_ID"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ExperimentConfigError, match=r"environment_variables\(\) \(PromptExperiment.add_to_function"):
        ExperimentSource.from_environment()
    for name in ("EXPERIMENT_APPLICATION_ID", "EXPERIMENT_ENVIRONMENT_ID", "EXPERIMENT_PROFILE_ID"):
        monkeypatch.setenv(name, "x")
    monkeypatch.setenv("AWS_APPCONFIG_EXTENSION_HTTP_PORT", "port")
    with pytest.raises(ExperimentConfigError, match="AWS_APPCONFIG_EXTENSION_HTTP_PORT='port' must be a port number"):
        ExperimentSource.from_environment()
