"""Agent definitions: agents, the registry, skills, output policies and prompt parts.

Definitions do no I/O; the runtime executes them. The public :class:`turnkit_django.Agent`
(in :mod:`turnkit_django.api.handles`) adds ``run``, ``prepare``, ``submit`` and ``conversation``.
"""

from __future__ import annotations

from .definition import AgentDefinition, SubAgentTool, schema_json
from .policies import Audit, Policy, Violation, check_output_policy
from .prompting import Prompt, Section
from .registry import get_agent, register, registered_agents, unregister
from .skills import LOAD_SKILL, LoadSkillTool, Skill

__all__ = [
    "LOAD_SKILL",
    "AgentDefinition",
    "Audit",
    "LoadSkillTool",
    "Policy",
    "Prompt",
    "Section",
    "Skill",
    "SubAgentTool",
    "Violation",
    "check_output_policy",
    "get_agent",
    "register",
    "registered_agents",
    "schema_json",
    "unregister",
]
