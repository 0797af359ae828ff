"""What ``vsr bench`` measures: one :class:`BenchCase` per backend, graph plan and precision.

:func:`bench_cases` is the only list of cases.  A new precision is one more entry in :data:`PRECISIONS`: every
ONNX Runtime plan is then measured at it too, with ``precision=...`` passed to its options
(:class:`~vsr.backends.OrtOptions`, :class:`~vsr.backends.SplitOptions`).
"""

from __future__ import annotations

from dataclasses import dataclass

from vsr.backends import BackendOptions, OrtOptions, SplitOptions, TorchOptions
from vsr.errors import InputError

# Precisions of the ONNX Runtime plans; "fp32" is the options' default, any other is passed as ``precision``.
PRECISIONS: tuple[str, ...] = ("fp32", "int8")

# The case every ratio is taken against by default: the whole graph in one ONNX Runtime session, fp32.
DEFAULT_BASELINE = "ort-whole-fp32"


@dataclass(frozen=True)
class BenchCase:
    """One measured configuration: ``backend`` (torch | ort), graph ``plan`` (eager | whole | split), ``precision``
    and the options :func:`vsr.backends.open_backend` takes for it."""

    backend: str
    plan: str
    precision: str
    options: BackendOptions

    @property
    def name(self) -> str:
        """``ort-split-fp32``: also the name of the case's report file."""
        return f"{self.backend}-{self.plan}-{self.precision}"


def bench_cases(threads: int | None = None, precisions: tuple[str, ...] = PRECISIONS) -> list[BenchCase]:
    """Every case this vsr can run: PyTorch eager (fp32, the reference), then for each precision the ONNX
    Runtime whole graph (fp32 only) and split plan (int8: run-time scales, the default).  ``threads``: inference
    threads of every case (None: all cores)."""
    cases = [BenchCase("torch", "eager", "fp32", TorchOptions(threads=threads))]
    for p in precisions:
        if p == "fp32":
            cases.append(BenchCase("ort", "whole", p, OrtOptions(threads=threads)))
        cases.append(BenchCase("ort", "split", p, SplitOptions(threads=threads, precision=p)))
    return cases


def select_cases(cases: list[BenchCase], names: tuple[str, ...] | list[str] | None) -> list[BenchCase]:
    """The cases named in ``names`` (all when None), in ``cases``' order; an unknown name is an InputError."""
    if names is None:
        return list(cases)
    known = {c.name for c in cases}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InputError(f"unknown bench case {unknown[0]!r} (choose from {', '.join(sorted(known))})")
    return [c for c in cases if c.name in names]
