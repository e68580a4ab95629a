"""Every prop of the value objects constructs take: the experiment's ExperimentVariant, TextPrompt and
ManagedPrompt, LlmEndpoint's InferenceComponentOptions and BedrockModel, given an unresolved token of
each kind a user passes from a CfnParameter (value_as_number, value_as_string,
cdk.Duration.seconds(value_as_number), value_as_list) (issue 35.10).

Each is built inside the construct that takes it. A token reaches the template as a Ref where the value goes
to CloudFormation unchanged: a prompt's text and a variant's service tier in the experiment document, a
prompt ARN in the document and the grant, an inference component's sizes in its resources, a model id in
the grant and the environment.
Synth refuses it, naming the prop, where the value is needed at synth: a variant's name (a construct id, a
metric dimension, the control), its share and sampling (the split is written into the document at synth and
changed by AppConfig deployments), a model's kind. Never a token's number encoding (about -1.9e289) in the
template or a message, never an AttributeError, TypeError or jsii error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Template
from genai_pacer import (
    AnswerRouter,
    AnswerStore,
    BedrockModel,
    ExperimentVariant,
    InferenceComponentOptions,
    InvalidPropsError,
    LlmEndpoint,
    ManagedPrompt,
    PromptExperiment,
    TextPrompt,
)
from helpers import ENCODED_NUMBER, holds_ref, names_prop, new_stack, only, resources, token_of

KINDS = ("number", "string", "duration", "list")
NOVA = BedrockModel.from_id("us.amazon.nova-lite-v1:0")
TGI = "763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-tgi-inference:2.7.0-tgi3.3.6-gpu-py311-cu124-ubuntu22.04"
PROMPT_ARN = "arn:aws:bedrock:us-east-1:111122223333:prompt/PROMPT12AB"
APPLICATION_PROFILE = "arn:aws:bedrock:us-east-1:111122223333:application-inference-profile/abc123"


# ---- each value object inside the construct that takes it ----------------------------------------------


def experiment(stack: cdk.Stack, treatment: ExperimentVariant) -> PromptExperiment:
    return PromptExperiment(stack, "Exp", variants=[ExperimentVariant("control", NOVA, 90, TextPrompt("Answer: {{q}}")),
                                                    treatment])


def variant(stack: cdk.Stack, **props: Any) -> PromptExperiment:
    return experiment(stack, ExperimentVariant(**{"name": "treatment", "model": NOVA, "share": 10,
                                                  "prompt": TextPrompt("Answer briefly: {{q}}"), **props}))


def text_prompt(stack: cdk.Stack, **props: Any) -> PromptExperiment:
    return experiment(stack, ExperimentVariant("treatment", NOVA, 10, TextPrompt(**{"template": "Briefly: {{q}}", **props})))


def managed_prompt(stack: cdk.Stack, **props: Any) -> PromptExperiment:
    """A managed prompt's variant, read by a handler's role: the prompt version is granted too."""
    prompt = ManagedPrompt(**{"prompt_arn": PROMPT_ARN, "version": "3", **props})
    built = experiment(stack, ExperimentVariant("treatment", NOVA, 10, prompt))
    built.grant_evaluate(iam.Role(stack, "Reader", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com")))
    return built


def inference_component(stack: cdk.Stack, **props: Any) -> LlmEndpoint:
    options = InferenceComponentOptions(**{"min_memory_mb": 24_576, "max_instances": 2, **props})
    return LlmEndpoint(stack, "Llm", instance_type="ml.g5.2xlarge", image_uri=TGI, model_data_key="llama/",
                       model_data_bucket=s3.Bucket.from_bucket_name(stack, "Models", "my-models"),
                       inference_component=options)


def bedrock_model(stack: cdk.Stack, **props: Any) -> AnswerRouter:
    """A model a router calls: its id reaches the function's environment and the grant. Regions are
    given to a geographic profile and copies to an application profile, the kinds that take them."""
    base = ({"model_id": "us.amazon.nova-lite-v1:0"} if "profile_regions" in props
            else {"model_id": APPLICATION_PROFILE} if "copies" in props
            else {"model_id": "amazon.nova-lite-v1:0", "kind": "foundation"})
    model = BedrockModel(**{**base, **props})
    return AnswerRouter(stack, "Router", answer_store=AnswerStore(stack, "Store"), model=model)


# ---- where a passing token lands ------------------------------------------------------------------------


def document(template: dict) -> list[Any]:
    """The experiment document and its fallback (every user on the control), as AppConfig versions."""
    return [r["Properties"]["Content"] for r in resources(template, "AWS::AppConfig::HostedConfigurationVersion").values()]


def prompt_grants(template: dict) -> list[Any]:
    return [s["Resource"] for p in resources(template, "AWS::IAM::Policy").values()
            for s in p["Properties"]["PolicyDocument"]["Statement"] if "bedrock:RenderPrompt" in json.dumps(s["Action"])]


def component(template: dict) -> dict:
    return only(template, "AWS::SageMaker::InferenceComponent")["Properties"]


def requirements(template: dict) -> dict:
    return component(template)["Specification"]["ComputeResourceRequirements"]


def instance_scaling(template: dict) -> dict:
    return only(template, "AWS::SageMaker::EndpointConfig")["Properties"]["ProductionVariants"][0]["ManagedInstanceScaling"]


def router_function(template: dict) -> dict:
    (found,) = [r["Properties"] for r in resources(template, "AWS::Lambda::Function").values()
                if r["Properties"].get("Handler") == "answer_router.handler.handler"]
    return found


def model_grants(template: dict) -> list[Any]:
    return [s["Resource"] for p in resources(template, "AWS::IAM::Policy").values()
            for s in p["Properties"]["PolicyDocument"]["Statement"] if "bedrock:InvokeModel" in json.dumps(s["Action"])]


Where = Callable[[dict], list[Any]]
#: name -> (the class, its props, how to build it (inside its construct) with one prop given,
#: (prop, kind) -> the template values that must each hold the parameter). Every other case is refused by name.
TABLE: dict[str, tuple[Callable[..., Any], tuple[str, ...], Callable[..., Any], dict[tuple[str, str], Where]]] = {
    "ExperimentVariant": (
        ExperimentVariant,
        ("name", "model", "share", "prompt", "max_tokens", "temperature", "top_p", "stop_sequences", "additional_fields",
         "service_tier"),
        variant,
        {("service_tier", "string"): document},
    ),
    "TextPrompt": (
        TextPrompt,
        ("template", "system"),
        text_prompt,
        {("template", "string"): document, ("system", "string"): document},
    ),
    "ManagedPrompt": (
        ManagedPrompt,
        ("prompt_arn", "version"),
        managed_prompt,
        {("prompt_arn", "string"): lambda t: [*document(t), *prompt_grants(t)],
         ("version", "string"): lambda t: [*document(t), *prompt_grants(t)]},
    ),
    "InferenceComponentOptions": (
        InferenceComponentOptions,
        ("min_memory_mb", "max_instances", "accelerators", "cpu_cores", "copies", "min_instances", "name"),
        inference_component,
        {
            ("min_memory_mb", "number"): lambda t: [requirements(t)["MinMemoryRequiredInMb"]],
            ("max_instances", "number"): lambda t: [instance_scaling(t)["MaxInstanceCount"]],
            ("accelerators", "number"): lambda t: [requirements(t)["NumberOfAcceleratorDevicesRequired"]],
            ("cpu_cores", "number"): lambda t: [requirements(t)["NumberOfCpuCoresRequired"]],
            ("copies", "number"): lambda t: [component(t)["RuntimeConfig"]["CopyCount"]],
            ("min_instances", "number"): lambda t: [instance_scaling(t)["MinInstanceCount"]],
            ("name", "string"): lambda t: [component(t)["InferenceComponentName"]],
        },
    ),
    "BedrockModel": (
        BedrockModel,
        ("model_id", "profile_regions", "kind", "copies"),
        bedrock_model,
        {("model_id", "string"): lambda t: [router_function(t)["Environment"]["Variables"]["MODEL_ID"], *model_grants(t)]},
    ),
}
#: A prop that refusals name as the class methods (the documented way to build it) call it.
ALIASES = {("BedrockModel", "profile_regions"): "regions"}
CASES = [(name, prop, kind) for name, (_, props, *_rest) in TABLE.items() for prop in props for kind in KINDS]


@pytest.mark.parametrize(("name", "prop", "kind"), CASES, ids=["-".join(case) for case in CASES])
def test_every_prop_given_every_kind_of_token_reaches_the_template_or_is_refused_by_name(name, prop, kind):
    _, _, build, passes = TABLE[name]
    stack = new_stack()
    where = passes.get((prop, kind))
    if where is None:
        with pytest.raises(InvalidPropsError) as refused:
            build(stack, **{prop: token_of(stack, kind)})
            Template.from_stack(stack)
        assert names_prop(ALIASES.get((name, prop), prop), refused.value.problems), refused.value.problems
        assert not ENCODED_NUMBER.search(str(refused.value)), str(refused.value)
        return
    build(stack, **{prop: token_of(stack, kind)})
    template = Template.from_stack(stack).to_json()
    values = where(template)
    assert values and all(holds_ref(v) for v in values), json.dumps(values)[:2000]
    text = json.dumps(template["Resources"])
    assert not ENCODED_NUMBER.search(text), text[max(0, ENCODED_NUMBER.search(text).start() - 300):][:400]


def test_the_table_counts():
    assert len(CASES) == 4 * (10 + 2 + 2 + 7 + 4)
    assert sum(len(passes) for *_rest, passes in TABLE.values()) == 13


# ---- the logic each passing token keeps, and tokens inside a value --------------------------------------


def test_a_deploy_time_prompt_is_text_inside_the_document_and_the_fallback_keeps_it():
    stack = new_stack()
    template_text = token_of(stack, "string")
    text_prompt(stack, template=template_text)
    contents = document(Template.from_stack(stack).to_json())
    assert len(contents) == 2  # the experiment's version and the fallback's
    for content in contents:
        parts = content["Fn::Join"][1]
        at = parts.index({"Ref": "Param"})
        assert parts[at - 1].endswith('"template": "') and parts[at + 1].startswith('"}')


def test_deploy_time_strings_inside_stop_sequences_reach_the_document():
    stack = new_stack()
    stop = token_of(stack, "string")
    variant(stack, stop_sequences=[stop, "END"])
    contents = document(Template.from_stack(stack).to_json())
    assert len(contents) == 2 and all(holds_ref(content) for content in contents)


def test_a_deploy_time_managed_prompt_version_is_granted_as_the_version_arn():
    stack = new_stack()
    managed_prompt(stack, version=token_of(stack, "string"))
    (resource,) = prompt_grants(Template.from_stack(stack).to_json())
    assert resource["Fn::Join"][1] == [PROMPT_ARN + ":", {"Ref": "Param"}]


# ---- the defects this table found, through the class methods users call ---------------------------------


@pytest.mark.parametrize("build", [
    lambda regions: BedrockModel.from_id("us.amazon.nova-lite-v1:0", regions=regions),
    lambda regions: BedrockModel.inference_profile("us.amazon.nova-lite-v1:0", regions=regions),
])
def test_a_deploy_time_region_list_is_refused_by_name_not_by_aws_cdk_lib(build):
    """Before: accepted, then aws-cdk-lib's CannotAddElementsListToken when the grant was synthesized."""
    stack = new_stack()
    with pytest.raises(InvalidPropsError, match="regions is a deploy-time list, but each Region is an ARN of the grant"):
        build(token_of(stack, "list", "Regions"))
    # a deploy-time string among literal Regions is one ARN's Region, so it passes
    model = build(["us-east-1", token_of(stack, "string")])
    AnswerRouter(stack, "Router", answer_store=AnswerStore(stack, "Store"), model=model)
    assert any(holds_ref(resource) for resource in model_grants(Template.from_stack(stack).to_json()))
