"""The soak's workload: scripted turns of every kind, submitted through the public API.

Each tick draws one action from the seeded generator (:data:`ACTIONS`, with weights) and performs
it with ``turnkit_django``'s public API only: ``Agent.submit``, ``Conversation.ask``,
``prepare().wait_for().submit()``, ``Conversation.send_message``, ``Turn.cancel``. The scripts
are for the agents of :mod:`tests.testapp.soak_agents`; every script carries a nonce, so every
input is unique and invariant I2 can count it. While more than ``max_active`` turns are active
or more than ``max_queued`` doorbells wait in the broker, the workload waits, so the backlog
stays within what the fleet can do.
"""

from __future__ import annotations

import json
import random
import threading
from collections import Counter
from typing import Any

from django.db import connection

from tests.e2e.harness import queued
from turnkit_django import load_turn
from turnkit_django.agents.registry import get_agent
from turnkit_django.api.handles import Agent, ConversationHandle
from turnkit_django.models import Turn

from ..testapp.soak_agents import LAUNCHED

ROOT, CHILD, LEAF = "soak_root", "soak_child", "soak_leaf"

# Actions and their weights.
ACTIONS: dict[str, int] = {
    "tools": 5,           # a background run calling effect tools
    "fanout": 3,          # sub-agent calls in one response: fan-out, wait, join in call order
    "launch": 3,          # launch_agent (maybe with a callback), then maybe wait_for
    "send": 2,            # send_message from the model to an inbox conversation
    "callback": 2,        # submit(callback=inbox): the result is delivered there
    "wait": 2,            # an application wait on two fresh runs
    "lane": 2,            # conv.ask(..., submit=True) on a busy conversation: the serial lane
    "message": 2,         # conv.send_message from the application
    "cancel": 2,          # cancel a random active turn, plain
    "cancel_cascade": 2,  # ... or with its descendants
}
INBOXES = 4
LANES = 3


