"""Agent(...) refuses options it cannot use when it is built, naming the agent and the option:
text that is no str, a client that is none, thinking values of the wrong kind, a malformed JSON
schema, a compaction model that is no model name."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from turnkit_django import Agent, ConfigurationError, register
from turnkit_django.agents.registry import registered_agents, unregister
from turnkit_django.models import Turn
from turnkit_django.testing import ScriptedClient, reply


@pytest.mark.parametrize("options", [
    {"instructions": 5}, {"instructions": None}, {"description": 5}, {"description": ["x"]},
])
def test_instructions_and_description_must_be_text(options):
    with pytest.raises(ConfigurationError, match=next(iter(options))):
        Agent("a", **options)


@pytest.mark.parametrize("client", [5, "turnkit_django.clients.AnthropicClient", object()])
def test_a_client_must_be_a_model_client(client):
    with pytest.raises(ConfigurationError, match="client must be a model client"):
        Agent("a", client=client)


@pytest.mark.parametrize("thinking", [{"effort": 5}, {"effort": " "}, {"adaptive": "yes"},
                                      {"display": 1}, {"type": None, "budget": True}])
def test_thinking_values_of_the_wrong_kind_are_refused(thinking):
    with pytest.raises(ConfigurationError, match="thinking"):
        Agent("a", thinking=thinking)


def test_good_thinking_is_accepted():
    Agent("a", thinking={"effort": "low", "adaptive": True, "display": "summarized"})
    Agent("b", thinking={"type": "enabled", "budget": 2000})


@pytest.mark.parametrize("schema", [
    {"type": "strin"}, {"type": 5}, {"type": []}, {"properties": 5},
    {"type": "object", "properties": {"a": {"type": "strin"}}}, {"required": "name"},
    {"required": [1]}, {"$ref": "#/$defs/missing"}, {"$ref": "https://example.com/s.json"},
    {"pattern": "("}, {"minimum": "a"}, {"minLength": -1}, {"maxItems": 1.5},
    {"items": 5}, {"anyOf": []}, {"anyOf": [{"type": "nope"}]}, {"enum": "ab"},
    {"multipleOf": 0}, {"uniqueItems": "yes"}, {"$defs": {"x": 5}},
])
@pytest.mark.parametrize("option", ["input_schema", "output_schema"])
def test_a_malformed_json_schema_is_refused_when_the_agent_is_built(option, schema):
    with pytest.raises(ConfigurationError, match=f"{option} is not a valid JSON schema"):
        Agent("a", **{option: schema})


class Memo(BaseModel):
    title: str
    tags: list[str] = []
    parts: list[Memo] = []


@pytest.mark.parametrize("schema", [
    {}, {"type": ["string", "null"]}, Memo.model_json_schema(),
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "$defs": {"A": {}},
     "required": ["a"], "additionalProperties": False},
    {"type": "array", "prefixItems": [{"type": "string"}], "items": False, "format": "x"},
])
def test_well_formed_schemas_are_accepted(schema):
    Agent("a", input_schema=schema, output_schema=schema)


@pytest.mark.django_db
def test_a_run_with_a_malformed_output_schema_writes_nothing():
    agent = Agent("a", client=ScriptedClient([reply("ok")]))
    with pytest.raises(ConfigurationError, match="not a valid JSON schema"):
        agent.run("go", output_schema={"type": "obj"})
    assert not Turn.objects.exists()


@pytest.mark.parametrize("model", [" claude-x", "x" * 201, 5, ""])
def test_a_compaction_model_follows_the_model_name_rule(model):
    with pytest.raises(ConfigurationError, match="compaction model"):
        Agent("a", compaction={"model": model})


@pytest.fixture
def clean_registry():
    yield
    for name in ("fp_agent",):
        unregister(name)


def brief(turn):  # a context contributor
    return "brief"


def no_jargon(output):  # an output policy
    return None


@pytest.mark.parametrize("change", [
    {"thinking": {"budget": 1000}}, {"prompt_mode": "minimal"}, {"system_prompt": "Be terse."},
    {"output_schema": {"type": "object"}}, {"input_schema": {"type": "object"}},
    {"compaction": False}, {"output_retries": 2}, {"output_policy": [no_jargon]},
    {"context_contributors": [brief]},
])
def test_registering_a_definition_that_differs_in_any_behaviour_raises(clean_registry, change):
    register(Agent("fp_agent", instructions="Help."))
    with pytest.raises(ConfigurationError, match="already registered"):
        register(Agent("fp_agent", instructions="Help.", **change))


def test_re_registering_an_equal_definition_is_harmless(clean_registry):
    def build():
        return Agent("fp_agent", instructions="Help.", thinking={"budget": 1000},
                     output_schema=Memo, context_contributors=[brief], compaction=False)
    first = register(build())
    register(build())  # a re-import: equal values, the same functions
    assert registered_agents()["fp_agent"] is first
