"""Every kernel on small inputs that reach every shader variant, checked against numpy.

Used three ways:

* imported by ``tests/test_packaging.py`` to prove that every variant the kernels request is
  declared with ``vkcore.spirv.register_variants`` (so the wheel ships it);
* run as a script inside a clean virtual environment where the built wheel is installed
  (``python kernel_tour.py --installed``): there it also proves that vkcore comes from
  that environment, that no ``glslangValidator`` is reachable and that every declared
  variant is found as *shipped* SPIR-V;
* run as a script under other driver settings (``tests/kernels/test_other_configs.py``): subgroups
  of 4 (``LP_NATIVE_VECTOR_WIDTH=128``) and the staging path (``VKCORE_FORCE_STAGING=1``).

The variants chosen from device properties (``vkcore.kernels.variants``: RTE where
round-to-nearest-even can be requested, SUBGROUP=0 without subgroup arithmetic, the
attention lanes kernel's SHUFFLE=0 without subgroup shuffles) are
reached by running the kernels again on the same device with a DeviceInfo that lacks
those properties (:func:`feature_profiles`); their results must meet the same checks.
As a script with ``--native-only`` (the other driver settings) or ``--installed``, only
the variants the device itself requests run: the settings there do not change the
shared-memory and rounding paths, and the forced variants run in-process.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

import vkcore
from vkcore import reference, spirv
from vkcore.device.info import SUBGROUP_ARITHMETIC, SUBGROUP_SHUFFLE, DeviceInfo
from vkcore.kernels.softmax import stages as softmax_kernels
from vkcore.spirv import interface_file, reflect

SOFTMAX_MAX_ABS_ERR = 1e-6
ATTENTION_REL_ERR = 1e-5  # of max|v|: docs/attention.md


def _softmax_shapes() -> list[tuple[int, int]]:
    """Many short rows (one workgroup per row) and one long row (split rows, merged
    partial states), each with a row length divisible by 4 (vec4 loads) and one not."""
    return [(16, 64), (16, 63), (1, 40_000), (1, 40_001)]


def tour_softmax(device: vkcore.Device, rng: np.random.Generator) -> list[str]:
    done = []
    for rows, n in _softmax_shapes():
        x = (rng.standard_normal((rows, n)) * 5).astype(np.float32)
        x[0, :3] = -np.inf  # masked entries must come out as exactly 0
        expected = reference.softmax(x)
        log_expected = reference.log_softmax(x)
        for algorithm in ("online", "safe"):
            got = vkcore.softmax(x, algorithm=algorithm, device=device)
            err = float(np.abs(got - expected).max())
            case = f"softmax {algorithm} {rows}x{n}"
            assert err <= SOFTMAX_MAX_ABS_ERR, f"{case}: max |err| {err:.2e}"
            assert np.all(got[0, :3] == 0), f"{case}: masked entries are not exactly 0"
            done.append(case)
            if hasattr(vkcore, "log_softmax"):
                got = vkcore.log_softmax(x, algorithm=algorithm, device=device)
                case = f"log_softmax {algorithm} {rows}x{n}"
                fin = np.isfinite(log_expected)
                err_log = np.abs(got[fin] - log_expected[fin])
                bound = SOFTMAX_MAX_ABS_ERR * (1 + np.abs(log_expected[fin]))
                assert np.all(err_log <= bound), f"{case}: max |err| {err_log.max():.2e}"
                assert np.all(got[0, :3] == -np.inf), f"{case}: masked entries are not -inf"
                done.append(case)
    roofline_copy = getattr(softmax_kernels, "roofline_copy", None)
    if roofline_copy is not None:  # the bench's bandwidth probe: an exact copy
        x = rng.standard_normal(4096).astype(np.float32)
        xt, yt = vkcore.asarray(x, device=device), vkcore.Tensor.empty((4096,), np.float32, device)
        roofline_copy(xt, yt)
        assert np.array_equal(yt.numpy(), x), "softmax roofline copy"
        done.append("softmax roofline copy")
    return done


def tour_quantization(device: vkcore.Device, rng: np.random.Generator) -> list[str]:
    """quantize and dequantize (bit for bit), then matvec in every activation mode, for
    symmetric and asymmetric weights, per channel and per tensor; the float32 baseline."""
    if not hasattr(vkcore, "quantize"):
        return []
    done = []
    m, n = 37, 100  # rows not a multiple of 16 bytes: the padded layout is exercised
    w = (rng.standard_normal((m, n)) * 0.1).astype(np.float32)
    x = rng.standard_normal(n).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    for symmetric, per_channel, bits in ((True, True, 8), (False, True, 8), (True, False, 4)):
        case = f"{bits}-bit {'symmetric' if symmetric else 'asymmetric'} " + (
            "per channel" if per_channel else "per tensor"
        )
        qt = vkcore.quantize(
            w, bits=bits, symmetric=symmetric, per_channel=per_channel, device=device
        )
        q, scale, zero = reference.quantize(
            w, bits=bits, symmetric=symmetric, per_channel=per_channel
        )
        assert np.array_equal(qt.q, q), f"quantize {case}: q differs from the reference"
        assert np.array_equal(qt.scale, scale) and np.array_equal(qt.zero_point, zero), case
        w_hat = vkcore.dequantize(qt)
        assert np.array_equal(w_hat, reference.dequantize(q, scale, zero)), f"dequantize {case}"
        done += [f"quantize {case}", f"dequantize {case}"]
        odd = w[:, :99]  # a row length that is not a multiple of 4: scalar stores
        qt_odd = vkcore.quantize(
            odd, bits=bits, symmetric=symmetric, per_channel=per_channel, device=device
        )
        expect = reference.dequantize(
            *reference.quantize(odd, bits=bits, symmetric=symmetric, per_channel=per_channel)
        )
        assert np.array_equal(vkcore.dequantize(qt_odd), expect), f"dequantize {case}, n=99"
        qt_odd.release()
        for activations in ("float", "int8", "uint8"):
            y = vkcore.matvec(qt, x, bias=bias, activations=activations)
            ref = reference.matvec(q, scale, zero, x, bias, activations=activations)
            if activations == "float":  # float32 sums: within summation error
                size = np.abs(w_hat.astype(np.float64)) @ np.abs(x.astype(np.float64)) + np.abs(
                    bias
                )
                assert np.all(np.abs(y - ref) <= 1e-5 * size + 1e-30), f"matvec float {case}"
            else:  # integer accumulation: bit for bit
                assert np.array_equal(y, ref), f"matvec {activations} {case}"
            done.append(f"matvec {activations} {case}")
        qt.release()
    y32 = vkcore.matvec_f32(w, x, bias=bias, device=device)
    exact = w.astype(np.float64) @ x.astype(np.float64) + bias
    size = np.abs(w.astype(np.float64)) @ np.abs(x.astype(np.float64)) + np.abs(bias)
    assert np.all(np.abs(y32 - exact) <= 1e-5 * size), "matvec_f32"
    return done + ["matvec_f32"]


def tour_quant_groups(device: vkcore.Device, rng: np.random.Generator) -> list[str]:
    """Group-wise and packed quantize and dequantize, bit for bit with the reference:
    per-column parameters (GROUPED) and two codes per byte (PACKED) with vec4 and scalar
    loads and stores (n = 100 and 99), and the device-scale kernel's packed output."""
    done = []
    # groups of 32: whole blocks (GROUPED=2); of 7 and 24: parameters per column (GROUPED=1)
    cases = [(4, True, None), (4, False, None), (4, True, 32), (3, False, 7), (8, False, 32)]
    cases += [(6, True, 24)]
    for n in (100, 99):
        w = (rng.standard_normal((9, n)) * 0.1).astype(np.float32)
        for bits, symmetric, group_size in cases:
            case = f"{bits}-bit {'symmetric' if symmetric else 'asymmetric'} group {group_size}"
            qt = vkcore.quantize(
                w, bits=bits, symmetric=symmetric, group_size=group_size, device=device
            )
            q, s, z = reference.quantize(w, bits, symmetric, True, group_size)
            assert np.array_equal(qt.q, q), f"quantize {case}, n={n}"
            assert np.array_equal(qt.scale, s) and np.array_equal(qt.zero_point, z), case
            w_hat = reference.dequantize(q, s, z, group_size)
            assert np.array_equal(vkcore.dequantize(qt), w_hat), f"dequantize {case}, n={n}"
            qt.release()
            done.append(f"quantize/dequantize {case}, n={n}")
    return done


