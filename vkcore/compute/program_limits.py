"""The device limits a :class:`vkcore.Program` must fit, checked before anything reaches
the driver (past them a driver may crash rather than fail): pure functions of a reflected
interface (:mod:`vkcore.spirv.reflect`), the specialization in effect and a
:class:`~vkcore.device.info.DeviceInfo`, so tests call them with recorded devices too.

Each problem names the Vulkan limit and the device's value. The contract is in
docs/programs.md (section "Device limits").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from vkcore.device.info import STAGE_COMPUTE, DeviceInfo
from vkcore.spirv import reflect

# Per descriptor kind: what the message calls it, and the DeviceInfo field and Vulkan name
# of its per-stage and its pipeline-layout limit (texel buffers count as images there).
DESCRIPTOR_LIMITS = {
    reflect.STORAGE_BUFFER: (
        "storage buffers",
        ("max_per_stage_descriptor_storage_buffers", "maxPerStageDescriptorStorageBuffers"),
        ("max_descriptor_set_storage_buffers", "maxDescriptorSetStorageBuffers"),
    ),
    reflect.UNIFORM_BUFFER: (
        "uniform buffers",
        ("max_per_stage_descriptor_uniform_buffers", "maxPerStageDescriptorUniformBuffers"),
        ("max_descriptor_set_uniform_buffers", "maxDescriptorSetUniformBuffers"),
    ),
    reflect.UNIFORM_TEXEL_BUFFER: (
        "uniform texel buffers (sampled images)",
        ("max_per_stage_descriptor_sampled_images", "maxPerStageDescriptorSampledImages"),
        ("max_descriptor_set_sampled_images", "maxDescriptorSetSampledImages"),
    ),
    reflect.STORAGE_TEXEL_BUFFER: (
        "storage texel buffers (storage images)",
        ("max_per_stage_descriptor_storage_images", "maxPerStageDescriptorStorageImages"),
        ("max_descriptor_set_storage_images", "maxDescriptorSetStorageImages"),
    ),
}
# Specialization constant types beyond 32 bits or below them, and the feature each needs.
TYPE_FEATURES = {
    ("float", 64): ("shader_float64", "shaderFloat64"),
    ("int", 64): ("shader_int64", "shaderInt64"),
    ("uint", 64): ("shader_int64", "shaderInt64"),
    ("float", 16): ("shader_float16", "shaderFloat16"),
    ("int", 16): ("shader_int16", "shaderInt16"),
    ("uint", 16): ("shader_int16", "shaderInt16"),
    ("int", 8): ("shader_int8", "shaderInt8"),
    ("uint", 8): ("shader_int8", "shaderInt8"),
}

# SPIR-V capabilities that need a device feature: their name, the DeviceInfo field that
# says the feature is enabled (vkcore enables what the device offers), and its Vulkan
# name; None where vkcore never enables the feature. Without it the driver gets a module
# it may not take (a validation error, undefined behavior).
CAPABILITY_FEATURES: dict[int, tuple[str, str | None, str]] = {
    9: ("Float16", "shader_float16", "shaderFloat16"),
    10: ("Float64", "shader_float64", "shaderFloat64"),
    11: ("Int64", "shader_int64", "shaderInt64"),
    12: ("Int64Atomics", None, "shaderBufferInt64Atomics"),
    22: ("Int16", "shader_int16", "shaderInt16"),
    39: ("Int8", "shader_int8", "shaderInt8"),
    4433: ("StorageBuffer16BitAccess", None, "storageBuffer16BitAccess"),
    4434: ("UniformAndStorageBuffer16BitAccess", None, "uniformAndStorageBuffer16BitAccess"),
    4435: ("StoragePushConstant16", None, "storagePushConstant16"),
    4448: ("StorageBuffer8BitAccess", "storage_buffer_8bit_access", "storageBuffer8BitAccess"),
    4449: ("UniformAndStorageBuffer8BitAccess", None, "uniformAndStorageBuffer8BitAccess"),
    4450: ("StoragePushConstant8", None, "storagePushConstant8"),
    6016: ("DotProductInputAll", "integer_dot_product", "shaderIntegerDotProduct"),
    6017: ("DotProductInput4x8Bit", "integer_dot_product", "shaderIntegerDotProduct"),
    6018: ("DotProductInput4x8BitPacked", "integer_dot_product", "shaderIntegerDotProduct"),
    6019: ("DotProduct", "integer_dot_product", "shaderIntegerDotProduct"),
}
# GroupNonUniform (61) .. GroupNonUniformQuad (68): bit i of VkSubgroupFeatureFlags, in
# the compute stage.
SUBGROUP_CAPABILITIES = (
    "GroupNonUniform",
    "GroupNonUniformVote",
    "GroupNonUniformArithmetic",
    "GroupNonUniformBallot",
    "GroupNonUniformShuffle",
    "GroupNonUniformShuffleRelative",
    "GroupNonUniformClustered",
    "GroupNonUniformQuad",
)
FIRST_SUBGROUP_CAPABILITY = 61


def _over(what: str, value: int, limit_name: str, limit: int) -> str | None:
    if value <= limit:
        return None
    return f"{what}: more than this device's {limit_name} ({limit})"


def push_problems(push_size: int, info: DeviceInfo) -> list[str]:
    found = _over(
        f"the push-constant block is {push_size} bytes",
        push_size,
        "maxPushConstantsSize",
        info.max_push_constants_size,
    )
    return [found] if found else []


def descriptor_problems(bindings: Sequence[reflect.Binding], info: DeviceInfo) -> list[str]:
    """The shader's descriptors against the device (:func:`count_problems`)."""
    by_kind = {kind: sum(1 for b in bindings if b.kind == kind) for kind in DESCRIPTOR_LIMITS}
    by_set: dict[int, int] = {}
    for b in bindings:
        by_set[b.set] = by_set.get(b.set, 0) + 1
    return count_problems(by_kind, by_set, info)


