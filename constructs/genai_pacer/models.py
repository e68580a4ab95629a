"""Which Bedrock model a construct calls, and the exact IAM resources that call needs.

Bedrock authorizes a call against every resource it passes through, not only the one named in
ModelId, so each kind of target needs its own set of ARNs (granting `*` instead would fail cdk-nag
and let the role call any model):

- an on-demand foundation model: its ARN in the caller's Region;
- a geographic cross-Region profile (`us.`, `eu.`, `apac.`, ...): the profile, plus the foundation
  model in the source Region and in every Region the profile routes to, those model ARNs usable
  only through the profile (`bedrock:InferenceProfileArn`). AWS's policy:
  https://docs.aws.amazon.com/bedrock/latest/userguide/geographic-cross-region-inference.html
- a global profile (`global.`): the documented three-part policy, i.e. the profile in the source
  Region, the foundation model in the source Region, and the Region-less foundation model
  `arn:aws:bedrock:::foundation-model/<id>` (evaluated with `aws:RequestedRegion` = `unspecified`);
  no list of destination Regions:
  https://docs.aws.amazon.com/bedrock/latest/userguide/global-cross-region-inference.html
- an application inference profile (invoked by its ARN): the profile plus what it copies from,
  i.e. the foundation model, or the system profile and the foundation model in each Region
  associated with it ("When you specify an inference profile in the Resource field ... you must
  also specify the foundation model in each Region associated with it"):
  https://docs.aws.amazon.com/bedrock/latest/userguide/inference-profiles-prereq.html
  Those underlying grants carry NO condition (APPLICATION_PROFILE_BYPASS says why and what to do):
  the role can also call the copied model or system profile directly, around the application
  profile's cost-allocation tags.
- provisioned throughput (invoked by its ARN): the provisioned-model ARN:
  https://docs.aws.amazon.com/bedrock/latest/userguide/security_iam_id-based-policy-examples.html
  and https://docs.aws.amazon.com/bedrock/latest/userguide/prov-thru-prereq.html

A foundation-model ARN built from a profile id (`us.anthropic...`) names no model and is refused
at run time, so such ids are refused here instead, with the call to make.

A model genai-pacer knows to be deprecated or past its end of life on Bedrock (DEPRECATED_MODELS)
gets a synth warning, `genai-pacer:deprecated-model`, from every construct that calls it, naming the
date and a replacement its source names.

Any object shaped like aws-cdk's `aws_bedrock_alpha.IBedrockInvokable` (`invokable_arn` and
`grant_invoke`: BedrockFoundationModel, CrossRegionInferenceProfile, ApplicationInferenceProfile)
becomes a BedrockModel through `as_bedrock_model` / `BedrockModel.from_invokable`, without
importing the alpha package; a PromptRouter is refused (it spans several models).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, cast

import aws_cdk as cdk
from aws_cdk import aws_bedrock as bedrock
from aws_cdk import aws_iam as iam

from constructs import Construct

from ._internal.checks import (
    WARNING_PREFIX,
    Checks,
    InvalidPropsError,
    Problem,
    _show,
    is_token,
    kind_of,
    token_kind,
    warn,
)

__all__ = [
    "APPLICATION_PROFILE_BYPASS",
    "DEPRECATED_MODELS",
    "DEPRECATED_MODEL_WARNING",
    "BedrockModel",
    "INFERENCE_PROFILE_ARN_KEY",
    "KNOWN_PROVIDERS",
    "ModelKind",
    "ModelRetirement",
    "PROFILE_REGIONS",
    "SERVICE_TIER_KEY",
    "as_bedrock_model",
]

#: Regions that the geographic cross-Region inference profiles commonly route to. Routing differs
#: per model and grows over time: check `aws bedrock get-inference-profile` and pass `regions=`
#: when your profile differs. If a list is short, calls Bedrock routes to a missing Region fail
#: with AccessDeniedException (the grant names no model there): pass regions= from
#: get-inference-profile. A prefix not listed here (e.g. `ca.`, for which no source was found) is
#: refused at synth until regions= is given, so no Region is guessed.
#: Sources (the user guide lists destinations per model, so no list is right for every model:
#: https://docs.aws.amazon.com/bedrock/latest/userguide/inference-profiles-support.html):
#: us, eu, apac: aws-cdk's own @aws-cdk/aws-bedrock-alpha 2.275.0 REGION_TO_GEO_AREA (eu-north-1
#: is kept from earlier releases, unconfirmed: an extra Region only widens a grant usable through
#: the profile alone); us-gov, jp (Tokyo, Osaka), au (Sydney, Melbourne): its
#: CrossRegionInferenceProfileRegion US_GOV, JP, AU:
#: https://github.com/aws/aws-cdk/blob/v2.275.0-alpha.0/packages/@aws-cdk/aws-bedrock-alpha/bedrock/inference-profiles/cross-region-inference-profile.ts
PROFILE_REGIONS: dict[str, tuple[str, ...]] = {
    "us": ("us-east-1", "us-east-2", "us-west-2"),
    "us-gov": ("us-gov-east-1", "us-gov-west-1"),
    "eu": ("eu-central-1", "eu-north-1", "eu-west-1", "eu-west-3"),
    "apac": ("ap-northeast-1", "ap-northeast-2", "ap-south-1", "ap-southeast-1", "ap-southeast-2"),
    "jp": ("ap-northeast-1", "ap-northeast-3"),
    "au": ("ap-southeast-2", "ap-southeast-4"),
}

#: The IAM condition key that holds the inference profile a foundation-model call came through
#: ("use the ...InferenceProfileArn condition key ... in a statement that scopes to the
#: foundation-model resources"): https://docs.aws.amazon.com/bedrock/latest/userguide/inference-profiles-prereq.html
#: and the Service Authorization Reference for Amazon Bedrock (condition keys):
#: https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonbedrock.html
INFERENCE_PROFILE_ARN_KEY = "bedrock:InferenceProfileArn"
#: The global condition key the documented global-profile policy conditions on ("unspecified" for
#: the Region-less model): https://docs.aws.amazon.com/bedrock/latest/userguide/global-cross-region-inference.html
REQUESTED_REGION_KEY = "aws:RequestedRegion"
#: The condition key that holds a call's service tier. The Bedrock user guide's "Control access to
#: service tiers" (https://docs.aws.amazon.com/bedrock/latest/userguide/security_iam_id-based-policy-examples-agent.html)
#: documents it with a Deny on bedrock:InvokeModel and StringEquals over the tiers to refuse (values
#: reserved, priority, default, flex), and notes that a call naming no tier is served by default without
#: matching it; the Service Authorization Reference lists the key for Amazon Bedrock ("Filters access by
#: the specified ServiceTier", String: https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonbedrock.html#amazonbedrock-policy-keys),
#: but its actions table was not found to name InvokeModel for it (checked 2026-12-05). So genai-pacer
#: uses it only in the documented form, a Deny that matches the tiers a role was not given: if the key
#: were not set on a call, the Deny would match nothing and the role keeps the access it was granted
#: (README, deploy-only facts).
SERVICE_TIER_KEY = "bedrock:ServiceTier"
#: How a role given a deploy-time tier is fenced: its other tiers are not known at synth, so the Deny names
#: the tier it may use instead, StringNotEquals over the given tiers, and only where the call carries the
#: key (Null false). Both from the IAM user guide's condition operators page
#: (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html):
#: a negated operator such as StringNotEquals is TRUE when the key is not in the request, so on its own it
#: would deny every call naming no tier (and ...IfExists is true for an absent key as well); the Null
#: operator tests presence, and a statement's operators are ANDed
#: (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_multi-value-conditions.html, where
#: a negated operator's values are NOR-ed: none of them). So an untiered call stays allowed (served at
#: default), a call at the parameter's value is allowed (a "default" one included: the key then holds
#: "default", which the user guide's deny-all example lists), and any other tier is denied. Unlike the
#: synth-time form, this one fails closed: were the key to hold another spelling than the guide's four values,
#: the role's own calls would be denied (AccessDeniedException on the first call; docs/verified.md).
NEGATED_OPERATOR = "StringNotEquals"
PRESENCE_OPERATOR = "Null"
#: The values it takes: botocore's ServiceTierType (the runtime's one list, checked by
#: tests/test_aws_facts_bedrock.py).
_SERVICE_TIER_VALUES = ("priority", "default", "flex", "reserved")

APPLICATION_PROFILE_BYPASS = """\
An application inference profile's grant allows bedrock:InvokeModel on the profile AND, with no
condition, on what it copies (the system-defined profile and its foundation models, or the
foundation model): the role can call those directly, around the application profile and its
cost-allocation tags. genai-pacer does not condition them on bedrock:InferenceProfileArn, because
no AWS source says which ARN Bedrock puts in that key when a call arrives through an application
profile (the application profile's, the system profile's, or none): a wrong guess would make every
call fail with AccessDeniedException. To close the bypass, deny what your account should not do,
in a service control policy or a permissions boundary on the role, and verify it with a deployed
call through the profile (`make integ`) before enforcing it:
- deny bedrock:InvokeModel* on the copied foundation-model ARNs when bedrock:InferenceProfileArn
  is absent ({"Null": {"bedrock:InferenceProfileArn": "true"}}): direct model calls carry no
  profile, so they are refused;