def tour_matvec_groups(device: vkcore.Device, rng: np.random.Generator) -> list[str]:
    """matvec on grouped and packed weights (the GROUPED / PACKED variants of matvec.comp)
    in every mode, then the integer-dot-product variants (DOT) forced by reporting the
    accelerated flag where the device has the feature: integers bit for bit."""
    done = []
    m, n = 37, 100
    w = (rng.standard_normal((m, n)) * 0.1).astype(np.float32)
    x = rng.standard_normal(n).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    cases = [(8, True, 32), (8, False, 32), (4, True, 32), (4, False, None), (3, False, 7)]
    dot_info = dataclasses.replace(device.info, integer_dot_product_8bit_accelerated=True)
    runs = [("", device.info, cases)]
    if device.info.integer_dot_product:
        runs.append((" dot", dot_info, [(8, True, None), (8, False, None), *cases[:2]]))
    for tag, info, layouts in runs:
        with device_info(device, info):
            for bits, symmetric, group in layouts:
                qt = vkcore.quantize(
                    w, bits=bits, symmetric=symmetric, group_size=group, device=device
                )
                q, s, z = qt.q, qt.scale, qt.zero_point
                for activations in ("float", "int8", "uint8") if not tag else ("int8", "uint8"):
                    y = vkcore.matvec(qt, x, bias=bias, activations=activations)
                    ref = reference.matvec(q, s, z, x, bias, activations, group)
                    case = f"matvec {activations} {bits}-bit sym={symmetric} g={group}{tag}"
                    if activations == "float":
                        size = np.abs(vkcore.dequantize(qt)) @ np.abs(x) + np.abs(bias)
                        assert np.all(np.abs(y - ref) <= 1e-5 * size + 1e-30), case
                    else:
                        assert np.array_equal(y, ref), case
                    done.append(case)
                qt.release()
    return done


