"""What genai-pacer's capabilities share and a user never imports: validation (checks), alarms,
handler assets, install hints, cdk-nag acknowledgments, the handlers' metric names, S3 key and KMS
rules, the check and key grant of a user's DynamoDB table, the packages' lazy exports and the aliases
of moved modules. Not public API: names here may change in any release."""
