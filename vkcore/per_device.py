"""Per-device state kept on the device itself (:func:`per_device_map`), so that it never
keeps a device alive."""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any


class StateOwner:
    """What a :class:`PerDeviceMap` stores its entries on: ``_state``, one dict per device
    (:class:`vkcore.context.DeviceContext` is one)."""

    _state: dict[PerDeviceMap, Any]


_MISSING = object()


class PerDeviceMap(weakref.WeakKeyDictionary[Any, Any]):
    """A ``{Device: state}`` mapping whose entries are stored on the devices themselves.

    Per-device state (buffer pools, placeholder buffers, memoized pipelines) refers back
    to its device. Held in a module-level table, it would keep every device alive; stored
    on the device (``Device._state``), it forms a cycle the garbage collector frees with
    the device, and ``Device.close`` drops it. A WeakKeyDictionary subclass only so that
    callers' annotations hold: none of its own storage is used.
    """

    def __init__(self) -> None:  # noqa: D107 - no WeakKeyDictionary storage on purpose
        self._devices: weakref.WeakSet[StateOwner] = weakref.WeakSet()

    @staticmethod
    def _table(device: Any) -> dict[PerDeviceMap, Any]:
        if not isinstance(device, StateOwner):
            raise TypeError(f"per-device state is keyed by a Device, got {type(device).__name__}")
        return device._state

    def __hash__(self) -> int:  # tables on devices are keyed by the map's identity
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other

    def __getitem__(self, device: Any) -> Any:
        value = self._table(device).get(self, _MISSING)
        if value is _MISSING:
            raise KeyError(device)
        return value

    def __setitem__(self, device: Any, value: Any) -> None:
        self._table(device)[self] = value
        self._devices.add(device)

    def __delitem__(self, device: Any) -> None:
        del self._table(device)[self]

    def __contains__(self, device: object) -> bool:
        return isinstance(device, StateOwner) and self in device._state

    def __iter__(self) -> Iterator[Any]:
        return iter([d for d in list(self._devices) if self in d._state])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def get(self, device: Any, default: Any = None) -> Any:
        return self._table(device).get(self, default) if isinstance(device, StateOwner) else default

    def setdefault(self, device: Any, default: Any = None) -> Any:
        value = self._table(device).setdefault(self, default)  # one step: thread-safe
        self._devices.add(device)
        return value

    def pop(self, device: Any, *default: Any) -> Any:
        if isinstance(device, StateOwner) and self in device._state:
            return device._state.pop(self)
        if default:
            return default[0]
        raise KeyError(device)

    def keys(self) -> Iterator[Any]:  # type: ignore[override]
        return iter(self)

    def values(self) -> Iterator[Any]:  # type: ignore[override]
        return (d._state[self] for d in self)

    def items(self) -> Iterator[tuple[Any, Any]]:  # type: ignore[override]
        return ((d, d._state[self]) for d in self)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for device, value in dict(*args, **kwargs).items():
            self[device] = value

    def popitem(self) -> tuple[Any, Any]:
        for device in self:
            return device, device._state.pop(self)
        raise KeyError("popitem(): no device has state in this map")

    def clear(self) -> None:
        for device in self:
            device._state.pop(self, None)

    def copy(self) -> dict[Any, Any]:  # type: ignore[override]
        return dict(self.items())

    def keyrefs(self) -> list[weakref.ref[Any]]:
        return [weakref.ref(d) for d in self]

    def __repr__(self) -> str:
        return f"<vkcore.per_device.PerDeviceMap of {len(self)} devices>"


def per_device_map() -> weakref.WeakKeyDictionary[Any, Any]:
    """A ``{Device: state}`` map (:class:`PerDeviceMap`): the state is stored on the device,
    dropped when it closes and collected with it; it never keeps a device alive."""
    return PerDeviceMap()