def tour_batch(device: vkcore.Device, rng: np.random.Generator) -> list[str]:
    """Batched matvec (x of shape (n, b)) in every mode on int8/uint8 and packed 4-bit
    weights, and the float32 baseline; the integer modes bit for bit. Its exact variants
    also run without RTE here (the no-RTE profile runs only tour_quantization)."""
    from vkcore.kernels.matvec import batch

    done = []
    infos = [("", device.info)]
    if device.info.rounding_mode_rte_float32:
        infos.append((" no RTE", dataclasses.replace(device.info, rounding_mode_rte_float32=False)))
    m, n = 37, 100
    w = (rng.standard_normal((m, n)) * 0.1).astype(np.float32)
    x = rng.standard_normal((n, 3)).astype(np.float32)
    for tag, info in infos:
        with device_info(device, info):
            for bits, symmetric, group in (
                (8, True, None),
                (8, False, None),
                (4, True, 32),
                (4, False, 32),
            ):
                qt = vkcore.quantize(
                    w, bits=bits, symmetric=symmetric, group_size=group, device=device
                )
                q, s, z = qt.q, qt.scale, qt.zero_point
                for activations in ("float", "int8", "uint8"):
                    y = batch.matvec(qt, x, activations=activations)
                    ref = reference.matvec(q, s, z, x, None, activations, group_size=group)
                    case = f"batched matvec {activations} {bits}-bit sym={symmetric} g={group}{tag}"
                    if activations == "float":
                        assert np.allclose(y, ref, rtol=1e-5, atol=1e-5), case
                    else:
                        assert np.array_equal(y, ref), case
                    done.append(case)
                qt.release()
    y32 = batch.matvec_f32(w, x, device=device)
    assert np.allclose(y32, w.astype(np.float64) @ x, rtol=1e-5, atol=1e-5), "batched matvec_f32"
    return done + ["batched matvec_f32"]


