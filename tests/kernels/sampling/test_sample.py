"""vkcore.sample: the same draws as vkcore.reference.sample for fixed seeds, frequencies
against the exact restricted softmax, the argmax cases and the argument checks.

Statistical checks: each token's count over N independent draws is held to
|count - N q| <= Z sqrt(N q (1 - q)) with Z = 5.3, a two-sided normal tail of 1.2e-7 per
token; with at most 8 tokens in each of 6 cases below, the chance that a correct sampler
fails for a given seed is at most 6e-6 (union bound). The seeds are fixed, so a run
either passes or fails the same way every time.
"""

import math

import numpy as np
import pytest

import vkcore
from vkcore import reference

Z = 5.3


def perturbed_margin(x, seed, temperature, top_k, top_p):
    """Per row, the reference's gap between the best and second-best perturbed values
    (a tie closer than float32 rounding could go either way on a device)."""
    flat = np.asarray(x, np.float32).reshape(-1, np.shape(x)[-1])
    keep = reference.topk_allowed(flat, temperature, top_k, top_p)
    s = flat * np.float32(1 / temperature) + reference.gumbel(seed, *flat.shape)
    s = np.sort(np.where(keep, s, -np.inf), axis=-1)
    return s[:, -1] - s[:, -2] if flat.shape[1] > 1 else np.full(flat.shape[0], np.inf)


CASES = [
    dict(),
    dict(temperature=0.7),
    dict(top_k=40),
    dict(top_k=50, top_p=0.5, temperature=1.3),
    dict(top_p=0.9),  # the nucleus over the whole (sorted) row
]


@pytest.mark.parametrize("kw", CASES, ids=str)
def test_same_draws_as_the_reference(device, rng, kw):
    x = (rng.standard_normal((64, 32_000)) * 3).astype(np.float32)
    if "top_p" in kw and "top_k" not in kw:
        x = x[:4]  # the full sort costs ~0.1 s per row here
    for seed, rows in ((12345, x), (0, x[:8]), (2**64 - 1, x[:8])):
        got = vkcore.sample(rows, seed=seed, device=device, **kw)
        ref = reference.sample(rows, seed=seed, **kw)
        assert got.dtype == np.int64 and got.shape == (rows.shape[0],)
        margin = perturbed_margin(
            rows, seed, kw.get("temperature", 1.0), kw.get("top_k"), kw.get("top_p")
        )
        clear = margin > 1e-5
        np.testing.assert_array_equal(got[clear], ref[clear])


def test_long_row_and_tensor_input(device, rng):
    x = (rng.standard_normal(1 << 20) * 2).astype(np.float32)
    got = vkcore.sample(x, seed=7, device=device)
    assert isinstance(got, np.integer) and got == reference.sample(x, seed=7)
    t = vkcore.asarray(x.reshape(2, -1), device=device)
    np.testing.assert_array_equal(
        vkcore.sample(t, seed=3, top_k=40), reference.sample(t.numpy(), seed=3, top_k=40)
    )


def test_greedy(device, rng):
    x = np.round(rng.standard_normal((32, 300)) * 2).astype(np.float32)  # tied maxima
    x[0, 5:] = -np.inf
    argmax = np.argmax(x, axis=-1)  # the lowest index among equal maxima
    for kw in (
        dict(temperature=0),
        dict(top_k=1),
        dict(temperature=0, top_p=0.3),
        dict(temperature=0.0, top_k=7),
    ):
        np.testing.assert_array_equal(vkcore.sample(x, seed=1, device=device, **kw), argmax)


def test_seeds(device, rng):
    x = np.zeros((256, 1000), np.float32)
    a = vkcore.sample(x, seed=99, device=device)
    np.testing.assert_array_equal(a, vkcore.sample(x, seed=99, device=device))
    assert not np.array_equal(a, vkcore.sample(x, seed=100, device=device))
    fresh = vkcore.sample(x, device=device)  # seed=None: os.urandom
    assert fresh.shape == (256,) and fresh.min() >= 0 and fresh.max() < 1000
    assert len(np.unique(a)) > 150  # rows draw independently


