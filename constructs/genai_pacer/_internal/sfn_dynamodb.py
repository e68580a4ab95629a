"""Step Functions' optimized DynamoDB integration: how it names DynamoDB's errors, and which of them a
task retries. Shared by ScheduledPrecompute's answer writes and run lock and the shared quota ledger's
reserve, settle and release tasks (step_functions.ledger_steps)."""

from __future__ import annotations

__all__ = ["CONDITIONAL_CHECK_FAILED", "DYNAMODB_ERROR_PREFIX", "DYNAMODB_RETRY_ERRORS", "DYNAMODB_TRANSIENT_ERRORS"]


#: The optimized DynamoDB integration (arn:aws:states:::dynamodb:putItem) names its errors `DynamoDB.<Name>`,
#: uppercase DB; the AWS SDK integration's are `DynamoDb.<Name>`
#: (https://docs.aws.amazon.com/step-functions/latest/dg/connect-ddb.html, "Exception prefix differences").
DYNAMODB_ERROR_PREFIX = "DynamoDB."
CONDITIONAL_CHECK_FAILED = DYNAMODB_ERROR_PREFIX + "ConditionalCheckFailedException"
#: PutItem's, DeleteItem's and UpdateItem's transient errors, as botocore's dynamodb 2012-08-10 model names them.
DYNAMODB_TRANSIENT_ERRORS = (
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "InternalServerError",
)


def _step_functions_names(error: str) -> tuple[str, ...]:
    """The Error names a transient DynamoDB error may carry in Step Functions. SDK integrations add an
    Exception suffix to a name without one (https://docs.aws.amazon.com/step-functions/latest/dg/
    supported-services-awssdk.html); for the optimized integration no page says, and moto's interpreter (a
    port of LocalStack's) keeps the bare code. Both spellings are retried, so either way a throttle is."""
    named = DYNAMODB_ERROR_PREFIX + error
    return (named,) if error.endswith("Exception") else (named + "Exception", named)


#: The Retry of every DynamoDB task: ScheduledPrecompute's (answers, the run lock), the ledger's.
DYNAMODB_RETRY_ERRORS = tuple(name for error in DYNAMODB_TRANSIENT_ERRORS for name in _step_functions_names(error))
