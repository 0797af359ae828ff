"""The backends vsr can open: each one file that registers itself (:func:`register`) with its options dataclass, how
to open it, and whether it runs here (``available``: None, or the reason it does not).

:data:`MODULES` names those files; they are imported on the first look-up, not when this module is.  Their own
imports are light (the heavy libraries, torch, ONNX Runtime, numba, wait for ``open``), so the CLI may list the
registered names when it builds its parser.  :func:`vsr.backends.open_backend`, :func:`vsr.backends.backend_options`
and the CLI's ``--backend`` / ``--plan`` choices read the registry: a new backend is one new file here and one
line in :data:`MODULES`.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Any, Callable

from vsr.errors import BackendError

# Backend files, in the order the CLI lists them (and ``auto`` breaks ties).
MODULES = ("vsr.backends.torch_backend", "vsr.backends.ort", "vsr.backends.split", "vsr.backends.cuda")


@dataclass(frozen=True)
class BackendKind:
    """One backend as :func:`vsr.backends.open_backend` and the CLI see it.

    name: unique (``ort-split``); backend, plan: the ``--backend`` and ``--plan`` names that select it (plan None:
    it has no plan choice and ignores ``--plan``); options: its frozen options dataclass; open(model, config,
    options) -> Backend; make(threads=, precision=, int8_scales=, int8_calibration=) -> its options from the
    CLI's knobs; available() -> None, or why it cannot run here; check(options): before the model loads, raise
    the one-line error a bad choice gets (no GPU, say); precisions: those it runs; auto: its rank among the
    backends ``--backend auto`` may choose (lowest first, the first available wins; None: never auto); default:
    the one its ``--backend`` means when ``--plan`` is auto.
    """

    name: str
    backend: str
    plan: str | None
    options: type
    open: Callable[[Any, Any, Any], Any]
    make: Callable[..., Any]
    available: Callable[[], str | None] = lambda: None
    check: Callable[[Any], None] | None = None
    precisions: tuple[str, ...] = ("fp32",)
    auto: int | None = None
    default: bool = True


def needs(*modules: str) -> Callable[[], str | None]:
    """The ``available`` of a backend that runs where ``modules`` import: None, or which of them are missing."""
    def available() -> str | None:
        missing = [m for m in modules if importlib.util.find_spec(m) is None]
        return f"{' and '.join(missing)} not installed" if missing else None

    return available


_KINDS: dict[str, BackendKind] = {}
_LOADED: list[bool] = []


def register(kind: BackendKind) -> BackendKind:
    """Add ``kind`` (a backend file calls this once, at its end); a second kind of the same name or options
    type is a BackendError."""
    for other in _KINDS.values():
        if other.name != kind.name and other.options is kind.options:
            raise BackendError(f"backend {kind.name}: options {kind.options.__name__} already belong to {other.name}")
    _KINDS[kind.name] = kind
    return kind


def kinds() -> list[BackendKind]:
    """Every registered backend, in :data:`MODULES` order."""
    if not _LOADED:
        for module in MODULES:
            importlib.import_module(module)
        _LOADED.append(True)
    def rank(kind: BackendKind) -> int:  # the file (or package) its options live in
        where = kind.options.__module__
        return next((i for i, m in enumerate(MODULES) if where == m or where.startswith(m + ".")), len(MODULES))

    return sorted(_KINDS.values(), key=rank)


def kind_of(options) -> BackendKind:
    """The backend whose options ``options`` are; a BackendError naming the options types for anything else."""
    for kind in kinds():
        if type(options) is kind.options:
            return kind
    names = [k.options.__name__ for k in kinds()]
    raise BackendError(f"open_backend takes {', '.join(names[:-1])} or {names[-1]}, not {options!r}")


def backend_names() -> tuple[str, ...]:
    """The ``--backend`` choices: ``auto`` and each registered backend's name."""
    return ("auto",) + tuple(dict.fromkeys(k.backend for k in kinds()))


def plan_names() -> tuple[str, ...]:
    """The ``--plan`` choices: ``auto`` and the plans the registered backends offer."""
    return ("auto",) + tuple(dict.fromkeys(k.plan for k in kinds() if k.plan is not None))


def choose(backend: str, plan: str, precision: str) -> BackendKind:
    """The backend that ``--backend``, ``--plan`` and ``--precision`` select (see :class:`BackendKind`)."""
    if backend not in backend_names():
        raise BackendError(f"unknown backend {backend!r} (choose from {', '.join(backend_names())})")
    if plan not in plan_names():
        raise BackendError(f"unknown plan {plan!r} (choose from {', '.join(plan_names())})")
    if backend == "auto":
        found = [k for k in kinds() if k.auto is not None and plan in ("auto", k.plan)]
    else:
        found = [k for k in kinds() if k.backend == backend
                 and (k.default if plan == "auto" else k.plan in (plan, None))]
    runs = [k for k in found if precision in k.precisions]
    if not runs:
        where = [f"the {k.plan} plan" if k.plan else f"--backend {k.backend}" for k in kinds()
                 if precision in k.precisions]
        raise BackendError(f"precision {precision} runs on {' or '.join(where) or 'no backend'} only (not "
                           f"--backend {backend} --plan {plan})")
    if backend != "auto":
        return runs[0]
    ranked = sorted(runs, key=lambda k: k.auto)
    return next((k for k in ranked if k.available() is None), ranked[-1])
