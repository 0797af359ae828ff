"""What a bridge kernel is given and what it must do (see :mod:`vsr.kernels.registry`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

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