- deny bedrock:InvokeModel* on the system-defined profile's ARN unless bedrock:InferenceProfileArn
  equals the application profile's ARN, if your test shows Bedrock sets it so.
Sources: https://docs.aws.amazon.com/bedrock/latest/userguide/inference-profiles-prereq.html,
https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonbedrock.html
"""

@dataclass(frozen=True)
class ModelRetirement:
    """Why a foundation model should no longer be called, each date beside its source.

    deprecated: when the model was marked deprecated (Legacy) for Amazon Bedrock; end_of_life: the
    date Bedrock stops serving it (None until a source gives one); replacement: a foundation model
    id the cited source names instead (check its own lifecycle before relying on it). Dates are ISO
    (YYYY-MM-DD).
    """

    name: str
    deprecated: str
    deprecated_source: str
    end_of_life: str | None
    end_of_life_source: str | None
    replacement: str
    replacement_source: str

    def warning(self, model_id: str) -> str:
        """The synth warning for a construct that calls `model_id` (this model, or a profile of it)."""
        eol = (f"its end of life on Amazon Bedrock is {self.end_of_life} ({self.end_of_life_source}): calls fail from that date on"
               if self.end_of_life else "no end-of-life date is known yet")
        return (f"{model_id} is {self.name}, deprecated for Amazon Bedrock since {self.deprecated} "
                f"({self.deprecated_source}); {eol}. Move to a current model, e.g. {self.replacement}, the "
                f"replacement {self.replacement_source} names (check its lifecycle and Regions first).")


#: The synth warning id a construct raises when it is given a model in DEPRECATED_MODELS.
_DEPRECATED_MODEL = "deprecated-model"
DEPRECATED_MODEL_WARNING = WARNING_PREFIX + _DEPRECATED_MODEL

#: Foundation models genai-pacer knows to be deprecated or end-of-life on Amazon Bedrock: only models
#: the library or its examples used, each fact beside its source, checked 2026-12-04. Not a lifecycle
#: table: AWS's is https://docs.aws.amazon.com/bedrock/latest/userguide/model-lifecycle-legacy.html
#: (models launched before 2026-09-07) and GetFoundationModel's `modelLifecycle` gives it per Region;
#: a model missing here is not thereby current. Keys are foundation model ids; a cross-Region or
#: application profile of the model is matched through its underlying model.
DEPRECATED_MODELS: Mapping[str, ModelRetirement] = MappingProxyType({
    "anthropic.claude-3-5-haiku-20241022-v1:0": ModelRetirement(
        name="Claude 3.5 Haiku",
        # Anthropic's Bedrock model table: "Claude Haiku 3.5 ... Deprecated as of December 19, 2025."
        deprecated="2025-12-19",
        deprecated_source="https://platform.claude.com/docs/en/build-with-claude/claude-on-amazon-bedrock",
        # AWS's model card: "Model lifecycle: Legacy", "Model EOL date: June 19, 2026" (AWS's dates
        # are the ones that apply on Bedrock, per its model lifecycle page).
        end_of_life="2026-06-19",
        end_of_life_source="https://docs.aws.amazon.com/bedrock/latest/userguide/model-card-anthropic-claude-3-5-haiku.html",
        # Anthropic's deprecations page: claude-3-5-haiku-20241022 -> claude-haiku-4-5-20251001.
        replacement="anthropic.claude-haiku-4-5-20251001-v1:0",
        replacement_source="https://platform.claude.com/docs/en/about-claude/model-deprecations",
    ),
})

GLOBAL_PREFIX = "global"

#: Model providers whose ids start foundation-model ids (`anthropic.claude-...`): every provider
#: in aws-cdk-lib 2.275's `FoundationModelIdentifier`. Used to tell a profile with a geography
#: prefix genai-pacer does not know (`xx.anthropic.claude-...`) from a foundation model id.
KNOWN_PROVIDERS: frozenset[str] = frozenset(
    {
        "ai21", "amazon", "anthropic", "cohere", "deepseek", "luma", "meta", "minimax", "mistral",
        "openai", "qwen", "stability", "twelvelabs", "writer", "zai",
    }
)

ModelKind = Literal["foundation", "geographic-profile", "global-profile", "application-profile", "provisioned"]
KINDS: tuple[ModelKind, ...] = (
    "foundation", "geographic-profile", "global-profile", "application-profile", "provisioned",
)

_MODEL_ID = re.compile(r"^[a-z0-9-]+\.[A-Za-z0-9.:_-]+$")
_REGION = re.compile(r"^[a-z]{2,4}(-[a-z]+)+-\d{1,2}$")
_ARN = re.compile(
    r"^arn:(?P<partition>aws[a-z-]*):bedrock:(?P<region>[a-z0-9-]*):(?P<account>\d{12})?:"
    r"(?P<type>[a-z-]+)/(?P<name>.+)$"
)
#: ARN resource type -> the kind it makes.
_ARN_TYPES: dict[str, ModelKind] = {
    "foundation-model": "foundation",
    "inference-profile": "geographic-profile",  # or global, by the id's prefix
    "application-inference-profile": "application-profile",
    "provisioned-model": "provisioned",
}

#: How messages name each kind.
_KIND_NAMES: dict[str, str] = {
    "foundation": "a foundation model",
    "geographic-profile": "a geographic cross-Region profile",
    "global-profile": "a global cross-Region profile",
    "application-profile": "an application inference profile",
    "provisioned": "a Provisioned Throughput model",
}

#: IAM actions of a model call: InvokeModel also authorizes Converse, and the stream action
#: ConverseStream (https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html,
#: "requires permission for the bedrock:InvokeModel action"; checked against botocore's
#: bedrock-runtime operations in tests/test_aws_facts_bedrock.py).
INVOKE_ACTIONS = ("bedrock:InvokeModel",)
STREAM_ACTIONS = ("bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream")

_GET_PROFILE = "`aws bedrock get-inference-profile --inference-profile-identifier <id>`"


@dataclass(frozen=True)
class _Arn:
    partition: str
    region: str
    account: str
    type: str
    name: str


def _parse_arn(value: str) -> _Arn | None:
    match = _ARN.match(value)
    if not match:
        return None
    return _Arn(
        match["partition"], match["region"], match["account"] or "", match["type"], match["name"]
    )


def _looks_like_arn(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("arn:")


@dataclass(frozen=True)
class _Statement:
    """One IAM statement of an invoke grant: resources and the documented conditions."""

    resources: tuple[str, ...]
    conditions: Mapping[str, Mapping[str, Any]] | None = None


@dataclass(frozen=True)
class _Source:
    """Where the call starts: the partition, Region and account its ARNs are rendered in."""

    stack: cdk.Stack
    partition: str | None  # None: the stack's partition
    region: str
    account: str

    def arn(self, resource: str, name: str, *, region: str | None = None, account: str | None = None) -> str:
        return self.stack.format_arn(
            service="bedrock",
            partition=self.partition,
            region=self.region if region is None else region,
            account=self.account if account is None else account,
            resource=resource,
            resource_name=name,
            arn_format=cdk.ArnFormat.SLASH_RESOURCE_NAME,
        )


@dataclass(frozen=True)
class BedrockModel:
    """A Bedrock model to invoke: a foundation model, an inference profile or provisioned throughput.

    Build it with a class method rather than the constructor:

    - `BedrockModel.from_id(text)`: the kind read from the id or ARN (a known geographic prefix
      makes a cross-Region profile, `global.` a global profile, an ARN its resource type);
    - `BedrockModel.foundation("amazon.nova-lite-v1:0")`: an on-demand model in the caller's Region;
    - `BedrockModel.inference_profile("us.anthropic...", regions=[...])`: a system-defined
      cross-Region profile (regions default to PROFILE_REGIONS for its prefix; none for global);
    - `BedrockModel.application_inference_profile(arn, copies=...)`: your own profile, with the
      model or system profile it was created from (CloudFormation cannot read it back);
    - `BedrockModel.provisioned(arn)`: a Provisioned Throughput model.

    Attributes: `model_id` is what goes in ModelId (the id or ARN as given; always the ARN for
    application profiles and provisioned throughput);
    `kind`; `profile_regions` (the Regions a geographic profile routes to); `copies`.
    """

    model_id: str
    profile_regions: tuple[str, ...] = ()
    kind: ModelKind | None = None
    copies: BedrockModel | None = None

    def __post_init__(self) -> None:
        if isinstance(self.profile_regions, list):  # a list from a caller: keep the value hashable
            object.__setattr__(self, "profile_regions", tuple(self.profile_regions))
        with Checks("BedrockModel") as check:
            if not check.text("model_id", self.model_id, fix=_ID_FIX) and not is_token(self.model_id):
                return
            if self.kind is None:  # BedrockModel("...") reads the kind like from_id
                regions = self.profile_regions or None
                kind = _classify(check, self.model_id, regions=regions, copies=self.copies)
                if kind is None:
                    return
                object.__setattr__(self, "kind", kind)
                if kind == "geographic-profile" and regions is None:
                    object.__setattr__(self, "profile_regions", _profile_regions(self.model_id, None))
            if is_token(self.kind):  # one_of lets a token pass, but the kind decides the grant at synth
                check.fail(f"kind is a deploy-time {token_kind(self.kind)}, but a model's kind decides its grant at synth: "
                           "build the model with a BedrockModel class method", id="kind.deploy-time")
                return
            if not check.one_of("kind", self.kind, KINDS, fix="build the model with a BedrockModel class method"):
                return
            _validate(check, self)

    # --- construction -------------------------------------------------------------------------

    @classmethod
    def foundation(cls, model_id: str) -> BedrockModel:
        """An on-demand foundation model in the caller's Region (an id such as 'amazon.nova-lite-v1:0', or its ARN)."""
        return cls(model_id, kind="foundation")

    @classmethod
    def inference_profile(cls, profile_id: str, *, regions: Sequence[str] | None = None) -> BedrockModel:
        """A system-defined cross-Region inference profile, by id or ARN.

        Geographic profiles (`us.`, `eu.`, `apac.`, ...) route to `regions`, by default
        PROFILE_REGIONS for the prefix; a prefix genai-pacer does not know needs `regions`.
        Global profiles (`global.`) take no `regions`: they are authorized against the Region-less
        foundation-model ARN, not a list of destinations.
        """
        kind: ModelKind | None = None
        with Checks("BedrockModel.inference_profile") as check:
            if check.text("profile_id", profile_id, fix=_PROFILE_FIX):
                kind = _profile_kind(check, "profile_id", profile_id, regions)
            elif is_token(profile_id):
                check.fail(
                    "profile_id is a deploy-time token: the profile's model and Regions must be known at synth "
                    "to grant them; pass the profile id as text, e.g. 'us.amazon.nova-lite-v1:0'", id="profile_id.deploy-time"
                )
        kind = cast(ModelKind, kind)  # None only on a path that recorded a problem, and Checks raised it
        resolved = _profile_regions(profile_id, regions) if kind == "geographic-profile" else ()
        return cls(profile_id, resolved, kind=kind)

    @classmethod
    def application_inference_profile(cls, arn: str, *, copies: BedrockModel | str) -> BedrockModel:
        """An application inference profile you created, invoked by its ARN.

        `copies` is the foundation model or system-defined profile the profile was created from
        (`modelSource.copyFrom`; `aws bedrock get-inference-profile` lists its models): a
        BedrockModel or an id/ARN for `from_id`. The role needs it too, and CloudFormation cannot
        read it from the profile. A deploy-time token ARN (e.g. a CfnApplicationInferenceProfile's
        `attr_inference_profile_arn`) is accepted.
        """
        source = _coerce_copies(copies)
        return cls(arn, kind="application-profile", copies=source)

    @classmethod
    def provisioned(cls, arn: str) -> BedrockModel:
        """A Provisioned Throughput model, invoked by its ARN (a deploy-time token is accepted)."""
        return cls(arn, kind="provisioned")

    @classmethod
    def from_id(
        cls,
        model_id: str,
        *,
        regions: Sequence[str] | None = None,
        copies: BedrockModel | str | None = None,
    ) -> BedrockModel:
        """The kind read from `model_id`: a profile prefix, `global.`, an ARN's type, else a foundation model.

        `regions` applies to geographic profiles, `copies` to application inference profile ARNs.
        """
        source = _coerce_copies(copies) if copies is not None else None
        kind: ModelKind | None = None
        with Checks("BedrockModel.from_id") as check:
            if check.text("model_id", model_id, fix=_ID_FIX) or is_token(model_id):
                kind = _classify(check, model_id, regions=regions, copies=source)
        kind = cast(ModelKind, kind)  # None only on a path that recorded a problem, and Checks raised it
        if kind in ("geographic-profile", "global-profile"):
            return cls.inference_profile(model_id, regions=regions)
        # Regions given for another kind reach the constructor, which refuses them by name.
        given: Any = () if regions is None else tuple(regions) if isinstance(regions, list | tuple) else regions
        return cls(model_id, given, kind=kind, copies=source)

    @classmethod
    def from_invokable(cls, invokable: Any, *, regions: Sequence[str] | None = None) -> BedrockModel:
        """A BedrockModel from an object shaped like aws-cdk's `aws_bedrock_alpha.IBedrockInvokable`.

        Read without importing the alpha package (its version tags allow no peer range):
        - a foundation model (`model_id`): BedrockModel.foundation(model_id);
        - a cross-Region (system-defined) profile (`inference_profile_id`): BedrockModel.inference_profile,
          its Regions from PROFILE_REGIONS or `regions`;
        - an application profile (`inference_profile_model`): BedrockModel.application_inference_profile
          of its `invokable_arn` (a token is fine), copying what its `inference_profile_model` gives;
        - anything else whose `invokable_arn` is a Bedrock ARN as text: BedrockModel.from_id(arn).
        Refused, with the reason: a prompt router (`routing_endpoints`: several models, so no single
        model id for metrics, no quota or burndown), and an object whose model cannot be read at
        synth. The grant is genai-pacer's own (exact ARNs), not the object's `grant_invoke`.
        """
        if isinstance(invokable, BedrockModel):
            return invokable
        name = type(invokable).__name__
        with Checks("BedrockModel.from_invokable") as check:
            if not (hasattr(invokable, "invokable_arn") and callable(getattr(invokable, "grant_invoke", None))):
                check.fail(
                    f"{name} is not a Bedrock model: pass a BedrockModel, or an object with invokable_arn and "
                    "grant_invoke (aws_bedrock_alpha's BedrockFoundationModel, CrossRegionInferenceProfile or "
                    "ApplicationInferenceProfile)", id="invokable.not-bedrock-model"
                )
            elif hasattr(invokable, "routing_endpoints") or hasattr(invokable, "prompt_router_arn"):
                check.fail(
                    f"{name} is a prompt router: it sends each call to one of several models, so there is no "
                    "single model id for metrics, no quota share and no burndown; pass one of its models "
                    "(a BedrockModel or one of routing_endpoints), or call the router with your own grant", id="invokable.prompt-router"
                )
        model_id = getattr(invokable, "model_id", None)
        profile_id = getattr(invokable, "inference_profile_id", None)
        copied = getattr(invokable, "inference_profile_model", None)
        kind = str(getattr(getattr(invokable, "type", None), "value", getattr(invokable, "type", "")) or "")
        arn = invokable.invokable_arn
        if copied is not None and kind.upper().endswith("APPLICATION"):
            return cls.application_inference_profile(arn, copies=cls.from_invokable(copied))
        if isinstance(profile_id, str) and not is_token(profile_id) and copied is not None:
            return cls.inference_profile(profile_id, regions=regions)
        if isinstance(model_id, str) and model_id and not is_token(model_id):
            return cls.foundation(model_id)
        if isinstance(arn, str) and not is_token(arn) and _looks_like_arn(arn):
            return cls.from_id(arn, regions=regions)
        with Checks("BedrockModel.from_invokable") as check:
            check.fail(
                f"{name}'s model cannot be read at synth (its invokable_arn is a deploy-time token and it has "
                "no model_id, inference_profile_id or inference_profile_model): build the BedrockModel yourself, "
                "e.g. BedrockModel.application_inference_profile(arn, copies='us.anthropic...')", id="invokable.model-unknown-at-synth"
            )
        raise AssertionError("unreachable: Checks raised")  # pragma: no cover

    # --- what a caller needs -------------------------------------------------------------------

    @property
    def is_inference_profile(self) -> bool:
        """True for geographic, global and application inference profiles."""
        return self.kind in ("geographic-profile", "global-profile", "application-profile")

    @property
    def profile_id(self) -> str | None:
        """A system-defined profile's id (e.g. 'us.anthropic...'); None for other kinds."""
        if self.kind not in ("geographic-profile", "global-profile"):
            return None
        return _name_of(self.model_id)

    @property
    def foundation_model_id(self) -> str | None:
        """The underlying foundation model id: without a profile's prefix, or the one an application profile copies.

        None for provisioned throughput, whose model is not known at synth.
        """
        if self.kind == "foundation":
            return _name_of(self.model_id)
        if self.kind in ("geographic-profile", "global-profile"):
            return _name_of(self.model_id).split(".", 1)[1]
        if self.kind == "application-profile" and self.copies is not None:
            return self.copies.foundation_model_id
        return None

    @property
    def metric_model_ids(self) -> tuple[str, ...]:
        """The values AWS/Bedrock's ModelId dimension may hold for this model's calls, most likely first.

        The runtime metrics are published per ModelId
        (https://docs.aws.amazon.com/bedrock/latest/userguide/monitoring-runtime-metrics.html), but no
        AWS page found says which value a call through an inference profile is counted under: the
        id or ARN the call passed, or the underlying foundation model. So both are given: a widget or
        alarm that reads each (or a SEARCH over both) sees the calls either way. A foundation model
        or provisioned model has one value; make integ shows which one a profile uses.
        """
        ids = [self.model_id]
        underlying = self.foundation_model_id
        if self.is_inference_profile and underlying and underlying not in ids:
            ids.append(underlying)
        return tuple(ids)

    def invoke_arn(self, scope: Construct) -> str:
        """The ARN of what ModelId names: the model's, the profile's, or the given ARN."""
        return self._invoke_arn(scope, warn=True)

    def _invoke_arn(self, scope: Construct, *, warn: bool) -> str:
        """invoke_arn; warn=False renders it without warning `scope` about the profile's geography
        (ModelQuota renders it in every stack to find the model's callers)."""
        if _looks_like_arn(self.model_id) or self.kind in ("application-profile", "provisioned"):
            return self.model_id
        source = self._source(scope, warn=warn)
        if self.kind == "foundation":
            return source.arn("foundation-model", self.model_id, account="")
        return source.arn("inference-profile", self.model_id)

    def routed_model_arns(self, scope: Construct) -> list[str]:
        """Every ARN beyond the invoke ARN that the call is authorized against (none for a plain model)."""
        return self.resource_arns(scope)[1:]

    def resource_arns(self, scope: Construct) -> list[str]:
        """Every ARN an invoking role must be allowed: the invoke ARN first, then the rest, without repeats."""
        arns: list[str] = []
        for statement in self._statements(scope):
            arns.extend(a for a in statement.resources if a not in arns)
        return arns

    def policy_statements(
        self, scope: Construct, *, streaming: bool = False, routed_only: bool = False
    ) -> list[iam.PolicyStatement]:
        """The invoke grant as IAM statements, with the conditions AWS documents for each kind.

        routed_only: leave out the statement on the invoke ARN, for a caller (such as a Step
        Functions Bedrock task) that grants that ARN itself. Default: False.
        """
        actions = _actions(streaming, "BedrockModel.policy_statements")
        with Checks("BedrockModel.policy_statements") as check:
            check.instance("routed_only", routed_only, bool, "True or False")
        statements = self._statements(scope)
        return [
            iam.PolicyStatement(
                actions=actions, resources=list(s.resources), conditions=dict(s.conditions) if s.conditions else None
            )
            for s in (statements[1:] if routed_only else statements)
        ]

    def grant_invoke(self, grantee: iam.IGrantable, *, streaming: bool = False) -> iam.Grant:
        """Allow InvokeModel (Converse) on exactly this model's resources; with streaming, the response-stream action too."""
        actions = _actions(streaming, "BedrockModel.grant_invoke")
        grants = [
            iam.Grant.add_to_principal(
                grantee=grantee,
                actions=actions,
                resource_arns=list(s.resources),
                conditions=dict(s.conditions) if s.conditions else None,
            )
            for s in self._statements(_scope_of(grantee))
        ]
        combined = grants[0]
        for grant in grants[1:]:
            combined = combined.combine(grant)
        return combined

    def tier_fence(self, scope: Construct, service_tier: str | Sequence[str], *,
                   streaming: bool = False) -> iam.PolicyStatement | None:
        """A Deny of this model's invoke actions at every service tier but `service_tier` (SERVICE_TIER_KEY),
        so a role given one tier cannot bill another, e.g. a background job at Priority. `service_tier`
        is one tier, or every tier the role was given (an experiment's variants on this model), each a
        literal or a deploy-time string (a CfnParameter's value_as_string: the Deny then names the tiers
        the role may use, NEGATED_OPERATOR). None when every tier was given (nothing to deny). A call
        naming no tier does not carry the key, so the role can still make untiered calls, served at
        default."""
        one = isinstance(service_tier, str) or is_token(service_tier)
        given = [service_tier] if one else list(cast(Sequence[str], service_tier))
        with Checks("BedrockModel.tier_fence") as check:
            for i, tier in enumerate(given):
                if not is_token(tier):
                    check.one_of("service_tier" if one else f"service_tier[{i}]", tier, _SERVICE_TIER_VALUES,
                                 fix="the tier the role was given")
        fences = tier_fences(scope, [(self, tier) for tier in given], streaming=streaming)
        return fences[0] if fences else None

    def as_imodel(self, scope: Construct, id: str) -> bedrock.IModel:
        """The aws-cdk-lib IModel whose ARN the Step Functions Bedrock task puts in ModelId."""
        if self.kind == "foundation" and not _looks_like_arn(self.model_id):
            return bedrock.FoundationModel.from_foundation_model_id(
                scope, id, bedrock.FoundationModelIdentifier(self.model_id)
            )
        # Any IModel works here: the task only reads model_arn (ModelId) and grants it.
        return bedrock.ProvisionedModel.from_provisioned_model_arn(scope, id, self.invoke_arn(scope))

    # --- rendering -----------------------------------------------------------------------------

    def _source(self, scope: Construct, *, warn: bool = True) -> _Source:
        """The caller's environment: the stack's, or the partition, Region and account of a given ARN.

        Every grant and invoke ARN a construct renders passes here with the construct's scope, so
        this is where a construct warns about the model it was given (warn=False: a reader such as
        ModelQuota, which renders the ARN in every stack, does not)."""
        stack = cdk.Stack.of(scope)
        if warn:
            self._warn_if_deprecated(scope)
        parsed = _parse_arn(self.model_id) if _looks_like_arn(self.model_id) else None
        if parsed is None:
            if warn:
                self._warn_if_called_from_outside_its_geography(scope, stack.region)
            return _Source(stack, None, stack.region, stack.account)
        return _Source(stack, parsed.partition, parsed.region or stack.region, parsed.account or stack.account)

    @property
    def retirement(self) -> ModelRetirement | None:
        """DEPRECATED_MODELS' entry for the underlying foundation model, or None (not known to be deprecated)."""
        underlying = self.foundation_model_id
        if underlying is None or is_token(underlying):
            return None
        return DEPRECATED_MODELS.get(underlying)

    def _warn_if_deprecated(self, scope: Construct) -> None:
        retirement = self.retirement
        if retirement is not None:
            warn(scope, _DEPRECATED_MODEL, retirement.warning(self.model_id))

    def _warn_if_called_from_outside_its_geography(self, scope: Construct, region: str) -> None:
        """A geographic profile is called from a Region of its geography (`eu.` from eu-west-1); from
        another Region the profile ARN names nothing and every call fails at run time."""
        if self.kind != "geographic-profile" or is_token(region) or not self.profile_regions:
            return
        if region not in self.profile_regions:
            warn(
                scope,
                "profile-region",
                f"{self.model_id} routes within {', '.join(self.profile_regions)}, but this stack is in {region}: "
                "a geographic profile is invoked from a Region of its geography, so calls from here will fail. "
                "Use the profile of this Region's geography (or a global. profile), or pass regions= if this "
                "Region is one it routes from",
            )

    def _statements(self, scope: Construct, source: _Source | None = None) -> list[_Statement]:
        source = source or self._source(scope)
        kind = self.kind
        if kind == "foundation":
            if _looks_like_arn(self.model_id):
                return [_Statement((self.model_id,))]
            return [_Statement((source.arn("foundation-model", self.model_id, account=""),))]
        if kind == "provisioned":
            return [_Statement((self.model_id,))]
        if kind == "application-profile":
            copies = cast(BedrockModel, self.copies)  # always set: __post_init__ (_validate_copies) refuses an application profile without
            copied = copies._statements(scope, self._copy_source(source))
            # Unconditioned on purpose: APPLICATION_PROFILE_BYPASS (which ARN Bedrock puts in
            # bedrock:InferenceProfileArn for a call through an application profile is undocumented).
            resources = tuple(dict.fromkeys(a for s in copied for a in s.resources))
            return [_Statement((self.model_id,)), _Statement(resources)]
        profile = self._profile_arn(source)
        model = cast(str, self.foundation_model_id)  # a profile's id always names its foundation model
        in_region = source.arn("foundation-model", model, account="")
        if kind == "global-profile":
            # The three statements of the documented global policy, conditions included.
            return [
                _Statement((profile,), {"StringEquals": {REQUESTED_REGION_KEY: source.region}}),
                _Statement(
                    (in_region,),
                    {"StringEquals": {REQUESTED_REGION_KEY: source.region, INFERENCE_PROFILE_ARN_KEY: profile}},
                ),
                _Statement(
                    (source.arn("foundation-model", model, region="", account=""),),
                    {"StringEquals": {REQUESTED_REGION_KEY: "unspecified", INFERENCE_PROFILE_ARN_KEY: profile}},
                ),
            ]
        # Geographic: the source Region's model and every destination's, only through the profile.
        routed = [in_region] + [source.arn("foundation-model", model, region=r, account="") for r in self.profile_regions]
        return [
            _Statement((profile,)),
            _Statement(tuple(dict.fromkeys(routed)), {"StringEquals": {INFERENCE_PROFILE_ARN_KEY: profile}}),
        ]

    def _profile_arn(self, source: _Source) -> str:
        if _looks_like_arn(self.model_id):
            return self.model_id
        return source.arn("inference-profile", self.model_id)

    def _copy_source(self, source: _Source) -> _Source | None:
        """An application profile's copy lives in the profile's own Region and account (unless given as an ARN)."""
        if self.copies is not None and _looks_like_arn(self.copies.model_id):
            return None  # the copy's own ARN says where it is
        return source


