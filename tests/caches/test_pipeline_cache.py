"""The persisted pipeline cache: key, file format, every kind of damage, concurrency,
a real driver upgrade (Mesa 25 from bookworm-backports), and ``vkcore cache``."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import struct
import subprocess
import sys
import threading
import types
from pathlib import Path

import numpy as np
import pytest
from checks import python_path_with
from mesa25 import mesa25_env
from repo_paths import REPO

import vkcore
from vkcore import reference
from vkcore.base import cachefs, config
from vkcore.device.pipelines import cache_file as pc
from vkcore.device.pipelines.cache import PipelineCache
from vkcore.errors import VulkanError
from vkcore.tools.cli import main as cli_main

WORKER = REPO / "tests" / "support" / "pipeline_cache_worker.py"


# ---------------------------------------------------------------------------- helpers
@pytest.fixture
def root(tmp_path):
    return tmp_path / "cache-root"


@pytest.fixture
def key(device):
    return pc.CacheKey.from_info(device.info)


@pytest.fixture
def driver_blob(device):
    """What this driver really returns from vkGetPipelineCacheData."""
    blob = device.pipeline_cache.data()
    assert len(blob) >= pc.DRIVER_HEADER.size
    return blob


@pytest.fixture
def offered(monkeypatch):
    """Every ``data`` argument vkcore passes towards vkCreatePipelineCache."""
    calls: list[bytes | None] = []
    original = PipelineCache._new_cache

    def spy(self, data):
        calls.append(None if data is None else bytes(data))
        return original(self, data)

    monkeypatch.setattr(PipelineCache, "_new_cache", spy)
    return calls


def cache_path(root: Path, key: pc.CacheKey) -> Path:
    return pc.pipeline_dir(root) / key.file_name()


def put(root: Path, key: pc.CacheKey, data: bytes) -> Path:
    path = cache_path(root, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def check_softmax(dev: vkcore.Device) -> None:
    x = np.linspace(-4.0, 6.0, 3 * 200, dtype=np.float32).reshape(3, 200)
    np.testing.assert_allclose(vkcore.softmax(x, device=dev), reference.softmax(x), atol=1e-6)


def open_device(root: Path) -> vkcore.Device:
    return vkcore.Device(validation=True, cache_dir=str(root))


def close_device(dev: vkcore.Device) -> None:
    messages = dev.validation_messages
    dev.close()
    assert messages == []


def driver_header(size=32, version=1, vendor=0, device=0, uuid=b"\0" * 16) -> bytes:
    return pc.DRIVER_HEADER.pack(size, version, vendor, device, uuid)


def flip(data: bytes, offset: int) -> bytes:
    return data[:offset] + bytes([data[offset] ^ 0x5A]) + data[offset + 1 :]


def with_payload_size(data: bytes, size: int) -> bytes:
    """``data`` with the payload-size field set to ``size`` and the header hash redone."""
    fixed = bytearray(data[: pc._FIXED.size])
    struct.pack_into("<Q", fixed, 16, size)
    return bytes(fixed) + hashlib.sha256(fixed).digest() + data[pc.HEADER_SIZE :]


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": python_path_with(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "vkcore", *args],
        capture_output=True,
        text=True,
        env=full,
        cwd=REPO,
        timeout=120,
    )


# ---------------------------------------------------------------------------- key and format
def test_file_name_is_readable_and_tells_builds_apart(key):
    name = key.file_name()
    assert name.startswith(f"{key.vendor_id:04x}-{key.device_id:04x}-{key.driver_version}-")
    assert key.pipeline_cache_uuid.hex() in name and name.endswith(pc.SUFFIX)
    # Mesa 22.3.x builds share a pipelineCacheUUID; the driver string still separates them.
    other_build = dataclasses.replace(key, driver_info=key.driver_info + " (other build)")
    assert other_build.file_name() != name


def test_key_has_every_field(key, device):
    assert key.pointer_size == struct.calcsize("P")
    assert key.format_version == pc.FORMAT_VERSION
    assert key.driver_name == device.info.driver_name and key.device_uuid == device.info.device_uuid


def test_encode_decode_round_trip(key, driver_blob):
    data = pc.encode(key, driver_blob + b"pipelines")
    parsed = pc.decode(data)
    assert parsed.key == key and parsed.payload == driver_blob + b"pipelines"
    assert not parsed.header_only
    assert pc.decode(pc.encode(key, driver_blob)).header_only
    assert len(data) == pc.HEADER_SIZE + len(driver_blob) + 9


def test_every_truncation_and_every_flipped_byte_is_detected(key, driver_blob):
    data = pc.encode(key, driver_blob)
    for n in range(len(data)):
        with pytest.raises(pc.CacheFileError):
            pc.decode(data[:n])
    for offset in range(len(data)):
        with pytest.raises(pc.CacheFileError):
            pc.decode(flip(data, offset))


def test_overlong_driver_strings_are_a_value_error(key, driver_blob):
    with pytest.raises(ValueError, match="driver_info"):
        pc.encode(dataclasses.replace(key, driver_info="x" * 300), driver_blob)


# ---------------------------------------------------------------------------- round trip
def test_cold_then_warm_round_trip(root, key, offered):
    dev = open_device(root)
    assert dev.pipeline_cache.load_status == "missing" and dev.pipeline_cache.loaded_bytes == 0
    check_softmax(dev)
    close_device(dev)
    path = cache_path(root, key)
    parsed = pc.decode(path.read_bytes())
    assert parsed.key == key
    dev = open_device(root)
    cache = dev.pipeline_cache
    assert cache.load_status == "loaded"
    assert cache.loaded_bytes == len(parsed.payload)
    assert cache.loaded_header_only == parsed.header_only
    assert offered[-1] == parsed.payload
    check_softmax(dev)
    mtime = path.stat().st_mtime_ns
    assert dev.save_pipeline_cache() is False  # unchanged content is not rewritten
    assert path.stat().st_mtime_ns == mtime
    assert cache.save(force=True) is True
    close_device(dev)
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([cachefs.LOCK_NAME, path.name])


def test_creation_feedback_is_recorded(root):
    dev = open_device(root)
    check_softmax(dev)
    stats = dev.pipeline_stats()
    cache = dev.pipeline_cache
    assert stats and cache.creations == len(stats)
    if dev.info.pipeline_creation_feedback:
        assert all(isinstance(s["cache_hit"], bool) for s in stats)
        assert cache.feedback_creations == cache.creations
        assert cache.hits == sum(s["cache_hit"] for s in stats)
    close_device(dev)


def test_disabled_by_environment(root, monkeypatch, offered):
    monkeypatch.setenv("VKCORE_PIPELINE_CACHE", "0")
    dev = open_device(root)
    assert dev.pipeline_cache.load_status == "disabled" and dev.pipeline_cache.path is None
    check_softmax(dev)
    assert dev.save_pipeline_cache() is False
    close_device(dev)
    assert not root.exists()
    assert offered == [None]


def test_merges_what_another_device_saved(root, key, monkeypatch):
    merged: list[bytes] = []
    original = PipelineCache._merge

    def spy(self, payload):
        merged.append(payload)
        return original(self, payload)

    monkeypatch.setattr(PipelineCache, "_merge", spy)
    first, second = open_device(root), open_device(root)
    check_softmax(first)
    assert first.save_pipeline_cache() is True
    assert merged == []
    check_softmax(second)
    second.save_pipeline_cache()
    assert merged == [pc.decode(cache_path(root, key).read_bytes()).payload]
    close_device(first)
    close_device(second)


def test_empty_driver_answer_is_not_written(root, monkeypatch):
    dev = open_device(root)
    monkeypatch.setattr(PipelineCache, "_driver_data", lambda self: b"")
    assert dev.save_pipeline_cache() is False
    monkeypatch.undo()
    close_device(dev)


def test_ignored_cache_is_warned_about(caplog):
    cache = object.__new__(PipelineCache)
    cache.path, cache.loaded_bytes, cache.loaded_header_only = Path("x"), 4096, False
    cache.hits = cache.creations = cache.feedback_creations = 0
    for _ in range(3):
        cache.record_creation(False)
    with caplog.at_level(logging.WARNING, logger="vkcore"):
        cache._warn_if_ignored()
    assert "none of 3 pipeline creations hit them" in caplog.text
    caplog.clear()
    cache.record_creation(True)
    with caplog.at_level(logging.WARNING, logger="vkcore"):
        cache._warn_if_ignored()
    assert caplog.text == ""


class _FakeLib:
    """vkGetPipelineCacheData that grows once between the two calls (VK_INCOMPLETE)."""

    def __init__(self, ffi, sizes):
        self.ffi, self.sizes, self.calls = ffi, list(sizes), 0

    def vkGetPipelineCacheData(self, device, cache, size_ptr, data_ptr):  # noqa: N802
        self.calls += 1
        current = self.sizes[0]
        if data_ptr == self.ffi.NULL:
            size_ptr[0] = current
            return 0
        if size_ptr[0] < self.sizes[-1] and len(self.sizes) > 1:
            self.sizes.pop(0)
            return 5  # VK_INCOMPLETE: the cache grew meanwhile
        self.ffi.memmove(data_ptr, bytes(range(size_ptr[0])), size_ptr[0])
        return 0


def test_incomplete_is_retried(device):
    ffi = device.ffi
    cache = object.__new__(PipelineCache)
    cache.handle = None
    cache.lock = threading.Lock()
    fake = _FakeLib(ffi, [32, 48])
    cache.device = types.SimpleNamespace(ffi=ffi, lib=fake, handle=None)
    assert cache._driver_data() == bytes(range(48))
    assert fake.calls == 4


# ---------------------------------------------------------------------------- damage
def _damaged(key: pc.CacheKey, blob: bytes) -> dict[str, tuple[bytes, str]]:
    good = pc.encode(key, blob)
    return {
        "empty file": (b"", "truncated header"),
        "truncated in the header": (good[:100], "truncated header"),
        "truncated in the payload": (good[:-5], "payload size field"),
        "flipped byte in magic": (flip(good, 0), "magic"),
        "flipped byte in the key fields": (flip(good, 60), "header checksum"),
        "flipped byte in the header hash": (flip(good, pc.HEADER_SIZE - 1), "header checksum"),
        "flipped byte in the payload": (flip(good, len(good) - 1), "payload checksum"),
        "size field larger than the file": (
            with_payload_size(good, len(blob) + 1000),
            "payload size field",
        ),
        "garbage": (bytes(range(256)) * 3, "magic"),
        "payload shorter than the driver header": (pc.encode(key, blob[:10]), "driver header"),
        "extra bytes appended": (good + b"\0", "payload size field"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "empty file",
        "truncated in the header",
        "truncated in the payload",
        "flipped byte in magic",
        "flipped byte in the key fields",
        "flipped byte in the header hash",
        "flipped byte in the payload",
        "size field larger than the file",
        "garbage",
        "payload shorter than the driver header",
        "extra bytes appended",
    ],
)
def test_damaged_file_is_a_cold_start(case, root, key, driver_blob, offered, caplog):
    data, reason = _damaged(key, driver_blob)[case]
    path = put(root, key, data)
    _expect_cold_start(root, offered, caplog, reason)
    assert pc.decode(path.read_bytes()).key == key  # replaced by a good file on close


def _expect_cold_start(root, offered, caplog, reason):
    with caplog.at_level(logging.WARNING, logger="vkcore"):
        dev = open_device(root)
    cache = dev.pipeline_cache
    assert cache.load_status.startswith("rejected: ") and reason in cache.load_status
    assert cache.loaded_bytes == 0
    assert offered == [None], "no byte of a rejected file may reach vkCreatePipelineCache"
    assert "cold start" in caplog.text and reason in caplog.text
    check_softmax(dev)
    close_device(dev)
    assert offered == [None], "nor may it be merged when the cache is saved"
    return cache


def _wrong_key_value(key: pc.CacheKey, field: str):
    value = getattr(key, field)
    if isinstance(value, bytes):
        return flip(value, 3)
    if isinstance(value, str):
        return value + " 2"
    return value + 1


KEY_FIELDS = [f.name for f in dataclasses.fields(pc.CacheKey)]


@pytest.mark.parametrize("field", KEY_FIELDS)
def test_each_wrong_key_field_is_a_cold_start(field, root, key, driver_blob, offered, caplog):
    other = dataclasses.replace(key, **{field: _wrong_key_value(key, field)})
    payload = driver_blob
    if field in ("vendor_id", "device_id", "pipeline_cache_uuid"):
        # Keep the file self-consistent: the driver header names the other device too.
        payload = driver_header(32, 1, other.vendor_id, other.device_id, other.pipeline_cache_uuid)
    put(root, key, pc.encode(other, payload))
    reason = "format version" if field == "format_version" else field
    _expect_cold_start(root, offered, caplog, reason)


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"size": 16}, "headerSize 16"),
        ({"size": 4096}, "headerSize 4096"),
        ({"version": 2}, "headerVersion 2"),
        ({"vendor": 0x10DE}, "vendorID"),
        ({"device": 0x2204}, "deviceID"),
        ({"uuid": b"\x01" * 16}, "pipelineCacheUUID"),
    ],
)
def test_wrong_driver_header_is_a_cold_start(change, reason, root, key, offered, caplog):
    fields = {
        "vendor": key.vendor_id,
        "device": key.device_id,
        "uuid": key.pipeline_cache_uuid,
        **change,
    }
    put(root, key, pc.encode(key, driver_header(**fields)))
    _expect_cold_start(root, offered, caplog, reason)


def test_folder_in_place_of_the_file(root, key, offered, caplog):
    path = cache_path(root, key)
    path.mkdir(parents=True)
    _expect_cold_start(root, offered, caplog, "not a regular file")
    assert path.is_dir()
    # the save on close failed too, but that is the same entry: one warning, nothing raised
    assert caplog.text.count("WARNING") == 1
    assert [p.name for p in path.parent.iterdir() if pc.is_temp_file(p)] == []


def test_unreadable_file(root, key, driver_blob, offered, caplog, monkeypatch):
    path = put(root, key, pc.encode(key, driver_blob))
    path.chmod(0)
    if os.geteuid() == 0:  # root reads anything: make the open fail as it would for a user

        def denied(p):
            raise PermissionError(13, "Permission denied", str(p))

        monkeypatch.setattr(cachefs, "_open_for_reading", denied)
    _expect_cold_start(root, offered, caplog, "cannot read")


def test_file_above_the_cap_is_refused_unread(root, key, driver_blob, offered, caplog, monkeypatch):
    put(root, key, pc.encode(key, driver_blob))
    monkeypatch.setenv(pc.MAX_BYTES_ENV, "100")

    def never(fd, limit):
        raise AssertionError("a file above the cap was read")

    monkeypatch.setattr(cachefs, "_read_opened", never)
    _expect_cold_start(root, offered, caplog, "above the cap of 100 bytes")


@pytest.mark.parametrize("value", ["lots", "0", "-5", "1e9", str(2**64), "12 MiB", "\u0663"])
def test_bad_cap_setting_warns_and_is_the_default(monkeypatch, caplog, value):
    monkeypatch.setenv(pc.MAX_BYTES_ENV, value)
    config._warned.clear()  # warned once per process and value: forget earlier tests
    with caplog.at_level(logging.WARNING, logger="vkcore"):
        assert pc.max_bytes() == pc.DEFAULT_MAX_BYTES
    assert pc.MAX_BYTES_ENV in caplog.text


def test_driver_refusing_checked_data_falls_back_to_empty(
    root, key, driver_blob, caplog, monkeypatch
):
    put(root, key, pc.encode(key, driver_blob))
    original = PipelineCache._new_cache

    def refuse(self, data):
        if data is not None:
            raise VulkanError("vkCreatePipelineCache", -3)
        return original(self, data)

    monkeypatch.setattr(PipelineCache, "_new_cache", refuse)
    with caplog.at_level(logging.WARNING, logger="vkcore"):
        dev = open_device(root)
    assert dev.pipeline_cache.load_status.startswith("rejected: the driver refused")
    assert dev.pipeline_cache.loaded_bytes == 0
    check_softmax(dev)
    close_device(dev)


def _make_read_only(folder: Path, monkeypatch) -> None:
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0:
        return

    # No immutable attribute here (container without CAP_LINUX_IMMUTABLE): fail the writes.
    def denied(*args, **kwargs):
        raise PermissionError(30, "Read-only file system", str(folder))

    monkeypatch.setattr(pc, "_make_temp", denied)
    monkeypatch.setattr(cachefs, "folder_lock", denied)


def _undo_read_only(folder: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(folder)], capture_output=True)
    else:
        folder.chmod(0o755)


def test_read_only_folder_never_breaks_a_kernel(root, key, offered, caplog, monkeypatch):
    folder = pc.pipeline_dir(root)
    folder.mkdir(parents=True)
    _make_read_only(folder, monkeypatch)
    try:
        with caplog.at_level(logging.WARNING, logger="vkcore"):
            for _ in range(2):
                dev = open_device(root)
                assert dev.pipeline_cache.load_status == "missing"
                check_softmax(dev)
                assert dev.save_pipeline_cache() is False
                close_device(dev)
        assert caplog.text.count("cannot be written") == 1  # warned once
        assert list(folder.iterdir()) == []
    finally:
        _undo_read_only(folder)


def test_folder_that_cannot_be_created(tmp_path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with caplog.at_level(logging.WARNING, logger="vkcore"):
        dev = open_device(blocker / "below")
        check_softmax(dev)
        assert dev.save_pipeline_cache() is False
        close_device(dev)
    assert "cannot be written" in caplog.text


# ---------------------------------------------------------------------------- concurrency
def test_concurrent_processes_never_damage_the_file(root, key):
    env = {**os.environ, "PYTHONPATH": python_path_with(REPO)}
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "hammer", str(root), "12"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
    loads = [json.loads(out) for out, _ in outputs]
    assert sum(sum(d.values()) for d in loads) == 48
    assert sum(d.get("loaded", 0) for d in loads) > 0
    folder = pc.pipeline_dir(root)
    assert sorted(p.name for p in folder.iterdir()) == sorted([cachefs.LOCK_NAME, key.file_name()])
    assert pc.decode((folder / key.file_name()).read_bytes()).key == key


def test_threads_saving_one_device(root, key):
    dev = open_device(root)
    check_softmax(dev)
    errors: list[BaseException] = []

    def work():
        try:
            for _ in range(10):
                dev.pipeline_cache.save(force=True)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    check_softmax(dev)
    for t in threads:
        t.join()
    close_device(dev)
    assert errors == []
    assert pc.decode(cache_path(root, key).read_bytes()).key == key
    assert not [p for p in pc.pipeline_dir(root).iterdir() if pc.is_temp_file(p)]


def test_save_removes_temp_files_of_an_interrupted_save(root, key):
    folder = pc.pipeline_dir(root)
    folder.mkdir(parents=True)
    leftover = folder / (cachefs.TEMP_PREFIX + "killed" + pc.SUFFIX)
    leftover.write_bytes(b"half a file")
    dev = open_device(root)
    check_softmax(dev)
    assert dev.save_pipeline_cache() is True
    close_device(dev)
    assert sorted(p.name for p in folder.iterdir()) == sorted([cachefs.LOCK_NAME, key.file_name()])


def test_failed_write_leaves_no_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "x.vkpc"

    def broken(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError):
        cachefs.write_atomic(target, b"data")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------- driver upgrade
def _probe(root: Path, env: dict[str, str] | None = None) -> dict:
    full = {**os.environ, "PYTHONPATH": python_path_with(REPO), **(env or {})}
    out = subprocess.run(
        [sys.executable, str(WORKER), "probe", str(root)],
        capture_output=True,
        text=True,
        env=full,
        cwd=REPO,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_cache_from_one_driver_is_rejected_by_another(root, key, driver_blob, offered, caplog):
    """Synthetic upgrade, always run: same device, the driver string of a newer build."""
    upgraded = dataclasses.replace(
        key, driver_info="Mesa 99.0.0", driver_version=key.driver_version + 1
    )
    put(root, key, pc.encode(upgraded, driver_blob))
    cache = _expect_cold_start(root, offered, caplog, "written for another device or driver")
    assert "driver_info" in cache.load_status and "driver_version" in cache.load_status


def test_real_driver_upgrade_mesa25(root):
    mesa25 = mesa25_env()
    old = _probe(root)
    new = _probe(root, mesa25)
    assert "25.0.7" in new["driver_info"] and "25.0.7" not in old["driver_info"]
    assert old["file_name"] != new["file_name"]
    assert new["stats"]["load_status"] == "missing"  # its own key, its own file
    folder = pc.pipeline_dir(root)
    # A stale file where Mesa 25 looks (the old driver's bytes) is refused before the driver.
    shutil.copyfile(folder / old["file_name"], folder / new["file_name"])
    stale = _probe(root, mesa25)
    status = stale["stats"]["load_status"]
    assert status.startswith("rejected: written for another device or driver"), status
    assert "pipeline_cache_uuid" in status and "driver_info" in status
    assert stale["stats"]["loaded_bytes"] == 0
    assert pc.decode((folder / new["file_name"]).read_bytes()).key.driver_info == new["driver_info"]
    again_old = _probe(root)
    assert again_old["stats"]["load_status"] == "loaded"
    listing = json.loads(run_cli("cache", "--dir", str(root), "ls", "--json", env=mesa25).stdout)
    states = {f["name"]: f["state"] for f in listing["files"]}
    assert states[new["file_name"]] == "matches the current device"
    assert states[old["file_name"]].startswith("another device or driver")


# ---------------------------------------------------------------------------- CLI
def test_cli_ls_verify_clear(root, key, driver_blob, capsys):
    dev = open_device(root)
    check_softmax(dev)
    close_device(dev)
    other = dataclasses.replace(key, driver_info="Mesa 99.0.0")
    put(root, other, pc.encode(other, driver_blob))
    assert cli_main(["cache", "--dir", str(root), "ls"]) == 0
    text = capsys.readouterr().out
    assert key.file_name() in text and other.file_name() in text
    assert "matches the current device" in text and "another device or driver" in text
    if pc.decode(cache_path(root, key).read_bytes()).header_only:
        assert "header only: this driver does not serialize pipelines" in text
    assert cli_main(["cache", "--dir", str(root), "ls", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert {f["name"] for f in listing["files"]} == {key.file_name(), other.file_name()}
    assert all(f["key"]["vendor_id"] == key.vendor_id for f in listing["files"])

    assert cli_main(["cache", "--dir", str(root), "verify"]) == 0
    assert "0 damaged" in capsys.readouterr().out
    damaged = cache_path(root, other)
    damaged.write_bytes(flip(damaged.read_bytes(), 70))
    (damaged.parent / (cachefs.TEMP_PREFIX + "abc" + pc.SUFFIX)).write_bytes(b"half")
    assert cli_main(["cache", "--dir", str(root), "verify"]) == 1
    out = capsys.readouterr().out
    assert "DAMAGED" in out and other.file_name() in out and "1 damaged" in out
    assert "leftover temp file" in out

    assert cli_main(["cache", "--dir", str(root), "clear"]) == 0
    assert "removed 3" in capsys.readouterr().out
    assert [p.name for p in pc.pipeline_dir(root).iterdir()] == [cachefs.LOCK_NAME]
    assert cli_main(["cache", "--dir", str(root), "verify"]) == 0


def test_bad_cache_dir_type_is_a_type_error():
    with pytest.raises(TypeError, match="cache_dir"):
        pc.pipeline_dir(42)  # type: ignore[arg-type]


def test_cli_uses_the_cache_dir_environment(root, key, driver_blob):
    put(root, key, pc.encode(key, driver_blob))
    out = run_cli("cache", "ls", "--no-device", env={"VKCORE_CACHE_DIR": str(root)})
    assert out.returncode == 0, out.stderr
    assert key.file_name() in out.stdout and "intact" in out.stdout
    assert run_cli("cache").returncode == 2
