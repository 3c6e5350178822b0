"""Memory placement (vkcore.device.placement) on the recorded memory properties of real devices."""

import pytest
from devices import NAMES, largest_heap_with, load, memory

from vkcore.device import placement as P

DISCRETE = [n for n in NAMES if load(n).get("device_type") == "DISCRETE_GPU"]
UNIFIED = [n for n in NAMES if load(n).get("device_type") in ("INTEGRATED_GPU", "CPU")]
BAR_WINDOW = 256 << 20


def _main_and_window(record):
    """The device's main memory (its largest heap of device-local buffers) and its largest
    heap of mappable device-local memory."""
    main = largest_heap_with(record, "DEVICE_LOCAL")
    return main, largest_heap_with(record, "DEVICE_LOCAL", "HOST_VISIBLE", "HOST_COHERENT")


def _all_mappable(name):
    main, window = _main_and_window(load(name))
    return window > 0 and window >= 0.75 * main  # "about as large as the largest one"


# Discrete GPUs that can map only part of their memory (the BAR window, or none), and
# those (resizable or full BAR, as data-center GPUs have) that can map all of it.
NO_REBAR = [n for n in DISCRETE if not _all_mappable(n)]
FULL_BAR = [n for n in DISCRETE if _all_mappable(n)]
SMALL_WINDOW = [n for n in NO_REBAR if 0 < _main_and_window(load(n))[1] <= BAR_WINDOW]
NVIDIA, AMD, INTEL, QUALCOMM, ARM = 0x10DE, 0x1002, 0x8086, 0x5143, 0x13B5


def test_the_recorded_devices_cover_the_kinds_that_matter():
    records = {n: load(n) for n in NAMES}
    assert len(NAMES) >= 6
    assert DISCRETE and UNIFIED and NO_REBAR and FULL_BAR
    assert any(records[n]["vendor_id"] == NVIDIA for n in SMALL_WINDOW), "NVIDIA without ReBAR"
    assert any(records[n]["vendor_id"] == NVIDIA for n in FULL_BAR), "NVIDIA data-center"
    radv = [r for r in records.values() if r.get("driver_id") == "DRIVER_ID_MESA_RADV"]
    assert any(r["subgroup_size_control"]["maxSubgroupSize"] == 64 for r in radv)
    anv = [r for r in records.values() if r["vendor_id"] == INTEL]
    assert any(r["subgroup_size_control"]["minSubgroupSize"] == 8 for r in anv)
    assert any("VK_KHR_portability_subset" in r["device_extensions"] for r in records.values())
    assert any(r["vendor_id"] in (QUALCOMM, ARM) for r in records.values()), "a mobile GPU"
    for name, record in records.items():
        assert record["source"], f"{name} must name the report it came from"


def _type(record, index):
    return memory(record)[0][index]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("purpose", P.PURPOSES)
def test_every_choice_is_legal_for_its_purpose(name, purpose):
    record = load(name)
    types, heaps = memory(record)
    placement = P.place(types, heaps, purpose)
    offered = [(c.type_index, c.mapped) for c in placement.choices]
    assert len(offered) == len(set(offered)), "a type is offered twice the same way"
    for c in placement.choices:
        t = types[c.type_index]
        assert 0 <= t.heap_index < len(heaps)
        assert not c.mapped or t.flags & P.HOST_VISIBLE, "only host-visible memory is mapped"
        assert c.coherent == bool(t.flags & P.HOST_COHERENT)
        assert not t.flags & (P.LAZILY_ALLOCATED | P.PROTECTED | P.DEVICE_UNCACHED_AMD)
        if purpose != "resident":
            assert c.mapped and t.flags & P.HOST_VISIBLE
    if purpose == "resident":
        assert types[placement.preferred.type_index].flags & P.DEVICE_LOCAL


@pytest.mark.parametrize("name", NO_REBAR)
def test_discrete_gpu_without_rebar_keeps_weights_out_of_the_bar_window(name):
    record = load(name)
    types, heaps = memory(record)
    main, window = _main_and_window(record)
    assert not P.maps_device_memory(types, heaps)
    resident = P.place(types, heaps, "resident").preferred
    assert not resident.mapped
    assert heaps[types[resident.type_index].heap_index].size == main, "the large heap"
    if largest_heap_with(record, "HOST_VISIBLE", "HOST_CACHED"):
        readback = types[P.place(types, heaps, "readback").preferred.type_index]
        assert readback.flags & P.HOST_CACHED, "results are read from cached memory"
    host = [t for t in types if t.flags & P.HOST_VISIBLE and not t.flags & P.DEVICE_LOCAL]
    if any(P._ordinary(t) for t in host):
        upload = types[P.place(types, heaps, "upload").preferred.type_index]
        assert not upload.flags & P.DEVICE_LOCAL, "staging uses host memory, not the BAR window"
    if window:
        params = types[P.place(types, heaps, "params").preferred.type_index]
        mappable_local = P.DEVICE_LOCAL | P.HOST_VISIBLE
        assert params.flags & mappable_local == mappable_local, "parameters in the BAR window"


@pytest.mark.parametrize("name", FULL_BAR)
def test_discrete_gpu_with_full_bar_maps_weights_but_stages_large_reads(name):
    """All of the device memory is mappable: weights go there, mapped (written in place),
    but the host reads large results from cached host memory, not over the bus."""
    types, heaps = memory(load(name))
    assert P.maps_device_memory(types, heaps)
    resident = P.place(types, heaps, "resident").preferred
    kind = types[resident.type_index]
    assert resident.mapped and kind.flags & P.DEVICE_LOCAL
    assert heaps[kind.heap_index].size == P.main_heap_size(types, heaps)
    if not largest_heap_with(load(name), "HOST_VISIBLE", "HOST_CACHED"):
        pytest.skip("this device has no cached memory to read results from")
    readback = types[P.place(types, heaps, "readback").preferred.type_index]
    assert readback.flags & P.HOST_CACHED, "results are read from cached memory"
    if not kind.flags & P.HOST_CACHED:
        assert P.read_in_place_max(types, heaps, resident.type_index) <= 64 << 10


