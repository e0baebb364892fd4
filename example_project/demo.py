"""The turnkit-django demo (``make demo``): a support agent, inline and on a real Celery worker.

1. Inline: ``support.run(...)`` looks an order up, delegates a note to the "writer" sub-agent and
   refunds with a terminal tool, all in this process; then prints the transcript of the tree.
2. Background: ``support.submit(...)`` on a real ``celery worker`` process, which is SIGKILLed
   while the refund tool waits for the payment provider. ``manage.py turnkit_reconcile --loop``
   notices the expired lease, a fresh worker resumes the turn where it stopped, and the
   replay-safe refund runs again with the same idempotency key: the customer is paid once.
3. Media: the "studio" agent (the painter specialist) makes a product picture behind the
   application's gate, which allows one generation per credit; the second request is refused
   and nothing is generated. The image is in the media storage, its reference in the transcript.

Runs on the embedded default (SQLite and a file-system broker under example_project/var/demo/,
recreated on every run); needs no server. Exits non-zero if the story does not happen as told.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

EXAMPLE = Path(__file__).resolve().parent
ROOT = EXAMPLE.parent
DEMO_VAR = EXAMPLE / "var" / "demo"
EVENT_LOG = DEMO_VAR / "events.jsonl"
# Run as a script, Python puts example_project/ first on sys.path, where celery.py would shadow
# the celery package: use the repository root instead.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != EXAMPLE]
sys.path.insert(0, str(ROOT))

# Short recovery timings so the demo takes seconds; production defaults are 10 / 60 / 15.
TIMINGS = {"TURNKIT_HEARTBEAT_INTERVAL": "0.5", "TURNKIT_LEASE": "2",
           "TURNKIT_RECONCILE_INTERVAL": "1"}
WAIT = 30.0  # seconds; every wait has a deadline


class DemoFailed(Exception):
    """The demo did not go as described."""


def heading(text: str) -> None:
    print(f"\n{text}\n{'─' * len(text)}")


def prepare() -> None:
    """Point Django at a fresh demo database and broker folder, and migrate."""
    shutil.rmtree(DEMO_VAR, ignore_errors=True)
    for name in ("DATABASE_URL", "CELERY_BROKER_URL"):
        os.environ.pop(name, None)  # the demo always runs on the embedded default
    os.environ.update(TIMINGS, DJANGO_SETTINGS_MODULE="example_project.settings",
                      EXAMPLE_VAR_DIR=str(DEMO_VAR), EXAMPLE_EVENT_LOG=str(EVENT_LOG),
                      PYTHONUNBUFFERED="1",
                      PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                               os.environ.get("PYTHONPATH")])))
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    EVENT_LOG.touch()
    from django.conf import settings

    db = Path(settings.DATABASES["default"]["NAME"]).relative_to(ROOT)
    print(f"  database  {db} (SQLite, IMMEDIATE transaction mode), migrated just now")
    print(f"  model     {settings.TURNKIT['DEFAULT_MODEL']}: a FunctionClient scripted from the "
          "transcript, no network")


def refunds_for(order_id: str) -> int:
    from example_project.support.models import Refund

    return Refund.objects.filter(order_id=order_id).count()


# --------------------------------------------------------------------------- 1. inline


def inline_demo() -> None:
    from example_project.support.agents import support
    from turnkit_django.console.transcript_text import show

    heading("1. Inline run: look up, delegate to a sub-agent, refund (terminal tool)")
    task = "Refund order 42: the teapot arrived broken."
    print(f'  support.run("{task}")\n')
    started = time.monotonic()
    run = support.run(task, principal={"user": "demo"})
    elapsed = time.monotonic() - started
    show(run)
    print(f"  ledger   {refunds_for('42')} refund for order 42 · ran in {elapsed:.2f} s")
    if run.status != "completed" or refunds_for("42") != 1:
        raise DemoFailed(f"the inline run ended {run.status!r}: {run.error}")

    question = "I want a refund."
    print(f'\n  support.run("{question}", on_delta=...)  # the answer as the model writes it')
    pieces: list[str] = []

    def show(delta: Any) -> None:
        pieces.append(delta.text)
        print(delta.text, end="", flush=True)

    print("  streamed ", end="")
    asked = support.run(question, principal={"user": "demo"}, on_delta=show)
    print(f"\n  deltas   {len(pieces)} pieces, then the committed message: {asked.output_text!r}")
    if "".join(pieces) != asked.output_text:
        raise DemoFailed("the streamed text differs from the committed message")


# --------------------------------------------------------------------------- 2. background


class Process:
    """A child process of the demo, its output in a log file under the demo folder."""

    def __init__(self, label: str, args: list[str]) -> None:
        self.label = label
        self.log_path = DEMO_VAR / f"{label.replace(' ', '-')}.log"
        self.log: IO[bytes] = self.log_path.open("wb")
        self.proc = subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
            args, cwd=ROOT, env=os.environ.copy(), start_new_session=True,
            stdout=self.log, stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()

    def tail(self, lines: int = 15) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(f"    | {line}" for line in text)


# Events shown in the timeline; the others (messages, model calls) are in the transcript.
SHOWN = ("turn.", "tool_call.")


def describe(entry: dict[str, Any]) -> str:
    """One timeline line's detail for an event; a value the event does not carry is left out."""
    from turnkit_django.console.transcript_text import counted, result_text

    kind, payload, row = entry["type"], entry["payload"], entry["row"]
    agent = str(row.get("agent_name"))
    if kind == "turn.started":
        return f"{agent} · fence {row.get('fence')}"
    if kind == "turn.recovered":
        return f"{agent} · lease expired → pending · fence {row.get('fence')}"
    if kind == "turn.waiting":
        return f"{agent} · waiting for {counted(len(payload.get('targets') or ()), 'turn')}"
    if kind.startswith("turn."):
        detail = payload.get("output_text") or payload.get("error")
        if detail is None:
            return agent
        return f"{agent} · {detail if isinstance(detail, str) else result_text(detail)}"
    if kind == "tool_call.started" and row.get("attempts", 0) > 1:
        return f"{payload.get('name')} · attempt {row['attempts']}, same idempotency key"
    outcome = row.get("result") if kind == "tool_call.completed" else row.get("error")
    if kind == "tool_call.started" or outcome is None:
        return str(payload.get("name"))
    return f"{payload.get('name')} → {result_text(outcome)}"


