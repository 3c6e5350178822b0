"""The package's import structure: no import cycles, short modules, a layered device core.

Every import counts, wherever it is written: at module level, inside a function, or under
``if TYPE_CHECKING:`` (a cycle of type-only imports still means two modules that cannot be
read apart). Imports are read with :mod:`ast`, never executed.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "vkcore"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

# The package's tiers, bottom up (docs/architecture.md). A module may import modules of
# its own tier or of lower ones; a pattern ``pkg.*`` is the package and everything in it.
TIERS: tuple[tuple[str, ...], ...] = (
    ("errors",),
    ("_vk", "_vk.*", "base.*"),  # the binding; the environment, cache files, per-device tables
    ("reference.*",),  # numpy references: no device, no shader
    ("spirv.*",),  # GLSL to SPIR-V, its cache, entry format, reflection; no device
    ("device.instance", "device.info", "device.placement", "device.logical"),
    ("device.context",),  # what every device object needs from its device
    ("device.memory.*",),  # buffers, host imports, mappings, holds, pools
    ("device.pipelines.*",),  # pipelines and the persisted pipeline cache
    ("device.submit.*",),  # command recording, the submission, staging transfers
    ("device.device", "device.__init__"),  # the Device facade
    ("compute.*",),  # Tensor, Program, Sequence: the public compute API
    ("kernels.*",),  # the kernel families, built on compute/
    ("__init__",),  # the public names
    ("testing", "tools.*", "__main__"),  # never imported by ``import vkcore``
)
# What ``import vkcore`` must not load (checked in a fresh interpreter).
TOOLS = ("vkcore.tools", "vkcore.testing", "vkcore.__main__")


def tier_of(name: str) -> int | None:
    for n, patterns in enumerate(TIERS):
        for pattern in patterns:
            if name == pattern or (
                pattern.endswith(".*") and (name + ".").startswith(pattern[:-1])
            ):
                return n
            if name == pattern + ".__init__" or (
                pattern.endswith(".*") and name == pattern[:-2] + ".__init__"
            ):
                return n
    return None


def module_name(path: Path) -> str:
    """``kernels.quant`` for vkcore/kernels/quant.py, ``kernels.__init__`` for its package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _resolve(base: str, known: dict[str, Path]) -> str | None:
    """The module ``base`` (dotted, relative to the package) names: a module, else the
    package's ``__init__``; None outside vkcore."""
    if base in known:
        return base
    init = f"{base}.__init__" if base else "__init__"
    return init if init in known else None


def from_base(node: ast.ImportFrom, package: list[str]) -> str | None:
    """The vkcore module (dotted, relative to the package) a ``from ... import`` reads
    from, for a module in ``package``; None outside vkcore."""
    if node.level:
        if node.level - 1 > len(package):
            return None  # above the package: not a vkcore module
        up = package[: len(package) - (node.level - 1)]
        return ".".join([*up, *(node.module.split(".") if node.module else [])])
    if node.module and (node.module == PACKAGE or node.module.startswith(PACKAGE + ".")):
        return node.module.removeprefix(PACKAGE).lstrip(".")
    return None


