"""Other operating systems: nothing POSIX-only at import or on the kernel path, and the
cache-folder lock and writes work the same everywhere.

CI runs on Linux only, so Windows is simulated: a subprocess hides the POSIX-only
modules (``sys.modules[name] = None`` makes their import fail as it does on Windows) and
the uid functions, then imports vkcore, runs kernels and saves and reloads the pipeline
and SPIR-V caches. The lock itself is tested across threads and processes, with its
timeout, and the Windows ``os.replace`` retry with the failure injected.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from vkcore.base import cachefs

# Modules that exist on POSIX only; uid functions Windows lacks.
POSIX_ONLY = ("fcntl", "resource", "pwd", "grp", "termios", "tty", "pty", "syslog")
POSIX_FUNCTIONS = ("geteuid", "getuid", "getegid", "getgid")

PRELUDE = f"""
import os, sys
for name in {POSIX_ONLY!r}:
    sys.modules[name] = None  # import raises ImportError, as on Windows
for name in {POSIX_FUNCTIONS!r}:
    if hasattr(os, name):
        delattr(os, name)
"""

KERNELS = """
import json, sys
import numpy as np
import vkcore
from vkcore import spirv; from vkcore.base import cachefs
assert not cachefs.OWNER_CHECKS
x = np.random.default_rng(0).standard_normal((3, 300)).astype(np.float32)
w = np.random.default_rng(1).standard_normal((16, 64)).astype(np.float32)
out = {}
with vkcore.Device(validation=True) as dev:
    out["load"] = dev.pipeline_cache.stats()["load_status"]
    y = vkcore.softmax(x, device=dev)
    assert np.allclose(y, vkcore.reference.softmax(x), atol=1e-6)
    qt = vkcore.quantize(w, symmetric=False, device=dev)
    q, s, z = vkcore.reference.quantize(w, 8, False, True)
    assert np.array_equal(qt.q, q)
    assert np.array_equal(vkcore.dequantize(qt), vkcore.reference.dequantize(q, s, z))
    out["saved"] = dev.pipeline_cache.save(force=True)
    assert dev.validation_messages == [], dev.validation_messages
out["hidden"] = [n for n in HIDDEN if sys.modules.get(n) is not None]
print(json.dumps(out))
"""


def _run(code: str, env_root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VKCORE_CACHE_DIR": str(env_root), "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=240
    )


def test_import_vkcore_with_posix_modules_hidden(tmp_path):
    code = PRELUDE + "import vkcore, vkcore.tools.cli\nprint('imported')\n"
    out = _run(code, tmp_path / "root")
    assert out.returncode == 0 and out.stdout.strip() == "imported", out.stderr


def test_kernels_and_cache_round_trip_with_posix_parts_hidden(tmp_path):
    """The first kernel call used to fail on Windows (fcntl imported as the device opened
    its pipeline cache): kernels run, the pipeline cache is saved under the lock and
    loaded by the next process, SPIR-V entries are written and reused."""
    root = tmp_path / "root"
    code = PRELUDE + KERNELS.replace("HIDDEN", repr(POSIX_ONLY))
    first = _run(code, root)
    assert first.returncode == 0, first.stderr
    state = json.loads(first.stdout.strip().splitlines()[-1])
    assert state["load"] == "missing" and state["saved"] is True and state["hidden"] == []
    assert list((root / "pipeline").glob("*.vkpc")) and list((root / "spirv").glob("*.spv"))
    assert not list((root / "pipeline").glob(cachefs.TEMP_PREFIX + "*"))
    for path in root.rglob("*"):  # names every file system takes (no Windows-reserved ones)
        rel = path.relative_to(root)
        assert re.fullmatch(r"[A-Za-z0-9._-]+", path.name) and not path.name.endswith("."), rel
        assert len(str(rel)) <= 120, rel  # leaves room for a root under Windows' MAX_PATH
    second = _run(code, root)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout.strip().splitlines()[-1])["load"] == "loaded"
    assert "recompil" not in second.stderr  # no SPIR-V entry was refused


def test_store_and_lock_without_posix_parts(tmp_path):
    """cachefs.store and read_entry (the path every tune file and SPIR-V entry takes), and
    the lock still excludes (without fcntl it used to be no lock at all)."""
    code = (
        PRELUDE
        + f"""
