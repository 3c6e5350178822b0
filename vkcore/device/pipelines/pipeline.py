"""Compute pipelines: shader module, descriptor-set layout, pipeline layout, pipeline.

A pipeline is made from SPIR-V and the layout reflected from it (:class:`vkcore.Program`
makes every one, vkcore's own kernels included): ``bindings`` lists (binding number,
VkDescriptorType) of set 0 in the order buffers are passed, ``push_size`` the bytes of
push constants, ``spec`` the specialization constants' bytes by SpecId (each its type's
width: 4 bytes, 8 for a double or a 64-bit int, 1 or 2 for 8/16-bit types), ``texel`` the view
format of each binding read as a uniform texel buffer (through a view of the buffer's
whole texels). Creation always goes through the device's VkPipelineCache
(:class:`~vkcore.device.pipelines.cache.PipelineCache`), with creation feedback when available.

A pipeline's Vulkan objects go when the Pipeline object is collected (nothing can bind it
again: no Program, no recorded step, no kept key refers to it) or when its device closes.
Whatever may still run it refers to it: a sequence in flight is kept by the submitter
until its work finished, and a single call waits before it returns. The release first
settles a call an exception cut short and drops the submitter's kept recordings that
bind it (``DeviceContext.forget_pipeline``), then destroys.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from vkcore import _vk, spirv
from vkcore._vk import constants as vk
from vkcore.device.context import DeviceContext
from vkcore.device.pipelines.cache import PipelineCache

_FEEDBACK_VALID = vk.VK_PIPELINE_CREATION_FEEDBACK_VALID_BIT
_FEEDBACK_CACHE_HIT = vk.VK_PIPELINE_CREATION_FEEDBACK_APPLICATION_PIPELINE_CACHE_HIT_BIT


class _Handle:
    """A Vulkan handle read from the cffi out-pointer ``_<name>`` the driver writes it
    into: None while NULL; assigning None forgets it."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = "_" + name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        out = getattr(obj, self.slot)
        return None if out[0] == obj.device.ffi.NULL else out[0]

    def __set__(self, obj: Any, value: Any) -> None:
        getattr(obj, self.slot)[0] = obj.device.ffi.NULL if value is None else value


