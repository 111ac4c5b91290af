"""Code-shape rules a newcomer relies on: small modules and functions, pymilvus only in the core,
imports that go one way. Read from the source with `ast`, so it runs in milliseconds."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# repository folder -> installed package
PACKAGES = {
    "core": "kbflow.core",
    "ingest": "kbflow.ingest",
    "retrieval": "kbflow.retrieval",
    "evaluation": "kbflow.evaluation",
    "calibration": "kbflow.calibration",
    "insights": "kbflow.insights",
    "flows": "kbflow.flows",
}
# the three read-side concerns beside the lookup: the eval closure stands alone; fitting the
# gate (calibration) and the owner's view (insights) may use it, never each other
FORBIDDEN = {
    "kbflow.evaluation": {"kbflow.calibration", "kbflow.insights"},
    "kbflow.calibration": {"kbflow.insights"},
    "kbflow.insights": {"kbflow.calibration"},
    "kbflow.ingest": {"kbflow.evaluation", "kbflow.calibration", "kbflow.insights"},
    "kbflow.retrieval": {"kbflow.evaluation", "kbflow.calibration", "kbflow.insights"},
}
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _sources(folders: list[str]) -> dict[str, Path]:
    """Module name -> file, for every Python file outside migrations."""
    out: dict[str, Path] = {}
    for folder in folders:
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO / folder).with_suffix("")
            if "migrations" in rel.parts:
                continue
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([PACKAGES.get(folder, folder), *parts])] = path
    return out


def _long_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({length} lines)")
    return found


def _imports(path: Path, module: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                # a package's __init__ is the package itself: one level less to climb
                climb = node.level - (path.name == "__init__.py")
                base = module.split(".")[: len(module.split(".")) - climb]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names.update(f"{prefix}.{alias.name}" for alias in node.names)
    return names


def test_no_module_over_the_limit():
    too_long = [
        f"{path.relative_to(REPO)} ({n} lines)"
        for path in _sources([*PACKAGES, "bench"]).values()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines: {too_long}"


def test_no_function_over_the_limit():
    too_long = [f for path in _sources([*PACKAGES, "bench"]).values() for f in _long_functions(path)]
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines: {too_long}"


def test_pymilvus_only_in_the_core():
    outside = [
        str(path.relative_to(REPO))
        for name, path in _sources([*PACKAGES, "bench"]).items()
        if not name.startswith("kbflow.core")
        and any(i == "pymilvus" or i.startswith("pymilvus.") for i in _imports(path, name))
    ]
    assert not outside, f"pymilvus imported outside kbflow.core: {outside}"


def test_imports_go_one_way_without_cycles():
    modules = _sources(list(PACKAGES))

    def resolve(imported: str) -> str | None:
        """The most specific of our modules an import names (a submodule, not its package)."""
        owners = [m for m in modules if imported == m or imported.startswith(m + ".")]
        return max(owners, key=len) if owners else None

    graph = {
        name: {m for i in _imports(path, name) if (m := resolve(i)) and m != name}
        for name, path in modules.items()
    }
    layer = {"kbflow.core": 0, "kbflow.ingest": 1, "kbflow.retrieval": 1, "kbflow.evaluation": 1,
             "kbflow.calibration": 1, "kbflow.insights": 1, "kbflow.flows": 2}

    def package(module: str) -> str:
        return ".".join(module.split(".")[:2])

    upward = [
        f"{a} -> {b}" for a, deps in graph.items() for b in deps if layer[package(b)] > layer[package(a)]
    ]
    assert not upward, f"imports against flows -> ingest/retrieval/evaluation -> core: {upward}"
    across = [
        f"{a} -> {b}"
        for a, deps in graph.items()
        for b in deps
        if package(b) in FORBIDDEN.get(package(a), ())
    ]
    assert not across, f"imports across the read-side concerns (see FORBIDDEN): {across}"
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, [*stack, dep])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, f"import cycles: {cycles}"
