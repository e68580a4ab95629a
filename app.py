#!/usr/bin/env python3
"""The genai-pacer reference app: every reference stack, checked by cdk-nag's AwsSolutions pack.

Context (`cdk synth -c key=value`): see stacks/settings.py CONTEXT_DEFAULTS.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from stacks.endpoint_scaling_stack import EndpointScalingStack
from stacks.experiment_stack import ExperimentStack
from stacks.observability_stack import ObservabilityStack
from stacks.orchestration_stack import OrchestrationStack
from stacks.precompute_stack import PrecomputeStack
from stacks.queued_inference_stack import QueuedInferenceStack
from stacks.retrieval_stack import RetrievalStack
from stacks.shared_quota_stack import SharedQuotaStack


def build_app(context: dict[str, Any] | None = None, outdir: str | None = None) -> cdk.App:
    app = cdk.App(context=context, outdir=outdir)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    orchestration = OrchestrationStack(app, "GenaiPacerOrchestration")
    # One model quota per account and Region: every stack that calls the model draws its share from
    # it, and synth reports any construct that calls the model without one.
    quota = orchestration.quota
    queued = QueuedInferenceStack(app, "GenaiPacerQueuedInference", quota=quota)
    EndpointScalingStack(app, "GenaiPacerEndpointScaling")
    precompute = PrecomputeStack(app, "GenaiPacerPrecompute", quota=quota)
    RetrievalStack(app, "GenaiPacerRetrieval")
    experiment = ExperimentStack(app, "GenaiPacerExperiment", quota=quota)
    # Last of the stacks that draw shares: its QuotaLedger's consumers split at run time what the others leave.
    SharedQuotaStack(app, "GenaiPacerSharedQuota", quota=quota)
    # One dashboard over the model the other stacks call, with their queues and workflows on it.
    ObservabilityStack(
        app,
        "GenaiPacerObservability",
        queued_inference=queued.inference,
        workflows=[orchestration.digest, orchestration.tickers, orchestration.catalog, precompute.scheduled, precompute.batch],
        model_quota=orchestration.quota,  # the quota graph draws the plan synth checked
        answer_routers=[precompute.router],
        experiments=[experiment.experiment],
    )
    return app


if __name__ == "__main__":
    build_app().synth()
