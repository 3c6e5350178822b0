import json
import re
import subprocess
import sys

from vkcore.tools.cli import main


def run_cli(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "vkcore", *args], capture_output=True, text=True, timeout=timeout
    )


def test_info_json_has_cache_key_fields():
    out = run_cli("info", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    chosen = data["chosen"]
    for key in (
        "vendor_id",
        "device_id",
        "driver_version",
        "pipeline_cache_uuid",
        "device_uuid",
        "driver_id",
        "driver_name",
        "driver_info",
        "api_version",
        "subgroup_size",
        "max_storage_buffer_range",
        "max_compute_work_group_count",
        "max_compute_work_group_size",
        "timestamp_period",
        "storage_buffer_8bit_access",
        "shader_int8",
        "integer_dot_product",
        "integer_dot_product_8bit_accelerated",
        "pointer_size",
    ):
        assert key in chosen, key
    assert len(bytes.fromhex(chosen["pipeline_cache_uuid"])) == 16
    assert data["devices"]


SEED_EXPECTED = [0.09003057317038046, 0.24472847105479764, 0.6652409557748218]


def assert_seed_printed(text):
    """Both algorithms' printed seed probabilities within the demo's 1e-7 of the exact."""
    rows = re.findall(r"^\s+(online|safe)\s+\[([^\]]+)\]", text, re.MULTILINE)
    assert {alg for alg, _ in rows} == {"online", "safe"}, text
    for _, values in rows:
        got = [float(v) for v in values.split(",")]
        assert max(abs(g - e) for g, e in zip(got, SEED_EXPECTED, strict=True)) <= 1e-7


def test_demo_prints_seed_probabilities_and_passes():
    out = run_cli("demo", "--rows", "8", "--cols", "256")
    assert out.returncode == 0, out.stdout + out.stderr
    assert_seed_printed(out.stdout)
    assert "all checks passed" in out.stdout


def test_bad_usage_exits_2(capsys):
    assert main(["no-such-command"]) == 2
    assert "invalid choice" in capsys.readouterr().err
    assert main([]) == 2
    assert main(["--version"]) == 0


def test_version():
    out = run_cli("--version")
    assert out.returncode == 0 and out.stdout.startswith("vkcore ")


def test_unknown_device_is_one_line_error():
    out = run_cli("--device", "no-such-gpu-xyz", "info")
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0 and "no-such-gpu-xyz" in out.stderr


def test_demo_json_carries_the_checked_figures():
    out = run_cli("demo", "--rows", "8", "--cols", "256", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    data = json.loads(out.stdout)  # the human-readable text went to stderr
    assert data["ok"] is True
    assert_seed_printed(out.stderr)
    for alg in ("online", "safe"):
        seed = data["softmax_seed"][alg]
        assert seed["max_abs_err"] <= 1e-7
        assert abs(sum(seed["probabilities"]) - 1) <= 1e-6
        assert data["softmax_random"][alg]["max_abs_err"] <= 1e-6
    assert data["quant_seed"]["zero_point"] == 64 and data["quant_seed"]["q"] == 147
    assert data["matvec"]["int8"]["vs_reference"] == "bit for bit"
    groups = data["quant_groups"]
    assert set(groups) == {"8-bit_per_channel", "8-bit_group_128", "4-bit_group_32"}
    assert all(g["equals_reference"] and g["bounds_hold"] for g in groups.values())
    # Groups keep the loud columns' scale out of the rest of each row.
    channel, grouped = groups["8-bit_per_channel"], groups["8-bit_group_128"]
    assert grouped["rms_err_quiet_columns"] < channel["rms_err_quiet_columns"] / 10
    assert groups["4-bit_group_32"]["device_bytes"] < channel["device_bytes"]
    assert set(data["coldwarm"]["pooled"]) == {"cold", "vkcore", "driver", "all"}


def test_quant_report_json_holds_the_bounds():
    out = run_cli("quant-report", "--rows", "12", "--cols", "40", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["holds"] is True and data["shape"] == [12, 40]
    for label in ("per_tensor", "per_channel"):
        worst = data[label]["worst"]
        assert worst["max_err/bound_max"] <= 1 + 1e-6
        assert worst["out_err/bound_out"] <= 1 + 1e-6
        assert len(data[label]["rows"]["scale"]) == 12