def imports_of(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Every vkcore module ``name`` imports, anywhere in the file."""
    package = name.split(".")[:-1]  # the package a relative import starts from
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    target = _resolve(alias.name.removeprefix(PACKAGE).lstrip("."), known)
                    if target is not None:
                        yield target
        elif isinstance(node, ast.ImportFrom):
            base = from_base(node, package)
            if base is None:
                continue
            # `from pkg import mod` imports the module mod; `from pkg import name` the package.
            for alias in node.names:
                sub = f"{base}.{alias.name}" if base else alias.name
                if sub in known or f"{sub}.__init__" in known:
                    target = _resolve(sub, known)
                else:
                    target = _resolve(base, known)
                if target is not None:
                    yield target


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imports_of(name, path, known)) - {name} for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected parts of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.add(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(frozenset(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def a_cycle_through(part: frozenset[str], graph: dict[str, set[str]]) -> list[str]:
    """One concrete cycle inside ``part``, as a path that ends where it starts."""
    start = min(part)
    paths = {start: [start]}
    frontier = [start]
    while frontier:  # breadth first: the shortest way back to ``start``
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & part):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    return [start]


def test_the_import_graph_is_read():
    """The parser sees the imports the package is known to have (so the checks below
    cannot pass on an empty graph)."""
    graph = import_graph()
    assert "device.device" in graph["__init__"] and "compute.tensor" in graph["__init__"]
    assert "base.config" in graph["kernels.common"]
    assert "spirv.entries" in graph["spirv.shaders"]
    assert "compute.tensor" in graph["kernels.storage"]


def test_no_import_cycles():
    graph = import_graph()
    found = cycles(graph)
    report = [
        f"{sorted(part)}: e.g. {' -> '.join(a_cycle_through(part, graph))}"
        for part in sorted(found, key=sorted)
    ]
    assert not found, "import cycles:\n" + "\n".join(report)


def test_every_module_has_a_tier():
    untiered = sorted(name for name in modules() if tier_of(name) is None)
    assert not untiered, f"modules in no tier of TIERS: {untiered}"


def test_imports_go_down_the_tiers():
    graph = import_graph()
    upward = []
    for name, targets in sorted(graph.items()):
        for target in sorted(targets):
            mine, theirs = tier_of(name), tier_of(target)
            if mine is not None and theirs is not None and theirs > mine:
                upward.append(f"{name} (tier {mine}) imports {target} (tier {theirs})")
    assert not upward, "imports against the tier order:\n" + "\n".join(upward)


def private_imports(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """``from mod import _name`` and ``alias._name`` where mod/alias is another vkcore
    module: a private name used outside the module that defines it."""
    tree = ast.parse(path.read_text(), str(path))
    aliases: set[str] = set()
    package = name.split(".")[:-1]
    for node in ast.walk(tree):
        base = from_base(node, package) if isinstance(node, ast.ImportFrom) else None
        if base is None:
            continue
        for alias in node.names:
            sub = f"{base}.{alias.name}" if base else alias.name
            if sub in known or f"{sub}.__init__" in known:
                aliases.add(alias.asname or alias.name)  # a module
            elif alias.name.startswith("_") and not alias.name.startswith("__"):
                yield f"{name}: from {base or PACKAGE} import {alias.name}"
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            yield f"{name}:{node.lineno}: {node.value.id}.{node.attr}"


def test_no_private_name_is_used_across_modules():
    known = modules()
    found = [hit for name, path in known.items() for hit in private_imports(name, path, known)]
    assert not found, "private names used outside their module:\n" + "\n".join(found)


def test_import_vkcore_loads_no_tool():
    """``import vkcore`` (and a kernel call's imports) load none of the tools."""
    code = (
        "import sys, vkcore, vkcore.kernels\n"
        f"bad = [m for m in sys.modules if m.startswith({TOOLS!r})]\n"
        "print(repr(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_checks_fail_on_what_they_forbid(tmp_path, monkeypatch):
    """Each rule above rejects a made-up package that breaks it."""
    graph = {"a": {"b"}, "b": {"a"}, "c": set()}
    assert cycles(graph) == [frozenset({"a", "b"})]
    assert tier_of("kernels.softmax.split") > tier_of("compute.tensor")
    assert tier_of("tools.cli.bench") > tier_of("__init__")
    fake = tmp_path / "m.py"
    fake.write_text(
        "from vkcore.kernels.common import _helper\nfrom vkcore.base import config\nconfig._x\n"
    )
    hits = list(private_imports("kernels.x", fake, {"base.config": fake, "kernels.common": fake}))
    assert len(hits) == 2, hits


def test_a_softmax_call_only_goes_down_the_tiers(device):
    """Every call made by ``vkcore.softmax(x)`` (numpy x; the first call on a device,
    then a repeat) goes from a module into one of its own tier or a lower one."""
    import numpy as np
    from call_walk import walk

    import vkcore

    x = np.linspace(-3, 3, 4096, dtype=np.float32).reshape(4, 1024)
    fresh = vkcore.Device(pipeline_cache=False)
    try:
        for _ in range(2):
            found = walk(lambda: vkcore.softmax(x, device=fresh))
            assert len(found.modules) > 10, found.visits  # the walk saw the layers
            assert found.climbs(tier_of) == [], found.climbs(tier_of)
    finally:
        fresh.close()
