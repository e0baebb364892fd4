"""What stops a project's Celery broker from carrying turnkit's doorbells (system check
``turnkit.W008``, in :mod:`turnkit_django.checks`): a transport whose client library is missing,
or a ``filesystem://`` broker without its folders."""

from __future__ import annotations

import os
from typing import Any


def broker_problem(app: Any) -> str | None:
    """Why the app's broker transport cannot be loaded (a missing client library), or None."""
    try:
        with app.connection_for_write() as connection:
            connection.transport  # noqa: B018 - loads the transport and its client library
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


FILESYSTEM_HINT = (
    "kombu's filesystem:// transport needs existing folders, the same for every process: set "
    "CELERY_BROKER_TRANSPORT_OPTIONS = {'data_folder_in': '/srv/broker/queue', "
    "'data_folder_out': '/srv/broker/queue', 'control_folder': '/srv/broker/control', "
    "'processed_folder': '/srv/broker/processed'} and create them before starting any "
    "process (example_project/settings.py does both).")


def filesystem_problem(app: Any) -> str | None:
    """Why the app's ``filesystem://`` broker would fail or lose messages, or None.

    kombu creates none of its folders but the control folder (not its parents, so for it the
    parent must exist): a worker started without them crashes with
    ``FileNotFoundError: 'data_in'``. Every process reads the same settings, so messages written
    to ``data_folder_out`` are read from ``data_folder_in`` only when both name one folder.
    """
    options = app.conf.broker_transport_options or {}
    if not isinstance(options, dict):
        return None
    unset = [key for key in ("data_folder_in", "data_folder_out") if not options.get(key)]
    if unset:
        return (f"{' and '.join(unset)} {'is' if len(unset) == 1 else 'are'} not set in "
                "CELERY_BROKER_TRANSPORT_OPTIONS (kombu then uses 'data_in' and 'data_out' "
                "relative to each process's working directory)")
    if str(options["data_folder_in"]) != str(options["data_folder_out"]):
        return ("data_folder_in and data_folder_out must be the same folder: every process "
                "reads the same settings, so what one writes to data_folder_out no worker "
                "reads")
    folders = ["data_folder_in", "control_folder"]
    if options.get("store_processed"):
        folders.append("processed_folder")
    defaults = {"control_folder": "control", "processed_folder": "processed"}
    for key in folders:
        folder = str(options.get(key) or defaults[key])
        needed = os.path.dirname(os.path.abspath(folder)) if key == "control_folder" else folder
        if not os.path.isdir(needed):
            return f"the {key} {needed!r} does not exist (kombu does not create it)"
    return None


__all__ = ["FILESYSTEM_HINT", "broker_problem", "filesystem_problem"]