_ID_FIX = (
    "pass a Bedrock model id such as 'amazon.nova-lite-v1:0', a profile id such as "
    "'us.amazon.nova-lite-v1:0', or an ARN"
)
_PROFILE_FIX = "pass a profile id such as 'us.amazon.nova-lite-v1:0' or 'global.anthropic.claude-sonnet-4-5-20250929-v1:0'"


def tier_fences(scope: Construct, calls: Sequence[tuple[BedrockModel, Any]], *,
                streaming: bool = False) -> list[iam.PolicyStatement]:
    """The Denies that keep a role to the tiers of its calls, `calls` being (model, tier) pairs (tier None:
    the caller chooses). Fenced per resource ARN, not per model: two models can share an ARN (a profile
    and its foundation model, or two profiles routing to one model), and a Deny per model would deny
    that ARN the union of both models' other tiers, i.e. every tier. An ARN a call reaches with no tier
    is not fenced; the others are denied every tier no call on them names, one statement per set of denied
    tiers. An ARN reached with a deploy-time tier is denied every tier but the ones its calls name, where the
    call names one (NEGATED_OPERATOR), one statement per set of tiers. Tiers are checked by the caller
    (tier_fence, ExperimentVariant)."""
    reach: dict[str, set[Any]] = {}
    for model, tier in calls:
        for arn in model.resource_arns(scope):
            reach.setdefault(arn, set()).add(tier)
    fenced: dict[tuple[str, ...], list[str]] = {}
    allowed_only: dict[tuple[str, ...], list[str]] = {}  # ARNs reached with a deploy-time tier
    for arn, tiers in reach.items():
        if None in tiers:
            continue
        if any(is_token(t) for t in tiers):
            allowed_only.setdefault(tuple(sorted(tiers)), []).append(arn)
            continue
        denied = tuple(t for t in _SERVICE_TIER_VALUES if t not in tiers)
        if denied:
            fenced.setdefault(denied, []).append(arn)
    actions = _actions(streaming, "BedrockModel.tier_fence")
    return [
        iam.PolicyStatement(
            effect=iam.Effect.DENY, actions=actions, resources=arns,
            conditions={"StringEquals": {SERVICE_TIER_KEY: list(denied)}},
        )
        for denied, arns in fenced.items()
    ] + [
        iam.PolicyStatement(
            effect=iam.Effect.DENY, actions=actions, resources=arns,
            conditions={NEGATED_OPERATOR: {SERVICE_TIER_KEY: list(given)}, PRESENCE_OPERATOR: {SERVICE_TIER_KEY: "false"}},
        )
        for given, arns in allowed_only.items()
    ]


