"""Online and safe softmax against the float64 numpy reference and the documented edge cases."""

import gc

import numpy as np
import pytest

import vkcore
from vkcore import reference
from vkcore.device.memory.host_buffer import HostBuffer, can_import_host
from vkcore.kernels.softmax import softmax as sm
from vkcore.kernels.softmax import stages as stages

ALGS = ["online", "safe"]
SEED = [1000.0, 1001.0, 1002.0]
SEED_EXPECTED = [0.09003057317038046, 0.24472847105479764, 0.6652409557748218]


def check_accuracy(y, x):
    ref = reference.softmax(x)
    assert y.dtype == np.float32
    assert y.shape == np.shape(x)
    assert np.abs(y - ref).max() <= 1e-6
    assert np.abs(y.sum(axis=-1, dtype=np.float64) - 1).max() <= 1e-5


@pytest.mark.parametrize("alg", ALGS)
def test_seed_example(device, alg):
    y = vkcore.softmax(np.array(SEED, np.float32), algorithm=alg, device=device)
    np.testing.assert_allclose(y, SEED_EXPECTED, rtol=0, atol=1e-7)


@pytest.mark.parametrize("alg", ALGS)
@pytest.mark.parametrize(
    "shape",
    [
        (1,),
        (3,),
        (1, 1),
        (2, 5),
        (7, 13),
        (4, 64),
        (3, 257),
        (5, 1023),
        (2, 4096),
        (33, 4097),
        (1, 100_003),
        (3, 1 << 18),
        (200, 256),
        (2, 3, 40),
    ],
)
def test_accuracy_random(device, rng, alg, shape):
    x = (rng.standard_normal(shape) * 6).astype(np.float32)
    check_accuracy(vkcore.softmax(x, algorithm=alg, device=device), x)


@pytest.mark.parametrize("alg", ALGS)
def test_long_row_is_split_across_workgroups(device, rng, alg):
    n = 1 << 20
    p = stages.plan(device, 1, n)
    assert p.nchunks > 1, "a single long row must be split so every thread works"
    x = (rng.standard_normal((1, n)) * 3).astype(np.float32)
    check_accuracy(vkcore.softmax(x, algorithm=alg, device=device), x)


def test_many_rows_use_one_workgroup_per_row(device):
    assert stages.plan(device, 4096, 4096).nchunks == 1


@pytest.mark.parametrize("alg", ALGS)
def test_more_than_65535_rows(device, rng, alg):
    x = rng.standard_normal((70_001, 3)).astype(np.float32)
    check_accuracy(vkcore.softmax(x, algorithm=alg, device=device), x)


