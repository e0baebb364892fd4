"""The architecture holds: layers, no import cycles, one writer, a vocabulary for reads.

docs/architecture.md explains the rules; ``make lint`` runs the import contract (import-linter,
configured in pyproject.toml) and ruff's PLC0415 (no imports inside functions). These tests
prove the same from the source, so a change that breaks a rule fails the unit tier too.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "turnkit_django"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

#: ORM calls that write rows, wherever they are called.
WRITES = frozenset({"save", "delete", "bulk_create", "bulk_update", "get_or_create",
                    "update_or_create"})
#: ORM calls that write rows when called on a manager or a queryset.
QUERYSET_WRITES = frozenset({"create", "update"})
QUERYSET_METHODS = frozenset({"objects", "filter", "exclude", "all", "select_related",
                              "select_for_update", "order_by", "values", "annotate", "using"})
MAX_LINES = 400


def modules(*, exclude: tuple[str, ...] = ()) -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("migrations/") or relative.startswith(exclude):
            continue
        yield relative, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _chain(node: ast.AST) -> list[str]:
    """The names along an attribute/call chain: ``Turn.objects.filter(x).update`` gives
    ``["Turn", "objects", "filter", "update"]``."""
    names: list[str] = []
    while True:
        if isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Attribute):
            names.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Name):
            names.append(node.id)
            return names[::-1]
        else:
            return names[::-1]


def orm_writes(tree: ast.Module) -> list[str]:
    """Calls in ``tree`` that write rows through the ORM (or raw SQL that modifies rows)."""
    querysets: set[str] = set()  # local names bound to querysets
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            if QUERYSET_METHODS & set(_chain(node.value)):
                querysets.update(t.id for t in node.targets if isinstance(t, ast.Name))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            chain = _chain(node.func)
            method = chain[-1] if chain else ""
            receiver = set(chain[:-1])
            if method in WRITES or (method in QUERYSET_WRITES and (
                    QUERYSET_METHODS & receiver or receiver & querysets)):
                found.append(f"line {node.lineno}: {'.'.join(chain)}()")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.lstrip().startswith(("INSERT ", "UPDATE ", "DELETE ")):
                found.append(f"line {node.lineno}: raw SQL {node.value[:30]!r}")
    return found


def test_the_write_detector_finds_writes_it_is_meant_to_find():
    """The control: the detector below would notice a write outside the store."""
    sample = ast.parse(
        "Turn.objects.filter(pk=1).update(status='x')\n"
        "row.save()\n"
        "rows = Message.objects.filter(turn_id=1)\n"
        "rows.update(kind='text')\n"
        "cursor.execute('UPDATE turnkit_turn SET x = 1')\n"
        "fields.update(extra)\n"  # a dict: not a write
    )
    assert len(orm_writes(sample)) == 4


def test_only_the_store_writes_turnkit_rows():
    offenders = {name: found for name, tree in modules(exclude=("store/",))
                 if (found := orm_writes(tree))}
    assert offenders == {}


def transaction_owners(tree: ast.Module) -> list[str]:
    """Code (not text) that opens a transaction or takes a lock: ``transaction.atomic`` (called
    or as a decorator), ``atomic`` imported from Django, a call of ``lock_tree``, and
    ``select_for_update``. A store object's own ``fenced.atomic()`` is the store's."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and (
                node.attr == "select_for_update" or (node.attr == "atomic" and isinstance(
                    node.value, ast.Name) and node.value.id == "transaction")):
            found.append(f"line {node.lineno}: {'.'.join(_chain(node))}")
        elif isinstance(node, ast.Call) and _chain(node.func)[-1:] == ["lock_tree"]:
            found.append(f"line {node.lineno}: {'.'.join(_chain(node.func))}()")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("django.db") \
                and any(alias.name == "atomic" for alias in node.names):
            found.append(f"line {node.lineno}: from {node.module} import atomic")
    return found


def test_only_the_store_opens_transactions_and_takes_locks():
    """Each change that needs a transaction or a lock is one store function (issue 36); the
    services and the runtime only name ``transaction.atomic()`` in text (docstrings, errors)."""
    sample = ast.parse(
        '"""inside transaction.atomic(), lock_tree(root) is taken"""\n'
        "with transaction.atomic():\n    lock_tree(root_id)\n"
        "@transaction.atomic\ndef f(): store.lock_tree(x)\n"
        "from django.db.transaction import atomic\n"
        "Turn.objects.select_for_update().get(pk=1)\n"
        "with ctx.fenced.atomic():\n    pass\n")
    assert len(transaction_owners(sample)) == 6  # the control: text and fenced.atomic() pass
    offenders = {name: found for name, tree in modules(exclude=("store/",))
                 if (found := transaction_owners(tree))}
    assert offenders == {}