def exact_distribution(logits, temperature, top_k, top_p):
    keep = reference.topk_allowed(logits[None], temperature, top_k, top_p)[0]
    z = logits.astype(np.float64) / temperature
    q = np.where(keep, np.exp(z - z[keep].max()), 0.0)
    return q / q.sum()


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(temperature=0.5),
        dict(temperature=2.0),
        dict(top_k=3),
        dict(top_p=0.8),
        dict(top_k=5, top_p=0.6),
    ],
    ids=str,
)
def test_frequencies_match_the_restricted_softmax(device, kw):
    row = np.array([1.0, 0.5, 2.0, -1.0, 0.0, 1.5, -np.inf, 0.2], np.float32)
    draws = 40_000
    x = np.broadcast_to(row, (draws, row.size)).copy()  # every row an independent draw
    tokens = vkcore.sample(x, seed=2024, device=device, **kw)
    counts = np.bincount(tokens, minlength=row.size)
    q = exact_distribution(row, kw.get("temperature", 1.0), kw.get("top_k"), kw.get("top_p"))
    assert counts[q == 0].sum() == 0, "a token outside the allowed set was drawn"
    bound = Z * np.sqrt(draws * q * (1 - q))
    assert np.all(np.abs(counts - draws * q) <= bound + 1e-9), (counts, draws * q)


def test_philox_known_answers():
    """Random123's known-answer vectors for Philox4x32-10."""
    cases = [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((2**32 - 1,) * 4, (2**32 - 1,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ]
    for counter, key, expected in cases:
        got = reference.philox4x32(np.array(counter, np.uint32), key)
        assert [int(v) for v in got] == list(expected)
    u = reference.uniforms(5, 3, 1000)
    assert u.min() > 0 and u.max() < 1 and abs(float(u.mean()) - 0.5) < 0.02
    assert np.isfinite(reference.gumbel(5, 3, 1000)).all()


def test_rows_without_a_distribution(device):
    x = np.zeros((3, 10), np.float32)
    for value in (np.nan, np.inf):
        y = x.copy()
        y[2, 4] = value
        for kw in (dict(), dict(top_k=3), dict(top_k=20 // 2, top_p=0.5), dict(temperature=0)):
            with pytest.raises(ValueError, match=r"logits row 2 has a NaN or \+inf logit"):
                vkcore.sample(y, seed=0, device=device, **kw)
    y = x.copy()
    y[1] = -np.inf
    for kw in (dict(), dict(top_k=3), dict(temperature=0)):
        with pytest.raises(ValueError, match="logits row 1 has no finite logit"):
            vkcore.sample(y, seed=0, device=device, **kw)
    with pytest.raises(ValueError, match="logits has no finite logit"):
        vkcore.sample(np.full(4, -np.inf, np.float32), device=device)


def test_bad_arguments(device):
    x = np.zeros((2, 10), np.float32)
    bad = [
        (dict(temperature=-1.0), ValueError, "temperature must be a finite number >= 0"),
        (dict(temperature=math.nan), ValueError, "temperature must be a finite number"),
        (dict(temperature=math.inf), ValueError, "temperature must be a finite number"),
        (dict(temperature=True), TypeError, "temperature must be a real number"),
        (dict(temperature="1"), TypeError, "temperature must be a real number"),
        (dict(temperature=1e-40), ValueError, "temperature must be 0 or at least"),
        (dict(top_k=0), ValueError, r"top_k must be in 1\.\.10"),
        (dict(top_k=11), ValueError, r"top_k must be in 1\.\.10"),
        (dict(top_k=True), TypeError, "top_k must be an int"),
        (dict(top_k=2.0), TypeError, "top_k must be an int"),
        (dict(top_p=0.0), ValueError, r"top_p must be in \(0, 1\]"),
        (dict(top_p=1.5), ValueError, r"top_p must be in \(0, 1\]"),
        (dict(top_p=math.nan), ValueError, r"top_p must be in \(0, 1\]"),
        (dict(top_p=False), TypeError, "top_p must be a real number"),
        (dict(seed=-1), ValueError, r"seed must be in \[0, 2\*\*64\)"),
        (dict(seed=2**64), ValueError, r"seed must be in \[0, 2\*\*64\)"),
        (dict(seed=True), TypeError, "seed must be an int or None"),
        (dict(seed=1.0), TypeError, "seed must be an int or None"),
    ]
    for kw, exc, msg in bad:
        with pytest.raises(exc, match=msg):
            vkcore.sample(x, device=device, **kw)
    with pytest.raises(ValueError, match="at least one dimension"):
        vkcore.sample(np.float32(1), device=device)
    with pytest.raises(ValueError, match="at least one token"):
        vkcore.sample(np.zeros((2, 0), np.float32), device=device)
    for arr in (np.zeros(4, bool), np.zeros(4, complex), "abc"):
        with pytest.raises(TypeError, match="logits must"):
            vkcore.sample(arr, device=device)
    assert vkcore.sample(np.zeros((0, 4), np.float32), device=device).shape == (0,)
    assert vkcore.sample(np.zeros((1, 1), np.float32), seed=0, device=device).tolist() == [0]
    assert vkcore.sample(
        np.zeros(4, np.float32), top_p=1.0, top_k=4, seed=0, device=device
    ) == reference.sample(np.zeros(4, np.float32), top_p=1.0, top_k=4, seed=0)