def tour_topk(device: vkcore.Device, rng: np.random.Generator) -> list[str]:
    """topk and softmax_topk on short rows (one workgroup per row), a long row (split,
    merged) and k beyond the select kernel (the sort); sample over whole rows, a long row
    and top-k candidates: indices and draws exactly as the reference, probabilities
    within 1e-6."""
    if not hasattr(vkcore, "topk"):
        return []
    from vkcore.kernels.sampling import topk_steps

    done = []
    beyond_select = topk_steps.select_k_max(device) + 1  # the sort, whatever the device
    # row lengths a multiple of 4 (vec4 loads) and not
    cases = [(16, 300, 5), (16, 301, 5), (1, 40_000, 7), (1, 40_001, 7), (3, 200, 150)]
    for rows, n, k in [*cases, (2, beyond_select + 187, beyond_select)]:
        x = (rng.standard_normal((rows, n)) * 3).astype(np.float32)
        x[0, :4] = -np.inf
        values, indices = vkcore.topk(x, k, device=device)
        ref_v, ref_i = reference.topk(x, k)
        assert np.array_equal(indices, ref_i) and np.array_equal(values, ref_v), f"topk {rows}x{n}"
        probs, indices = vkcore.softmax_topk(x, k, device=device)
        ref_p, ref_i = reference.softmax_topk(x, k)
        err = float(np.abs(probs - ref_p).max())
        assert np.array_equal(indices, ref_i) and err <= 1e-6, f"softmax_topk {rows}x{n}"
        for kw in ({}, {"top_k": min(k, 40), "top_p": 0.8}):
            tokens = vkcore.sample(x, seed=11, device=device, **kw)
            assert np.array_equal(tokens, reference.sample(x, seed=11, **kw)), f"sample {kw}"
        done += [f"topk {rows}x{n} k={k}", f"softmax_topk {rows}x{n} k={k}", f"sample {rows}x{n}"]
    return done


def tour_attention(device: vkcore.Device, rng: np.random.Generator) -> list[str]:
    """attention over arrays (one split and split keys with the merge, with and without a
    mask) and over a KV cache of each dtype (int8 codes and scales bit for bit with the
    reference): within 1e-5 x max|v| of the float64 reference on the values held."""
    if not hasattr(vkcore, "attention"):
        return []
    done = []
    for lq, lk, masked in ((37, 45, False), (2, 3000, True), (1, 3000, False), (19, 23, True)):
        q = rng.standard_normal((1, 4, lq, 24)).astype(np.float32)
        k = rng.standard_normal((1, 2, lk, 24)).astype(np.float32)
        v = rng.standard_normal((1, 2, lk, 20)).astype(np.float32)
        mask = rng.random((lq, lk)) > 0.3 if masked else None
        got = vkcore.attention(q, k, v, causal=True, mask=mask, device=device)
        expect = reference.attention(q, k, v, causal=True, mask=mask)
        err = float(np.abs(got - expect).max())
        case = f"attention {lq}x{lk}{' masked' if masked else ''}"
        assert err <= ATTENTION_REL_ERR * np.abs(v).max(), f"{case}: max |err| {err:.2e}"
        done.append(case)
    # Head sizes of 42 (no whole word groups: the tiled kernel) and 16 (whole groups of
    # four words in every dtype: the lanes kernel, where the device takes it). The lanes
    # kernel is unrolled over the head size, and llvmpipe's cold compile of it grows
    # fast with it: the tour compiles every variant, so it takes the smallest.
    for dtype, d in itertools.product(("float32", "float16", "int8"), (42, 16)):
        cache = vkcore.KVCache(2, d, 64, dtype=dtype, device=device)
        new_k = rng.standard_normal((2, 50, d)).astype(np.float32)
        new_v = rng.standard_normal((2, 50, d)).astype(np.float32)
        cache.append(new_k, new_v)
        keys, values = cache.numpy()
        if dtype == "int8":
            kq, ks, vq, vs = cache.codes()
            assert np.array_equal(kq[0], reference.kv_quantize(new_k)[0]), "int8 cache codes"
            assert np.array_equal(vs[0], reference.kv_quantize(new_v)[1]), "int8 cache scales"
        q = rng.standard_normal((1, 6, 2, d)).astype(np.float32)[0]
        for mask in (None, rng.random((2, 50)) > 0.2):
            got = vkcore.attention(q, cache, mask=mask)
            expect = reference.attention(q[None], keys, values, mask=mask)[0]
            err = float(np.abs(got - expect).max())
            bound = ATTENTION_REL_ERR * np.abs(values).max()
            assert err <= bound, f"KV cache {dtype}: {err:.2e}"
        cache.release()
        done.append(f"attention over a {dtype} KV cache, D={d}")
    return done


Tour = Callable[[vkcore.Device, np.random.Generator], list[str]]
TOURS: list[Tour] = [
    tour_softmax,
    tour_quantization,
    tour_quant_groups,
    tour_matvec_groups,
    tour_batch,
    tour_topk,
    tour_attention,
]
TOURS_BY_NAME = {t.__name__.removeprefix("tour_"): t for t in TOURS}


