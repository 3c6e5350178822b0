"""Options whose bad values used to pass the parser and fail later (after output had
started, inside a probe process, or as a MemoryError) are exit status 2 with one line
naming the option before any device opens or any probe starts: quant-report's
--group-size and --outlier, sizes (--rows x --cols, a --weights matrix, coldwarm's
--elements) held to the memory available, --weights values beyond float32, coldwarm's
--push values their members cannot hold; and quant-report's row against the device's
binding limit, before it prints anything."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from test_cli_args import no_work  # noqa: F401

import vkcore.tools.cli.demo as cli_demo
import vkcore.tools.cli.quant_report as cli_quant
from vkcore.base import hostmem
from vkcore.kernels import storage
from vkcore.tools.cli import build_parser, main
from vkcore.tools.coldwarm import harness

PUSH_SHADER = """#version 450
layout(local_size_x = 64) in;
layout(push_constant) uniform P { uint n; int k; float a; float v[2]; } pc;
layout(std430, binding = 0) buffer B { float y[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < pc.n) y[i] = pc.a * float(pc.k) + pc.v[0];
}
"""


@pytest.fixture
def no_probe(monkeypatch):
    """coldwarm's probes must not start: the options are refused before them."""

    def refuse(*args, **kwargs):
        raise AssertionError("a probe run started before the options were checked")

    monkeypatch.setattr(harness, "_Run", refuse)


def late_values(tmp_path):
    """(argv, the option the one error line must name)."""
    shader = tmp_path / "p.comp"
    shader.write_text(PUSH_SHADER)
    seed = 3  # row 0 starts with 2.04: 3e38 times it is beyond float32
    assert abs(np.random.default_rng(seed).standard_normal(1)[0]) > 2
    cw = ["coldwarm", "--shader", str(shader), "--repeats", "1", "--conditions", "cold"]
    return [
        (["quant-report", "--group-size", "99999999999"], "--group-size"),
        (["quant-report", "--group-size", str(2**31)], "--group-size"),
        (["quant-report", "--outlier=1e39"], "--outlier"),
        (["quant-report", "--outlier=-1e39"], "--outlier"),
        (["quant-report", "--outlier=3.5e38", "--cols", "4096"], "--outlier"),
        (
            ["quant-report", "--outlier=3e38", "--rows", "1", "--cols", "1", "--seed", str(seed)],
            "--outlier",
        ),  # fmt: skip
        (["quant-report", "--rows", "100000", "--cols", "100000"], "--rows 100000 --cols"),
        (["quant-report", "--rows", "10000000000", "--cols", "1"], "--rows"),
        (["quant-report", "--rows", "1", "--cols", "10000000000000"], "--cols"),
        (["demo", "--rows", "100000", "--cols", "100000"], "--rows 100000 --cols"),
        (["demo", "--rows", "1", "--cols", "10000000000000"], "--cols"),
        ([*cw, "--push", "n=99999999999"], "--push"),
        ([*cw, "--push", "n=-1"], "--push"),
        ([*cw, "--push", "k=-99999999999"], "--push"),
        ([*cw, "--push", "a=1e39"], "--push"),
        ([*cw, "--push", "n=2.5"], "--push"),
        ([*cw, "--push", "v=1"], "--push"),
        ([*cw, "--elements", "100000000"], "--elements"),  # 400 MB: beyond one binding
        ([*cw, "--elements", "100000000000000"], "--elements"),  # beyond memory
    ]


def test_late_options_are_status_2_before_any_work(tmp_path, capsys, no_work, no_probe):  # noqa: F811
    failures = []
    for argv, option in late_values(tmp_path):
        code = main(argv)
        out = capsys.readouterr()
        errors = [line for line in out.err.splitlines() if "error:" in line]
        if code != 2 or "Traceback" in out.err or out.out:
            failures.append(f"{argv}: status {code}, stdout {out.out!r}, stderr {out.err!r}")
        elif len(errors) != 1 or option not in errors[0]:
            failures.append(f"{argv}: not one error line naming {option}: {out.err!r}")
    assert not failures, "\n".join(failures)


