"""A small random decoder generating tokens with its KV cache on the device.

Each layer: INT8 projections ``q, k, v = Wq x, Wk x, Wv x`` (``vkcore.matvec``), the new
key and value appended to the layer's ``vkcore.KVCache`` (float16, grouped-query: fewer
KV heads than query heads), ``vkcore.attention`` of the query heads over the cache, and
the output projection added to the residual (``matvec(Wo, a, bias=x)``). Then the LM
head and a greedy ``vkcore.sample``. Every token is one ``vkcore.sequence``: one
submission, one readback of the token.

numpy computes the same decoder in float32 from the same dequantized weights and the
float16-rounded cache at every step, fed the tokens vkcore chose; the example checks the
logits agree (within 3e-3 of their spread: INT8 matvec sums in another order over
several layers) and that the greedy token agrees wherever the
numpy top two are further apart than that, then prints tokens per second for both.

    python examples/attention_decode.py            # 4 layers, hidden 512, 64 tokens
    python examples/attention_decode.py --small    # 2 layers, hidden 64, 12 tokens

Exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import numpy as np

import vkcore


@dataclass(frozen=True)
class Config:
    vocab: int
    hidden: int
    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int
    tokens: int


FULL = Config(vocab=4000, hidden=512, layers=4, q_heads=8, kv_heads=2, head_dim=64, tokens=64)
SMALL = Config(vocab=64, hidden=64, layers=2, q_heads=4, kv_heads=2, head_dim=16, tokens=12)


class Model:
    """Random INT8 weights on the device, and their dequantized float32 values for numpy."""

    def __init__(self, cfg: Config, rng: np.random.Generator, dev: vkcore.Device) -> None:
        self.cfg = cfg
        h, qd, kd = cfg.hidden, cfg.q_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        self.embed = rng.standard_normal((cfg.vocab, h)).astype(np.float32)
        shapes = {"q": (qd, h), "k": (kd, h), "v": (kd, h), "o": (h, qd)}
        self.layers = []
        for _ in range(cfg.layers):
            layer = {}
            for name, (m, n) in shapes.items():
                w = (rng.standard_normal((m, n)) / np.sqrt(n)).astype(np.float32)
                qt = vkcore.quantize(w, device=dev)
                layer[name] = (qt, vkcore.dequantize(qt))
            self.layers.append(layer)
        w = (rng.standard_normal((cfg.vocab, h)) * 3 / np.sqrt(h)).astype(np.float32)
        qt = vkcore.quantize(w, device=dev)
        self.head = (qt, vkcore.dequantize(qt))


def vkcore_step(model: Model, caches: list[vkcore.KVCache], x: np.ndarray, dev: vkcore.Device):
    """One token as one sequence: returns its logits Tensor and its Tokens handle."""
    cfg = model.cfg
    with vkcore.sequence(device=dev):
        h = vkcore.asarray(x, device=dev)
        for layer, cache in zip(model.layers, caches, strict=True):
            q = vkcore.matvec(layer["q"][0], h)
            k = vkcore.matvec(layer["k"][0], h)
            v = vkcore.matvec(layer["v"][0], h)
            cache.append(
                k.reshape(cfg.kv_heads, 1, cfg.head_dim), v.reshape(cfg.kv_heads, 1, cfg.head_dim)
            )
            a = vkcore.attention(q.reshape(cfg.q_heads, 1, cfg.head_dim), cache, causal=True)
            h = vkcore.matvec(layer["o"][0], a.reshape(cfg.q_heads * cfg.head_dim), bias=h)
        logits = vkcore.matvec(model.head[0], h)
        token = vkcore.sample(logits, temperature=0)
    return logits, token


def numpy_step(model: Model, caches: list[list[np.ndarray]], x: np.ndarray) -> np.ndarray:
    """The same step in float32 numpy; ``caches`` holds each layer's keys and values."""
    cfg = model.cfg
    g = cfg.q_heads // cfg.kv_heads
    h = x
    for layer, cache in zip(model.layers, caches, strict=True):
        q = (layer["q"][1] @ h).reshape(cfg.kv_heads, g, cfg.head_dim)
        k = (layer["k"][1] @ h).reshape(cfg.kv_heads, 1, cfg.head_dim)
        v = (layer["v"][1] @ h).reshape(cfg.kv_heads, 1, cfg.head_dim)
        # The cache holds float16: round as the device stores it.
        cache[0] = np.concatenate([cache[0], k.astype(np.float16).astype(np.float32)], axis=1)
        cache[1] = np.concatenate([cache[1], v.astype(np.float16).astype(np.float32)], axis=1)
        s = q @ cache[0].transpose(0, 2, 1) * np.float32(1 / np.sqrt(cfg.head_dim))
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        a = (p @ cache[1]).reshape(-1)
        h = layer["o"][1] @ a + h
    return model.head[1] @ h


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a tiny model (the tests)")
    args = parser.parse_args()
    cfg = SMALL if args.small else FULL
    rng = np.random.default_rng(0)
    dev = vkcore.default_device()
    model = Model(cfg, rng, dev)
    caches = [
        vkcore.KVCache(cfg.kv_heads, cfg.head_dim, cfg.tokens, dtype="float16", device=dev)
        for _ in range(cfg.layers)
    ]
    empty = np.zeros((cfg.kv_heads, 0, cfg.head_dim), np.float32)
    np_caches = [[empty, empty] for _ in range(cfg.layers)]
    token, failures, worst, vk_s, np_s = 0, 0, 0.0, 0.0, 0.0
    generated = []
    for step in range(cfg.tokens):
        x = model.embed[token]
        start = time.perf_counter()
        logits, handle = vkcore_step(model, caches, x, dev)
        token = int(handle.numpy())
        vk_s += time.perf_counter() - start
        start = time.perf_counter()
        expect = numpy_step(model, np_caches, x)
        np_s += time.perf_counter() - start
        got = logits.numpy()
        tol = 3e-3 * float(expect.std())
        err = float(np.abs(got - expect).max())
        worst = max(worst, err / tol)
        top2 = np.sort(expect)[-2:]
        clear = top2[1] - top2[0] > 2 * tol
        if err > tol or (clear and token != int(np.argmax(expect))):
            failures += 1
            print(f"step {step}: logits differ by {err:.2e} (tolerance {tol:.2e}) or token")
        generated.append(token)
    assert all(len(c) == cfg.tokens for c in caches)
    print(f"tokens: {generated}")
    print(f"logits vs numpy: worst error {worst:.3f} of the tolerance")
    print(f"vkcore: {cfg.tokens / vk_s:.1f} tokens/s (one sequence per token, cache on device)")
    print(f"numpy:  {cfg.tokens / np_s:.1f} tokens/s (float32)")
    if failures:
        print(f"{failures} steps failed their checks")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
