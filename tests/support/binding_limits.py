"""A device whose storage bindings are small (maxStorageBufferRange lowered on a copy of
device.info), and a record of every storage binding a dispatch made: for the tests of
inputs larger than one binding."""

from __future__ import annotations

import dataclasses

import pytest

from vkcore.device.submit.submitter import Submitter

LIMIT = 1024  # bytes: 256 float32, 64 16-byte blocks
_STORAGE_BUFFER = 7


@pytest.fixture
def small_binding(device, monkeypatch):
    """device.info with maxStorageBufferRange = LIMIT; returns the largest storage binding
    seen so far (a list, appended to by every dispatch)."""
    monkeypatch.setattr(
        device, "info", dataclasses.replace(device.info, max_storage_buffer_range=LIMIT)
    )
    seen: list[tuple[str, int, int]] = []
    real = Submitter._descriptor_sets

    def spy(self, dispatches, *args, **kwargs):
        for d in dispatches:
            for binding, buf in enumerate(d.buffers):
                if d.pipeline.descriptor_type(binding) == _STORAGE_BUFFER:
                    seen.append((d.pipeline.name, binding, buf.nbytes))
        return real(self, dispatches, *args, **kwargs)

    monkeypatch.setattr(Submitter, "_descriptor_sets", spy)
    return seen


def assert_within(seen) -> None:
    assert seen, "no dispatch ran"
    over = [s for s in seen if s[2] > LIMIT]
    assert not over, f"bindings beyond {LIMIT} bytes: {over[:5]}"