class Timeline:
    """Prints what each process did to the run, from the event log the processes append to."""

    def __init__(self, run_id: str, order_id: str) -> None:
        self.run_id = run_id
        self.order_id = order_id
        self.started = time.time()
        self.actors: dict[int, str] = {os.getpid(): "demo"}
        self.events = EVENT_LOG.open("r", encoding="utf-8")
        self.events.seek(0, os.SEEK_END)
        self.pending = ""
        self.refunds = refunds_for(order_id)

    def say(self, actor: str, what: str, detail: str = "", *, at: float | None = None) -> None:
        from turnkit_django.console.transcript_text import WIDTH, clip

        elapsed = (time.time() if at is None else at) - self.started
        prefix = f"  {elapsed:5.2f}s  {actor:<12}{what:<20} "
        print((prefix + clip(detail, WIDTH - len(prefix))).rstrip())

    def start(self, label: str, process: Process, command: str) -> Process:
        self.actors[process.pid] = label
        self.say("demo", "started", f"{label} · pid {process.pid} · {command}")
        return process

    def _tree(self) -> set[str]:
        from turnkit_django.models import Turn

        return set(Turn.objects.filter(root_turn_id=self.run_id).values_list("pk", flat=True))

    def poll(self) -> str:
        """Print new events of the run and ledger changes; return the run's status."""
        from turnkit_django.models import Turn

        chunk = self.pending + self.events.read()
        *lines, self.pending = chunk.split("\n")
        tree = self._tree() if lines else set()
        for line in lines:
            entry = json.loads(line)
            if entry["turn_id"] in tree and entry["type"].startswith(SHOWN):
                actor = self.actors.get(entry["pid"], f"pid {entry['pid']}")
                self.say(actor, entry["type"], describe(entry), at=entry["at"])
        refunds = refunds_for(self.order_id)
        if refunds != self.refunds:
            self.refunds = refunds
            self.say("ledger", "refund recorded", f"order {self.order_id} · the provider has paid; "
                     "its answer is slow")
        return Turn.objects.filter(pk=self.run_id).values_list("status", flat=True).get()

    def until(self, done: Callable[[str], bool], what: str) -> str:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            status = self.poll()
            if done(status):
                return status
            time.sleep(0.05)
        raise DemoFailed(f"timed out after {WAIT:g} s waiting for {what}")


def start_worker(timeline: Timeline, number: int) -> Process:
    from django.conf import settings

    queue = settings.TURNKIT["QUEUE"]
    process = Process(f"worker {number}", [
        sys.executable, "-m", "celery", "-A", "example_project", "worker", "-Q", queue,
        "--pool=solo", "-n", f"demo{number}@%h", "-l", "INFO",
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ])
    return timeline.start(f"worker {number}", process, "celery worker")


