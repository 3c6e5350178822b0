"""What goes into a command buffer: :class:`Dispatch` steps, barriers, copies, and the
descriptor sets that bind each dispatch's buffers, and the pools both come from.

A kernel call (or a sequence) is a list of Dispatch steps run in order in one command
buffer, with a compute-to-compute barrier before a step that touches a buffer an earlier
step since the last barrier wrote, or writes one it read (:class:`Hazards`), and closed by
a compute-to-host barrier, so mapped memory reads the results once the fence has
signalled. Submitting them is the :class:`~vkcore.device.submit.submitter.Submitter`'s job.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vkcore import _vk
from vkcore._vk import constants as vk
from vkcore.device.context import DeviceContext
from vkcore.device.memory.buffer import Buffer
from vkcore.device.memory.host_buffer import HostBuffer
from vkcore.device.pipelines.pipeline import Pipeline

# Pipeline stages and access masks, short names for the barriers below.
COMPUTE = vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
TRANSFER = vk.VK_PIPELINE_STAGE_TRANSFER_BIT
HOST = vk.VK_PIPELINE_STAGE_HOST_BIT
TOP = vk.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT
BOTTOM = vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT
SHADER_READ, SHADER_WRITE = vk.VK_ACCESS_SHADER_READ_BIT, vk.VK_ACCESS_SHADER_WRITE_BIT
TRANSFER_READ, TRANSFER_WRITE = vk.VK_ACCESS_TRANSFER_READ_BIT, vk.VK_ACCESS_TRANSFER_WRITE_BIT
HOST_READ, HOST_WRITE = vk.VK_ACCESS_HOST_READ_BIT, vk.VK_ACCESS_HOST_WRITE_BIT


@dataclass(frozen=True)
class Dispatch:
    """One vkCmdDispatch: a pipeline, its buffers (bindings 0..n-1), push constants, grid."""

    pipeline: Pipeline
    buffers: tuple[Buffer, ...]
    push: bytes
    groups: tuple[int, int, int]


def begin(dev: DeviceContext, cb: Any, *, one_time: bool, flags: int = 0) -> None:
    """Reset ``cb`` and begin recording (once-only where ``one_time``)."""
    keep = _vk.Keep()
    _vk.check(dev.lib.vkResetCommandBuffer(cb, 0), "vkResetCommandBuffer")
    if one_time:
        flags |= vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT
    info = keep.struct("VkCommandBufferBeginInfo", flags=flags)
    _vk.check(dev.lib.vkBeginCommandBuffer(cb, info), "vkBeginCommandBuffer")


class ReuseKeys:
    """The key under which a dispatch list's recording may be kept: its pipelines,
    buffers, push constants and grids (None where a buffer is gone). A kept recording is
    dropped before anything it binds is destroyed (``Submitter.forget``), so a key is
    never matched by other objects at the same addresses. The key of a lone Dispatch
    submitted again (a repeated Program call) is remembered, weakly (remembering must not
    keep its buffers alive): a Dispatch never changes, only whether its buffers live."""

    def __init__(self) -> None:
        self._last: tuple[weakref.ref[Dispatch], bool, tuple[Any, ...]] | None = None

    def of(self, dispatches: Sequence[Dispatch], timed: bool) -> tuple[Any, ...] | None:
        if not dispatches:
            return None
        if len(dispatches) == 1 and self._last is not None:
            ref, was_timed, last = self._last
            d = dispatches[0]
            if ref() is d and was_timed == timed:
                alive = all(buf.handle is not None for buf in d.buffers)
                return last if alive else None
        key = reuse_key(dispatches, timed)
        if len(dispatches) == 1 and key is not None:
            self._last = (weakref.ref(dispatches[0]), timed, key)
        return key


def reuse_key(dispatches: Sequence[Dispatch], timed: bool) -> tuple[Any, ...] | None:
    """Pipelines, buffers, push constants and grids of the list, or None where a buffer
    is destroyed."""
    parts: list[Any] = [timed]
    for d in dispatches:
        for buf in d.buffers:
            if buf.handle is None:
                return None
        parts.append((id(d.pipeline), tuple(id(b) for b in d.buffers), d.push, d.groups))
    return tuple(parts)


def barrier(
    dev: DeviceContext, cb: Any, src_stage: int, src: int, dst_stage: int, dst: int
) -> None:
    """A global memory barrier: ``src`` accesses of ``src_stage`` before ``dst`` ones."""
    mem = dev.ffi.new(
        "VkMemoryBarrier*",
        {
            "sType": _vk.structure_type("VkMemoryBarrier"),
            "srcAccessMask": src,
            "dstAccessMask": dst,
        },
    )
    null = dev.ffi.NULL
    dev.lib.vkCmdPipelineBarrier(cb, src_stage, dst_stage, 0, 1, mem, 0, null, 0, null)


class Hazards:
    """The buffers steps since the last barrier read and wrote, to tell whether the next
    step needs one: it does when it reads or writes what they wrote, or writes what they
    read. A binding's access is what its shader code may do (``Pipeline.access``: one the
    code never names is none, whatever runs; one it names behind a runtime flag counts),
    which is also what the validation layer's synchronization check counts. Buffers are
    told apart by identity (each Buffer has memory of its own), except host-memory
    imports, which may share pages and so count as one buffer."""

    _HOST = "host memory"

    def __init__(self) -> None:
        self.read: set[Any] = set()
        self.written: set[Any] = set()

    @classmethod
    def _key(cls, buf: Buffer) -> Any:
        return cls._HOST if isinstance(buf, HostBuffer) else buf

    def add(self, d: Dispatch) -> bool:
        """Take step ``d`` into account; True when it must wait for the earlier steps (a
        barrier goes before it, and it then starts a new group of independent steps)."""
        reads: set[Any] = set()
        writes: set[Any] = set()
        for buf, access in zip(d.buffers, d.pipeline.access, strict=True):
            if access != "none":
                (writes if access == "write" else reads).add(self._key(buf))
        hazard = not self.written.isdisjoint(reads | writes) or not self.read.isdisjoint(writes)
        if hazard:
            self.read.clear()
            self.written.clear()
        self.read |= reads
        self.written |= writes
        return hazard


def record_dispatches(
    dev: DeviceContext,
    cb: Any,
    dispatches: Sequence[Dispatch],
    sets: list[Any],
    *,
    query_pool: Any = None,
    one_time: bool,
    bare: bool = False,
) -> None:
    """Record ``dispatches`` (each with its descriptor set) into ``cb``, with timestamps
    around them in ``query_pool`` (queries 0 and 1) unless it is None. ``bare``: the
    dispatches alone, no barrier at all (the bench's raw floor, for dispatches that do not
    depend on each other)."""
    ffi, lib = dev.ffi, dev.lib
    begin(dev, cb, one_time=one_time)
    if query_pool is not None:
        lib.vkCmdResetQueryPool(cb, query_pool, 0, 2)
        lib.vkCmdWriteTimestamp(cb, TOP, query_pool, 0)
    set_arr = ffi.new("VkDescriptorSet[1]")
    hazards = Hazards()
    bind_pipeline, bind_sets = lib.vkCmdBindPipeline, lib.vkCmdBindDescriptorSets
    push_constants, dispatch = lib.vkCmdPushConstants, lib.vkCmdDispatch
    bound = None
    for d, dset in zip(dispatches, sets, strict=True):
        if not bare and hazards.add(d):
            barrier(dev, cb, COMPUTE, SHADER_WRITE, COMPUTE, SHADER_READ | SHADER_WRITE)
        pipeline = d.pipeline
        layout = pipeline.layout
        if pipeline is not bound:  # repeated calls of one kernel bind it once
            bind_pipeline(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.handle)
            bound = pipeline
        set_arr[0] = dset
        bind_sets(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, set_arr, 0, ffi.NULL)
        if d.push:
            push_constants(cb, layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, len(d.push), d.push)
        dispatch(cb, *d.groups)
    if not bare:
        barrier(dev, cb, COMPUTE, SHADER_WRITE, HOST, HOST_READ)
    if query_pool is not None:
        lib.vkCmdWriteTimestamp(cb, BOTTOM, query_pool, 1)
    _vk.check(lib.vkEndCommandBuffer(cb), "vkEndCommandBuffer")


def create_timestamp_pool(dev: DeviceContext) -> Any:
    """A query pool of two timestamps (before and after a command buffer's steps)."""
    keep = _vk.Keep()
    info = keep.struct("VkQueryPoolCreateInfo", queryType=vk.VK_QUERY_TYPE_TIMESTAMP, queryCount=2)
    pool = dev.ffi.new("VkQueryPool*")
    call = "vkCreateQueryPool"
    _vk.check(dev.lib.vkCreateQueryPool(dev.handle, info, dev.ffi.NULL, pool), call)
    return pool[0]


def record_lead_barrier(dev: DeviceContext, cb: Any) -> None:
    """Record ``cb`` to hold one barrier: every earlier submission's shader and transfer
    writes before every later shader access. Submitted ahead of a batch while a sequence
    may still run (``Submitter.submit_info``), so it may be in several pending batches."""
    begin(dev, cb, one_time=False, flags=vk.VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT)
    barrier(
        dev,
        cb,
        COMPUTE | TRANSFER,
        SHADER_WRITE | TRANSFER_WRITE,
        COMPUTE,
        SHADER_READ | SHADER_WRITE,
    )
    _vk.check(dev.lib.vkEndCommandBuffer(cb), "vkEndCommandBuffer")


def record_copy(
    dev: DeviceContext, cb: Any, src: Buffer, src_offset: int, dst: Buffer, dst_offset: int, n: int
) -> None:
    """Record one buffer-to-buffer copy of ``n`` bytes into ``cb``, after every earlier
    shader or host write and before every later shader or host read."""
    begin(dev, cb, one_time=True)
    region = dev.ffi.new(
        "VkBufferCopy*", {"srcOffset": src_offset, "dstOffset": dst_offset, "size": n}
    )
    barrier(
        dev, cb, COMPUTE | HOST, SHADER_WRITE | HOST_WRITE, TRANSFER, TRANSFER_READ | TRANSFER_WRITE
    )
    dev.lib.vkCmdCopyBuffer(cb, src.handle, dst.handle, 1, region)
    barrier(dev, cb, TRANSFER, TRANSFER_WRITE, COMPUTE | HOST, SHADER_READ | HOST_READ)
    _vk.check(dev.lib.vkEndCommandBuffer(cb), "vkEndCommandBuffer")


def check_dispatches(dispatches: Sequence[Dispatch]) -> None:
    """ValueError for a dispatch with the wrong number of buffers, RuntimeError for a
    destroyed buffer: refused before anything is allocated for them."""
    for d in dispatches:
        if len(d.buffers) != d.pipeline.binding_count:
            want, got = d.pipeline.binding_count, len(d.buffers)
            raise ValueError(f"{d.pipeline.name} takes {want} buffers, got {got}")
        for buf in d.buffers:
            buf._require_alive()


def allocate_sets(dev: DeviceContext, pool: Any, dispatches: Sequence[Dispatch]) -> tuple[int, Any]:
    """vkAllocateDescriptorSets for one set per dispatch, into a cffi array of handles;
    the VkResult is returned (not raised) so the caller may free room and retry. Sets
    allocated by a call that was interrupted as it returned are freed again."""
    keep = _vk.Keep()
    layouts = keep.new("VkDescriptorSetLayout[]", [d.pipeline.set_layout for d in dispatches])
    info = keep.struct(
        "VkDescriptorSetAllocateInfo",
        descriptorPool=pool,
        descriptorSetCount=len(dispatches),
        pSetLayouts=layouts,
    )
    out = dev.ffi.new("VkDescriptorSet[]", len(dispatches))  # NULL handles until allocated
    try:
        return dev.lib.vkAllocateDescriptorSets(dev.handle, info, out), out
    except BaseException:
        made = [out[i] for i in range(len(dispatches)) if out[i] != dev.ffi.NULL]
        free_sets(dev, pool, made)
        raise


def write_sets(dev: DeviceContext, sets: Sequence[Any], dispatches: Sequence[Dispatch]) -> None:
    """Point each dispatch's set at its buffers (storage, uniform or texel-view bindings):
    one vkUpdateDescriptorSets over arrays filled in place (a sequence writes hundreds)."""
    ffi = dev.ffi
    count = sum(len(d.buffers) for d in dispatches)
    if not count:
        return
    writes = ffi.new("VkWriteDescriptorSet[]", count)
    infos = ffi.new("VkDescriptorBufferInfo[]", count)
    views = ffi.new("VkBufferView[]", count)
    stype = _vk.structure_type("VkWriteDescriptorSet")
    i = 0
    for dset, d in zip(sets, dispatches, strict=True):
        pipeline = d.pipeline
        for binding, buf in zip(pipeline.binding_numbers, d.buffers, strict=True):
            write = writes[i]
            write.sType = stype
            write.dstSet = dset
            write.dstBinding = binding
            write.descriptorCount = 1
            write.descriptorType = pipeline.descriptor_type(binding)
            fmt = pipeline.texel.get(binding)
            if fmt is None:
                info = infos[i]
                info.buffer = buf.handle
                info.range = buf.nbytes  # offset 0
                write.pBufferInfo = infos + i
            else:
                views[i] = buf.view(fmt)
                write.pTexelBufferView = views + i
            i += 1
    dev.lib.vkUpdateDescriptorSets(dev.handle, count, writes, 0, ffi.NULL)


def free_sets(dev: DeviceContext, pool: Any, sets: Sequence[Any]) -> None:
    if sets:
        arr = dev.ffi.new("VkDescriptorSet[]", list(sets))
        dev.lib.vkFreeDescriptorSets(dev.handle, pool, len(sets), arr)


def create_command_pool(dev: DeviceContext) -> Any:
    """A command pool on the compute queue family whose buffers can be reset one by one."""
    keep = _vk.Keep()
    info = keep.struct(
        "VkCommandPoolCreateInfo",
        flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
        queueFamilyIndex=dev.queue_family,
    )
    out = dev.ffi.new("VkCommandPool*")
    call = "vkCreateCommandPool"
    _vk.check(dev.lib.vkCreateCommandPool(dev.handle, info, dev.ffi.NULL, out), call)
    return out[0]


def create_descriptor_pool(dev: DeviceContext, max_sets: int) -> Any:
    """A descriptor pool for ``max_sets`` sets of storage, texel and uniform bindings,
    whose sets can be freed one by one."""
    keep = _vk.Keep()
    counts = {
        vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER: max_sets * 8,
        vk.VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER: max_sets * 4,
        # users' programs (vkcore.Program) may declare uniform blocks
        vk.VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER: max_sets * 2,
    }
    sizes = keep.new(
        "VkDescriptorPoolSize[]",
        [{"type": kind, "descriptorCount": n} for kind, n in counts.items()],
    )
    info = keep.struct(
        "VkDescriptorPoolCreateInfo",
        flags=vk.VK_DESCRIPTOR_POOL_CREATE_FREE_DESCRIPTOR_SET_BIT,
        maxSets=max_sets,
        poolSizeCount=len(counts),
        pPoolSizes=sizes,
    )
    out = dev.ffi.new("VkDescriptorPool*")
    call = "vkCreateDescriptorPool"
    _vk.check(dev.lib.vkCreateDescriptorPool(dev.handle, info, dev.ffi.NULL, out), call)
    return out[0]
