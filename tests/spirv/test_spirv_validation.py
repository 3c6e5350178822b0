"""Users' SPIR-V is validated before any reaches the driver (docs/programs.md#validation):
spirv-val where installed, else vkcore's structural checks; damaged modules are refused
with vkcore.InvalidSpirvError and a fuzzed module never crashes the process.

Damaged modules run in forked children of tests/support/spirv_fuzz_worker.py (several
crashed lavapipe), with each validator and with and without the validation layer.
"""

from __future__ import annotations

import os
import struct
import subprocess

import devices
import numpy as np
import pytest
from checks import run_worker
from repo_paths import SUPPORT
from spirv_fuzz_worker import RESULT

import vkcore
from vkcore import spirv
from vkcore.spirv import structure, validate

WORKER = SUPPORT / "spirv_fuzz_worker.py"
# Mutations per child run of the fuzz test; VKCORE_SPIRV_FUZZ raises it (e.g. 2000).
FUZZ = int(os.environ.get("VKCORE_SPIRV_FUZZ", "10"))
SPIRV_VAL = validate.validator() is not None
VALIDATORS = [
    pytest.param(
        "spirv-val", marks=pytest.mark.skipif(not SPIRV_VAL, reason="spirv-val not installed")
    ),
    "structural",
]


def _worker(args: list[str], validator: str, layer: str) -> list[str]:
    spirv_val = "1" if validator == "spirv-val" else "0"
    stdout, text = run_worker(
        WORKER, *args, validation=layer, timeout=600, VKCORE_SPIRV_VAL=spirv_val
    )
    lines = stdout.strip().splitlines()
    assert lines and lines[-1] == "OK", f"a child died of a signal:\n{text}"
    return [line[len(RESULT) :] for line in lines if line.startswith(RESULT)]


@pytest.mark.parametrize("validator", VALIDATORS)
def test_damaged_modules_are_refused_before_the_driver(validator):
    lines = _worker(["examples"], validator, "0")  # (the fuzz test runs both layers)
    outcomes = {line.split()[0]: line.split(" ", 2)[2] for line in lines}
    want = "refused spirv-val" if validator == "spirv-val" else "refused vkcore's"
    assert len(outcomes) == 16
    wrong = {name: got for name, got in outcomes.items() if got != want}
    assert not wrong, f"not refused by {validator}: {wrong}"


@pytest.mark.parametrize("layer", ["1", "0"], ids=["validated", "plain"])
@pytest.mark.parametrize("validator", VALIDATORS)
def test_fuzzed_modules_run_or_raise_and_never_crash(validator, layer):
    first = {"spirv-val": 0, "structural": 10_000}[validator] + (0 if layer == "1" else 5_000)
    lines = _worker(["fuzz", str(first), str(FUZZ)], validator, layer)
    assert len(lines) == FUZZ
    for line in lines:
        outcome = line.split()[2]
        assert outcome in ("ran", "refused", "raised"), line
        if outcome == "raised":  # a clear Python error, never one from a dying binding
            assert "Error" in line.split()[3], line


# ------------------------------------------------------------------ in this process
GOOD = """#version 450
layout(local_size_x = 4) in;
layout(std430, binding = 0) buffer Y { uint y[]; };
void main() { y[gl_GlobalInvocationID.x] += 1u; }
"""


@pytest.fixture(params=["spirv-val", "structural"])
def which(request, monkeypatch):
    if request.param == "spirv-val" and not SPIRV_VAL:
        pytest.skip("spirv-val not installed")
    monkeypatch.setenv("VKCORE_SPIRV_VAL", "1" if request.param == "spirv-val" else "0")
    return request.param


def test_a_valid_module_runs_and_a_damaged_one_says_why(device, which):
    code = spirv.compile_source(GOOD).code
    y = np.arange(4, dtype=np.uint32)
    vkcore.Program(spirv=code, device=device)(y)
    assert y.tolist() == [1, 2, 3, 4]
    with pytest.raises(vkcore.InvalidSpirvError) as caught:
        vkcore.Program(spirv=code[:-4], device=device)
    err = caught.value
    assert isinstance(err, ValueError)
    assert err.validator == ("spirv-val" if which == "spirv-val" else validate.STRUCTURAL)
    assert err.messages and all(m for m in err.messages)
    assert str(err).startswith(f"spirv: {err.validator} rejected the SPIR-V module")


