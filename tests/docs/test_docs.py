"""The README and the pages of docs/ say only what is true of this checkout.

- Every fenced code block has a language, and runs or is checked as written: ``python``
  blocks run in a fresh process (a block that defines ``test_`` functions runs under
  pytest with the vkcore.testing plugin); every command of a ``sh`` block, and every
  ``$ `` line of a ``console`` block, names something that exists (a Makefile target, a
  ``vkcore`` subcommand and its options, a script, a pytest option of the plugin), and
  the cheap, harmless ones are run. ``text`` blocks are output.
- Commands and names in inline code are checked the same way (``make X``, ``vkcore X
  --opt``, ``python examples/x.py``), and so are repository paths and ``vkcore.*`` names.
- The README is at most 200 lines and links only to docs pages that exist; every docs
  page is linked from it; every link in docs/ reaches an existing file and heading.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
ALL_PAGES = [*PAGES, REPO / "cache" / "README.md"]
README_MAX_LINES = 200
LANGUAGES = {"python", "sh", "console", "text"}
# `vkcore` commands that are quick and touch nothing outside the test's own folders.
CHEAP_VKCORE = [("cache", "ls"), ("cache", "verify"), ("cache", "clear"), ("ci-env",), ("info",)]

FENCE = re.compile(
    r"^(?P<indent> *)```(?P<lang>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
INLINE = re.compile(r"`([^`]+)`")


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def blocks(page: Path) -> list[tuple[int, str, str]]:
    """(line, language, body) of each fenced block, its body dedented."""
    text = page.read_text()
    return [
        (text.count("\n", 0, m.start()) + 1, m["lang"].strip(), textwrap.dedent(m["body"]))
        for m in FENCE.finditer(text)
    ]


def prose(page: Path) -> str:
    """The page without its fenced blocks."""
    return FENCE.sub("", page.read_text())


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation other than - and _ dropped,
    spaces to hyphens."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(m[1]) for m in re.finditer(r"^#+ (.+)$", prose(page), flags=re.M)}


def env(cache: Path) -> dict[str, str]:
    """This checkout's vkcore first on the path, validation on, caches in ``cache``."""
    e = dict(os.environ, VKCORE_VALIDATION="1", VKCORE_CACHE_DIR=str(cache))
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), e.get("PYTHONPATH")]))
    return e


def run(args: list[str], cwd: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, capture_output=True, text=True, timeout=180, env=env(cache), cwd=cwd
    )


PYTHON_BLOCKS = [
    (p, line, body) for p in PAGES for line, lang, body in blocks(p) if lang == "python"
]
SHELL_BLOCKS = [
    (p, line, lang, body)
    for p in PAGES
    for line, lang, body in blocks(p)
    if lang in ("sh", "console")
]


def block_id(page: Path, line: int) -> str:
    return f"{rel(page)}:{line}"


# --- the README's shape and the links -------------------------------------------------


def test_the_readme_is_short():
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines, at most {README_MAX_LINES}"


def test_the_readme_links_only_to_docs_pages_that_exist():
    for target in LINK.findall(prose(README)):
        path = target.split("#")[0]
        resolved = (REPO / path).resolve()
        assert resolved == DOCS or (resolved.parent == DOCS and resolved.suffix == ".md"), (
            f"README.md links to {target}, not to a page of docs/"
        )
        assert resolved.exists(), f"README.md links to {target}, which does not exist"


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(REPO / t.split("#")[0]).resolve() for t in LINK.findall(prose(README))}
    missing = [rel(p) for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked]
    assert not missing, f"pages no README link reaches: {missing}"


@pytest.mark.parametrize("page", ALL_PAGES, ids=rel)
def test_every_link_reaches_a_file_and_heading(page):
    for target in LINK.findall(prose(page)):
        if re.match(r"[a-z]+:", target):
            continue  # an outside address
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.exists(), f"{rel(page)} links to {target}: no such file"
        if anchor:
            assert resolved.suffix == ".md", f"{rel(page)}: an anchor into {target}"
            assert anchor in anchors(resolved), f"{rel(page)} links to {target}: no such heading"


# --- code blocks ------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_block_names_its_language(page):
    for line, lang, _ in blocks(page):
        assert lang in LANGUAGES, (
            f"{rel(page)}:{line}: a code block in {lang!r}, not one of {LANGUAGES}"
        )


