"""Sub-agents as tools: the plain ``task`` tool, and typed delegation with an argument model.

``Agent(sub_agents=[writer])`` gives the parent a tool named after ``writer`` that takes one
``task`` string. A :class:`SubAgentTool` listed in ``tools`` exposes a sub-agent with its own
pydantic argument model instead; the child's task is built from the validated arguments in
application code, so bulk data (a file's contents, rows of a report) reaches the child without
passing through the parent model's context:

* ``task="Review {path} for {focus}"``: a format template over the arguments;
* ``task=callable``: ``callable(args) -> str``, given the validated arguments;
* a subclass overriding :meth:`SubAgentTool.task_for`.

The runtime runs the delegation (inline, or fanned out in the background) exactly as for a plain
sub-agent; the child sees only the task this builds. The classes live in
:mod:`turnkit_django.agents.definition` (the tool and the definition name each other); this
module keeps their old import path.
"""

from .definition import SubAgentTool, TaskArgs, TaskBuilder

__all__ = ["SubAgentTool", "TaskArgs", "TaskBuilder"]
