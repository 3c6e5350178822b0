"""LM-head sampling: INT8 weights on the device, INT8 matvec, online softmax, sampling.

The seed's motivating case. A language model's last layer (the "LM head") turns a hidden
state of 4096 floats into one logit per vocabulary entry (32,000 here) with a
32,000 x 4096 matrix; softmax turns the logits into next-token probabilities, and a
sampler picks the token. This example

1. quantizes the weight to INT8, per output row (channel), symmetric, and keeps it on
   the device (131 MB instead of 524 MB of float32);
2. for each token: uploads a hidden state, runs the weight-only INT8 matvec (logits stay
   on the device), the online softmax over the 32,000 logits, then greedy decoding and
   temperature + top-k sampling (the top-k renormalization is a softmax over logits with
   every other entry masked to -inf);
3. compares with the float32 computation in numpy: the probability error, whether the
   greedy token agrees, how much of the top-k set agrees, and the time per token.

    python examples/lm_head_sampling.py            # 32,000 x 4096, 8 tokens
    python examples/lm_head_sampling.py --small    # 2,000 x 512, 3 tokens (the tests)

Exits 1 if a check fails (softmax accuracy, the RTN error bound on the logits, masking).
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
    prob_max_err: float  # max_i |p_i - p_ref_i| at temperature 1
    prob_tv: float  # total variation distance, 0.5 * sum_i |p_i - p_ref_i|
    softmax_err: float  # the kernel alone: softmax of the same logits vs float64 numpy
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


def sample_top_k(
    dev, logits: np.ndarray, k: int, temperature: float, rng
) -> tuple[int, np.ndarray]:
    """Temperature + top-k sampling: keep the k largest logits, mask the rest with -inf,
    softmax on the device (masked entries come out exactly 0), draw one token."""
    scaled = (logits / np.float32(temperature)).astype(np.float32)
    keep = top_k(scaled, k)
    masked = np.full_like(scaled, -np.inf)
    masked[keep] = scaled[keep]
    probs = vkcore.softmax(masked, device=dev)
    cdf = np.cumsum(probs[keep], dtype=np.float64)
    token = int(keep[min(np.searchsorted(cdf, rng.random() * cdf[-1]), k - 1)])
    return token, probs


def one_token(dev, qt, w, h, k, temperature, rng) -> TokenResult:
    # --- the device path, timed as a whole: upload, matvec, softmax, decode, sample
    t0 = time.perf_counter()
    x = vkcore.asarray(h, device=dev)
    logits_t = vkcore.matvec(qt, x)  # Tensor in, Tensor out: logits stay on the device
    matvec_s = dev.submitter.last_device_seconds
    probs_t = vkcore.softmax(logits_t)
    softmax_s = dev.submitter.last_device_seconds
    logits, probs = logits_t.numpy(), probs_t.numpy()
    greedy = int(np.argmax(logits))
    sampled, topk_probs = sample_top_k(dev, logits, k, temperature, rng)
    seconds = time.perf_counter() - t0
    for t in (x, logits_t, probs_t):
        if t.buffer is not None:
            t.buffer.destroy()

    # --- against the float32 model in numpy
    ref_logits, ref_probs = fp32_reference(w, h)
    overlap = len(set(top_k(logits, k)) & set(top_k(ref_logits, k))) / k
    diff = np.abs(probs.astype(np.float64) - ref_probs)

    # --- checks that must hold whatever the quantization error
    softmax_err = float(np.abs(probs - vkcore.reference.softmax(logits)).max())
    # RTN bound per output: |y_i - y_ref_i| <= s_i / 2 * ||x||_1 (plus float32 rounding).
    bound = qt.scale.astype(np.float64) / 2 * np.abs(h).sum() * (1 + 1e-3) + 1e-3
    within_bound = bool(np.all(np.abs(logits - ref_logits) <= bound))
    masked_ok = np.count_nonzero(topk_probs) <= k and topk_probs[sampled] > 0
    ok = softmax_err <= 1e-6 and within_bound and bool(masked_ok)
    return TokenResult(
        greedy=greedy,
        sampled=sampled,
        greedy_agrees=greedy == int(np.argmax(ref_logits)),
        topk_overlap=overlap,
        prob_max_err=float(diff.max()),
        prob_tv=float(diff.sum() / 2),
        softmax_err=softmax_err,
        seconds=seconds,
        matvec_device_s=matvec_s,
        softmax_device_s=softmax_s,
        ok=ok,
    )


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
        one_token(dev, qt, w, hs[0], args.top_k, args.temperature, rng)  # warm-up: pipelines, JIT
        results = [one_token(dev, qt, w, h, args.top_k, args.temperature, rng) for h in hs[1:]]
        dev.check()
    report(results, args.top_k, numpy_seconds_per_token(w, hs[1:]))
    ok = all(r.ok for r in results)
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
        f"  softmax kernel alone  max |error| = {max(r.softmax_err for r in results):.1e} "
        "(same logits, float64 reference)"
    )
    print(f"  greedy token agrees   {sum(r.greedy_agrees for r in results)}/{len(results)} tokens")
    print(
        f"  {f'top-{k} agreement':<21} {np.mean([r.topk_overlap for r in results]):.1%} of the set "
        f"(worst token {min(r.topk_overlap for r in results):.1%})"
    )
    per_token = np.mean([r.seconds for r in results])
    device = [(r.matvec_device_s, r.softmax_device_s) for r in results]
    line = f"  time per token        {per_token * 1e3:.2f} ms end to end"
    if all(m is not None and s is not None for m, s in device):
        mv = np.mean([m for m, _ in device]) * 1e3
        sm = np.mean([s for _, s in device]) * 1e3
        line += f" (device: matvec {mv:.2f} ms, softmax {sm:.2f} ms)"
    print(line)
    print(f"  numpy float32         {numpy_s * 1e3:.2f} ms per token (W @ h, softmax, argmax)")


if __name__ == "__main__":
    sys.exit(main())
