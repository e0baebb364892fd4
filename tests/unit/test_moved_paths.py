"""The import paths of modules that moved into packages keep working (docs/architecture.md)."""

from __future__ import annotations

import importlib
import pickle
import subprocess
import sys

import pytest

from turnkit_django.base.moved import MOVED


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_path_imports_the_same_module_as_the_new_one(old: str, new: str) -> None:
    module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__name__ == new
    assert module.__spec__ is not None and module.__spec__.name == new


def test_from_the_package_import_an_old_name_works() -> None:
    from turnkit_django import handles, tracing

    assert handles is importlib.import_module("turnkit_django.api.handles")
    assert tracing is importlib.import_module("turnkit_django.observability.tracing")


def test_an_old_path_imported_first_keeps_the_module_named_by_its_new_path() -> None:
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'tests.settings';"
        "django.setup();"
        "from turnkit_django.limits import MAX_COST;"
        "import turnkit_django.store.limits as new, turnkit_django.limits as old;"
        "assert old is new and new.__spec__.name == 'turnkit_django.store.limits', new.__spec__;"
        "print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == "ok", done.stderr


def test_a_function_pickled_by_its_old_module_path_loads() -> None:
    from turnkit_django.terminal import for_terminal

    assert pickle.loads(pickle.dumps(for_terminal))  # noqa: S301  (our own bytes) is for_terminal


def test_a_module_that_never_existed_is_still_an_import_error() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("turnkit_django.nothing_here")
