"""BedrockModel: each kind's exact IAM statements, read from a synthesized policy, and every refusal.

The policies are the ones AWS documents (URLs in genai_pacer/models.py): a geographic profile needs
the profile plus the foundation model in the source and destination Regions, only through the
profile; a global profile the three-part policy with the Region-less model ARN; an application
profile itself plus what it copies; provisioned throughput its own ARN.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_bedrock as bedrock
from aws_cdk import aws_iam as iam
from genai_pacer import BedrockModel, InvalidPropsError
from genai_pacer.models import KNOWN_PROVIDERS, PROFILE_REGIONS
from helpers import policy_statements, template_of
from invokables import (
    FakeApplicationProfile,
    FakeCrossRegionProfile,
    FakeFoundationModel,
    FakePromptRouter,
    Invokable,
)

ACCOUNT = "111122223333"
HAIKU = "anthropic.claude-3-5-haiku-20241022-v1:0"
SONNET = "anthropic.claude-sonnet-4-5-20250929-v1:0"
NOVA = "amazon.nova-lite-v1:0"
P = "<AWS::Partition>"
APP_ARN = f"arn:aws:bedrock:us-east-1:{ACCOUNT}:application-inference-profile/abc123xyz"
PROVISIONED_ARN = f"arn:aws:bedrock:us-east-1:{ACCOUNT}:provisioned-model/pt0123abcd"


def stack_in(region: str | None = "us-east-1") -> cdk.Stack:
    env = cdk.Environment(account=ACCOUNT, region=region) if region else None
    return cdk.Stack(cdk.App(), "Models", env=env)


def text(value: Any) -> Any:
    """A synthesized value with Fn::Join flattened and Refs named, recursively."""
    if isinstance(value, dict) and "Fn::Join" in value:
        return "".join(p if isinstance(p, str) else f"<{p['Ref']}>" for p in value["Fn::Join"][1])
    if isinstance(value, dict):
        return {k: text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [text(v) for v in value]
    return value


def granted(model: BedrockModel, *, region: str | None = "us-east-1", streaming: bool = False) -> list[dict]:
    """The statements a fresh role gets from model.grant_invoke, as flat text."""
    stack = stack_in(region)
    role = iam.Role(stack, "Caller", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    model.grant_invoke(role, streaming=streaming)
    statements = []
    for statement in policy_statements(template_of(stack).to_json()):
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        entry = {"Action": statement["Action"], "Resource": text(resources)}
        if "Condition" in statement:
            entry["Condition"] = text(statement["Condition"])
        statements.append(entry)
    return statements


def fm(region: str, model: str = HAIKU, partition: str = P) -> str:
    return f"arn:{partition}:bedrock:{region}::foundation-model/{model}"


def profile(profile_id: str, region: str = "us-east-1", partition: str = P) -> str:
    return f"arn:{partition}:bedrock:{region}:{ACCOUNT}:inference-profile/{profile_id}"


# --- each kind's exact statements -----------------------------------------------------------------


def test_foundation_model_grants_its_arn_in_the_callers_region():
    assert granted(BedrockModel.foundation(NOVA)) == [
        {"Action": "bedrock:InvokeModel", "Resource": [fm("us-east-1", NOVA)]}
    ]


def test_foundation_model_arn_is_granted_as_given():
    arn = f"arn:aws:bedrock:us-west-2::foundation-model/{NOVA}"
    model = BedrockModel.from_id(arn)
    assert (model.kind, model.model_id, model.foundation_model_id) == ("foundation", arn, NOVA)
    assert granted(model) == [{"Action": "bedrock:InvokeModel", "Resource": [arn]}]


def test_geographic_profile_grants_the_profile_and_its_regional_models_only_through_it():
    us = f"us.{HAIKU}"
    assert granted(BedrockModel.from_id(us)) == [
        {"Action": "bedrock:InvokeModel", "Resource": [profile(us)]},
        {
            "Action": "bedrock:InvokeModel",
            "Resource": [fm("us-east-1"), fm("us-east-2"), fm("us-west-2")],
            "Condition": {"StringEquals": {"bedrock:InferenceProfileArn": profile(us)}},
        },
    ]


def test_geographic_profile_adds_the_source_region_model_when_the_caller_is_elsewhere():
    us = f"us.{HAIKU}"
    (_, models) = granted(BedrockModel.from_id(us), region="us-west-1")
    assert models["Resource"] == [fm("us-west-1"), fm("us-east-1"), fm("us-east-2"), fm("us-west-2")]
    assert models["Condition"] == {"StringEquals": {"bedrock:InferenceProfileArn": profile(us, "us-west-1")}}


def test_unknown_geography_works_with_its_regions_listed():
    model_id = "in.openai.gpt-oss-120b-1:0"
    model = BedrockModel.inference_profile(model_id, regions=["ap-south-1", "ap-south-2"])
    assert (model.kind, model.profile_regions, model.foundation_model_id) == (
        "geographic-profile", ("ap-south-1", "ap-south-2"), "openai.gpt-oss-120b-1:0",
    )
    (_, models) = granted(model, region="ap-south-1")
    assert models["Resource"] == [fm("ap-south-1", "openai.gpt-oss-120b-1:0"), fm("ap-south-2", "openai.gpt-oss-120b-1:0")]


def test_inference_profile_arn_is_parsed_and_used_as_given():
    arn = f"arn:aws:bedrock:eu-west-1:{ACCOUNT}:inference-profile/eu.{HAIKU}"
    model = BedrockModel.from_id(arn)
    assert (model.kind, model.model_id, model.profile_id, model.profile_regions) == (
        "geographic-profile", arn, f"eu.{HAIKU}", PROFILE_REGIONS["eu"],
    )
    statements = granted(model)
    assert statements[0] == {"Action": "bedrock:InvokeModel", "Resource": [arn]}
    assert statements[1]["Resource"] == [
        fm(r, partition="aws") for r in ("eu-west-1", "eu-central-1", "eu-north-1", "eu-west-3")
    ]
    assert statements[1]["Condition"] == {"StringEquals": {"bedrock:InferenceProfileArn": arn}}


def test_global_profile_grants_the_documented_three_part_policy_without_regions():
    glob = f"global.{SONNET}"
    model = BedrockModel.from_id(glob)
    assert (model.kind, model.profile_regions, model.foundation_model_id) == ("global-profile", (), SONNET)
    assert granted(model) == [
        {
            "Action": "bedrock:InvokeModel",
            "Resource": [profile(glob)],
            "Condition": {"StringEquals": {"aws:RequestedRegion": "us-east-1"}},
        },
        {
            "Action": "bedrock:InvokeModel",
            "Resource": [fm("us-east-1", SONNET)],
            "Condition": {
                "StringEquals": {"aws:RequestedRegion": "us-east-1", "bedrock:InferenceProfileArn": profile(glob)}
            },
        },
        {
            "Action": "bedrock:InvokeModel",
            "Resource": [f"arn:{P}:bedrock:::foundation-model/{SONNET}"],
            "Condition": {
                "StringEquals": {"aws:RequestedRegion": "unspecified", "bedrock:InferenceProfileArn": profile(glob)}
            },
        },
    ]


def test_global_profile_in_an_environment_agnostic_stack_conditions_on_the_deploy_region():
    (first, second, third) = granted(BedrockModel.from_id(f"global.{SONNET}"), region=None)
    assert first["Condition"] == {"StringEquals": {"aws:RequestedRegion": {"Ref": "AWS::Region"}}}
    assert second["Resource"] == [f"arn:{P}:bedrock:<AWS::Region>::foundation-model/{SONNET}"]
    assert third["Resource"] == [f"arn:{P}:bedrock:::foundation-model/{SONNET}"]


def test_application_profile_grants_itself_and_the_system_profile_it_copies():
    model = BedrockModel.application_inference_profile(APP_ARN, copies=f"us.{HAIKU}")
    assert (model.kind, model.model_id, model.foundation_model_id, model.is_inference_profile) == (
        "application-profile", APP_ARN, HAIKU, True,
    )
    assert granted(model) == [
        {"Action": "bedrock:InvokeModel", "Resource": [APP_ARN]},
        {
            "Action": "bedrock:InvokeModel",
            "Resource": [
                profile(f"us.{HAIKU}", partition="aws"),
                *(fm(r, partition="aws") for r in ("us-east-1", "us-east-2", "us-west-2")),
            ],
        },
    ]


def test_application_profile_copying_a_model_grants_it_in_the_profiles_region():
    arn = f"arn:aws:bedrock:us-west-2:{ACCOUNT}:application-inference-profile/p1"
    model = BedrockModel.application_inference_profile(arn, copies=BedrockModel.foundation(NOVA))
    assert granted(model) == [
        {"Action": "bedrock:InvokeModel", "Resource": [arn]},
        {"Action": "bedrock:InvokeModel", "Resource": [fm("us-west-2", NOVA, partition="aws")]},
    ]


def test_application_profile_copying_a_global_profile_includes_the_region_less_model():
    model = BedrockModel.application_inference_profile(APP_ARN, copies=f"global.{SONNET}")
    (_, copied) = granted(model)
    assert copied["Resource"] == [
        profile(f"global.{SONNET}", partition="aws"),
        fm("us-east-1", SONNET, partition="aws"),
        f"arn:aws:bedrock:::foundation-model/{SONNET}",
    ]


def test_application_profile_arn_may_be_a_deploy_time_token():
    stack = stack_in()
    cfn = bedrock.CfnApplicationInferenceProfile(
        stack, "Profile", inference_profile_name="tagged", model_source={"copyFrom": fm("us-east-1", NOVA)}
    )
    model = BedrockModel.application_inference_profile(cfn.attr_inference_profile_arn, copies=NOVA)
    role = iam.Role(stack, "Caller", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    model.grant_invoke(role)
    (own, copied) = policy_statements(template_of(stack).to_json())
    assert own["Resource"] == {"Fn::GetAtt": ["Profile", "InferenceProfileArn"]}
    assert text(copied["Resource"]) == fm("us-east-1", NOVA)


def test_provisioned_throughput_grants_its_arn():
    model = BedrockModel.provisioned(PROVISIONED_ARN)
    assert (model.kind, model.foundation_model_id, model.is_inference_profile) == ("provisioned", None, False)
    assert granted(model) == [{"Action": "bedrock:InvokeModel", "Resource": [PROVISIONED_ARN]}]
    assert BedrockModel.from_id(PROVISIONED_ARN) == model


def test_provisioned_arn_may_be_a_deploy_time_token():
    stack = stack_in()
    arn = cdk.Fn.import_value("ProvisionedModelArn")
    model = BedrockModel.provisioned(arn)
    role = iam.Role(stack, "Caller", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    model.grant_invoke(role)
    (statement,) = policy_statements(template_of(stack).to_json())
    assert statement["Resource"] == {"Fn::ImportValue": "ProvisionedModelArn"}


@pytest.mark.parametrize(
    "model",
    [
        BedrockModel.foundation(NOVA),
        BedrockModel.from_id(f"us.{HAIKU}"),
        BedrockModel.from_id(f"global.{SONNET}"),
        BedrockModel.application_inference_profile(APP_ARN, copies=f"us.{HAIKU}"),
        BedrockModel.provisioned(PROVISIONED_ARN),
    ],
    ids=lambda m: m.kind,
)
def test_streaming_adds_the_stream_action_to_every_statement(model):
    statements = granted(model, streaming=True)
    assert statements and all(
        s["Action"] == ["bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"] for s in statements
    )


@pytest.mark.parametrize(
    "model",
    [
        BedrockModel.foundation(NOVA),
        BedrockModel.from_id(f"us.{HAIKU}"),
        BedrockModel.from_id(f"global.{SONNET}"),
        BedrockModel.application_inference_profile(APP_ARN, copies=f"us.{HAIKU}"),
        BedrockModel.provisioned(PROVISIONED_ARN),
    ],
    ids=lambda m: m.kind,
)
def test_arn_views_agree_with_the_grant(model):
    """invoke_arn comes first, routed_model_arns are the rest, and policy_statements match the grant."""
    stack = stack_in()
    arns = [text(stack.resolve(a)) for a in model.resource_arns(stack)]
    assert arns[0] == text(stack.resolve(model.invoke_arn(stack)))
    assert arns[1:] == [text(stack.resolve(a)) for a in model.routed_model_arns(stack)]
    assert len(arns) == len(set(arns))
    granted_arns = [a for s in granted(model) for a in s["Resource"]]
    assert sorted(granted_arns) == sorted(arns)
    from_statements = [
        {k: text(v) for k, v in stack.resolve(s.to_statement_json()).items()}
        for s in model.policy_statements(stack)
    ]
    assert [s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]] for s in from_statements] == [
        s["Resource"] for s in granted(model)
    ]
    routed = [
        {k: text(v) for k, v in stack.resolve(s.to_statement_json()).items()}
        for s in model.policy_statements(stack, routed_only=True)
    ]
    assert routed == from_statements[1:]
    imodel = model.as_imodel(stack, "Imodel")
    assert text(stack.resolve(imodel.model_arn)) == arns[0]


def test_model_id_is_what_goes_in_model_id():
    assert BedrockModel.foundation(NOVA).model_id == NOVA
    assert BedrockModel.from_id(f"us.{HAIKU}").model_id == f"us.{HAIKU}"
    assert BedrockModel.application_inference_profile(APP_ARN, copies=NOVA).model_id == APP_ARN
    assert BedrockModel.provisioned(PROVISIONED_ARN).model_id == PROVISIONED_ARN


@pytest.mark.parametrize(
    ("model_id", "kind"),
    [
        (NOVA, "foundation"),
        ("openai.gpt-5.4", "foundation"),  # a dot in the model name is not a profile prefix
        ("newprovider.model-v1:0", "foundation"),  # a provider genai-pacer does not list yet
        (f"us.{HAIKU}", "geographic-profile"),
        (f"us-gov.{HAIKU}", "geographic-profile"),
        (f"apac.{HAIKU}", "geographic-profile"),
        (f"global.{SONNET}", "global-profile"),
        (f"arn:aws:bedrock:us-east-1::foundation-model/{NOVA}", "foundation"),
        (f"arn:aws:bedrock:us-east-1:{ACCOUNT}:inference-profile/global.{SONNET}", "global-profile"),
        (PROVISIONED_ARN, "provisioned"),
    ],
)
def test_from_id_reads_the_kind(model_id, kind):
    assert BedrockModel.from_id(model_id).kind == kind


def test_constructor_reads_the_kind_like_from_id_and_models_are_values():
    assert BedrockModel(f"us.{HAIKU}") == BedrockModel.from_id(f"us.{HAIKU}")
    assert BedrockModel(f"us.{HAIKU}", ["us-east-1"]).profile_regions == ("us-east-1",)
    models = [BedrockModel.from_id(f"us.{HAIKU}"), BedrockModel.inference_profile(f"us.{HAIKU}")]
    assert len(dict.fromkeys(models)) == 1


def test_known_providers_cover_every_provider_aws_cdk_lib_lists():
    """A new provider in aws-cdk-lib must be added, or its profiles cannot be told from foundation ids."""
    identifiers = bedrock.FoundationModelIdentifier
    providers = {
        getattr(identifiers, name).model_id.split(".", 1)[0] for name in dir(identifiers) if name.isupper()
    }
    assert providers <= KNOWN_PROVIDERS, sorted(providers - KNOWN_PROVIDERS)
    assert not KNOWN_PROVIDERS & {*PROFILE_REGIONS, "global"}


# --- refusals ---------------------------------------------------------------------------------------


def refused(call) -> str:
    with pytest.raises(InvalidPropsError) as raised:
        call()
    assert isinstance(raised.value, ValueError) and isinstance(raised.value, TypeError)
    return str(raised.value)


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        # a profile id given as a foundation model: refused, with the call to make instead
        (
            lambda: BedrockModel.foundation(f"us.{HAIKU}"),
            f"model_id='us.{HAIKU}' is a cross-Region inference profile id (prefix 'us'), not a foundation "
            "model: a foundation-model ARN for it names no model and Bedrock refuses the call at run time; "
            f"call BedrockModel.inference_profile('us.{HAIKU}')",
        ),
        (
            lambda: BedrockModel.foundation(f"global.{SONNET}"),
            f"call BedrockModel.inference_profile('global.{SONNET}')",
        ),
        # an unknown geography prefix: refused from every entry point, pointing to regions=
        (
            lambda: BedrockModel.foundation(f"xx.{HAIKU}"),
            f"model_id='xx.{HAIKU}' looks like an inference profile of geography 'xx', which genai-pacer does "
            "not know (known: apac, au, eu, jp, us, us-gov, global); a foundation-model ARN for it would be "
            f"refused at run time: call BedrockModel.inference_profile('xx.{HAIKU}', regions=[...])",
        ),
        (lambda: BedrockModel.from_id(f"xx.{HAIKU}"), "looks like an inference profile of geography 'xx'"),
        (lambda: BedrockModel(f"xx.{HAIKU}"), "looks like an inference profile of geography 'xx'"),
        (
            lambda: BedrockModel.inference_profile(f"xx.{HAIKU}"),
            f"profile_id='xx.{HAIKU}' has prefix 'xx', whose routing Regions genai-pacer does not know "
            "(known: apac, au, eu, jp, us, us-gov, global); call "
            f"BedrockModel.inference_profile('xx.{HAIKU}', regions=[...])",
        ),
        (
            lambda: BedrockModel.inference_profile(NOVA),
            f"profile_id='{NOVA}' is a foundation model id (provider 'amazon'), not an inference profile: "
            f"call BedrockModel.foundation('{NOVA}')",
        ),
        (
            lambda: BedrockModel.from_id(NOVA, regions=["us-east-1"]),
            f"model_id='{NOVA}' is a foundation model id (provider 'amazon')",
        ),
        (
            lambda: BedrockModel.from_id(f"global.{SONNET}", regions=["us-east-1", "eu-west-1"]),
            f"regions=['us-east-1', 'eu-west-1'] cannot be given for the global profile 'global.{SONNET}'",
        ),
        (
            lambda: BedrockModel.inference_profile(f"global.{SONNET}", regions=["us-east-1"]),
            "is authorized against the Region-less ARN",
        ),
        (
            lambda: BedrockModel.from_id(f"arn:aws:bedrock:::foundation-model/{SONNET}"),
            f"is the Region-less ARN a global profile is authorized against, not an invocable model: call "
            f"BedrockModel.inference_profile('global.{SONNET}')",
        ),
        # application profiles need what they copy
        (
            lambda: BedrockModel.from_id(APP_ARN),
            "copies is required for an application inference profile: pass the foundation model or "
            "system-defined profile it was created from",
        ),
        (
            lambda: BedrockModel.application_inference_profile(APP_ARN, copies=BedrockModel.provisioned(PROVISIONED_ARN)),
            "copies is a Provisioned Throughput model; an application inference profile copies a foundation "
            "model or a system-defined cross-Region profile",
        ),
        (
            lambda: BedrockModel.application_inference_profile(APP_ARN, copies=42),
            "copies=42 is an int; pass a BedrockModel or a model or profile id",
        ),
        (
            lambda: BedrockModel.application_inference_profile(f"us.{HAIKU}", copies=NOVA),
            f"model_id='us.{HAIKU}' is not an ARN; an application inference profile is invoked by its ARN",
        ),
        (
            lambda: BedrockModel.from_id(NOVA, copies=f"us.{HAIKU}"),
            "applies only to an application inference profile ARN",
        ),
        # provisioned throughput is invoked by its ARN
        (
            lambda: BedrockModel.provisioned("pt0123abcd"),
            "model_id='pt0123abcd' is not an ARN; a Provisioned Throughput model is invoked by its ARN",
        ),
        (
            lambda: BedrockModel.provisioned(APP_ARN),
            "is an ARN of type 'application-inference-profile', not 'provisioned-model': call BedrockModel.from_id(",
        ),
        (
            lambda: BedrockModel.foundation(PROVISIONED_ARN),
            "is an ARN of type 'provisioned-model', not 'foundation-model'",
        ),
        (
            lambda: BedrockModel.from_id(f"arn:aws:bedrock:us-east-1:{ACCOUNT}:custom-model/abc"),
            "is not an ARN genai-pacer can grant: expected a Bedrock foundation-model, inference-profile, "
            "application-inference-profile, provisioned-model ARN",
        ),
        (lambda: BedrockModel.from_id("arn:aws:s3:::bucket"), "is not an ARN genai-pacer can grant"),
        (
            lambda: BedrockModel.provisioned("arn:aws:bedrock:us-east-1::provisioned-model/x"),
            "lacks a Region or account",
        ),
        # a kind that contradicts the id
        (
            lambda: BedrockModel(f"us.{HAIKU}", ("us-east-1",), kind="global-profile"),
            f"model_id='us.{HAIKU}' is a geographic cross-Region profile, not a global cross-Region profile",
        ),
        (lambda: BedrockModel(NOVA, kind="model"), "kind='model' must be one of 'foundation', 'geographic-profile'"),
        # tokens where the kind or the Regions cannot be known at synth
        (lambda: BedrockModel.from_id(cdk.Fn.import_value("ModelId")), "model_id is a deploy-time token"),
        (
            lambda: BedrockModel.inference_profile(cdk.Fn.import_value("ProfileId")),
            "profile_id is a deploy-time token",
        ),
    ],
)
def test_refusals_say_what_to_call_instead(call, expected):
    assert expected in refused(call)


# --- table-driven bad inputs ---------------------------------------------------------------------

BAD_MODEL_IDS = [
    (123, "model_id=123 is an int; pass a string"),
    (None, "model_id is required"),
    (True, "model_id=True is a bool; pass a string"),
    (1.5, "model_id=1.5 is a float; pass a string"),
    (["amazon.nova-lite-v1:0"], "is a list; pass a string"),
    ("", "model_id='' is empty"),
    ("not a model", "model_id='not a model' is not a Bedrock model id"),
    ("nova", "model_id='nova' is not a Bedrock model id"),
]


@pytest.mark.parametrize(("value", "expected"), BAD_MODEL_IDS)
@pytest.mark.parametrize("build", ["foundation", "from_id", "constructor"])
def test_bad_model_ids(build, value, expected):
    call = {
        "foundation": lambda: BedrockModel.foundation(value),
        "from_id": lambda: BedrockModel.from_id(value),
        "constructor": lambda: BedrockModel(value),
    }[build]
    assert expected in refused(call)


@pytest.mark.parametrize(
    ("regions", "expected"),
    [
        ("us-east-1", "regions='us-east-1' is a str; pass a list of Region names such as ['us-east-1', 'us-west-2']"),
        ([], "regions for profile 'us.anthropic"),
        (["moon-1"], "regions[0]='moon-1' is not an AWS Region name such as 'us-east-1'"),
        (["us-east-1", 5], "regions[1]=5 is an int; pass a Region name"),
        (["us-east-1", None], "regions[1]=None is a NoneType"),
    ],
)
def test_bad_regions(regions, expected):
    assert expected in refused(lambda: BedrockModel.inference_profile(f"us.{HAIKU}", regions=regions))
    assert expected in refused(lambda: BedrockModel.from_id(f"us.{HAIKU}", regions=regions))


def test_regions_for_a_kind_without_routing_are_refused_by_name():
    assert (
        f"regions=('us-east-1',) applies only to a geographic cross-Region profile, and {PROVISIONED_ARN!r} is "
        "a Provisioned Throughput model: drop regions"
    ) in refused(
        lambda: BedrockModel.from_id(PROVISIONED_ARN, regions=["us-east-1"])
    )


def test_several_problems_are_reported_together():
    message = refused(lambda: BedrockModel(f"us.{HAIKU}", ("moon-1", 5)))
    assert "2 problems" in message and "'moon-1'" in message and "regions[1]=5" in message


@pytest.mark.parametrize(
    ("streaming", "expected"),
    [
        ("yes", "streaming='yes' is a str; pass True or False"),
        (None, "streaming is required: pass True or False"),
        (1, "streaming=1 is an int; pass True or False"),
        (0.0, "streaming=0.0 is a float; pass True or False"),
    ],
)
def test_bad_streaming(streaming, expected):
    stack = stack_in()
    role = iam.Role(stack, "Caller", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    model = BedrockModel.foundation(NOVA)
    for owner, call in [
        ("BedrockModel.grant_invoke", lambda: model.grant_invoke(role, streaming=streaming)),
        ("BedrockModel.policy_statements", lambda: model.policy_statements(stack, streaming=streaming)),
    ]:
        message = refused(call)
        assert message.startswith(f"{owner}: [{owner}.streaming.") and message.endswith(f"] {expected}")


def test_bad_routed_only():
    assert "routed_only='yes' is a str; pass True or False" in refused(
        lambda: BedrockModel.foundation(NOVA).policy_statements(stack_in(), routed_only="yes")
    )


def test_tokens_are_accepted_where_the_kind_is_given():
    token = cdk.Fn.import_value("SomeModelId")
    assert BedrockModel.foundation(token).kind == "foundation"
    assert BedrockModel.provisioned(token).kind == "provisioned"
    assert BedrockModel.application_inference_profile(token, copies=NOVA).kind == "application-profile"
    region = cdk.Fn.import_value("Region")
    assert BedrockModel.inference_profile(f"us.{HAIKU}", regions=[region]).profile_regions == (region,)


def test_grant_to_a_non_construct_is_refused():
    """Refused through Checks with its rule id (issue 36), still a TypeError for code that caught one."""
    with pytest.raises(TypeError, match="cannot grant to") as caught:
        BedrockModel.foundation(NOVA).grant_invoke(iam.AccountRootPrincipal())  # type: ignore[arg-type]
    assert isinstance(caught.value, InvalidPropsError)
    assert caught.value.ids == ["BedrockModel.grant_invoke.grantee.not-a-construct"]


def test_a_geographic_profile_from_outside_its_geography_warns_at_synth():
    from aws_cdk.assertions import Annotations, Match

    stack = cdk.Stack(cdk.App(), "Test", env=cdk.Environment(account="111122223333", region="us-east-1"))
    role = iam.Role(stack, "Role", assumed_by=iam.AccountRootPrincipal())
    BedrockModel.from_id("eu.anthropic.claude-3-5-haiku-20241022-v1:0").grant_invoke(role)
    Annotations.from_stack(stack).has_warning(
        "/Test/Role", Match.string_like_regexp("routes within eu-central-1.*but this stack is in us-east-1")
    )
    quiet = cdk.Stack(cdk.App(), "Test", env=cdk.Environment(account="111122223333", region="eu-west-1"))
    BedrockModel.from_id("eu.anthropic.claude-3-5-haiku-20241022-v1:0").grant_invoke(
        iam.Role(quiet, "Role", assumed_by=iam.AccountRootPrincipal())
    )
    assert not Annotations.from_stack(quiet).find_warning("*", Match.string_like_regexp("routes within"))


# --- issue 27: the application profile's underlying grants, and the bypass they leave --------------


def test_application_profile_underlying_grants_carry_no_guessed_condition_and_the_bypass_is_documented():
    """No source says which ARN Bedrock puts in bedrock:InferenceProfileArn for a call through an
    application profile: a guessed condition would refuse every call, so the underlying statements
    stay unconditioned and the module says what the role can do and how to close it."""
    from genai_pacer.models import APPLICATION_PROFILE_BYPASS, INFERENCE_PROFILE_ARN_KEY

    (own, copied) = granted(BedrockModel.application_inference_profile(APP_ARN, copies=f"us.{HAIKU}"))
    assert "Condition" not in own and "Condition" not in copied
    # the geographic profile on its own is still fenced by the documented key
    (_, routed) = granted(BedrockModel.from_id(f"us.{HAIKU}"))
    assert routed["Condition"] == {"StringEquals": {INFERENCE_PROFILE_ARN_KEY: profile(f"us.{HAIKU}")}}
    for needed in ("around the application profile", "service control policy", "permissions boundary",
                   '{"Null": {"bedrock:InferenceProfileArn": "true"}}', "make integ",
                   "https://docs.aws.amazon.com/bedrock/latest/userguide/inference-profiles-prereq.html"):
        assert needed in APPLICATION_PROFILE_BYPASS


# --- issue 21: a geography with no source is not guessed ---------------------------------------------


def test_a_ca_profile_needs_its_regions_since_no_source_lists_them():
    """`ca.` had Regions nobody could source; now it is refused until regions= is given, never guessed."""
    assert "ca" not in PROFILE_REGIONS
    assert "has prefix 'ca', whose routing Regions genai-pacer does not know" in refused(
        lambda: BedrockModel.inference_profile(f"ca.{HAIKU}"))
    model = BedrockModel.inference_profile(f"ca.{HAIKU}", regions=["ca-central-1", "ca-west-1"])
    assert model.profile_regions == ("ca-central-1", "ca-west-1")


# --- issue 23: anything shaped like aws_bedrock_alpha's IBedrockInvokable ---------------------------


@pytest.mark.parametrize(
    ("invokable", "expected"),
    [
        (FakeFoundationModel(NOVA), BedrockModel.foundation(NOVA)),
        (FakeCrossRegionProfile("us", FakeFoundationModel(HAIKU)), BedrockModel.inference_profile(f"us.{HAIKU}")),
        (FakeCrossRegionProfile("global", FakeFoundationModel(SONNET)), BedrockModel.inference_profile(f"global.{SONNET}")),
        (FakeApplicationProfile(APP_ARN, FakeCrossRegionProfile("us", FakeFoundationModel(HAIKU))),
         BedrockModel.application_inference_profile(APP_ARN, copies=f"us.{HAIKU}")),
        (FakeApplicationProfile(APP_ARN, FakeFoundationModel(NOVA)),
         BedrockModel.application_inference_profile(APP_ARN, copies=NOVA)),
    ],
    ids=["foundation", "geographic", "global", "application-over-profile", "application-over-model"],
)
def test_an_invokable_becomes_the_bedrock_model_it_names(invokable, expected):
    """Kind, model id (for metric dimensions and quotas), Regions and the grant all follow."""
    model = BedrockModel.from_invokable(invokable)
    assert model == expected
    assert (model.kind, model.foundation_model_id, model.profile_regions) == (
        expected.kind, expected.foundation_model_id, expected.profile_regions)
    assert granted(model) == granted(expected)


def test_an_application_profile_with_a_deploy_time_arn_keeps_the_token():
    stack = stack_in()
    cfn = bedrock.CfnApplicationInferenceProfile(
        stack, "Profile", inference_profile_name="tagged", model_source={"copyFrom": fm("us-east-1", NOVA)})
    model = BedrockModel.from_invokable(FakeApplicationProfile(cfn.attr_inference_profile_arn, FakeFoundationModel(NOVA)))
    assert (model.kind, model.model_id, model.foundation_model_id) == (
        "application-profile", cfn.attr_inference_profile_arn, NOVA)


@pytest.mark.parametrize(
    ("invokable", "message"),
    [
        (FakePromptRouter(), "model: FakePromptRouter is a prompt router: it sends each call to one of several models, "
                             "so there is no single model id for metrics, no quota share and no burndown"),
        (type("Imported", (Invokable,), {"invokable_arn": cdk.Fn.import_value("Arn")})(),
         "model: Imported's model cannot be read at synth (its invokable_arn is a deploy-time token"),
    ],
    ids=["prompt-router", "unreadable"],
)
def test_an_invokable_genai_pacer_cannot_read_is_refused_with_the_reason(invokable, message):
    from genai_pacer.models import as_bedrock_model

    assert message in refused(lambda: as_bedrock_model(invokable))


def test_as_bedrock_model_leaves_other_values_to_the_callers_check():
    from genai_pacer.models import as_bedrock_model

    model = BedrockModel.foundation(NOVA)
    assert as_bedrock_model(model) is model
    assert as_bedrock_model(None) is None and as_bedrock_model("amazon.nova-lite-v1:0") == "amazon.nova-lite-v1:0"


def test_the_real_alpha_classes_are_read_the_same_way():
    """Runs where the dev tools install aws-cdk.aws-bedrock-alpha; genai-pacer never imports it."""
    alpha = pytest.importorskip("aws_cdk.aws_bedrock_alpha")
    stack = stack_in()
    haiku = alpha.BedrockFoundationModel.ANTHROPIC_CLAUDE_3_5_HAIKU_V1_0
    us = alpha.CrossRegionInferenceProfile.from_config(geo_region=alpha.CrossRegionInferenceProfileRegion.US, model=haiku)
    app = alpha.ApplicationInferenceProfile(stack, "App", application_inference_profile_name="app", model_source=us)
    router = alpha.PromptRouter.from_default_id(alpha.DefaultPromptRouterIdentifier.ANTHROPIC_CLAUDE_V1, "us-east-1")
    assert BedrockModel.from_invokable(haiku) == BedrockModel.foundation(HAIKU)
    assert BedrockModel.from_invokable(us) == BedrockModel.inference_profile(f"us.{HAIKU}")
    assert BedrockModel.from_invokable(app).copies == BedrockModel.inference_profile(f"us.{HAIKU}")
    assert "is a prompt router" in refused(lambda: BedrockModel.from_invokable(router))


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (BedrockModel.foundation(NOVA), (NOVA,)),
        (BedrockModel.from_id(f"us.{HAIKU}"), (f"us.{HAIKU}", HAIKU)),
        (BedrockModel.from_id(f"global.{SONNET}"), (f"global.{SONNET}", SONNET)),
        (BedrockModel.application_inference_profile(APP_ARN, copies=f"us.{HAIKU}"), (APP_ARN, HAIKU)),
        (BedrockModel.provisioned(PROVISIONED_ARN), (PROVISIONED_ARN,)),
    ],
    ids=lambda value: getattr(value, "kind", None) or "ids",
)
def test_metric_model_ids_cover_both_readings_of_the_modelid_dimension(model, expected):
    """Which ModelId a call through a profile is counted under is unconfirmed: both candidates are given."""
    assert model.metric_model_ids == expected


# --- issue 37 part 7: a model genai-pacer knows to be deprecated warns at synth ----------------------


def _deprecation_warnings(stack: cdk.Stack) -> list[dict]:
    from aws_cdk.assertions import Annotations, Match

    return Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("deprecated for Amazon Bedrock"))


@pytest.mark.parametrize("model_id", [HAIKU, f"us.{HAIKU}", f"global.{HAIKU}",
                                      f"arn:aws:bedrock:us-east-1:{ACCOUNT}:inference-profile/us.{HAIKU}"])
def test_a_deprecated_model_warns_once_per_construct_naming_its_dates_and_a_replacement(model_id):
    from genai_pacer import QueuedInference
    from genai_pacer.models import DEPRECATED_MODEL_WARNING, DEPRECATED_MODELS

    stack = stack_in()
    QueuedInference(stack, "Summaries", model=BedrockModel.from_id(model_id), max_concurrency=2)
    [warning] = _deprecation_warnings(stack)  # once, though the model's ARNs are rendered many times
    assert warning.id == "/Models/Summaries/WorkerRole"  # on the role that calls the model
    message = warning.entry.data
    retirement = DEPRECATED_MODELS[HAIKU]
    for fact in (model_id, "Claude 3.5 Haiku", "since 2025-12-19", "end of life on Amazon Bedrock is 2026-06-19",
                 retirement.deprecated_source, retirement.end_of_life_source,
                 "anthropic.claude-haiku-4-5-20251001-v1:0", f"[ack: {DEPRECATED_MODEL_WARNING}]"):
        assert fact in message


def test_an_application_profile_copying_a_deprecated_model_warns_and_a_current_model_does_not():
    from genai_pacer import QueuedInference

    stack = stack_in()
    QueuedInference(stack, "Copied", model=BedrockModel.application_inference_profile(APP_ARN, copies=f"us.{HAIKU}"),
                    max_concurrency=2)
    QueuedInference(stack, "Current", model=BedrockModel.from_id(f"us.{SONNET}"), max_concurrency=2)
    QueuedInference(stack, "Token", model=BedrockModel.foundation(cdk.Fn.import_value("ModelId")), max_concurrency=2)
    assert [w.id for w in _deprecation_warnings(stack)] == ["/Models/Copied/WorkerRole"]
    assert BedrockModel.from_id(f"us.{SONNET}").retirement is None


def test_a_deprecated_model_warning_is_acknowledged_by_its_id():
    """The warning is add_warning_v2's, so a user who must keep the model for now acknowledges it by id."""
    from genai_pacer import QueuedInference
    from genai_pacer.models import DEPRECATED_MODEL_WARNING

    stack = stack_in()
    queue = QueuedInference(stack, "Summaries", model=BedrockModel.from_id(HAIKU), max_concurrency=2)
    cdk.Annotations.of(queue).acknowledge_warning(DEPRECATED_MODEL_WARNING, "moving in sprint 12")
    assert _deprecation_warnings(stack) == []


