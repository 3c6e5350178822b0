"""Your own compute shaders on vkcore's device layer: :class:`Program`.

::

    prog = vkcore.Program(source)                         # GLSL text
    prog = vkcore.Program(path="blur.comp", include_dirs=["inc"], defines={"RADIUS": 4})
    prog = vkcore.Program(spirv=blob)                     # SPIR-V bytes
    prog(x, y, groups=(gx, 1, 1), n=1000, a=2.5)          # buffers in binding order

GLSL goes through the content-addressed SPIR-V cache (:func:`vkcore.spirv.compile_source`:
a second process with the same sources never runs the compiler), the pipeline through the
device's persisted pipeline cache; identical programs on one device share one pipeline.
What the shader declares is read from its SPIR-V (:mod:`vkcore.spirv.reflect`):
``prog.bindings``, ``prog.push``, ``prog.spec_constants``, ``prog.workgroup``.

``spirv=`` bytes are validated before the driver sees them (:mod:`vkcore.spirv.validate`;
a damaged module is a :class:`vkcore.InvalidSpirvError`). Binding rules (descriptor set
0; a GLSL error is a :class:`vkcore.ShaderCompileError`):

* buffers are passed positionally in binding order: a :class:`vkcore.Tensor` (bound as
  it is) or a numpy array / array-like (uploaded for the call). A numpy array bound to a
  binding the shader may write (no ``readonly``) gets the result copied back into it after
  the dispatch, so it must be a writable C-contiguous ``numpy.ndarray``; ``readonly``
  bindings are only uploaded. Each buffer's byte size must cover the block's fixed part
  and, with a runtime array, add whole elements of its stride.
* element types: a block made of one scalar type (``float x[]``, ``uvec4 s[]``,
  ``int8_t q[]``; ``Binding.element``) or a texel binding (its view format's) holds that
  dtype. An array-like for a ``readonly`` binding is converted to it as
  :func:`vkcore.asarray` converts (:func:`vkcore.tensor.convert`: a Python list or a
  float64 array becomes float32 for ``float x[]``, rounded; integers must fit an integer
  type exactly, else a ValueError; floats for an integer type are a TypeError). A numpy
  array that takes a result, and a Tensor, must have that dtype already: a TypeError
  naming the argument otherwise (a result is not converted back, a Tensor is never
  reinterpreted; to pass the bits of a float32 array to ``uint x[]``, ``x.view(np.uint32)``).
  A block that mixes scalar types (``uint n; float x[];``) takes the bytes of a numpy
  array in native byte order (any dtype, structured ones too) or of a Tensor.
* storage blocks (``buffer``) and uniform blocks (``uniform``) are bound whole, within
  the device's limits (each checked before the pipeline is made: docs/programs.md,
  "Device limits"; :mod:`vkcore.compute.program_limits`); ``textureBuffer`` bindings (uniform
  texel buffers) need their view format at construction (``texel={binding: "r32f"}``);
  ``imageBuffer`` (storage texel buffers) is not supported.
* push constants by member name, with the member's reflected type (``int``/``uint``
  members take Python or numpy integers in range, ``float`` members any real number;
  vectors and arrays take a sequence of that many); ``push=bytes`` gives the block's
  bytes instead. Specialization constants by name (or SpecId) at construction;
  ``workgroup=`` sets the local-size ids (``layout(local_size_x_id = ...)``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

from vkcore import spirv
from vkcore._vk import constants as vk
from vkcore.compute import program_args, program_limits
from vkcore.compute import program_source as source_of
from vkcore.compute.push_block import PushBlock
from vkcore.compute.repeat import Repeat, exact_values
from vkcore.compute.tensor import Tensor, asarray, check_on_device
from vkcore.device.device import Device, resolve
from vkcore.device.memory.buffer import Buffer
from vkcore.device.memory.pools import buffer_pool
from vkcore.device.pipelines.pipeline import Pipeline
from vkcore.device.submit.commands import Dispatch
from vkcore.device.submit.submitter import Recorded
from vkcore.errors import shown
from vkcore.spirv import interface_file, reflect

_DESCRIPTOR_TYPES = {
    reflect.STORAGE_BUFFER: vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
    reflect.UNIFORM_BUFFER: vk.VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER,
}
_UNIFORM_TEXEL_BUFFER = vk.VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER


class Program:
    """A compute shader with its reflected interface and its pipeline on one device."""

    def __init__(
        self,
        source: str | None = None,
        *,
        path: str | Path | None = None,
        spirv: bytes | None = None,
        include_dirs: Sequence[str | Path] = (),
        defines: Mapping[str, int | str] | None = None,
        spec: Mapping[str | int, Any] | None = None,
        workgroup: int | Sequence[int] | None = None,
        texel: Mapping[int, str] | None = None,
        device: Device | None = None,
    ) -> None:
        device = resolve(device)
        api = device.info.api_version
        code = source_of.spirv_of(source, path, spirv, include_dirs, defines, api)
        try:
            interface = reflect.reflect(code.code)
        except reflect.ReflectionError as exc:
            raise ValueError(f"spirv: {exc}") from None
        name = self._display_name(source, path)
        self._build(code, interface, name, spec, workgroup, texel, device)

    @classmethod
    def builtin(
        cls,
        shader: str,
        *,
        defines: Mapping[str, int | str] | None = None,
        spec: Mapping[str | int, Any] | None = None,
        workgroup: int | Sequence[int] | None = None,
        texel: Mapping[int, str] | None = None,
        device: Device | None = None,
    ) -> Program:
        """vkcore's own shader ``shader`` (a file of :func:`vkcore.spirv.shader_dir`) with
        ``defines``: the SPIR-V shipped in the wheel (else the SPIR-V cache, else compiled
        once) and, for shipped variants, the interface reflected when the wheel was built,
        so an installed wheel needs neither compiler nor reflection at run time. The
        built-in kernels are Programs made this way; everything else is as for a user's."""
        code = spirv.get(shader, dict(defines or {}))
        interface = None
        if code.origin == "shipped":
            interface = interface_file.shipped(code.code, spirv.shipped_dir())
        if interface is None:
            interface = reflect.reflect(code.code)
        name = shader + "".join(f" {k}={v}" for k, v in sorted((defines or {}).items()))
        prog = cls.__new__(cls)
        prog._build(code, interface, name, spec, workgroup, texel, device)
        return prog

    def _build(
        self,
        code: spirv.Spirv,
        interface: reflect.Interface,
        name: str,
        spec: Mapping[str | int, Any] | None,
        workgroup: int | Sequence[int] | None,
        texel: Mapping[int, str] | None,
        device: Device | None,
    ) -> None:
        self.device = resolve(device)
        self.code = code
        self.interface = interface
        self.name = name
        self.bindings = interface.bindings
        self.push = interface.push
        self.spec_constants = interface.spec
        source_of.check_bindings(self.bindings)
        self.texel = source_of.texel_formats(self.device, self.bindings, texel)
        self.spec = source_of.spec_values(interface, spec, workgroup)
        self.workgroup = source_of.local_size(interface, self.spec)
        program_limits.check_interface(interface, self.workgroup, self.spec, self.device.info, name)
        self.pipeline = self._pipeline()
        self._push_block = PushBlock(self.push, interface.push_size, name)
        self._max_groups = tuple(int(g) for g in self.device.info.max_compute_work_group_count)
        self.max_binding = int(self.device.info.max_storage_buffer_range)
        dtypes = program_args.elements(self.bindings, self.texel)
        self.rules = program_args.BindingRules(self.device, self.texel, self.max_binding, dtypes)
        self._dtypes = [dtypes[b.binding] for b in self.bindings]  # for the fast paths
        # size_problem's rule as bounds: for recorded buffers, and for a call's arrays
        self._sizes = [program_args.size_bounds(self.rules, b, False) for b in self.bindings]
        self._call_sizes = [program_args.size_bounds(self.rules, b) for b in self.bindings]
        # binding index -> the staging buffer a small numpy argument keeps between calls
        # (freed with the Program, like any collected Buffer)
        self._held: dict[int, Buffer] = {}
        self._last_dispatch: Dispatch | None = None
        self._kept: _KeptCall | None = None  # the latest call, for an exact repeat

    @property
    def last_device_seconds(self) -> float | None:
        """Device seconds of this device's latest submission (timestamps), if measured."""
        return self.device.last_device_seconds

    # ------------------------------------------------------------------ construction
    def _display_name(self, source: str | None, path: str | Path | None) -> str:
        if path is not None:
            return str(path)
        return "<spirv>" if source is None else "<string>"

    def _pipeline(self) -> Pipeline:
        layout = tuple(
            (
                b.binding,
                _UNIFORM_TEXEL_BUFFER if b.binding in self.texel else _DESCRIPTOR_TYPES[b.kind],
            )
            for b in self.bindings
        )
        return self.device.program_pipeline(
            self.code,
            self.name,
            bindings=layout,
            push_size=self.interface.push_size,
            spec=source_of.spec_data(self.interface, self.spec),
            texel=self.texel,
            access=tuple(b.access for b in self.bindings),
        )

    # ------------------------------------------------------------------ a dispatch
    def __call__(
        self,
        *buffers: Any,
        groups: int | Sequence[int] = 1,
        push: bytes | None = None,
        **values: Any,
    ) -> None:
        """Dispatch ``groups`` workgroups over ``buffers`` (binding order) with the push
        constants ``values`` (by member name) or ``push`` (the block's bytes)."""
        kept = self._kept
        if kept is not None and kept.matches(buffers, groups, push, values):
            with self.device.lock:  # still this Program's latest call (another thread's?)
                if self._kept is kept and kept.run(buffers):  # (refused in a sequence)
                    return
        if self.device.recording:  # inside vkcore.sequence()
            step = self.record(*self._as_tensors(buffers), groups=groups, push=push, **values)
            self.device.run((step,))
            return
        self._kept = None  # the full call below decides what the next repeat may reuse
        grid = self._grid(groups)
        push_bytes = self._push_block.pack(push, values)
        if len(buffers) != len(self.bindings):
            raise TypeError(
                f"{self.name} takes {len(self.bindings)} buffers (bindings "
                f"{[b.binding for b in self.bindings]}), got {len(buffers)}"
            )
        with self.device.lock:  # the held buffers are this call's until it returns
            staged = self._held_for(buffers)
            if staged is not None:
                recorded = self._run_held(buffers, staged, push_bytes, grid)
                self._kept = _KeptCall.of(self, recorded, buffers, staged, (), groups, push, values)
                return
        args = [
            program_args.Argument.of(self.rules, b, x, i)
            for i, (b, x) in enumerate(zip(self.bindings, buffers, strict=True))
        ]
        dev = self.device
        pool = buffer_pool(dev)
        with dev.lock:
            dev.check()
            try:
                bound = tuple(a.upload(pool, self._held, i) for i, a in enumerate(args))
                dispatch = self._dispatch(bound, push_bytes, grid)
                recorded = dev.run((dispatch,))  # device seconds read on demand
                for a in args:
                    a.copy_back()
                # Kept only where each array is bound as its own bytes (not converted),
                # staged in the Program's held buffers: what a repeat copies as it is.
                if all(
                    a.tensor is not None or (a.held and a.array is x)
                    for a, x in zip(args, buffers, strict=True)
                ):
                    tensors = tuple(a.tensor for a in args if a.tensor is not None)
                    held = tuple(a.staged for a in args if a.tensor is None)
                    self._kept = _KeptCall.of(
                        self, recorded, buffers, held, tensors, groups, push, values
                    )
            finally:
                for a in args:
                    a.give_back(pool)

    def _as_tensors(self, buffers: tuple[Any, ...]) -> list[Any]:
        """A call recorded in a sequence: readonly numpy arguments uploaded as Tensors now;
        a binding the shader writes needs a Tensor (its result is read after the block)."""
        out = []
        for i, (b, x) in enumerate(zip(self.bindings, buffers, strict=False)):  # count: record
            if isinstance(x, (Tensor, Buffer)):
                out.append(x)
            elif b.writable:
                raise TypeError(
                    f"buffer {i} (binding {b.binding}) is written by the shader: inside a "
                    "sequence pass a vkcore.Tensor and read it after the with block"
                )
            else:  # converted and checked as a call does it, then uploaded as its bytes
                what = program_args.describe(b, i)
                arr = program_args.readonly_array(x, self.rules.dtypes[b.binding], what)
                program_args.check_size(self.rules, b, arr.nbytes, what)
                raw = asarray(arr.reshape(-1).view(np.uint8), device=self.device)
                assert raw.buffer is not None  # (not empty: checked)
                out.append(raw.buffer)
        return out + list(buffers[len(out) :])

    def _held_for(self, arrays: tuple[Any, ...]) -> tuple[Buffer, ...] | None:
        """The held staging buffers of a repeated call on plain numpy arrays of the same
        sizes (the common case of a small program called in a loop), else None: the
        general path checks and stages each argument."""
        held = self._held
        if len(held) != len(arrays):
            return None
        out = []
        for i, (x, b, dtype, (lo, hi, base, step)) in enumerate(
            zip(arrays, self.bindings, self._dtypes, self._call_sizes, strict=True)
        ):
            buf = held.get(i)
            if type(x) is not np.ndarray or buf is None or buf.handle is None:
                return None
            n = x.nbytes
            flags = x.flags
            if n != buf.nbytes or not flags.c_contiguous:
                return None
            if not (x.dtype == dtype if dtype is not None else program_args.bytes_of(x, None)):
                return None
            if not (lo <= n <= hi and (n - base) % step == 0):
                return None
            if b.writable and not flags.writeable:
                return None
            out.append(buf)
        return tuple(out)

    def _run_held(
        self,
        arrays: tuple[Any, ...],
        staged: tuple[Buffer, ...],
        push: bytes,
        grid: tuple[int, int, int],
    ) -> Recorded | None:
        """Upload into the held buffers, dispatch, copy the written bindings back; the
        recording the device kept, if any."""
        dev = self.device
        with dev.lock:
            dev.check()
            for x, buf in zip(arrays, staged, strict=True):
                buf.write(x)
            dispatch = self._dispatch(staged, push, grid)
            recorded = dev.run((dispatch,))
            for x, buf, b in zip(arrays, staged, self.bindings, strict=True):
                if b.writable:
                    buf.read(x)
            return recorded

    def _dispatch(
        self, bound: tuple[Buffer, ...], push: bytes, grid: tuple[int, int, int]
    ) -> Dispatch:
        """The call's Dispatch: the previous call's object when it is the same one (a
        repeated call on held staging buffers), which the device finds by identity."""
        last = self._last_dispatch
        if last is not None and last.buffers == bound and last.push == push and last.groups == grid:
            return last
        dispatch = Dispatch(self.pipeline, bound, push, grid)
        # Kept only over staging buffers: a kept Tensor's buffer would outlive the Tensor.
        self._last_dispatch = dispatch if all(b.reusable for b in bound) else None
        return dispatch

    def record(
        self,
        *buffers: Buffer | Tensor,
        groups: int | Sequence[int] = 1,
        push: bytes | None = None,
        **values: Any,
    ) -> Dispatch:
        """This program's dispatch over device memory, checked as a call is, to submit with
        others: ``device.run([...])`` submits a list of steps in one command
        buffer, with a barrier wherever a step depends on an earlier one (reads or writes what
        it wrote, or writes what it read). Buffers are
        :class:`Buffer`\\ s or :class:`Tensor`\\ s of this device, in binding order; a
        buffer may end in a partial runtime-array element or texel, which the shader cannot
        reach (a kernel binding a larger buffer says in its push constants what it reads)."""
        grid = self._grid(groups)
        push_bytes = self._push_block.pack(push, values)
        if len(buffers) != len(self.bindings):
            raise TypeError(
                f"{self.name} takes {len(self.bindings)} buffers (bindings "
                f"{[b.binding for b in self.bindings]}), got {len(buffers)}"
            )
        bound: list[Buffer] = []
        dev = self.device
        for i, (x, dtype, (lo, hi, _, _)) in enumerate(
            zip(buffers, self._dtypes, self._sizes, strict=True)
        ):
            buf = x.buffer if isinstance(x, Tensor) else x
            # The common case in a few comparisons: the same rule as size_problem.
            if (
                isinstance(buf, Buffer)
                and (dtype is None or buf is x or x.dtype == dtype)  # type: ignore[union-attr]
                and buf.device is dev
                and lo <= buf.nbytes <= hi
                and buf.handle is not None
            ):
                bound.append(buf)
                continue
            bound.append(self._device_buffer(self.bindings[i], x, i))
        return Dispatch(self.pipeline, tuple(bound), push_bytes, grid)

    def _device_buffer(self, b: reflect.Binding, x: Any, index: int) -> Buffer:
        what = program_args.describe(b, index)
        if isinstance(x, Tensor):  # bound as it is: only one of the elements' dtype
            program_args.check_tensor_dtype(x, self.rules.dtypes[b.binding], what)
        buf = x.buffer if isinstance(x, Tensor) else x
        if (
            isinstance(buf, Buffer)
            and buf.device is self.device
            and buf.alive
            and program_args.size_problem(self.rules, b, buf.nbytes, whole_elements=False) is None
        ):
            return buf
        if not isinstance(buf, Buffer):
            raise TypeError(f"{what} must be a vkcore Buffer or Tensor, got {type(x).__name__}")
        check_on_device(buf.device, self.device, what, "the program's")
        if not buf.alive:
            raise ValueError(f"{what} is released")
        program_args.check_size(self.rules, b, buf.nbytes, what, whole_elements=False)
        return buf

    def _grid(self, groups: int | Sequence[int]) -> tuple[int, int, int]:
        if type(groups) is int and 1 <= groups <= self._max_groups[0]:  # the common cases
            return groups, 1, 1
        if type(groups) is tuple and len(groups) == 3:
            (x, y, z), (lx, ly, lz) = groups, self._max_groups
            ints = type(x) is int and type(y) is int and type(z) is int
            if ints and 1 <= x <= lx and 1 <= y <= ly and 1 <= z <= lz:
                return x, y, z
        dims = source_of.ints(groups, "groups")
        if not 1 <= len(dims) <= 3 or any(
            isinstance(g, bool) or not isinstance(g, (int, np.integer)) for g in dims
        ):
            raise TypeError(f"groups must be an int or 1 to 3 ints, got {shown(groups)}")
        dims += [1] * (3 - len(dims))
        program_limits.check_groups(dims, self.device.info)
        return int(dims[0]), int(dims[1]), int(dims[2])

    def __repr__(self) -> str:
        shape = f"bindings={len(self.bindings)}, workgroup={self.workgroup}"
        return f"vkcore.Program({self.name}, {shape})"