def test_the_readme_has_a_python_example():
    assert any(lang == "python" for _, lang, _ in blocks(README))


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One cache folder for every block, so a shader is compiled once for all of them."""
    return tmp_path_factory.mktemp("docs")


@pytest.mark.parametrize(
    ("page", "line", "body"), PYTHON_BLOCKS, ids=[block_id(p, n) for p, n, _ in PYTHON_BLOCKS]
)
def test_python_block_runs_as_written(page, line, body, shared, tmp_path):
    if re.search(r"^def test_", body, flags=re.M):
        (tmp_path / "test_block.py").write_text(body)
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "vkcore.testing",
            "-p",
            "no:cacheprovider",
        ]
        out = run([*cmd, "test_block.py"], tmp_path, shared)
        assert out.returncode == 0 and " passed" in out.stdout, out.stdout + out.stderr
    else:
        out = run([sys.executable, "-c", body], tmp_path, shared)
        assert out.returncode == 0, out.stderr


def test_the_seed_values_in_the_comment_are_what_softmax_returns(device):
    import vkcore

    first = next(body for _, lang, body in blocks(README) if lang == "python")
    comment = re.search(r"# -> \[([^\]]*)\]", first)
    assert comment, "the README's first example shows its result in a '# -> [...]' comment"
    shown = np.array([float(v) for v in comment.group(1).split(",")], np.float32)
    got = vkcore.softmax(np.array([1000, 1001, 1002], np.float32), device=device)
    np.testing.assert_array_equal(got, shown)


# --- commands -----------------------------------------------------------------------------


@functools.cache
def make_targets() -> frozenset[str]:
    text = (REPO / "Makefile").read_text()
    return frozenset(re.findall(r"^([A-Za-z0-9_.-]+):(?!=)", text, flags=re.M))


_CLI_TREE = r"""
import argparse, json, runpy, sys

def tree(parser):
    node = {"options": [], "commands": {}}
    for action in parser._actions:
        node["options"] += action.option_strings
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                node["commands"][name] = tree(sub)
    return node

def dump(parser, *args, **kwargs):
    print(json.dumps(tree(parser)))
    sys.exit(0)

