"""The logical device as users see it (:class:`Device`), and the default device.

A Device is a :class:`~vkcore.device.context.DeviceContext` (the VkDevice, its queue, memory
types and buffers) that owns the rest: the submitter, the staging copies, the pipelines
and their persisted cache. The modules below this one only see the DeviceContext.

Ownership and destruction order (``Device.close``): wait for the queue to be idle, then
the staging buffers, the submitter (recordings, fence, command and descriptor pools),
pipelines, live buffers, the pipeline cache (saved first), the VkDevice and finally the
instance with its messenger. Garbage collection only calls ``close`` as a fallback:
per-device state other modules keep (:class:`~vkcore.base.per_device.PerDeviceMap`) lives on
the device itself, so it never keeps a dropped device alive, and the device records the
raw handles of every live buffer and pipeline, so it can free them even when the
collector has already cleared its weak references to them. Pipelines are kept weakly
(with the :data:`KEPT_PIPELINES` most recently asked for): a dropped variant is released
when collected (:mod:`vkcore.device.pipelines.pipeline`).

Vulkan objects do not survive ``os.fork()``: in a child process every inherited Device is
marked as belonging to the parent; the child never calls Vulkan on it (not even to
destroy it), a kernel call on it raises RuntimeError, and the default device is created
anew on first use.
"""

from __future__ import annotations

import atexit
import gc
import logging
import operator
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vkcore.base import config
from vkcore.device.context import DeviceContext, LiveBuffer, ctrl_c_deferred
from vkcore.device.info import DeviceInfo, query_info
from vkcore.device.instance import Instance
from vkcore.device.memory.buffer import Buffer
from vkcore.device.pipelines.cache import PipelineCache
from vkcore.device.pipelines.pipeline import Pipeline, destroy_objects
from vkcore.device.submit.commands import Dispatch
from vkcore.device.submit.submitter import Recorded, Submitter
from vkcore.device.submit.transfers import Transfers
from vkcore.errors import shown
from vkcore.spirv.shaders import Spirv

log = logging.getLogger("vkcore")

# A dropped device is freed by the cyclic garbage collector (it and its objects refer to
# each other), which may not run for a long time: creating a device while this many are
# open runs it first, so a loop that drops devices keeps only a few alive at once.
_COLLECT_WHEN_OPEN = 4


def devices() -> list[DeviceInfo]:
    """Every Vulkan physical device the loader reports, in enumeration order."""
    instance = Instance(validation=False)
    try:
        return [query_info(instance, pd, i) for i, pd in enumerate(instance.physical_devices())]
    finally:
        instance.destroy()


