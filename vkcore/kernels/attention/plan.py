"""How an attention call is cut into workgroups: pure functions of the device's
properties (tests call them with the recorded GPUs of tests/support/devices/).

A workgroup takes ``tile`` query rows of one KV head and one split of the keys
(shaders/attention.comp); splits are merged by shaders/attention_merge.comp.
"""

from __future__ import annotations

from dataclasses import dataclass

from vkcore.device.info import DeviceInfo

GPU_WORKGROUP = 64
MAX_TILE = 8  # query rows per workgroup
MAX_ACC_SLOTS = 64  # tile * dimensions per invocation: the accumulators one invocation keeps
MAX_QUERY_SLOTS = 256  # tile * query elements per invocation, kept in registers
MAX_KEY_LANES = 8
CPU_BLOCK_KEYS = 8  # a CPU device pays per block (barriers, the block's scans): larger blocks
MIN_SPLIT_BLOCKS = 4  # a split covers at least this many blocks of keys
MAX_SPLITS = 256
# llvmpipe ends a loop of an invocation after 65,535 iterations counted over the whole
# invocation (an inner loop's count adds up over the outer one's iterations; measured:
# splits of 8192 keys went wrong, 4096 did not): the keys of one pass times the loop
# steps one key may cost (loop_steps_per_key) stay below; a longer split takes passes.
MAX_LOOP_STEPS = 65_535
SHARED_SLOT_BYTES = 4
LANE_WORDS = 4  # attention_lanes.comp reads k and v as uvec4s
# attention_lanes.comp: tiles up to 16 rows (each load of k and v serves more rows),
# within the query elements (tile * D) and accumulators every lane keeps. Its body is
# unrolled over both, and llvmpipe's first compile of it grows about fourfold with each
# doubling: 26 s cold at 1024 query slots for D = 64 against 7 s at 512, with the same
# speed since the SHUFFLE path (a causal prefill of L = 1024, D = 64 in tiles of 8 or 16).
LANE_MAX_TILE = 16
LANE_QUERY_SLOTS = 512
LANE_ACC_SLOTS = 64


