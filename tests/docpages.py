"""Run a documentation page as written: its files, its commands, its shell sessions.

A page marks what a reader types with fenced blocks (``tests/e2e/test_quickstart.py`` runs
docs/quickstart.md and docs/howto/testing.md this way; tests/unit/test_docs_examples.py runs the
shell sessions of docs/media.md and docs/specialists.md in its own process):

- ```` ```python title="path/to/file.py" ```` : a file, written as is (created or replaced);
- ```` ```python title="path/to/file.py, at the end" ```` : text appended to that file;
- ```` ```ini title="pytest.ini" ```` : the same for any language;
- ```` ```python title="python manage.py shell" ```` : code typed into ``manage.py shell``, a
  new session (a new process) for each block, so a block cannot use names a previous one defined;
  on a page run in one process (tests/unit/test_docs_examples.py) the blocks share a namespace;
- ```` ```console ```` : commands, one a line, run in order (``cd`` changes the directory).

Blocks that are not run say why in their title, which the reader sees too:

- ```` title="python manage.py shell, needs an API key" ```` (any title with ``, needs `` then
  what is missing: a provider's key, a server): written to run, but not here;
- ```` title="fragment" ````: part of a file or a session, shown to explain, not complete.

Blocks without a title are data or illustrations (JSON, a trace): pages whose every Python
block must be run or marked are listed in tests/unit/test_docs_examples.py.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

FENCE = re.compile(r'^```(?P<lang>[\w-]+)(?:\s+title="(?P<title>[^"]*)")?\s*$')
SHELL = "python manage.py shell"
APPEND = ", at the end"
NEEDS = ", needs "
FRAGMENT = "fragment"


@dataclass(frozen=True)
class Block:
    lang: str
    title: str
    code: str
    line: int  # where the block starts in the page, for messages

    @property
    def skipped(self) -> bool:
        """Marked as not run here: it needs a provider or a server, or it is a fragment."""
        return NEEDS in self.title or self.title == FRAGMENT


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page``, in order."""
    found: list[Block] = []
    lines = page.read_text().splitlines()
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        index += 1
        if not match:
            continue
        start, body = index, []
        while index < len(lines) and lines[index] != "```":
            body.append(lines[index])
            index += 1
        index += 1
        found.append(Block(match["lang"], match["title"] or "", "\n".join(body) + "\n", start))
    return found


@dataclass
class Reader:
    """Does what a page says, in a directory, with this interpreter's Python, Django and Celery.

    ``on_command(argv)`` may return a replacement for a console command (or None to skip it);
    ``before_shell(code)`` may return code to run first in a shell session (a wait, say).
    Every process has a deadline; background ones (workers, beat) are stopped by :meth:`close`.
    """

    cwd: Path
    env: dict[str, str]
    on_command: Callable[[list[str]], list[str] | None] = lambda argv: argv
    before_shell: Callable[[str], str] = lambda code: ""
    outputs: list[tuple[str, str]] = field(default_factory=list)  # (what ran, its output)
    background: list[tuple[str, subprocess.Popen[bytes], Path]] = field(default_factory=list)
    timeout: float = 120

    def argv(self, words: list[str]) -> list[str]:
        program = {"python": [sys.executable], "django-admin": [sys.executable, "-m", "django"],
                   "celery": [sys.executable, "-m", "celery"],
                   "pytest": [sys.executable, "-m", "pytest"]}
        if words[0] not in program:
            raise AssertionError(f"the page runs {words[0]!r}, which this reader does not know")
        return program[words[0]] + words[1:]

    def run(self, argv: list[str], *, what: str, stdin: str | None = None) -> str:
        """Run a command to its end; return its standard output (both are kept in outputs)."""
        done = subprocess.run(argv, cwd=self.cwd, env=self.env, input=stdin, text=True,
                              capture_output=True, timeout=self.timeout, check=False)
        output = done.stdout + done.stderr
        self.outputs.append((what, output))
        if done.returncode != 0:
            raise AssertionError(f"{what!r} exited with {done.returncode}:\n{output}")
        return done.stdout

    def start(self, argv: list[str], *, what: str) -> None:
        log = self.cwd / f".reader-{len(self.background)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, cwd=self.cwd, env=self.env, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        self.background.append((what, proc, log))

    def console(self, block: Block) -> None:
        for raw in block.code.splitlines():
            line = raw.split("  #", 1)[0].strip()
            if not line or line.startswith("#"):
                continue
            words = shlex.split(line)
            if words[0] == "cd":
                self.cwd = self.cwd / words[1]
                continue
            replaced = self.on_command(words)
            if replaced is None:
                continue
            if replaced[:1] == ["celery"] and ("worker" in replaced or "beat" in replaced):
                self.start(self.argv(replaced), what=line)
            else:
                self.run(self.argv(replaced), what=line)

    def file(self, block: Block) -> None:
        name = block.title.removesuffix(APPEND)
        path = self.cwd / name
        if block.title.endswith(APPEND):
            assert path.exists(), f"line {block.line}: {name} must exist to be appended to"
            path.write_text(path.read_text() + "\n" + block.code)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.code)

    def shell(self, block: Block) -> str:
        code = self.before_shell(block.code) + block.code
        return self.run(self.argv(["python", "manage.py", "shell"]), what=code, stdin=code)

    def read(self, page: Path) -> list[str]:
        """Do everything the page says; return the output of each shell session."""
        sessions: list[str] = []
        for block in blocks(page):
            if block.skipped:
                continue
            if block.title == SHELL:
                sessions.append(self.shell(block))
            elif block.lang == "console":
                self.console(block)
            elif block.title:
                self.file(block)
        return sessions

    def logs(self) -> str:
        return "\n".join(f"----- {what} -----\n{log.read_text(errors='replace')[-4000:]}"
                         for what, _, log in self.background)

    def close(self) -> None:
        for _, proc, _ in self.background:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for _, proc, _ in self.background:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def installs(page: Path) -> Iterator[str]:
    """The ``pip install`` lines of the page's console blocks."""
    for block in blocks(page):
        if block.lang == "console":
            yield from (line.strip() for line in block.code.splitlines()
                        if line.strip().startswith("pip install"))