from pathlib import Path
from vkcore.base import cachefs
p = Path({str(tmp_path)!r}) / "a" / "b" / "x.tune.json"
cachefs.store(p, b"one")
cachefs.store(p, b"two")  # replaces the file under the lock
assert cachefs.read_entry(p, 10) == b"two"
names = sorted(f.name for f in p.parent.iterdir() if not f.name.startswith(".lock"))
assert names == ["x.tune.json"], names
import threading, time
inside = []
def worker(i):
    with cachefs.folder_lock(p.parent):
        inside.append(i)
        time.sleep(0.05)
        inside.append(i)
threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
[t.start() for t in threads]
[t.join() for t in threads]
assert all(inside[k] == inside[k + 1] for k in range(0, 6, 2)), inside  # still exclusive
print("ok")
"""
    )
    out = _run(code, tmp_path / "root")
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_the_lock_excludes_other_threads(tmp_path):
    inside: list[tuple[str, int]] = []

    def worker(i: int) -> None:
        with cachefs.folder_lock(tmp_path):
            inside.append(("in", i))
            time.sleep(0.05)
            inside.append(("out", i))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(inside) == 8
    for k in range(0, 8, 2):  # never two holders at once
        assert inside[k][0] == "in" and inside[k + 1] == ("out", inside[k][1])


def test_the_lock_excludes_other_processes(tmp_path):
    ready = tmp_path / "ready"
    code = f"""
import time
from pathlib import Path
from vkcore.base import cachefs
with cachefs.folder_lock(Path({str(tmp_path)!r})):
    Path({str(ready)!r}).touch()
    time.sleep(1.0)
"""
    holder = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert time.monotonic() < deadline and holder.poll() is None
            time.sleep(0.02)
        start = time.monotonic()
        with cachefs.folder_lock(tmp_path):
            waited = time.monotonic() - start
        assert waited > 0.3  # it waited for the other process to let go
    finally:
        holder.wait(timeout=60)
    assert holder.returncode == 0


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX mode bits")
def test_the_lock_file_is_private(tmp_path):
    with cachefs.folder_lock(tmp_path):
        pass
    assert stat.S_IMODE(os.stat(tmp_path / cachefs.LOCK_NAME).st_mode) == 0o600


def test_a_lock_held_too_long_is_an_oserror_not_a_hang(tmp_path, monkeypatch):
    monkeypatch.setattr(cachefs, "LOCK_TIMEOUT", 0.2)
    path = tmp_path / "entry.bin"
    with cachefs.folder_lock(tmp_path):
        start = time.monotonic()
        with pytest.raises(OSError):
            cachefs.store(path, b"data")
        assert time.monotonic() - start < 5
    assert not path.exists()
    cachefs.store(path, b"data")  # free again
    assert path.read_bytes() == b"data"


def test_replace_is_retried_while_the_target_is_held_open(tmp_path, monkeypatch):
    """Windows: os.replace onto a file a reader has open is a PermissionError for a
    moment; the write retries, and gives up with the error (temp file removed)."""
    monkeypatch.setattr(cachefs, "REPLACE_RETRIES", 3)
    monkeypatch.setattr(cachefs, "REPLACE_WAIT", 0.0)
    real = os.replace
    failures = {"left": 2}

    def flaky(src, dst):
        if failures["left"]:
            failures["left"] -= 1
            raise PermissionError(13, "the file is being used by another process")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", flaky)
    path = tmp_path / "entry.bin"
    cachefs.store(path, b"data")
    assert path.read_bytes() == b"data" and failures["left"] == 0
    failures["left"] = 10
    with pytest.raises(PermissionError):
        cachefs.store(path, b"new")
    assert path.read_bytes() == b"data"
    assert not list(tmp_path.glob(cachefs.TEMP_PREFIX + "*"))


def test_no_replace_retry_on_posix():
    expected = 20 if os.name == "nt" else 0
    assert expected == cachefs.REPLACE_RETRIES
