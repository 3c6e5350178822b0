"""The call path on the bench: what one tiny dispatch costs around the driver, for a
user's program (vkcore.Program) and a built-in kernel (softmax), each against the raw
floor, the same dispatches prerecorded alone in a command buffer and resubmitted
(``Submitter.raw_floor_seconds``).

Four figures per kind (docs/performance.md#the-call-path): numpy in and out; data on the
device (Tensors in, a Tensor out); 16 dispatches recorded into a sequence and submitted;
the 16 replayed (``seq.run()``). The 16 write 16 outputs, so no barrier separates them.
Untimed, as calls are by default (a bench device is timed for its other rows).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import vkcore
from vkcore.device.device import Device
from vkcore.device.submit.commands import Dispatch
from vkcore.tools.bench.harness import Comparison, side_by_side, timing

TINY = """#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { float a; uint n; } pc;
void main() { uint i = gl_GlobalInvocationID.x; if (i < pc.n) y[i] = pc.a * x[i]; }
"""
N = 256  # floats: four workgroups of 64
CALLS = 16


class _Kind:
    """One kind of call: its four figures' callables and the dispatches they make."""

    def __init__(self, dev: Device, rng: Any, kind: str) -> None:
        self.dev, self.kind = dev, kind
        self.x = rng.standard_normal(N, dtype=np.float32)
        self.y = np.empty_like(self.x)
        self.xt = vkcore.asarray(self.x, device=dev)
        self.outs = [vkcore.Tensor.empty((N,), np.float32, dev) for _ in range(CALLS)]
        self.prog = vkcore.Program(TINY, device=dev)

    def numpy_call(self) -> None:
        if self.kind == "program":
            self.prog(self.x, self.y, groups=N // 64, a=2.0, n=N)
        else:
            vkcore.softmax(self.x, device=self.dev)

    def device_call(self, out: vkcore.Tensor | None = None) -> None:
        out = self.outs[0] if out is None else out
        if self.kind == "program":
            self.prog(self.xt, out, groups=N // 64, a=2.0, n=N)
        else:
            vkcore.softmax(self.xt, out=out)

    def record(self) -> vkcore.Sequence:
        with vkcore.sequence(device=self.dev) as seq:
            for out in self.outs:
                self.device_call(out)
        return seq

    def recorded_and_submitted(self) -> None:
        self.record().release()

    def floor_steps(self, seq: vkcore.Sequence, count: int) -> list[Dispatch]:
        """The dispatches of ``count`` calls, taken from a recorded sequence."""
        per_call = len(seq.steps) // CALLS
        return list(seq.steps[: per_call * count])


def _row(
    kind: str, figure: str, title: str, floor: Callable[[], Any], call: Callable[[], Any], n: int
) -> Comparison:
    base, cand, _ = side_by_side(floor, call, n)
    return Comparison(
        f"call_path_{kind}_{figure}",
        title,
        (CALLS if figure in ("record16", "replay16") else 1, N),
        "wall",
        "raw floor",
        figure,
        base,
        cand,
        overhead=True,
    )


def call_path_rows(dev: Device, repeats: int, rng: Any) -> Iterator[Comparison]:
    """The four figures for a Program and for softmax, each against its raw floor."""
    with timing(dev, False):
        for kind in ("program", "softmax"):
            k = _Kind(dev, rng, kind)
            kept = k.record()
            one, sixteen = k.floor_steps(kept, 1), k.floor_steps(kept, CALLS)
            sub = dev.submitter
            floors = contextlib.ExitStack()
            floor1 = floors.enter_context(sub.raw_floor(one))
            floor16 = floors.enter_context(sub.raw_floor(sixteen))
            name = "vkcore.Program" if kind == "program" else "vkcore.softmax"
            yield _row(
                kind, "numpy", f"tiny {name}, numpy in and out", floor1, k.numpy_call, repeats
            )
            yield _row(kind, "device", f"tiny {name}, Tensors", floor1, k.device_call, repeats)
            yield _row(
                kind,
                "record16",
                f"{CALLS} tiny {name} calls recorded and submitted",
                floor16,
                k.recorded_and_submitted,
                max(repeats // 4, 5),
            )
            yield _row(kind, "replay16", f"the {CALLS} replayed", floor16, kept.run, repeats)
            floors.close()
            kept.release()