def _actions(streaming: Any, owner: str) -> list[str]:
    with Checks(owner) as check:
        check.instance("streaming", streaming, bool, "True or False")
    return list(STREAM_ACTIONS if streaming else INVOKE_ACTIONS)


def _name_of(model_id: str) -> str:
    """The id itself, or the resource name of an ARN."""
    parsed = _parse_arn(model_id) if _looks_like_arn(model_id) else None
    return parsed.name if parsed else model_id


def _prefix(identifier: str) -> tuple[str, str]:
    """(first segment, second segment) of a dotted id, '' when absent."""
    parts = identifier.split(".")
    return parts[0], parts[1] if len(parts) > 2 else ""


def _coerce_copies(copies: Any) -> Any:
    """An id or ARN for `copies` becomes a BedrockModel; anything else is validated later."""
    if isinstance(copies, str) and not is_token(copies):
        return BedrockModel.from_id(copies)
    return copies


def _profile_regions(profile_id: str, regions: Sequence[str] | None) -> tuple[str, ...]:
    if regions is not None:
        return tuple(regions) if isinstance(regions, list | tuple) else cast(tuple[str, ...], regions)
    return PROFILE_REGIONS.get(_prefix(_name_of(profile_id))[0], ())


def _profile_kind(check: Checks, name: str, profile_id: str, regions: Any) -> ModelKind | None:
    """Geographic or global, refusing ids that are no system-defined profile."""
    identifier = profile_id
    if _looks_like_arn(profile_id):
        parsed = _parse_arn(profile_id)
        if parsed is None or parsed.type != "inference-profile":
            check.fail(
                f"{name}={profile_id!r} is not an inference-profile ARN "
                "(arn:aws:bedrock:<region>:<account>:inference-profile/<id>); call BedrockModel.from_id(...) "
                "for other ARNs", id=f"{name}.not-profile-arn"
            )
            return None
        identifier = parsed.name
    first, second = _prefix(identifier)
    rest = identifier.split(".", 1)[1] if "." in identifier else ""
    if first in KNOWN_PROVIDERS:
        check.fail(
            f"{name}={profile_id!r} is a foundation model id (provider {first!r}), not an inference profile: "
            f"call BedrockModel.foundation({profile_id!r}), or use a profile id such as 'us.{identifier}'", id=f"{name}.foundation-model-not-profile"
        )
        return None
    if not _MODEL_ID.match(rest) or first == "":
        check.fail(f"{name}={profile_id!r} is not an inference profile id; {_PROFILE_FIX}", id=f"{name}.not-profile-id")
        return None
    if first == GLOBAL_PREFIX:
        if regions is not None:
            check.fail(
                f"regions={_show(regions)} cannot be given for the global profile {profile_id!r}: a global profile "
                "routes to any supported commercial Region and is authorized against the Region-less ARN "
                f"arn:aws:bedrock:::foundation-model/{rest}; drop regions=", id="regions.with-global-profile"
            )
            return None
        return "global-profile"
    if regions is None and first not in PROFILE_REGIONS:
        check.fail(
            f"{name}={profile_id!r} has prefix {first!r}, whose routing Regions genai-pacer does not know "
            f"(known: {', '.join(sorted(PROFILE_REGIONS))}, {GLOBAL_PREFIX}); call "
            f"BedrockModel.inference_profile({profile_id!r}, regions=[...]) with the Regions {_GET_PROFILE} lists", id=f"{name}.unknown-geography"
        )
        return None
    return "geographic-profile"


