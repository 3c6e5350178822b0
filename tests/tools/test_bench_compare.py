"""``vkcore bench --compare``: two sets of bench JSON side by side (no device needed)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from vkcore.tools.bench import compare


def _run_json(path, values: dict[str, float | None]) -> str:
    targets = [{"group": g, "title": f"title of {g}", "value": v} for g, v in values.items()]
    path.write_text(json.dumps({"targets": targets, "comparisons": []}))
    return str(path)


def test_medians_and_the_change_per_target(tmp_path):
    before = [
        _run_json(tmp_path / f"b{i}.json", {"a": v, "b": 2.0}) for i, v in enumerate([1, 3, 2])
    ]
    after = [_run_json(tmp_path / f"a{i}.json", {"a": v, "b": None}) for i, v in enumerate([4, 5])]
    rows = compare.compare(compare.load_runs(",".join(before)), compare.load_runs(",".join(after)))
    assert [r["group"] for r in rows] == ["a"]  # b has no value after: left out
    (row,) = rows
    assert row["before_median"] == 2.0 and row["after_median"] == 4.5
    assert row["after_over_before"] == pytest.approx(2.25)


@pytest.mark.parametrize(
    "content", ["not json", json.dumps([1]), json.dumps({"targets": [{"group": "a"}]})]
)
def test_a_file_that_is_not_a_bench_run_is_named(tmp_path, content):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    with pytest.raises(compare.CompareError, match="bad.json"):
        compare.load_runs(str(bad))


def test_the_cli_prints_the_table_and_refuses_a_missing_file(tmp_path):
    a = _run_json(tmp_path / "a.json", {"g": 1.5})
    b = _run_json(tmp_path / "b.json", {"g": 3.0})
    cmd = [sys.executable, "-m", "vkcore", "bench", "--compare", a, b]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert "title of g" in out and "2.00" in out
    missing = subprocess.run(
        [*cmd[:-2], a, str(tmp_path / "nope.json")], capture_output=True, text=True
    )
    assert missing.returncode == 2 and "nope.json" in missing.stderr