def _int_groups(groups: Any) -> bool:
    """``groups`` as a repeat compares it: an int, or a tuple of ints (never bools or
    floats, which compare equal to ints but which the full call refuses)."""
    return type(groups) is int or (type(groups) is tuple and all(type(g) is int for g in groups))


class _KeptCall:
    """A Program's latest call, kept for an exact repeat (:mod:`vkcore.compute.repeat`):
    the same number of arguments, each the same kind as then (a numpy array of the same
    dtype and byte size, C-contiguous, writable where the shader writes it; or a Tensor
    over the very same buffer with the same dtype), the same ``groups`` and ``push``, and
    push-constant values equal in value and type. Every check the full call made holds
    for such a call, so it only copies, resubmits and copies back."""

    def __init__(
        self,
        repeat: Repeat,
        groups: Any,
        push: bytes | None,
        values: dict[str, Any],
        types: tuple[tuple[str, type], ...],
        arrays: tuple[tuple[int, np.dtype, int, bool], ...],
        tensor_at: tuple[tuple[int, np.dtype], ...],
    ) -> None:
        self.repeat = repeat
        self.groups, self.push, self.values, self.types = groups, push, values, types
        self.arrays = arrays  # (position, dtype, byte size, written) of each numpy array
        self.tensor_at = tensor_at  # (position, dtype) of each Tensor

    @classmethod
    def of(
        cls,
        prog: Program,
        recorded: Recorded | None,
        buffers: tuple[Any, ...],
        staged: tuple[Buffer | None, ...],
        tensors: tuple[Tensor, ...],
        groups: Any,
        push: Any,
        values: dict[str, Any],
    ) -> _KeptCall | None:
        """The call to keep, or None: the device kept no recording of it, or a repeat
        could not compare it exactly (push values other than plain ints and floats,
        groups other than ints, an argument of another kind)."""
        if recorded is None:
            return None
        types = exact_values(values)
        if types is None or not _int_groups(groups) or not (push is None or type(push) is bytes):
            return None
        arrays: list[tuple[int, np.dtype, int, bool]] = []
        tensor_at: list[tuple[int, np.dtype]] = []
        for i, (x, b) in enumerate(zip(buffers, prog.bindings, strict=True)):
            if type(x) is Tensor:
                tensor_at.append((i, x.dtype))
            elif type(x) is np.ndarray:
                arrays.append((i, x.dtype, x.nbytes, b.writable))
            else:
                return None
        bound = [t.buffer for t in tensors]
        if len(staged) != len(arrays) or None in staged or None in bound:
            return None
        inputs = [(a[0], buf) for a, buf in zip(arrays, staged, strict=True)]
        outputs = [(a[0], buf) for a, buf in zip(arrays, staged, strict=True) if a[3]]
        repeat = Repeat(prog.device, recorded, inputs, outputs, bound)  # type: ignore[arg-type]
        return cls(repeat, groups, push, dict(values), types, tuple(arrays), tuple(tensor_at))

    def matches(
        self, buffers: tuple[Any, ...], groups: Any, push: Any, values: dict[str, Any]
    ) -> bool:
        # (4.0, 1, 1) or (4, True, True) equal the kept ints, and are refused
        if groups != self.groups or not _int_groups(groups):
            return False
        if push is not self.push and (type(push) is not bytes or push != self.push):
            return False
        if len(buffers) != len(self.arrays) + len(self.tensor_at):
            return False
        return (
            self._same_values(values) and self._same_arrays(buffers) and self._same_tensors(buffers)
        )

    def _same_values(self, values: dict[str, Any]) -> bool:
        if len(values) != len(self.types):
            return False
        kept = self.values
        for name, t in self.types:
            v: Any = values.get(name, kept)  # (a missing name gets the dict: never its type)
            was: Any = kept[name]
            if type(v) is not t or v != was:
                return False
            if t is float and math.copysign(1.0, cast(float, v)) != math.copysign(1.0, was):
                return False  # -0.0 == 0.0, but their bits differ
        return True

    def _same_arrays(self, buffers: tuple[Any, ...]) -> bool:
        for i, dtype, nbytes, writable in self.arrays:
            x = buffers[i]
            if type(x) is not np.ndarray or x.nbytes != nbytes or x.dtype != dtype:
                return False
            flags = x.flags
            if not flags.c_contiguous or (writable and not flags.writeable):
                return False
        return True

    def _same_tensors(self, buffers: tuple[Any, ...]) -> bool:
        if not self.tensor_at:
            return True
        bound = []
        for i, dtype in self.tensor_at:
            x = buffers[i]
            if type(x) is not Tensor or x.dtype != dtype:
                return False
            bound.append(x.buffer)
        return self.repeat.binds(bound)

    def run(self, buffers: tuple[Any, ...]) -> bool:
        return self.repeat.run(buffers)
