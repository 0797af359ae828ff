"""``vsr bench``: this machine's standard benchmark — every backend, graph plan and precision on one input.

Modules: ``cases`` (what is measured: :func:`bench_cases`, :data:`PRECISIONS`), ``inputs`` (the LR frames),
``measure`` (warm-up, then the cases interleaved frame by frame: :func:`run_bench`), ``upscale`` (whole
``vsr upscale`` processes as cases), ``results`` (settings and measurements), ``output`` (one
``vsr-run-report/2`` per case, the summary JSON and the terminal table).

It sits beside :mod:`vsr.pipeline`, not inside it: it times backends directly on in-memory windows, without the
decode / encode stages, so that the cases differ only in the backend.
"""

from vsr.bench.cases import PRECISIONS, BenchCase, bench_cases
from vsr.bench.inputs import BenchInput, bench_input
from vsr.bench.measure import run_bench
from vsr.bench.results import BenchResult, BenchSettings, CaseResult
from vsr.bench.output import SUMMARY_FORMAT, case_report, render_table, summary, write_bench

__all__ = ["PRECISIONS", "SUMMARY_FORMAT", "BenchCase", "BenchInput", "BenchResult", "BenchSettings",
           "CaseResult", "bench_cases", "bench_input", "case_report", "render_table", "run_bench", "summary",
           "write_bench"]