class Pipeline:
    """One compute pipeline variant and the layouts it needs; owned by its Device, created
    through ``cache``."""

    def __init__(
        self,
        device: DeviceContext,
        name: str,
        code: spirv.Spirv,
        bindings: Sequence[tuple[int, int]],
        push_size: int,
        spec: Mapping[int, bytes],
        texel: Mapping[int, str],
        *,
        cache: PipelineCache,
        access: Sequence[str] | None = None,
    ) -> None:
        self.device = device
        self.cache = cache
        self.name = name
        self.spirv = code
        self.bindings = tuple(bindings)
        self.binding_count = len(self.bindings)
        self.binding_numbers = tuple(b for b, _ in self.bindings)
        # Per binding: "none", "read" or "write" (reflect.Binding.access); unknown is written.
        self.access = tuple(access) if access is not None else ("write",) * self.binding_count
        if len(self.access) != self.binding_count:
            raise ValueError(f"access names {len(self.access)} bindings, not {self.binding_count}")
        self._types = dict(self.bindings)
        self.texel = dict(texel)
        self.push_size = push_size
        self.spec = dict(spec)
        # The driver writes each handle straight into these: whatever is interrupted
        # after a creation call returns, destroy() still finds what it made.
        ffi = device.ffi
        self._module = ffi.new("VkShaderModule*")
        self._set_layout = ffi.new("VkDescriptorSetLayout*")
        self._layout = ffi.new("VkPipelineLayout*")
        self._handle = ffi.new("VkPipeline*")
        outs = (self._handle, self._layout, self._set_layout, self._module)
        _release_when_collected(self, device, outs)
        try:
            self._create_module()
            self._create_layouts()
            self._create_pipeline()
        except BaseException:
            self.destroy()
            raise

    module = _Handle()
    set_layout = _Handle()
    layout = _Handle()
    handle = _Handle()

    def descriptor_type(self, binding: int) -> int:
        """The VkDescriptorType of binding number ``binding``."""
        return self._types[binding]

    def _create_module(self) -> None:
        dev = self.device
        ffi, lib = dev.ffi, dev.lib
        keep = _vk.Keep()
        start = time.perf_counter()
        words = keep.new("char[]", self.spirv.code)
        info = keep.struct(
            "VkShaderModuleCreateInfo",
            codeSize=len(self.spirv.code),
            pCode=ffi.cast("uint32_t*", words),
        )
        _vk.check(
            lib.vkCreateShaderModule(dev.handle, info, ffi.NULL, self._module),
            "vkCreateShaderModule",
        )
        self.module_seconds = time.perf_counter() - start

    def _create_layouts(self) -> None:
        dev = self.device
        ffi, lib = dev.ffi, dev.lib
        keep = _vk.Keep()
        compute = vk.VK_SHADER_STAGE_COMPUTE_BIT
        bindings = keep.array(
            "VkDescriptorSetLayoutBinding",
            [
                {
                    "binding": number,
                    "descriptorType": kind,
                    "descriptorCount": 1,
                    "stageFlags": compute,
                }
                for number, kind in self.bindings
            ],
        )
        set_info = keep.struct(
            "VkDescriptorSetLayoutCreateInfo", bindingCount=len(self.bindings), pBindings=bindings
        )
        _vk.check(
            lib.vkCreateDescriptorSetLayout(dev.handle, set_info, ffi.NULL, self._set_layout),
            "vkCreateDescriptorSetLayout",
        )
        ranges = ffi.NULL
        if self.push_size:
            ranges = keep.new(
                "VkPushConstantRange*", {"stageFlags": compute, "offset": 0, "size": self.push_size}
            )
        layouts = keep.new("VkDescriptorSetLayout[]", [self.set_layout])
        info = keep.struct(
            "VkPipelineLayoutCreateInfo",
            setLayoutCount=1,
            pSetLayouts=layouts,
            pushConstantRangeCount=1 if self.push_size else 0,
            pPushConstantRanges=ranges,
        )
        _vk.check(
            lib.vkCreatePipelineLayout(dev.handle, info, ffi.NULL, self._layout),
            "vkCreatePipelineLayout",
        )

    def _specialization(self, keep: _vk.Keep) -> Any:
        if not self.spec:
            return keep.ffi.NULL
        ids = sorted(self.spec)
        data = b"".join(self.spec[i] for i in ids)
        offsets = [0]
        for i in ids:
            offsets.append(offsets[-1] + len(self.spec[i]))
        entries = keep.array(
            "VkSpecializationMapEntry",
            [
                {"constantID": c, "offset": offsets[n], "size": len(self.spec[c])}
                for n, c in enumerate(ids)
            ],
        )
        blob = keep.new("char[]", data)
        return keep.new(
            "VkSpecializationInfo*",
            {
                "mapEntryCount": len(ids),
                "pMapEntries": entries,
                "dataSize": len(data),
                "pData": blob,
            },
        )

    def _create_pipeline(self) -> None:
        dev = self.device
        ffi, lib = dev.ffi, dev.lib
        keep = _vk.Keep()
        stage = keep.struct(
            "VkPipelineShaderStageCreateInfo",
            stage=vk.VK_SHADER_STAGE_COMPUTE_BIT,
            module=self.module,
            pName=keep.string("main"),
            pSpecializationInfo=self._specialization(keep),
        )
        feedback = stage_feedback = feedback_info = None
        if dev.info.pipeline_creation_feedback:
            feedback = keep.new("VkPipelineCreationFeedback*")
            stage_feedback = keep.new("VkPipelineCreationFeedback[]", 1)
            feedback_info = keep.struct(
                "VkPipelineCreationFeedbackCreateInfo",
                pPipelineCreationFeedback=feedback,
                pipelineStageCreationFeedbackCount=1,
                pPipelineStageCreationFeedbacks=stage_feedback,
            )
        info = keep.struct(
            "VkComputePipelineCreateInfo",
            pNext=feedback_info if feedback_info is not None else ffi.NULL,
            stage=stage[0],
            layout=self.layout,
            basePipelineIndex=-1,
        )
        start = time.perf_counter()
        with self.cache.creating() as cache_handle:
            _vk.check(
                lib.vkCreateComputePipelines(
                    dev.handle, cache_handle, 1, info, ffi.NULL, self._handle
                ),
                "vkCreateComputePipelines",
            )
        self.create_seconds = time.perf_counter() - start
        self.cache_hit: bool | None = None
        self.driver_seconds: float | None = None
        if feedback is not None and feedback.flags & _FEEDBACK_VALID:
            self.cache_hit = bool(feedback.flags & _FEEDBACK_CACHE_HIT)
            self.driver_seconds = feedback.duration / 1e9
        self.cache.record_creation(self.cache_hit)

    def stats(self) -> dict[str, Any]:
        """Creation figures: SPIR-V origin and time, module and pipeline creation, cache hit."""
        return {
            "name": self.name,
            "spirv_origin": self.spirv.origin,
            "spirv_seconds": self.spirv.seconds,
            "module_seconds": self.module_seconds,
            "create_seconds": self.create_seconds,
            "driver_seconds": self.driver_seconds,
            "cache_hit": self.cache_hit,
        }

    def destroy(self) -> None:
        """Release the Vulkan objects now (see the module docstring); idempotent."""
        outs = (self._handle, self._layout, self._set_layout, self._module)
        _release_objects(self.device, outs, id(self))