def test_a_quota_shared_by_a_deprecated_model_warns_only_from_its_callers():
    """ModelQuota renders the model's ARN in every stack to find the callers: the warning comes from
    each construct that calls the model, not once more from the quota."""
    from genai_pacer import ModelQuota, QueuedInference

    stack = stack_in()
    model = BedrockModel.from_id(f"us.{HAIKU}")
    quota = ModelQuota(stack, "Quota", model=model, tpm_quota=400_000, burndown=5)
    profile = quota.profile(input_tokens=2_500, output_tokens=300, max_tokens=440)
    QueuedInference(stack, "Summaries", model=model, max_output_tokens=440,
                    max_concurrency=quota.share("Summaries", profile, fraction=0.5, call_seconds=6))
    cdk.App.of(stack).synth()  # the quota reads its callers at synth
    assert [w.id for w in _deprecation_warnings(stack)] == ["/Models/Summaries/WorkerRole"]


def test_every_deprecated_model_entry_cites_https_sources_and_iso_dates():
    import datetime

    from genai_pacer.models import DEPRECATED_MODELS

    for model_id, retirement in DEPRECATED_MODELS.items():
        assert BedrockModel.from_id(model_id).kind == "foundation"
        datetime.date.fromisoformat(retirement.deprecated)
        assert retirement.end_of_life is None or datetime.date.fromisoformat(retirement.end_of_life)
        sources = [retirement.deprecated_source, retirement.replacement_source]
        if retirement.end_of_life is not None:
            sources.append(retirement.end_of_life_source)
        assert all(s and s.startswith("https://") for s in sources)
        assert retirement.replacement not in DEPRECATED_MODELS
