"""Checks on the project's Celery app: a project app is loaded, it knows turnkit's tasks, its
broker can be loaded (W006-W008); beat reconciles and tasks reach our queue (deploy: W001, W002).
"""

from __future__ import annotations

import pathlib
import re
import sys
import types
from collections.abc import Callable, Iterator

import pytest
from celery import Celery
from celery.beat import ScheduleEntry
from django.core.checks import run_checks
from django.test import override_settings
from kombu import Queue

from tests.dispatch import DISPATCHER
from turnkit_django.celery import beat_schedule
from turnkit_django.checks import TAG, worker_task_modules

# Apps stay referenced for the whole session: Celery keys signal receivers by id(app), and a
# collected app's id could be reused by the next test's app.
_APPS: list[Celery] = []


@pytest.fixture
def make_app() -> Iterator[Callable[..., Celery]]:
    def make(main: str = "project", **conf: object) -> Celery:
        app = Celery(main, set_as_current=True)
        app.conf.update({"broker_url": "memory://", **conf})
        _APPS.append(app)
        return app

    yield make
    Celery("default", set_as_current=True)


def ids(*, deploy: bool = False) -> set[str]:
    return {m.id for m in run_checks(tags=[TAG], include_deployment_checks=deploy)}


def messages(check_id: str) -> list[str]:
    return [f"{m.msg} {m.hint}" for m in run_checks(tags=[TAG]) if m.id == check_id]


# --------------------------------------------------------------------------- W006


def test_no_project_app_means_submit_goes_through_celerys_default_app(make_app):
    make_app("default")  # what celery.current_app is when no project app was loaded
    (text,) = messages("turnkit.W006")
    assert "default app" in text and "__init__.py" in text and "celery_app" in text


def test_a_dispatcher_setting_silences_the_celery_checks(make_app, settings):
    make_app("default")
    settings.TURNKIT = {**settings.TURNKIT, "DISPATCHER": DISPATCHER}
    assert not {"turnkit.W006", "turnkit.W007", "turnkit.W008"} & ids()


# --------------------------------------------------------------------------- W007


def test_an_app_that_loads_no_turnkit_module_is_a_warning(make_app):
    make_app()
    (text,) = messages("turnkit.W007")
    assert "turnkit.run_turn" in text and "autodiscover_tasks()" in text


@pytest.mark.parametrize(
    "configure",
    [
        lambda app: app.autodiscover_tasks(),
        lambda app: app.autodiscover_tasks(lambda: ["tests.testapp", "turnkit_django"]),
        lambda app: app.autodiscover_tasks(["turnkit_django"], force=False),
        lambda app: app.autodiscover_tasks(["turnkit_django"], force=True),
        lambda app: app.autodiscover_tasks(force=True),
        lambda app: app.conf.update(imports=["turnkit_django.celery"]),
        lambda app: app.conf.update(include=("turnkit_django.tasks",)),
    ],
    ids=["autodiscover", "autodiscover-callable", "autodiscover-list", "autodiscover-forced",
         "autodiscover-forced-installed-apps", "imports-alias", "include"],
)
def test_an_app_whose_workers_import_our_tasks_passes(make_app, configure):
    app = make_app()
    configure(app)
    assert "turnkit.W007" not in ids()
    assert {"turnkit_django.tasks", "turnkit_django.celery"} & worker_task_modules(app)


def test_autodiscovery_of_other_packages_or_names_does_not_count(make_app):
    app = make_app()
    app.autodiscover_tasks(["tests.testapp"])
    app.autodiscover_tasks(related_name="jobs")
    assert worker_task_modules(app) == {"tests.testapp.tasks", "turnkit_django.jobs",
                                        "tests.testapp.jobs", *_installed("jobs")}
    assert "turnkit.W007" in ids()


def _installed(related: str) -> set[str]:
    from django.apps import apps

    return {f"{config.name}.{related}" for config in apps.get_app_configs()}


def test_a_project_module_that_re_exports_run_turn_counts(make_app, monkeypatch):
    from turnkit_django.tasks import run_turn

    module = types.ModuleType("project_tasks")
    module.run_turn = run_turn  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "project_tasks", module)
    make_app(imports=["project_tasks"])
    assert "turnkit.W007" not in ids()


# --------------------------------------------------------------------------- W008


def test_a_broker_whose_library_is_missing_is_a_warning(make_app):
    make_app(broker_url="mongodb://localhost/celery", imports=["turnkit_django.tasks"])
    (text,) = messages("turnkit.W008")
    assert "mongodb://" in text and "pymongo" in text