# The weak references that release collected pipelines: a weak reference calls back only
# while it lives itself. (Not weakref.finalize: it stops calling at interpreter exit,
# before the devices close.)
_watching: set[weakref.ref[Any]] = set()


def _release_when_collected(
    pipeline: Pipeline, device: DeviceContext, outs: tuple[Any, ...]
) -> None:
    """Release ``outs`` when ``pipeline`` is collected. The callback holds the out-pointers,
    not the pipeline, and runs once its weak references are cleared, so no lookup can
    hand the dying pipeline out; its ``id`` is not reused before the callback returns.
    It holds the device weakly (a pipeline must not keep a dropped device alive): a
    device collected with its pipelines destroys them from its own record at close."""
    pipeline_id = id(pipeline)
    device.register_pipeline(pipeline_id, outs)
    device_ref = weakref.ref(device)

    def collected(ref: weakref.ref[Any]) -> None:
        _watching.discard(ref)
        dev = device_ref()
        if dev is None:
            return
        try:
            _release_objects(dev, outs, pipeline_id)
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    _watching.add(weakref.ref(pipeline, collected))


def _release_objects(device: DeviceContext, outs: tuple[Any, ...], pipeline_id: int) -> None:
    """Destroy a pipeline's objects once nothing may use them; the kept recordings of
    ``pipeline_id`` go first."""
    with device.lock:
        if device.handle is None:  # closed (or a forked child's copy): nothing of ours left
            return
        device.before_free()  # a call cut short may still run it
        device.forget_pipeline(pipeline_id)  # kept recordings binding it go first
        destroy_objects(device, outs)


def destroy_objects(device: DeviceContext, outs: tuple[Any, ...]) -> None:
    """Destroy what the out-pointers ``outs`` (pipeline, layout, set layout, module) hold
    and set them NULL; the caller makes sure nothing may use them."""
    ffi, lib = device.ffi, device.lib
    for out, destroy in zip(
        outs,
        (
            lib.vkDestroyPipeline,
            lib.vkDestroyPipelineLayout,
            lib.vkDestroyDescriptorSetLayout,
            lib.vkDestroyShaderModule,
        ),
        strict=True,
    ):
        if out[0] != ffi.NULL:
            destroy(device.handle, out[0], ffi.NULL)
            out[0] = ffi.NULL
