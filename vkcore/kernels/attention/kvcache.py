"""The KV cache of attention: keys and values of past tokens kept on the device
(docs/attention.md#kvcache).

Storage: ``batch * heads * capacity`` rows of ``head_dim`` elements for the keys and as
many for the values, as uint words: float32 (one per word), float16 (two per word, so no
16-bit storage feature is needed) or int8 codes (four per word) with one float32 scale
per row (shaders/kv_append.comp, the rules of :func:`vkcore.reference.kv_quantize`).

The length grows only once the work that wrote the new rows has finished: at once for a
call outside a sequence, when the sequence's submission is seen finished inside one.
An exception or Ctrl-C anywhere in ``append`` leaves the length as it was (rows past the
length are never read).
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from vkcore.compute import sequence as seqs
from vkcore.compute.tensor import Tensor, check_on_device
from vkcore.device.device import Device, resolve
from vkcore.device.memory.buffer import Buffer
from vkcore.errors import shown
from vkcore.kernels import common as c
from vkcore.kernels import programs, storage, variants

DTYPES = {"float32": 0, "float16": 1, "int8": 2}  # the shaders' KV define
PER_WORD = {"float32": 1, "float16": 2, "int8": 4}
APPEND_WORKGROUP = 64

variants.register(
    "kv_append.comp", [{"KV": kv} for kv in DTYPES.values()], exact=True, reduces=False
)


def row_words(dtype: str, dim: int) -> int:
    """uint words per stored row of ``dim`` elements."""
    return -(-dim // PER_WORD[dtype])


def _count(value: Any, name: str, lo: int = 1) -> int:
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int, got bool")
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__}") from None
    if n < lo:
        raise ValueError(f"{name} must be at least {lo}, got {n}")
    return n


class KVCache:
    """Keys and values of up to ``capacity`` positions for ``batch`` sequences of
    ``heads`` KV heads of ``head_dim``, on ``device``; ``dtype`` is ``"float32"``,
    ``"float16"`` or ``"int8"``. ``append`` adds positions, ``len(cache)`` counts them,
    ``vkcore.attention(q, cache)`` attends the first ``len(cache)``."""

    def __init__(
        self,
        heads: int,
        head_dim: int,
        capacity: int,
        *,
        batch: int = 1,
        dtype: str = "float16",
        device: Device | None = None,
    ) -> None:
        self.heads = _count(heads, "heads")
        self.head_dim = _count(head_dim, "head_dim")
        self.capacity = _count(capacity, "capacity")
        self.batch = _count(batch, "batch")
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {shown(dtype)}")
        self.dtype = dtype
        self.device = resolve(device)
        self.device.check()
        self.words = row_words(dtype, self.head_dim)
        rows = self.batch * self.heads * self.capacity
        storage.check_binding_size(self.device, rows * self.words * 4, "the cache (capacity)")
        self._length = 0  # positions whose rows are written and finished
        self._pending: list[tuple[seqs.Sequence, int]] = []  # recorded appends
        self._buffers: dict[str, Buffer] = {}
        for name, nbytes in (("k", rows * self.words * 4), ("v", rows * self.words * 4)):
            self._buffers[name] = Buffer(self.device, max(16, nbytes))
        if dtype == "int8":
            self._buffers["k_scales"] = Buffer(self.device, max(16, rows * 4))
            self._buffers["v_scales"] = Buffer(self.device, max(16, rows * 4))

    # ------------------------------------------------------------------ length
    def __len__(self) -> int:
        self._settle()
        return self._length

    def _settle(self) -> None:
        """Count the appends whose sequences have run; drop those that never will."""
        keep = []
        for seq, end in self._pending:
            if seq.state == seqs.State.SUBMITTED:
                seq.done()  # polls
            if seq.completed:
                self._length = max(self._length, end)
            elif seq.state not in (seqs.State.DISCARDED, seqs.State.RELEASED):
                keep.append((seq, end))
        self._pending = keep

    def recorded_length(self) -> int:
        """The length the work recorded so far will leave (what a call recorded now
        attends): ``len(self)`` plus the appends of sequences still to run."""
        self._settle()
        return max([self._length] + [end for _, end in self._pending])

    # ------------------------------------------------------------------ storage
    def buffer(self, name: str) -> Buffer:
        """The buffer ``"k"``, ``"v"``, ``"k_scales"`` or ``"v_scales"`` (the dummy buffer
        for the scales of a float cache)."""
        self.check_usable()
        buf = self._buffers.get(name)
        return buf if buf is not None else c.dummy_buffer(self.device)

    def check_usable(self) -> None:
        self.device.check()
        if not self._buffers:
            raise c.ReleasedError("this vkcore.KVCache was released; make a new one")

    def release(self) -> None:
        """Free the device memory now (also happens when the cache is collected)."""
        buffers, self._buffers = self._buffers, {}
        for buf in buffers.values():
            buf.destroy()

    # ------------------------------------------------------------------ append
    def append(self, k_new: Any, v_new: Any) -> None:
        """Add ``T`` positions: ``k_new`` and ``v_new`` of shape ``(batch, heads, T,
        head_dim)`` (``(heads, T, head_dim)`` when batch is 1), float arrays or float32
        Tensors on the cache's device. Inside a :func:`vkcore.sequence` the rows are
        written when the sequence runs, and the length grows once it has."""
        self.check_usable()
        dev = self.device
        k = self._input(k_new, "k_new")
        v = self._input(v_new, "v_new")
        if k.shape != v.shape:
            raise ValueError(f"k_new and v_new must have one shape, got {k.shape} and {v.shape}")
        tokens = k.shape[2]
        start = self.recorded_length()
        if start + tokens > self.capacity:
            raise ValueError(
                f"append of {tokens} positions at length {start} exceeds the cache's "
                f"capacity ({self.capacity})"
            )
        if tokens == 0:
            return
        seq = seqs.recording(dev)
        with storage.Loans(dev) as loans:
            steps = [
                self._append_step(self._device_rows(x, loans), name, start, tokens)
                for x, name in ((k, "k"), (v, "v"))
            ]
            dev.run(steps)
        if seq is None:
            self._length = start + tokens
        else:
            self._pending.append((seq, start + tokens))

    def _input(self, x: Any, name: str) -> np.ndarray | Tensor:
        data = c.float_input(x, name)
        shape = tuple(data.shape)
        if len(shape) == 3 and self.batch == 1:
            shape = (1, *shape)
        want = f"(batch={self.batch}, heads={self.heads}, T, head_dim={self.head_dim})"
        if len(shape) != 4 or shape[:2] != (self.batch, self.heads) or shape[3] != self.head_dim:
            raise ValueError(f"{name} must have shape {want}, got {tuple(data.shape)}")
        if isinstance(data, Tensor):
            check_on_device(data.device, self.device, name, "the cache's")
            return data.reshape(shape)
        return c.as_float32(np.asarray(data)).reshape(shape)

    def _device_rows(self, x: np.ndarray | Tensor, loans: storage.Loans) -> Buffer:
        """``x`` on the device: a Tensor's buffer, or a numpy array uploaded (inside a
        sequence as a Tensor: the upload happens now, the append at submission)."""
        storage.check_binding_size(self.device, x.size * 4, "k_new and v_new")
        if isinstance(x, Tensor):
            assert x.buffer is not None
            return x.buffer
        if c.recording(self.device):
            t = c.as_recorded(x, self.device)
            assert t.buffer is not None
            return t.buffer
        return loans.holding(x)

    def _append_step(self, x: Buffer, name: str, start: int, tokens: int) -> Any:
        dev = self.device
        prog = programs.program(
            dev,
            "kv_append.comp",
            {"KV": DTYPES[self.dtype], **variants.defines(dev.info, exact=True, reduces=False)},
            workgroup=APPEND_WORKGROUP,
        )
        rows = self.batch * self.heads * tokens
        groups = c.row_grid(dev, rows, APPEND_WORKGROUP)
        push = c.pack_u32(rows, tokens, self.head_dim, self.words, self.capacity, start)
        return prog.record(
            x, self.buffer(name), self.buffer(f"{name}_scales"), groups=groups, push=push
        )

    # ------------------------------------------------------------------ reading back
    def numpy(self) -> tuple[np.ndarray, np.ndarray]:
        """The first ``len(self)`` keys and values as the device holds them (float16
        widened, int8 dequantized: scale times code), float32 of shape ``(batch, heads,
        len, head_dim)``."""
        c.not_recorded(self.device, "KVCache.numpy()", "it reads the cache back")
        self.check_usable()
        n = len(self)
        return self._rows("k", n), self._rows("v", n)

    def _rows(self, name: str, n: int) -> np.ndarray:
        b, h, cap, w = self.batch, self.heads, self.capacity, self.words
        raw = np.empty((b, h, cap, w), np.uint32)
        self._buffers[name].read(raw)
        words = raw[:, :, :n]
        if self.dtype == "float32":
            return words.view(np.float32).copy()
        if self.dtype == "float16":
            halves = np.ascontiguousarray(words).view(np.float16)
            return halves[..., : self.head_dim].astype(np.float32)
        codes = np.ascontiguousarray(words).view(np.int8)[..., : self.head_dim]
        scales = np.empty((b, h, cap), np.float32)
        self._buffers[f"{name}_scales"].read(scales)
        return (scales[:, :, :n, None] * codes.astype(np.float32)).astype(np.float32)

    def codes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The int8 cache's first ``len(self)`` key codes, key scales, value codes and
        value scales (for checks against :func:`vkcore.reference.kv_quantize`)."""
        if self.dtype != "int8":
            raise ValueError(f"codes() needs an int8 cache, this one is {self.dtype}")
        c.not_recorded(self.device, "KVCache.codes()", "it reads the cache back")
        self.check_usable()
        n = len(self)
        out: list[np.ndarray] = []
        for name in ("k", "v"):
            raw = np.empty((self.batch, self.heads, self.capacity, self.words), np.uint32)
            self._buffers[name].read(raw)
            out.append(np.ascontiguousarray(raw[:, :, :n]).view(np.int8)[..., : self.head_dim])
            scales = np.empty((self.batch, self.heads, self.capacity), np.float32)
            self._buffers[f"{name}_scales"].read(scales)
            out.append(scales[:, :, :n].copy())
        return out[0], out[1], out[2], out[3]

    def __repr__(self) -> str:
        return (
            f"vkcore.KVCache(heads={self.heads}, head_dim={self.head_dim}, "
            f"capacity={self.capacity}, batch={self.batch}, dtype={self.dtype!r}, "
            f"len={self._length})"
        )
