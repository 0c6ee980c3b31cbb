"""The tree keeps its shape. Each top-level package is a room run by one kind of process or job (README,
"Where things are"), and imports only the rooms below it in ROOMS; no module imports itself back through
others (function-level imports included: a hidden cycle is still a cycle); no module outgrows 400 lines; the
rooms below the Django apps import no Django."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# room: the rooms its modules may import, besides its own. Who runs each room is in the README.
ROOMS: dict[str, set[str]] = {
    "scheduler": set(),
    "judgment": {"scheduler"},
    "inference": {"judgment", "scheduler"},
    "triage": {"inference", "judgment", "scheduler"},
    "worker": {"triage", "inference", "judgment", "scheduler"},
    "config": {"triage", "inference", "judgment", "scheduler"},
    "training": {"inference", "judgment", "scheduler"},
    "tools": {"config", "triage", "worker", "training", "inference", "judgment", "scheduler"},
}
# Plain Python: the vLLM plug-in and the GPU bench load them without Django installed.
WITHOUT_DJANGO = {"scheduler", "judgment", "inference"}
MAX_LINES = 400

# Inside the dispatch app, layers from the bottom: a module imports only its own layer and those below. Services
# write, selectors read (services may read through selectors, never the other way); the channels to other
# processes publish what they are given and read no rows; the entry points (HTTP, sockets, tasks, admin, the
# board feed, commands) sit on top.
TRIAGE_LAYERS: list[tuple[str, ...]] = [
    ("triage.models", "triage.call_status", "triage.decision_points", "triage.dispatch_priority", "triage.audit_actions", "triage.contracts", "triage.roles", "triage.redis_clients", "triage.metrics",
     "triage.api_tokens", "triage.migrations"),
    ("triage.streams", "triage.realtime"),
    ("triage.selectors",),
    ("triage.services",),
    ("triage.api", "triage.views", "triage.forms", "triage.consumers", "triage.board_feed", "triage.routing",
     "triage.tasks", "triage.admin", "triage.management", "triage.apps", "triage"),
]
# What a selector must not call: each writes (``SchedulerSettings.load`` creates the row it cannot find).
WRITES = {"save", "create", "get_or_create", "update_or_create", "update", "delete", "bulk_create", "bulk_update",
          "load", "select_for_update"}
# The production image ships the app, not the harness (.dockerignore).
NOT_IN_IMAGE = ("tools", "tests")


def _modules() -> dict[str, Path]:
    found = {}
    for package in ROOMS:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imported(name: str, path: Path) -> Iterator[str]:
    """Every module name an import statement in the file names (``from a import b`` names a and a.b)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else node.module or ""
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for target in _imported(name, path):
            parts = target.split(".")
            while parts and ".".join(parts) not in modules:
                parts.pop()
            if parts and ".".join(parts) != name:
                graph[name].add(".".join(parts))
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative). O(V + E)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
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


def _room(module: str) -> str:
    return module.split(".")[0]


def test_every_top_level_package_is_a_room():
    packages = {init.parent.name for init in ROOT.glob("*/__init__.py")} - {"tests"}
    assert packages == set(ROOMS)


def test_each_room_imports_only_the_rooms_below_it():
    outside = [f"{m} -> {t}" for m, targets in _graph().items() for t in targets
               if _room(t) != _room(m) and _room(t) not in ROOMS[_room(m)]]
    assert outside == []


def test_the_rooms_allow_no_cycle_between_them():
    assert _cycles({room: set(below) for room, below in ROOMS.items()}) == []


def test_no_module_imports_itself_back_through_others():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_rooms_below_the_django_apps_import_no_django():
    offenders = [name for name, path in _modules().items() if _room(name) in WITHOUT_DJANGO
                 and any(_room(t) in {"django", "rest_framework", "celery", "channels"} for t in _imported(name, path))]
    assert offenders == []


def _layer(module: str) -> int:
    """The dispatch-app layer of a module: its longest matching prefix."""
    matches = [(len(prefix), i) for i, layer in enumerate(TRIAGE_LAYERS) for prefix in layer
               if module == prefix or module.startswith(prefix + ".")]
    return max(matches)[1]


def test_inside_the_dispatch_app_each_layer_imports_only_its_own_and_those_below():
    upward = [f"{m} -> {t}" for m, targets in _graph().items() if _room(m) == "triage"
              for t in targets if _room(t) == "triage" and _layer(t) > _layer(m)]
    assert upward == []


def test_the_layer_rule_sees_a_selector_importing_a_service():
    assert _layer("triage.services.clients") > _layer("triage.selectors.clients") > _layer("triage.realtime")


def _called(path: Path) -> set[str]:
    return {node.func.attr for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}


def test_selectors_read_and_never_write():
    assert {name: sorted(_called(path) & WRITES) for name, path in _modules().items()
            if name.startswith("triage.selectors") and _called(path) & WRITES} == {}


def test_the_production_image_ships_neither_the_harness_nor_the_tests():
    ignored = {line.strip().rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert set(NOT_IN_IMAGE) <= ignored
    shipped = [f"{m} -> {t}" for m, targets in _graph().items() if _room(m) not in NOT_IN_IMAGE
               for t in targets if _room(t) in NOT_IN_IMAGE]
    assert shipped == []


def test_no_module_outgrows_400_lines():
    assert [f"{p.relative_to(ROOT)} {n}" for p in _modules().values()
            if (n := p.read_text().count("\n")) > MAX_LINES] == []
