"""A user's compute shader as a ``vkcore coldwarm`` case (``--shader PATH``).

The probe process builds a :class:`vkcore.Program` from the file on its first call (so
GLSL to SPIR-V, the shader module and the pipeline fall in the timed stages, exactly as
for the built-in kernels, which create their pipelines on first use), then dispatches it
over resident buffers and reads the last writable one back.

Buffers: every storage block with a runtime array gets ``elements`` elements after its
fixed part; a block without one, and a uniform block, its fixed size; all zero.
Push constants are 0 unless given (``--push NAME=VALUE``). The grid is ``groups``, or
enough workgroups along x for ``elements`` invocations. Texel-buffer bindings are not
supported here (they need a view format).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vkcore import spirv
from vkcore.base import config, hostmem
from vkcore.compute.program import Program
from vkcore.compute.push_block import PushBlock
from vkcore.compute.tensor import Tensor, asarray
from vkcore.device.device import Device, devices
from vkcore.device.info import choose
from vkcore.spirv import reflect

DEFAULT_ELEMENTS = 1 << 16
ARG_PREFIX = "--shader-case="


@dataclass(frozen=True)
class ShaderCase:
    path: str
    defines: Mapping[str, int | str] = field(default_factory=dict)
    include_dirs: tuple[str, ...] = ()
    elements: int = DEFAULT_ELEMENTS
    groups: tuple[int, int, int] | None = None
    push: Mapping[str, int | float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not Path(self.path).is_file():
            raise ValueError(f"--shader: no shader file {self.path}")
        if isinstance(self.elements, bool) or not isinstance(self.elements, int):
            raise TypeError(f"elements must be an int, got {type(self.elements).__name__}")
        if self.elements < 1:
            raise ValueError(f"elements must be positive, got {self.elements}")
        for name in list(self.defines) + list(self.push):
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError(f"not a GLSL identifier: {name!r}")

    def check(self, selector: str | int | None = None) -> None:
        """Compile and reflect here, before any probe starts: a GLSL error, an unknown
        push constant, a push value its member cannot hold, an unsupported binding, or
        ``elements`` that make a buffer larger than one storage binding of the device the
        probes will use (``selector``) or than the memory available is an error now, not
        in every probe."""
        text = Path(self.path).read_text()
        dirs = [Path(self.path).parent, *map(Path, self.include_dirs)]
        code = spirv.compile_source(text, name=self.path, include_dirs=dirs, defines=self.defines)
        iface = reflect.reflect(code.code)
        _check_bindings(iface.bindings)
        _check_push(self.push, iface.push)
        try:
            PushBlock(iface.push, iface.push_size, "--shader").pack(
                None, _push_values(self.push, iface.push)
            )
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"--push: {exc}") from None
        sizes = [(b, self._nbytes(b)) for b in iface.bindings]
        short = hostmem.shortfall(3 * sum(n for _, n in sizes))  # host, staging, device
        if short is not None:
            raise ValueError(f"--elements {self.elements}: running the shader {short}")
        infos = devices()
        info = (
            choose(infos, selector)
            if selector is not None  # as Device picks: $VKCORE_DEVICE, else the best one
            else config.env_choice("VKCORE_DEVICE", lambda s: choose(infos, s))
        )
        limit = info.max_storage_buffer_range
        for b, nbytes in sizes:
            if b.kind == reflect.STORAGE_BUFFER and nbytes > limit:
                raise ValueError(
                    f"--elements {self.elements}: buffer {b.name!r} (binding {b.binding}) "
                    f"would take {nbytes} bytes, more than one storage binding of this "
                    f"device covers (maxStorageBufferRange: {limit} bytes)"
                )

    def _nbytes(self, b: reflect.Binding) -> int:
        return max(b.fixed_bytes + b.stride * self.elements, 4)

    @property
    def name(self) -> str:
        """The kernel name the report shows."""
        return f"shader:{Path(self.path).name}"

    def to_arg(self) -> str:
        """The probe's command-line argument carrying this case."""
        return ARG_PREFIX + json.dumps(
            {
                "path": str(Path(self.path).resolve()),
                "defines": dict(self.defines),
                "include_dirs": [str(Path(d).resolve()) for d in self.include_dirs],
                "elements": self.elements,
                "groups": list(self.groups) if self.groups else None,
                "push": dict(self.push),
            }
        )

    @classmethod
    def from_arg(cls, arg: str) -> ShaderCase:
        """The case a probe was given (checked like any input)."""
        data = json.loads(arg[len(ARG_PREFIX) :])
        if not isinstance(data, dict):
            raise ValueError("the shader case must be a JSON object")
        groups = data.get("groups")
        return cls(
            path=str(data["path"]),
            defines=dict(data.get("defines") or {}),
            include_dirs=tuple(str(d) for d in data.get("include_dirs") or ()),
            elements=int(data.get("elements", DEFAULT_ELEMENTS)),
            groups=(int(groups[0]), int(groups[1]), int(groups[2])) if groups else None,
            push=dict(data.get("push") or {}),
        )

    def prepare(self, dev: Device) -> Callable[[], Any]:
        """The probe's run-once function (see the module docstring)."""
        state: dict[str, Any] = {}

        def run() -> Any:
            if not state:
                prog = Program(
                    path=self.path,
                    include_dirs=list(self.include_dirs),
                    defines=dict(self.defines),
                    device=dev,
                )
                state.update(prog=prog, buffers=self._buffers(prog), push=self._push(prog))
                state["groups"] = self.groups or self._grid(prog)
            prog = state["prog"]
            prog(*state["buffers"], groups=state["groups"], **state["push"])
            written = [
                t for t, b in zip(state["buffers"], prog.bindings, strict=True) if b.writable
            ]
            return written[-1].numpy() if written else None

        return run

    def _buffers(self, prog: Program) -> list[Tensor]:
        """Zeroed resident Tensors, each of its binding's element dtype (a Program binds
        only a Tensor of that dtype; bytes for a block that mixes types)."""
        _check_bindings(prog.bindings)
        out = []
        for b in prog.bindings:
            dtype = np.dtype(b.element or np.uint8)
            count = -(-self._nbytes(b) // dtype.itemsize)
            raw = asarray(np.zeros(count * dtype.itemsize, np.uint8), device=prog.device)
            out.append(Tensor(raw.buffer, (count,), dtype, prog.device))
        return out

    def _push(self, prog: Program) -> dict[str, Any]:
        _check_push(self.push, prog.push)
        return _push_values(self.push, prog.push)

    def _grid(self, prog: Program) -> tuple[int, int, int]:
        limit = prog.device.info.max_compute_work_group_count[0]
        return min(math.ceil(self.elements / prog.workgroup[0]), limit), 1, 1


def _push_values(given: Mapping[str, Any], members: Sequence[reflect.PushMember]) -> dict[str, Any]:
    """Every member's value: the one given, else 0."""
    zero = {"float": 0.0, "int": 0, "uint": 0}
    values: dict[str, Any] = {}
    for m in members:
        default = zero[m.kind] if m.count == 1 else [zero[m.kind]] * m.count
        values[m.name] = given.get(m.name, default)
    return values


def _check_bindings(bindings: Sequence[reflect.Binding]) -> None:
    for b in bindings:
        if b.kind not in (reflect.STORAGE_BUFFER, reflect.UNIFORM_BUFFER):
            raise ValueError(f"--shader: binding {b.binding} is a {b.kind} (not supported here)")


def _check_push(given: Mapping[str, Any], members: Sequence[reflect.PushMember]) -> None:
    unknown = sorted(set(given) - {m.name for m in members})
    if unknown:
        raise ValueError(f"--push: the shader has no push constant {unknown[0]!r}")
