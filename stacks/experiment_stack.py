"""A live A/B test of two prompts on the reference model: the split in AppConfig, guard alarms that
roll a split change back, a fallback to the control variant after the bake time, and a role that
may evaluate the experiment (read its configuration, call its models) and nothing else."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from genai_pacer import ModelQuota, planning
from genai_pacer.experiments.prompt_experiment import ExperimentVariant, PromptExperiment, TextPrompt

from constructs import Construct

from .settings import ReferenceSettings

#: Defaults of this stack (candidates for stacks/settings.py CONTEXT_DEFAULTS): the treatment's
#: share while it is new, and the guards' limits.
TREATMENT_SHARE = 10
MAX_ERROR_RATE_PERCENT = 5
MAX_P90_LATENCY_SECONDS = 8
#: Calls in flight the evaluating function may make (its reserved concurrency).
EVALUATOR_CALLS = 1


class ExperimentStack(cdk.Stack):
    """quota: the app's ModelQuota for the model; the evaluator's calls draw a share from it."""

    def __init__(self, scope: Construct, id: str, *, quota: ModelQuota, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        settings = ReferenceSettings.from_context(self)
        max_tokens = planning.size_max_tokens(350).max_tokens
        # The function that serves the experiment runs with the Evaluator role below and a reserved
        # concurrency of EVALUATOR_CALLS (yours to set on it): the share the plan counts.
        quota.share("Evaluator", quota.profile(input_tokens=400, output_tokens=250, max_tokens=max_tokens),
                    calls=EVALUATOR_CALLS, call_seconds=6)
        self.experiment = PromptExperiment(
            self,
            "SupportAnswer",
            experiment_name="support-answer",
            variants=[
                ExperimentVariant(
                    "control",
                    settings.model,
                    100 - TREATMENT_SHARE,
                    TextPrompt("Answer the customer's question: {{question}}",
                               system="You are a support agent. Answer in at most five sentences."),
                    max_tokens=max_tokens,
                    temperature=0.2,
                ),
                ExperimentVariant(
                    "steps-first",
                    settings.model,
                    TREATMENT_SHARE,
                    TextPrompt("List the steps that solve the customer's problem, then explain briefly: {{question}}",
                               system="You are a support agent. Lead with numbered steps."),
                    max_tokens=max_tokens,
                    temperature=0.2,
                ),
            ],
            max_error_rate_percent=MAX_ERROR_RATE_PERCENT,
            max_p90_latency=cdk.Duration.seconds(MAX_P90_LATENCY_SECONDS),
        )
        # The role a handler that serves the experiment runs with (attach it to your function).
        self.evaluator = iam.Role(self, "Evaluator", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                                  description="reads the support-answer experiment and calls its models")
        self.experiment.grant_evaluate(self.evaluator)
        cdk.CfnOutput(self, "ApplicationId", value=self.experiment.application.application_id)
        cdk.CfnOutput(self, "EnvironmentId", value=self.experiment.environment.environment_id)
        cdk.CfnOutput(self, "ProfileId", value=self.experiment.configuration.configuration_profile_id)
        cdk.CfnOutput(self, "FallbackVersion", value=self.experiment.fallback_version.attr_version_number)
        cdk.CfnOutput(self, "EvaluatorRoleArn", value=self.evaluator.role_arn)
