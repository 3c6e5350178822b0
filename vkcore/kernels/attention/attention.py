"""``vkcore.attention``: softmax(q k^T * scale + mask) v on the online softmax
(contract: docs/attention.md).

One kernel (shaders/attention.comp) takes tiles of query rows of a KV head against
splits of the keys; with one split it writes the normalized rows, with several (few
queries over many keys: decoding) it writes partial states that a second pass merges in
split order (shaders/attention_merge.comp). The grid is :mod:`.plan`'s. Scores exist only
in shared memory: the device memory of a call is its inputs, its output and, with
splits, ``rows * splits * (Dv + 4)`` floats of partial states.

numpy inputs larger than one storage binding are computed in pieces that fit
(:mod:`.pieces`); Tensors, and calls inside a sequence, larger than one binding are
refused with a ValueError naming them.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from vkcore import spirv
from vkcore.compute.tensor import Tensor, asarray, check_on_device, device_for
from vkcore.device.device import Device
from vkcore.device.memory.buffer import Buffer
from vkcore.device.memory.pools import buffer_pool
from vkcore.kernels import common as c
from vkcore.kernels import programs, storage, variants
from vkcore.kernels.attention import operands as ops
from vkcore.kernels.attention import pieces, plan
from vkcore.kernels.attention.kvcache import DTYPES, PER_WORD, KVCache

MERGE_WORKGROUP = 64
TEXEL_FORMAT = "rgba32ui"  # attention_lanes.comp reads k and v rows as uvec4s
variants.register(
    "attention.comp", spirv.define_grid(KV=[0, 1, 2], MASK=[0, 1]), exact=False, reduces=False
)
_LANES_GRID = {"KV": [0, 1, 2], "MASK": [0, 1], "TEXEL": [0, 1]}
variants.register(
    "attention_lanes.comp",
    spirv.define_grid(**_LANES_GRID, SHUFFLE=[0]),
    exact=False,
    reduces=True,
)
# A shuffle needs subgroup operations (plan.shuffles_weights): no shared-memory twin.
variants.register(
    "attention_lanes.comp",
    spirv.define_grid(**_LANES_GRID, SHUFFLE=[1]),
    exact=False,
    reduces=False,
)
variants.register("attention_merge.comp", [{}], exact=False, reduces=False)


@dataclass(frozen=True)
class KV:
    """Keys and values on the device as the kernel reads them."""

    kind: str  # a KVCache dtype; float32 for plain arrays
    k: Buffer
    v: Buffer
    k_scales: Buffer
    v_scales: Buffer
    rows: int  # rows per KV head (the cache's capacity, or Lk)
    words: int  # k words per row
    vwords: int


def attention(
    q: Any,
    k: Any,
    v: Any = None,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: Any = None,
    out: Any = None,
    device: Device | None = None,
) -> Any:
    """``softmax(q k^T * scale + mask) v`` per query row; numpy in, numpy out (Tensors in,
    Tensor out; a Tensor inside a :func:`vkcore.sequence`).

    ``q`` is ``(..., Hq, Lq, D)``; ``k`` is ``(..., Hkv, Lk, D)`` with ``v`` ``(..., Hkv,
    Lk, Dv)``, or a :class:`KVCache` (``v`` omitted) whose first ``len(cache)`` positions
    are the keys. Semantics: docs/attention.md.
    """
    causal = ops.check_causal(causal)
    if isinstance(k, KVCache):
        if v is not None:
            raise TypeError("v must be omitted when k is a vkcore.KVCache (it holds the values)")
        device_for(k.device, device, "cache")  # a device= other than the cache's is refused
        return _over_cache(q, k, scale, causal, mask, out)
    if v is None:
        raise TypeError("v is required when k is an array (or pass a vkcore.KVCache as k)")
    args = [c.float_input(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v"))]
    tensors = [isinstance(a, Tensor) for a in args]
    if any(tensors) and not all(tensors):
        raise TypeError("q, k and v must be all numpy arrays or all vkcore.Tensors")
    own = args[0].device if isinstance(args[0], Tensor) else None
    dev = device_for(own, device)
    for a, name in zip(args[1:], ("k", "v"), strict=True):
        if isinstance(a, Tensor):
            check_on_device(a.device, dev, name, "q's")
    s = ops.shapes(tuple(args[0].shape), tuple(args[1].shape), tuple(args[2].shape), "k")
    sc = ops.scale_of(scale, s.d)
    as_tensor = all(tensors) or c.recording(dev)
    qa, ka, va = (_on_device(a, dev) if as_tensor else c.as_float32(np.asarray(a)) for a in args)
    if not as_tensor and pieces.beyond_binding(storage.binding_limit(dev), s, mask):
        # numpy arrays larger than one binding: pieces, merged on the host (as softmax).
        result = _output(dev, s, out, False)
        terms = None if mask is None else ops.mask_terms(mask, s)
        parts = functools.partial(_partial_states, dev, sc)
        arrays = [a for a in (qa, ka, va) if isinstance(a, np.ndarray)]
        limit = storage.binding_limit(dev)
        # Pieces write out while later ones still read q, k and v: never into an input.
        apart = not any(np.may_share_memory(result, a) for a in arrays)
        target = result if apart else c.result_array(dev, s.out_shape)
        pieces.attend(parts, arrays[0], arrays[1], arrays[2], s, causal, terms, limit, target)
        if target is not result:
            np.copyto(result, target)
        return result
    with storage.Loans(dev) as loans:
        kv = KV(
            "float32",
            _buffer(ka, dev, loans, "k"),
            _buffer(va, dev, loans, "v"),
            c.dummy_buffer(dev),
            c.dummy_buffer(dev),
            s.lk,
            s.d,
            s.dv,
        )
        return _run(dev, qa, kv, s, sc, causal, mask, out, as_tensor, loans)


def _over_cache(q: Any, cache: KVCache, scale: Any, causal: bool, mask: Any, out: Any) -> Any:
    cache.check_usable()
    dev = cache.device
    qd = c.float_input(q, "q")
    if isinstance(qd, Tensor):
        check_on_device(qd.device, dev, "q", "the cache's")
    shape = tuple(qd.shape)
    if len(shape) == 3 and cache.batch == 1:
        shape = (1, *shape)
    if len(shape) != 4 or shape[0] != cache.batch:
        raise ValueError(
            f"q must have shape (batch={cache.batch}, Hq, Lq, D) for this cache, "
            f"got {tuple(qd.shape)}"
        )
    lk = cache.recorded_length() if c.recording(dev) else len(cache)
    kshape = (cache.batch, cache.heads, lk, cache.head_dim)
    s = ops.shapes(shape, kshape, kshape, "the cache")
    s = ops.Shapes(tuple(qd.shape[:-3]), s.hq, s.hkv, s.lq, s.lk, s.d, s.dv)
    sc = ops.scale_of(scale, s.d)
    as_tensor = isinstance(qd, Tensor) or c.recording(dev)
    qa = _on_device(qd, dev) if as_tensor else c.as_float32(np.asarray(qd))
    kv = KV(
        cache.dtype,
        cache.buffer("k"),
        cache.buffer("v"),
        cache.buffer("k_scales"),
        cache.buffer("v_scales"),
        cache.capacity,
        cache.words,
        cache.words,
    )
    with storage.Loans(dev) as loans:
        return _run(dev, qa, kv, s, sc, causal, mask, out, as_tensor, loans)


def _on_device(a: np.ndarray | Tensor, dev: Device) -> Tensor:
    if isinstance(a, Tensor):
        c.check_tensor(a, "q, k and v")
        return a
    return asarray(c.as_float32(np.asarray(a)), device=dev)


def _buffer(a: np.ndarray | Tensor, dev: Device, loans: storage.Loans, name: str) -> Buffer:
    """The device buffer of ``a`` (a numpy array is uploaded to a pooled one)."""
    storage.check_binding_size(dev, a.size * 4, name)
    if isinstance(a, Tensor):
        return a.buffer if a.buffer is not None else loans.take(16)
    return loans.holding(a) if a.size else loans.take(16)


def _run(
    dev: Device,
    qa: np.ndarray | Tensor,
    kv: KV,
    s: ops.Shapes,
    sc: float,
    causal: bool,
    mask: Any,
    out: Any,
    as_tensor: bool,
    loans: storage.Loans,
) -> Any:
    result = _output(dev, s, out, as_tensor)
    inputs = (kv.k, kv.v, qa.buffer if isinstance(qa, Tensor) else None)
    if isinstance(result, Tensor) and result.buffer is not None and result.buffer in inputs:
        # Workgroups read q, k and v while others already write their rows of out.
        raise ValueError("out must not be q, k or v (the kernel reads them while writing out)")
    if s.batch * s.hq * s.lq * s.dv == 0:
        return result
    if s.lk == 0:  # every key masked: zeros
        _fill_zeros(result)
        return result
    qbuf = _buffer(qa, dev, loans, "q")
    mterms, strides = (None, (0, 0, 0, 0)) if mask is None else ops.mask_terms(mask, s)
    mbuf = c.dummy_buffer(dev)
    if mterms is not None:
        recorded = c.as_recorded(mterms, dev)
        mbuf = _buffer(recorded, dev, loans, "mask")
    nbytes = s.batch * s.hq * s.lq * s.dv * 4
    storage.check_binding_size(dev, nbytes, "the output")
    obuf = result.buffer if isinstance(result, Tensor) else loans.take(nbytes)
    assert obuf is not None
    g = plan.grid(
        dev.info,
        c.parallelism(dev),
        s.batch * s.hkv,
        s.rows,
        s.lk,
        kv.words * PER_WORD[kv.kind],
        s.dv,
        word_elems=PER_WORD[kv.kind],
    )
    steps, _, _ = _steps(
        dev, g, s, kv, qbuf, mbuf, obuf, sc, causal, strides, mterms is not None, loans
    )
    dev.run(steps)
    if isinstance(result, np.ndarray):
        obuf.read(result.reshape(-1, s.dv))
    return result


def _partial_states(
    dev: Device, sc: float, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """One query head's rows ``q (rows, D)`` over keys ``k (n, D)``, ``v (n, Dv)`` with
    additive ``mask (rows, n)``: the states ``(r, l, bad)`` (rows, 3) and ``acc`` (rows,
    Dv) of one split (pieces.py merges them)."""
    rows, d = q.shape
    n, dv = v.shape
    s = ops.Shapes((1,), 1, 1, rows, n, d, dv)
    g = plan.grid(dev.info, c.parallelism(dev), 1, rows, n, d, dv)
    block = g.workgroup * g.block_keys
    g = dataclasses.replace(g, splits=1, chunk=c.ceil_div(n, block) * block)
    with storage.Loans(dev) as loans:
        qbuf, kbuf, vbuf = (loans.holding(x) for x in (q, k, v))
        mbuf = c.dummy_buffer(dev) if mask is None else loans.holding(mask)
        dummy = c.dummy_buffer(dev)
        kv = KV("float32", kbuf, vbuf, dummy, dummy, n, d, dv)
        strides = (0, 0, n, 1)
        steps, stats_buf, parts_buf = _steps(
            dev, g, s, kv, qbuf, mbuf, dummy, sc, False, strides, mask is not None, loans, True
        )
        dev.run(steps)
        stats = np.empty((rows, 4), np.float32)
        acc = np.empty((rows, dv), np.float32)
        stats_buf.read(stats)
        parts_buf.read(acc)
    return stats[:, :3], acc


def _output(dev: Device, s: ops.Shapes, out: Any, as_tensor: bool) -> Any:
    """``out`` checked, or a new result (a Tensor for Tensor input)."""
    shape = s.out_shape
    if out is None:
        if as_tensor:
            nbytes = max(16, 4 * int(np.prod(shape)))
            return Tensor(buffer_pool(dev).lease(nbytes), shape, np.dtype(np.float32), dev)
        return c.result_array(dev, shape)
    if as_tensor:
        if not isinstance(out, Tensor):
            raise TypeError(
                f"out must be a vkcore.Tensor for Tensor input, got {type(out).__name__}"
            )
        check_on_device(out.device, dev, "out", "q's")
        if out.dtype != np.float32 or tuple(out.shape) != shape:
            raise ValueError(
                f"out must be a float32 Tensor of shape {shape}, got a {out.dtype} Tensor of "
                f"shape {tuple(out.shape)}"
            )
        c.check_tensor(out, "out")
        return out
    if isinstance(out, Tensor):
        raise TypeError("out must be a numpy array for numpy input (a Tensor out takes Tensors)")
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy array, got {type(out).__name__}")
    if out.dtype != np.float32 or out.shape != shape:
        raise ValueError(
            f"out must be a float32 array of shape {shape}, got {out.dtype} {out.shape}"
        )
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("out must be C-contiguous and writable")
    return out


def _fill_zeros(result: Any) -> None:
    if isinstance(result, Tensor):
        result.write(np.zeros(result.shape, np.float32))
    else:
        result[...] = 0


def _program(dev: Device, g: plan.Grid, kv: KV, masked: bool) -> Any:
    """The attend Program of grid ``g``: attention_lanes.comp or attention.comp."""
    defines = {"KV": DTYPES[kv.kind], "MASK": int(masked)}
    spec: dict[str | int, int]
    texel = None
    if g.lanes:
        texel = _kv_texels(dev, kv)
        defines["TEXEL"] = int(texel is not None)
        defines["SHUFFLE"] = int(g.shuffle)
        defines.update(variants.defines(dev.info, exact=False, reduces=True))
        spec = {"QT": g.tile, "Q4": kv.words // plan.LANE_WORDS, "V4": kv.vwords // plan.LANE_WORDS}
    else:
        spec = {
            "QT": g.tile,
            "QWORDS": kv.words,
            "DVS": g.dims_per_invocation,
            "KL": g.key_lanes,
            "KB": g.block_keys,
        }
    return programs.program(dev, g.shader, defines, workgroup=g.workgroup, spec=spec, texel=texel)


def _kv_texels(dev: Device, kv: KV) -> dict[int, str] | None:
    """k and v read as uniform texel buffers of uvec4s where both can be (the texture
    path's loads are vector gathers on a CPU device), else None (storage buffers)."""
    if all(c.texel_format(dev, b, TEXEL_FORMAT) for b in (kv.k, kv.v)):
        return {1: TEXEL_FORMAT, 2: TEXEL_FORMAT}
    return None


def _steps(
    dev: Device,
    g: plan.Grid,
    s: ops.Shapes,
    kv: KV,
    qbuf: Buffer,
    mbuf: Buffer,
    obuf: Buffer,
    sc: float,
    causal: bool,
    strides: tuple[int, int, int, int],
    masked: bool,
    loans: storage.Loans,
    partial: bool = False,
) -> tuple[list[Any], Buffer, Buffer]:
    """The attend dispatch, and the merge after it when the keys are split; with
    ``partial`` the partial states are left in the returned stats and parts buffers."""
    prog = _program(dev, g, kv, masked)
    rows = s.batch * s.hq * s.lq
    stats = parts = c.dummy_buffer(dev)
    if g.merged or partial or g.passes > 1:
        storage.check_binding_size(dev, rows * g.splits * s.dv * 4, "the partial states")
        stats = loans.take(rows * g.splits * 16)
        parts = loans.take(rows * g.splits * s.dv * 4)
    grid = (g.splits, g.tiles, s.batch * s.hkv)
    steps = []
    for p in range(g.passes):
        last = p == g.passes - 1
        push = struct.pack(
            "<8If11I",
            s.lq,
            s.lk,
            s.d,
            s.dv,
            s.group,
            s.hkv,
            kv.rows,
            kv.vwords,
            np.float32(sc),
            int(causal),
            g.chunk,
            g.splits,
            int(last and not (g.merged or partial)),
            *strides,
            p * g.max_chunk,
            g.max_chunk,
            int(p > 0),
        )
        bound = (qbuf, kv.k, kv.v, kv.k_scales, kv.v_scales, mbuf, obuf, stats, parts)
        steps.append(prog.record(*bound, groups=grid, push=push))
    if g.merged and not partial:
        merge = programs.program(dev, "attention_merge.comp", {}, workgroup=MERGE_WORKGROUP)
        steps.append(
            merge.record(
                stats,
                parts,
                obuf,
                groups=c.row_grid(dev, rows, 1),
                push=c.pack_u32(rows, s.dv, g.splits),
            )
        )
    return steps, stats, parts