def _classify(check: Checks, model_id: str, *, regions: Any, copies: Any) -> ModelKind | None:
    """The kind `from_id` infers from an id or ARN."""
    if is_token(model_id):
        check.fail(
            "model_id is a deploy-time token, so its kind cannot be read at synth: call "
            "BedrockModel.foundation(...), .application_inference_profile(..., copies=...) or .provisioned(...)", id="model_id.deploy-time"
        )
        return None
    if _looks_like_arn(model_id):
        parsed = _parse_arn(model_id)
        kind = _ARN_TYPES.get(parsed.type) if parsed else None
        if parsed is None or kind is None:
            check.fail(
                f"model_id={model_id!r} is not an ARN genai-pacer can grant: expected a Bedrock "
                f"{', '.join(_ARN_TYPES)} ARN (custom models, imported models and prompt routers need "
                "your own grant)", id="model_id.not-grantable-arn"
            )
            return None
        if kind == "geographic-profile":
            return _profile_kind(check, "model_id", model_id, regions)
        return kind
    first, second = _prefix(model_id)
    if first in PROFILE_REGIONS or first == GLOBAL_PREFIX or regions is not None:
        return _profile_kind(check, "model_id", model_id, regions)
    if copies is not None:
        check.fail(
            f"copies={_show(copies)} applies only to an application inference profile ARN, and model_id={model_id!r} "
            "is not one: drop copies, or pass the profile's ARN", id="copies.not-application-profile"
        )
        return None
    return "foundation"


