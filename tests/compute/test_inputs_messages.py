"""A bad value echoed in an error message is cut to a readable size: a 100,000-character
string or a 100,000-element list given as an argument was printed whole (600 KB of
message), and an int too long to print made the message itself raise ("Exceeds the limit
(4300 digits)") instead of naming the argument. Every public entry point that echoes a
value, with each kind of oversized value."""

from __future__ import annotations

import numpy as np
import pytest

import vkcore
from vkcore.device.memory.buffer import Buffer

HUGE_STR = "x" * 100_000
HUGE_LIST = list(range(100_000))
HUGE_FLOATS = [0.5] * 100_000
HUGE_INT = 10**5000
LIMIT = 400  # characters a message may take

SRC = """#version 450
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const int R = 1;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { float a; uint n; vec2 v; } pc;
void main() { y[0] = x[0] * pc.a * float(R); }
"""


@pytest.fixture(scope="module")
def prog(device):
    return vkcore.Program(SRC, device=device)


def _cases(prog, dev):
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    ok = {"a": 1.0, "n": 1, "v": [1, 2]}
    w = np.ones((2, 2), np.float32)
    return {
        "Device selector": ("device", lambda: vkcore.Device(HUGE_STR)),
        "Device selector index": ("selector", lambda: vkcore.Device(-HUGE_INT)),
        "Device validation": ("validation", lambda: vkcore.Device(validation=HUGE_STR)),
        "Tensor.empty shape str": ("shape", lambda: vkcore.Tensor.empty(HUGE_STR, "f4", dev)),
        "Tensor.empty shape floats": (
            "shape",
            lambda: vkcore.Tensor.empty(HUGE_FLOATS, "f4", dev),
        ),
        "Tensor.empty negative": ("shape", lambda: vkcore.Tensor.empty((-1,) * 50_000, "f4", dev)),
        "Tensor.empty dtype": ("dtype", lambda: vkcore.Tensor.empty((2,), HUGE_STR, dev)),
        "asarray dtype": ("dtype", lambda: vkcore.asarray([1], dtype=HUGE_STR, device=dev)),
        "groups list": ("groups", lambda: prog(x, y, groups=HUGE_LIST, **ok)),
        "groups str": ("groups", lambda: prog(x, y, groups=HUGE_STR, **ok)),
        "push value list": ("'v'", lambda: prog(x, y, **dict(ok, v=HUGE_LIST))),
        "push name": ("push constant", lambda: prog(x, y, **ok, **{HUGE_STR: 1})),
        "push uint huge": ("'n'", lambda: prog(x, y, **dict(ok, n=HUGE_INT))),
        "push float huge": ("'a'", lambda: prog(x, y, **dict(ok, a=HUGE_INT))),
        "spec key": ("spec", lambda: vkcore.Program(SRC, spec={HUGE_STR: 1}, device=dev)),
        "spec value": ("spec: R", lambda: vkcore.Program(SRC, spec={"R": HUGE_STR}, device=dev)),
        "spec value huge": (
            "spec: R",
            lambda: vkcore.Program(SRC, spec={"R": HUGE_INT}, device=dev),
        ),
        "workgroup list": (
            "workgroup",
            lambda: vkcore.Program(SRC, workgroup=HUGE_LIST, device=dev),
        ),
        "workgroup str": ("workgroup", lambda: vkcore.Program(SRC, workgroup=HUGE_STR, device=dev)),
        "path": ("path", lambda: vkcore.Program(path=HUGE_STR, device=dev)),
        "path missing": (
            "path",
            lambda: vkcore.Program(path="/nonexistent/" + "y" * 200, device=dev),
        ),
        "builtin name": ("File name", lambda: vkcore.Program.builtin(HUGE_STR, device=dev)),
        "defines value": ("defines", lambda: vkcore.Program(SRC, defines={"X": HUGE_STR + "\n"})),
        "defines name": ("defines", lambda: vkcore.Program(SRC, defines={HUGE_STR + " ": 1})),
        "softmax algorithm": (
            "algorithm",
            lambda: vkcore.softmax(x, algorithm=HUGE_STR, device=dev),
        ),
        "softmax axis": ("axis", lambda: vkcore.softmax(np.ones((2, 2)), axis=(0,) * 50_000)),
        "topk k huge": ("k", lambda: vkcore.topk(x, HUGE_INT, device=dev)),
        "sample seed huge": ("seed", lambda: vkcore.sample(x, seed=HUGE_INT, device=dev)),
        "quantize bits huge": ("bits", lambda: vkcore.quantize(w, bits=HUGE_INT, device=dev)),
        "quantize group huge": ("group_size", lambda: vkcore.quantize(w, group_size=HUGE_INT)),
        "matvec activations": (
            "activations",
            lambda: vkcore.matvec(vkcore.quantize(w, device=dev), np.ones(2), activations=HUGE_STR),
        ),
        "Buffer purpose": ("purpose", lambda: Buffer(dev, 16, purpose=HUGE_STR)),
        "register_variants": ("name", lambda: vkcore.spirv.register_variants(HUGE_STR, [])),
        "write data": ("data", lambda: vkcore.Tensor.empty((1,), "int8", dev).write([HUGE_INT])),
        "asarray data": ("data", lambda: vkcore.asarray([[1.0] * 10, HUGE_LIST], device=dev)),
        "buffer argument": ("buffer 0", lambda: prog([[1.0], HUGE_LIST], y, **ok)),
    }


CASE_NAMES = list(_cases(None, None))


@pytest.mark.parametrize("case", CASE_NAMES)
def test_an_oversized_value_is_cut_in_the_message(device, prog, case):
    names, call = _cases(prog, device)[case]
    with pytest.raises((TypeError, ValueError, OSError)) as info:
        call()
    text = str(info.value)
    assert len(text) <= LIMIT, text[:300]
    assert names in text, text
    assert "Exceeds the limit" not in text
