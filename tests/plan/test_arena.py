"""Static memory plan: buffers alive at the same time never share bytes; others do; peak <= naive."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.plan.arena_checks import check_no_overlap
from vsr.plan.arena import ALIGN, Buffer, plan_arena


def test_buffers_with_disjoint_lifetimes_share_memory():
    plan = plan_arena([Buffer("a", 1000, 0, 1), Buffer("b", 1000, 2, 3), Buffer("c", 500, 1, 2)])
    check_no_overlap(plan)
    assert plan.buffers["a"].offset == plan.buffers["b"].offset == 0  # a and b never live together
    assert plan.arena_nbytes == 1024 + 512
    assert plan.naive_nbytes == 2 * 1024 + 512


def test_a_step_never_writes_over_its_own_inputs():
    # closed intervals: b is written by step 1, the last reader of a
    plan = plan_arena([Buffer("a", 64, 0, 1), Buffer("b", 64, 1, 2)])
    assert plan.buffers["a"].offset != plan.buffers["b"].offset


@given(st.lists(st.tuples(st.integers(1, 5000), st.integers(-1, 8), st.integers(0, 9)), min_size=1, max_size=30))
def test_random_lifetimes(specs):
    bufs = [Buffer(f"t{i}", n, min(a, b), max(a, b)) for i, (n, a, b) in enumerate(specs)]
    plan = plan_arena(bufs)
    check_no_overlap(plan)
    assert all(b.offset % ALIGN == 0 for b in plan.buffers.values())
    # never worse than one buffer each, never better than the busiest step needs
    assert plan.arena_nbytes <= plan.naive_nbytes
    busiest = max(sum(-(-b.nbytes // ALIGN) * ALIGN for b in bufs if b.first <= s <= b.last)
                  for s in range(-1, 10))
    assert plan.arena_nbytes >= busiest


def test_every_offset_is_256_byte_aligned_for_tensorrt():
    """TensorRT's set_tensor_address refuses addresses that are not 256-byte aligned; the arena's buffers are
    bound to engines as they are."""
    assert ALIGN == 256
    plan = plan_arena([Buffer("a", 100, 0, 2), Buffer("b", 300, 1, 2), Buffer("c", 4, 2, 3), Buffer("d", 70, 0, 3)])
    check_no_overlap(plan)
    assert all(b.offset % 256 == 0 for b in plan.buffers.values())
    assert plan.arena_nbytes == 256 + 512 + 256 + 256  # b (300 bytes) takes two blocks, the others one each
