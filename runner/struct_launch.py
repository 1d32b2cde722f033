"""Kernel launches with little host work: the parameters live in one ctypes struct per kernel, whose
field addresses form the `kernelParams` array cuLaunchKernel reads, built once. A launch assigns the
fields and calls the driver; the driver copies the values at launch, so the struct is reused.

A decode step is a few hundred microseconds of GPU time, so tens of microseconds of Python per launch
(numpy scalars per parameter, cuda.core's argument packing) show up in its latency once the GPU
outpaces the host.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from typing import Any

TENSOR_MAP_BYTES = 128  # a CUtensorMap, passed by value (`const __grid_constant__ cute::TmaDescriptor`)
_CTYPES: dict[str, Any] = {
    "uintp": ctypes.c_uint64,
    "int32": ctypes.c_int32,
    "int64": ctypes.c_int64,
    "float32": ctypes.c_float,
    "tensormap": ctypes.c_ubyte * TENSOR_MAP_BYTES,
}


class LaunchFailed(RuntimeError):
    """cuLaunchKernel returned an error."""


class StructLauncher:
    """Launches `kernel` (a cuda.core Kernel or a driver handle) with `params` ((name, C type, numpy type
    name), the kernel ABI's tuples) in order."""

    def __init__(self, kernel: Any, params: Sequence[tuple[str, str, str]]) -> None:
        fields = [(name, _CTYPES[np_type]) for name, _c, np_type in params]
        cls = type("KernelArgs", (ctypes.Structure,), {"_fields_": fields})
        self.args = cls()
        base = ctypes.addressof(self.args)
        self.names = tuple(name for name, _ in fields)
        self._pointers = (ctypes.c_void_p * len(fields))(*(base + getattr(cls, n).offset for n in self.names))
        self._handle = getattr(kernel, "handle", kernel)
        from cuda.bindings import driver

        self._driver = driver

    def set(self, values: Mapping[str, Any]) -> None:
        """Assign fields by name; the others keep their last values."""
        args = self.args
        for name, value in values.items():
            setattr(args, name, value)

    def set_tensor_map(self, name: str, tensor_map: Any) -> None:
        """Copy a cuda.bindings `CUtensorMap` into the field `name` (a "tensormap" parameter)."""
        offset = getattr(type(self.args), name).offset
        ctypes.memmove(ctypes.addressof(self.args) + offset, int(tensor_map.getPtr()), TENSOR_MAP_BYTES)

    def fire(self, grid: tuple[int, int, int], block: int, shared_bytes: int, stream_handle: int) -> None:
        """Launch with the fields as they are now."""
        driver = self._driver
        (err,) = driver.cuLaunchKernel(
            self._handle, grid[0], grid[1], grid[2], block, 1, 1, shared_bytes,
            driver.CUstream(stream_handle), ctypes.addressof(self._pointers), 0,
        )  # fmt: skip
        if err != driver.CUresult.CUDA_SUCCESS:
            raise LaunchFailed(f"cuLaunchKernel failed: {err.name}")

    def launch(
        self,
        grid: tuple[int, int, int],
        block: int,
        shared_bytes: int,
        stream_handle: int,
        values: Sequence[Any],
    ) -> None:
        """`values` in parameter order (ints, floats; pointers as ints)."""
        args = self.args
        for name, value in zip(self.names, values, strict=True):
            setattr(args, name, value)
        self.fire(grid, block, shared_bytes, stream_handle)
