"""The report's conclusions in sentences, each with the figures it rests on."""

from __future__ import annotations

from typing import Any

from vkcore.tools.coldwarm.conditions import CONDITIONS
from vkcore.tools.coldwarm.report import ms, ratio
from vkcore.tools.coldwarm.stages import STAGE_LABELS

# A pipeline-cache blob this small is only the VkPipelineCacheHeaderVersionOne header.
_HEADER_BYTES = 32
# Warm/cold above this ratio counts as "no speedup" in the report's words.
_NO_SPEEDUP_RATIO = 0.8


def findings(report: dict[str, Any]) -> list[str]:
    """The report's conclusions in sentences, each with its figures."""
    pooled, rat = report["summary"]["pooled"], report["ratios"]
    warnings = _warnings(report)
    if "cold" not in pooled:
        return [*warnings, "no cold condition was measured, so no warm/cold ratio can be given"]
    cold = pooled["cold"]
    env = report["environment"]
    lavapipe = (
        "llvmpipe" in env.get("name", "").lower()
        or "llvmpipe" in env.get("driver_name", "").lower()
    )
    out = [*warnings, _dominant_cost(cold, lavapipe)]
    if "driver" in rat:
        out.append(_driver_cache(rat["driver"], cold, pooled["driver"]))
    if "vkcore" in rat:
        out.append(_spirv_cache(rat["vkcore"], report))
        out.append(_pipeline_cache(rat["vkcore"], report))
    if "all" in rat:
        r = rat["all"]["first_result"]
        out.append(
            "With every cache warm, the time to the first result "
            "(import and device creation included) is "
            f"{ms(pooled['all']['first_result']['median'])} "
            f"against {ms(cold['first_result']['median'])} "
            f"cold: warm/cold = {ratio(r)}."
        )
    return out


def _warnings(report: dict[str, Any]) -> list[str]:
    """What makes this run's warm figures unreliable, said first."""
    out = []
    recompiled = sorted(
        {
            f"{s['condition']} {s['kernel']}"
            for s in report["samples"]
            if CONDITIONS[s["condition"]].vkcore_caches and "compiled" in s["spirv_origins"]
        }
    )
    if recompiled:
        out.append(
            "WARNING: samples with the SPIR-V cache warm compiled SPIR-V anyway "
            f"({', '.join(recompiled)}): their warm figures are not clean."
        )
    return out


def _dominant_cost(cold: dict[str, Any], lavapipe: bool) -> str:
    medians = {
        p: cold[p]["median"] or 0.0 for p in ("spirv", "module", "pipeline", "first_dispatch")
    }
    top = max(medians, key=lambda p: medians[p])
    share = medians[top] / (sum(medians.values()) or 1.0)
    first, create = medians["first_dispatch"], medians["pipeline"]
    text = (
        f"Cold, the first dispatch costs {ms(first)} "
        f"against {ms(create)} for vkCreateComputePipelines "
        f"and {ms(cold['second_dispatch']['median'])} for the second dispatch"
    )
    if create and first > create:
        text += (
            f": the driver's real work ({first / create:.0f}x pipeline creation) "
            "happens at first use."
        )
    else:
        text += "."
    if lavapipe:
        text += (
            " On lavapipe, vkCreateComputePipelines only translates SPIR-V to NIR; "
            "llvmpipe JIT-compiles the shader with LLVM at the first dispatch that uses it."
        )
    text += (
        f" The largest cold stage per kernel is {STAGE_LABELS[top]} "
        f"({ms(medians[top])}, {share:.0%} of SPIR-V + module + pipeline + first dispatch)."
    )
    return text


def _driver_cache(r: dict[str, Any], cold: dict[str, Any], warm: dict[str, Any]) -> str:
    return (
        "The driver's disk cache brings the first dispatch "
        f"from {ms(cold['first_dispatch']['median'])} "
        f"to {ms(warm['first_dispatch']['median'])} "
        f"(warm/cold = {ratio(r['first_dispatch'])}): the driver finds the compiled shader "
        "on disk instead of compiling it again; vkCreateComputePipelines "
        f"warm/cold = {ratio(r['pipeline'])}."
    )


def _origins(report: dict[str, Any], condition: str) -> str:
    """Where the samples of ``condition`` got their SPIR-V, e.g. ``cache/compiled``."""
    found = {
        o for s in report["samples"] if s["condition"] == condition for o in s["spirv_origins"]
    }
    return "/".join(sorted(found)) or "none"


def _spirv_cache(r: dict[str, Any], report: dict[str, Any]) -> str:
    return (
        f"vkcore's SPIR-V cache: obtaining SPIR-V warm/cold = {ratio(r['spirv'])} "
        f"(cold SPIR-V was {_origins(report, 'cold')}, warm {_origins(report, 'vkcore')}; "
        "compiling runs glslangValidator and spirv-val as processes)."
    )


def _pipeline_cache(r: dict[str, Any], report: dict[str, Any]) -> str:
    warm = [s for s in report["samples"] if s["condition"] in ("vkcore", "all")]
    feedback = [h for s in warm for h in s["cache_hits"] if h is not None]
    loaded = [b for s in warm if isinstance(b := s["pipeline_cache"].get("loaded_bytes"), int)]
    on_disk = max((v["pipeline_cache"] for v in report["primed_cache_bytes"].values()), default=0)
    warm_ratio = r["pipeline"]
    blob = f"the blob loaded was {max(loaded)} bytes" if loaded else "no blob size was reported"
    if not feedback:
        hit_text = "creation feedback is not available on this driver"
    else:
        hit_text = (
            f"creation feedback {'reported' if any(feedback) else 'never reported'} an "
            "application-cache hit"
        )
    evidence = (
        f"{blob}, {on_disk} bytes of pipeline-cache files were on disk after priming, "
        f"and {hit_text}"
    )
    head = f"vkcore's pipeline cache: vkCreateComputePipelines warm/cold = {ratio(warm_ratio)}"
    noise = "so a difference from 1 is run-to-run noise"
    if loaded and max(loaded) <= _HEADER_BYTES and not any(feedback):
        return (
            f"{head}, no speedup, because the driver does not serialize pipelines (the blob is "
            f"the header only, {noise}): {evidence}."
        )
    if not loaded and on_disk == 0 and not any(feedback):
        return f"{head}, no speedup: no pipeline-cache file was written ({noise}); {evidence}."
    if any(feedback) or (warm_ratio is not None and warm_ratio <= _NO_SPEEDUP_RATIO):
        return f"{head} ({_speedup(warm_ratio)} faster); {evidence}."
    return f"{head}, no speedup: the driver did not use the data it was given; {evidence}."


def _speedup(r: float | None) -> str:
    return "n/a" if not r else f"{1 / r:.1f}x"
