"""QuantizedTensor.save writes the whole file or leaves the old one: an exception or a
Ctrl-C while writing (a full disk, an interrupt) keeps the previous file intact and
leaves no partial or temporary file behind."""

from __future__ import annotations

import os

import numpy as np
import pytest

from vkcore import QuantizedTensor as QT


@pytest.mark.parametrize("error", [KeyboardInterrupt, OSError(28, "No space left on device")])
def test_a_failed_save_keeps_the_old_file(device, tmp_path, monkeypatch, error):
    old = QT.from_arrays(np.ones((2, 4), np.int8), np.ones(2, np.float32), device=device)
    new = QT.from_arrays(np.full((3, 5), 2, np.int8), np.ones(3, np.float32), device=device)
    path = tmp_path / "w.npz"
    old.save(path)
    before = path.read_bytes()
    real = np.savez

    def broken(fh, **fields):
        real(fh, **fields)
        fh.seek(len(before) // 3)
        fh.truncate()  # what had reached the disk when the write stopped
        raise error

    monkeypatch.setattr(np, "savez", broken)
    with pytest.raises(type(error) if isinstance(error, Exception) else error):
        new.save(path)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["w.npz"]
    with pytest.raises(KeyboardInterrupt):
        monkeypatch.setattr(np, "savez", lambda fh, **f: (_ for _ in ()).throw(KeyboardInterrupt))
        new.save(tmp_path / "fresh.npz")
    assert sorted(os.listdir(tmp_path)) == ["w.npz"]  # no partial new file either
    monkeypatch.setattr(np, "savez", real)
    new.save(path)
    assert QT.load(path, device=device).shape == (3, 5)
    link = tmp_path / "link.npz"
    link.symlink_to(path)  # saved through a symlink, as before: the link stays
    old.save(link)
    assert link.is_symlink() and QT.load(path, device=device).shape == (2, 4)
