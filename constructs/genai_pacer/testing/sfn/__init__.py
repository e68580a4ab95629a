"""Execute synthesized state machines offline: moto's Step Functions interpreter, with Bedrock served
by the BedrockEmulator (quota, throttles, latency) and S3 and DynamoDB by moto.

    with BedrockEmulator([ModelSpec("amazon.nova-lite-v1:0", tpm_quota=50_000)], time_scale=60) as bedrock, \\
            StateMachineRunner(stack, bedrock=bedrock) as runner:
        run = runner.run({"items": items}).raise_for_status()
        assert run.model_calls == len(items) + run.throttled   # every throttled call was retried

Other aws-sdk services go to moto, or to your own fake: `StateMachineRunner(stack, services={"appconfig":
FakeAppConfig()})`, whose methods are botocore's snake_case operation names and which raises
`ServiceError("ConflictException", "...")` to fail a task with `AppConfig.ConflictException`.

Lambda tasks: genai-pacer's own functions (recognized by their handler asset) are called in this
process with the template's environment (and, with `bedrock=`, AWS_ENDPOINT_URL_BEDROCK_RUNTIME, so
the bedrock-runtime client a handler creates calls the emulator); yours run through `functions={"<logical id or construct
path>": handler}`, handler(event, context). A failed run's `raise_for_status()` says where and why in
a few lines; moto's interpreter log is kept in `run.moto_log`, not in Python logging.

Needs `moto[stepfunctions]` and boto3 (test dependencies, not runtime ones).
"""

from ._batch import BatchJob, BatchJobSimulator, BatchRecordError, ServiceError
from ._errors import OfflineExecutionError
from ._runner import Execution, StateMachineRunner
from ._template import StateMachineSpec

__all__ = [
    "BatchJob",
    "BatchJobSimulator",
    "BatchRecordError",
    "Execution",
    "OfflineExecutionError",
    "ServiceError",
    "StateMachineRunner",
    "StateMachineSpec",
]