def _validate(check: Checks, model: BedrockModel) -> None:
    """The rules of one kind: the id's form, the Regions and the copied source."""
    kind, model_id = model.kind, model.model_id
    token = is_token(model_id)
    parsed = _parse_arn(model_id) if _looks_like_arn(model_id) else None
    if _looks_like_arn(model_id) and parsed is None:
        check.fail(f"model_id={model_id!r} is not a Bedrock ARN (arn:<partition>:bedrock:<region>:<account>:<type>/<id>)", id="model_id.not-bedrock-arn")
        return
    expected_type = {
        "foundation": "foundation-model",
        "geographic-profile": "inference-profile",
        "global-profile": "inference-profile",
        "application-profile": "application-inference-profile",
        "provisioned": "provisioned-model",
    }[cast(ModelKind, kind)]
    if parsed is not None and parsed.type != expected_type:
        check.fail(
            f"model_id={model_id!r} is an ARN of type {parsed.type!r}, not {expected_type!r}: call "
            f"BedrockModel.from_id({model_id!r}) to build the kind the ARN names", id="model_id.arn-type"
        )
        return

    if kind == "foundation":
        _validate_foundation(check, model_id, parsed, token)
    elif kind in ("geographic-profile", "global-profile"):
        if token:
            check.fail(
                "model_id is a deploy-time token: a cross-Region profile's model and Regions must be known at "
                "synth; pass the profile id as text", id="model_id.deploy-time-profile"
            )
            return
        found = _profile_kind(check, "model_id", model_id, model.profile_regions or None)
        if found is not None and found != kind:
            check.fail(
                f"model_id={model_id!r} is {_KIND_NAMES[found]}, not {_KIND_NAMES[cast(str, kind)]}: call "
                f"BedrockModel.from_id({model_id!r})", id="model_id.other-kind"
            )
    elif kind in ("application-profile", "provisioned"):
        if not token and parsed is None:
            example = (
                "arn:aws:bedrock:us-east-1:111122223333:application-inference-profile/abc123"
                if kind == "application-profile"
                else "arn:aws:bedrock:us-east-1:111122223333:provisioned-model/abc123"
            )
            check.fail(
                f"model_id={model_id!r} is not an ARN; {_KIND_NAMES[kind]} is invoked by its ARN, e.g. {example!r}", id="model_id.not-arn"
            )
        elif parsed is not None and (not parsed.region or not parsed.account):
            check.fail(f"model_id={model_id!r} lacks a Region or account; pass the full ARN Bedrock returned", id="model_id.arn-without-region")

    _validate_regions(check, model)
    _validate_copies(check, model)


