"""Which int8 instructions this CPU has, and so how many bits an int8 plan's weights may use.

ONNX Runtime's u8 x s8 convolutions (QLinearConv) run on

``amx``          AMX tiles (``amx_int8``): int32 sums, no overflow;
``avx512-vnni``  ``vpdpbusd`` on 512-bit vectors (``avx512_vnni``): u8 x s8 products summed straight into int32;
``avx-vnni``     the same on 256-bit vectors (``avx_vnni``);
``avx2``         ``vpmaddubsw``, which adds *pairs* of u8 x s8 products in int16 first: it saturates once
                 ``2 * 255 * |w| > 32767``, so weights keep to 7 bits (``|w| <= 63``) there.

So weights are 8-bit (``|w| <= 127``: half the rounding error) where the CPU has VNNI or AMX, and 7-bit elsewhere.
The ISA is read from ``/proc/cpuinfo`` (else from LLVM's view of the host, through numba's llvmlite) and can be
forced with ``VSR_INT8_ISA`` (to measure one against the other on a VNNI machine, or to test the 8-bit path on
any).  It is part of an int8 plan's key (:class:`vsr.quant.config.QuantConfig`) and of the run's report.
"""

from __future__ import annotations

import os
from functools import lru_cache

from vsr.errors import ConfigError

ISAS = ("amx", "avx512-vnni", "avx-vnni", "avx2")
# the flags (as /proc/cpuinfo and LLVM name them) that make each ISA, best first
_FLAGS = (("amx", ("amx_int8", "amx-int8")), ("avx512-vnni", ("avx512_vnni", "avx512vnni")),
          ("avx-vnni", ("avx_vnni", "avxvnni")))
ENV = "VSR_INT8_ISA"


def weight_qmax(isa: str) -> int:
    """The largest |weight code| an int8 plan for ``isa`` uses: 127 (8 bits) with VNNI or AMX, 63 (7) without."""
    if isa not in ISAS:
        raise ConfigError(f"int8 ISA {isa!r}: choose from {', '.join(ISAS)}")
    return 63 if isa == "avx2" else 127


def isa_of(flags: set[str]) -> str:
    """The best int8 ISA among CPU ``flags`` (``avx2`` when none of the others: the 7-bit path, always safe)."""
    for isa, names in _FLAGS:
        if any(n in flags for n in names):
            return isa
    return "avx2"


def int8_isa() -> str:
    """This machine's int8 ISA, or ``$VSR_INT8_ISA`` where set (a ConfigError for a name not in :data:`ISAS`)."""
    forced = os.environ.get(ENV)
    if forced:
        weight_qmax(forced)
        return forced
    return isa_of(cpu_flags())


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags: ``/proc/cpuinfo``'s, else LLVM's (``+``-enabled host features)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    try:
        import llvmlite.binding as llvm

        return frozenset(k for k, on in llvm.get_host_cpu_features().items() if on)
    except Exception:  # noqa: BLE001 - no view of the CPU: the safe 7-bit path
        return frozenset()
