"""The README's Python snippets run as written, and the values their comments show are
what they print."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from repo_paths import REPO

README = REPO / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_there_is_a_python_example():
    assert BLOCKS


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_python_block_runs_as_written(index, tmp_path):
    env = dict(os.environ, VKCORE_VALIDATION="1", VKCORE_CACHE_DIR=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(README.parent), env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-c", BLOCKS[index]],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr


def test_the_seed_values_in_the_comment_are_what_softmax_returns(device):
    import vkcore

    comment = re.search(r"# -> \[([^\]]*)\]", BLOCKS[0])
    assert comment, "the first snippet shows its result in a '# -> [...]' comment"
    shown = np.array([float(v) for v in comment.group(1).split(",")], np.float32)
    got = vkcore.softmax(np.array([1000, 1001, 1002], np.float32), device=device)
    np.testing.assert_array_equal(got, shown)