def _validate_foundation(check: Checks, model_id: str, parsed: _Arn | None, token: bool) -> None:
    if token:
        return
    if parsed is not None:
        if not parsed.region:
            check.fail(
                f"model_id={model_id!r} is the Region-less ARN a global profile is authorized against, not an "
                f"invocable model: call BedrockModel.inference_profile('global.{parsed.name}')", id="model_id.global-profile-arn"
            )
        identifier = parsed.name
    else:
        identifier = model_id
    if not _MODEL_ID.match(identifier):
        check.fail(f"model_id={model_id!r} is not a Bedrock model id; {_ID_FIX}", id="model_id.not-model-id")
        return
    first, second = _prefix(identifier)
    if first in PROFILE_REGIONS or first == GLOBAL_PREFIX:
        check.fail(
            f"model_id={model_id!r} is a cross-Region inference profile id (prefix {first!r}), not a foundation "
            "model: a foundation-model ARN for it names no model and Bedrock refuses the call at run time; call "
            f"BedrockModel.inference_profile({identifier!r}) (or BedrockModel.from_id)", id="model_id.profile-not-foundation"
        )
    elif first not in KNOWN_PROVIDERS and second in KNOWN_PROVIDERS:
        check.fail(
            f"model_id={model_id!r} looks like an inference profile of geography {first!r}, which genai-pacer does "
            f"not know (known: {', '.join(sorted(PROFILE_REGIONS))}, {GLOBAL_PREFIX}); a foundation-model ARN for "
            f"it would be refused at run time: call BedrockModel.inference_profile({identifier!r}, regions=[...]) "
            f"with the Regions {_GET_PROFILE} lists", id="model_id.unknown-geography"
        )


