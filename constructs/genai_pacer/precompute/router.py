"""AnswerRouter: a Lambda function that serves stored answers by exact key and generates them from the key otherwise.

A request names only a key (and optionally a stricter maxAgeSeconds). When the AnswerStore holds a
fresh answer under the normalized key (normalized by `answers.check_key`, as every writer
normalizes), the function returns it with no model call. Otherwise it builds the prompt from the
key on the server, with `prompts`: key patterns mapped to templates,

    prompts={"ticker-morning#{ticker}": "Write this morning's note for {ticker}."}

so "ticker-morning#AAPL" (stored as "ticker-morning#aapl") is answered with the prompt "Write this
morning's note for aapl.". The answer stored under a key is therefore reproducible from the key
alone: a caller can ask for a key, never decide what is stored under it. (A caller-supplied
"prompt", "messages", "system" or "inferenceConfig" is refused with 400; a key that matches no
pattern and has no fresh stored answer gets 404, so a router without `prompts` serves
pre-computed answers only.) Variables fill from the normalized key, which is case-folded and
whitespace-collapsed: write templates that read well with lower-case values.

Freshness: `max_age` is the router's own limit. A caller's maxAgeSeconds may only shorten what
that caller accepts: when the stored answer is fresh for the router but older than the caller
asked, the model answers that caller and nothing is written, so no caller can force a write over
a fresher stored answer. Answers stale for the router (or missing, unreadable or empty) are
generated and written back (with `write_back`, the default). Concurrent misses for one key make one
model call across Lambda environments: the first takes a per-key claim in the store (PutItem
only; the function gets `AnswerStore.grant_put`, never dynamodb:DeleteItem), the others poll the
store for its answer for up to `coalesce_wait`, then answer 503 with Retry-After. (A request that
asked for fresher than the router's max_age, or a router without write_back, writes nothing, so
nothing can wait for it: each such request is its own model call, capped by reserved_concurrency.)

The response says which path served it ("source": "store" or "model", "reason": "hit", "miss",
"stale" or "coalesced"), and each request counts as AnswerHits, AnswerMisses or AnswerStale
(namespace GenaiPacer, dimension FunctionName), so the hit rate is visible. Status codes name
the failing dependency (429 model throttled, 503 model unavailable or store throttled, 504 model
timeout, 502 model error or empty answer); the handler's docstring lists them.

Callers reach it through a function URL with AWS_IAM auth (SigV4-signed POST; grant with
`grant_invoke_url`) or by invoking the function (`grant_invoke`). The request and response
schemas are in the handler's docstring (lambda/answer_router/handler.py).

A Python Lambda function cannot stream a miss's answer to the caller: Lambda response streaming
is available to the Node.js managed runtime and custom runtimes only. When a streamed miss
matters (a chat UI waiting on a long answer), serve misses from a Node.js function or a container
that calls ConverseStream, and keep this router for the hits, which return in one DynamoDB read.
"""

from __future__ import annotations

import json
import re
import string
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any, cast

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs

from constructs import Construct

from .._internal.alarms import threshold_alarm
from .._internal.checks import (
    Checks,
    deploy_time_duration,
    fit_concurrency,
    in_unit,
    is_token,
    seconds_text,
    shown,
    token_of_kind,
    warn,
    warn_above_reservable_concurrency,
)
from .._internal.docs import constructor_doc
from .._internal.metrics import function_metric
from .._internal.runtime_constants import metrics_constants
from .._internal.secure import handler_function
from ..models import BedrockModel, as_bedrock_model
from ..quota import planning
from ..step_functions.model_tasks import SERVICE_TIER_VARIABLE, ServiceTier, check_service_tier
from .store import AnswerStore

__all__ = ["AnswerRouter", "DEFAULT_MAX_AGE"]

