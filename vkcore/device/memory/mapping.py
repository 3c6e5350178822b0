"""Host access to mapped memory: the ranges flushed after host writes and invalidated
before host reads where a memory type is not HOST_COHERENT (rounded out to the device's
nonCoherentAtomSize)."""

from __future__ import annotations

from typing import Any

from vkcore import _vk
from vkcore.device.context import DeviceContext

VK_WHOLE_SIZE = (1 << 64) - 1
# Test hook: treat every mapped type as non-coherent (flush and invalidate even coherent
# memory, which is legal), so that path runs on devices whose types are all coherent.
ASSUME_NON_COHERENT = False


def atom_range(offset: int, size: int, atom: int, allocation_size: int) -> tuple[int, int] | None:
    """The ``(offset, size)`` of a VkMappedMemoryRange covering bytes ``[offset,
    offset + size)`` of a mapped allocation of ``allocation_size`` bytes: the offset
    rounded down and the end rounded up to multiples of ``atom`` (nonCoherentAtomSize),
    and ``VK_WHOLE_SIZE`` when the rounded end reaches the allocation's end (the last
    atom may be partial). None for an empty range (nothing to flush)."""
    for name, value in (("offset", offset), ("size", size), ("allocation_size", allocation_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    if isinstance(atom, bool) or not isinstance(atom, int) or atom < 0:
        raise ValueError(f"atom must be an int >= 0, got {atom!r}")
    if offset + size > allocation_size:
        raise ValueError(f"range {offset}+{size} exceeds the {allocation_size}-byte allocation")
    if size == 0:
        return None
    atom = max(atom, 1)  # 0 would be a broken report; 1 means any range is aligned
    start = offset - offset % atom
    end = -(-(offset + size) // atom) * atom
    return (start, VK_WHOLE_SIZE) if end >= allocation_size else (start, end - start)


def sync_range(
    device: DeviceContext, memory: Any, offset: int, size: int, allocation_size: int, *, flush: bool
) -> None:
    """Flush host writes to (``flush``) or invalidate the host's view of bytes ``[offset,
    offset + size)`` of the non-coherent mapped allocation ``memory`` of ``device``."""
    span = atom_range(offset, size, device.info.non_coherent_atom_size, allocation_size)
    if span is None:
        return
    rng = device.ffi.new(
        "VkMappedMemoryRange*",
        {
            "sType": _vk.structure_type("VkMappedMemoryRange"),
            "memory": memory,
            "offset": span[0],
            "size": span[1],
        },
    )
    if flush:
        call = "vkFlushMappedMemoryRanges"
        _vk.check(device.lib.vkFlushMappedMemoryRanges(device.handle, 1, rng), call)
    else:
        call = "vkInvalidateMappedMemoryRanges"
        _vk.check(device.lib.vkInvalidateMappedMemoryRanges(device.handle, 1, rng), call)
