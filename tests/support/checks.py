"""Assertions shared by several test modules."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import vkcore
from vkcore import reference


def assert_matvec_matches(y: np.ndarray, want: np.ndarray, activations: str) -> None:
    """Integer modes bit for bit; the float mode within float32 summation error."""
    if activations == "float":
        scale = float(np.abs(want).max()) + 1.0
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5 * scale)
    else:
        np.testing.assert_array_equal(y, want)


def assert_every_matvec_mode(device: vkcore.Device, w: np.ndarray, x: np.ndarray) -> None:
    """quantize (symmetric and not) then matvec in every mode, and the float32 kernel,
    against the references: the integer modes bit for bit."""
    for symmetric in (True, False):
        qt = vkcore.quantize(w, symmetric=symmetric, device=device)
        q, s, z = reference.quantize(w, 8, symmetric, True)
        for activations in ("int8", "uint8"):
            y = vkcore.matvec(qt, x, activations=activations)
            assert np.array_equal(y, reference.matvec(q, s, z, x, activations=activations))
        y = vkcore.matvec(qt, x)
        np.testing.assert_allclose(y, reference.matvec(q, s, z, x), rtol=1e-5, atol=1e-5)
        qt.release()
    f32 = vkcore.F32Matrix(w, device=device)
    np.testing.assert_allclose(vkcore.matvec_f32(f32, x), w @ x, rtol=1e-5, atol=1e-5)
    f32.release()


PROB_ATOL = 1e-6  # softmax_topk probabilities against the float64 reference


def check_topk(x, k, got, axis=-1):
    """topk's (values, indices), numpy or Tensors, against vkcore.reference.topk: indices
    exactly, values bit for bit (NaN payloads and the sign of zero included)."""
    values, indices = got
    if isinstance(values, vkcore.Tensor):
        values, indices = values.numpy(), indices.numpy()
    ref_v, ref_i = reference.topk(x, k, axis=axis)
    assert indices.dtype == np.int64 and values.dtype == np.float32
    assert indices.shape == ref_i.shape and values.shape == ref_v.shape
    np.testing.assert_array_equal(indices, ref_i)
    np.testing.assert_array_equal(values.view(np.uint32), ref_v.view(np.uint32))


def check_softmax_topk(x, k, got):
    """softmax_topk's (probs, indices), numpy or Tensors: indices exactly, NaN where the
    reference has NaN, probabilities within PROB_ATOL."""
    probs, indices = got
    if isinstance(probs, vkcore.Tensor):
        probs, indices = probs.numpy(), indices.numpy()
    ref_p, ref_i = reference.softmax_topk(x, k)
    np.testing.assert_array_equal(indices, ref_i)
    assert probs.dtype == np.float32
    np.testing.assert_array_equal(np.isnan(probs), np.isnan(ref_p))
    fin = ~np.isnan(ref_p)
    assert np.abs(probs[fin].astype(np.float64) - ref_p[fin]).max(initial=0) <= PROB_ATOL


def python_path_with(first: object) -> str:
    """PYTHONPATH for a child process: ``first`` (the checkout whose vkcore it must run),
    then whatever this run's PYTHONPATH already holds (where `vulkan` may come from)."""
    return os.pathsep.join(filter(None, [str(first), os.environ.get("PYTHONPATH")]))


def run_worker(
    worker: Path, *args: str, validation: str, timeout: float, **env_extra: str
) -> tuple[str, str]:
    """Run a worker script of tests/support in a child process on this checkout's vkcore
    (VKCORE_VALIDATION=``validation``, plus ``env_extra``); asserts it exited 0 (a crash
    shows as a negative status: the signal) and returns its stdout and the output shown
    in a failure message."""
    root = str(Path(vkcore.__file__).resolve().parents[1])  # this vkcore, not another
    env = dict(os.environ, VKCORE_VALIDATION=validation, PYTHONPATH=python_path_with(root))
    env.update(env_extra)
    out = subprocess.run(
        [sys.executable, str(worker), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=worker.parent,
    )
    text = out.stdout + out.stderr[-3000:]
    assert out.returncode == 0, f"exit status {out.returncode} (negative: a signal)\n{text}"
    return out.stdout, text