@pytest.mark.parametrize("alg", ALGS)
@pytest.mark.parametrize("n", [1, 6, 8, 40, 9000])
def test_edge_cases(device, rng, alg, n):
    x = rng.standard_normal((7, n)).astype(np.float32)
    x[0, :] = -np.inf  # all masked
    x[1, n // 2] = np.nan  # NaN row
    x[2, n // 3] = np.inf  # +inf row
    x[3, ::2] = -np.inf  # partially masked
    x[4, :] = 88.0 + np.arange(n, dtype=np.float32) / max(n, 1)  # large logits
    x[5, :] = 0.0  # uniform
    y = vkcore.softmax(x, algorithm=alg, device=device)
    assert np.all(y[0] == 0.0)
    assert np.all(np.isnan(y[1])) and np.all(np.isnan(y[2]))
    assert np.all(y[3, ::2] == 0.0)
    assert not np.isnan(y[[0, 3, 4, 5, 6]]).any(), "a non-finite value leaked into another row"
    np.testing.assert_allclose(y[5], 1.0 / n, rtol=1e-6)
    ref = reference.softmax(x)
    np.testing.assert_allclose(y, ref, atol=1e-6, rtol=0, equal_nan=True)
    if n > 1:
        np.testing.assert_allclose(y[[3, 4, 5, 6]].sum(-1), 1.0, atol=1e-5)


@pytest.mark.parametrize("alg", ALGS)
def test_nonfinite_never_leaks_between_rows_in_split_path(device, rng, alg):
    x = rng.standard_normal((2, 300_000)).astype(np.float32)
    x[0, 123_456] = np.nan
    y = vkcore.softmax(x, algorithm=alg, device=device)
    assert np.isnan(y[0]).all()
    check_accuracy(y[1:], x[1:])


def test_n_equals_one_gives_one(device):
    x = np.array([[3.0], [-7.0], [-np.inf]], np.float32)
    np.testing.assert_array_equal(vkcore.softmax(x, device=device)[:, 0], [1.0, 1.0, 0.0])


@pytest.mark.parametrize("shape", [(0,), (0, 5), (5, 0), (2, 0, 3)])
def test_empty_gives_empty_without_dispatch(device, monkeypatch, shape):
    calls = []
    monkeypatch.setattr(device.submitter, "run", lambda *a, **k: calls.append(a))
    y = vkcore.softmax(np.zeros(shape, np.float32), device=device)
    assert y.shape == shape and y.dtype == np.float32
    assert calls == []


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_other_float_dtypes_become_float32(device, rng, dtype):
    x = rng.standard_normal((4, 50)).astype(dtype)
    y = vkcore.softmax(x, device=device)
    assert y.dtype == np.float32
    check_accuracy(y, x.astype(np.float32))


@pytest.mark.parametrize("bad", [np.ones(3, bool), np.ones(3, np.complex64), np.array([object()])])
def test_non_numeric_dtypes_are_type_errors(device, bad):
    with pytest.raises(TypeError, match="x must"):
        vkcore.softmax(bad, device=device)


def test_bad_arguments(device):
    with pytest.raises(ValueError, match="0-d"):
        vkcore.softmax(np.float32(1.0), device=device)
    with pytest.raises(TypeError):
        vkcore.softmax("abc", device=device)
    with pytest.raises(TypeError):
        vkcore.softmax(None, device=device)
    with pytest.raises(ValueError, match="algorithm"):
        vkcore.softmax(np.ones(3, np.float32), algorithm="fast", device=device)
    with pytest.raises(ValueError, match="axis"):
        vkcore.softmax(np.ones((2, 3), np.float32), axis=2, device=device)
    with pytest.raises(TypeError, match="axis"):
        vkcore.softmax(np.ones((2, 3), np.float32), axis=1.0, device=device)
    with pytest.raises(TypeError, match="device"):
        vkcore.softmax(np.ones(3, np.float32), device="gpu")


def test_axis_argument(device, rng):
    x = rng.standard_normal((5, 6, 7)).astype(np.float32)
    for axis in (0, 1, -2):
        y = vkcore.softmax(x, axis=axis, device=device)
        np.testing.assert_allclose(y, reference.softmax(x, axis=axis), atol=1e-6)


def test_input_not_modified_and_views(device, rng):
    base = rng.standard_normal((6, 40)).astype(np.float32)
    x = base.copy()
    x.setflags(write=False)
    vkcore.softmax(x, device=device)
    np.testing.assert_array_equal(x, base)
    view = base[::-2, 3:37:3]
    check_accuracy(vkcore.softmax(view, device=device), np.ascontiguousarray(view))


def test_tensor_in_tensor_out(device, rng):
    x = rng.standard_normal((3, 128)).astype(np.float32)
    t = vkcore.asarray(x, device=device)
    y = vkcore.softmax(t)
    assert isinstance(y, vkcore.Tensor) and y.shape == (3, 128)
    check_accuracy(y.numpy(), x)
    with pytest.raises(TypeError, match="float32 Tensor"):
        vkcore.softmax(vkcore.asarray(x.astype(np.float16), device=device))
    with pytest.raises(ValueError, match="last axes"):
        vkcore.softmax(t, axis=0)


def test_online_and_safe_agree(device, rng):
    x = (rng.standard_normal((64, 1000)) * 20).astype(np.float32)
    a = vkcore.softmax(x, algorithm="online", device=device)
    b = vkcore.softmax(x, algorithm="safe", device=device)
    assert np.abs(a - b).max() <= 1e-6


@pytest.mark.parametrize(
    "shape", [(1, 256), (8, 1 << 20), (4096, 4096), (3, 7_000_001), (70_001, 3)]
)
def test_plan_keeps_every_loop_under_the_driver_iteration_guard(device, shape):
    p = stages.plan(device, *shape)
    assert p.chunk * p.nchunks >= p.units
    assert -(-p.chunk // p.workgroup) <= stages.MAX_STEPS_PER_PASS


@pytest.mark.parametrize("alg", ALGS)
def test_many_long_rows(device, rng, alg):
    # 8 rows of 2^20: enough rows to skip the split for parallelism, but each row is longer
    # than one workgroup may loop over (llvmpipe stops loops after 65,535 iterations).
    x = rng.standard_normal((8, 1 << 20)).astype(np.float32)
    check_accuracy(vkcore.softmax(x, algorithm=alg, device=device), x)


def test_repeated_numpy_calls_resubmit_one_recording_with_fresh_data(device, rng):
    sub = device.submitter
    first = rng.standard_normal((3, 256)).astype(np.float32)
    for _ in range(2):  # a recording is kept from a call's second time
        check_accuracy(vkcore.softmax(first, device=device), first)
    hits = sub.reuse_hits
    objects = device.live_objects()
    for _ in range(5):
        x = rng.standard_normal((3, 256)).astype(np.float32)  # new data, same shape
        check_accuracy(vkcore.softmax(x, device=device), x)
    assert sub.reuse_hits == hits + 5
    assert device.live_objects() == objects, "a repeated call must not allocate anything"


def test_destroyed_pooled_buffers_drop_their_recordings(device, rng):
    from vkcore.device.memory.pools import buffer_pool

    x = rng.standard_normal((2, 4096)).astype(np.float32)
    vkcore.softmax(x, device=device)
    buffer_pool(device).clear()  # destroys the pooled buffers the recording references
    hits = device.submitter.reuse_hits
    check_accuracy(vkcore.softmax(x, device=device), x)
    assert device.submitter.reuse_hits == hits, "a recording of destroyed buffers was reused"


def test_roofline_copy_copies(device, rng):
    x = rng.standard_normal(4096 + 4).astype(np.float32)
    tx = vkcore.asarray(x, device=device)
    ty = vkcore.Tensor.empty(x.shape, np.float32, device)
    stages.roofline_copy(tx, ty)
    np.testing.assert_array_equal(ty.numpy(), x)
    with pytest.raises(ValueError, match="multiple of 4"):
        short = vkcore.asarray(x[:5], device=device)
        stages.roofline_copy(short, short)


@pytest.mark.parametrize("start", [0, 1, 4, 1027])  # element offsets into a larger array
def test_large_inputs_imported_without_copies(device, rng, start):
    base = rng.standard_normal(300_000 * 4 + 2048).astype(np.float32)
    x = base[start : start + 300_000 * 4].reshape(300, 4000)
    expect_import = can_import_host(device) and x.ctypes.data % 16 == 0
    assert sm._importable(device, x) == expect_import
    for alg in ALGS:
        check_accuracy(vkcore.softmax(x, algorithm=alg, device=device), x)
    live = [ref() for ref in device._buffers.values()]
    inputs = [b for b in live if isinstance(b, HostBuffer) and b.alive and b.array is not None]
    assert not any(np.shares_memory(b.array, base) for b in inputs), (
        "an import of the caller's array outlived its call"
    )


def test_read_only_large_input_is_copied_not_imported(device, rng):
    x = rng.standard_normal((64, 8192)).astype(np.float32)
    x.setflags(write=False)
    assert not sm._importable(device, x)
    check_accuracy(vkcore.softmax(x, device=device), x)


def test_host_buffer_refuses_what_it_cannot_wrap(device):
    if not can_import_host(device):
        pytest.skip("device cannot import host memory")
    with pytest.raises(ValueError, match="C-contiguous"):
        HostBuffer(device, np.zeros((64, 64), np.float32)[:, ::2])
    buf = HostBuffer(device, np.zeros(4096, np.float32))
    with pytest.raises(TypeError, match="array itself"):
        buf.write(np.zeros(4, np.float32))
    buf.destroy()


def test_tensor_outputs_come_back_to_the_pool(device, rng):
    from vkcore.device.memory.pools import buffer_pool

    pool = buffer_pool(device)
    x = vkcore.asarray(rng.standard_normal((4, 1000)).astype(np.float32), device=device)
    y1 = vkcore.softmax(x)
    handle = y1.buffer.handle
    first = y1.numpy()
    old = y1.buffer
    old.destroy()  # back to the pool, not freed
    assert not old.alive
    with pytest.raises(RuntimeError, match="released"):
        old.read(np.empty(4000, np.float32))
    assert any(b.handle == handle for b in pool._free)
    y2 = vkcore.softmax(x)
    assert y2.buffer.handle == handle and y2.buffer is not old
    np.testing.assert_array_equal(y2.numpy(), first)
    reshaped = y2.reshape(-1)
    del y2  # the reshaped view still holds the buffer: nothing goes back yet
    assert reshaped.buffer.alive
    np.testing.assert_array_equal(reshaped.numpy(), first.reshape(-1))
    gc.collect()  # garbage of earlier tests freed now, not in the middle
    before = device.live_objects()["device_memory"]
    for _ in range(5):
        vkcore.softmax(x)  # each result dropped at once
    assert device.live_objects()["device_memory"] <= before + 1
    x.buffer.destroy()


# ------------------------------------------------------------------ pooled numpy results
LARGE = (256, 4096)  # 4 MiB: over HOST_SHARING_MIN_BYTES, so the result comes from the host pool


def _address(a):
    return a.__array_interface__["data"][0]


def test_dropped_result_memory_serves_the_next_result(device, rng):
    x1 = rng.standard_normal(LARGE).astype(np.float32)
    x2 = rng.standard_normal(LARGE).astype(np.float32)
    y1 = vkcore.softmax(x1, device=device)
    check_accuracy(y1, x1)
    addr = _address(y1)
    del y1
    y2 = vkcore.softmax(x2, device=device)
    assert _address(y2) == addr  # the pages came back and were written afresh
    check_accuracy(y2, x2)


@pytest.mark.parametrize("keep", ["result", "view", "transposed copy of the base"])
def test_result_alive_is_never_overwritten(device, rng, keep):
    x1 = rng.standard_normal(LARGE).astype(np.float32)
    y1 = vkcore.softmax(x1, device=device)
    expected = y1.copy()
    held = {"result": y1, "view": y1[3:7, ::2], "transposed copy of the base": y1.T}[keep]
    held_expected = {"result": expected, "view": expected[3:7, ::2]}.get(keep, expected.T)
    del y1
    for _ in range(3):  # more results of the same size while the first one is held
        y = vkcore.softmax(rng.standard_normal(LARGE).astype(np.float32), device=device)
        assert not np.shares_memory(y, held)
    np.testing.assert_array_equal(held, held_expected)


def test_results_are_plain_writable_arrays(device, rng):
    x = rng.standard_normal(LARGE).astype(np.float32)
    y = vkcore.softmax(x, device=device)
    assert isinstance(y, np.ndarray) and y.flags.writeable and y.flags.c_contiguous
    assert y.dtype == np.float32 and y.shape == LARGE
    y *= 2  # the caller owns it
    np.testing.assert_allclose(y.sum(axis=-1), 2, rtol=1e-5)


def test_host_pool_keeps_a_bounded_number_of_free_slots(device, rng):
    from vkcore.device.memory.pools import host_pool

    pool = host_pool(device)
    x = rng.standard_normal(LARGE).astype(np.float32)
    held = [vkcore.softmax(x[: 64 + i], device=device) for i in range(pool.max_slots + 4)]
    assert all(h.base.__class__.__name__ == "_Lent" for h in held)
    del held
    vkcore.softmax(x, device=device)  # drains what came back, trims the rest
    assert len(pool._free) <= pool.max_slots
    assert sum(s.nbytes for s in pool._free) <= pool.max_bytes
    pool.clear()
    assert pool._free == []


def test_result_outlives_its_device(rng):
    x = rng.standard_normal(LARGE).astype(np.float32)
    with vkcore.Device() as dev:
        y = vkcore.softmax(x, device=dev)
    check_accuracy(y, x)  # the memory stays with the array after the device is gone
    del y  # its slot comes back to a pool whose device is closed: nothing to do


def test_pooled_results_without_host_import(rng, monkeypatch):
    """A discrete GPU does not import host memory: results still come from the pool, the
    kernel writes a device buffer and the copy lands in recycled pages."""
    from vkcore.device.memory import host_buffer, pools

    monkeypatch.setattr(pools, "can_import_host", lambda dev: False)
    monkeypatch.setattr(host_buffer, "can_import_host", lambda dev: False)
    x = rng.standard_normal(LARGE).astype(np.float32)
    with vkcore.Device(validation=True, pipeline_cache=False) as dev:
        y = vkcore.softmax(x, device=dev)
        check_accuracy(y, x)
        assert y.base.slot.buffer is None  # nothing imported: the kernel wrote a device buffer
        addr = _address(y)
        del y
        y = vkcore.softmax(x[::-1].copy(), device=dev)
        assert _address(y) == addr
        check_accuracy(y, x[::-1])
        assert dev.validation_messages == []
