"""A SageMaker real-time endpoint for a self-hosted LLM: model, endpoint config and endpoint, or an
inference component on the endpoint, with a least-privilege role and the alarms an LLM needs.

The weights come from S3 and the serving container from ECR (for example a Hugging Face TGI or an
LMI container): a Hugging Face Hub model id would need a network lookup at synth, and a container
that downloads from the Hub at start-up needs internet access the default network isolation denies.
Scale the result with `EndpointScaling`: its load-time check reads this endpoint's startup
health-check timeout.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker

from constructs import Construct

from .._internal.alarms import threshold_alarm
from .._internal.checks import Checks, duration_in, is_token, shown, token_kind, token_of_kind, warn
from .._internal.docs import constructor_doc
from .._internal.nag import acknowledge_exact_resources, acknowledge_exact_resources_at_validation, flattened
from .._internal.s3 import KMS_READ_ACTIONS, bucket_key, check_key_bytes, grant_keys
from .._internal.secure import construct_key
from .capacity import MAX_CAPACITY

__all__ = [
    "LlmEndpoint",
    "InferenceComponentOptions",
    "is_accelerated",
    "has_local_storage",
    "ROUTING_STRATEGIES",
]

#: How the endpoint routes requests. LEAST_OUTSTANDING_REQUESTS suits LLMs: a generation holds an
#: instance for seconds, so random routing piles requests on a busy instance while another idles.
ROUTING_STRATEGIES = ("LEAST_OUTSTANDING_REQUESTS", "RANDOM")
#: What a caller needs: botocore's sagemaker-runtime model says InvokeEndpointWithResponseStream needs
#: "the sagemaker:InvokeEndpoint action" too (its operation documentation), so one action serves both.
INVOKE_ENDPOINT_ACTIONS = ("sagemaker:InvokeEndpoint",)

#: SageMaker's limits on names (endpoint, variant, inference component) and container environments.
_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
_INSTANCE_TYPE = re.compile(r"^ml\.([a-z0-9-]+)\.([a-z0-9]+)$")
_ECR_URI = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/"
    r"(?P<repository>[a-z0-9][a-z0-9._/-]*)(?::[\w.-]+|@sha256:[0-9a-f]{64})$"
)
_MAX_ENVIRONMENT = 100
_MAX_ENVIRONMENT_LENGTH = 1024
_MIN_TIMEOUT, _MAX_TIMEOUT = cdk.Duration.seconds(60), cdk.Duration.seconds(3600)

#: GPU and Neuron families (ml.g*, ml.p*, ml.inf*, ml.trn*). Anything else runs an LLM on CPUs.
_ACCELERATED = re.compile(r"^(g\d+[a-z]*|p\d+[a-z]*(-[a-z0-9]+)?|inf\d+|trn\d+[a-z]*)$")
#: Accelerated families whose instances have EBS volumes only (EC2 instance store documentation);
#: every newer GPU and Trainium family carries local NVMe storage.
_EBS_ONLY_ACCELERATED = frozenset({"p2", "p3", "inf1", "inf2"})

#: What CreateEndpointConfig's KmsKeyId covers on an instance type with local NVMe storage. The
#: service's own API model (botocore sagemaker 2017-07-24, CreateEndpointConfig.KmsKeyId) says the
#: key "does not encrypt instance local storage" (the instance encrypts it in hardware); aws-cdk-lib
#: 2.275's CfnEndpointConfig.kmsKeyId documentation still says the call fails with a key for such
#: types. The API model is the more primary source: a key is accepted, with a warning.
KMS_KEY_LOCAL_STORAGE_NOTE = "does not encrypt instance local storage"

#: SageMaker's trust condition for real-time, serverless and asynchronous inference (SageMaker
#: developer guide, "Cross-service confused deputy prevention", SageMaker AI Inference): the source
#: ARN is this account's and Region's SageMaker, `arn:<partition>:sagemaker:<region>:<account>:*`,
#: written as given ("do not replace ... with the full ARN of a specific model or endpoint").
#: https://docs.aws.amazon.com/sagemaker/latest/dg/security-confused-deputy-prevention.html
SOURCE_ARN_KEY = "aws:SourceArn"

#: The namespaces SageMaker's instances may publish to with the execution role. Callers cannot write
#: `AWS/` namespaces (botocore cloudwatch PutMetricData.Namespace), so SageMaker's own invocation
#: metrics are not written with this role; the instance and container metrics it may write live in
#: `/aws/sagemaker/Endpoints` and `/aws/sagemaker/InferenceComponents` (SageMaker monitoring docs).
#: The condition key is `cloudwatch:namespace` (CloudWatch user guide, "Using condition keys to
#: limit access to CloudWatch namespaces"). Unconfirmed: which namespace SageMaker writes with the
#: role; if it is outside this pattern, instance metrics are missing (serving is unaffected).
METRIC_NAMESPACE_PATTERN = "/aws/sagemaker/*"

_LOGS_WILDCARD_REASON = (
    "SageMaker names each container's log stream after the variant and instance it starts "
    "(log-stream:*); the grant is limited to this endpoint's own log group"
)
_SERVICE_WILDCARD_REASON = (
    "ecr:GetAuthorizationToken and cloudwatch:PutMetricData support no resource-level permissions; "
    "SageMaker needs both to pull the serving image and publish the container's metrics"
)
_PREFIX_WILDCARD_REASON = (
    "uncompressed model data is a prefix of objects (weights shards, tokenizer, config) that SageMaker "
    "lists and downloads; the grant is limited to that prefix"
)


def _family(instance_type: str) -> str:
    match = _INSTANCE_TYPE.match(instance_type)
    return match.group(1) if match else ""


def is_accelerated(instance_type: str) -> bool:
    """Whether an ml.* instance type has GPUs or AWS Neuron accelerators (an LLM's usual home)."""
    return bool(_ACCELERATED.match(_family(instance_type)))


def has_local_storage(instance_type: str) -> bool:
    """Whether an ml.* instance type has local NVMe storage, which the instance encrypts in hardware
    (a KmsKeyId does not cover it: see KMS_KEY_LOCAL_STORAGE_NOTE)."""
    family = _family(instance_type)
    if is_accelerated(instance_type):
        return family not in _EBS_ONLY_ACCELERATED
    return bool(re.fullmatch(r"[a-z]+\d+[a-z]*d", family))  # m5d, c5d, r5d, m6id ...


@dataclass(frozen=True)
class InferenceComponentOptions:
    """Host the model as an inference component: copies scale (and may scale to zero), instances follow.

    min_memory_mb: required; memory one copy reserves, at least 128 MB (MinMemoryRequiredInMb).
    max_instances: required; the most instances SageMaker's managed instance scaling may run to
        host the copies (ManagedInstanceScaling.MaxInstanceCount).
    accelerators: GPUs or Neuron cores one copy needs. Default: 1. None on CPU instance types.
    cpu_cores: CPU cores one copy needs (NumberOfCpuCoresRequired, at least 0.25). Default: none.
    copies: copies at creation. Default: 1.
    min_instances: the fewest instances managed instance scaling keeps. Default: 1. 0 lets the
        endpoint release every instance; EndpointScaling(scale_to_zero=True) needs it.
    name: the inference component's name. Default: generated from the construct path.
    """

    min_memory_mb: int
    max_instances: int
    accelerators: int | None = 1
    cpu_cores: float | None = None
    copies: int = 1
    min_instances: int = 1
    name: str | None = None

    def __post_init__(self) -> None:
        with Checks("InferenceComponentOptions") as check:
            check.integer(
                "min_memory_mb",
                self.min_memory_mb,
                minimum=128,
                maximum=10_000_000,
                fix="the memory one copy reserves in MB, e.g. 24576 for a model that needs 24 GB",
            )
            check.integer(
                "accelerators",
                self.accelerators,
                minimum=1,
                maximum=1_024,
                optional=True,
                fix="GPUs or Neuron cores per copy",
            )
            check.number(
                "cpu_cores",
                self.cpu_cores,
                minimum=0.25,
                maximum=1_024,
                optional=True,
                fix="CPU cores per copy, at least 0.25",
            )
            check.integer(
                "copies",
                self.copies,
                minimum=1,
                maximum=MAX_CAPACITY,
                fix="copies at creation; EndpointScaling scales them afterwards",
            )
            min_ok = check.integer(
                "min_instances",
                self.min_instances,
                minimum=0,
                maximum=MAX_CAPACITY,
                fix="0 lets the endpoint release every instance (scale to zero)",
            )
            max_ok = check.integer(  # checked once: a bad max_instances was reported twice with a valid minimum
                "max_instances",
                self.max_instances,
                minimum=1,
                maximum=MAX_CAPACITY,
                fix="the most instances managed instance scaling may run",
            )
            if min_ok and max_ok:
                check.rule(
                    self.min_instances <= self.max_instances,
                    f"min_instances={self.min_instances} exceeds max_instances={self.max_instances}; raise max_instances",
                    id="min_instances.above-max-instances",
                )
            _check_name(check, "name", self.name, optional=True)


def _check_name(check: Checks, prop: str, value: Any, *, optional: bool = False) -> bool:
    if not check.text(prop, value, optional=optional, max_length=63):
        return False
    return check.rule(
        _NAME.match(value) is not None,
        f"{prop}={value!r} is not a SageMaker name: 1-63 letters, digits and hyphens, starting and ending "
        "with a letter or digit",
        id=f"{prop}.not-sagemaker-name",
    )


@constructor_doc
class LlmEndpoint(Construct):
    """A SageMaker real-time endpoint serving an LLM from S3 weights and an ECR container image.

    instance_type: required; e.g. "ml.g5.2xlarge". A GPU or Neuron type; a CPU type is accepted
        with a warning (cheap tests only: an LLM on CPUs answers in minutes).
    image_uri: required; the serving container in ECR, in the endpoint's Region, e.g.
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-tgi-inference:<tag>".
    image_repository: the ECR repository of image_uri; required when image_uri is a deploy-time
        token (e.g. `repository.repository_uri_for_tag(...)`). Default: parsed from image_uri.
        The role may pull from this repository only.
    model_data_bucket / model_data_key: required; where the weights are: a key ending in ".tar.gz"
        (an archive SageMaker unpacks) or a prefix ending in "/" (uncompressed files, loaded without
        unpacking, which is faster for large models). The role may read only that object or prefix.
        A deploy-time key (a token) is taken as an archive key: the prefix form needs the literal
        "/" at synth, since it decides the container definition and the grant.
    model_data_bucket_key: the KMS key of an SSE-KMS model_data_bucket that does not know it (imported
        with s3.Bucket.from_bucket_name or from_bucket_arn); the execution role, with which SageMaker
        downloads the weights, gets kms:Decrypt on it. Default: the bucket's own encryption_key (an
        s3.Bucket built with a key, or from_bucket_attributes(encryption_key=...)); none for a bucket
        imported by name, which is then taken as SSE-S3. A key for a bucket that knows another is refused.
    environment: the container's environment, e.g. {"SM_NUM_GPUS": "1", "MAX_INPUT_TOKENS": "4096"}.
        Default: none. At most 100 entries.
    initial_instance_count: instances at creation. Default: 1.
    startup_health_check_timeout: how long the container may take to pass its health check once the
        weights are downloaded (60 s..1 h). Default: 15 minutes (loading an 8-70B model onto GPUs).
        EndpointScaling takes it as the model load time its lead_time must cover.
    model_data_download_timeout: how long downloading the weights may take (60 s..1 h).
        Default: 15 minutes.
    inference_component: host the model as an inference component (InferenceComponentOptions).
        Default: none (the model is the variant's; instances scale).
    volume_encryption_key: KMS key for the instances' EBS volume. Default: the construct's one KMS
        key, with rotation, retained on delete ($1 a month while it exists, AWS KMS pricing page;
        docs/security.md, "KMS keys"), for instance types with an EBS volume (and for a deploy-time instance
        type); none for types with local NVMe storage (g4dn, g5, g6, p4d, p5, trn1 and newer), which
        the instance encrypts in hardware. A key given for such a type is passed on with a warning:
        SageMaker's API model says it does not encrypt local storage (aws-cdk-lib 2.275's docs say the
        call fails; if it does, drop the key).
    endpoint_name: Default: generated from the construct path (fixed, so the role's log grant can
        name the endpoint's log group before the endpoint exists).
    variant_name: Default: "AllTraffic".
    routing_strategy: Default: "LEAST_OUTSTANDING_REQUESTS" (a generation holds an instance for
        seconds; random routing queues requests behind long ones). Or "RANDOM".
    network_isolation: no network access for the container. Default: True (the weights come from
        S3 through SageMaker; a container that downloads from the Hub needs False). A deploy-time
        token (a "true"/"false" parameter) reaches the template as given.
    latency_alarm_threshold: alarm when p90 ModelLatency stays above it for 5 minutes.
        Default: 60 seconds (about 1,000 tokens at 20 tokens per second); set your latency target.
        A deploy-time Duration must be built with cdk.Duration.seconds(...): the alarm then compares
        the latency in seconds with the parameter.

    The execution role is trusted by sagemaker.amazonaws.com for this account's and Region's
    SageMaker only (aws:SourceArn); it may read the weights, pull the image, write its own log
    groups, publish metrics under /aws/sagemaker/ only, and create grants on the volume key for AWS
    resources only (kms:GrantIsForAWSResource).
    alarm_actions: actions for every alarm. Default: none.

    Attributes: `endpoint_name`, `variant_name`, `inference_component_name` (or None),
    `inference_component_options` (or None),
    `instance_type`, `startup_health_check_timeout`, `role`, `volume_key` (or None), `model`,
    `endpoint_config`, `endpoint`, `inference_component` (or None), `alarms` (name -> Alarm).
    Grants: `grant_invoke` (a caller's InvokeEndpoint on this endpoint only).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        instance_type: str,
        image_uri: str,
        model_data_bucket: s3.IBucket,
        model_data_key: str,
        model_data_bucket_key: kms.IKey | None = None,
        image_repository: ecr.IRepository | None = None,
        environment: Mapping[str, str] | None = None,
        initial_instance_count: int = 1,
        startup_health_check_timeout: cdk.Duration | None = None,
        model_data_download_timeout: cdk.Duration | None = None,
        inference_component: InferenceComponentOptions | None = None,
        volume_encryption_key: kms.IKey | None = None,
        endpoint_name: str | None = None,
        variant_name: str = "AllTraffic",
        routing_strategy: str = "LEAST_OUTSTANDING_REQUESTS",
        network_isolation: bool = True,
        latency_alarm_threshold: cdk.Duration | None = None,
        alarm_actions: Sequence[cloudwatch.IAlarmAction] = (),
    ) -> None:
        super().__init__(scope, id)
        startup_health_check_timeout = startup_health_check_timeout or cdk.Duration.minutes(15)
        model_data_download_timeout = model_data_download_timeout or cdk.Duration.minutes(15)
        latency_alarm_threshold = latency_alarm_threshold or cdk.Duration.seconds(60)
        repository_arn, seconds, weights_key = self._validate(
            instance_type=instance_type,
            image_uri=image_uri,
            image_repository=image_repository,
            model_data_bucket=model_data_bucket,
            model_data_key=model_data_key,
            model_data_bucket_key=model_data_bucket_key,
            environment=environment,
            initial_instance_count=initial_instance_count,
            startup_health_check_timeout=startup_health_check_timeout,
            model_data_download_timeout=model_data_download_timeout,
            inference_component=inference_component,
            volume_encryption_key=volume_encryption_key,
            endpoint_name=endpoint_name,
            variant_name=variant_name,
            routing_strategy=routing_strategy,
            network_isolation=network_isolation,
            latency_alarm_threshold=latency_alarm_threshold,
            alarm_actions=alarm_actions,
        )
        self.instance_type = instance_type
        self.variant_name = variant_name
        self.inference_component_options = inference_component
        self.startup_health_check_timeout = startup_health_check_timeout
        self.endpoint_name = endpoint_name or cdk.Names.unique_resource_name(
            self, max_length=63, separator="-"
        )
        self.inference_component_name: str | None = None
        if inference_component is not None:
            self.inference_component_name = (
                inference_component.name
                or cdk.Names.unique_resource_name(self, max_length=57, separator="-") + "-model"
            )
        if not is_token(instance_type) and not is_accelerated(instance_type):
            warn(
                self,
                "cpu-instance",
                f"instance_type={instance_type!r} has no GPU or Neuron accelerator: an LLM on CPUs answers in "
                "minutes, not seconds. Use it for cheap tests only; serve with a g5, g6, p4d, p5, inf2 or trn1 type",
            )

        stack = cdk.Stack.of(self)
        self.role = iam.Role(
            self,
            "ExecutionRole",
            assumed_by=iam.ServicePrincipal(
                "sagemaker.amazonaws.com",
                conditions={"ArnLike": {SOURCE_ARN_KEY: stack.format_arn(
                    service="sagemaker", resource="*", arn_format=cdk.ArnFormat.NO_RESOURCE_NAME)}},
            ),
            description=f"genai-pacer: pulls the image and weights of {self.node.path}",
        )
        service_policy = self._grant(model_data_bucket, model_data_key, weights_key, repository_arn, image_repository)

        self.volume_key = self._volume_key(instance_type, volume_encryption_key)

        self.model = sagemaker.CfnModel(
            self,
            "Model",
            execution_role_arn=self.role.role_arn,
            enable_network_isolation=cdk.Token.as_any(network_isolation) if is_token(network_isolation) else network_isolation,
            primary_container=self._container(image_uri, model_data_bucket, model_data_key, environment),
        )
        timeouts: dict[str, Any] = {
            "container_startup_health_check_timeout_in_seconds": seconds["startup_health_check_timeout"],
            "model_data_download_timeout_in_seconds": seconds["model_data_download_timeout"],
        }
        routing = sagemaker.CfnEndpointConfig.RoutingConfigProperty(routing_strategy=routing_strategy)
        if inference_component is None:
            variant = sagemaker.CfnEndpointConfig.ProductionVariantProperty(
                variant_name=variant_name,
                model_name=self.model.attr_model_name,
                instance_type=instance_type,
                initial_instance_count=initial_instance_count,
                routing_config=routing,
                **timeouts,
            )
        else:
            variant = sagemaker.CfnEndpointConfig.ProductionVariantProperty(
                variant_name=variant_name,
                instance_type=instance_type,
                initial_instance_count=initial_instance_count,
                routing_config=routing,
                managed_instance_scaling=sagemaker.CfnEndpointConfig.ManagedInstanceScalingProperty(
                    status="ENABLED",
                    min_instance_count=inference_component.min_instances,
                    max_instance_count=inference_component.max_instances,
                ),
            )
        self.endpoint_config = sagemaker.CfnEndpointConfig(
            self,
            "EndpointConfig",
            production_variants=[variant],
            kms_key_id=self.volume_key.key_arn if self.volume_key is not None else None,
            # An endpoint that hosts inference components needs the role on the config as well.
            execution_role_arn=self.role.role_arn if inference_component is not None else None,
        )
        self.endpoint = sagemaker.CfnEndpoint(
            self,
            "Endpoint",
            endpoint_name=self.endpoint_name,
            endpoint_config_name=self.endpoint_config.attr_endpoint_config_name,
        )
        # The instances pull the image and weights with the role while the endpoint is created: its
        # policies must exist first (the role itself is referenced, so CloudFormation orders it).
        for resource in (self.model, self.endpoint_config, self.endpoint):
            resource.node.add_dependency(self.role.node.find_child("DefaultPolicy"), service_policy)

        self.inference_component: sagemaker.CfnInferenceComponent | None = None
        if inference_component is not None:
            requirements = (
                sagemaker.CfnInferenceComponent.InferenceComponentComputeResourceRequirementsProperty(
                    min_memory_required_in_mb=inference_component.min_memory_mb,
                    number_of_accelerator_devices_required=inference_component.accelerators,
                    number_of_cpu_cores_required=inference_component.cpu_cores,
                )
            )
            self.inference_component = sagemaker.CfnInferenceComponent(
                self,
                "InferenceComponent",
                endpoint_name=self.endpoint.attr_endpoint_name,
                variant_name=variant_name,
                inference_component_name=self.inference_component_name,
                specification=sagemaker.CfnInferenceComponent.InferenceComponentSpecificationProperty(
                    model_name=self.model.attr_model_name,
                    compute_resource_requirements=requirements,
                    startup_parameters=sagemaker.CfnInferenceComponent.InferenceComponentStartupParametersProperty(
                        **timeouts
                    ),
                ),
                runtime_config=sagemaker.CfnInferenceComponent.InferenceComponentRuntimeConfigProperty(
                    copy_count=inference_component.copies
                ),
            )
        self.alarms = self._alarms(latency_alarm_threshold, seconds["latency_alarm_threshold"], alarm_actions)

    # --- grants ----------------------------------------------------------------------------------

    def grant_invoke(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let a caller invoke this endpoint (InvokeEndpoint, and InvokeEndpointWithResponseStream,
        which needs the same action), on this endpoint's ARN only; with an inference component,
        on the component's ARN too."""
        resources = [self.endpoint.attr_endpoint_arn]
        if self.inference_component is not None:
            resources.append(self.inference_component.attr_inference_component_arn)
        # SageMaker endpoints take no resource policy: the grant is on the caller's identity policy (as
        # aws-cdk's sagemaker-alpha Endpoint.grantInvoke does); a principal of another account gets none.
        return iam.Grant.add_to_principal(grantee=grantee, actions=list(INVOKE_ENDPOINT_ACTIONS), resource_arns=resources)

    # --- metrics ---------------------------------------------------------------------------------

    @property
    def scaled_resource(self) -> cdk.CfnResource:
        """What EndpointScaling registers: the inference component, or else the endpoint's variant."""
        return self.inference_component if self.inference_component is not None else self.endpoint

    def _dimensions(self) -> dict[str, str]:
        if self.inference_component_name is not None:
            return {"InferenceComponentName": self.inference_component_name}
        return {"EndpointName": self.endpoint_name, "VariantName": self.variant_name}

    def metric(self, metric_name: str, **props: Any) -> cloudwatch.Metric:
        """A metric of this endpoint (or its inference component) in AWS/SageMaker."""
        props.setdefault("period", cdk.Duration.minutes(1))
        return cloudwatch.Metric(
            namespace="AWS/SageMaker", metric_name=metric_name, dimensions_map=self._dimensions(), **props
        )

    def metric_model_latency(self, **props: Any) -> cloudwatch.Metric:
        """ModelLatency in microseconds (time in the container), p90 over 1 minute by default."""
        props.setdefault("statistic", "p90")
        return self.metric("ModelLatency", **props)

    def metric_invocation_5xx_errors(self, **props: Any) -> cloudwatch.Metric:
        """Invocations the model answered with a 5xx error, summed."""
        props.setdefault("statistic", "Sum")
        return self.metric("Invocation5XXErrors", **props)

    def metric_invocations(self, **props: Any) -> cloudwatch.Metric:
        props.setdefault("statistic", "Sum")
        return self.metric("Invocations", **props)

    def metric_concurrent_requests(self, **props: Any) -> cloudwatch.Metric:
        """Requests in flight per model (variant) or per copy (inference component): the signal
        EndpointScaling tracks. Queued requests and streams until their last token count. SageMaker
        publishes it for the Minimum and Maximum statistics; the default is the Maximum in each minute."""
        props.setdefault("statistic", "Maximum")
        name = "ConcurrentRequestsPerCopy" if self.inference_component_name else "ConcurrentRequestsPerModel"
        return self.metric(name, **props)

    # --- internals -------------------------------------------------------------------------------

    def _validate(self, **props: Any) -> tuple[str | None, dict[str, Any], kms.IKey | None]:
        """Every prop at once; returns the ECR repository ARN parsed from a literal image_uri, each
        Duration prop in seconds (a deploy-time one as the parameter itself) and the weights' KMS key."""
        repository_arn = None
        seconds: dict[str, Any] = {}
        with Checks("LlmEndpoint", scope=self) as check:
            instance_type = props["instance_type"]
            if check.text("instance_type", instance_type, fix="an ml.* type such as 'ml.g5.2xlarge'"):
                check.rule(
                    _INSTANCE_TYPE.match(instance_type) is not None,
                    f"instance_type={instance_type!r} is not a SageMaker instance type; use the ml. form, e.g. "
                    "'ml.g5.2xlarge'",
                    id="instance_type.not-sagemaker-type",
                )
            repository = props["image_repository"]
            check.instance(
                "image_repository", repository, ecr.IRepository, "an ecr repository", optional=True
            )
            image_uri = props["image_uri"]
            if is_token(image_uri):
                check.rule(
                    repository is not None,
                    "image_uri is a deploy-time token, so the repository to grant cannot be read from it; pass "
                    "image_repository (the ECR repository the image is in)",
                    id="image_uri.deploy-time",
                )
            elif check.text("image_uri", image_uri, max_length=255):
                match = _ECR_URI.match(image_uri)
                if (
                    check.rule(
                        match is not None or repository is not None,
                        f"image_uri={image_uri!r} is not an ECR image URI "
                        "(<account>.dkr.ecr.<region>.amazonaws.com/<repository>:<tag>); SageMaker pulls from ECR in "
                        "the endpoint's Region",
                        id="image_uri.not-ecr",
                    )
                    and match is not None
                ):
                    repository_arn = cdk.Stack.of(self).format_arn(
                        service="ecr",
                        region=match["region"],
                        account=match["account"],
                        resource="repository",
                        resource_name=match["repository"],
                    )
            check.instance("model_data_bucket", props["model_data_bucket"], s3.IBucket, "an s3 bucket")
            weights_key = bucket_key(
                check, bucket_name="model_data_bucket", bucket=props["model_data_bucket"],
                key_name="model_data_bucket_key", key=props["model_data_bucket_key"],
            )
            key = props["model_data_key"]
            if (
                check.text("model_data_key", key)
                and check_key_bytes(check, "model_data_key", key, "the weights' archive key or prefix")
                and not is_token(key)
            ):
                check.rule(
                    key.endswith((".tar.gz", "/")) and not key.startswith(("/", "s3://")),
                    f"model_data_key={key!r} must be an object key ending in '.tar.gz' (an archive) or a prefix "
                    "ending in '/' (uncompressed weights), without 's3://' or a leading '/'",
                    id="model_data_key.not-archive-or-prefix",
                )
            environment = props["environment"]
            if environment is not None and check.instance(
                "environment", environment, Mapping, "a dict of variable name -> string value"
            ):
                check.rule(
                    len(environment) <= _MAX_ENVIRONMENT,
                    f"environment has {len(environment)} entries; SageMaker allows at most {_MAX_ENVIRONMENT}",
                    id="environment.too-many",
                )
                for name, value in environment.items():
                    if check.text("environment name", name, max_length=_MAX_ENVIRONMENT_LENGTH):
                        check.text(
                            f"environment[{name!r}]",
                            value,
                            max_length=_MAX_ENVIRONMENT_LENGTH,
                            fix="environment values are strings: write '1', not 1",
                        )
            token_of_kind(check, "initial_instance_count", props["initial_instance_count"], "number",
                          fix="pass CfnParameter(type='Number').value_as_number, or an integer")
            check.integer(
                "initial_instance_count",
                props["initial_instance_count"],
                minimum=1,
                maximum=MAX_CAPACITY,
                fix="instances at creation; EndpointScaling scales them afterwards",
            )
            for name in ("startup_health_check_timeout", "model_data_download_timeout"):
                if check.duration(
                    name,
                    props[name],
                    minimum=_MIN_TIMEOUT,
                    maximum=_MAX_TIMEOUT,
                    fix="SageMaker allows 60 seconds to 1 hour, e.g. cdk.Duration.minutes(15)",
                ):
                    value = props[name].to_seconds(integral=False)
                    if check.rule(
                        value == int(value),
                        f"{name}={props[name].to_human_string()} is not whole seconds; SageMaker takes seconds: "
                        f"use cdk.Duration.seconds({math.ceil(value)})",
                        id=f"{name}.not-whole-seconds",
                    ):
                        seconds[name] = int(value)
                elif isinstance(props[name], cdk.Duration) and props[name].is_unresolved():
                    seconds[name] = duration_in(check, name, props[name], "seconds", why="SageMaker takes it")
            options = props["inference_component"]
            ic_ok = check.instance(
                "inference_component",
                options,
                InferenceComponentOptions,
                "InferenceComponentOptions(min_memory_mb=..., max_instances=...)",
                optional=True,
            )
            check.instance("volume_encryption_key", props["volume_encryption_key"], kms.IKey, "a kms.Key", optional=True)
            _check_name(check, "endpoint_name", props["endpoint_name"], optional=True)
            _check_name(check, "variant_name", props["variant_name"])
            if token_kind(props["routing_strategy"]) is not None:
                token_of_kind(check, "routing_strategy", props["routing_strategy"], "string",
                              fix=f"pass CfnParameter(allowed_values={list(ROUTING_STRATEGIES)}).value_as_string, or one of them")
            else:
                check.one_of("routing_strategy", props["routing_strategy"], ROUTING_STRATEGIES)
            # CloudFormation takes "true" / "false" for a Boolean: a string parameter passes through
            if token_kind(props["network_isolation"]) is not None:
                token_of_kind(check, "network_isolation", props["network_isolation"], "string",
                              fix="pass CfnParameter(allowed_values=['true', 'false']).value_as_string, or True or False")
            else:
                check.instance("network_isolation", props["network_isolation"], bool, "True or False")
            threshold = props["latency_alarm_threshold"]
            if check.duration(
                "latency_alarm_threshold",
                threshold,
                minimum=cdk.Duration.millis(1),
                maximum=cdk.Duration.hours(1),
                fix="the p90 model latency you consider too slow, e.g. cdk.Duration.seconds(60)",
            ):
                seconds["latency_alarm_threshold"] = threshold.to_seconds(integral=False)
            elif isinstance(threshold, cdk.Duration) and threshold.is_unresolved():
                seconds["latency_alarm_threshold"] = duration_in(
                    check, "latency_alarm_threshold", threshold, "seconds", why="the alarm compares the latency")
            check.alarm_actions("alarm_actions", props["alarm_actions"])
            if (
                ic_ok
                and options is not None
                and isinstance(instance_type, str)
                and not is_token(instance_type)
                and _INSTANCE_TYPE.match(instance_type)
            ):
                check.rule(
                    options.accelerators is None or is_accelerated(instance_type),
                    f"inference_component asks for {options.accelerators} accelerator(s) per copy but {instance_type} "
                    "has none; pass accelerators=None and cpu_cores=... for a CPU type",
                    id="inference_component.accelerators-without-gpu",
                )
                check.rule(
                    options.accelerators is not None or options.cpu_cores is not None,
                    "inference_component has neither accelerators nor cpu_cores: a copy must reserve one of them",
                    id="inference_component.no-reservation",
                )
        return repository_arn, seconds, weights_key

    def _grant(
        self,
        bucket: s3.IBucket,
        key: str,
        weights_key: kms.IKey | None,
        repository_arn: str | None,
        repository: ecr.IRepository | None,
    ) -> iam.Policy:
        """Exactly what the instances need: the weights, the image, their own log group, metrics."""
        role = self.role
        prefix = key.endswith("/") if not is_token(key) else False
        objects = bucket.arn_for_objects(f"{key}*" if prefix else key)
        role.add_to_principal_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=[objects]))
        if prefix:
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["s3:ListBucket"],
                    resources=[bucket.bucket_arn],
                    conditions={"StringLike": {"s3:prefix": [f"{key}*"]}},
                )
            )
        # SageMaker downloads the weights with this role ("the IAM role that SageMaker can assume to access model
        # artifacts", CreateModel ExecutionRoleArn in botocore's sagemaker model): S3's download rule applies.
        grant_keys(role, (weights_key, KMS_READ_ACTIONS))
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=[
                    "ecr:BatchGetImage",
                    "ecr:GetDownloadUrlForLayer",
                    "ecr:BatchCheckLayerAvailability",
                ],
                resources=[repository.repository_arn if repository is not None else repository_arn],  # type: ignore[list-item]
            )
        )
        stack = cdk.Stack.of(self)
        groups = [f"/aws/sagemaker/Endpoints/{self.endpoint_name}"]
        if self.inference_component_name is not None:
            groups.append(f"/aws/sagemaker/InferenceComponents/{self.inference_component_name}")
        streams: list[str] = []
        for group in groups:
            arn = stack.format_arn(
                service="logs",
                resource="log-group",
                resource_name=group,
                arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
            )
            role.add_to_principal_policy(
                iam.PolicyStatement(actions=["logs:CreateLogGroup"], resources=[arn])
            )
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                    resources=[f"{arn}:log-stream:*"],
                )
            )
            streams.append(f"{arn}:log-stream:*")
        default_policy = cast(Construct, role.node.find_child("DefaultPolicy"))  # the policy the grants above made
        # Exactly this endpoint's log groups' streams: a user's own :log-stream:* on this role stays reported.
        acknowledge_exact_resources(
            default_policy, resources=[flattened(self, arn) for arn in streams], reason=_LOGS_WILDCARD_REASON
        )
        if prefix:  # exactly the weights prefix, however the bucket's ARN is written (literal, same stack,
            # imported, or another stack's: flattened at validation, once that is an Fn::ImportValue)
            acknowledge_exact_resources_at_validation(
                default_policy, resources=lambda: [flattened(default_policy, objects)], reason=_PREFIX_WILDCARD_REASON
            )
        # Actions with no resource-level permissions, alone in a policy so only they are acknowledged.
        service_policy = iam.Policy(
            self,
            "ImagePullAndMetrics",
            statements=[
                iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]),
                iam.PolicyStatement(
                    actions=["cloudwatch:PutMetricData"],
                    resources=["*"],
                    conditions={"StringLike": {"cloudwatch:namespace": METRIC_NAMESPACE_PATTERN}},
                ),
            ],
        )
        role.attach_inline_policy(service_policy)
        cdk.Validations.of(service_policy).acknowledge(
            cdk.Acknowledgment(id="AwsSolutions-IAM5[Resource::*]", reason=_SERVICE_WILDCARD_REASON)
        )
        return service_policy

    def _volume_key(self, instance_type: str, given: kms.IKey | None) -> kms.IKey | None:
        """The EBS volume key: the given one, else a new one unless the type has local NVMe storage only."""
        local = not is_token(instance_type) and has_local_storage(instance_type)
        if given is not None and local:
            warn(
                self,
                "volume-key-local-storage",
                f"volume_encryption_key is set but {instance_type} has local NVMe storage, which the instance encrypts in "
                f"hardware: SageMaker's API says the key {KMS_KEY_LOCAL_STORAGE_NOTE}. aws-cdk-lib's documentation says "
                "CreateEndpointConfig fails with a key for such types; if the deploy fails there, drop the key",
            )
        if given is None and local:
            return None
        key = given or construct_key(
            self, "VolumeKey", description=f"genai-pacer: encrypts the instance volumes of {self.node.path}"
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:DescribeKey"],
                resources=[key.key_arn],
            )
        )
        # SageMaker attaches the volume through a grant; only for an AWS resource (KMS developer guide,
        # kms:GrantIsForAWSResource), never a grant the role's holder could hand to anyone.
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["kms:CreateGrant"],
                resources=[key.key_arn],
                conditions={"Bool": {"kms:GrantIsForAWSResource": True}},
            )
        )
        return key

    def _container(
        self, image_uri: str, bucket: s3.IBucket, key: str, environment: Mapping[str, str] | None
    ) -> sagemaker.CfnModel.ContainerDefinitionProperty:
        uri = f"s3://{bucket.bucket_name}/{key}"
        if not is_token(key) and key.endswith("/"):
            return sagemaker.CfnModel.ContainerDefinitionProperty(
                image=image_uri,
                environment=dict(environment) if environment else None,
                model_data_source=sagemaker.CfnModel.ModelDataSourceProperty(
                    s3_data_source=sagemaker.CfnModel.S3DataSourceProperty(
                        s3_uri=uri, s3_data_type="S3Prefix", compression_type="None"
                    )
                ),
            )
        return sagemaker.CfnModel.ContainerDefinitionProperty(
            image=image_uri, environment=dict(environment) if environment else None, model_data_url=uri
        )

    def _alarms(
        self, latency: cdk.Duration, seconds: Any, actions: Sequence[cloudwatch.IAlarmAction]
    ) -> dict[str, cloudwatch.Alarm]:
        five_minutes = cdk.Duration.minutes(5)
        p90: cloudwatch.IMetric = self.metric_model_latency(period=cdk.Duration.minutes(1))
        if is_token(seconds):  # CloudFormation cannot scale a parameter: compare in seconds instead
            p90 = cloudwatch.MathExpression(expression="latency / 1000000", using_metrics={"latency": p90},
                                            label="p90 model latency, s", period=cdk.Duration.minutes(1))
            threshold, text = seconds, f"{shown(seconds)} seconds"
        else:
            threshold, text = seconds * 1_000_000, latency.to_human_string()
        specs: dict[str, tuple[cloudwatch.IMetric, float, int, str]] = {
            "ModelLatency": (
                p90,
                threshold,
                5,
                f"p90 model latency stayed above {text} for 5 minutes: the model is saturated "
                "(check concurrency against the scaling target) or answers are longer than planned",
            ),
            "Invocation5XXErrors": (
                self.metric_invocation_5xx_errors(period=five_minutes),
                0,
                1,
                "the model answered with 5xx errors: read the container logs (out-of-memory, a request longer than "
                "the model's context, a crashed server)",
            ),
        }
        return {
            name: threshold_alarm(
                self, f"{name}Alarm", metric=metric, threshold=threshold, description=description,
                actions=actions, periods=periods,
            )
            for name, (metric, threshold, periods, description) in specs.items()
        }
