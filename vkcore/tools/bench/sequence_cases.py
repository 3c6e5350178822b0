"""Sequences (:func:`vkcore.sequence`) on the bench: 16 tiny softmax calls one by one
against the same calls in one sequence, and a replayed sequence against recording it
again. Wall time, Tensors in and out (what a sequence records)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

import vkcore
from vkcore.device.device import Device
from vkcore.tools.bench.harness import Comparison, side_by_side

CALLS = 16
SHAPE = (1, 256)


def sequence_rows(dev: Device, repeats: int, rng: Any) -> Iterator[Comparison]:
    xs = [
        vkcore.asarray(rng.standard_normal(SHAPE, dtype=np.float32), device=dev)
        for _ in range(CALLS)
    ]

    def separate() -> None:
        for x in xs:
            vkcore.softmax(x)

    def recorded() -> vkcore.Sequence:
        with vkcore.sequence(device=dev) as seq:
            for x in xs:
                vkcore.softmax(x)
        return seq

    def in_sequence() -> None:
        recorded().release()

    base, cand, _ = side_by_side(separate, in_sequence, repeats)
    yield Comparison(
        "sequence_vs_separate",
        f"{CALLS} tiny softmax calls: separate vs one sequence (wall)",
        (CALLS, *SHAPE),
        "wall",
        f"{CALLS} calls",
        "one sequence",
        base,
        cand,
    )
    kept = recorded()
    base, cand, _ = side_by_side(in_sequence, kept.run, repeats)
    kept.release()
    yield Comparison(
        "sequence_replay",
        f"the same {CALLS} calls: recording the sequence again vs replaying it (wall)",
        (CALLS, *SHAPE),
        "wall",
        "record and submit",
        "seq.run()",
        base,
        cand,
    )