def feature_profiles(info: DeviceInfo) -> list[tuple[str, DeviceInfo, list[Tour]]]:
    """The device as it is, then without RTE (the kernels that request it: quantization),
    without subgroup arithmetic (every reducing kernel), without subgroup shuffles
    (attention's lanes kernel) and without RTE and arithmetic; a profile equal to the
    device's own properties is left out."""
    no_rte = {"rounding_mode_rte_float32": False}
    no_arith = {
        "subgroup_supported_operations": info.subgroup_supported_operations & ~SUBGROUP_ARITHMETIC
    }
    no_shuffle = {
        "subgroup_supported_operations": info.subgroup_supported_operations & ~SUBGROUP_SHUFFLE
    }
    wanted: list[tuple[str, dict[str, object], list[Tour]]] = [
        (
            "no RTE",
            no_rte,
            [tour_quantization, tour_quant_groups, tour_matvec_groups, tour_attention],
        ),
        ("shared-memory reductions", no_arith, TOURS),
        ("no subgroup shuffles", no_shuffle, [tour_attention]),
        (
            "no RTE, shared-memory reductions",
            {**no_rte, **no_arith},
            [tour_quantization, tour_quant_groups, tour_matvec_groups],
        ),
    ]
    out = [("native", info, TOURS)]
    for name, changes, steps in wanted:
        changed = dataclasses.replace(info, **changes)  # type: ignore[arg-type]
        if all(changed != other for _, other, _ in out):
            out.append((name, changed, steps))
    return out


@contextmanager
def device_info(device: vkcore.Device, info: DeviceInfo) -> Iterator[None]:
    """Run with ``device.info`` replaced (the kernels choose their variants from it)."""
    saved = device.info
    device.info = info
    try:
        yield
    finally:
        device.info = saved


def tour(
    device: vkcore.Device,
    *,
    native_only: bool = False,
    only: list[str] | None = None,
    texel_modes: tuple[str, ...] = ("1", "0"),
) -> list[str]:
    """Run every kernel check on ``device`` (``native_only``: only with its own properties,
    not the feature_profiles; ``only``: just the tours of these names, e.g. "softmax";
    ``texel_modes``: the VKCORE_TEXEL settings); returns their names, raises AssertionError."""
    rng = np.random.default_rng(7)
    done: list[str] = []
    profiles = feature_profiles(device.info)[: 1 if native_only else None]
    if only is not None:
        chosen = {TOURS_BY_NAME[name] for name in only}
        profiles = [(p, info, [t for t in steps if t in chosen]) for p, info, steps in profiles]
    saved = os.environ.get("VKCORE_TEXEL")
    try:
        # Kernels read through texel buffers where the device allows it, else through
        # storage buffers (VKCORE_TEXEL=0 forces that): both kinds of variant must run.
        for texel in texel_modes:
            os.environ["VKCORE_TEXEL"] = texel
            for profile, info, steps in profiles:
                with device_info(device, info):
                    for step in steps:
                        tag = f"[texel={texel}, {profile}]"
                        done += [f"{case} {tag}" for case in step(device, rng)]
    finally:
        if saved is None:
            os.environ.pop("VKCORE_TEXEL", None)
        else:
            os.environ["VKCORE_TEXEL"] = saved
    return done


def _ids(listing: list[tuple[str, dict]]) -> set[tuple[str, tuple]]:
    return {(name, tuple(sorted(d.items()))) for name, d in listing}


def unregistered_requests() -> set[tuple[str, tuple]]:
    """Variants requested in this process that no kernel module declared."""
    return _ids(spirv.requested()) - _ids(spirv.variants())


def _with(defines: tuple, name: str, value: int) -> tuple:
    return tuple(sorted((*defines, (name, value))))


def unrequested_variants(info: DeviceInfo | None = None) -> set[tuple[str, tuple]]:
    """Declared variants that nothing in this process has run (the tour must reach all).

    With ``info``, those that need what that device lacks are left out (RTE=1 without
    shaderRoundingModeRTEFloat32, subgroup reductions without subgroup arithmetic,
    SHUFFLE=1 without subgroup arithmetic and shuffles)."""
    declared = _ids(spirv.variants())
    if info is None:
        return declared - _ids(spirv.requested())
    rte, arith = info.rounding_mode_rte_float32, info.subgroup_arithmetic_in_compute
    wanted = set()
    for name, d in declared:
        has_rte = ("RTE", 1) in d
        rte_choice = has_rte or (name, _with(d, "RTE", 1)) in declared
        shared = ("SUBGROUP", 0) in d
        sg_choice = shared or (name, _with(d, "SUBGROUP", 0)) in declared
        if rte_choice and has_rte and not rte or sg_choice and not shared and not arith:
            continue  # the device cannot run it
        if ("SHUFFLE", 1) in d and not (arith and info.subgroup_shuffle_in_compute):
            continue
        wanted.add((name, d))
    return wanted - _ids(spirv.requested())


