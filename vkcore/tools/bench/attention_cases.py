"""Attention on the bench: a decode step over a float16 KV cache and a causal prefill,
against numpy float32 (``q @ k.T``, softmax, ``@ v``, the query heads of a KV head as
one product), and PyTorch's CPU ``scaled_dot_product_attention`` as a column where torch
is installed (no target). The decode row's bytes are the cache it reads, for the roof
column."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from statistics import median
from typing import Any

import numpy as np

import vkcore
from vkcore.device.device import Device
from vkcore.tools.bench.baselines import kernel_copy_bandwidth
from vkcore.tools.bench.harness import BLAS_BLOCK, BLAS_SETTLE, Comparison, side_by_side

DECODE = (32, 8, 128, 4096)  # query heads, KV heads, D, cached positions
PREFILL = (8, 1024, 64)  # heads, Lq = Lk, D
DECODE_QUICK = (32, 8, 128, 512)
PREFILL_QUICK = (8, 128, 64)


def numpy_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """float32 numpy attention, grouped query heads reshaped onto their KV head."""
    hq, lq, d = q.shape
    hkv, lk, _ = k.shape
    g = hq // hkv
    qg = q.reshape(hkv, g * lq, d)
    s = qg @ k.transpose(0, 2, 1) * np.float32(1 / np.sqrt(d))
    if causal:
        i = np.tile(np.arange(lq), g)[:, None]
        s = np.where(np.arange(lk)[None, :] <= i + lk - lq, s, np.float32(-np.inf))
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    s /= s.sum(axis=-1, keepdims=True)
    return (s @ v).reshape(hq, lq, -1)


def torch_attention(causal: bool) -> Callable[..., Any] | None:
    """PyTorch's CPU scaled_dot_product_attention, or None without torch."""
    if importlib.util.find_spec("torch") is None:
        return None
    import torch  # noqa: PLC0415 - optional

    def call(q: Any, k: Any, v: Any) -> Any:
        g = q.shape[0] // k.shape[0]
        kk, vv = k.repeat_interleave(g, 0), v.repeat_interleave(g, 0)
        with torch.no_grad():
            return torch.nn.functional.scaled_dot_product_attention(q, kk, vv, is_causal=causal)

    return call


def attention_rows(
    dev: Device, repeats: int, rng: Any, *, quick: bool = False
) -> Iterator[Comparison]:
    yield from _decode(dev, repeats, rng, DECODE_QUICK if quick else DECODE)
    yield from _prefill(dev, repeats, rng, PREFILL_QUICK if quick else PREFILL)


def _decode(
    dev: Device, repeats: int, rng: Any, sizes: tuple[int, int, int, int]
) -> Iterator[Comparison]:
    hq, hkv, d, n = sizes
    k = rng.standard_normal((hkv, n, d), dtype=np.float32)
    v = rng.standard_normal((hkv, n, d), dtype=np.float32)
    q = rng.standard_normal((hq, 1, d), dtype=np.float32)
    cache = vkcore.KVCache(hkv, d, n, dtype="float16", device=dev)
    cache.append(k, v)
    qt = vkcore.asarray(q, device=dev)

    def step() -> None:
        out = vkcore.attention(qt, cache)
        out.numpy()

    shape = (1, hq, hkv, d, n)
    base, cand, dev_s = side_by_side(
        lambda: numpy_attention(q, k, v, False),
        step,
        repeats,
        device=dev,
        block=BLAS_BLOCK,
        settle=BLAS_SETTLE,
    )
    title = "attention decode vs numpy float32 (wall, float16 cache on the device)"
    yield Comparison(
        "attention_decode_vs_numpy",
        title,
        shape,
        "wall",
        "numpy q@k.T softmax @v",
        "vkcore attention",
        base,
        cand,
        dev_s,
        min_bytes=2 * hkv * n * d * 2,
    )
    yield from _torch_row("attention_decode_vs_torch", shape, q, k, v, False, step, repeats, dev)
    cache.release()


def _prefill(
    dev: Device, repeats: int, rng: Any, sizes: tuple[int, int, int]
) -> Iterator[Comparison]:
    h, n, d = sizes
    q, k, v = (rng.standard_normal((h, n, d), dtype=np.float32) for _ in range(3))
    tensors = [vkcore.asarray(x, device=dev) for x in (q, k, v)]

    def step() -> None:
        vkcore.attention(*tensors, causal=True).numpy()

    shape = (h, n, n, d)
    base, cand, dev_s = side_by_side(
        lambda: numpy_attention(q, k, v, True),
        step,
        max(3, repeats // 2),
        device=dev,
        block=BLAS_BLOCK,
        settle=BLAS_SETTLE,
    )
    yield Comparison(
        "attention_prefill_vs_numpy",
        "attention causal prefill vs numpy float32 (wall)",
        shape,
        "wall",
        "numpy q@k.T softmax @v",
        "vkcore attention",
        base,
        cand,
        dev_s,
        min_bytes=4 * h * n * d * 4,
    )
    yield from _torch_row("attention_prefill_vs_torch", shape, q, k, v, True, step, repeats, dev)


def _torch_row(
    group: str,
    shape: tuple[int, ...],
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    causal: bool,
    step: Callable[[], None],
    repeats: int,
    dev: Device,
) -> Iterator[Comparison]:
    torch_call = torch_attention(causal)
    if torch_call is None:
        return
    import torch  # noqa: PLC0415 - optional

    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    base, cand, dev_s = side_by_side(
        lambda: torch_call(tq, tk, tv),
        step,
        max(3, repeats // 2),
        device=dev,
        block=BLAS_BLOCK,
        settle=BLAS_SETTLE,
    )
    yield Comparison(
        group,
        f"attention vs torch scaled_dot_product_attention (wall, {group.split('_')[1]})",
        shape,
        "wall",
        "torch sdpa (CPU)",
        "vkcore attention",
        base,
        cand,
        dev_s,
    )


def decode_floor(dev: Device, repeats: int) -> float:
    """Seconds the decode row's cache read takes at the copy kernel's bandwidth on ``dev``
    (a timed device): no decode kernel here can be faster, so ``numpy / floor`` bounds
    the decode row's ratio on this machine."""
    _, hkv, d, n = DECODE
    rates = kernel_copy_bandwidth(dev, repeats)
    return 2 * hkv * n * d * 2 / median(rates) if rates else float("nan")


def main() -> None:
    """``python -m vkcore.tools.bench.attention_cases``: the attention rows of ``vkcore
    bench`` alone, on the default device, then the decode row's floor (its cache read at
    the copy kernel's bandwidth) and the ratio that floor would give."""
    with Device(timed=True) as dev:
        decode_numpy = None
        for c in attention_rows(dev, 7, np.random.default_rng(0)):
            base, cand = c.baseline_median or 0.0, c.candidate_median or 0.0
            if c.group == "attention_decode_vs_numpy":
                decode_numpy = base
            print(
                f"{c.group:28s} {c.baseline} {base * 1e3:8.1f} ms   {c.candidate} "
                f"{cand * 1e3:8.1f} ms   ratio {c.ratio:.2f}x"
            )
        floor = decode_floor(dev, 7)
        best = f"{decode_numpy / floor:.2f}x" if decode_numpy else "-"
        print(
            f"decode floor: the {DECODE[1]}x{DECODE[3]}x{DECODE[2]} float16 cache read at the "
            f"copy kernel's bandwidth takes {floor * 1e3:.2f} ms: at best {best} numpy here"
        )


if __name__ == "__main__":
    main()