def parsed(*argv):
    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "module"),
    [
        (["quant-report", "--rows", "512", "--cols", "512"], cli_quant),
        (
            ["quant-report", "--rows", "512", "--cols", "512", "--group-size", "1", "--json"],
            cli_quant,
        ),  # fmt: skip
        (["demo", "--rows", "512", "--cols", "512"], cli_demo),
    ],
)
def test_sizes_are_held_to_the_memory_available(monkeypatch, capsys, no_work, argv, module):  # noqa: F811
    """The same options are refused or taken depending on hostmem.available()."""
    args = parsed(*argv)
    if module is cli_quant:
        need = cli_quant.report_bytes(512, 512, args.group_size, args.json)
    else:
        need = 512 * 512 * cli_demo.BYTES_PER_ELEMENT
    monkeypatch.setattr(hostmem, "available", lambda: need - 1)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--rows 512 --cols 512" in err and "of memory" in err and "available" in err
    for free in (need, None):  # enough, and unknown: nothing refused
        monkeypatch.setattr(hostmem, "available", lambda free=free: free)
        module.check(parsed(*argv))


def test_outlier_limit_is_exact_for_the_seed(no_work):  # noqa: F811
    """The largest --outlier the check takes keeps row 0 finite in float32; just above
    it is refused."""
    for seed, cols in ((3, 1), (0, 1024), (7, 5)):
        row = np.random.default_rng(seed).standard_normal(cols) / np.sqrt(cols)
        top = float(np.finfo(np.float32).max) / float(np.abs(row).max())
        ok = min(top * 0.999, 3.4e38)
        cli_quant.check(parsed("quant-report", "--outlier", repr(ok), "--seed", str(seed),
                               "--cols", str(cols), "--rows", "2"))  # fmt: skip
        w = cli_quant._random_layer(2, cols, seed, ok)
        assert np.isfinite(w).all()
        if top * 1.01 <= 3.4e38:
            with pytest.raises(cli_quant.UsageError, match="--outlier"):
                cli_quant.check(parsed("quant-report", "--outlier", repr(top * 1.01), "--seed",
                                       str(seed), "--cols", str(cols), "--rows", "2"))  # fmt: skip


def test_weights_files_are_checked_from_their_header(tmp_path, capsys, no_work, monkeypatch):  # noqa: F811
    """A matrix too large for the memory available, a header declaring more than the
    file holds, values beyond float32: status 2 naming --weights, and the refused data
    is never read."""
    big = tmp_path / "big.npy"
    np.save(big, np.zeros((2048, 4096), np.float32))  # 32 MiB
    short = tmp_path / "short.npy"
    with open(short, "wb") as fh:
        np.lib.format.write_array_header_1_0(
            fh, {"descr": "<f4", "fortran_order": False, "shape": (8192, 8192)}
        )
        fh.write(bytes(16))
    w64 = np.ones((4, 8))
    w64[1, 2] = 1e39
    huge = tmp_path / "huge.npz"
    np.savez(huge, w=w64)
    nan = tmp_path / "nan.npy"
    np.save(nan, np.array([[1.0, np.nan]], np.float32))

    def status(path):
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            code = main(["quant-report", "--weights", str(path)])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        out = capsys.readouterr()
        assert out.out == "" and "Traceback" not in out.err
        return code, out.err, peak

    monkeypatch.setattr(hostmem, "available", lambda: 1 << 20)
    code, err, peak = status(big)
    assert code == 2 and "--weights" in err and "of memory" in err, err
    assert peak < 4 << 20, peak
    monkeypatch.setattr(hostmem, "available", lambda: None)
    code, err, peak = status(short)
    assert code == 2 and "not a readable" in err and "declares" in err, err
    assert peak < 4 << 20, peak
    code, err, _ = status(huge)
    assert code == 2 and "w[1, 2] is 1e+39, beyond float32" in err, err
    code, err, _ = status(nan)
    assert code == 2 and "w[0, 1] is nan, not finite" in err, err


def test_a_row_beyond_one_binding_is_refused_before_printing(capsys, monkeypatch):
    """quant-report opens the device, then checks the row against its binding limit
    before the first line of the report."""
    monkeypatch.setattr(storage, "binding_limit", lambda dev: 1024)
    assert main(["quant-report", "--rows", "2", "--cols", "300", "--top", "0"]) == 2
    out = capsys.readouterr()
    assert out.out == "", out.out
    assert "--cols 300: one row of w as float32 needs 1200 bytes" in out.err
    assert "maxStorageBufferRange" in out.err
    assert main(["quant-report", "--rows", "2", "--cols", "256", "--top", "0"]) == 0