@pytest.mark.parametrize("name", NAMES)
def test_large_reads_come_from_cached_memory_wherever_the_device_has_it(name):
    """For every mappable type: a read of any size is made in place only from cached
    memory, or where the device has no cached type to stage through."""
    types, heaps = memory(load(name))
    cached = P.HOST_VISIBLE | P.HOST_CACHED
    has_cached = any(t.flags & cached == cached for t in types if P._ordinary(t))
    for t in types:
        if not t.flags & P.HOST_VISIBLE:
            continue
        limit = P.read_in_place_max(types, heaps, t.index)
        if t.flags & P.HOST_CACHED or not has_cached:
            assert limit == P.NO_LIMIT
        else:
            assert 0 <= limit <= 64 << 10, "a large read from uncached memory is staged"


@pytest.mark.parametrize("name", UNIFIED)
def test_unified_memory_is_mapped_directly_where_all_of_it_is_mappable(name):
    """Integrated GPUs and CPU devices map their memory, unless only a small aperture of
    it is mappable (older AMD APUs: 256 MiB of a larger carve-out): then it is staged."""
    types, heaps = memory(load(name))
    resident = P.place(types, heaps, "resident").preferred
    assert types[resident.type_index].flags & P.DEVICE_LOCAL
    assert resident.mapped == _all_mappable(name) == P.maps_device_memory(types, heaps)
    staged = P.place(types, heaps, "resident", force_staging=True).preferred
    assert not staged.mapped


@pytest.mark.parametrize("name", NAMES)
def test_type_bits_are_respected_and_an_impossible_request_is_an_error(name):
    types, heaps = memory(load(name))
    for i, t in enumerate(types):
        if t.flags & P.HOST_VISIBLE and P._ordinary(t):
            only = P.place(types, heaps, "upload", type_bits=1 << i)
            assert [c.type_index for c in only.choices] == [i]
    with pytest.raises(ValueError, match="no memory type"):
        P.place(types, heaps, "readback", type_bits=0)


def test_resizable_bar_counts_as_main_memory():
    """A mappable device-local heap about as large as VRAM (ReBAR) is mapped directly."""
    heaps = [P.MemoryHeap(24 << 30, P.HEAP_DEVICE_LOCAL), P.MemoryHeap(32 << 30, 0)]
    types = [
        P.MemoryType(0, P.DEVICE_LOCAL, 0),
        P.MemoryType(1, P.HOST_VISIBLE | P.HOST_COHERENT, 1),
        P.MemoryType(2, P.DEVICE_LOCAL | P.HOST_VISIBLE | P.HOST_COHERENT, 0),
    ]
    assert P.maps_device_memory(types, heaps)
    assert P.place(types, heaps, "resident").preferred == P.Choice(2, True, True)


def test_bad_arguments():
    with pytest.raises(ValueError, match="purpose"):
        P.place([], [], "weights")
    with pytest.raises(ValueError, match="flag"):
        P.flags_of(["DEVICE_LOCAL", "SHINY"])
    assert P.flags_of(["VK_MEMORY_PROPERTY_HOST_CACHED_BIT"]) == P.HOST_CACHED


@pytest.mark.parametrize("name", NAMES)
def test_resident_always_falls_back_to_device_local_through_staging(name):
    """Whatever was preferred, the list reaches device-local memory through staging before
    host memory: a failed mapping or a full mappable heap still leaves a device-local home."""
    types, heaps = memory(load(name))
    choices = P.place(types, heaps, "resident").choices
    staged = [i for i, c in enumerate(choices) if not c.mapped]
    assert staged, "no device-local choice through staging"
    assert all(types[choices[i].type_index].flags & P.DEVICE_LOCAL for i in staged)
    host = [i for i, c in enumerate(choices) if not types[c.type_index].flags & P.DEVICE_LOCAL]
    assert all(i > max(staged) for i in host), "host memory only after device-local memory"
    for c in choices[: staged[0]]:  # mapped device-local first: offered again unmapped
        assert P.Choice(c.type_index, False, c.coherent) in choices


@pytest.mark.parametrize("name", NAMES)
def test_imported_host_memory_takes_a_coherent_type_cached_first(name):
    """numpy touches imported pages with no flush or invalidate: only coherent types."""
    types, _ = memory(load(name))
    every = (1 << len(types)) - 1
    index = P.import_type(types, every)
    coherent = [t for t in types if t.flags & P.HOST_COHERENT and P._ordinary(t)]
    if not coherent:
        assert index is None
        return
    chosen = types[index]
    assert chosen.flags & P.HOST_COHERENT
    if any(t.flags & P.HOST_CACHED for t in coherent):
        assert chosen.flags & P.HOST_CACHED
    for t in types:  # each type allowed alone: that type if coherent, else nothing
        alone = P.import_type(types, 1 << t.index)
        assert alone == (t.index if t in coherent else None)


def test_import_type_with_no_allowed_type_is_none():
    types = [P.MemoryType(0, P.HOST_VISIBLE | P.HOST_COHERENT, 0)]
    assert P.import_type(types, 0) is None
    assert P.import_type([P.MemoryType(0, P.HOST_VISIBLE, 0)], 1) is None
    assert P.import_type(types, 1) == 0