@pytest.mark.parametrize("missing", ["redis", "packaging"])
def test_redis_without_its_client_libraries_is_a_warning(make_app, monkeypatch, missing):
    """The issue's worker crash: `[celery]` without `[redis]` lacks `packaging` and `redis`."""
    for name in [missing, *(n for n in sys.modules if n.startswith(f"{missing}."))]:
        monkeypatch.setitem(sys.modules, name, None)  # `import <name>` then fails, as if missing
    monkeypatch.delitem(sys.modules, "kombu.transport.redis", raising=False)  # imported anew
    import kombu.transport

    monkeypatch.setattr(kombu.transport, "_transport_cache", {})  # as no test had loaded it
    make_app(broker_url="redis://localhost:6379/0", imports=["turnkit_django.tasks"])
    (text,) = messages("turnkit.W008")
    assert "The Celery broker (redis://) cannot be used" in text
    assert "pip install 'turnkit-django[redis]'" in text


def test_an_installed_broker_library_passes_without_connecting(make_app):
    make_app(broker_url="redis://127.0.0.1:1/0", imports=["turnkit_django.tasks"])  # no server
    assert not {"turnkit.W006", "turnkit.W007", "turnkit.W008"} & ids()


def filesystem_options(root, **changes: object) -> dict[str, object]:
    """The transport options example_project/settings.py uses, under ``root``."""
    options: dict[str, object] = {
        "data_folder_in": str(root / "queue"), "data_folder_out": str(root / "queue"),
        "control_folder": str(root / "control"), "processed_folder": str(root / "processed")}
    for folder in options.values():
        pathlib.Path(str(folder)).mkdir(parents=True, exist_ok=True)
    options.update(changes)  # folders named here are not created
    return options


def test_the_filesystem_broker_with_its_folders_passes(make_app, tmp_path):
    make_app(broker_url="filesystem://", imports=["turnkit_django.tasks"],
             broker_transport_options=filesystem_options(tmp_path))
    assert "turnkit.W008" not in ids()


def test_the_filesystem_broker_without_folders_is_a_warning(make_app):
    """The worker's crash: ``FileNotFoundError: [Errno 2] ... 'data_in'``."""
    make_app(broker_url="filesystem://", imports=["turnkit_django.tasks"])
    (text,) = messages("turnkit.W008")
    assert "filesystem://" in text and "data_folder_in" in text and "data_folder_out" in text
    assert "CELERY_BROKER_TRANSPORT_OPTIONS" in text


@pytest.mark.parametrize(("folder_in", "folder_out", "expected"), [
    ("absent", "absent", "{root}/absent' does not exist"),
    # Every process reads the same settings: what one writes to ``out`` nobody reads.
    ("in", "out", "must be the same folder"),
])
def test_filesystem_broker_folders_missing_or_apart_are_a_warning(make_app, tmp_path, folder_in,
                                                                  folder_out, expected):
    options = filesystem_options(tmp_path, data_folder_in=str(tmp_path / folder_in),
                                 data_folder_out=str(tmp_path / folder_out))
    make_app(broker_url="filesystem://", imports=["turnkit_django.tasks"],
             broker_transport_options=options)
    (text,) = messages("turnkit.W008")
    assert expected.format(root=tmp_path) in text


def test_a_processed_folder_is_needed_only_to_store_processed_messages(make_app, tmp_path):
    options = filesystem_options(tmp_path, processed_folder=str(tmp_path / "gone"))
    make_app(broker_url="filesystem://", imports=["turnkit_django.tasks"],
             broker_transport_options=options)
    assert "turnkit.W008" not in ids()
    options["store_processed"] = True
    (text,) = messages("turnkit.W008")
    assert "processed_folder" in text and str(tmp_path / "gone") in text


def test_a_control_folder_kombu_can_create_passes(make_app, tmp_path):
    """kombu creates the control folder when it binds a queue (``mkdir(exist_ok=True)``), so
    only a control folder whose parent is missing is a problem (celery.md's folder table)."""
    options = filesystem_options(tmp_path, control_folder=str(tmp_path / "not-yet"))
    make_app(broker_url="filesystem://", imports=["turnkit_django.tasks"],
             broker_transport_options=options)
    assert "turnkit.W008" not in ids()
    options["control_folder"] = str(tmp_path / "no-parent" / "control")
    (text,) = messages("turnkit.W008")
    assert "control_folder" in text and str(tmp_path / "no-parent") in text


# --------------------------------------------------------------------------- deploy


def test_missing_beat_entry_and_route_are_deploy_warnings(make_app):
    make_app(imports=["turnkit_django.tasks"])
    assert {"turnkit.W001", "turnkit.W002"} <= ids(deploy=True)
    assert not {"turnkit.W001", "turnkit.W002"} & ids()


