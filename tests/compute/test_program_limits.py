"""Every device limit a Program's interface can exceed is an error naming the limit and the
device's value, raised before anything reaches the driver (vkcore.compute.program_limits).

The checks are pure functions of (interface, local size, specialization, DeviceInfo):
each limit is tried at its value (fits) and one past it (refused, naming it) on every
recorded real GPU and on this device. What a driver does past a limit is tried in child
processes, with and without the validation layer (a 64 KiB push block and 40 storage
buffers crashed lavapipe).
"""

from __future__ import annotations

import dataclasses
import json
import re

import devices
import numpy as np
import pytest
from checks import run_worker
from repo_paths import SUPPORT

import vkcore
from vkcore import spirv
from vkcore.compute import program_limits as limits
from vkcore.spirv import interface_file, reflect

WORKER = SUPPORT / "program_limits_worker.py"
KINDS = list(limits.DESCRIPTOR_LIMITS)


def interface(**fields) -> reflect.Interface:
    base = dict(bindings=(), push=(), push_size=0, spec=(), local_size=(1, 1, 1))
    base["local_size_ids"] = (None, None, None)
    return reflect.Interface(**(base | fields))


def bindings(kind: str, count: int, dset: int = 0) -> tuple[reflect.Binding, ...]:
    return tuple(
        reflect.Binding(dset, i, kind, f"b{i}", kind != reflect.STORAGE_BUFFER, False)
        for i in range(count)
    )


def problems(iface, info, workgroup=(1, 1, 1), spec=None):
    return limits.interface_problems(iface, workgroup, spec or {}, info)


def assert_names(found: list[str], limit: str, value: int) -> None:
    assert len(found) == 1, found
    assert f"{limit} ({value})" in found[0], found


def infos() -> list[tuple[str, vkcore.DeviceInfo]]:
    return [(n, devices.device_info(devices.load(n))) for n in devices.NAMES]


RECORDED = infos()


@pytest.fixture(params=[n for n, _ in RECORDED] + ["this device"])
def info(request, device):
    if request.param == "this device":
        return device.info
    return dict(RECORDED)[request.param]


# --------------------------------------------------------------------------- pure checks
def test_push_block_size_against_max_push_constants(info):
    limit = info.max_push_constants_size
    assert problems(interface(push_size=limit), info) == []
    assert_names(problems(interface(push_size=limit + 4), info), "maxPushConstantsSize", limit)


def test_uniform_block_size_against_max_uniform_buffer_range(info):
    limit = info.max_uniform_buffer_range
    block = dataclasses.replace(bindings(reflect.UNIFORM_BUFFER, 1)[0], fixed_bytes=limit)
    fits = limits.uniform_block_problems((block,), info)
    over = limits.uniform_block_problems(
        (dataclasses.replace(block, fixed_bytes=limit + 16),), info
    )
    assert fits == []
    assert_names(over, "maxUniformBufferRange", limit)


