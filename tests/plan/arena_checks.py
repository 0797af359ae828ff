"""Assertions about arena plans shared by the plan tests."""

from vsr.plan.arena import ArenaPlan


def check_no_overlap(plan: ArenaPlan) -> None:
    """Raise AssertionError if two buffers alive at the same time share a byte."""
    bufs = list(plan.buffers.values())
    for i, a in enumerate(bufs):
        for b in bufs[i + 1:]:
            if a.overlaps(b) and a.nbytes and b.nbytes:
                assert a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset, (a, b)
        assert a.offset + a.nbytes <= plan.arena_nbytes
