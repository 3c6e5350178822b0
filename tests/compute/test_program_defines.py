"""GLSL defines are checked before anything is compiled: ``defines={"X": "1\\n#error"}``
was cut at the newline by the compiler and compiled silently; a name that is not an
identifier, or a value that is neither an int nor a one-line str, is refused naming
``defines``, on every path that takes defines (Program source, path, builtin, the
SPIR-V cache functions)."""

from __future__ import annotations

import numpy as np
import pytest

import vkcore
from vkcore import spirv
from vkcore.spirv import glslang

SOURCE = """#version 450
layout(local_size_x = 1) in;
layout(std430, binding = 0) buffer B { float b[]; };
void main() { b[0] = float(X); }
"""

BAD = [
    ({"X": "1\n#error"}, ValueError),
    ({"X": "1\r\n"}, ValueError),
    ({"X": "1\0"}, ValueError),
    ({"X": "1\n"}, ValueError),
    ({"X Y": 1}, ValueError),
    ({"1X": 1}, ValueError),
    ({"": 1}, ValueError),
    ({"X=2": 1}, ValueError),
    ({"X\n": 1}, ValueError),
    ({"Ä": 1}, ValueError),
    ({3: 1}, TypeError),
    ({"X": True}, TypeError),
    ({"X": 1.5}, TypeError),
    ({"X": None}, TypeError),
    ({"X": [1]}, TypeError),
    ({"X": b"1"}, TypeError),
]


def _paths(tmp_path, defines):
    shader = tmp_path / "s.comp"
    shader.write_text(SOURCE)
    return [
        lambda: vkcore.Program(SOURCE, defines=defines),
        lambda: vkcore.Program(path=shader, defines=defines),
        lambda: spirv.compile_source(SOURCE, defines=defines),
        lambda: vkcore.Program.builtin("softmax_online.comp", defines=defines),
        lambda: spirv.get("softmax_online.comp", defines),
    ]


@pytest.mark.parametrize(("defines", "error"), BAD, ids=[repr(d)[:20] for d, _ in BAD])
def test_a_bad_define_is_refused_naming_defines_on_every_path(
    tmp_path, monkeypatch, defines, error
):
    calls = []
    monkeypatch.setattr(glslang, "compile_file", lambda *a, **k: calls.append(a))
    for make in _paths(tmp_path, defines):
        with pytest.raises(error, match="defines"):
            make()
    assert not calls  # refused before the compiler ran


def test_good_defines_compile(device):
    for defines, want in [({"X": 3}, 3.0), ({"X": "2 + 5"}, 7.0), ({"X": np.int64(4)}, 4.0)]:
        prog = vkcore.Program(SOURCE, defines=defines, device=device)
        b = np.zeros(1, np.float32)
        prog(b)
        assert b[0] == want