argparse.ArgumentParser.parse_args = dump
sys.argv = ["vkcore"]
runpy.run_module("vkcore", run_name="__main__")
"""


@functools.cache
def vkcore_cli() -> dict:
    """The parser tree ``python -m vkcore`` builds: subcommands and their options."""
    with tempfile.TemporaryDirectory() as tmp:
        out = run([sys.executable, "-c", _CLI_TREE], Path(tmp), Path(tmp, "cache"))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@functools.cache
def pytest_help(disable: str | None = None) -> str:
    """``pytest --help`` outside the repository (no conftest), with the plugin named or,
    given ``disable``, with ``-p no:<disable>``."""
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
    args += ["-p", f"no:{disable}"] if disable else ["-p", "vkcore.testing"]
    with tempfile.TemporaryDirectory() as tmp:
        out = run([*args, "--help"], Path(tmp), Path(tmp, "cache"))
    assert out.returncode == 0, out.stderr
    return out.stdout


def words(command: str) -> list[str]:
    """The command's words: leading NAME=value settings dropped, cut at a redirection or
    pipe, brackets of optional parts removed."""
    tokens = shlex.split(command, comments=True)
    while tokens and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", tokens[0]):
        tokens.pop(0)
    for i, tok in enumerate(tokens):
        if tok in (">", ">>", "|", "&&", ";", "<"):
            tokens = tokens[:i]
            break
    return [t.strip("[]") for t in tokens if t.strip("[]") not in ("", "...")]


def check_vkcore(args: list[str], where: str) -> tuple[str, ...]:
    """The subcommand path of ``vkcore ARGS`` after checking it and its options exist."""
    node, path = vkcore_cli(), []
    options = set(node["options"])
    after_option = False
    for arg in args:
        if arg.startswith("-"):
            opt = arg.split("=")[0]
            assert opt in options, f"{where}: vkcore {' '.join(path)} has no option {opt}"
            after_option = "=" not in arg
            continue
        names = arg.split("|")  # `vkcore cache ls|verify|clear`
        if all(n in node["commands"] for n in names):
            path.append(arg)
            node = node["commands"][names[0]]
            options |= set(node["options"])
        elif node["commands"] and not after_option and not arg.isupper():  # not a PLACEHOLDER
            pytest.fail(f"{where}: vkcore {' '.join(path)} has no command {arg!r}")
        after_option = False
    return tuple(path)


def check_command(command: str, where: str) -> list[str] | None:
    """Check that what the command names exists; return its arguments when running it
    is cheap and harmless, else None."""
    args = words(command)
    if not args:
        return None
    head, rest = args[0], args[1:]
    if head == "make":
        for target in (a for a in rest if not a.startswith("-")):
            assert target in make_targets(), f"{where}: the Makefile has no target {target!r}"
    elif head == "vkcore":
        path = check_vkcore(rest, where)
        if any(path == cheap[: len(path)] and len(path) == len(cheap) for cheap in CHEAP_VKCORE):
            return rest
    elif head in ("python", "python3"):
        if rest[:1] == ["-m"]:
            assert importlib.util.find_spec(rest[1]) is not None, f"{where}: no module {rest[1]}"
        else:
            assert (REPO / rest[0]).is_file(), f"{where}: no script {rest[0]}"
    elif head == "bash":
        assert (REPO / rest[0]).is_file(), f"{where}: no script {rest[0]}"
    elif head == "pip":
        wheel = [a for a in rest if a.endswith(".whl")]
        version = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)
        for name in wheel:
            assert name == f"dist/vkcore-{version[1]}-py3-none-any.whl", f"{where}: {name}"
    elif head == "pytest":
        for i, arg in enumerate(rest):
            if arg == "-p" and rest[i + 1].startswith("no:"):
                plugin = rest[i + 1][3:]
                assert "--vk-device" not in pytest_help(plugin), (
                    f"{where}: -p no:{plugin} keeps the plugin"
                )
            elif arg == "-p":
                assert importlib.util.find_spec(rest[i + 1]) is not None, f"{where}: {rest[i + 1]}"
            elif arg.startswith("--"):
                assert arg in pytest_help(), f"{where}: pytest has no option {arg}"
    else:
        pytest.fail(f"{where}: a command this test does not know how to check: {command!r}")
    return None


def commands(lang: str, body: str) -> list[tuple[int, str]]:
    """(line offset, command) of a shell block: every line of ``sh``, the ``$ `` lines of
    ``console``."""
    found = []
    for i, line in enumerate(body.splitlines()):
        if lang == "console":
            if line.startswith("$ "):
                found.append((i, line[2:]))
        elif line.strip() and not line.lstrip().startswith("#"):
            found.append((i, line))
    return found


@pytest.mark.parametrize(
    ("page", "line", "lang", "body"),
    SHELL_BLOCKS,
    ids=[block_id(p, n) for p, n, _, _ in SHELL_BLOCKS],
)
def test_shell_block_names_what_exists(page, line, lang, body, tmp_path):
    assert commands(lang, body), f"{block_id(page, line)}: a shell block without commands"
    for offset, command in commands(lang, body):
        where = block_id(page, line + 1 + offset)
        cheap = check_command(command, where)
        if cheap is not None:
            out = run([sys.executable, "-m", "vkcore", *cheap], tmp_path, tmp_path / "cache")
            assert out.returncode == 0, f"{where}: {command!r} failed:\n{out.stdout}{out.stderr}"


# --- inline code: commands, paths, names -------------------------------------------------

# Paths the build makes (setup.py) or a command writes: named in the docs, absent here.
GENERATED = ("vkcore/spirv/", "vkcore/shaders/")


def inline_spans(page: Path) -> list[str]:
    return [" ".join(m.split()) for m in INLINE.findall(prose(page))]


def resolve(name: str) -> object:
    """The object a dotted ``vkcore.x.y`` name stands for (modules imported as needed)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(name)


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_inline_commands_paths_and_names_exist(page):
    for span in inline_spans(page):
        where = f"{rel(page)}: `{span}`"
        if re.match(r"(make|vkcore|python) ", span) and not span.startswith("python -c"):
            check_command(span.split(" (")[0], where)
        for path in re.findall(
            r"(?<![\w./-])((?:vkcore|tests|examples|shaders|docs)/[\w./-]*\w)", span
        ):
            if "<" in span or "*" in span or (path + "/").startswith(GENERATED):
                continue  # a pattern, or what the build makes
            assert (REPO / path).exists(), f"{where}: no file {path}"
        for name in re.findall(r"(?<![\w.])vkcore(?:\.[A-Za-z_]\w*)+", span):
            try:
                resolve(name)
            except (ImportError, AttributeError) as exc:
                pytest.fail(f"{where}: {name} does not exist ({exc})")
