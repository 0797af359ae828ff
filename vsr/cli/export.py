"""`vsr export` (not implemented yet)."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("export", help="(not implemented yet)")
    p.set_defaults(func=run)


def run(args) -> int:
    from vsr.errors import VsrError

    raise VsrError("'vsr export' is not implemented yet")
