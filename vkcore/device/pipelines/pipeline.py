"""Compute pipelines: shader module, descriptor-set layout, pipeline layout, pipeline.

A pipeline is made from SPIR-V and the layout reflected from it (:class:`vkcore.Program`
makes every one, vkcore's own kernels included): ``bindings`` lists (binding number,
VkDescriptorType) of set 0 in the order buffers are passed, ``push_size`` the bytes of
push constants, ``spec`` the specialization constants' bytes by SpecId (each its type's
width: 4 bytes, 8 for a double or a 64-bit int, 1 or 2 for 8/16-bit types), ``texel`` the view
format of each binding read as a uniform texel buffer (through a view of the buffer's
whole texels). Creation always goes through the device's VkPipelineCache
(:class:`~vkcore.device.pipelines.cache.PipelineCache`), with creation feedback when available.
"""

from __future__ import annotations

import time
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
        dev = self.device
        ffi, lib = dev.ffi, dev.lib
        if dev.handle is None:
            return
        for out, destroy in (
            (self._handle, lib.vkDestroyPipeline),
            (self._layout, lib.vkDestroyPipelineLayout),
            (self._set_layout, lib.vkDestroyDescriptorSetLayout),
            (self._module, lib.vkDestroyShaderModule),
        ):
            if out[0] != ffi.NULL:
                destroy(dev.handle, out[0], ffi.NULL)
                out[0] = ffi.NULL
