"""AnswerRouter: a Lambda function that serves stored answers by exact key and calls the model otherwise.

A request names a key and a prompt. When the AnswerStore holds a fresh answer under the
normalized key (normalized by `answers.check_key`, as every writer normalizes), the function
returns it with no model call; otherwise it calls the model (Converse), returns that answer and,
optionally, writes it back. The response says which path served it ("source": "store" or
"model", "reason": "hit", "miss" or "stale"), and each request counts as AnswerHits, AnswerMisses
or AnswerStale (namespace GenaiPacer, dimension FunctionName), so the hit rate is visible.

Callers reach it through a function URL with AWS_IAM auth (SigV4-signed POST; grant with
`grant_invoke_url`) or by invoking the function (`grant_invoke`). The request and response
schemas are in the handler's docstring (lambda/answer_router/handler.py).

A Python Lambda function cannot stream a miss's answer to the caller: Lambda response streaming
is available to the Node.js managed runtime and custom runtimes only. When a streamed miss
matters (a chat UI waiting on a long answer), serve misses from a Node.js function or a container
that calls ConverseStream, and keep this router for the hits, which return in one DynamoDB read.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs

from constructs import Construct

from ._checks import Checks
from ._runtime_constants import metrics_constants
from ._secure import handler_function
from .answer_store import AnswerStore
from .models import BedrockModel

__all__ = ["AnswerRouter", "DEFAULT_MAX_AGE"]

#: A day: a pre-computed answer refreshed every morning stays servable until the next run.
DEFAULT_MAX_AGE = cdk.Duration.days(1)
#: Lambda's memory range, MB.
_MEMORY = (128, 10_240)


class AnswerRouter(Construct):
    """Serve a stored answer when its key is present and fresh, else call the model.

    answer_store: required; the AnswerStore to read (and write back to).
    model: required; the model a miss calls (Converse).
    max_age: how old a stored answer may be and still be served; older is "stale" and regenerated.
        1 second..10 years. Default: 1 day (answers pre-computed each morning).
    write_back: store a miss's answer, so the next request for that key is a hit. Default: True.
    max_output_tokens: a miss's default maxTokens and its ceiling (sizes the function's timeout
        too). Size it from the p99 answer (planning.size_max_tokens): Bedrock reserves it against
        the quota on every call. Default: 1,024.
    timeout: the function's timeout, 1 s..15 min. Default: 60 seconds (a miss waits for a whole
        answer; a hit takes milliseconds).
    memory_size: MB, 128..10,240. Default: 256.
    reserved_concurrency: caps misses in flight at the model (each environment serves one request
        at a time). Default: none (account concurrency).
    function_url: expose a function URL with AWS_IAM auth. Default: True.
    encryption_key / log_retention: for the function's new log group. Default: a new key with
        rotation; one month.

    Attributes: `function`, `url` (None without function_url), `max_age`.
    Grants: `grant_invoke`, `grant_invoke_url`. Metrics: `metric_hits`, `metric_misses`,
    `metric_stale`.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        answer_store: AnswerStore,
        model: BedrockModel,
        max_age: cdk.Duration | None = None,
        write_back: bool = True,
        max_output_tokens: int = 1024,
        timeout: cdk.Duration | None = None,
        memory_size: int = 256,
        reserved_concurrency: int | None = None,
        function_url: bool = True,
        encryption_key: kms.IKey | None = None,
        log_retention: logs.RetentionDays | None = None,
    ) -> None:
        super().__init__(scope, id)
        store = answer_store
        max_age = max_age or DEFAULT_MAX_AGE
        timeout = timeout or cdk.Duration.seconds(60)
        with Checks(f"AnswerRouter {id}") as check:
            check.instance("answer_store", answer_store, AnswerStore, "an AnswerStore")
            check.instance("model", model, BedrockModel, "a BedrockModel, e.g. BedrockModel.from_id('us.amazon.nova-lite-v1:0')")
            age_ok = check.duration(
                "max_age", max_age, minimum=cdk.Duration.seconds(1), maximum=cdk.Duration.days(3650),
                fix="how old a stored answer may be and still be served, e.g. cdk.Duration.hours(24)",
            )
            ttl = store.answer_ttl if isinstance(store, AnswerStore) else None
            longer = age_ok and ttl is not None and not ttl.is_unresolved() and (
                max_age.to_seconds(integral=False) > ttl.to_seconds(integral=False)
            )
            if longer:
                cdk.Annotations.of(self).add_warning_v2(
                    "genai-pacer:max-age-beyond-ttl",
                    f"max_age={max_age.to_human_string()} is longer than the store's answer_ttl="
                    f"{ttl.to_human_string()}: answers expire before they turn stale, so max_age "  # type: ignore[union-attr]
                    "never applies; lower max_age or raise answer_ttl",
                )
            check.instance("write_back", write_back, bool, "True or False")
            check.integer(
                "max_output_tokens", max_output_tokens, minimum=1, maximum=1_000_000,
                fix="size it from the p99 answer with planning.size_max_tokens; Bedrock reserves it on every call",
            )
            check.duration(
                "timeout", timeout, minimum=cdk.Duration.seconds(1), maximum=cdk.Duration.minutes(15),
                fix="Lambda runs at most 15 minutes; a miss needs time for a whole answer",
            )
            check.integer("memory_size", memory_size, minimum=_MEMORY[0], maximum=_MEMORY[1],
                          fix="Lambda allows 128..10,240 MB")
            check.integer(
                "reserved_concurrency", reserved_concurrency, minimum=1, optional=True,
                fix="the most misses the model may see at once (0 would stop the function); omit it for no cap",
            )
            check.instance("function_url", function_url, bool, "True or False")
            check.instance("encryption_key", encryption_key, kms.IKey, "a kms.Key", optional=True)
            check.instance("log_retention", log_retention, logs.RetentionDays, "a logs.RetentionDays", optional=True)
        self.max_age = max_age
        self.function = handler_function(
            self,
            "Function",
            handler="answer_router.handler.handler",
            environment={
                **store.environment(),
                "MODEL_ID": model.model_id,
                "MAX_AGE_SECONDS": str(int(max_age.to_seconds())),
                "WRITE_BACK": "true" if write_back else "false",
                "MAX_OUTPUT_TOKENS": str(max_output_tokens),
            },
            timeout=timeout,
            memory_size=memory_size,
            encryption_key=encryption_key,
            log_retention=log_retention,
        )
        if reserved_concurrency is not None:
            cfn = self.function.node.default_child
            assert isinstance(cfn, lambda_.CfnFunction)
            cfn.reserved_concurrent_executions = reserved_concurrency
        (store.grant_write if write_back else store.grant_read)(self.function)
        model.grant_invoke(self.function)
        self.url: lambda_.FunctionUrl | None = (
            self.function.add_function_url(auth_type=lambda_.FunctionUrlAuthType.AWS_IAM) if function_url else None
        )

    def grant_invoke(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let a caller invoke the function directly (lambda:InvokeFunction)."""
        return self.function.grant_invoke(grantee)

    def grant_invoke_url(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let a caller call the function URL (SigV4-signed requests)."""
        if self.url is None:
            raise ValueError(
                f"AnswerRouter {self.node.id} has no function URL (function_url=False): grant_invoke instead, "
                "or build it with function_url=True"
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

    def metric_hit_rate(self, **props: Any) -> cloudwatch.MathExpression:
        """Hits as a percentage of all requests."""
        return cloudwatch.MathExpression(
            expression="100 * hits / (hits + misses + stale)",
            using_metrics={"hits": self.metric_hits(), "misses": self.metric_misses(), "stale": self.metric_stale()},
            label="Answer hit rate (%)",
            **{"period": cdk.Duration.minutes(5), **props},
        )

    def _metric(self, name: str, props: dict[str, Any]) -> cloudwatch.Metric:
        names = metrics_constants()
        return cloudwatch.Metric(
            namespace=names.NAMESPACE,
            metric_name=name,
            dimensions_map={getattr(names, "FUNCTION_DIMENSION", "FunctionName"): self.function.function_name},
            **{"statistic": "Sum", "period": cdk.Duration.minutes(5), **props},
        )
