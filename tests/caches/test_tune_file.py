"""Whatever a tune file holds, loading it never raises and never yields a value that
``vkcore tune`` would not store on this device."""

from __future__ import annotations

import ast
import gc
import json
import logging
import weakref
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vkcore
from vkcore.kernels import tuning

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
names = st.sampled_from(tuning.PARAMETERS) | st.text(max_size=12)
# Values near the real candidates, so that the checks see almost-right ones too.
near = st.sampled_from([1, 4, 8, 12, 16, 24, 32, 64, 128, 256, 512, 1024, 2**31, -8, 0])
near_values = near | near.map(float) | near.map(str) | st.sampled_from([True, False]) | json_values


def signed(device, choices, *, key=None, fmt=tuning.FORMAT, extra=None):
    record = {"format": fmt, "key": tuning.key_of(device) if key is None else key}
    record.update(extra or {})
    record["choices"] = choices
    return json.dumps(tuning.encode(record)).encode()


def files(device):
    valid = signed(device, {"softmax_workgroup": tuning.candidates(device)[0], "quant_rows": 2})
    return st.one_of(
        st.dictionaries(names, near_values, max_size=6).map(lambda c: signed(device, c)),
        st.builds(
            lambda c, k: signed(device, c, key=k),
            st.dictionaries(names, near_values, max_size=3),
            json_values,  # wrong or strange key
        ),
        json_values.map(lambda v: signed(device, v)),  # choices not an object
        json_values.map(lambda v: json.dumps(v).encode()),  # wrong types at top level
        st.integers(0, len(valid) - 1).map(lambda n: valid[:n]),  # truncated
        st.builds(
            lambda at, bit: valid[:at] + bytes([valid[at] ^ (1 << bit)]) + valid[at + 1 :],
            st.integers(0, len(valid) - 1),
            st.integers(0, 7),
        ),
        st.binary(max_size=64),
        st.sampled_from([b"", b"{", b"null", b"[]", b'{"format": 2}', b"\xff\xfe", b"[" * 5000]),
        json_values.map(lambda f: signed(device, {"quant_rows": 4}, fmt=f)),
    )


@pytest.fixture
def clean(device):
    tuning.reset(device)
    yield
    tuning.reset(device)


def test_loading_never_raises_and_never_leaves_the_candidate_set(device, clean):
    path = tuning.tune_path(device)
    path.parent.mkdir(parents=True, exist_ok=True)
    logging.getLogger("vkcore").setLevel(logging.ERROR)  # thousands of expected warnings

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(files(device))
    def check(data):
        path.write_bytes(data)
        tuning.forget(device)
        got = tuning.load(device)
        assert set(got) <= set(tuning.PARAMETERS)
        for name, value in got.items():
            assert type(value) is int and value in tuning.allowed(device, name), (name, value)
        for name in tuning.PARAMETERS:
            value = tuning.choice(device, name)
            assert value is None or value in tuning.allowed(device, name)

    try:
        check()
    finally:
        logging.getLogger("vkcore").setLevel(logging.NOTSET)


def test_a_file_tune_writes_is_read_back(device, clean):
    choices = {"softmax_workgroup": tuning.candidates(device)[-1], "matvec_rows": 8}
    path = tuning.tune_path(device)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(signed(device, choices))
    tuning.forget(device)
    assert tuning.load(device) == choices


def test_allowed_is_what_tune_measures(device):
    assert tuning.allowed(device, "softmax_workgroup") == set(tuning.candidates(device))
    limit = min(
        device.info.max_compute_work_group_size[0], device.info.max_compute_work_group_invocations
    )
    assert all(v <= limit for v in tuning.candidates(device))
    assert device.info.subgroup_size in tuning.candidates(device)
    for name, values in tuning.ROW_CANDIDATES.items():
        assert tuning.allowed(device, name) == set(values)


def test_choices_do_not_keep_a_device_alive():
    dev = vkcore.Device(validation=False)
    tuning.choice(dev, "softmax_workgroup")
    ref = weakref.ref(dev)
    del dev
    gc.collect()
    assert ref() is None


def test_candidates_include_the_smallest_subgroup_size_of_a_size_control_range(device):
    """A device compiling 32..64 wide (RDNA on RADV) also gets 32 timed."""
    import dataclasses

    from devices import NAMES, RecordedDevice

    for name in NAMES:
        rec = RecordedDevice(name)
        sizes = tuning.candidates(rec)
        low, sub = rec.info.min_subgroup_size, rec.info.subgroup_size
        if 1 <= low < sub:
            assert low in sizes, name
        assert sub in sizes or sub > max(sizes), name
    odd = dataclasses.replace(device.info, min_subgroup_size=device.info.subgroup_size // 2)
    original = device.info
    device.info = odd
    try:
        assert odd.min_subgroup_size in tuning.candidates(device)
    finally:
        device.info = original


def test_the_store_imports_no_kernel_and_not_the_tuner():
    """Kernels import the store (tuning.choice); the store importing a kernel, the package
    or the tuner would be an import cycle. It imports only these lower modules, anywhere."""
    imported = set()
    for node in ast.walk(ast.parse(Path(tuning.__file__).read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, "relative import in the store"
            imported.add(str(node.module))
    ours = {name for name in imported if name.split(".")[0] == "vkcore"}
    assert ours == {
        "vkcore.base",  # cachefs
        "vkcore.base.per_device",
        "vkcore.device.device",
        "vkcore.device.pipelines.cache_file",
        "vkcore.errors",  # shown
    }, ours