class Device(DeviceContext):
    """A Vulkan logical device with one compute queue.

    ``selector`` is an index or a name substring (default: ``$VKCORE_DEVICE``, else the
    best device: discrete, integrated, virtual, then CPU). ``validation`` enables the
    Khronos validation layer (default: ``$VKCORE_VALIDATION``); its errors are raised as
    :class:`vkcore.ValidationError` at the next vkcore call. ``pipeline_cache`` set to
    False disables the persisted pipeline cache for this device (``$VKCORE_PIPELINE_CACHE``).
    Both flags take True, False or None (the default); anything else (``"no"``, ``0``) is
    a TypeError.

    A Device is a context manager; ``close()`` releases everything it owns. Calls from
    several threads are serialized on the queue.
    """

    # Made in __init__ after the VkDevice; None until then, so a failed __init__ (or one
    # interrupted) tears down exactly what exists.
    _submitter: Submitter | None = None
    _transfers: Transfers | None = None
    _pipeline_cache: PipelineCache | None = None

    def __init__(
        self,
        selector: str | int | None = None,
        *,
        validation: bool | None = None,
        pipeline_cache: bool | None = None,
        cache_dir: str | None = None,
        timed: bool = False,
    ) -> None:
        selector = check_selector(selector)
        timed = bool(check_flag(timed, "timed"))
        validation = check_flag(validation, "validation")
        pipeline_cache = check_flag(pipeline_cache, "pipeline_cache")
        if cache_dir is not None and not isinstance(cache_dir, (str, os.PathLike)):
            raise TypeError(
                f"cache_dir must be a folder path or None, got {type(cache_dir).__name__}"
            )
        if len(_open_devices) >= _COLLECT_WHEN_OPEN:
            gc.collect()  # frees dropped devices, with their driver memory, before a new one
        # key -> the pipeline while anything refers to it, and the most recently asked for
        # (strongly, a few): a dropped variant is released, a repeated one is not remade
        self._pipelines: weakref.WeakValueDictionary[tuple[Any, ...], Pipeline] = (
            weakref.WeakValueDictionary()
        )
        self._recent_pipelines: OrderedDict[tuple[Any, ...], Pipeline] = OrderedDict()
        super().__init__(selector, validation=validation)  # destroys itself if it fails
        try:
            self._submitter = Submitter(self, timed=timed)
            self._transfers = Transfers(self, self._submitter)
            persist = (
                config.env_flag("VKCORE_PIPELINE_CACHE", True)
                if pipeline_cache is None
                else pipeline_cache
            )
            self._pipeline_cache = PipelineCache(self, persist=persist, directory=cache_dir)
        except BaseException:
            self._destroy_partial()
            raise
        _open_devices.add(self)

    @property
    def submitter(self) -> Submitter:
        """The device's submission path (:mod:`vkcore.device.submit.submitter`); kernels
        and users submit through :meth:`run`."""
        assert self._submitter is not None, "used before the device was created"
        return self._submitter

    @property
    def transfers(self) -> Transfers:  # type: ignore[override]
        assert self._transfers is not None, "used before the device was created"
        return self._transfers

    @property
    def pipeline_cache(self) -> PipelineCache:
        assert self._pipeline_cache is not None, "used before the device was created"
        return self._pipeline_cache

    @property
    def pipeline_cache_folder(self) -> Path | None:
        """Where this device's pipeline-cache file lives (None: not persisted, or a device
        without one), the folder other per-device files (tune files) sit in."""
        cache = self._pipeline_cache
        return cache.folder if cache is not None else None

    # ------------------------------------------------------------------ submission
    def run(self, steps: Sequence[Dispatch]) -> Recorded | None:
        """Submit ``steps`` (what :meth:`vkcore.Program.record` returns) in one command
        buffer and wait for them; inside ``vkcore.sequence()`` they are recorded there
        instead (docs/sequences.md). The one way kernels and users submit work.

        Returns the command buffer kept for these steps when the device keeps one (from
        their second submission): a caller that will submit exactly the same steps again
        may hand it to :meth:`rerun` instead (docs/performance.md#repeated-calls)."""
        return self.submitter.run_kept(steps)

    def rerun(self, kept: Recorded) -> bool:
        """Submit again what :meth:`run` returned, and wait: False (nothing submitted)
        once it is no longer kept, the caller then runs its steps again."""
        return self.submitter.rerun(kept)

    def copy(self, src: Buffer, src_offset: int, dst: Buffer, dst_offset: int, nbytes: int) -> None:
        """Copy ``nbytes`` from ``src`` to ``dst`` on the device, and wait for it."""
        self.submitter.copy(src, src_offset, dst, dst_offset, nbytes)

    @property
    def recording(self) -> bool:
        """True while a ``vkcore.sequence()`` records this thread's calls to this device."""
        return self.submitter.recording() is not None

    @property
    def timed(self) -> bool:
        """Whether calls and sequences write timestamps (``Device(timed=True)``; off by
        default: on a CPU device a timestamp pair costs as much as a tiny kernel)."""
        return self.submitter.timed

    @timed.setter
    def timed(self, value: bool) -> None:
        self.submitter.timed = bool(check_flag(value, "timed"))

    @property
    def last_device_seconds(self) -> float | None:
        """Device seconds of the latest :meth:`run` on this device, when it was timed
        (:attr:`timed`); None otherwise, or where the queue has no timestamps."""
        return self.submitter.last_device_seconds

    # ------------------------------------------------------------------ pipelines
    def _pipeline_for(self, key: tuple[Any, ...], make: Callable[[], Pipeline]) -> Pipeline:
        """The pipeline kept under ``key``, made by ``make()`` on first use."""
        with self.lock:
            self.check()
            pipe = self._pipelines.get(key)
            if pipe is None or pipe.handle is None:
                pipe = self._pipelines[key] = make()
            recent = self._recent_pipelines
            recent[key] = pipe
            recent.move_to_end(key)
            while len(recent) > KEPT_PIPELINES:
                recent.popitem(last=False)
            return pipe

    def forget_pipeline(self, pipeline_id: int) -> None:
        """Also drop the kept recordings that bind the pipeline being destroyed."""
        super().forget_pipeline(pipeline_id)
        if self._submitter is not None:
            self._submitter.forget_id(pipeline_id)

    def program_pipeline(
        self,
        code: Spirv,
        name: str,
        *,
        bindings: tuple[tuple[int, int], ...],
        push_size: int,
        spec: Mapping[int, bytes],
        texel: Mapping[int, str],
        access: Sequence[str] | None = None,
    ) -> Pipeline:
        """The pipeline of a :class:`vkcore.Program` (a user's or a built-in kernel's):
        created once per SPIR-V, specialization, layout and texel formats, through the
        pipeline cache."""
        key = (
            "program",
            code.key,
            tuple(sorted(spec.items())),
            bindings,
            push_size,
            tuple(sorted(texel.items())),
        )
        return self._pipeline_for(
            key,
            lambda: Pipeline(
                self,
                name,
                code,
                bindings,
                push_size,
                spec,
                texel,
                cache=self.pipeline_cache,
                access=access,
            ),
        )

    def pipeline_stats(self) -> list[dict[str, Any]]:
        """Per pipeline: name, creation time and whether the pipeline cache was hit."""
        with self.lock:
            return [p.stats() for p in list(self._pipelines.values())]

    def save_pipeline_cache(self) -> bool:
        """Persist the pipeline cache now; True if a file was written."""
        with self.lock:
            self.check()
            return self.pipeline_cache.save()

    def live_objects(self) -> dict[str, int]:
        """Counts of the Vulkan objects this device holds right now, by kind.

        A leak shows as a count that grows across repeated calls. ``buffers`` includes the
        staging buffers (one for uploads, one for readbacks, made on first use) and the
        small placeholder buffer kernels bind to unused slots; ``buffer_views`` are the
        texel views buffers own; every pipeline also owns one shader module and two
        layouts.
        """
        with self.lock:
            sub = getattr(self, "submitter", None)
            if sub is not None and not self._closed:
                sub.reap()  # sequences dropped in flight that have finished
            buffers = self.live_buffers()
            pipelines = [p for p in list(self._pipelines.values()) if p.handle is not None]
            sub, cache = self._submitter, self._pipeline_cache
            return {
                "buffers": len(buffers),
                "device_memory": sum(1 for b in buffers if b.memory is not None),
                "buffer_bytes": sum(b.nbytes for b in buffers),
                "buffer_views": sum(len(b._views or ()) for b in buffers),
                "pipelines": len(pipelines),
                "descriptor_sets": sub.live_descriptor_sets if sub is not None else 0,
                "pipeline_caches": int(cache is not None and cache.handle is not None),
            }

    def forget_buffer(self, buffer: LiveBuffer) -> None:
        """Stop recording ``buffer``, and drop the kept recordings that reference it."""
        super().forget_buffer(buffer)
        if self._submitter is not None:
            self._submitter.forget(buffer)

    def __repr__(self) -> str:
        state = "closed" if self._closed else self.info.name
        return f"<vkcore.Device {state}>"

    # ------------------------------------------------------------------ lifetime
    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Wait for the queue, save the pipeline cache, destroy everything this device owns."""
        with self.lock, ctrl_c_deferred():
            if self._closed:
                return
            self._closed = True
            try:
                self.lib.vkDeviceWaitIdle(self.handle)
            finally:
                self._destroy_partial()
            self._state.clear()  # pools, placeholders, memoized pipelines go with the device
            global _default
            with _default_lock:
                if _default is self:
                    _default = None

    def _destroy_partial(self) -> None:
        """Destroy whatever exists, children first; safe after a failed __init__."""
        self._closed = True
        if self.handle is not None:
            for part in (self._transfers, self._submitter):
                if part is not None:
                    part.destroy()
            for outs in self.take_pipeline_objects():  # those collected with it too
                destroy_objects(self, outs)
            self._pipelines.clear()
            self._recent_pipelines.clear()
            self._destroy_buffers()
            cache = self._pipeline_cache
            if cache is not None:
                try:
                    cache.close()
                except Exception as exc:  # noqa: BLE001 - never lose the device teardown
                    log.warning("pipeline cache could not be saved: %s", exc)
        super()._destroy_partial()

    def _abandon(self) -> None:
        """In a forked child: forget every Vulkan object (they are the parent's) without
        calling Vulkan, so that close, finalizers and exit never touch them."""
        for pipe in list(self._pipelines.values()):
            pipe.module = pipe.set_layout = pipe.layout = pipe.handle = None
        self._pipelines.clear()
        self._recent_pipelines.clear()
        submitter = getattr(self, "submitter", None)
        if submitter is not None:
            submitter.abandon_sequences()
        super()._abandon()

    def __del__(self) -> None:
        # Fallback only: close() explicitly or use ``with``.
        if not self._closed:
            try:
                self.close()
            except Exception:  # noqa: BLE001 - never raise from a finalizer
                pass


# Pipelines kept after nothing refers to them, the most recently asked for first: a
# Program made again with the same variant finds its pipeline (docs/programs.md).
KEPT_PIPELINES = 16

_default: Device | None = None
_default_lock = threading.Lock()


def default_device() -> Device:
    """The shared default device, created on first use and closed at interpreter exit."""
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            _default = Device()
        return _default


def check_selector(selector: object) -> str | int | None:
    """``selector`` as given if it can name a device (an index >= 0 or a name substring),
    else TypeError/ValueError naming the argument and what it accepts."""
    if selector is None or isinstance(selector, str):
        if isinstance(selector, str) and not selector.strip():
            raise ValueError("selector must be a device index or a name substring, got ''")
        return selector
    if isinstance(selector, bool) or not hasattr(selector, "__index__"):
        raise TypeError(
            "selector must be a device index (int) or a name substring (str), "
            f"got {type(selector).__name__} {shown(selector)}"
        )
    index = operator.index(selector)
    if index < 0:
        raise ValueError(f"selector: device index must be 0 or more, got {shown(index)}")
    return index


def check_flag(value: object, name: str) -> bool | None:
    """``value`` as a bool, or None (the default): True, False or a numpy bool. Anything
    else is a TypeError naming ``name`` (``validation="no"`` would be true)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    raise TypeError(
        f"{name} must be True, False or None, got {type(value).__name__} {shown(value)}"
    )


def resolve(device: Device | None) -> Device:
    """``device`` itself, or the default device."""
    if device is None:
        return default_device()
    if not isinstance(device, Device):
        raise TypeError(f"device must be a vkcore.Device or None, got {type(device).__name__}")
    device.check()
    return device


# Devices not closed yet: closed (and their pipeline caches saved) at interpreter exit,
# while the interpreter still works; a finalizer at shutdown could not open files.
_open_devices: weakref.WeakSet[Device] = weakref.WeakSet()


@atexit.register
def close_open_devices() -> None:
    """Close every device not closed yet (at interpreter exit, and where a run's cache
    folders are about to be removed)."""
    for dev in list(_open_devices):  # (none in a forked child: see _after_fork)
        try:
            dev.close()
        except Exception as exc:  # noqa: BLE001 - keep closing the others
            log.warning("closing %r at exit failed: %s", dev, exc)


def _after_fork_in_child() -> None:
    """Abandon the parent's devices: their Vulkan objects are not valid in this process."""
    global _default, _default_lock
    _default_lock = threading.Lock()  # a parent thread may have held it at the fork
    _default = None
    inherited = list(_open_devices)
    for dev in inherited:
        try:
            dev._abandon()
        except Exception:  # noqa: BLE001 - a half-built device: still never touch it
            dev._closed = dev._inherited = True
    _open_devices.clear()
    if inherited:
        _skip_parent_exit_handlers()


def _skip_parent_exit_handlers() -> None:
    """End this forked child with ``_exit(status)`` once Python has finalized, before the
    C exit handlers registered in the parent run.

    Drivers register such handlers to join their worker threads (Mesa's util_queue does,
    lavapipe included); in a child those threads exist only in the parent, and the join
    crashes (SIGSEGV) or hangs. Python's own shutdown (atexit functions, finalizers,
    flushing sys.stdout) has already happened by then, and glibc's ``on_exit`` handlers
    receive the exit status, so the status is kept. Elsewhere (no glibc) nothing changes.
    """
    try:
        import cffi

        ffi = cffi.FFI()
        ffi.cdef("int on_exit(void (*)(int, void *), void *); void _exit(int);")
        libc = ffi.dlopen(None)
        handler = ffi.cast("void (*)(int, void *)", ffi.addressof(libc, "_exit"))
        libc.on_exit(handler, ffi.NULL)  # _exit(status, arg): the extra argument is ignored
    except Exception:  # noqa: BLE001 - no cffi or no on_exit: keep the default exit
        log.debug("no on_exit(): a forked child keeps the C exit handlers it inherited")


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
