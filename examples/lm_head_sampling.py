"""LM-head sampling: INT8 weights on the device; each token is one sequence.

The seed's motivating case. A language model's last layer (the "LM head") turns a hidden
state of 4096 floats into one logit per vocabulary entry (32,000 here) with a
32,000 x 4096 matrix; softmax turns the logits into next-token probabilities, and a
sampler picks the token. This example

1. quantizes the weight to INT8, per output row (channel), symmetric, and keeps it on
   the device (131 MB instead of 524 MB of float32);
2. for each token records one ``vkcore.sequence``: the hidden state uploaded, the INT8
   matvec, ``vkcore.sample`` (temperature and top-k, drawn on the device), a greedy
   ``sample`` (temperature 0) and ``softmax_topk`` for the reported probabilities; one
   submission, then the token ids are read back;
3. a batched variant: B hidden states, B matvecs and one ``sample`` over the B rows of
   logits (a small Program puts the logits of each state in a row), in one sequence;
4. compares with the float32 computation in numpy: the probability error, whether the
   greedy token agrees, how much of the top-k set agrees, and the time per token.

    python examples/lm_head_sampling.py            # 32,000 x 4096, 8 tokens
    python examples/lm_head_sampling.py --small    # 2,000 x 512, 3 tokens (the tests)

Exits 1 if a check fails: the draws against vkcore.reference.sample (exact), the
probabilities against vkcore.reference.softmax_topk (1e-6), the RTN error bound on the
logits, the batched tokens against the one-by-one ones.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import numpy as np

import vkcore

# Logit spread of the synthetic model: std of the float32 logits for a unit hidden state.
LOGIT_STD = 3.0


@dataclass
class TokenResult:
    greedy: int  # argmax of the INT8 logits
    sampled: int  # the temperature + top-k draw
    greedy_agrees: bool
    topk_overlap: float  # |top-k(int8) & top-k(fp32)| / k
    prob_max_err: float  # max |p_i - p_ref_i| over the top-k set, temperature 1
    prob_tv: float  # 0.5 * sum of |p_i - p_ref_i| over the top-k set
    softmax_err: float  # softmax_topk vs vkcore.reference.softmax_topk, same logits
    seconds: float  # wall time of the whole step on the device path
    matvec_device_s: float | None
    softmax_device_s: float | None
    ok: bool


def fp32_reference(w: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Logits and probabilities the unquantized model gives, in numpy float32."""
    logits = w @ h
    e = np.exp(logits - logits.max())
    return logits, e / e.sum()


