"""Each policy lives in one place (docs/architecture.md, "Where each policy lives"): the
other modules call it instead of restating it. Read from the source with ast."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "vkcore"


def sources(*folders: str) -> Iterator[tuple[str, ast.AST]]:
    for folder in folders:
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            yield str(path.relative_to(PACKAGE)), ast.parse(path.read_text(), str(path))


def attribute_uses(tree: ast.AST, attr: str) -> list[int]:
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == attr]


def string_uses(tree: ast.AST, text: str) -> list[int]:
    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and text in n.value
    ]


def test_kernels_never_touch_the_submitter():
    """Kernels submit through Device.run / copy / recording only."""
    found = {
        name: lines
        for name, tree in sources("kernels")
        if (lines := attribute_uses(tree, "submitter"))
    }
    assert not found, found


def test_kernels_read_the_binding_limit_in_one_place():
    found = {
        name: lines
        for name, tree in sources("kernels")
        if name != "kernels/storage.py"
        and (lines := attribute_uses(tree, "max_storage_buffer_range"))
    }
    assert not found, f"kernels/storage.py's binding_limit is the rule: {found}"


def test_the_device_a_call_runs_on_is_decided_in_one_place():
    found = {
        name: lines
        for name, tree in sources("kernels", "compute")
        if name != "compute/tensor.py"
        and (lines := string_uses(tree, "own device") + string_uses(tree, "on another device"))
    }
    assert not found, f"compute/tensor.py's device_for / check_on_device say it: {found}"


def test_warn_once_per_folder_is_written_once():
    found = {
        name
        for name, tree in sources(".")
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and node.id == "_warned_folders"
        if name != "base/cachefs.py"
    }
    assert not found, found


def test_the_checks_find_what_they_look_for():
    tree = ast.parse("dev.submitter.run(x)\ns = 'the own device'\n")
    assert attribute_uses(tree, "submitter") == [1]
    assert string_uses(tree, "own device") == [2]
