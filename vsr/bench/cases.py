"""What ``vsr bench`` measures: one :class:`BenchCase` per backend, graph plan, precision and way of running.

:func:`bench_cases` is the only list of cases.  A new precision is one more entry in :data:`PRECISIONS`: every
ONNX Runtime plan is then measured at it too, with ``precision=...`` passed to its options
(:class:`~vsr.backends.OrtOptions`, :class:`~vsr.backends.SplitOptions`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from vsr.backends import BackendOptions, OrtOptions, SplitOptions, TorchOptions
from vsr.errors import InputError

# Precisions of the ONNX Runtime plans; "fp32" is the options' default, any other is passed as ``precision``.
PRECISIONS: tuple[str, ...] = ("fp32", "int8")

# The case every ratio is taken against by default: the whole graph in one ONNX Runtime session, fp32.
DEFAULT_BASELINE = "ort-whole-fp32"


@dataclass(frozen=True)
class BenchCase:
    """One measured configuration: ``backend`` (torch | ort), graph ``plan`` (eager | whole | split), ``precision``
    and the options :func:`vsr.backends.open_backend` takes for it.

    ``kind``: ``frames`` (the backend timed per frame in this process, warm-up apart) or ``upscale`` (a whole
    ``vsr upscale`` process on the bench's frames: its wall time, the run after warm-up and the warm-up apart).
    A backend that can keep each frame's features is measured with them kept (its windows in order, one new
    frame each) and, as ``...-nostream``, with every window computing its frames' features.
    """

    backend: str
    plan: str
    precision: str
    options: BackendOptions
    kind: str = "frames"

    @property
    def streams(self) -> bool:
        return bool(getattr(self.options, "stream_features", False))

    @property
    def name(self) -> str:
        """``ort-split-fp32`` (``-nostream``; ``upscale-`` first): also the name of the case's report file."""
        per_window = hasattr(self.options, "stream_features") and not self.streams
        return (("upscale-" if self.kind == "upscale" else "") + f"{self.backend}-{self.plan}-{self.precision}"
                + ("-nostream" if per_window else ""))

    def cli_args(self) -> list[str]:
        """The ``vsr upscale`` options that select this case's backend."""
        args = ["--backend", self.backend] + (["--plan", self.plan] if self.backend == "ort" else [])
        args += ["--precision", self.precision]
        if getattr(self.options, "threads", None):
            args += ["--threads", str(self.options.threads)]
        return args + (["--per-window-features"] if hasattr(self.options, "stream_features") and not self.streams
                       else [])


def bench_cases(threads: int | None = None, precisions: tuple[str, ...] = PRECISIONS) -> list[BenchCase]:
    """Every case this vsr can run: PyTorch eager (fp32, the reference), then for each precision the ONNX
    Runtime whole graph (fp32 only) and split plan (int8: run-time scales, the default); each backend that keeps
    each frame's features also without (``-nostream``); then all of them again as whole ``vsr upscale`` runs
    (``upscale-``, run only when named).  ``threads``: inference threads of every case (None: all cores)."""
    cases = [BenchCase("torch", "eager", "fp32", TorchOptions(threads=threads)),
             BenchCase("torch", "eager", "fp32", TorchOptions(threads=threads, stream_features=False))]
    for p in precisions:
        if p == "fp32":
            cases.append(BenchCase("ort", "whole", p, OrtOptions(threads=threads)))
        cases += [BenchCase("ort", "split", p, SplitOptions(threads=threads, precision=p, stream_features=s))
                  for s in (True, False)]
    return cases + [replace(c, kind="upscale") for c in cases]


def select_cases(cases: list[BenchCase], names: tuple[str, ...] | list[str] | None) -> list[BenchCase]:
    """The cases named in ``names`` (when None: every ``frames`` case), in ``cases``' order; an unknown name is
    an InputError."""
    if names is None:
        return [c for c in cases if c.kind == "frames"]
    known = {c.name for c in cases}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InputError(f"unknown bench case {unknown[0]!r} (choose from {', '.join(sorted(known))})")
    return [c for c in cases if c.name in names]