@pytest.mark.parametrize(("schedule", "fragment"), [
    ({**beat_schedule(), "nightly": "myapp.tasks.nightly"}, "entry 'nightly' is a str, not a dict"),
    ({**beat_schedule(), "broken": None}, "entry 'broken' is a NoneType, not a dict"),
    ([beat_schedule()], "is a list, not a dict of entries"),
    ({"x": {"task": ["turnkit.reconcile"]}}, "has no turnkit.reconcile entry"),
], ids=["str-entry", "none-entry", "list", "unhashable-task"])
def test_a_beat_schedule_beat_cannot_read_is_w001_not_a_crash(make_app, schedule, fragment):
    """``entry.get("task")`` raised AttributeError out of ``manage.py check --deploy`` for an
    entry that is not a dict; beat itself cannot start on one, so reconcile never runs."""
    app = make_app(imports=["turnkit_django.tasks"])
    app.conf.beat_schedule = schedule
    app.conf.task_routes = {"turnkit.*": {"queue": "turnkit"}}
    (message,) = [m for m in run_checks(tags=[TAG], include_deployment_checks=True)
                  if m.id == "turnkit.W001"]
    assert fragment in message.msg and "beat_schedule()" in message.hint


def test_a_schedule_entry_object_counts_as_the_reconcile_entry(make_app):
    """Beat takes ``ScheduleEntry`` objects as entries as well as dicts."""
    app = make_app(imports=["turnkit_django.tasks"])
    entry = beat_schedule()["turnkit-reconcile"]
    app.conf.beat_schedule = {"reconcile": ScheduleEntry(name="reconcile", **entry, app=app)}
    assert "turnkit.W001" not in ids(deploy=True)


def test_recommended_configuration_passes(make_app):
    app = make_app()
    app.autodiscover_tasks()
    app.conf.beat_schedule = beat_schedule()
    app.conf.task_routes = {"turnkit.*": {"queue": "turnkit"}}
    assert not {m for m in ids(deploy=True) if m.startswith("turnkit.W00")} - {"turnkit.W003"}


def test_routes_to_another_queue_follow_the_queue_setting(make_app):
    app = make_app(imports=["turnkit_django.tasks"])
    app.conf.beat_schedule = beat_schedule()
    app.conf.task_routes = {"turnkit.*": {"queue": "agents"}}
    assert "turnkit.W002" in ids(deploy=True)
    with override_settings(TURNKIT={"QUEUE": "agents"}):
        assert "turnkit.W002" not in ids(deploy=True)


@pytest.mark.parametrize("routes", [
    [{"turnkit.*": {"queue": "turnkit"}}],
    ({"myapp.*": {"queue": "other"}}, {"turnkit.*": {"queue": "turnkit"}}),
    [{"turnkit.reconcile": {"queue": "turnkit"}, "turnkit.maintain": {"queue": "turnkit"}}],
])
def test_routes_given_as_a_list_of_dicts_are_read(make_app, routes):
    """Celery accepts a list or tuple of routers: dicts, callables, import paths."""
    app = make_app(imports=["turnkit_django.tasks"])
    app.conf.beat_schedule = beat_schedule()
    app.conf.task_routes = routes
    assert "turnkit.W002" not in ids(deploy=True)


def test_a_list_of_dicts_routing_elsewhere_is_a_warning(make_app):
    app = make_app(imports=["turnkit_django.tasks"])
    app.conf.beat_schedule = beat_schedule()
    app.conf.task_routes = [{"turnkit.*": {"queue": "agents"}}]
    assert "turnkit.W002" in ids(deploy=True)


@pytest.mark.parametrize("router", [lambda *args, **kwargs: None, "myproject.routers.route"])
def test_routers_that_cannot_be_read_give_no_warning(make_app, router):
    app = make_app(imports=["turnkit_django.tasks"])
    app.conf.beat_schedule = beat_schedule()
    app.conf.task_routes = [{"myapp.*": {"queue": "other"}}, router]
    assert "turnkit.W002" not in ids(deploy=True)
    app.conf.task_routes = router
    assert "turnkit.W002" not in ids(deploy=True)


@pytest.mark.parametrize("routes", [
    {"*": {"queue": "turnkit"}},
    {"turnkit.r*": "turnkit", "turnkit.m*": "turnkit"},
    {re.compile(r"^turnkit\."): {"queue": "turnkit"}},
    {"turnkit.*": {"queue": Queue("turnkit")}},
], ids=["catch-all-glob", "narrower-globs", "regex", "queue-object"])
def test_routes_celery_matches_by_pattern_or_queue_object_count(make_app, routes):
    """Celery matches dict keys as globs or compiled regexes, and takes a kombu Queue as a
    route's queue: each of these sends turnkit's tasks to QUEUE, so W002 must stay silent."""
    app = make_app(imports=["turnkit_django.tasks"])
    app.conf.beat_schedule = beat_schedule()
    app.conf.task_routes = routes
    assert "turnkit.W002" not in ids(deploy=True)
    app.conf.task_routes = {key: {"queue": Queue("agents")} for key in routes}
    assert "turnkit.W002" in ids(deploy=True)