#: A day: a pre-computed answer refreshed every morning stays servable until the next run.
DEFAULT_MAX_AGE = cdk.Duration.days(1)
#: Lambda's memory range, MB.
_MEMORY = (128, 10_240)
#: Lambda keeps at most 4 KB of environment variables per function, all of them together
#: (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html, "Function environment
#: variables"); the prompts and the system prompt may take this much, leaving the rest for the
#: table name, model id and settings. A wrong guess here only refuses early what deploy would refuse.
MAX_PROMPTS_BYTES = 3000
#: DynamoDB's partition key limit, UTF-8 bytes (pacer_runtime.answers.MAX_KEY_BYTES).
_MAX_KEY_BYTES = 2048
#: Keys under this prefix are claims, never answers (pacer_runtime.answers.CLAIM_PREFIX).
_CLAIM_PREFIX = "claim#"
_VARIABLE = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


@constructor_doc
class AnswerRouter(Construct):
    """Serve a stored answer when its key is present and fresh, else call the model.

    answer_store: required; the AnswerStore to read (and write back to).
    model: required; the model a miss calls (Converse).
    prompts: key pattern -> prompt template, e.g. {"ticker-morning#{ticker}": "Write this
        morning's note for {ticker}."}. A pattern is the key as stored (lower case) in
        '#'-separated segments, each literal or a variable "{name}"; the template uses every
        variable of its pattern and no other ({{ and }} for literal braces). The first pattern
        that matches a key gives its prompt. Default: none: only stored answers are served (a miss
        is 404). At most 3,000 bytes as JSON with system_prompt (Lambda's 4 KB of environment).
    system_prompt: the system prompt of every generated answer. Default: none.
    max_age: how old a stored answer may be and still be served; older is "stale" and regenerated.
        1 second..10 years. Default: 1 day (answers pre-computed each morning). A token (e.g.
        from a CfnParameter) reaches the function as a token.
    write_back: store a miss's answer, so the next request for that key is a hit; also what lets
        concurrent misses share one call (the per-key claim needs PutItem). Default: True.
    coalesce_wait: how long a miss waits for another request generating the same key before
        answering 503 with Retry-After; 0..timeout (less than the function's timeout). Only with
        write_back (refused without it). Default: half the function's timeout (with a deploy-time
        timeout, half of the deployed value: the function gets the timeout and halves it).
    service_tier: the Bedrock service tier of a miss's call ("priority", "default", "flex" or
        "reserved"; docs/tiers.md): "priority" suits a miss, which a user is waiting for. A request
        cannot choose another, and the function's role is denied the other tiers
        (BedrockModel.tier_fence). A deploy-time string reaches the function as it is, and the Deny then
        names the tier the role may use (docs/tiers.md). Default: none (Bedrock serves at default).
    max_output_tokens: the maxTokens of every miss's model call (a caller cannot set it: a request's
        inferenceConfig is refused). Size it from the p99 answer (planning.size_max_tokens): Bedrock
        reserves it against the quota on every call, and ModelQuota plans the router's share with it.
        It does not change the function's timeout: give `timeout` the time an answer this long takes.
        Default: 1,024.
    timeout: the function's timeout, 1 s..15 min, whatever max_output_tokens is. Default: 60 seconds
        (a miss waits for a whole answer; a hit takes milliseconds).
    memory_size: MB, 128..10,240. Default: 256.
    reserved_concurrency: caps misses in flight at the model (each environment serves one request
        at a time): an int >= 1 or a `planning.RatePlan` such as a ModelQuota share (its
        max_concurrency; the router then holds that share). Default: none (account concurrency).
        Above 900 (what a default account can reserve, an adjustable quota) a warning says how to raise it.
    function_url: expose a function URL with AWS_IAM auth. Default: True.
    encryption_key / log_retention: for the function's new log group. Default: the construct's one
        KMS key, with rotation, retained on delete ($1 a month while it exists, AWS KMS pricing page;
        docs/security.md, "KMS keys"); one month.
    server_error_threshold: 5xx answers in 5 minutes the ServerErrors alarm tolerates (AnswerPending,
        the coalescing's own 503, is not counted). Default: 0 (any: a 5xx answer is a caller who got
        no answer).
    alarm_actions: actions for the alarms (`alarms`): ServerErrors (5xx answers above
        server_error_threshold in 5 minutes) and FunctionErrors (any invocation that failed outright in
        5 minutes: a timeout, out of memory, a crash; the handler answers every error it can catch).
        Default: none.

    Attributes: `function`, `url` (None without function_url), `max_age`, `prompts`, `alarms`,
    `max_output_tokens` (what each miss may reserve; ModelQuota plans the router's share with it).
    Grants: `grant_invoke`, `grant_invoke_url`. Metrics: `metric_hits`, `metric_misses`,
    `metric_stale`, `metric_hit_rate`, `metric_server_errors`.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        answer_store: AnswerStore,
        model: BedrockModel,
        prompts: Mapping[str, str] | None = None,
        system_prompt: str | None = None,
        max_age: cdk.Duration | None = None,
        write_back: bool = True,
        coalesce_wait: cdk.Duration | None = None,
        service_tier: ServiceTier | None = None,
        max_output_tokens: int = 1024,
        timeout: cdk.Duration | None = None,
        memory_size: int = 256,
        reserved_concurrency: int | planning.RatePlan | None = None,
        function_url: bool = True,
        encryption_key: kms.IKey | None = None,
        log_retention: logs.RetentionDays | None = None,
        server_error_threshold: int = 0,
        alarm_actions: Sequence[cloudwatch.IAlarmAction] = (),
    ) -> None:
        super().__init__(scope, id)
        model = as_bedrock_model(model)  # an aws_bedrock_alpha IBedrockInvokable too
        store = answer_store
        max_age = max_age or DEFAULT_MAX_AGE
        timeout = timeout or cdk.Duration.seconds(60)
        with Checks("AnswerRouter", scope=self) as check:
            check.instance("answer_store", answer_store, AnswerStore, "an AnswerStore")
            check.instance("model", model, BedrockModel, "a BedrockModel, e.g. BedrockModel.from_id('us.amazon.nova-lite-v1:0')")
            check_service_tier(check, "service_tier", service_tier)
            age_ok = check.duration(
                "max_age", max_age, minimum=cdk.Duration.seconds(1), maximum=cdk.Duration.days(3650),
                fix="how old a stored answer may be and still be served, e.g. cdk.Duration.hours(24)",
            )
            ttl = store.answer_ttl if isinstance(store, AnswerStore) else None
            longer = age_ok and ttl is not None and not ttl.is_unresolved() and (
                max_age.to_seconds(integral=False) > ttl.to_seconds(integral=False)
            )
            if longer:
                warn(
                    self,
                    "max-age-beyond-ttl",
                    f"max_age={max_age.to_human_string()} is longer than the store's answer_ttl="
                    f"{ttl.to_human_string()}: answers expire before they turn stale, so max_age "  # type: ignore[union-attr]
                    "never applies; lower max_age or raise answer_ttl",
                )
            for name, value in (("max_age", max_age), ("coalesce_wait", coalesce_wait), ("timeout", timeout)):
                in_unit(check, name, value, "seconds", why="the function takes it")
            if check.instance("write_back", write_back, bool, "True or False") and not write_back:
                check.rule(
                    coalesce_wait is None,
                    "coalesce_wait is set with write_back=False: without write-back a miss writes nothing and takes no "
                    "claim, so no request can wait for another's answer and the wait would never apply; drop "
                    "coalesce_wait, or keep write_back=True",
                    id="coalesce_wait.without-write-back",
                )
            prompt_table = _check_prompts(check, prompts)
            check.text("system_prompt", system_prompt, optional=True, fix="the system prompt of every generated answer")
            if prompt_table is not None and isinstance(system_prompt, str | type(None)) and not is_token(system_prompt):
                size = len(json.dumps(prompt_table).encode()) + len((system_prompt or "").encode())
                check.rule(
                    size <= MAX_PROMPTS_BYTES,
                    f"prompts and system_prompt take {size:,} bytes; at most {MAX_PROMPTS_BYTES:,} fit in the function's "
                    "environment (Lambda keeps 4 KB of environment variables per function): shorten the templates",
                    id="prompts.environment-too-large",
                )
            check.integer(
                "max_output_tokens", max_output_tokens, minimum=1, maximum=1_000_000,
                fix="size it from the p99 answer with planning.size_max_tokens; Bedrock reserves it on every call",
            )
            timeout_ok = check.duration(
                "timeout", timeout, minimum=cdk.Duration.seconds(1), maximum=cdk.Duration.minutes(15),
                fix="Lambda runs at most 15 minutes; a miss needs time for a whole answer",
            )
            # Half a deploy-time timeout cannot be computed at synth (CloudFormation has no arithmetic): the
            # function gets the timeout itself (FUNCTION_TIMEOUT_SECONDS) and waits half of it.
            wait_follows_timeout = coalesce_wait is None and deploy_time_duration(timeout)
            if coalesce_wait is None and timeout_ok:
                coalesce_wait = cdk.Duration.millis(int(timeout.to_milliseconds()) // 2)
            wait_ok = coalesce_wait is not None and check.duration(
                "coalesce_wait", coalesce_wait, minimum=cdk.Duration.seconds(0), maximum=cdk.Duration.minutes(15),
                fix="how long a miss waits for another request generating the same key, e.g. cdk.Duration.seconds(20)",
            )
            if wait_ok and timeout_ok and coalesce_wait is not None:
                check.rule(
                    coalesce_wait.to_milliseconds() < timeout.to_milliseconds(),
                    f"coalesce_wait={coalesce_wait.to_human_string()} must be shorter than timeout="
                    f"{timeout.to_human_string()}: a waiting request needs time left to answer; lower coalesce_wait",
                    id="coalesce_wait.not-below-timeout",
                )
            check.integer("memory_size", memory_size, minimum=_MEMORY[0], maximum=_MEMORY[1],
                          fix="Lambda allows 128..10,240 MB")
            if reserved_concurrency is not None:
                reserved_concurrency = fit_concurrency(
                    check, self, "reserved_concurrency", reserved_concurrency, minimum=1, maximum=None,
                    limit="a function's reserved concurrency",
                    fix="the most misses the model may see at once (0 would stop the function); omit it for no cap",
                )
                warn_above_reservable_concurrency(self, "reserved_concurrency", reserved_concurrency)
            check.instance("function_url", function_url, bool, "True or False")
            check.instance("encryption_key", encryption_key, kms.IKey, "a kms.Key", optional=True)
            check.instance("log_retention", log_retention, logs.RetentionDays, "a logs.RetentionDays", optional=True)
            # a deploy-time count is the alarm's Threshold as it is; any other token is refused
            if not token_of_kind(check, "server_error_threshold", server_error_threshold, "number",
                                 fix="pass a whole number of answers, or parameter.value_as_number"):
                check.integer("server_error_threshold", server_error_threshold, minimum=0,
                              fix="5xx answers in 5 minutes the ServerErrors alarm tolerates")
            check.alarm_actions("alarm_actions", alarm_actions)
        self.max_age = max_age
        self.max_output_tokens = max_output_tokens
        self.prompts: dict[str, str] = dict(prompt_table or {})
        environment = {
            **store.environment(),
            "MODEL_ID": model.model_id,
            "MAX_AGE_SECONDS": seconds_text(max_age),
            "WRITE_BACK": "true" if write_back else "false",
            "MAX_OUTPUT_TOKENS": cdk.Token.as_string(max_output_tokens) if is_token(max_output_tokens) else str(max_output_tokens),
            **({"FUNCTION_TIMEOUT_SECONDS": seconds_text(timeout)} if wait_follows_timeout
               else {"COALESCE_WAIT_SECONDS": seconds_text(coalesce_wait)}),
            "PROMPTS": json.dumps([{"key": k, "prompt": v} for k, v in self.prompts.items()], ensure_ascii=False),
        }
        if system_prompt is not None:
            environment["SYSTEM_PROMPT"] = system_prompt
        if service_tier is not None:
            environment[SERVICE_TIER_VARIABLE] = service_tier
        self.function = handler_function(
            self,
            "Function",
            handler="answer_router.handler.handler",
            environment=environment,
            timeout=timeout,
            memory_size=memory_size,
            encryption_key=encryption_key,
            log_retention=log_retention,
        )
        if reserved_concurrency is not None:
            # A lambda_.Function's default child is always its CfnFunction.
            cfn = cast(lambda_.CfnFunction, self.function.node.default_child)
            cfn.reserved_concurrent_executions = reserved_concurrency
        # No DeleteItem: answers and the router's own claims are written with PutItem only.
        (store.grant_put if write_back else store.grant_read)(self.function)
        model.grant_invoke(self.function)
        if service_tier is not None and (fence := model.tier_fence(self, service_tier)) is not None:
            self.function.add_to_role_policy(fence)  # no other tier, whatever the code in the function sends
        self.url: lambda_.FunctionUrl | None = (
            self.function.add_function_url(auth_type=lambda_.FunctionUrlAuthType.AWS_IAM) if function_url else None
        )
        self.alarms = {
            "ServerErrors": threshold_alarm(
                self, "ServerErrors", metric=self.metric_server_errors(), threshold=server_error_threshold,
                actions=alarm_actions,
                description=f"AnswerRouter {id}: more than {shown(server_error_threshold)} answers in 5 minutes had a 5xx "
                            "status (the caller got no answer): the log lines name each error (ModelUnavailable: "
                            "the model throttled past the retries; StoreThrottled or StoreError: the table).",
            ),
            "FunctionErrors": threshold_alarm(
                self, "FunctionErrors",
                metric=self.function.metric_errors(statistic="Sum", period=cdk.Duration.minutes(5)), threshold=0,
                actions=alarm_actions,
                description=f"AnswerRouter {id}: an invocation failed outright (a timeout, out of memory or a crash; "
                            "the handler answers every error it can catch). Its log group says which.",
            ),
        }

    def grant_invoke(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let a caller invoke the function directly (lambda:InvokeFunction) on its unqualified ARN,
        the one a caller invokes: the router publishes no version or alias. (aws-cdk-lib's
        Function.grant_invoke adds "<arn>:*" for every version and alias, which cdk-nag reports as
        AwsSolutions-IAM5 on the caller's role. A function's actions are scoped by function, version or
        alias ARN: https://docs.aws.amazon.com/lambda/latest/dg/lambda-api-permissions-ref.html.) A
        principal of another account gets a resource policy statement on the function instead, as
        Function.grant_invoke gives it."""
        grant = iam.Grant.add_to_principal(
            grantee=grantee, actions=["lambda:InvokeFunction"], resource_arns=[self.function.function_arn],
        )
        return grant if grant.success else self.function.grant_invoke(grantee)

    def grant_invoke_url(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let a caller call the function URL (SigV4-signed requests)."""
        with Checks("AnswerRouter.grant_invoke_url", scope=self) as check:
            check.rule(
                self.url is not None,
                "the router has no function URL (function_url=False): grant_invoke instead, or build it with "
                "function_url=True",
                id="function_url.none-to-grant",
            )
        return self.function.grant_invoke_url(grantee)

    def metric_hits(self, **props: Any) -> cloudwatch.Metric:
        """Requests served from the store (fresh answer found). Default: Sum over 5 minutes."""
        return self._metric(metrics_constants().ANSWER_HITS, props)

    def metric_misses(self, **props: Any) -> cloudwatch.Metric:
        """Requests whose key had no stored answer (the model answered)."""
        return self._metric(metrics_constants().ANSWER_MISSES, props)

    def metric_stale(self, **props: Any) -> cloudwatch.Metric:
        """Requests whose stored answer was older than max_age (the model answered)."""
        return self._metric(metrics_constants().ANSWER_STALE, props)

    def metric_server_errors(self, **props: Any) -> cloudwatch.Metric:
        """Answers with a 5xx status but AnswerPending (the caller got no answer). Default: Sum over 5 minutes."""
        return self._metric(metrics_constants().ANSWER_SERVER_ERRORS, props)

    def metric_hit_rate(self, **props: Any) -> cloudwatch.MathExpression:
        """Hits as a percentage of all requests."""
        return cloudwatch.MathExpression(
            expression="100 * hits / (hits + misses + stale)",
            using_metrics={"hits": self.metric_hits(), "misses": self.metric_misses(), "stale": self.metric_stale()},
            label="Answer hit rate (%)",
            **{"period": cdk.Duration.minutes(5), **props},
        )

    def _metric(self, name: str, props: dict[str, Any]) -> cloudwatch.Metric:
        return function_metric(self.function.function_name, name,
                               **{"statistic": "Sum", "period": cdk.Duration.minutes(5), **props})


def _normalized(key: str) -> str:
    """pacer_runtime.answers.normalize_key (the construct cannot import the runtime: it needs boto3)."""
    return " ".join(unicodedata.normalize("NFC", key).split()).casefold()


def _check_prompts(check: Checks, prompts: Any) -> dict[str, str] | None:
    """The prompts as given, when every pattern and template is valid; else the problems are recorded."""
    if prompts is None:
        return {}
    if not isinstance(prompts, Mapping) or is_token(prompts):
        check.fail(
            f"prompts is {type(prompts).__name__}; pass a dict of key pattern -> prompt template, e.g. "
            '{"ticker-morning#{ticker}": "Write this morning\'s note for {ticker}."}', id="prompts.type"
        )
        return None
    ok = True
    for pattern, template in prompts.items():
        ok = _check_prompt(check, pattern, template) and ok
    return dict(prompts) if ok else None


def _check_prompt(check: Checks, pattern: Any, template: Any) -> bool:
    if not isinstance(pattern, str) or not pattern or is_token(pattern):
        what = "a token" if is_token(pattern) else type(pattern).__name__
        return check.fail(f"prompts: a key pattern is {what}; write each pattern as text, e.g. 'ticker-morning#{{ticker}}'", id="prompts.pattern-not-text")
    where = f"prompts[{pattern[:60]!r}]"
    if not isinstance(template, str) or is_token(template) or not template.strip():
        what = "a token" if is_token(template) else ("empty" if isinstance(template, str) else type(template).__name__)
        return check.fail(f"{where} is {what}; the template must be text known at synth, so its variables can be checked", id="prompts.template-not-text")
    if _normalized(pattern) != pattern:
        return check.fail(
            f"{where}: keys are stored normalized (case-folded, whitespace collapsed), so this pattern never "
            f"matches; write it as {_normalized(pattern)!r}", id="prompts.pattern-not-normalized"
        )
    if pattern.startswith(_CLAIM_PREFIX) or len(pattern.encode()) > _MAX_KEY_BYTES:
        return check.fail(f"{where}: a key may not start with {_CLAIM_PREFIX!r} nor exceed {_MAX_KEY_BYTES} bytes", id="prompts.pattern-reserved-or-long")
    segments = pattern.split("#")
    names = [m.group(1) for m in (_VARIABLE.fullmatch(s) for s in segments) if m]
    literal_braces = [s for s in segments if not _VARIABLE.fullmatch(s) and ("{" in s or "}" in s)]
    if literal_braces or _VARIABLE.fullmatch(segments[0]) or len(names) != len(set(names)):
        return check.fail(
            f"{where}: a pattern is '#'-separated segments, the first literal (a name such as 'ticker-morning'), "
            "each other either literal or one variable such as '{ticker}' (lower case, used once)", id="prompts.pattern-segments"
        )
    try:
        fields = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(template) if name is not None]
    except ValueError:
        return check.fail(f"{where}: the template has an unmatched brace; write {{{{ and }}}} for literal braces", id="prompts.template-unmatched-brace")
    used = {name for name, _, _ in fields}
    unknown = sorted(used - set(names))
    bad = [name for name, spec, conv in fields if spec or conv or name not in names]
    if unknown or bad:
        return check.fail(
            f"{where}: the template uses {sorted(set(bad) | set(unknown))}, but only the pattern's variables "
            f"{names} may appear, each as plain {{name}} (no format spec, index or attribute)", id="prompts.template-unknown-variable"
        )
    unused = sorted(set(names) - used)
    return check.rule(
        not unused,
        f"{where}: the template does not use {unused}: keys differing only there would be answered with one prompt; "
        "use every variable of the pattern in the template",
        id="prompts.template-unused-variable",
    )
