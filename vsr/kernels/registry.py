"""Bridge kernels: vsr's own implementations of the ops a subgraph plan cuts at.

A kernel is created once per plan step for concrete shapes (``factory(node, input_shapes, constants)``), declares
the scratch memory it needs (``workspace_nbytes``) and then runs many times into preallocated outputs::

    kernel.run(inputs: list[ndarray | None], outputs: list[ndarray], workspace: ndarray (uint8)) -> None

Inputs are in the ONNX node's input order; constant inputs (weights) were handed to the factory and arrive as
``None``.  The registry is keyed by ``(op_type, device)``; :func:`register_kernel` adds one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

from vsr.errors import BackendError

# Activations a kernel may apply to its output on the way out (the partitioner fuses them when the kernel's
# factory says it can, see BridgeNode.epilogue).
FUSABLE_ACTIVATIONS = ("LeakyRelu", "Relu")


@dataclass(frozen=True)
class BridgeNode:
    """What a kernel factory needs to know about one node: op type, ONNX attributes, fused activation."""

    op_type: str
    attrs: dict = field(default_factory=dict)
    epilogue: tuple[str, float] | None = None  # ("LeakyRelu", alpha) / ("Relu", 0.0)

    @property
    def negative_slope(self) -> float | None:
        """Slope of the fused activation for x < 0 (None: no activation)."""
        return None if self.epilogue is None else float(self.epilogue[1])


class BridgeKernel(Protocol):
    def workspace_nbytes(self) -> int: ...

    def run(self, inputs: list[np.ndarray | None], outputs: list[np.ndarray], workspace: np.ndarray) -> None: ...


KernelFactory = Callable[[BridgeNode, list[tuple[int, ...]], dict[int, np.ndarray]], BridgeKernel]

_REGISTRY: dict[tuple[str, str], KernelFactory] = {}


def register_kernel(op_type: str, device: str = "cpu"):
    """Decorator: register ``factory`` as the kernel of ``op_type`` on ``device``."""
    def deco(factory: KernelFactory) -> KernelFactory:
        _REGISTRY[(op_type, device)] = factory
        return factory
    return deco


def kernel_factory(op_type: str, device: str = "cpu") -> KernelFactory:
    _load_builtin()
    try:
        return _REGISTRY[(op_type, device)]
    except KeyError:
        known = ", ".join(f"{o}@{d}" for o, d in sorted(_REGISTRY)) or "none"
        raise BackendError(f"no bridge kernel for {op_type} on {device} (registered: {known})") from None


def registered_ops(device: str = "cpu") -> list[str]:
    _load_builtin()
    return sorted(o for o, d in _REGISTRY if d == device)


def _load_builtin() -> None:
    from vsr.kernels import builtin  # noqa: F401  (registers the CPU kernels)