def check_installed() -> dict[str, object]:
    """The checks that only make sense for an installed wheel without a compiler."""
    package = Path(vkcore.__file__).resolve().parent
    assert Path(sys.prefix).resolve() in package.parents, f"vkcore imported from {package}"
    assert shutil.which("glslangValidator") is None, "glslangValidator is reachable on PATH"
    spirv.clear_memory_cache()
    origins = {}
    for name, defines in spirv.variants():
        origins[f"{name} {defines}"] = spirv.get(name, defines).origin
    not_shipped = {k: v for k, v in origins.items() if v != "shipped"}
    assert not not_shipped, f"variants not shipped: {not_shipped}"
    # Each variant's interface was reflected at build time and shipped: the same as
    # reflecting its words now.
    for name, defines in spirv.variants():
        code = spirv.get(name, defines).code
        shipped = interface_file.shipped(code, spirv.shipped_dir())
        assert shipped == _REFLECT(code), f"shipped interface of {name} {defines} differs"
    return {"package": str(package), "shipped_variants": len(origins)}


_REFLECT = reflect.reflect


def _no_reflection(code: bytes) -> reflect.Interface:
    raise AssertionError("a shipped variant was reflected at run time, not at build time")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--installed",
        action="store_true",
        help="also check the installed wheel (implies --native-only)",
    )
    parser.add_argument(
        "--expect-subgroup", type=int, help="fail unless the device's subgroup size is this"
    )
    parser.add_argument(
        "--expect-staging", action="store_true", help="fail unless Tensors are staged, not mapped"
    )
    parser.add_argument(
        "--tours",
        default=None,
        help=f"comma-separated tours to run (default all: {','.join(TOURS_BY_NAME)}); "
        "with a subset the every-variant-ran check is left to the full tour",
    )
    parser.add_argument(
        "--texel-only",
        action="store_true",
        help="only the texel-buffer load path (VKCORE_TEXEL=1), not also storage loads",
    )
    parser.add_argument(
        "--native-only",
        action="store_true",
        help="only the variants the device itself requests (no forced feature profiles)",
    )
    args = parser.parse_args()
    summary: dict[str, object] = {}
    if args.installed:  # every kernel's interface must come from the wheel
        reflect.reflect = _no_reflection  # type: ignore[assignment]
    with vkcore.Device() as dev:
        summary["subgroup_size"] = dev.info.subgroup_size
        if args.expect_subgroup is not None:
            assert dev.info.subgroup_size == args.expect_subgroup, summary
        probe = vkcore.Tensor.empty((4,), np.float32, dev)
        summary["tensors_mapped"] = probe.buffer is not None and probe.buffer.mapped is not None
        if args.expect_staging:
            assert not summary["tensors_mapped"], "a Tensor was mapped: not the staging path"
        native = dev.info
        # Installed: the forced profiles' variants are checked shipped (check_installed) and
        # run in-process by tests/test_packaging.py; here the device's own variants run.
        native_only = args.native_only or args.installed
        only = args.tours.split(",") if args.tours else None
        texel_modes = ("1",) if args.texel_only else ("1", "0")
        summary["checks"] = tour(dev, native_only=native_only, only=only, texel_modes=texel_modes)
        origins = {p["name"]: p["spirv_origin"] for p in dev.pipeline_stats()}
        dev.check()
    summary["pipeline_spirv_origins"] = origins
    missing = unregistered_requests()
    assert not missing, (
        f"variants requested but not declared with spirv.register_variants: {sorted(missing)}"
    )
    # Which variants a device's own properties reach depends on the kernels' plans (the
    # top-k sort only where the select kernel cannot run), so only a full tour must reach all.
    if only is None and not args.texel_only and not native_only:
        unrun = unrequested_variants(native)
        assert not unrun, f"declared variants the tour never ran: {sorted(unrun)}"
    if args.installed:
        reflect.reflect = _REFLECT  # type: ignore[assignment]
        other = {k: v for k, v in origins.items() if v != "shipped"}
        assert not other, f"pipelines whose SPIR-V did not come from the wheel: {other}"
        summary.update(check_installed())
    print(json.dumps(summary, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