def test_without_spirv_val_on_path_the_structural_checks_decide(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # a folder with no spirv-val
    assert validate.validator() is None
    with pytest.raises(vkcore.InvalidSpirvError, match="vkcore's structural checks"):
        validate.check(b"\x03\x02\x23\x07" + bytes(16), 1 << 22 | 3 << 12)


def test_a_validated_module_is_validated_once(monkeypatch, which):
    code = spirv.compile_source(GOOD.replace("1u", "7u")).code
    runs = []
    real_run, real_check = subprocess.run, structure.check
    monkeypatch.setattr(
        validate.subprocess, "run", lambda *a, **k: runs.append(1) or real_run(*a, **k)
    )
    monkeypatch.setattr(structure, "check", lambda *a: runs.append(1) or real_check(*a))
    api = 1 << 22 | 3 << 12
    for _ in range(3):
        assert validate.check(code, api) == (
            "spirv-val" if which == "spirv-val" else validate.STRUCTURAL
        )
    assert len(runs) == 1


def test_the_kernels_modules_pass_the_structural_checks():
    """The checks refuse nothing valid that vkcore's own shaders use (every 50th variant)."""
    variants = spirv.variants()[::50]
    assert len(variants) >= 8
    for shader, defines in variants:
        structure.check(spirv.get(shader, defines).code)


@pytest.mark.parametrize(
    ("version", "env", "minor"),
    [("1.0.0", "vulkan1.0", 0), ("1.1.170", "vulkan1.1", 3), ("1.2.296", "vulkan1.2", 5)]
    + [("1.3.224", "vulkan1.3", 6), ("1.4.318", "vulkan1.3", 6)],
)
def test_the_target_follows_the_devices_vulkan_version(version, env, minor):
    major, mid, patch = (int(p) for p in version.split("."))
    api = major << 22 | mid << 12 | patch
    assert (validate.target_env(api), validate.max_spirv_minor(api)) == (env, minor)


@pytest.mark.parametrize("name", devices.NAMES)
def test_every_recorded_device_gets_a_target_spirv_val_knows(name):
    api = devices.device_info(devices.load(name)).api_version
    assert validate.target_env(api) in ("vulkan1.0", "vulkan1.1", "vulkan1.2", "vulkan1.3")


def test_a_newer_spirv_than_the_device_takes_is_refused(device, monkeypatch):
    monkeypatch.setenv("VKCORE_SPIRV_VAL", "0")
    code = bytearray(spirv.compile_source(GOOD).code)
    code[4:8] = (0x00010600).to_bytes(4, "little")  # SPIR-V 1.6
    with pytest.raises(vkcore.InvalidSpirvError, match="1.0 to 1.3"):
        validate.check(bytes(code), 1 << 22 | 1 << 12)  # a Vulkan 1.1 device


# --------------------------------------------------------------------------- entry points
def _words(text: str) -> list[int]:
    raw = text.encode() + b"\0"
    raw += b"\0" * (-len(raw) % 4)
    return list(struct.unpack(f"<{len(raw) // 4}I", raw))


def entry_module(entries: list[tuple[str, int]], *, model: int = 5) -> bytes:
    """SPIR-V 1.3 with one function per ``(name, local size x)`` entry point (execution
    ``model``, 5: GLCompute); "main" writes 1.0 to x[gl_GlobalInvocationID.x], the others
    return."""
    void, fn, flt, uint, v3, pv3, gid, arr, blk, pblk, buf, pf, c0, one, load, x, ptr = range(
        100, 117
    )
    ins = [(17, [1]), (14, [0, 1])]  # Shader; Logical GLSL450
    funcs = [1 + 10 * i for i in range(len(entries))]
    for (name, _), f in zip(entries, funcs, strict=True):
        ins.append((15, [model, f, *_words(name), gid]))
    for (_, size), f in zip(entries, funcs, strict=True):
        ins.append((16, [f, 17, size, 1, 1]))  # LocalSize
    ins += [
        (71, [gid, 11, 28]),  # BuiltIn GlobalInvocationId
        (71, [arr, 6, 4]),  # ArrayStride 4
        (72, [blk, 0, 35, 0]),  # Offset 0
        (71, [blk, 2]),  # Block
        (71, [buf, 34, 0]),
        (71, [buf, 33, 0]),
        (19, [void]),
        (33, [fn, void]),
        (22, [flt, 32]),
        (21, [uint, 32, 0]),
        (23, [v3, uint, 3]),
        (32, [pv3, 1, v3]),
        (59, [pv3, gid, 1]),
        (29, [arr, flt]),
        (30, [blk, arr]),
        (32, [pblk, 12, blk]),
        (59, [pblk, buf, 12]),
        (32, [pf, 12, flt]),
        (43, [uint, c0, 0]),
        (43, [flt, one, 0x3F800000]),
    ]
    for i, f in enumerate(funcs):
        ins += [(54, [void, f, 0, fn]), (248, [f + 1])]
        if entries[i][0] == "main":
            ins += [
                (61, [v3, load, gid]),
                (81, [uint, x, load, 0]),
                (65, [pf, ptr, buf, c0, x]),
                (62, [ptr, one]),
            ]
        ins += [(253, []), (56, [])]
    words = [0x07230203, 0x00010300, 0, 200, 0]
    for op, operands in ins:
        words += [(len(operands) + 1) << 16 | op, *operands]
    return struct.pack(f"<{len(words)}I", *words)


@pytest.mark.parametrize("validator", VALIDATORS)
@pytest.mark.parametrize(
    "entries",
    [[("main", 1), ("other", 64)], [("other", 64), ("main", 1)], [("main", 1)]],
    ids=["main first", "main second", "main alone"],
)
def test_several_entry_points_reflect_main(validator, entries, device, monkeypatch):
    """The pipeline runs "main": its local size is the Program's, whichever entry point
    comes first and whatever the others declare."""
    monkeypatch.setenv(validate.SPIRV_VAL_ENV, "1" if validator == "spirv-val" else "0")
    prog = vkcore.Program(spirv=entry_module(entries), device=device)
    assert prog.workgroup == (1, 1, 1) and prog.interface.entry_point == "main"
    x = np.zeros(8, np.float32)
    prog(x, groups=3)
    np.testing.assert_array_equal(x, [1, 1, 1, 0, 0, 0, 0, 0])


@pytest.mark.parametrize("validator", VALIDATORS)
@pytest.mark.parametrize(
    ("blob", "words"),
    [
        (entry_module([("other", 1)]), 'GLCompute named "main"'),
        (entry_module([("mainx", 1), ("other", 2)]), 'GLCompute named "main"'),
        (entry_module([("main", 1)]) + b"\0", "not whole 32-bit words"),
        (entry_module([("main", 1)]) + b"\0\0\0", "not whole 32-bit words"),
    ],
    ids=["no main", "none named main", "one byte more", "three bytes more"],
)
def test_modules_the_pipeline_cannot_run_are_refused(validator, blob, words, tmp_path):
    """Without a GLCompute "main" (the name every pipeline runs; lavapipe crashed making
    the pipeline of one) or with a partial last word (a struct.error), a module is an
    InvalidSpirvError with either validator. In a child process: a regression crashes."""
    module = tmp_path / "module.spv"
    module.write_bytes(blob)
    child = (
        "import sys, vkcore\n"
        "try:\n"
        "    vkcore.Program(spirv=open(sys.argv[1], 'rb').read())\n"
        "except vkcore.InvalidSpirvError as exc:\n"
        "    print('refused', str(exc).replace(chr(10), ' '))\n"
    )
    script = tmp_path / "child.py"
    script.write_text(child)
    spirv_val = {validate.SPIRV_VAL_ENV: "1" if validator == "spirv-val" else "0"}
    layer = os.environ.get("VKCORE_VALIDATION", "1")
    stdout, text = run_worker(script, str(module), validation=layer, timeout=120, **spirv_val)
    assert stdout.startswith("refused") and words in stdout, text


@pytest.mark.parametrize(
    "make", [memoryview, lambda b: np.frombuffer(b, np.uint32), lambda b: b.hex(), list]
)
def test_spirv_of_another_type_is_refused_naming_what_it_takes(make, device):
    """bytes and bytearray are taken alike; any other holder of the words is a TypeError
    that says what to pass (never a validator's or the driver's error)."""
    code = entry_module([("main", 1)])
    for blob in (code, bytearray(code)):
        assert vkcore.Program(spirv=blob, device=device).workgroup == (1, 1, 1)
    with pytest.raises(TypeError, match=r"spirv must be bytes or a bytearray .*tobytes"):
        vkcore.Program(spirv=make(code), device=device)
