"""The built-in kernels on the public compute API: Program.builtin, Program.record and the
interfaces reflected at build time (vkcore.spirv.interface_file)."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

import vkcore
from vkcore import spirv
from vkcore.device.memory.buffer import Buffer
from vkcore.kernels import programs
from vkcore.spirv import interface_file, reflect
from vkcore.tools.bench.program_cases import TINY


def _all_variants():
    return spirv.variants()


def test_every_declared_variant_round_trips_through_the_interface_file():
    for name, defines in _all_variants():
        iface = reflect.reflect(spirv.get(name, defines).code)
        assert interface_file.from_json(json.loads(json.dumps(interface_file.to_json(iface)))) == (
            iface
        ), (name, defines)


def test_a_written_file_is_read_back_for_exactly_its_modules(tmp_path):
    name, defines = _all_variants()[0]
    code = spirv.get(name, defines).code
    interface_file.write(
        tmp_path / interface_file.FILE_NAME, {interface_file.digest(code): reflect.reflect(code)}
    )
    interface_file._load.cache_clear()
    try:
        assert interface_file.shipped(code, tmp_path) == reflect.reflect(code)
        other = spirv.get(*_all_variants()[1]).code
        assert interface_file.shipped(other, tmp_path) is None  # not listed: reflect it
    finally:
        interface_file._load.cache_clear()


@pytest.mark.parametrize(
    "damage",
    [
        "not json",
        json.dumps([1, 2]),
        json.dumps({"format": 99, "modules": {}}),
        json.dumps({"format": interface_file.FORMAT}),
    ],
)
def test_a_damaged_file_is_a_warning_and_reflection(tmp_path, caplog, damage):
    code = spirv.get(*_all_variants()[0]).code
    _assert_ignored(tmp_path, caplog, code, damage)


def _assert_ignored(folder, caplog, code: bytes, text: str) -> None:
    """A shipped file holding ``text`` gives no interface for ``code``, with a warning."""
    (folder / interface_file.FILE_NAME).write_text(text)
    interface_file._load.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="vkcore"):
            assert interface_file.shipped(code, folder) is None
        assert "ignored" in caplog.text
    finally:
        interface_file._load.cache_clear()


def _entry(code: bytes) -> dict:
    return interface_file.to_json(reflect.reflect(code))


@pytest.mark.parametrize(
    "field, value",
    [
        ("push_size", -4),
        ("push_size", "24"),
        ("push_size", True),
        ("local_size", [0, 1, 1]),
        ("local_size", [64, 1]),
        ("local_size_ids", [0, "x", None]),
        ("entry_point", 7),
        ("bindings", [[0, 0, "sampler", "x", True, False, 0, 4]]),
        ("bindings", [[0, 0, "storage_buffer", "x", 1, False, 0, 4]]),
        ("bindings", [[0, 0, "storage_buffer", "x", True, False, 0]]),
        ("push", [["n", 0, "double", 1]]),
        ("push", [["n", 0, "uint", 0]]),
        ("spec", [[0, "N", "uint", 1.5]]),
        ("spec", [[0, "B", "bool", 1]]),
        ("bindings", {"0": 1}),
        ("capabilities", [-1]),
        ("capabilities", 10),
    ],
)
def test_every_bad_field_of_an_entry_is_refused(tmp_path, caplog, field, value):
    code = spirv.get(*_all_variants()[0]).code
    entry = _entry(code)
    entry[field] = value
    body = {"format": interface_file.FORMAT, "modules": {interface_file.digest(code): entry}}
    _assert_ignored(tmp_path, caplog, code, json.dumps(body))


def test_a_builtin_program_has_the_reflected_interface(device):
    prog = vkcore.Program.builtin(
        "softmax_roofline.comp", defines={"TEXEL": 0}, workgroup=64, device=device
    )
    assert prog.interface == reflect.reflect(prog.code.code)
    assert prog.workgroup == (64, 1, 1)
    assert [b.binding for b in prog.bindings] == [0, 1]
    assert prog.name == "softmax_roofline.comp TEXEL=0"


def test_a_builtin_program_runs_on_numpy_like_a_users(device):
    """softmax_roofline copies x to y (n vec4s, chunk per workgroup): a numpy array bound
    to the written binding takes the result."""
    prog = vkcore.Program.builtin(
        "softmax_roofline.comp", defines={"TEXEL": 0}, workgroup=64, device=device
    )
    x = np.arange(1024, dtype=np.float32)
    y = np.full(1024, np.nan, dtype=np.float32)
    prog(x, y, groups=2, push=np.array([200, 100], dtype="<u4").tobytes())
    np.testing.assert_array_equal(y[:800], x[:800])
    assert np.isnan(y[800:]).all()  # past n: untouched


def test_identical_builtin_programs_share_one_pipeline(device):
    a = vkcore.Program.builtin("softmax_roofline.comp", defines={"TEXEL": 0}, device=device)
    b = vkcore.Program.builtin("softmax_roofline.comp", defines={"TEXEL": 0}, device=device)
    assert a.pipeline is b.pipeline
    c = programs.program(device, "softmax_roofline.comp", {"TEXEL": 0})
    assert programs.program(device, "softmax_roofline.comp", {"TEXEL": 0}) is c
    assert c.pipeline is a.pipeline


def _roofline(device) -> vkcore.Program:
    return vkcore.Program.builtin(
        "softmax_roofline.comp", defines={"TEXEL": 0}, workgroup=64, device=device
    )


PUSH = np.array([1, 64], dtype="<u4").tobytes()


def test_record_makes_a_step_that_runs(device):
    prog = _roofline(device)
    x = vkcore.asarray(np.ones(64, np.float32), device=device)
    y = vkcore.Tensor.empty((64,), np.float32, device)
    step = prog.record(x, y.buffer, groups=1, push=PUSH)
    assert step.pipeline is prog.pipeline and step.groups == (1, 1, 1)
    device.submitter.run([step])


def test_record_refuses_a_wrong_number_of_buffers(device):
    prog = _roofline(device)
    x = vkcore.asarray(np.ones(64, np.float32), device=device)
    with pytest.raises(TypeError, match="takes 2 buffers"):
        prog.record(x, groups=1, push=PUSH)


def test_record_refuses_numpy_arrays_and_other_objects(device):
    prog = _roofline(device)
    x = vkcore.asarray(np.ones(64, np.float32), device=device)
    with pytest.raises(TypeError, match=r"buffer 1 .* must be a vkcore Buffer or Tensor"):
        prog.record(x, np.ones(64, np.float32), groups=1, push=PUSH)


def test_record_refuses_a_released_buffer(device):
    prog = _roofline(device)
    x = vkcore.asarray(np.ones(64, np.float32), device=device)
    dead = Buffer(device, 256)
    dead.destroy()
    with pytest.raises(ValueError, match=r"buffer 1 .* released"):
        prog.record(x, dead, groups=1, push=PUSH)


def test_record_refuses_a_buffer_of_another_device(device):
    prog = _roofline(device)
    x = vkcore.asarray(np.ones(64, np.float32), device=device)
    with vkcore.Device() as other:
        y = Buffer(other, 256)
        with pytest.raises(ValueError, match=r"buffer 1 .* another device"):
            prog.record(x, y, groups=1, push=PUSH)
        y.destroy()


def test_record_refuses_a_buffer_smaller_than_an_element(device):
    prog = vkcore.Program(
        """#version 450
        layout(local_size_x = 1) in;
        layout(std430, binding = 0) buffer B { vec4 head; vec2 tail[]; };
        void main() { head = vec4(1.0); }
        """,
        device=device,
    )
    small = Buffer(device, 8)
    with pytest.raises(ValueError, match="smaller than the block's fixed part"):
        prog.record(small)
    # A recorded buffer may end in a partial element (the call path may not).
    prog.record(Buffer(device, 16 + 6))
    with pytest.raises(ValueError, match="whole elements"):
        prog(np.zeros(5, np.float32))  # 20 bytes: the head and half a vec2


def test_record_checks_the_push_block_and_groups(device):
    prog = _roofline(device)
    x = vkcore.asarray(np.ones(64, np.float32), device=device)
    with pytest.raises(ValueError, match="push must be 8 bytes"):
        prog.record(x, x, groups=1, push=b"\0" * 4)
    limit = device.info.max_compute_work_group_count[0]
    with pytest.raises(ValueError, match="maxComputeWorkGroupCount"):
        prog.record(x, x, groups=limit + 1, push=PUSH)


def test_builtin_refuses_an_unknown_shader(device):
    with pytest.raises(FileNotFoundError):
        vkcore.Program.builtin("no_such_shader.comp", device=device)


def test_the_kernels_package_imports_every_kernel_module():
    """A module ``import vkcore`` leaves out would declare its variants too late for the
    wheel (spirv.variants lists what imported modules declared)."""
    import pkgutil
    import subprocess
    import sys

    import vkcore.kernels

    found = pkgutil.walk_packages(vkcore.kernels.__path__, "vkcore.kernels.")
    names = sorted(m.name for m in found)  # the family packages' modules too
    assert "vkcore.kernels.softmax.split" in names
    code = f"import sys, vkcore; print([n for n in {names!r} if n not in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


SCALE = TINY  # y = a x over n floats


def test_calls_of_changing_sizes_on_one_program_are_each_right(device):
    """Small numpy arguments keep their staging buffer between calls: a new size, or a
    size past the kept limit, must still stage exactly that call's data."""
    from vkcore.compute import program_args

    prog = vkcore.Program(SCALE, device=device)
    rng = np.random.default_rng(3)
    big = program_args.HELD_STAGING_BYTES // 4 + 64
    for n in (256, 64, 256, big, 256, big, 1):
        x = rng.standard_normal(n).astype(np.float32)
        y = np.full(n, np.nan, np.float32)
        prog(x, y, groups=-(-n // 64), a=3.0, n=n)
        np.testing.assert_array_equal(y, np.float32(3.0) * x)


def test_a_dropped_program_frees_its_staging_buffers(device):
    import gc
    import weakref

    x = np.ones(256, np.float32)
    y = np.empty_like(x)
    counts = []
    for _ in range(12):
        prog = vkcore.Program(SCALE, device=device)
        prog(x, y, groups=4, a=1.0, n=256)
        held = [weakref.ref(b) for b in prog._held.values()]
        assert len(held) == 2  # both arguments kept their staging buffer
        del prog
        gc.collect()
        assert all(r() is None for r in held)
        counts.append(device.live_objects()["buffers"])
    assert counts[-1] <= counts[1], counts  # no growth from one program to the next


def test_an_unknown_shader_is_not_counted_as_requested():
    """The completeness check (test_wheel) lists what kernels asked for: a failed lookup
    of a file vkcore does not have is not a request."""
    with pytest.raises(FileNotFoundError):
        spirv.get("no_such_shader_either.comp", {})
    assert ("no_such_shader_either.comp", {}) not in spirv.requested()


def test_repeated_calls_take_each_calls_data_and_push_values(device, rng):
    """A repeated call reuses its Dispatch and recording: new data and new push values
    must still be what runs."""
    prog = vkcore.Program(SCALE, device=device)
    y = np.empty(256, np.float32)
    for a in (2.0, 2.0, -1.5, 3.0, 3.0):
        x = rng.standard_normal(256).astype(np.float32)
        prog(x, y, groups=4, a=a, n=256)
        np.testing.assert_array_equal(y, np.float32(a) * x)
    prog(x, y, groups=2, a=1.0, n=128)  # another grid and count: only the first half
    np.testing.assert_array_equal(y[:128], x[:128])


def test_a_call_after_its_staging_buffers_were_destroyed_stages_anew(device, rng):
    prog = vkcore.Program(SCALE, device=device)
    x = rng.standard_normal(256).astype(np.float32)
    y = np.empty_like(x)
    prog(x, y, groups=4, a=1.0, n=256)
    for buf in list(prog._held.values()):
        buf.destroy()
    x2 = rng.standard_normal(256).astype(np.float32)
    prog(x2, y, groups=4, a=2.0, n=256)
    np.testing.assert_array_equal(y, np.float32(2.0) * x2)


def test_a_program_keeps_no_tensor_alive_after_its_call(device):
    import gc
    import weakref

    prog = vkcore.Program(SCALE, device=device)
    x = vkcore.asarray(np.ones(256, np.float32), device=device)
    y = vkcore.Tensor.empty((256,), np.float32, device)
    prog(x, y, groups=4, a=2.0, n=256)
    np.testing.assert_array_equal(y.numpy(), np.full(256, 2.0, np.float32))
    refs = [weakref.ref(x.buffer), weakref.ref(y.buffer)]
    del x, y
    gc.collect()
    assert all(r() is None for r in refs)
