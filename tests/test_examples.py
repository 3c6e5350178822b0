"""Every script in examples/ runs, on small sizes, from outside the repository.

The contract for an example: ``python examples/<name>.py --small`` finishes in seconds,
prints what it shows, and exits 0 (1 when one of its own checks fails).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples").glob("*.py"))
# What each example must print beyond exiting 0 (examples not listed: exit status only).
EXPECTED_OUTPUT = {
    "softmax_basics.py": ["0.09003057", "all checks passed"],
    "gaussian_blur.py": ["max |vkcore - numpy|", "(ok)", "cold/warm measured in every condition"],
    "attention_decode.py": ["logits vs numpy", "tokens/s", "all checks passed"],
    "lm_head_sampling.py": [
        "probability error",
        "greedy token agrees",
        "top-40 agreement",
        "time per token",
        "all checks passed",
    ],
}


def run_example(path: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["VKCORE_VALIDATION"] = "1"  # a validation message makes the example fail
    return subprocess.run(
        [sys.executable, str(path), "--small"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_there_are_examples():
    names = {p.name for p in EXAMPLES}
    assert {"softmax_basics.py", "lm_head_sampling.py"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(path, tmp_path):
    out = run_example(path, tmp_path)
    assert out.returncode == 0, f"{path.name} exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
    for text in EXPECTED_OUTPUT.get(path.name, []):
        assert text in out.stdout, f"{path.name} did not print {text!r}:\n{out.stdout}"


@pytest.mark.parametrize("script", ["gpu_check.sh", "coldwarm_gpu.sh"])
def test_gpu_scripts_refuse_to_run_without_the_nvidia_driver(script, tmp_path):
    """Without NVIDIA's ICD manifest the GPU scripts stop at once and say why, instead of
    letting lavapipe answer in the GPU's place."""
    if any(
        Path(d, "nvidia_icd.json").exists()
        for d in (
            "/usr/share/vulkan/icd.d",
            "/etc/vulkan/icd.d",
            "/usr/local/nvidia/share/vulkan/icd.d",
        )
    ):
        pytest.skip("this machine has NVIDIA's driver: the script would run for real")
    out = subprocess.run(
        ["bash", str(REPO / "examples" / script), str(tmp_path / "out")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "GPU_CHECK_ICD"},
    )
    assert out.returncode == 1
    assert "no nvidia_icd.json" in out.stderr
    assert not (tmp_path / "out").exists(), "nothing is written before the driver is found"