def top_k(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest values, largest first."""
    idx = np.argpartition(values, -k)[-k:]
    return idx[np.argsort(values[idx])[::-1]]


def one_token(dev, qt, w, h, k, temperature, seed) -> TokenResult:
    # --- the device path, one sequence: upload h, matvec, the draws, the probabilities
    t0 = time.perf_counter()
    with vkcore.sequence(device=dev):
        logits_t = vkcore.matvec(qt, h)  # h is uploaded when recorded
        sampled_t = vkcore.sample(logits_t, temperature=temperature, top_k=k, seed=seed)
        greedy_t = vkcore.sample(logits_t, temperature=0.0)
        probs_t, where_t = vkcore.softmax_topk(logits_t, k)
    sampled, greedy = int(sampled_t.numpy()), int(greedy_t.numpy())  # the one readback
    seconds = time.perf_counter() - t0
    probs, where = probs_t.numpy(), where_t.numpy()

    # --- checks: the kernels against their references on the same logits
    logits = logits_t.numpy()
    want = vkcore.reference.sample(logits, temperature=temperature, top_k=k, seed=seed)
    want_p, want_i = vkcore.reference.softmax_topk(logits, k)
    draws_ok = sampled == int(want) and greedy == int(np.argmax(logits))
    softmax_err = float(np.abs(probs - want_p).max())
    same_set = bool(np.array_equal(where, want_i))
    # RTN bound per output: |y_i - y_ref_i| <= s_i / 2 * ||x||_1 (plus float32 rounding).
    ref_logits, ref_probs = fp32_reference(w, h)
    bound = qt.scale.astype(np.float64) / 2 * np.abs(h).sum() * (1 + 1e-3) + 1e-3
    within_bound = bool(np.all(np.abs(logits - ref_logits) <= bound))

    # --- against the float32 model in numpy
    overlap = len(set(where.tolist()) & set(top_k(ref_logits, k).tolist())) / k
    diff = np.abs(probs.astype(np.float64) - ref_probs[where])
    ok = draws_ok and softmax_err <= 1e-6 and same_set and within_bound
    return TokenResult(
        greedy=greedy,
        sampled=sampled,
        greedy_agrees=greedy == int(np.argmax(ref_logits)),
        topk_overlap=overlap,
        prob_max_err=float(diff.max()),
        prob_tv=float(diff.sum() / 2),
        softmax_err=softmax_err,
        seconds=seconds,
        matvec_device_s=None,
        softmax_device_s=None,
        ok=ok,
    )


# Row j of the (B, m) result is column j of the batched matvec's (m, B) output.
TRANSPOSE = """#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint m; uint b; } pc;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.m * pc.b) return;
    uint row = i / pc.m, col = i % pc.m;  // y[row][col] = x[col][row]
    y[i] = x[col * pc.b + row];
}
"""


def batched(dev, qt, hs, temperature, k, seed, singles) -> tuple[list[int], float, bool]:
    """B hidden states: one batched matvec, the logits put in rows, one sample call."""
    m, b = qt.shape[0], len(hs)
    transpose = vkcore.Program(TRANSPOSE, device=dev)
    rows = vkcore.Tensor.empty((b, m), np.float32, dev)
    stacked = np.ascontiguousarray(np.stack(hs, axis=1))  # (n, B)
    t0 = time.perf_counter()
    with vkcore.sequence(device=dev):
        logits = vkcore.matvec(qt, stacked)  # (m, B)
        transpose(logits, rows, groups=-(-m * b // 64), m=m, b=b)
        tokens_t = vkcore.sample(rows, temperature=temperature, top_k=k, seed=seed)
    tokens = tokens_t.numpy().tolist()
    seconds = time.perf_counter() - t0
    want = vkcore.reference.sample(rows.numpy(), temperature=temperature, top_k=k, seed=seed)
    return tokens, seconds, tokens == want.tolist() and len(tokens) == len(singles)


def numpy_seconds_per_token(w: np.ndarray, hs: list[np.ndarray]) -> float:
    """The float32 numpy baseline for the same step: W @ h, softmax, argmax."""
    t0 = time.perf_counter()
    for h in hs:
        _, p = fp32_reference(w, h)
        int(np.argmax(p))
    return (time.perf_counter() - t0) / len(hs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="2,000 x 512 and 3 tokens (the tests)")
    parser.add_argument("--tokens", type=int, default=None, help="tokens to decode (default 8)")
    parser.add_argument("--top-k", type=int, default=40, help="k of top-k sampling (default 40)")
    parser.add_argument("--temperature", type=float, default=0.8, help="sampling temperature")
    args = parser.parse_args()
    vocab, hidden = (2000, 512) if args.small else (32_000, 4096)
    tokens = args.tokens or (3 if args.small else 8)
    if not 1 <= args.top_k <= vocab or args.temperature <= 0 or tokens < 1:
        parser.error("need 1 <= --top-k <= vocabulary size, --temperature > 0, --tokens >= 1")

    rng = np.random.default_rng(0)
    print(f"LM head {vocab:,} x {hidden}: synthetic float32 weights, logit std ~{LOGIT_STD}")
    w = rng.standard_normal((vocab, hidden), dtype=np.float32)
    w *= np.float32(LOGIT_STD / np.sqrt(hidden))
    hs = [rng.standard_normal(hidden, dtype=np.float32) for _ in range(tokens + 1)]

    with vkcore.Device() as dev:
        print(f"device: {dev.info.name}")
        t0 = time.perf_counter()
        qt = vkcore.quantize(w, bits=8, symmetric=True, per_channel=True, device=dev)
        mib = vocab * hidden / 2**20
        print(
            f"quantized to INT8 per channel on the device in {time.perf_counter() - t0:.2f} s "
            f"({mib:.0f} MiB of int8 instead of {4 * mib:.0f} MiB of float32)"
        )
        one_token(dev, qt, w, hs[0], args.top_k, args.temperature, 0)  # warm-up: pipelines
        results = [
            one_token(dev, qt, w, h, args.top_k, args.temperature, seed)
            for seed, h in enumerate(hs[1:], start=1)
        ]
        batched(dev, qt, hs[1:], args.temperature, args.top_k, 0, results)  # warm-up
        tokens, batch_s, batch_ok = batched(
            dev, qt, hs[1:], args.temperature, args.top_k, 7, results
        )
        dev.check()
    report(results, args.top_k, numpy_seconds_per_token(w, hs[1:]))
    print(
        f"  batched               {len(tokens)} rows in one sequence: {batch_s * 1e3:.2f} ms, "
        f"tokens {tokens} ({'match' if batch_ok else 'DIFFER FROM'} vkcore.reference.sample)"
    )
    ok = all(r.ok for r in results) and batch_ok
    print("\nall checks passed" if ok else "\nSOME CHECKS FAILED")
    return 0 if ok else 1


def report(results: list[TokenResult], k: int, numpy_s: float) -> None:
    print(f"\n{len(results)} tokens (after one warm-up token), INT8 path vs float32 numpy:")
    print(f"  greedy tokens         {[r.greedy for r in results]}")
    print(f"  sampled tokens        {[r.sampled for r in results]}")
    print(
        f"  probability error     max |p - p_fp32| = {max(r.prob_max_err for r in results):.2e}, "
        f"total variation = {max(r.prob_tv for r in results):.2e} (worst token)"
    )
    print(
        f"  softmax_topk alone    max |error| = {max(r.softmax_err for r in results):.1e} "
        "(same logits, float64 reference)"
    )
    print(f"  greedy token agrees   {sum(r.greedy_agrees for r in results)}/{len(results)} tokens")
    print(
        f"  {f'top-{k} agreement':<21} {np.mean([r.topk_overlap for r in results]):.1%} of the set "
        f"(worst token {min(r.topk_overlap for r in results):.1%})"
    )
    per_token = np.mean([r.seconds for r in results])
    print(f"  time per token        {per_token * 1e3:.2f} ms end to end (one sequence each)")
    print(f"  numpy float32         {numpy_s * 1e3:.2f} ms per token (W @ h, softmax, argmax)")


if __name__ == "__main__":
    sys.exit(main())