def message_changes(tree: ast.Module) -> list[str]:
    """Calls that change or delete stored messages (a chain through ``Message``, or a name
    bound to one), and raw SQL that does."""
    bound = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
             and isinstance(node.value, ast.Call) and "Message" in _chain(node.value)
             for t in node.targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            chain = _chain(node.func)
            if chain and chain[-1] in ("update", "delete", "bulk_update") and (
                    "Message" in chain or bound & set(chain[:-1])):
                found.append(f"line {node.lineno}: {'.'.join(chain)}()")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = " ".join(node.value.split()).lower()
            if "update turnkit_message" in text or "delete from turnkit_message" in text:
                found.append(f"line {node.lineno}: raw SQL {node.value[:30]!r}")
    return found


def test_stored_messages_are_never_changed_or_deleted_one_by_one():
    """A message, once committed, is final: ``store.seen`` keeps transcript prefixes per
    process on that promise. History goes only with its whole conversation (retention)."""
    sample = ast.parse("Message.objects.filter(pk=1).update(kind='x')\n"
                       "rows = Message.objects.filter(turn_id=1)\nrows.delete()\n"
                       "Conversation.objects.filter(pk__in=ids).delete()\n")
    assert len(message_changes(sample)) == 2  # the control: the detector sees both
    offenders = {name: found for name, tree in modules() if (found := message_changes(tree))}
    assert offenders == {}


def status_filters(tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                node.func.attr in ("filter", "exclude", "get")):
            for keyword in node.keywords:
                if keyword.arg and (keyword.arg == "status" or keyword.arg.endswith(
                        ("__status", "status__in")) or "__status__" in keyword.arg):
                    found.append(f"line {node.lineno}: {node.func.attr}({keyword.arg}=...)")
    return found


def test_reads_by_status_use_the_queryset_vocabulary():
    """Status filters are written once, in querysets.py (the store's compare-and-set aside)."""
    offenders = {name: found for name, tree in modules(exclude=("store/", "models/querysets.py"))
                 if (found := status_filters(tree))}
    assert offenders == {}


def test_no_module_is_longer_than_400_lines():
    long = {path.relative_to(PACKAGE).as_posix(): n for path in PACKAGE.rglob("*.py")
            if "migrations" not in path.parts
            and (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph.modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(
                        graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("turnkit_django", exclude_type_checking_imports=True,
                             cache_dir=None)  # a stale cache would hide a new cycle


def test_there_is_no_import_cycle_counting_imports_inside_functions(graph):
    # The graph counts imports made inside functions (the allowed ones, such as the app
    # config's), so a cycle hidden in a function would show here.
    assert "turnkit_django.api.handles" in graph.find_modules_directly_imported_by(
        "turnkit_django.apps")
    assert _cycles(graph) == []


def test_there_is_no_import_cycle_counting_type_checking_imports():
    # Annotations name types through the layers too (a tool's ``ctx.turn`` is a TurnView
    # protocol beside ToolContext, not the api's TurnHandle), so even imports under
    # ``if TYPE_CHECKING:`` make no cycle.
    full = grimp.build_graph("turnkit_django", exclude_type_checking_imports=False,
                             cache_dir=None)
    assert _cycles(full) == []


def test_the_cycle_finder_sees_a_cycle():
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.c")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    assert _cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_the_import_contract_holds():
    result = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=ROOT, capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_upward_import_breaks_the_import_contract(tmp_path):
    """The contract is not vacuous: the store importing the services layer fails it."""
    shutil.copytree(PACKAGE, tmp_path / "turnkit_django",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with (tmp_path / "turnkit_django" / "store" / "locks.py").open("a") as module:
        module.write("\nfrom ..services import drain  # an upward import\n")
    result = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tmp_path,
                            capture_output=True, text=True, check=False,
                            env={"PYTHONPATH": str(tmp_path), "PATH": ""})
    assert result.returncode == 1, result.stdout + result.stderr
    assert "turnkit_django.store is not allowed to import turnkit_django.services" in (
        result.stdout)


def test_the_runtime_importing_the_orm_breaks_the_import_contract(tmp_path):
    """The runtime reaches the database through the store: a runtime module importing
    ``django.db`` or the models (outside ``if TYPE_CHECKING:``) fails it."""
    shutil.copytree(PACKAGE, tmp_path / "turnkit_django",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with (tmp_path / "turnkit_django" / "runtime" / "sources.py").open("a") as module:
        module.write("\nfrom django.db import transaction  # the ORM in the runtime\n"
                     "from ..models import Turn  # noqa\n")
    result = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tmp_path,
                            capture_output=True, text=True, check=False,
                            env={"PYTHONPATH": str(tmp_path), "PATH": ""})
    assert result.returncode == 1, result.stdout + result.stderr
    assert "turnkit_django.runtime.sources -> django.db" in result.stdout
    assert "turnkit_django.runtime.sources -> turnkit_django.models" in result.stdout
