"""Every environment variable vkcore reads, with any value: at most one warning for it,
the default, and kernel calls that still give the right answer."""

from __future__ import annotations

import contextlib
import logging
import os
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from repo_paths import REPO

import vkcore
from vkcore import reference, spirv
from vkcore.base import config

PACKAGE = Path(vkcore.__file__).resolve().parent
FLAGS = {
    "VKCORE_VALIDATION": False,
    "VKCORE_PIPELINE_CACHE": True,
    "VKCORE_SPIRV_CACHE": True,
    "VKCORE_SPIRV_VAL": True,
    "VKCORE_FORCE_STAGING": False,
    "VKCORE_TEXEL": True,
    "VKCORE_DEVICE_SCALES": True,
}
PATHS = ("VKCORE_CACHE_DIR", "VKCORE_SHADER_DIR", "XDG_CACHE_HOME")
OTHERS = ("VKCORE_DEVICE", "VKCORE_PIPELINE_CACHE_MAX_BYTES", "LP_NUM_THREADS")
VARIABLES = (*FLAGS, *PATHS, *OTHERS)
ODD = [
    "",
    " ",
    "\t\n",
    "0",
    "1",
    "-1",
    "-0",
    "+7",
    "maybe",
    "TRUE",
    " off ",
    "Yes",
    "2**64",
    "9" * 60,
    str(2**63),
    "1e3",
    "0x10",
    "1_000",
    "\u0663",
    "\u00e9t\u00e9",
    "\U0001f600",
    "llvmpipe",
    "no such gpu",
    "99",
]


@pytest.fixture(autouse=True)
def _fresh_warnings():
    config._warned.clear()  # each test sees its own warnings (they are once per process)
    yield


def test_the_list_covers_every_variable_the_package_names():
    """A new VKCORE_* variable must be added here (and to docs/environment.md's table)."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        names |= set(re.findall(r"VKCORE_[A-Z0-9_]+", path.read_text()))
    assert names <= set(VARIABLES), sorted(names - set(VARIABLES))
    page = (REPO / "docs" / "environment.md").read_text()
    missing = [n for n in VARIABLES if n.startswith("VKCORE_") and f"`{n}" not in page]
    assert not missing, f"variables docs/environment.md does not name: {missing}"


@pytest.mark.parametrize("name", FLAGS)
@pytest.mark.parametrize(
    "value, expected",
    [("1", True), (" TRUE ", True), ("on", True), ("0", False), ("No", False), ("off", False)],
)
def test_flag_spellings(monkeypatch, name, value, expected):
    monkeypatch.setenv(name, value)
    assert config.env_flag(name, not expected) is expected


@pytest.mark.parametrize("value", ["maybe", "2", "-1", "tru", "\u00e9", "1 0"])
def test_garbage_flag_warns_once_and_is_the_default(monkeypatch, caplog, value):
    monkeypatch.setenv("VKCORE_VALIDATION", value)
    with caplog.at_level(logging.WARNING, logger="vkcore"):
        assert config.validation_requested() is False  # "maybe" does not turn it on
        assert config.env_flag("VKCORE_VALIDATION", True) is True
    assert caplog.text.count("WARNING") == 1 and "VKCORE_VALIDATION" in caplog.text


@pytest.mark.parametrize("value", ["", "   "])
def test_blank_is_unset(monkeypatch, caplog, value):
    for name, default in FLAGS.items():
        monkeypatch.setenv(name, value)
        assert config.env_flag(name, default) is default
    assert caplog.text == ""


def test_cache_dir_that_is_a_file_warns_and_is_the_default(monkeypatch, tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("VKCORE_CACHE_DIR", str(blocker))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    with caplog.at_level(logging.WARNING, logger="vkcore"):
        assert config.cache_dir() == tmp_path / "xdg" / "vkcore"
    assert "not a folder" in caplog.text


def test_relative_xdg_cache_home_is_ignored_with_one_warning(monkeypatch, caplog):
    monkeypatch.delenv("VKCORE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache-for-this-test")
    with caplog.at_level(logging.WARNING, logger="vkcore"):
        assert config.cache_dir() == Path.home() / ".cache" / "vkcore"
        assert config.cache_dir() == Path.home() / ".cache" / "vkcore"
    assert caplog.text.count("XDG_CACHE_HOME") == 1 and "absolute" in caplog.text


def test_device_selector_that_matches_nothing_warns_and_uses_the_best(monkeypatch, caplog):
    monkeypatch.setenv("VKCORE_DEVICE", "no such gpu at all")
    with caplog.at_level(logging.WARNING, logger="vkcore"), vkcore.Device(validation=False) as dev:
        best = dev.info.name
    assert "VKCORE_DEVICE" in caplog.text and "matches no device" in caplog.text
    with pytest.raises(ValueError, match="matches no device"):  # an argument still raises
        vkcore.Device("no such gpu at all", validation=False)
    monkeypatch.delenv("VKCORE_DEVICE")
    with vkcore.Device(validation=False) as dev:
        assert dev.info.name == best


def test_shader_dir_without_the_shader_warns_and_uses_the_package(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("VKCORE_SHADER_DIR", str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="vkcore"):
        assert spirv.shader_dir("softmax_online.comp") != tmp_path
    assert "VKCORE_SHADER_DIR" in caplog.text


def _values(name: str, scratch: Path) -> st.SearchStrategy[str]:
    text = st.text(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=12
    )
    if name in PATHS:
        # relative paths land in the scratch cwd; absolute ones only inside scratch
        special = [str(scratch / "a-file"), str(scratch / "missing" / "x"), str(scratch)]
        return st.one_of(st.sampled_from(special + ODD), text).filter(
            lambda v: not v.strip().startswith(("~", "/")) or v.startswith(str(scratch))
        )
    return st.one_of(st.sampled_from(ODD), text)


@contextlib.contextmanager
def _environment(values: dict[str, str]):
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _Count(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_any_value_of_any_variable_gives_a_working_kernel(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "a-file").write_text("not a folder")
    monkeypatch.chdir(scratch)  # relative cache folders are created here
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 257)).astype(np.float32)
    w = rng.standard_normal((9, 16)).astype(np.float32)
    q, s, z = reference.quantize(w, 8, True, True)
    envs = st.dictionaries(st.sampled_from(VARIABLES), st.just(""), min_size=1, max_size=3)
    envs = envs.flatmap(lambda d: st.fixed_dictionaries({k: _values(k, scratch) for k in d}))

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(envs)
    def check(values):
        counter = _Count()
        log = logging.getLogger("vkcore")
        log.addHandler(counter)
        try:
            with _environment(values), vkcore.Device() as dev:
                y = vkcore.softmax(x, device=dev)
                qt = vkcore.quantize(w, device=dev)
                got_q, got_s = qt.q, qt.scale
                qt.release()
        finally:
            log.removeHandler(counter)
        np.testing.assert_allclose(y, reference.softmax(x), atol=1e-6)
        assert np.array_equal(got_q, q) and np.array_equal(got_s, s)
        assert len(counter.messages) <= len(values), (values, counter.messages)

    try:
        check()
    finally:
        spirv.clear_memory_cache()
