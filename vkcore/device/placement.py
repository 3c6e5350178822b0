"""Where a buffer's memory goes: one pure function of the device's memory types and heaps.

Plain data in (:class:`MemoryType`, :class:`MemoryHeap`, a purpose), an ordered list of
candidate memory types out (:class:`Placement`), so the policy is tested against the
recorded memory properties of real devices without any of them present.

Purposes:

``resident``  data kernels use repeatedly (weights, Tensors): device-local. It is mapped
              directly only where the mappable device-local heap is the device's main
              one (:func:`main_heap_size`: UMA, most integrated and CPU devices,
              resizable BAR with a heap about as large). A discrete GPU without resizable
              BAR exposes a small (typically 256 MiB) mappable window; weights never go
              there, and transfers use a staging buffer instead.
``upload``    host-visible memory the host writes and the device reads (staging for
              uploads): write-combined is fine, host memory preferred over the BAR window.
``readback``  host-visible memory the device writes and the host reads: HOST_CACHED
              first (uncached memory is read over the bus one access at a time), coherent
              or not (non-coherent memory needs vkInvalidateMappedMemoryRanges, aligned
              to nonCoherentAtomSize).
``params``    small per-call parameters: the BAR window is fine, then any host-visible.

A resident buffer mapped in uncached memory is written in place, but a large read from it
goes through the readback staging buffer (:func:`read_in_place_max`).

Each placement lists every usable type in order of preference; an allocation that fails
in one falls back to the next (the caller logs it once). ``resident`` ends with the
unmapped device-local types (reached through staging; a type mapped first is offered
again unmapped, for a mapping that fails) and, last, host memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vkcore._vk import constants as vk
from vkcore.errors import shown

DEVICE_LOCAL = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
HOST_VISIBLE = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT
HOST_COHERENT = vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
HOST_CACHED = vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT
LAZILY_ALLOCATED = vk.VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT
PROTECTED = vk.VK_MEMORY_PROPERTY_PROTECTED_BIT
# AMD's device-coherent/uncached types: usable, but slow for ordinary buffers.
DEVICE_COHERENT_AMD = vk.VK_MEMORY_PROPERTY_DEVICE_COHERENT_BIT_AMD
DEVICE_UNCACHED_AMD = vk.VK_MEMORY_PROPERTY_DEVICE_UNCACHED_BIT_AMD
RDMA_CAPABLE_NV = vk.VK_MEMORY_PROPERTY_RDMA_CAPABLE_BIT_NV  # (also usable for ordinary buffers)
HEAP_DEVICE_LOCAL = vk.VK_MEMORY_HEAP_DEVICE_LOCAL_BIT

PURPOSES = ("resident", "upload", "readback", "params")
# A mappable device-local heap at least this fraction of the main heap (main_heap_size) is
# the device's main memory (resizable BAR reports slightly less than the whole VRAM).
MAIN_HEAP_FRACTION = 0.75

FLAG_NAMES = {
    "DEVICE_LOCAL": DEVICE_LOCAL,
    "HOST_VISIBLE": HOST_VISIBLE,
    "HOST_COHERENT": HOST_COHERENT,
    "HOST_CACHED": HOST_CACHED,
    "LAZILY_ALLOCATED": LAZILY_ALLOCATED,
    "PROTECTED": PROTECTED,
    "DEVICE_COHERENT_AMD": DEVICE_COHERENT_AMD,
    "DEVICE_UNCACHED_AMD": DEVICE_UNCACHED_AMD,
    "RDMA_CAPABLE_NV": RDMA_CAPABLE_NV,
}
HEAP_FLAG_NAMES = {
    "DEVICE_LOCAL": HEAP_DEVICE_LOCAL,
    "MULTI_INSTANCE": vk.VK_MEMORY_HEAP_MULTI_INSTANCE_BIT,
}


@dataclass(frozen=True)
class MemoryType:
    index: int
    flags: int
    heap_index: int


@dataclass(frozen=True)
class MemoryHeap:
    size: int
    flags: int


@dataclass(frozen=True)
class Choice:
    """One candidate: a memory type, whether buffers there are mapped for direct host
    access, and whether the mapping is coherent (else flush/invalidate are needed)."""

    type_index: int
    mapped: bool
    coherent: bool


@dataclass(frozen=True)
class Placement:
    purpose: str
    choices: tuple[Choice, ...]

    @property
    def preferred(self) -> Choice:
        return self.choices[0]


def flags_of(names: Sequence[str]) -> int:
    """A flag mask from names such as ``"DEVICE_LOCAL"`` (recorded device files)."""
    mask = 0
    for name in names:
        key = name.upper().replace("VK_MEMORY_PROPERTY_", "").replace("_BIT", "")
        if key not in FLAG_NAMES:
            raise ValueError(f"unknown memory property flag {name!r}")
        mask |= FLAG_NAMES[key]
    return mask


def _has(t: MemoryType, mask: int) -> bool:
    return t.flags & mask == mask


def _ordinary(t: MemoryType) -> bool:
    """A type for ordinary buffers: not lazily allocated, protected or AMD-uncached."""
    return not t.flags & (LAZILY_ALLOCATED | PROTECTED | DEVICE_UNCACHED_AMD | DEVICE_COHERENT_AMD)


def main_heap_size(types: Sequence[MemoryType], heaps: Sequence[MemoryHeap]) -> int:
    """Size of the largest heap that holds an ordinary DEVICE_LOCAL memory type (of the
    largest heap with any ordinary type when none does). A heap only protected or lazily
    allocated types live in (a phone's 4 GiB protected heap), one no type lives in, or one
    that reports 0 bytes holds no buffers, so it is never the main one."""
    ordinary = [t for t in types if _ordinary(t) and heaps[t.heap_index].size > 0]
    local = [heaps[t.heap_index].size for t in ordinary if _has(t, DEVICE_LOCAL)]
    return max(local or [heaps[t.heap_index].size for t in ordinary] or [0])


def maps_device_memory(types: Sequence[MemoryType], heaps: Sequence[MemoryHeap]) -> bool:
    """True when some DEVICE_LOCAL | HOST_VISIBLE | HOST_COHERENT type lives on a heap
    about as large as the main one: device memory is host memory (or all of it is
    mappable), so resident buffers are mapped instead of staged."""
    main = main_heap_size(types, heaps)
    return any(
        _ordinary(t)
        and _has(t, DEVICE_LOCAL | HOST_VISIBLE | HOST_COHERENT)
        and heaps[t.heap_index].size >= MAIN_HEAP_FRACTION * main
        for t in types
    )


def place(
    types: Sequence[MemoryType],
    heaps: Sequence[MemoryHeap],
    purpose: str,
    *,
    type_bits: int = 0xFFFFFFFF,
    force_staging: bool = False,
) -> Placement:
    """The candidate memory types for a buffer of ``purpose``, best first.

    ``type_bits`` is VkMemoryRequirements.memoryTypeBits; ``force_staging`` keeps resident
    buffers unmapped even where mapping is possible (tests the discrete-GPU path).
    Raises ValueError when no type fits the purpose at all.
    """
    if purpose not in PURPOSES:
        raise ValueError(f"purpose must be one of {PURPOSES}, got {shown(purpose)}")
    usable = [t for t in types if type_bits >> t.index & 1 and _ordinary(t)]
    by_heap = sorted(usable, key=lambda t: -heaps[t.heap_index].size)  # stable: index order
    order = {
        "resident": _resident,
        "upload": _upload,
        "readback": _readback,
        "params": _params,
    }[purpose](by_heap, heaps, maps_device_memory(types, heaps) and not force_staging)
    seen: set[tuple[int, bool]] = set()
    choices = []
    for t, mapped in order:
        if (t.index, mapped) not in seen:
            seen.add((t.index, mapped))
            choices.append(Choice(t.index, mapped, _has(t, HOST_COHERENT)))
    if not choices:
        raise ValueError(f"no memory type of this device can hold a {purpose} buffer")
    return Placement(purpose, tuple(choices))


# Host reads of at most this many bytes from uncached mapped memory are made in place: a
# copy into cached memory costs a submission and a wait, more than a few uncached loads.
UNCACHED_READ_IN_PLACE_BYTES = 4096
NO_LIMIT = 1 << 62


def read_in_place_max(
    types: Sequence[MemoryType], heaps: Sequence[MemoryHeap], type_index: int
) -> int:
    """The most bytes the host reads in place from a mapped buffer of memory type
    ``type_index``; a larger read is copied into the readback staging buffer first.

    The CPU reads uncached (write-combined) memory, such as a discrete GPU's BAR or an
    APU's carve-out, one uncached load at a time, so large results go through a
    HOST_CACHED type where the device has one. Cached memory, or a device without a
    cached type, is read in place whatever the size.
    """
    if _has(types[type_index], HOST_CACHED):
        return NO_LIMIT
    readback = types[place(types, heaps, "readback").preferred.type_index]
    return UNCACHED_READ_IN_PLACE_BYTES if _has(readback, HOST_CACHED) else NO_LIMIT


_Order = list[tuple[MemoryType, bool]]


def _host_visible(ts: Sequence[MemoryType]) -> list[MemoryType]:
    return [t for t in ts if _has(t, HOST_VISIBLE)]


def _resident(ts: Sequence[MemoryType], heaps: Sequence[MemoryHeap], direct: bool) -> _Order:
    local = [t for t in ts if _has(t, DEVICE_LOCAL)]
    mappable = [t for t in local if _has(t, HOST_VISIBLE | HOST_COHERENT)]
    mappable.sort(key=lambda t: not _has(t, HOST_CACHED))  # the host reads results too
    out: _Order = [(t, True) for t in mappable] if direct else []
    # Device-local types reached through staging: those that are not also the BAR window
    # first, so a 256 MiB window is the last device-local choice.
    out += [(t, False) for t in local if not _has(t, HOST_VISIBLE)]
    out += [(t, False) for t in local if _has(t, HOST_VISIBLE)]
    host = [t for t in _host_visible(ts) if not _has(t, DEVICE_LOCAL)]
    out += [(t, True) for t in host if _has(t, HOST_COHERENT)]  # host memory, last
    return out


def _upload(ts: Sequence[MemoryType], heaps: Sequence[MemoryHeap], direct: bool) -> _Order:
    hv = _host_visible(ts)
    # Host memory before the device's mappable window; coherent before non-coherent.
    hv.sort(key=lambda t: (_has(t, DEVICE_LOCAL) and not direct, not _has(t, HOST_COHERENT)))
    return [(t, True) for t in hv]


def _readback(ts: Sequence[MemoryType], heaps: Sequence[MemoryHeap], direct: bool) -> _Order:
    hv = _host_visible(ts)
    # Cached first (coherent before not), then the upload order for the rest.
    cached = sorted(
        (t for t in hv if _has(t, HOST_CACHED)), key=lambda t: not _has(t, HOST_COHERENT)
    )
    return [(t, True) for t in cached] + _upload(ts, heaps, direct)


def _params(ts: Sequence[MemoryType], heaps: Sequence[MemoryHeap], direct: bool) -> _Order:
    hv = _host_visible(ts)
    # Small and read by the device: mappable device memory (the BAR window) is best.
    hv.sort(key=lambda t: (not _has(t, DEVICE_LOCAL), not _has(t, HOST_COHERENT)))
    return [(t, True) for t in hv]


def import_type(types: Sequence[MemoryType], type_bits: int) -> int | None:
    """The memory type for host memory imported as a buffer (VK_EXT_external_memory_host),
    among ``type_bits`` (what vkGetMemoryHostPointerPropertiesEXT and the buffer allow).

    numpy reads and writes the imported pages directly, with no flush or invalidate, so
    only HOST_COHERENT types qualify; cached ones first (the pages are ordinary host
    memory, and an uncached mapping would slow numpy's own accesses). None when no
    coherent type can import the pointer (the caller copies instead).
    """
    allowed = [t for t in types if type_bits >> t.index & 1 and _ordinary(t)]
    coherent = [t for t in allowed if _has(t, HOST_COHERENT)]
    coherent.sort(key=lambda t: not _has(t, HOST_CACHED))  # stable: index order otherwise
    return coherent[0].index if coherent else None