class Workload:
    """Submit the soak's workload until stopped; counts what it did by action."""

    def __init__(self, rng: random.Random, *, max_active: int = 12, max_queued: int = 20,
                 interval: tuple[float, float] = (0.05, 0.4)) -> None:
        self.rng = rng
        self.max_active = max_active
        self.max_queued = max_queued
        self.interval = interval
        self.actions: Counter[str] = Counter()
        self.roots: list[str] = []  # every turn the workload submitted itself
        self.errors: list[str] = []
        self.throttled = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-workload", daemon=True)
        self._counter = 0
        self.root: Agent = get_agent(ROOT)  # type: ignore[assignment]
        self.inboxes: list[ConversationHandle] = []
        self.lanes: list[ConversationHandle] = []

    # -- scripts -----------------------------------------------------------------

    def _label(self, kind: str) -> str:
        self._counter += 1
        return f"{kind}-{self._counter}"

    def script(self, *steps: dict[str, Any]) -> str:
        return json.dumps({"nonce": f"{self.rng.getrandbits(64):016x}", "steps": list(steps)})

    def _model(self, step: dict[str, Any]) -> dict[str, Any]:
        """``step`` with a sleep inside its model call, sometimes."""
        seconds = self.rng.choice([0, 0, 0, 0.1, 0.3, 0.8])
        return {**step, "sleep": seconds} if seconds else step

    def effect(self) -> dict[str, Any]:
        tool = self.rng.choice(["unsafe_effect", "unsafe_effect", "safe_effect", "span"])
        seconds = self.rng.choice([0, 0.3, 0.8, 1.5, 2.5])
        if tool == "span":
            return self._model({"call": "span", "args": {"label": self._label("span"),
                                                          "seconds": seconds or 0.1}})
        return self._model({"call": tool, "args": {"label": self._label(tool),
                                                   "seconds": seconds}})

    def effects(self, low: int = 0, high: int = 3) -> list[dict[str, Any]]:
        return [self.effect() for _ in range(self.rng.randint(low, high))]

    def answer(self) -> dict[str, Any]:
        return self._model({"reply": self._label("answer")})

    def leaf_task(self) -> str:
        return self.script(*self.effects(1, 2), self.answer())

    def child_task(self) -> str:
        steps = self.effects(0, 2)
        if self.rng.random() < 0.3:
            steps.append({"call": "launch_agent", "args": {
                "agent": LEAF, "task": self.leaf_task(), "callback": self.rng.random() < 0.5}})
            if self.rng.random() < 0.6:
                steps.append({"call": "wait_for", "args": {"turn_ids": LAUNCHED}})
        return self.script(*steps, self.answer())

    def note(self) -> str:
        """A message's text: mostly plain (the continuation just replies), sometimes a script."""
        if self.rng.random() < 0.3:
            return self.script(*self.effects(1, 2), self.answer())
        return f"note {self._label('note')} {self.rng.getrandbits(32):08x}"

    # -- actions -----------------------------------------------------------------

    def _submit(self, *steps: dict[str, Any], callback: Any = None) -> str:
        turn_id = self.root.submit(self.script(*steps), callback=callback).id
        self.roots.append(turn_id)
        return turn_id

    def act(self, action: str) -> None:
        rng = self.rng
        if action == "tools":
            self._submit(*self.effects(1, 4), self.answer())
        elif action == "fanout":
            calls = [{"call": CHILD, "args": {"task": self.child_task()}}
                     for _ in range(rng.randint(2, 3))]
            self._submit(*self.effects(0, 1), self._model({"calls": calls}), self.answer())
        elif action == "launch":
            steps = [{"call": "launch_agent", "args": {
                "agent": CHILD, "task": self.child_task(), "callback": rng.random() < 0.5}},
                *self.effects(0, 1)]
            if rng.random() < 0.7:
                steps.append({"call": "wait_for", "args": {"turn_ids": LAUNCHED}})
            self._submit(*steps, self.answer())
        elif action == "send":
            inbox = rng.choice(self.inboxes)
            self._submit(*self.effects(0, 1), {"call": "send_message", "args": {
                "conversation_id": inbox.id, "text": self.note()}}, self.answer())
        elif action == "callback":
            self._submit(*self.effects(1, 2), self.answer(),
                         callback=rng.choice(self.inboxes))
        elif action == "wait":
            targets = [self._submit(*self.effects(1, 2), self.answer()) for _ in range(2)]
            waiter = self.root.prepare(self.script(*self.effects(0, 2), self.answer()))
            waiter.wait_for(*targets).submit()
            self.roots.append(waiter.id)
        elif action == "lane":
            turn = rng.choice(self.lanes).ask(self.script(*self.effects(1, 2), self.answer()),
                                              submit=True)
            self.roots.append(turn.id)
        elif action == "message":
            source, inbox = rng.sample([*self.lanes, *self.inboxes], 2)
            source.send_message(inbox, self.note(), key=self._label("message"))
        elif action in ("cancel", "cancel_cascade"):
            active = list(Turn.objects.active().order_by("pk").values_list("pk", flat=True)
                          [:200])
            if not active:
                return
            load_turn(rng.choice(active)).cancel(cascade=action == "cancel_cascade")
        else:
            raise ValueError(f"unknown action {action!r}; choose one of {sorted(ACTIONS)}")
        self.actions[action] += 1

    def busy(self) -> bool:
        try:
            backlog = queued()
        except Exception:  # Redis is being restarted: wait for it
            return True
        return backlog > self.max_queued or Turn.objects.active().count() > self.max_active

    def tick(self) -> None:
        kinds, weights = list(ACTIONS), list(ACTIONS.values())
        action = self.rng.choices(kinds, weights)[0]
        try:
            if self.busy():
                self.throttled += 1
                return
            self.act(action)
        except Exception as exc:
            self.errors.append(f"{action}: {type(exc).__name__}: {exc}")

    # -- the thread --------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.rng.uniform(*self.interval)):
                self.tick()
        finally:
            connection.close()

    def start(self) -> None:
        self.inboxes = [self.root.conversation() for _ in range(INBOXES)]
        self.lanes = [self.root.conversation() for _ in range(LANES)]
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        if self._thread.is_alive():
            self.errors.append("the workload thread did not stop")