def _validate_regions(check: Checks, model: BedrockModel) -> None:
    regions: Any = model.profile_regions
    if model.kind != "geographic-profile":
        check.rule(
            not regions,
            f"regions={_show(regions)} applies only to a geographic cross-Region profile, and {model.model_id!r} is "
            f"{_KIND_NAMES[cast(str, model.kind)]}: drop regions",
            id="regions.not-geographic-profile",
        )
        return
    if not isinstance(regions, tuple):  # a str, a number or a Duration: refused before it is iterated
        check.fail(
            f"regions={_show(regions)} is {kind_of(regions)}; pass a list of Region names such as "
            "['us-east-1', 'us-west-2']", id="regions.type"
        )
        return
    if any(token_kind(region) == "list" for region in regions):  # value_as_list: one encoded item
        check.fail(
            "regions is a deploy-time list, but each Region is an ARN of the grant at synth: pass the Region names "
            "as a list of text, e.g. ['us-east-1', 'us-west-2']", id="regions.deploy-time"
        )
        return
    if not regions:
        check.fail(
            f"regions for profile {model.model_id!r} is empty; list the Regions it routes to, as {_GET_PROFILE} shows", id="regions.empty"
        )
        return
    for i, region in enumerate(regions):
        if is_token(region):
            continue
        if not isinstance(region, str):
            check.fail(f"regions[{i}]={region!r} is {kind_of(region)}; pass a Region name such as 'us-east-1'", id="regions.item-type")
        elif not _REGION.match(region):
            check.fail(f"regions[{i}]={region!r} is not an AWS Region name such as 'us-east-1'", id="regions.not-region")


def _validate_copies(check: Checks, model: BedrockModel) -> None:
    copies = model.copies
    if model.kind != "application-profile":
        check.rule(
            copies is None,
            f"copies={_show(copies)} applies only to an application inference profile; drop it",
            id="copies.not-application-profile-kind",
        )
        return
    if copies is None:
        check.fail(
            "copies is required for an application inference profile: pass the foundation model or system-defined "
            f"profile it was created from (its modelSource.copyFrom; {_GET_PROFILE} lists its models), e.g. "
            "copies='us.amazon.nova-2-lite-v1:0'; the role needs that too", id="copies.required"
        )
        return
    if not isinstance(copies, BedrockModel):
        check.fail(
            f"copies={_show(copies)} is {kind_of(copies)}; pass a BedrockModel or a model or profile id such as "
            "'us.amazon.nova-2-lite-v1:0'", id="copies.type"
        )
        return
    check.rule(
        copies.kind in ("foundation", "geographic-profile", "global-profile"),
        f"copies is {_KIND_NAMES[cast(str, copies.kind)]}; an application inference profile copies a foundation "
        "model or a system-defined cross-Region profile",
        id="copies.not-copyable",
    )


def _scope_of(grantee: iam.IGrantable) -> Construct:
    """A construct in the grantee's stack, needed to render ARNs with its partition and Region."""
    found = next((c for c in (grantee, getattr(grantee, "grant_principal", None)) if isinstance(c, Construct)), None)
    with Checks("BedrockModel.grant_invoke") as check:
        check.rule(found is not None,
                   f"cannot grant to grantee={_show(grantee)}: it is not a construct and its principal is not one, so "
                   "there is no stack to render the model's ARNs in; pass a role, function or other construct",
                   id="grantee.not-a-construct")
    return cast(Construct, found)


def as_bedrock_model(value: Any, name: str = "model") -> Any:
    """`value` as a BedrockModel when it is one or is IBedrockInvokable-shaped (BedrockModel.from_invokable);
    anything else unchanged, so the caller's own type check names the prop. Constructs call this on
    every model prop before checking it; a refusal names the prop."""
    if isinstance(value, BedrockModel) or value is None:
        return value
    if hasattr(value, "invokable_arn") and callable(getattr(value, "grant_invoke", None)):
        try:
            return BedrockModel.from_invokable(value)
        except InvalidPropsError as error:
            raise InvalidPropsError(error.owner, [Problem(f"{name}: {p}", p.id) for p in error.problems], error.path) from None
    return value
