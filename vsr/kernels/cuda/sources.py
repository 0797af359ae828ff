"""vsr's CUDA C sources (``*.cu`` beside this module) and the signature of every kernel they define.

Launchers pass arguments as ``cuLaunchKernel`` does, by position, so each kernel's parameter kinds are declared
here once: ``"ptr"`` (a device pointer), ``"i32"`` (C ``int``), ``"f32"`` (C ``float``).  The PTX test checks
them against what ``nvcc`` compiles.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent
# Included by every .cu; the CPU harness adds cpu_shim.h in front.
HEADERS = ("vsr_cuda.h",)
SHIM_HEADER = "cpu_shim.h"


@dataclass(frozen=True)
class KernelSpec:
    """One ``extern "C" __global__`` function: its name, its source file, the kinds of its parameters."""

    name: str
    source: str
    params: tuple[str, ...]


def _specs() -> dict[str, KernelSpec]:
    im2col = ("ptr",) * 4 + ("i32",) * 17  # ... offset_group, mask_logits, q0, nq
    im2col_nhwc = ("ptr",) * 4 + ("i32",) * 19  # and the offset's and the mask's pixel strides
    gemm = ("ptr",) * 4 + ("i32",) * 6 + ("f32",)
    shuffle = ("ptr",) * 2 + ("i32",) * 5 + ("f32",)
    shuffle_nhwc = ("ptr",) * 2 + ("i32",) * 6 + ("f32",)  # and subpixel_major
    specs = {}
    for suffix in ("f32", "f16"):
        for base, source, params in (("dcn_im2col", "deform_conv.cu", im2col),
                                     ("dcn_gemm", "deform_conv.cu", gemm),
                                     ("dcn_im2col_nhwc", "deform_conv.cu", im2col_nhwc),
                                     ("dcn_gemm_nhwc", "deform_conv.cu", gemm),
                                     ("pixel_shuffle_lrelu", "pixel_shuffle.cu", shuffle),
                                     ("pixel_shuffle_lrelu_nhwc", "pixel_shuffle.cu", shuffle_nhwc)):
            name = f"{base}_{suffix}"
            specs[name] = KernelSpec(name, source, params)
    return specs


KERNELS: dict[str, KernelSpec] = _specs()


def source_files() -> list[str]:
    """The ``.cu`` files, in a fixed order."""
    return sorted({spec.source for spec in KERNELS.values()})


def source_text(name: str) -> str:
    return (SOURCE_DIR / name).read_text()


def sources_digest(*extra: str) -> str:
    """sha256 over every source and header (and ``extra`` strings such as compiler flags): a build cache key."""
    h = hashlib.sha256()
    for name in (*source_files(), *HEADERS, SHIM_HEADER):
        h.update(name.encode() + b"\0" + (SOURCE_DIR / name).read_bytes() + b"\0")
    for item in extra:
        h.update(item.encode() + b"\0")
    return h.hexdigest()
