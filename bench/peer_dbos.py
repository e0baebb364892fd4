"""DBOS Transact for ``make bench-peers``: workload T as a workflow of five steps.

``@DBOS.step`` for the model (an instant fake: a tool call until two tool results are in, then
the answer) and for the tool, inside one ``@DBOS.workflow``; DBOS checkpoints the workflow and
each step's output in its system database (PostgreSQL). Runs in .venv-peers only.
"""

from __future__ import annotations

import uuid
from importlib.metadata import version
from typing import Any

from dbos import DBOS

from bench import pgstats
from bench.floor import STEPS_PER_TURN
from bench.peer_runner import System

TOOL_CALLS = STEPS_PER_TURN // 2


@DBOS.step()
def model(done: int) -> dict[str, Any]:
    if done < TOOL_CALLS:
        return {"tool_call": {"name": "probe", "args": {"n": done},
                              "id": f"call_{uuid.uuid4().hex}"}}
    return {"text": "done"}


@DBOS.step()
def probe(n: int) -> dict[str, int]:
    return {"n": n}


@DBOS.workflow()
def turn(task: str) -> str:
    done = 0
    while True:
        response = model(done)
        if "text" in response:
            return str(response["text"])
        probe(response["tool_call"]["args"]["n"])
        done += 1


class Dbos(System):
    def __init__(self, url: str) -> None:
        self.dbos = DBOS(config={"name": "turnkit-bench", "system_database_url": url,
                                 "run_admin_server": False, "log_level": "WARNING"})
        DBOS.launch()

    def turn(self) -> None:
        assert turn("bench") == "done"

    def flush(self) -> int:
        # DBOS keeps a SQLAlchemy pool (an internal attribute: the flush only): take every idle
        # connection of it at once and flush each in a transaction rolled back (not a commit).
        engine = self.dbos._sys_db.engine
        connections = [engine.connect() for _ in range(engine.pool.checkedin())]  # type: ignore[attr-defined]
        for connection in connections:
            connection.exec_driver_sql(pgstats.FLUSH).fetchall()
        for connection in connections:
            connection.rollback()
            connection.close()
        return 0

    def info(self) -> dict[str, str]:
        return {"dbos": version("dbos"), "sqlalchemy": version("sqlalchemy"),
                "psycopg": version("psycopg")}