def count_problems(
    by_kind: Mapping[str, int], by_set: Mapping[int, int], info: DeviceInfo
) -> list[str]:
    """Counts of each descriptor kind (one compute stage: its per-stage count is its
    pipeline layout's), their total, the count of each set, and the sets bound."""
    out = []
    for kind, (label, *scopes) in DESCRIPTOR_LIMITS.items():
        count = by_kind.get(kind, 0)
        for field, name in scopes:
            out.append(
                _over(f"the shader declares {count} {label}", count, name, _int(info, field))
            )
    total = sum(by_kind.values())
    what = f"the shader declares {total} descriptors"
    out.append(_over(what, total, "maxPerStageResources", info.max_per_stage_resources))
    for number, count in sorted(by_set.items()):
        what = f"descriptor set {number} holds {count} descriptors"
        out.append(_over(what, count, "maxPerSetDescriptors", info.max_per_set_descriptors))
    if by_set:
        last = max(by_set)
        what = f"the shader uses descriptor set {last} ({last + 1} sets bound)"
        out.append(_over(what, last + 1, "maxBoundDescriptorSets", info.max_bound_descriptor_sets))
    return [p for p in out if p]


def uniform_block_problems(bindings: Sequence[reflect.Binding], info: DeviceInfo) -> list[str]:
    out = []
    for b in bindings:
        if b.kind == reflect.UNIFORM_BUFFER:
            what = f"binding {b.binding} ({b.name}) is a uniform block of {b.fixed_bytes} bytes"
            found = _over(
                what, b.fixed_bytes, "maxUniformBufferRange", info.max_uniform_buffer_range
            )
            if found:
                out.append(found + "; use a storage buffer")
    return out


def spec_type_problems(spec: Sequence[reflect.SpecConstant], info: DeviceInfo) -> list[str]:
    out = []
    for c in spec:
        need = TYPE_FEATURES.get((c.kind, c.bits))
        if need is not None and not getattr(info, need[0]):
            out.append(
                f"specialization constant {c.name or f'SpecId {c.id}'} is a {c.bits}-bit "
                f"{c.kind}, which needs the {need[1]} feature this device does not offer"
            )
    return out


