"""Per-device state kept on the device itself (:class:`PerDeviceMap`), so that it never
keeps a device alive."""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any, Generic, TypeVar, cast


class StateOwner:
    """What a :class:`PerDeviceMap` stores its entries on: ``_state``, one dict per device
    (:class:`vkcore.device.context.DeviceContext` is one)."""

    _state: dict[PerDeviceMap[Any], Any]


V = TypeVar("V")


class PerDeviceMap(Generic[V]):
    """``{Device: state}`` whose entries are stored on the devices themselves.

    Per-device state (buffer pools, placeholder buffers, memoized pipelines) refers back
    to its device. Held in a module-level table, it would keep every device alive; stored
    on the device (``Device._state``), it forms a cycle the garbage collector frees with
    the device, and ``Device.close`` drops it. The map itself keeps only weak references
    to the devices that have an entry (for iteration).
    """

    def __init__(self) -> None:
        self._devices: weakref.WeakSet[StateOwner] = weakref.WeakSet()

    @staticmethod
    def _table(device: Any) -> dict[PerDeviceMap[Any], Any]:
        if not isinstance(device, StateOwner):
            raise TypeError(f"per-device state is keyed by a Device, got {type(device).__name__}")
        return device._state

    def __getitem__(self, device: Any) -> V:
        table = self._table(device)
        if self not in table:
            raise KeyError(device)
        return cast(V, table[self])

    def __setitem__(self, device: Any, value: V) -> None:
        self._table(device)[self] = value
        self._devices.add(device)

    def __contains__(self, device: object) -> bool:
        return isinstance(device, StateOwner) and self in device._state

    def __iter__(self) -> Iterator[Any]:
        return iter([d for d in list(self._devices) if self in d._state])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def get(self, device: Any, default: V | None = None) -> V | None:
        if not isinstance(device, StateOwner):
            return default
        return cast("V | None", device._state.get(self, default))

    def setdefault(self, device: Any, default: V) -> V:
        value = self._table(device).setdefault(self, default)  # one step: thread-safe
        self._devices.add(device)
        return cast(V, value)

    def pop(self, device: Any, default: V | None = None) -> V | None:
        """Remove and return the device's entry (``default`` when it has none)."""
        if isinstance(device, StateOwner) and self in device._state:
            return cast(V, device._state.pop(self))
        return default

    def items(self) -> Iterator[tuple[Any, V]]:
        return ((d, cast(V, d._state[self])) for d in self)

    def __repr__(self) -> str:
        return f"<vkcore.base.per_device.PerDeviceMap of {len(self)} devices>"