def background_demo() -> None:
    from example_project.support.agents import support
    from turnkit_django.console.transcript_text import show

    heading("2. Background run: SIGKILL the Celery worker mid-refund, recover, finish")
    print(f"  broker    file system under {DEMO_VAR.relative_to(ROOT)}/broker, no server")
    print(f"  timing    HEARTBEAT_INTERVAL {TIMINGS['TURNKIT_HEARTBEAT_INTERVAL']} s · LEASE "
          f"{TIMINGS['TURNKIT_LEASE']} s · RECONCILE_INTERVAL "
          f"{TIMINGS['TURNKIT_RECONCILE_INTERVAL']} s (demo values)")
    print("  processes celery -A example_project worker -Q turnkit --pool=solo (two, in turn)")
    print(f"            python manage.py turnkit_reconcile --loop --interval "
          f"{TIMINGS['TURNKIT_RECONCILE_INTERVAL']} (instead of beat)")
    task, order_id = "Refund order 77: the lamp arrived broken.", "77"
    print(f'  support.submit("{task}", context={{"provider_latency": 30}})\n')
    processes: list[Process] = []
    try:
        run = support.submit(task, principal={"user": "demo"},
                             context={"provider_latency": 30})
        timeline = Timeline(run.id, order_id)
        timeline.say("demo", "submitted", f"{run.id} · pending · fence 0")
        processes.append(timeline.start("reconciler", Process("reconciler", [
            sys.executable, "manage.py", "turnkit_reconcile", "--loop",
            "--interval", TIMINGS["TURNKIT_RECONCILE_INTERVAL"]]),
            "turnkit_reconcile --loop"))
        first = start_worker(timeline, 1)
        processes.append(first)
        timeline.until(lambda _: timeline.refunds > 0, "the refund tool to start")
        killed_at = time.time()
        first.kill()
        timeline.poll()  # what worker 1 did before it died comes first
        timeline.say("demo", "SIGKILL", f"worker 1 (pid {first.pid}) in the middle of "
                     "issue_refund", at=killed_at)
        processes.append(start_worker(timeline, 2))
        status = timeline.until(lambda s: s in ("completed", "failed", "cancelled"),
                                "the run to finish")
    except DemoFailed:
        for process in processes:
            print(f"\n  {process.label} log ({process.log_path.relative_to(ROOT)}):")
            print(process.tail())
        raise
    finally:
        for process in reversed(processes):
            process.stop()
    timeline.poll()
    timeline.events.close()
    print()
    show(run)
    refunds = refunds_for(order_id)
    print(f"  ledger   {refunds} refund for order {order_id}: issue_refund ran twice with one "
          "key, the customer was paid once")
    if status != "completed" or refunds != 1:
        raise DemoFailed(f"the background run ended {status!r} with {refunds} refunds")


# --------------------------------------------------------------------------- 3. media


def media_demo() -> None:
    from django.conf import settings

    from example_project.support.studio import CREDITS, studio
    from turnkit_django.api.media import image_url
    from turnkit_django.console.transcript_text import show
    from turnkit_django.messages import ImagePart, load_parts
    from turnkit_django.models import Message

    heading("3. Media: the painter specialist behind the application's gate")
    print(f"  gate      spend_credit(principal=...): {CREDITS['demo']} image credit for 'demo'")
    task = "a ceramic teapot, the replacement for order 42"
    first = studio.run(task, principal={"user": "demo"})
    show(first)
    second = studio.run("a walnut desk lamp", principal={"user": "demo"})
    print(f"  again    {second.output_text}")
    images = Message.objects.filter(kind="image", turn__agent_name="studio")
    parts = [p for m in images for p in load_parts(m.content) if isinstance(p, ImagePart)]
    for part in parts:
        path = Path(settings.MEDIA_ROOT) / str(part.name)
        print(f"  image    {part.id} ({path.stat().st_size} bytes, default storage), url "
              f"{image_url(part)}\n           {path.relative_to(ROOT)}")
    if first.status != "completed" or len(parts) != 1 or second.status != "completed":
        raise DemoFailed(f"the studio made {len(parts)} images ({first.status}, "
                         f"{second.status}): {first.error or second.error}")


def verify() -> None:
    """Check every stored invariant with ``manage.py turnkit_verify``, when it is installed."""
    from django.core.management import call_command, get_commands
    from django.core.management.base import CommandError

    if "turnkit_verify" not in get_commands():
        return
    out = io.StringIO()
    try:
        call_command("turnkit_verify", stdout=out)
    except CommandError as exc:
        raise DemoFailed(f"turnkit_verify: {exc}\n{out.getvalue()}") from exc
    print(f"\n  verify   {out.getvalue().strip()} (manage.py turnkit_verify)")


def main() -> int:
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="replace", line_buffering=True)
    started = time.monotonic()
    heading("turnkit-django demo")
    try:
        prepare()
        inline_demo()
        background_demo()
        media_demo()
        verify()
    except DemoFailed as exc:
        print(f"\ndemo failed: {exc}", file=sys.stderr)
        return 1
    print(f"\nDone in {time.monotonic() - started:.1f} s. Rows, logs and events are in "
          f"{DEMO_VAR.relative_to(ROOT)}/ until the next run.")
    return 0


if __name__ == "__main__":
    sys.exit(main())

