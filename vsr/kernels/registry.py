"""Bridge kernels: vsr's own implementations of the ops a subgraph plan cuts at.

A kernel is created once per plan step for concrete shapes (``factory(node, input_shapes, constants)``), declares
the scratch memory it needs (``workspace_nbytes``) and then runs many times into preallocated outputs::

    kernel.run(inputs: list[ndarray | None], outputs: list[ndarray], workspace: ndarray (uint8)) -> None

Inputs are in the ONNX node's input order; constant inputs (weights) were handed to the factory and arrive as
``None``.  A :class:`KernelRegistry` maps ``(op_type, device)`` to a factory; :data:`KERNELS`, the one the plan
executor uses by default, starts with the CPU kernels of :mod:`vsr.kernels.builtin`, and :func:`register_kernel`
adds to it.
"""

from __future__ import annotations

from typing import Iterable

from vsr.errors import BackendError
from vsr.kernels.builtin import BUILTIN_KERNELS
from vsr.kernels.node import FUSABLE_ACTIVATIONS, BridgeKernel, BridgeNode, KernelFactory


class KernelRegistry:
    """Kernel factories by ``(op_type, device)``."""

    def __init__(self, factories: Iterable[tuple[tuple[str, str], KernelFactory]] = ()):
        self._factories: dict[tuple[str, str], KernelFactory] = dict(factories)

    def register(self, op_type: str, device: str = "cpu"):
        """Decorator: register ``factory`` as the kernel of ``op_type`` on ``device`` (replacing any)."""
        def deco(factory: KernelFactory) -> KernelFactory:
            self._factories[(op_type, device)] = factory
            return factory
        return deco

    def replaced(self, op_type: str, factory: KernelFactory, device: str = "cpu") -> "KernelRegistry":
        """A copy of this registry with ``factory`` as the kernel of ``op_type`` on ``device``."""
        return KernelRegistry({**self._factories, (op_type, device): factory}.items())

    def unregister(self, op_type: str, device: str = "cpu") -> None:
        self._factories.pop((op_type, device), None)

    def factory(self, op_type: str, device: str = "cpu") -> KernelFactory:
        try:
            return self._factories[(op_type, device)]
        except KeyError:
            known = ", ".join(f"{o}@{d}" for o, d in sorted(self._factories)) or "none"
            raise BackendError(f"no bridge kernel for {op_type} on {device} (registered: {known})") from None

    def ops(self, device: str = "cpu") -> list[str]:
        return sorted(o for o, d in self._factories if d == device)


KERNELS = KernelRegistry(BUILTIN_KERNELS.items())


def register_kernel(op_type: str, device: str = "cpu"):
    """Decorator: register a kernel factory in :data:`KERNELS`."""
    return KERNELS.register(op_type, device)


def kernel_factory(op_type: str, device: str = "cpu") -> KernelFactory:
    return KERNELS.factory(op_type, device)


def registered_ops(device: str = "cpu") -> list[str]:
    return KERNELS.ops(device)


__all__ = ["FUSABLE_ACTIVATIONS", "KERNELS", "BridgeKernel", "BridgeNode", "KernelFactory", "KernelRegistry",
           "kernel_factory", "register_kernel", "registered_ops"]