def capability_problems(capabilities: Sequence[int], info: DeviceInfo) -> list[str]:
    """Each OpCapability whose device feature this device does not offer (or vkcore does
    not enable)."""
    out = []
    for cap in dict.fromkeys(capabilities):
        sub = cap - FIRST_SUBGROUP_CAPABILITY
        if 0 <= sub < len(SUBGROUP_CAPABILITIES):
            offered = bool(info.subgroup_supported_operations & (1 << sub)) and bool(
                info.subgroup_supported_stages & STAGE_COMPUTE
            )
            if not offered:
                out.append(
                    f"OpCapability {SUBGROUP_CAPABILITIES[sub]} needs subgroup operations "
                    "this device does not offer in compute shaders (its supportedOperations)"
                )
            continue
        need = CAPABILITY_FEATURES.get(cap)
        if need is None:
            continue
        name, field, feature = need
        if field is None:
            out.append(
                f"OpCapability {name} needs the {feature} feature, which vkcore does not enable"
            )
        elif not getattr(info, field):
            out.append(
                f"OpCapability {name} needs the {feature} feature this device does not offer"
            )
    return out


def workgroup_problems(workgroup: tuple[int, int, int], info: DeviceInfo) -> list[str]:
    out = []
    for dim, (size, limit) in enumerate(
        zip(workgroup, info.max_compute_work_group_size, strict=True)
    ):
        if not 1 <= size <= limit:
            out.append(
                f"workgroup: local_size_{'xyz'[dim]} = {size} is outside 1..{limit} "
                "(this device's maxComputeWorkGroupSize)"
            )
    total = math.prod(workgroup)
    found = _over(
        f"workgroup: {workgroup} is {total} invocations",
        total,
        "maxComputeWorkGroupInvocations",
        info.max_compute_work_group_invocations,
    )
    return out + ([found] if found else [])


def shared_bytes(interface: reflect.Interface, spec: Mapping[int, Any]) -> int | None:
    """Bytes of the shader's shared variables with the specialization ``spec`` (SpecId ->
    value; the shader's defaults for the others), at least; None where unknown."""
    values = {c.id: int(c.default) for c in interface.spec if c.kind != "float"}
    values.update({i: int(v) for i, v in spec.items() if not isinstance(v, float)})
    try:
        return reflect.evaluate(interface.shared_bytes, values)
    except KeyError:  # a length made of a constant that is not an integer one
        return None


def shared_problems(nbytes: int | None, info: DeviceInfo) -> list[str]:
    if nbytes is None:
        return []
    what = f"the shader's shared variables take at least {nbytes} bytes"
    found = _over(what, nbytes, "maxComputeSharedMemorySize", info.max_compute_shared_memory_size)
    return [found] if found else []


def interface_problems(
    interface: reflect.Interface,
    workgroup: tuple[int, int, int],
    spec: Mapping[int, Any],
    info: DeviceInfo,
) -> list[str]:
    """Every limit of ``info`` the interface exceeds with this local size and
    specialization (empty when it fits)."""
    return [
        *push_problems(interface.push_size, info),
        *descriptor_problems(interface.bindings, info),
        *uniform_block_problems(interface.bindings, info),
        *spec_type_problems(interface.spec, info),
        *capability_problems(interface.capabilities, info),
        *workgroup_problems(workgroup, info),
        *shared_problems(shared_bytes(interface, spec), info),
    ]


def check_interface(
    interface: reflect.Interface,
    workgroup: tuple[int, int, int],
    spec: Mapping[int, Any],
    info: DeviceInfo,
    name: str = "the shader",
) -> None:
    """A ValueError naming every limit :func:`interface_problems` finds."""
    problems = interface_problems(interface, workgroup, spec, info)
    if problems:
        raise ValueError(f"{name} does not fit this device: " + "; ".join(problems))


def check_groups(groups: Sequence[int], info: DeviceInfo) -> None:
    """A dispatch's workgroup counts (three ints) against maxComputeWorkGroupCount."""
    for dim, (g, limit) in enumerate(zip(groups, info.max_compute_work_group_count, strict=True)):
        if not 1 <= g <= limit:
            raise ValueError(
                f"groups[{dim}] = {g} is outside 1..{limit} (this device's "
                "maxComputeWorkGroupCount)"
            )


def _int(info: DeviceInfo, field: str) -> int:
    return int(getattr(info, field))
