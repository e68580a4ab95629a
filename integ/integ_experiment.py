"""Integration test: a PromptExperiment's split is deployed by AppConfig and readable as a handler reads
it, and its guard alarms exist.

One test case: two variants (50/50) on the test model, bake time 0 so the deployment completes at
once. Assertions: AppConfig lists a COMPLETE deployment in the experiment's environment; a
configuration session (what the AppConfig Lambda extension and ExperimentSource open) returns the
experiment document with its variants, shares and control; DescribeAlarms returns every guard
alarm by name (one call per alarm: four alarm definitions exceed the 4,096 bytes a custom resource
may return to CloudFormation). No model is called: the variants' answers are the runtime's concern, tested offline.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aws_cdk as cdk  # noqa: E402
from aws_cdk.integ_tests_alpha import ExpectedResult, IntegTest, Match  # noqa: E402
from genai_pacer.experiments.prompt_experiment import ExperimentVariant, PromptExperiment, TextPrompt  # noqa: E402

from integ._support import alarm_exists, destroy_on_delete, model, new_app  # noqa: E402

NAME = "integ-experiment"


class ExperimentStack(cdk.Stack):
    def __init__(self, scope: cdk.App, id: str) -> None:
        super().__init__(scope, id)
        bedrock = model(self)
        self.experiment = PromptExperiment(
            self,
            "Experiment",
            experiment_name=NAME,
            variants=[
                ExperimentVariant("control", bedrock, 50, TextPrompt("Answer briefly: {{question}}"), max_tokens=60),
                ExperimentVariant("steps-first", bedrock, 50, TextPrompt("List the steps, then answer: {{question}}"), max_tokens=60),
            ],
            bake_time=cdk.Duration.minutes(0),  # the deployment completes at once; nothing to watch in a test
        )
        destroy_on_delete(self)


def build_app(context: dict[str, Any] | None = None, outdir: str | None = None) -> cdk.App:
    app = new_app(context, outdir)
    stack = ExperimentStack(app, "IntegExperiment")
    integ = IntegTest(app, "Experiment", test_cases=[stack], stack_update_workflow=False)
    experiment = stack.experiment
    ids = {
        "ApplicationIdentifier": experiment.application.application_id,
        "EnvironmentIdentifier": experiment.environment.environment_id,
        "ConfigurationProfileIdentifier": experiment.configuration.configuration_profile_id,
    }
    deployed = (
        integ.assertions.aws_api_call(
            "AppConfig",
            "listDeployments",
            {"ApplicationId": experiment.application.application_id, "EnvironmentId": experiment.environment.environment_id},
        )
        .expect(ExpectedResult.object_like({"Items": Match.array_with([Match.object_like({"State": "COMPLETE"})])}))
        .wait_for_assertions(total_timeout=cdk.Duration.minutes(5), interval=cdk.Duration.seconds(15))
    )
    session = integ.assertions.aws_api_call("AppConfigData", "startConfigurationSession", ids)
    variants = [Match.object_like({"name": v["name"], "share": v["share"]}) for v in experiment.document["variants"]]
    latest = integ.assertions.aws_api_call(
        "AppConfigData", "getLatestConfiguration", {"ConfigurationToken": session.get_att_string("InitialConfigurationToken")}
    ).expect(
        ExpectedResult.object_like(
            {
                "Configuration": Match.serialized_json(
                    Match.object_like({"experiment": NAME, "control": "control", "variants": variants})
                )
            }
        )
    )
    deployed.next(session).next(latest)
    for alarm in experiment.alarms.values():  # one call each: their definitions together exceed 4,096 bytes
        alarm_exists(integ.assertions, alarm.alarm_name)
    return app


if __name__ == "__main__":
    build_app().synth()
