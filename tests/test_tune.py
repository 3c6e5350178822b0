"""vkcore tune: the stored choice is keyed like the pipeline cache and used by softmax."""

import json

import numpy as np
import pytest

import vkcore
from vkcore import tune
from vkcore.kernels import softmax as sm


@pytest.fixture
def clean(device):
    tune.reset(device)
    yield
    tune.reset(device)


def test_tune_stores_the_fastest_candidate_and_softmax_uses_it(device, clean, rng):
    record = tune.tune(device, shape=(16, 1024), repeats=1)
    path = tune.tune_path(device)
    assert path.name.endswith(tune.SUFFIX)
    assert path.parent == device.pipeline_cache.folder or device.pipeline_cache.folder is None
    stored = json.loads(path.read_text())
    assert stored == record
    times = {
        int(k): v
        for k, v in record["measured"]["softmax_workgroup"]["median_device_seconds"].items()
    }
    assert set(times) == set(tune.candidates(device))
    best = record["choices"]["softmax_workgroup"]
    assert times[best] == min(times.values())
    assert sm.workgroup_size(device) == best
    x = rng.standard_normal((5, 999)).astype(np.float32)
    np.testing.assert_allclose(
        vkcore.softmax(x, device=device), vkcore.reference.softmax(x), atol=1e-6
    )


def test_any_valid_stored_workgroup_gives_correct_softmax(device, clean, rng):
    x = rng.standard_normal((3, 5000)).astype(np.float32)
    for wg in tune.candidates(device):
        write_choice(device, wg)
        assert sm.workgroup_size(device) == wg
        for alg in ("online", "safe"):
            y = vkcore.softmax(x, algorithm=alg, device=device)
            np.testing.assert_allclose(y, vkcore.reference.softmax(x), atol=1e-6)


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        '{"format": 99}',
        '{"format": 1, "choices": {"softmax_workgroup": 0}}',
        '{"format": 1, "choices": {"softmax_workgroup": 1000000}}',
    ],
)
def test_unusable_files_fall_back_to_defaults(device, clean, content, caplog):
    default = sm.workgroup_size(device)
    path = tune.tune_path(device)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    tune.forget(device)
    assert sm.workgroup_size(device) == default
    assert "ignoring" in caplog.text


def test_choice_names_are_checked(device):
    with pytest.raises(ValueError, match="name must be one of"):
        tune.choice(device, "rows_per_group")


def write_choice(device, wg):
    path = tune.tune_path(device)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": tune.FORMAT, "choices": {"softmax_workgroup": wg}}))
    tune.forget(device)
