"""The package's import structure: no import cycles, short modules, a layered device core.

Every import counts, wherever it is written: at module level, inside a function, or under
``if TYPE_CHECKING:`` (a cycle of type-only imports still means two modules that cannot be
read apart). Imports are read with :mod:`ast`, never executed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "vkcore"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE
MAX_LINES = 400

# The device core, bottom up: a module may import modules of its own layer or of lower
# ones, and no vkcore module outside this list. The public compute API (program, reflect)
# and the kernels sit above it and are not listed.
LAYERS: tuple[frozenset[str], ...] = (
    # The raw binding, errors, the environment, atomic cache files, the placement policy
    # (pure data) and per-device state tables.
    frozenset({"vkapi", "errors", "config", "cachefs", "placement", "per_device"}),
    frozenset({"glslang", "spirv_entry"}),  # the compiler; the cache-entry format
    frozenset({"spirv"}),  # GLSL to SPIR-V, shipped or cached on disk; no device
    frozenset({"instance"}),  # VkInstance, validation messages, extension choices
    frozenset({"device_info"}),  # DeviceInfo: what a physical device offers; choosing one
    frozenset({"logical_device"}),  # creating the VkDevice and its queue
    frozenset({"context"}),  # DeviceContext: what every device object needs from its device
    frozenset({"mapping", "holds"}),  # mapped memory ranges; buffers sequences hold
    frozenset({"buffer"}),  # Buffer: one VkBuffer and its memory
    frozenset({"host_buffer"}),  # HostBuffer: numpy memory imported as a VkBuffer
    frozenset({"pipeline_cache_file"}),  # the cache file's key and format
    frozenset({"pipeline_cache"}),  # the live VkPipelineCache and its persistence
    frozenset({"pipeline"}),  # Pipeline: module, layouts, pipeline
    frozenset({"commands"}),  # Dispatch and what goes into a command buffer
    frozenset({"recording"}),  # which sequence records a thread's submissions
    frozenset({"submitter"}),  # Submitter: submission, fence, timestamps, kept recordings
    frozenset({"transfers"}),  # staging copies to and from device-local buffers
    frozenset({"device"}),  # Device: the facade that owns all of the above
    frozenset({"tensor", "pools"}),  # Tensor and asarray; the per-device buffer pools
)


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
            if node.level:
                if node.level - 1 > len(package):
                    continue  # above the package: not a vkcore module
                up = package[: len(package) - (node.level - 1)]
                base = ".".join([*up, *(node.module.split(".") if node.module else [])])
            elif node.module and (node.module == PACKAGE or node.module.startswith(PACKAGE + ".")):
                base = node.module.removeprefix(PACKAGE).lstrip(".")
            else:
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
    assert "device" in graph["__init__"] and "tensor" in graph["__init__"]
    assert "config" in graph["kernels._common"]  # `from .. import config`
    assert "spirv_entry" in graph["spirv"]  # `from . import cachefs, config, glslang, ...`
    assert "tensor" in graph["kernels.storage"]  # `from ..tensor import Tensor`


def test_no_import_cycles():
    graph = import_graph()
    found = cycles(graph)
    report = [
        f"{sorted(part)}: e.g. {' -> '.join(a_cycle_through(part, graph))}"
        for part in sorted(found, key=sorted)
    ]
    assert not found, "import cycles:\n" + "\n".join(report)


def test_modules_are_short():
    known = modules()
    lengths = {name: len(path.read_text().splitlines()) for name, path in known.items()}
    over = {name: n for name, n in lengths.items() if n > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines: {over}"


def test_device_core_layers():
    graph = import_graph()
    layer_of = {name: n for n, layer in enumerate(LAYERS) for name in layer}
    missing = set(layer_of) - graph.keys()
    assert not missing, f"LAYERS names modules that do not exist: {sorted(missing)}"
    upward = []
    for name, n in layer_of.items():
        for target in sorted(graph[name]):
            if target not in layer_of:
                upward.append(f"{name} imports {target}, which is not in LAYERS")
            elif layer_of[target] > n:
                upward.append(f"{name} (layer {n}) imports {target} (layer {layer_of[target]})")
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)
