"""An OpenTelemetry span exporter for the e2e tier: each finished span as one JSON line in a file.

With ``TURNKIT_E2E_SPANS=<path>`` in a worker's environment, :func:`install` (called when
``tests.celery_app`` is imported) sets a global SDK ``TracerProvider`` whose
``SimpleSpanProcessor`` appends every span to ``<path>`` as it ends (one ``write`` on an
``O_APPEND`` descriptor, like the ledger), so the test process reads the spans of every worker
process, pool children included. ``tests/e2e/worker_settings.py`` turns ``TRACING`` on with the
same variable.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SPANS_ENV = "TURNKIT_E2E_SPANS"


def span_record(span: Any) -> dict[str, Any]:
    """The fields of a finished span the tests read (ids as 32/16 hex digits)."""
    parent = span.parent
    return {"name": span.name, "trace_id": f"{span.context.trace_id:032x}",
            "span_id": f"{span.context.span_id:016x}",
            "parent_id": f"{parent.span_id:016x}" if parent is not None else None,
            "attributes": dict(span.attributes or {}), "status": span.status.status_code.name,
            "start": span.start_time, "pid": os.getpid()}


def install(path: str) -> None:
    """Export every span of this process (and of the processes it forks) to ``path``."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class FileExporter(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            data = "".join(json.dumps(span_record(s), default=str) + "\n" for s in spans)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, data.encode())
            finally:
                os.close(fd)
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter()))
    trace.set_tracer_provider(provider)


def read(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every complete span line written to ``path`` so far."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    complete, _, _partial = text.rpartition("\n")
    return [json.loads(line) for line in complete.splitlines() if line]