def test_shared_memory_against_max_compute_shared_memory_size(info):
    limit = info.max_compute_shared_memory_size
    assert problems(interface(shared_bytes=limit), info) == []
    assert_names(
        problems(interface(shared_bytes=limit + 1), info), "maxComputeSharedMemorySize", limit
    )
    # A size that depends on a specialization constant: its default, then a value set.
    per_row = ("mul", ("spec", 3), 4)
    iface = interface(
        shared_bytes=per_row, spec=(reflect.SpecConstant(3, "N", "uint", limit // 4),)
    )
    assert problems(iface, info) == []
    assert_names(
        problems(iface, info, spec={3: limit // 4 + 1}), "maxComputeSharedMemorySize", limit
    )


def test_workgroup_size_per_axis_and_invocations(info):
    sizes, total = info.max_compute_work_group_size, info.max_compute_work_group_invocations
    for axis in range(3):
        at = [1, 1, 1]
        at[axis] = min(sizes[axis], total)
        assert problems(interface(), info, tuple(at)) == []
        at[axis] = sizes[axis] + 1
        found = problems(interface(), info, tuple(at))
        assert any(
            f"outside 1..{sizes[axis]}" in p and "maxComputeWorkGroupSize" in p for p in found
        ), found
    x = min(sizes[0], total)
    y = min(sizes[1], total // x + 1)
    if x * y > total:  # some shape within each axis has too many invocations
        assert_names(
            problems(interface(), info, (x, y, 1)), "maxComputeWorkGroupInvocations", total
        )


def test_dispatch_group_counts(info):
    counts = info.max_compute_work_group_count
    limits.check_groups(tuple(counts), info)
    for axis in range(3):
        grid = [1, 1, 1]
        grid[axis] = counts[axis] + 1
        with pytest.raises(
            ValueError, match=rf"outside 1..{counts[axis]} .*maxComputeWorkGroupCount"
        ):
            limits.check_groups(grid, info)
        grid[axis] = 0
        with pytest.raises(ValueError, match="maxComputeWorkGroupCount"):
            limits.check_groups(grid, info)


# The lowest values Vulkan allows for the descriptor limits; a recorded report that lacks
# one (the vulkaninfo texts: 0, unknown) is tried at this value instead.
VULKAN_MINIMUMS = dict(
    max_per_stage_descriptor_storage_buffers=4,
    max_per_stage_descriptor_uniform_buffers=12,
    max_per_stage_descriptor_sampled_images=16,
    max_per_stage_descriptor_storage_images=4,
    max_per_stage_resources=128,
    max_descriptor_set_storage_buffers=24,
    max_descriptor_set_uniform_buffers=72,
    max_descriptor_set_sampled_images=96,
    max_descriptor_set_storage_images=24,
    max_per_set_descriptors=1024,
    max_bound_descriptor_sets=4,
)


def known(info: vkcore.DeviceInfo) -> vkcore.DeviceInfo:
    unknown = {f: v for f, v in VULKAN_MINIMUMS.items() if not getattr(info, f)}
    return dataclasses.replace(info, **unknown)


def test_recorded_descriptor_limits_are_the_reports(info):
    """The reports converted by gpuinfo.py carry their descriptor limits (PowerVR's 16
    uniform buffers per stage, for one); every known value is at least Vulkan's minimum."""
    for field, minimum in VULKAN_MINIMUMS.items():
        value = getattr(info, field)
        assert value == 0 or value >= minimum, (field, value)


@pytest.mark.parametrize("scope", [1, 2], ids=["per_stage", "pipeline_layout"])
@pytest.mark.parametrize("kind", KINDS)
def test_each_descriptor_kind_against_its_limits(kind, scope, info):
    field, name = limits.DESCRIPTOR_LIMITS[kind][scope]
    other_field = limits.DESCRIPTOR_LIMITS[kind][3 - scope][0]
    for base in (known(info), dataclasses.replace(info, **VULKAN_MINIMUMS)):
        # The other limits raised above the count: only the one under test can trip.
        limit = getattr(base, field)
        base = dataclasses.replace(base, **{other_field: 2**40, "max_per_stage_resources": 2**40})
        assert limits.count_problems({kind: limit}, {}, base) == []
        assert_names(limits.count_problems({kind: limit + 1}, {}, base), name, limit)
    # Counted from the bindings themselves, at a small limit.
    small = dataclasses.replace(known(info), **VULKAN_MINIMUMS)
    limit = getattr(small, field)
    small = dataclasses.replace(small, **{other_field: 10**6, "max_per_stage_resources": 10**6})
    assert limits.descriptor_problems(bindings(kind, limit), small) == []
    assert_names(limits.descriptor_problems(bindings(kind, limit + 1), small), name, limit)


def spread(n: int, info: vkcore.DeviceInfo) -> dict[str, int] | None:
    """``n`` descriptors over the kinds, each within its own limits (None if they cannot
    hold that many)."""
    out = {}
    for kind, (_label, (stage_field, _), (layout_field, _)) in limits.DESCRIPTOR_LIMITS.items():
        out[kind] = min(n, getattr(info, stage_field), getattr(info, layout_field))
        n -= out[kind]
    return out if n == 0 else None


def test_total_per_stage_and_per_set_and_sets_bound_on_recorded_devices(info):
    info = known(info)
    total = info.max_per_stage_resources
    if spread(total + 1, info) is None:  # the kinds cannot pass the total: a lower one
        total = (
            sum(
                min(getattr(info, s[0]), getattr(info, t[0]))
                for _l, s, t in limits.DESCRIPTOR_LIMITS.values()
            )
            - 1
        )
        info = dataclasses.replace(info, max_per_stage_resources=total)
    assert limits.count_problems(spread(total, info), {}, info) == []
    assert_names(
        limits.count_problems(spread(total + 1, info), {}, info), "maxPerStageResources", total
    )
    per_set, sets = info.max_per_set_descriptors, info.max_bound_descriptor_sets
    assert limits.count_problems({}, {0: per_set}, info) == []
    assert_names(limits.count_problems({}, {0: per_set + 1}, info), "maxPerSetDescriptors", per_set)
    assert limits.count_problems({}, {sets - 1: 1}, info) == []
    assert_names(limits.count_problems({}, {sets: 1}, info), "maxBoundDescriptorSets", sets)


def test_total_descriptors_per_stage_and_per_set_and_sets_bound(device):
    info = dataclasses.replace(device.info, **VULKAN_MINIMUMS)
    # Below every per-kind limit, above the per-stage total: a mix of kinds.
    info = dataclasses.replace(info, max_per_stage_resources=6, max_per_set_descriptors=100)
    mix = bindings(reflect.STORAGE_BUFFER, 4) + tuple(
        dataclasses.replace(b, binding=b.binding + 4) for b in bindings(reflect.UNIFORM_BUFFER, 3)
    )
    assert_names(limits.descriptor_problems(mix, info), "maxPerStageResources", 6)
    assert limits.descriptor_problems(mix[:6], info) == []
    info = dataclasses.replace(info, max_per_stage_resources=128, max_per_set_descriptors=3)
    assert_names(limits.descriptor_problems(mix[:4], info), "maxPerSetDescriptors", 3)
    last = info.max_bound_descriptor_sets
    assert limits.descriptor_problems(bindings(reflect.STORAGE_BUFFER, 1, last - 1), info) == []
    assert_names(
        limits.descriptor_problems(bindings(reflect.STORAGE_BUFFER, 1, last), info),
        "maxBoundDescriptorSets",
        last,
    )


@pytest.mark.parametrize(("kind", "bits"), sorted(limits.TYPE_FEATURES))
def test_spec_constant_types_need_their_feature(kind, bits, device):
    field, feature = limits.TYPE_FEATURES[(kind, bits)]
    const = reflect.SpecConstant(0, "K", kind, 0, bits)
    has = dataclasses.replace(device.info, **{field: True})
    lacks = dataclasses.replace(device.info, **{field: False})
    assert limits.spec_type_problems((const,), has) == []
    found = limits.spec_type_problems((const,), lacks)
    assert len(found) == 1 and feature in found[0] and f"{bits}-bit {kind}" in found[0]


def test_every_problem_is_reported_at_once(device):
    info = device.info
    iface = interface(
        push_size=info.max_push_constants_size + 4,
        shared_bytes=info.max_compute_shared_memory_size + 4,
    )
    with pytest.raises(ValueError) as err:
        limits.check_interface(iface, (1, 1, 1), {}, info, "prog.comp")
    text = str(err.value)
    assert text.startswith("prog.comp does not fit this device")
    assert "maxPushConstantsSize" in text and "maxComputeSharedMemorySize" in text


# --------------------------------------------------------------------------- reflection
SHARED = """#version 450
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint ROWS = 3;
shared float a[ROWS][gl_WorkGroupSize.x];
shared uvec2 b[ROWS * 2u + 1u];
shared struct S { float x; vec3 y; } c[4];
shared double d;
layout(std430, binding = 0) buffer Y { float y[]; };
void main() {
    a[0][0] = 1; b[0] = uvec2(1); c[0].x = 1; d = 1;
    y[0] = a[0][0] + float(b[0].x) + c[0].x + float(d);
}
"""


def expected_shared(rows: int, x: int) -> int:
    """The declared types' bytes, counted by hand from SHARED (no padding)."""
    return rows * x * 4 + (2 * rows + 1) * 8 + 4 * (4 + 3 * 4) + 8


@pytest.mark.parametrize(("rows", "x"), [(3, 1), (5, 64), (1, 1000)])
def test_shared_bytes_follow_the_specialization(rows, x):
    iface = reflect.reflect(spirv.compile_source(SHARED).code)
    spec = {1: rows} if rows != 3 else {}
    spec |= {0: x} if x != 1 else {}
    assert limits.shared_bytes(iface, spec) == expected_shared(rows, x)
    # The shipped interface file keeps the expression: the same size from its JSON form.
    again = interface_file.from_json(json.loads(json.dumps(interface_file.to_json(iface))))
    assert again == iface and limits.shared_bytes(again, spec) == expected_shared(rows, x)


def test_program_refuses_shared_memory_past_the_device(device):
    limit = device.info.max_compute_shared_memory_size
    per_row = expected_shared(1, 64) - expected_shared(0, 64)
    rows = (limit - expected_shared(0, 64)) // per_row  # the most that fit
    fits = vkcore.Program(SHARED, workgroup=64, spec={"ROWS": rows}, device=device)
    out = np.zeros(1, np.float32)
    fits(out)  # under validation: the layer's own count agrees that it fits
    assert out[0] == 4.0
    over = rows + 1
    assert expected_shared(over, 64) > limit
    with pytest.raises(ValueError, match=rf"maxComputeSharedMemorySize \({limit}\)"):
        vkcore.Program(SHARED, workgroup=64, spec={"ROWS": over}, device=device)


def test_program_refuses_each_limit_before_the_pipeline(device, monkeypatch):
    """Past a limit nothing reaches the driver: no pipeline is asked for."""
    asked = []
    monkeypatch.setattr(
        type(device), "program_pipeline", lambda self, *a, **k: asked.append(a) or 1 / 0
    )
    info = device.info
    many = "".join(
        f"layout(std430, binding = {i}) buffer B{i} {{ float v{i}[]; }};\n"
        for i in range(info.max_per_stage_descriptor_storage_buffers + 1)
    )
    cases = {
        "maxPushConstantsSize": "layout(push_constant) uniform P { float a[N]; } pc;\n"
        "void main() { v0[0] = pc.a[0]; }".replace("N", str(info.max_push_constants_size // 4 + 1)),
        "maxPerStageDescriptorStorageBuffers": many + "void main() { v0[0] = 1.0; }",
    }
    for limit, body in cases.items():
        decl = (
            ""
            if limit != "maxPushConstantsSize"
            else ("layout(std430, binding = 0) buffer B0 { float v0[]; };\n")
        )
        src = "#version 450\nlayout(local_size_x = 1) in;\n" + decl + body
        with pytest.raises(ValueError, match=re.escape(limit)):
            vkcore.Program(src, device=device)
    assert asked == []


# --------------------------------------------------------------------------- the driver
@pytest.mark.parametrize("validation", ["1", "0"], ids=["validated", "plain"])
@pytest.mark.parametrize(
    ("scenario", "limit"),
    [
        ("push_64k", "maxPushConstantsSize"),
        ("storage_40", "maxPerStageDescriptorStorageBuffers"),
        ("uniform_over", "maxPerStageDescriptorUniformBuffers"),
        ("shared_over", "maxComputeSharedMemorySize"),
    ],
)
def test_past_a_limit_is_an_error_not_a_crash(scenario, limit, validation, device):
    if scenario == "storage_40" and device.info.max_per_stage_descriptor_storage_buffers >= 40:
        pytest.fail("this device takes 40 storage buffers: the scenario needs a lower limit")
    stdout, text = run_worker(WORKER, scenario, validation=validation, timeout=120)
    assert stdout.startswith("REFUSED ") and limit in stdout, text


# --------------------------------------------------------------------------- capabilities
@pytest.mark.parametrize("cap", sorted(limits.CAPABILITY_FEATURES))
def test_capabilities_need_their_feature(cap, info):
    """An OpCapability needing a feature is refused, naming both, exactly where the
    device lacks it (or vkcore never enables it), on every recorded GPU."""
    name, field, feature = limits.CAPABILITY_FEATURES[cap]
    found = limits.capability_problems((cap, cap), info)
    if field is not None and getattr(info, field):
        assert found == []
        lacks = dataclasses.replace(info, **{field: False})
        found = limits.capability_problems((cap,), lacks)
    assert len(found) == 1 and f"OpCapability {name} " in found[0] and feature in found[0]


@pytest.mark.parametrize("bit", range(len(limits.SUBGROUP_CAPABILITIES)))
def test_subgroup_capabilities_need_their_operations(bit, info):
    cap = limits.FIRST_SUBGROUP_CAPABILITY + bit
    offered = info.subgroup_supported_operations & (1 << bit) and (
        info.subgroup_supported_stages & limits.STAGE_COMPUTE
    )
    found = limits.capability_problems((cap,), info)
    assert (found == []) == bool(offered), found
    lacks = dataclasses.replace(info, subgroup_supported_operations=~(1 << bit) & 0xFF)
    found = limits.capability_problems((cap,), lacks)
    assert len(found) == 1 and limits.SUBGROUP_CAPABILITIES[bit] in found[0]


FEATURE_SHADERS = {  # GLSL whose module declares a capability needing a feature
    "double": ("", "double d = double(x[0]); x[0] = float(d * d);"),
    "int64_t": ("GL_ARB_gpu_shader_int64", "int64_t d = int64_t(x[0]); x[0] = float(d * d);"),
    "int16_t": (
        "GL_EXT_shader_explicit_arithmetic_types",
        "int16_t d = int16_t(x[0]); x[0] = float(d * d);",
    ),
    "float16_t": (
        "GL_EXT_shader_explicit_arithmetic_types",
        "float16_t d = float16_t(x[0]); x[0] = float(d * d);",
    ),
    "int8_t": (
        "GL_EXT_shader_explicit_arithmetic_types",
        "int8_t d = int8_t(x[0]); x[0] = float(d * d);",
    ),
    "16-bit storage": ("GL_EXT_shader_16bit_storage", "x[0] = float(h16[0]);"),
    "8-bit storage": ("GL_EXT_shader_8bit_storage", "x[0] = float(int(h8[0]));"),
    "int64 atomics": (
        "GL_EXT_shader_atomic_int64",
        "atomicAdd(h64[0], 1ul); x[0] = 1.0;",
    ),
}


def feature_source(extension: str, body: str) -> str:
    lines = ["#version 450"]
    if extension:
        lines.append(f"#extension {extension} : require")
    if "h64" in body:
        lines.append("#extension GL_ARB_gpu_shader_int64 : require")
    lines.append("layout(local_size_x = 1) in;")
    lines.append("layout(std430, binding = 0) buffer X { float x[]; };")
    if "h16" in body:
        lines.append("layout(std430, binding = 1) buffer H { float16_t h16[]; };")
    if "h8" in body:
        lines.append("layout(std430, binding = 1) buffer H { int8_t h8[]; };")
    if "h64" in body:
        lines.append("layout(std430, binding = 1) buffer H { uint64_t h64[]; };")
    return "\n".join([*lines, f"void main() {{ {body} }}", ""])


@pytest.mark.parametrize("shader", sorted(FEATURE_SHADERS))
def test_shaders_needing_a_feature_never_reach_a_driver_without_it(shader, device, monkeypatch):
    """Each module is refused before the pipeline where a feature it needs is missing
    (GLSL and spirv= alike), and otherwise runs on this validated device (a validation
    error would fail the test): no capability reaches the driver unenabled."""
    src = feature_source(*FEATURE_SHADERS[shader])
    code = spirv.compile_source(src).code
    caps = reflect.reflect(code).capabilities
    needed = [c for c in caps if c in limits.CAPABILITY_FEATURES]
    assert needed, caps
    fields = {limits.CAPABILITY_FEATURES[c][1] for c in needed}
    if None in fields or not all(getattr(device.info, f) for f in fields):
        with pytest.raises(ValueError, match="OpCapability"):
            vkcore.Program(spirv=code, device=device)
    else:
        prog = vkcore.Program(src, device=device)
        x = np.array([3.0, 0, 0, 0], np.float32)
        prog(x, *([np.zeros(16, np.int8)] if len(prog.bindings) == 2 else []), groups=1)
        assert x[0] == (0.0 if len(prog.bindings) == 2 else 9.0)
    asked = []
    monkeypatch.setattr(
        type(device), "program_pipeline", lambda self, *a, **k: asked.append(a) or 1 / 0
    )
    lacking = {f: False for f in fields if f is not None}
    monkeypatch.setattr(device, "info", dataclasses.replace(device.info, **lacking))
    for made in (
        lambda: vkcore.Program(src, device=device),
        lambda: vkcore.Program(spirv=code, device=device),
    ):
        with pytest.raises(ValueError, match="OpCapability"):
            made()
    assert asked == []