@dataclass(frozen=True)
class Grid:
    """The workgroup size, the query rows per tile and the key splits of one call."""

    workgroup: int
    tile: int
    dims_per_invocation: int
    key_lanes: int  # invocations sharing one key's dot products (divides workgroup)
    block_keys: int  # keys per invocation in a block (a block is workgroup * block_keys)
    tiles: int  # per KV head
    splits: int
    chunk: int  # keys per split, a whole number of blocks
    max_chunk: int  # keys of one pass over a split (llvmpipe's loop limit)
    lanes: bool = False  # shaders/attention_lanes.comp (one key at a time) instead
    shuffle: bool = False  # attention_lanes.comp passes weights by subgroupShuffle

    @property
    def shader(self) -> str:
        return "attention_lanes.comp" if self.lanes else "attention.comp"

    @property
    def merged(self) -> bool:
        return self.splits > 1

    @property
    def passes(self) -> int:
        """Dispatches over each split's keys, one after the other, each resuming the
        states the previous one left."""
        return -(-self.chunk // self.max_chunk)


def workgroup_size(info: DeviceInfo) -> int:
    """One subgroup on a CPU device (no barrier cost between its coroutines), else 64
    within the device's limits."""
    limit = min(info.max_compute_work_group_size[0], info.max_compute_work_group_invocations)
    size = max(1, info.subgroup_size or 8) if info.is_cpu else GPU_WORKGROUP
    return max(1, min(size, limit))


def key_lanes(workgroup: int) -> int:
    """Invocations that share one key's dot products: the largest power of two up to
    MAX_KEY_LANES that divides the workgroup."""
    lanes = 1
    while lanes * 2 <= MAX_KEY_LANES and workgroup % (lanes * 2) == 0:
        lanes *= 2
    return lanes


def block_keys(info: DeviceInfo) -> int:
    """Keys per invocation in a block: CPU_BLOCK_KEYS on a CPU device, else 1."""
    return CPU_BLOCK_KEYS if info.is_cpu else 1


def shared_bytes(tile: int, block: int, lanes: int) -> int:
    """One block's scores and partial dot products (shaders/attention.comp), for a
    block of ``block`` keys."""
    return tile * block * (1 + lanes) * SHARED_SLOT_BYTES


def tile_rows(
    info: DeviceInfo, workgroup: int, rows: int, d_elems: int, dv: int, block: int
) -> int:
    """Query rows per workgroup: a power of two up to MAX_TILE, no more than the rows of a
    KV head need, within the accumulators and query elements an invocation keeps and the
    shared memory; ``d_elems`` is the head dimension padded to whole k words."""
    shared = info.max_compute_shared_memory_size or 16384
    lanes = key_lanes(workgroup)
    dims = -(-max(dv, 1) // workgroup)
    q_per = -(-d_elems // lanes)
    tile = 1
    while (
        tile < MAX_TILE
        and tile < rows
        and 2 * tile * dims <= MAX_ACC_SLOTS
        and 2 * tile * q_per <= MAX_QUERY_SLOTS
        and shared_bytes(2 * tile, block, lanes) <= shared
    ):
        tile *= 2
    if shared_bytes(tile, block, lanes) > shared:
        raise ValueError(
            f"a workgroup of {workgroup} needs more shared memory than this device's "
            f"maxComputeSharedMemorySize ({shared} bytes)"
        )
    return tile


def loop_steps_per_key(tile: int, lanes: int, dims: int, q_elems: int, block_keys: int) -> int:
    """An upper bound of the iterations one key adds to any loop of an invocation
    (shaders/attention.comp: the tile's rows times the longest inner loop, plus the
    block's own loop)."""
    return tile * max(lanes, dims, -(-q_elems // lanes), 1) + block_keys


def split_count(info: DeviceInfo, workers: int, groups: int, keys: int, block: int) -> int:
    """Splits of the keys for ``groups`` workgroups of query tiles: enough workgroups for
    ``workers`` (four each), each split at least MIN_SPLIT_BLOCKS blocks, no more than
    MAX_SPLITS nor the grid's x limit."""
    blocks = max(1, -(-keys // block))
    want = 1 if groups >= 4 * workers else -(-4 * workers // max(1, groups))
    splits = max(1, min(want, -(-blocks // MIN_SPLIT_BLOCKS), MAX_SPLITS))
    return min(splits, int(info.max_compute_work_group_count[0]))


def lanes_kernel(info: DeviceInfo, words: int, vwords: int) -> bool:
    """shaders/attention_lanes.comp on a CPU device whose k and v rows are whole uvec4s
    (``words`` and ``vwords`` 32-bit words per row): there a block's barriers and scans of
    shared memory cost more than its dot products, and a lane's loads are cheapest four
    words at a time. GPUs keep attention.comp's blocks of keys scored side by side."""
    return info.is_cpu and words % LANE_WORDS == 0 and vwords % LANE_WORDS == 0


def shuffles_weights(info: DeviceInfo, workgroup: int) -> bool:
    """Whether attention_lanes.comp passes a block's weights between its lanes with
    subgroupShuffle instead of shared memory and two barriers: only where a workgroup is
    surely one full subgroup (every compute subgroup size the device reports equals the
    workgroup) with subgroup arithmetic and shuffles in compute. On lavapipe a lane's
    shared-memory load is a loop over the lanes; a shuffle stays in registers."""
    sizes = {info.subgroup_size, info.min_subgroup_size or workgroup}
    sizes.add(info.max_subgroup_size or workgroup)
    return (
        info.subgroup_arithmetic_in_compute
        and info.subgroup_shuffle_in_compute
        and sizes == {workgroup}
    )


def lanes_block_steps(info: DeviceInfo, workgroup: int, tile: int) -> int:
    """The loop iterations a block of ``workgroup`` keys adds to an invocation of
    shaders/attention_lanes.comp: the block loop's, the loop over its keys' values and,
    without SHUFFLE, the shared-memory maxima (rows times lanes). Every other loop in
    the block has a constant trip count and is unrolled.

    Without SHUFFLE the maxima loop counts even where the workgroup is one subgroup:
    whether it is is decided at run time, and a CPU device runs both sides of such a
    branch under a mask. Counting it only where the workgroup spanned several subgroups
    let a split of about 58,000 keys run as one pass on llvmpipe, which stopped after
    about 47,700 of them and dropped the rest without an error."""
    if shuffles_weights(info, workgroup):
        return 1 + workgroup
    return 1 + workgroup + tile * workgroup


def lanes_grid(
    info: DeviceInfo,
    workers: int,
    heads: int,
    rows: int,
    keys: int,
    words: int,
    vwords: int,
    word_elems: int,
) -> Grid:
    """The grid of attention_lanes.comp: blocks of one key per lane, every lane holding
    the tile's whole queries and ``dims`` dimensions of v."""
    wg = workgroup_size(info)
    q_elems = words * word_elems
    dims = -(-vwords // (LANE_WORDS * wg)) * LANE_WORDS * word_elems
    shared = info.max_compute_shared_memory_size or 16384
    if wg * SHARED_SLOT_BYTES > shared:
        raise ValueError(
            f"a workgroup of {wg} needs more shared memory than this device's "
            f"maxComputeSharedMemorySize ({shared} bytes)"
        )
    tile = 1
    while (
        tile < LANE_MAX_TILE
        and tile < rows
        and 2 * tile * dims <= LANE_ACC_SLOTS
        and 2 * tile * q_elems <= LANE_QUERY_SLOTS
        and 2 * tile * wg * SHARED_SLOT_BYTES <= shared
    ):
        tile *= 2
    # The end's sums over the lanes (l and bad) run once per invocation.
    budget = max(1, MAX_LOOP_STEPS - 2 * tile * wg)
    max_chunk = max(1, budget // lanes_block_steps(info, wg, tile)) * wg
    tiles = -(-rows // tile)
    blocks = max(1, -(-keys // wg))
    splits = split_count(info, workers, heads * tiles, keys, wg)
    chunk = -(-blocks // splits) * wg
    splits = max(1, -(-keys // chunk))
    check_counts(info, heads, rows, tile, tiles, splits)
    shuffle = shuffles_weights(info, wg)
    return Grid(wg, tile, dims, 1, 1, tiles, splits, chunk, max_chunk, lanes=True, shuffle=shuffle)


def check_counts(
    info: DeviceInfo, heads: int, rows: int, tile: int, tiles: int, splits: int
) -> None:
    counts = info.max_compute_work_group_count
    if tiles > counts[1] or heads > counts[2] or splits > counts[0]:
        raise ValueError(
            f"{heads} heads of {rows} query rows need more workgroups than this device "
            f"allows ({tiles} tiles of {tile} rows, at most {counts[1]} by {counts[2]}); "
            "split the call"
        )


def grid(
    info: DeviceInfo,
    workers: int,
    heads: int,
    rows: int,
    keys: int,
    d_elems: int,
    dv: int,
    *,
    word_elems: int = 1,
) -> Grid:
    """The grid of a call: ``heads`` (batch times KV heads) of ``rows`` query rows each
    over ``keys`` keys; ``d_elems`` is the head dimension padded to whole k words of
    ``word_elems`` elements (v's rows are whole words of as many)."""
    words, vwords = d_elems // word_elems, -(-max(dv, 1) // word_elems)
    if lanes_kernel(info, words, vwords):
        return lanes_grid(info, workers, heads, rows, keys, words, vwords, word_elems)
    wg = workgroup_size(info)
    lanes = key_lanes(wg)
    dims = -(-max(dv, 1) // wg)
    shared = info.max_compute_shared_memory_size or 16384
    kb = block_keys(info)
    while kb > 1 and shared_bytes(1, wg * kb, lanes) > shared:
        kb //= 2
    tile = tile_rows(info, wg, rows, d_elems, dv, wg * kb)
    steps = loop_steps_per_key(tile, lanes, dims, d_elems, kb)
    while kb > 1 and wg * kb * steps > MAX_LOOP_STEPS:
        kb //= 2
        steps = loop_steps_per_key(tile, lanes, dims, d_elems, kb)
    block = wg * kb
    tiles = -(-rows // tile)
    max_blocks = max(1, MAX_LOOP_STEPS // (block * steps))
    blocks = max(1, -(-keys // block))
    splits = split_count(info, workers, heads * tiles, keys, block)
    chunk = -(-blocks // splits) * block
    splits = max(1, -(-keys // chunk))
    check_counts(info, heads, rows, tile, tiles, splits)
    return Grid(wg, tile, dims, lanes, kb, tiles, splits, chunk, max_blocks * block)
