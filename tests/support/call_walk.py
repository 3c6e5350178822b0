"""The walk of one call through vkcore's modules, traced with ``sys.setprofile``.

``walk(fn)`` runs ``fn()`` and records, for every Python-level call into vkcore code, the
module called. Consecutive calls inside one module are one visit. Of the visits:

* a *climb* is a call from a module into one of a higher tier (a callback, or a lower
  layer calling back up): a call should only go down the tiers;
* a *return* is a visit to a module visited before, but not just before: the call left
  it and came back (the caller orchestrating helpers in turn, or a wander between two
  modules).

``python tests/support/call_walk.py`` prints the walk of ``vkcore.softmax(x)`` on a
numpy ``x``, following ``x`` (``--all``: every call), first call on a fresh device
(``--warm`` for the second call).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parents[2] / "vkcore"


def module_of(filename: str) -> str | None:
    try:
        rel = Path(filename).resolve().relative_to(PACKAGE)
    except ValueError:
        return None
    name = ".".join(rel.with_suffix("").parts)
    return name


@dataclass
class Walk:
    visits: list[str] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)  # (caller, callee) modules

    @property
    def modules(self) -> set[str]:
        return set(self.visits)

    def climbs(self, tier_of: Callable[[str], int | None]) -> list[tuple[str, str]]:
        """Calls from a module into one of a higher tier."""
        out = []
        for a, b in self.calls:
            ta, tb = tier_of(a), tier_of(b)
            if ta is not None and tb is not None and tb > ta:
                out.append((a, b))
        return out

    def returns(self) -> list[str]:
        seen: set[str] = set()
        out = []
        for i, m in enumerate(self.visits):
            if m in seen and self.visits[i - 1] != m:
                out.append(m)
            seen.add(m)
        return out


def _carried(value: Any, carriers: dict[int, Any]) -> bool:
    """``value`` is a carrier, or a numpy view of one (its ``base`` chain)."""
    while value is not None:
        if id(value) in carriers:
            return True
        value = getattr(value, "base", None) if hasattr(value, "__array_interface__") else None
    return False


def walk(fn: Callable[[], Any], follow: Any = None) -> Walk:
    """The visits of ``fn()``; with ``follow``, only calls that receive ``follow`` or what
    was made from it (a value returned by a call that received it) as an argument."""
    w = Walk()
    carriers: dict[int, Any] = {} if follow is None else {id(follow): follow}
    live: set[int] = set()  # frames that received a carried value

    def profile(frame: Any, event: str, arg: Any) -> None:
        mod = module_of(frame.f_code.co_filename)
        if mod is None or mod.startswith("tools."):
            return
        if event == "return":
            if id(frame) in live:
                live.discard(id(frame))
                for made in arg if isinstance(arg, tuple | list) else (arg,):
                    if made is not None and not isinstance(made, bool | int | float | str):
                        carriers[id(made)] = made
            return
        if event != "call":
            return
        if follow is not None:
            code = frame.f_code
            names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
            args = [frame.f_locals.get(n) for n in names]
            if not any(_carried(a, carriers) for a in args):
                return
            live.add(id(frame))
        caller = module_of(frame.f_back.f_code.co_filename) if frame.f_back else None
        if caller is not None and caller != mod:
            w.calls.append((caller, mod))
        if not w.visits or w.visits[-1] != mod:
            w.visits.append(mod)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return w


def main() -> None:
    import numpy as np

    import vkcore

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from test_layers import tier_of

    x = np.linspace(-3, 3, 4096, dtype=np.float32).reshape(4, 1024)
    dev = vkcore.Device(pipeline_cache=False)
    if "--warm" in sys.argv:
        vkcore.softmax(x, device=dev)
    w = walk(lambda: vkcore.softmax(x, device=dev), follow=None if "--all" in sys.argv else x)
    print(" -> ".join(w.visits))
    print(
        f"{len(w.modules)} modules, {len(w.visits)} visits, "
        f"{len(w.climbs(tier_of))} climbs, {len(w.returns())} returns"
    )
    dev.close()


if __name__ == "__main__":
    main()
