"""The targets each comparison group is held to, and the verdicts."""

from __future__ import annotations

from typing import Any

from vkcore.tools.bench.harness import Comparison

# The targets: (comparison group, kind, value). ">=" on ratio, "<=" on call/floor.
TARGETS: dict[str, tuple[str, float, str]] = {
    "online_vs_safe_long": (">=", 1.25, "online vs safe softmax, rows of 2^20 and longer"),
    "online_vs_safe_all": (">=", 0.95, "online vs safe softmax, every shape (worst)"),
    "softmax_vs_numpy_e2e": (">=", 2.0, "softmax vs numpy, 4096x4096, end to end"),
    "softmax_vs_numpy_resident": (">=", 3.0, "softmax vs numpy, 4096x4096, device-resident"),
    "log_softmax_vs_numpy": (">=", 2.0, "log_softmax vs scipy/numpy, 4096x4096, end to end"),
    "int8_vs_fp32": (">=", 3.0, "INT8 weight-only matvec vs fp32 matvec kernel"),
    "int8_vs_blas": (">=", 1.0, "INT8 matvec vs numpy BLAS float32 matvec"),
    "quantize_vs_numpy": (">=", 3.0, "quantize vs numpy"),
    "softmax_topk_vs_numpy": (">=", 3.0, "softmax + top-k, 64x32000, k=40, vs numpy"),
    "softmax_topk_vs_two_calls_resident": (
        ">=",
        1.5,
        "softmax_topk vs vkcore softmax then topk, 64x32000, k=40, resident",
    ),
    "attention_decode_vs_numpy": (
        ">=",
        4.0,
        "attention decode, 32 q / 8 kv heads, D 128, 4096 float16 positions, vs numpy",
    ),
    "attention_prefill_vs_numpy": (">=", 2.0, "attention causal prefill, 8x1024x64, vs numpy"),
    "sequence_vs_separate": (">=", 4.0, "16 tiny softmax calls: separate vs one sequence"),
    "lm_head_step": (">=", 1.5, "LM-head step: numpy float32 vs INT8 matvec + sample, sequenced"),
    "tiny_overhead": ("<=", 2.0, "tiny softmax end to end vs prerecorded-submit floor"),
    "call_path_program_numpy": ("<=", 1.3, "tiny Program call, numpy in and out, vs raw floor"),
    "call_path_softmax_numpy": ("<=", 1.3, "tiny softmax call, numpy in and out, vs raw floor"),
    "call_path_program_device": ("<=", 1.3, "tiny Program call on Tensors vs raw floor"),
    "call_path_softmax_device": ("<=", 1.3, "tiny softmax call on Tensors vs raw floor"),
    "call_path_program_replay16": ("<=", 1.2, "16 tiny Program dispatches replayed vs raw floor"),
    "call_path_softmax_replay16": ("<=", 1.2, "16 tiny softmax calls replayed vs raw floor"),
    "fp32_vs_q4g128_wall": (">=", 4.0, "4-bit group-128 matvec vs fp32 matvec, 4096x4096, wall"),
    "fp32_vs_q4g128_device": (">=", 5.0, "4-bit group-128 vs fp32 matvec, 4096x4096, device"),
    "int8_group_vs_channel": (">=", 0.85, "int8 group 128 vs int8 per channel (worst mode)"),
    "blas_vs_batched_int8": (">=", 1.0, "numpy W @ X vs batched INT8 matvec, X of 8 columns"),
}


def verdicts(comparisons: list[Comparison]) -> list[dict[str, Any]]:
    """Each target with the measured value (worst shape where a group has several)."""
    out = []
    for group, (kind, target, title) in TARGETS.items():
        if group == "online_vs_safe_all":
            rows = [c for c in comparisons if c.group.startswith("online_vs_safe")]
        elif group in ("softmax_vs_numpy_e2e", "softmax_vs_numpy_resident"):
            rows = [c for c in comparisons if c.group == group and c.shape == (4096, 4096)]
        else:
            rows = [c for c in comparisons if c.group == group]
        verdict = {"group": group, "title": title, "kind": kind, "target": target}
        measured = [c for c in rows if c.ratio is not None]
        if not measured:
            note = "n/a: the device has no timestamps (device-time rows)"
            if not rows:
                note = "not measured (kernel not available)"
            out.append({**verdict, "value": None, "met": None, "shape": None, "note": note})
            continue
        worst = (min if kind == ">=" else max)(measured, key=_ratio_of)
        value = _ratio_of(worst)
        met = value >= target if kind == ">=" else value <= target
        out.append({**verdict, "value": value, "met": met, "shape": list(worst.shape), "note": ""})
    return out


def _ratio_of(c: Comparison) -> float:
    assert c.ratio is not None
    return c.ratio
