"""Every kind of damage on every kind of cache file (SPIR-V entry, pipeline cache, tune
file): the next kernel call gives the right answer with exactly one warning, ``vkcore
cache verify`` reports the file and ``vkcore cache clear`` removes it."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import vkcore
from vkcore import spirv
from vkcore.base import cachefs
from vkcore.device.pipelines import cache_file as pc
from vkcore.kernels import tuning
from vkcore.spirv import entries, glslang, shaders
from vkcore.tools.cli import main as cli_main

KINDS = ("spirv", "pipeline", "tune")
DAMAGES = (
    "flip",
    "truncate",
    "empty",
    "magic",
    "other",
    "huge",
    "folder",
    "owner",
    "writable_folder",
)
X = np.random.default_rng(7).standard_normal((3, 300)).astype(np.float32)


@pytest.fixture
def root(tmp_path, monkeypatch):
    folder = tmp_path / "cache-root"
    monkeypatch.setenv("VKCORE_CACHE_DIR", str(folder))
    spirv.clear_memory_cache()
    yield folder
    spirv.clear_memory_cache()


def kernel_call(*, validation: bool = True, after=None) -> list[logging.LogRecord]:
    """A fresh device (as a new process would open it) runs softmax, then ``after(dev)``;
    returns the warnings."""
    spirv.clear_memory_cache()
    handler = _Records()
    log = logging.getLogger("vkcore")
    log.addHandler(handler)
    try:
        with vkcore.Device(validation=validation) as dev:
            y = vkcore.softmax(X, device=dev)
            assert dev.validation_messages == []
            if after is not None:
                after(dev)
    finally:
        log.removeHandler(handler)
    np.testing.assert_allclose(y, vkcore.reference.softmax(X), atol=1e-6)
    return [r for r in handler.records if r.levelno >= logging.WARNING]


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def write_tune_file(dev) -> None:
    record = {
        "format": tuning.FORMAT,
        "key": tuning.key_of(dev),
        "choices": {"quant_rows": tuning.ROW_CANDIDATES["quant_rows"][0]},
    }
    path = tuning.tune_path(dev)
    cachefs.make_private_dir(path.parent)
    path.write_text(json.dumps(tuning.encode(record)))


def prime(root: Path) -> None:
    """Fill every cache kind: SPIR-V and pipeline files by a call, a tune file by hand,
    and one more SPIR-V entry that the call does not use (named ``other-*``)."""
    assert kernel_call(validation=False, after=write_tune_file) == []
    (used,) = (root / "spirv").glob("*.spv")
    spirv.clear_memory_cache()
    spirv.get("softmax_safe.comp", {"STAGE": 1, "TEXEL": 0, "VEC4": 0, "LOG": 0})
    (other,) = set((root / "spirv").glob("*.spv")) - {used}
    other.rename(root / f"other-{other.name}")


def test_an_intact_cache_gives_no_warning(root, capsys):
    prime(root)
    assert kernel_call() == []
    assert cli_main(["cache", "--dir", str(root), "verify"]) == 0
    assert "0 damaged" in capsys.readouterr().out


def target(root: Path, kind: str) -> Path:
    if kind == "spirv":
        (entry,) = (root / "spirv").glob("*.spv")
        return entry
    suffix = pc.SUFFIX if kind == "pipeline" else tuning.SUFFIX
    (found,) = [p for p in (root / "pipeline").iterdir() if p.name.endswith(suffix)]
    return found


def another_entry(root: Path, kind: str, path: Path) -> bytes:
    """A valid file of the same kind that belongs under another name."""
    if kind == "spirv":
        (other,) = root.glob("other-*.spv")
        return other.read_bytes()
    if kind == "pipeline":
        parsed = pc.decode(path.read_bytes())
        key = pc.CacheKey(**{**parsed.key.__dict__, "device_id": parsed.key.device_id + 1})
        return pc.encode(key, parsed.payload)
    record = json.loads(path.read_text())
    return json.dumps(tuning.encode({**record, "key": record["key"][::-1]})).encode()


def damage(root: Path, kind: str, how: str) -> Path:
    path = target(root, kind)
    data = path.read_bytes()
    cap = {"spirv": entries.MAX_ENTRY_BYTES, "pipeline": pc.DEFAULT_MAX_BYTES}.get(
        kind, tuning.MAX_BYTES
    )
    if how == "flip":
        mid = len(data) // 2
        path.write_bytes(data[:mid] + bytes([data[mid] ^ 0x10]) + data[mid + 1 :])
    elif how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "magic":
        path.write_bytes(b"XXXX" + data[4:])
    elif how == "other":
        path.write_bytes(another_entry(root, kind, path))
    elif how == "huge":
        with open(path, "r+b") as fh:
            fh.truncate(cap + 1)  # sparse: costs no disk
    elif how == "folder":
        path.unlink()
        path.mkdir()
        (path / "inside").write_bytes(data)
    elif how == "owner":
        if os.geteuid() != 0:
            pytest.skip("chown to another uid needs root")
        os.chown(path, 4242, 4242)
    elif how == "writable_folder":
        path.parent.chmod(0o777)
    return path


@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("kind", KINDS)
def test_damage_costs_one_warning_and_verify_clear_see_it(root, kind, how, capsys):
    prime(root)
    path = damage(root, kind, how)
    assert cli_main(["cache", "--dir", str(root), "verify"]) == 1
    out = capsys.readouterr().out
    name = path.parent.name if how == "writable_folder" else path.name
    assert any(line.startswith("DAMAGED") and name in line for line in out.splitlines()), out

    warnings = kernel_call()
    assert len(warnings) == 1, [r.getMessage() for r in warnings]

    if how == "folder":  # still there: nothing could be written in its place
        assert path.is_dir()
    else:  # the call may have rewritten the entry: damage it again for clear
        damage(root, kind, how)
    assert cli_main(["cache", "--dir", str(root), "clear"]) == 0
    capsys.readouterr()
    left = [p for d in ("spirv", "pipeline") for p in (root / d).iterdir()]
    assert [p.name for p in left] == [cachefs.LOCK_NAME] * len(left), left
    if how == "writable_folder":
        path.parent.chmod(0o700)
    assert cli_main(["cache", "--dir", str(root), "verify"]) == 0


def test_folders_vkcore_creates_are_private(root):
    kernel_call()
    for folder in (root, root / "spirv", root / "pipeline"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    for f in (root / "spirv").iterdir():
        assert stat.S_IMODE(f.stat().st_mode) & 0o077 == 0, f


def test_sticky_shared_folder_is_trusted_but_others_entries_are_not(root, monkeypatch):
    """A world-writable folder with the sticky bit (like /tmp) is fine: others may add
    files but not replace ours, and what they add is owned by them."""
    kernel_call()
    folder = root / "spirv"
    folder.chmod(0o1777)
    assert kernel_call() == []
    entry = sorted(folder.glob("*.spv"))[0]
    monkeypatch.setattr(cachefs, "_euid", lambda: os.stat(entry).st_uid + 1)
    assert cachefs.owner_problem(entry.stat()) is not None


def test_folder_owned_by_another_user_is_not_trusted(root):
    if os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    kernel_call()
    os.chown(root / "spirv", 4242, 4242)
    warnings = kernel_call()
    assert len(warnings) == 1 and "owned by uid 4242" in warnings[0].getMessage()


def test_shipped_spirv_is_checked(tmp_path, monkeypatch, caplog):
    """A damaged file shipped in the wheel is one warning and a compile, never used."""
    if glslang.compiler_version() == "":
        pytest.skip("needs the compiler")
    defines = {"STAGE": 0, "TEXEL": 1, "VEC4": 1, "LOG": 0}
    skey = spirv.source_key("softmax_online.comp", defines)
    good = spirv.compile_glsl("softmax_online.comp", defines)
    monkeypatch.setattr(shaders, "shipped_dir", lambda: tmp_path)
    monkeypatch.setenv("VKCORE_SPIRV_CACHE", "0")
    (tmp_path / f"{skey}.spv").write_bytes(entries.encode_entry(skey, good))
    spirv.clear_memory_cache()
    assert spirv.get("softmax_online.comp", defines).origin == "shipped"
    for bad in (good, entries.encode_entry(skey, good)[:-4], b""):
        (tmp_path / f"{skey}.spv").write_bytes(bad)
        spirv.clear_memory_cache()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="vkcore"):
            got = spirv.get("softmax_online.comp", defines)
        assert got.origin == "compiled" and got.code == good
        assert caplog.text.count("WARNING") == 1 and "shipped SPIR-V" in caplog.text
    spirv.clear_memory_cache()


def test_ls_lists_all_three_kinds(root, capsys):
    prime(root)
    assert cli_main(["cache", "--dir", str(root), "ls", "--no-device", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert [e["state"] for e in listing["tune"]] == ["intact"]
    assert listing["spirv"] and all(e["state"] == "intact" for e in listing["spirv"])
    assert [e["state"] for e in listing["files"]] == ["intact"]
    assert cli_main(["cache", "--dir", str(root), "ls", "--no-device"]) == 0
    out = capsys.readouterr().out
    assert "tune files in" in out and "SPIR-V entries in" in out and "pipeline caches in" in out


def test_without_posix_uids_and_fcntl_the_caches_still_work(tmp_path):
    """Windows has neither os.geteuid nor fcntl: the module imports, the lock is
    filelock's portable one and the ownership checks are skipped."""
    script = f"""
import os, sys
sys.modules["fcntl"] = None
del os.geteuid
from pathlib import Path
from vkcore.base import cachefs
assert not cachefs.OWNER_CHECKS
p = Path({str(tmp_path)!r}) / "a" / "b.bin"
cachefs.store(p, b"data")
assert cachefs.read_entry(p, 10) == b"data"
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
