"""The memory plan is a promise: a run that cannot fit ``--memory-budget`` stops before its first frame with
one line naming a budget (or a smaller setting) that fits, and that budget then really plans."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.pipeline.test_cli_upscale import TINY, cli, errors
import vsr.files
import vsr.machine
from vsr.errors import InputError, MemoryBudgetError
from vsr.pipeline.memory import (AUTO_CAP_MB, AUTO_FLOOR_MB, FALLBACK_BUDGET_MB, MARGIN, total_memory_mb,
                                 machine_budget, plan_memory)


def plan(**kw):
    args = dict(budget_mb=3072, height=240, width=256, scale=4, num_frame=5, batch=1, queue=2, overlap=16,
                encoder_mb=155.0)
    args.update(kw)
    return plan_memory(**args)


def named_budget(err: MemoryBudgetError) -> int:
    m = re.search(r"give --memory-budget (\d+)", str(err))
    assert m, str(err)
    return int(m.group(1))


@settings(max_examples=150, deadline=None)
@given(h=st.integers(16, 2200), w=st.integers(16, 4000), batch=st.integers(1, 64),
       budget=st.integers(256, 8192), tile=st.sampled_from([None, 0, 64, 96, 128, 200, 256, 512]),
       encoder=st.floats(0, 2000))
def test_a_plan_fits_its_budget_or_names_one_that_does(h, w, batch, budget, tile, encoder):
    kw = dict(height=h, width=w, batch=batch, tile=tile, encoder_mb=encoder)
    try:
        p = plan(budget_mb=budget, **kw)
    except MemoryBudgetError as e:
        assert isinstance(e, InputError) and "\n" not in str(e)
        need = named_budget(e)
        assert need > budget
        p = plan(budget_mb=need, **kw)  # the budget it names really plans
        if "--batch 1 (needs --memory-budget" in str(e):
            one = int(re.search(r"--batch 1 \(needs --memory-budget (\d+)", str(e)).group(1))
            assert plan(budget_mb=one, **{**kw, "batch": 1}).fits
    assert p.fits and p.total_mb <= p.budget_mb * (1 - MARGIN) + 1e-6
    if tile == 0:
        assert p.tile is None


def test_an_explicit_tile_is_checked_not_trusted():
    assert plan(height=1080, width=1920, tile=128, encoder_mb=1100).fits
    with pytest.raises(MemoryBudgetError, match=r"--tile 512 at --batch 1 needs about \d+ MB"):
        plan(height=1080, width=1920, tile=512, encoder_mb=1100)
    with pytest.raises(MemoryBudgetError, match=r"--tile 0 \(whole frames\)"):
        plan(height=1080, width=1920, tile=0, encoder_mb=1100)


def test_whole_small_frames_fit_the_default_budget():
    # measured (docs/benchmarks.md): 256x240 whole frames peak at 1767 MiB with ORT's memory pattern off
    p = plan()
    assert p.tile is None and 1767 < p.total_mb <= 3072 * (1 - MARGIN)
    assert plan(budget_mb=2048).tile is not None  # the same frames tile under a smaller budget


def test_a_huge_batch_is_refused_and_batch_1_is_offered():
    with pytest.raises(MemoryBudgetError, match=r"at --batch 100000 .* or --batch 1 \(needs --memory-budget"):
        plan(batch=100000)


def test_a_huge_source_names_the_frames_in_flight():
    with pytest.raises(MemoryBudgetError, match="smaller source and output") as e:
        plan(height=16000, width=16000)
    assert named_budget(e.value) > 60000


def test_cli_refuses_a_batch_that_cannot_fit_before_any_output(make_clip, tmp_path, capsys):
    src = make_clip("in.mp4", width=32, height=24, frames=3)
    out = tmp_path / "out.mp4"
    rc, err = cli(capsys, src, out, *TINY, "--batch", 100000)
    assert rc == 2
    lines = errors(err)
    assert len(lines) == 1 and "--memory-budget" in lines[0] and "--batch 1" in lines[0], err
    assert "Traceback" not in err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["in.mp4"]


def test_cli_checks_an_explicit_tile(make_clip, tmp_path, capsys):
    src = make_clip("in.mp4", width=32, height=24, frames=3)
    out = tmp_path / "frames"
    rc, err = cli(capsys, src, out, *TINY, "--tile", 48, "--memory-budget", 256)
    assert rc == 2 and len(errors(err)) == 1 and "--tile 48" in errors(err)[0], err
    assert not out.exists()


def test_a_config_with_more_model_memory_plans_smaller_tiles():
    """EDVR-M's measured model memory (configs/edvr-m.toml) is larger than the EDVR-S default figures: the
    same source and budget get a smaller tile and a larger planned model share, still within the budget."""
    from vsr.model.config import load_config
    from vsr.pipeline.memory import ModelMemory

    m = ModelMemory.of(load_config("edvr-m"))
    assert m.fixed_mb > ModelMemory().fixed_mb  # measured: 392 MiB at 64x64 LR against EDVR-S's 180
    assert ModelMemory.of(load_config("edvr-s")) == ModelMemory()
    small, big = plan(height=1080, width=1920, encoder_mb=600), plan(height=1080, width=1920, encoder_mb=600, model=m)
    assert small.fits and big.fits and big.total_mb <= big.budget_mb * (1 - MARGIN) + 1e-6
    assert big.tile[0] * big.tile[1] < small.tile[0] * small.tile[1]
    # EDVR-M's measured points (scripts/bench_mem_pattern.py --memory --config edvr-m) lie under its estimate
    for pixels, measured_mib in ((64 * 64, 391.8), (128 * 128, 723.8), (240 * 256, 1619.1)):
        assert m.fixed_mb + m.bytes_per_pixel * pixels / 2**20 >= measured_mib


def test_edvr_s_wide_plans_with_its_own_measured_memory():
    """EDVR-S-wide (TSA, 5 + 10 blocks) needs about twice EDVR-S's memory at small tiles; its TOML carries its own
    figures, and every point measured by ``scripts/bench_mem_pattern.py --memory --config edvr-s-wide --batches 1
    2`` (docs/benchmarks.md, "Memory") lies under them, where EDVR-S's defaults would fall short."""
    from vsr.model.config import load_config
    from vsr.pipeline.memory import ModelMemory

    m, s = ModelMemory.of(load_config("edvr-s-wide")), ModelMemory()
    measured = ((64 * 64, 360.5), (128 * 128, 678.6), (2 * 128 * 128, 935.6), (240 * 256, 1607.5),
                (2 * 240 * 256, 2790.8))
    assert all(m.fixed_mb + m.bytes_per_pixel * px / 2**20 >= mib for px, mib in measured)
    assert any(s.fixed_mb + s.bytes_per_pixel * px / 2**20 < mib for px, mib in measured)


def test_the_runner_plans_with_its_backends_config():
    """FrameQueueRunner.plan_tile takes the model memory from the backend's config (stand-in backend and sink:
    only the attributes plan_tile reads)."""
    import numpy as np

    from vsr.model.config import load_config
    from vsr.pipeline.runner import FrameQueueRunner, RunnerSettings

    class Backend:
        padding, scale = "replicate", 4

        def __init__(self, name):
            self.config = load_config(name)
            self.num_frame = self.config.num_frame

    class Sink:
        pix_fmt = "yuv420p"

        def memory_estimate_mb(self):
            return 600.0

        def plane_dtype(self):
            return np.uint8

    # a fixed budget: the default follows the memory available now, which other processes change
    settings = RunnerSettings(memory_budget_mb=3072)
    s_tile, s_plan = FrameQueueRunner(Backend("edvr-s"), settings).plan_tile(1080, 1920, Sink())
    m_tile, m_plan = FrameQueueRunner(Backend("edvr-m"), settings).plan_tile(1080, 1920, Sink())
    assert m_tile[0] * m_tile[1] < s_tile[0] * s_tile[1]  # more fixed memory per item: smaller tiles
    assert m_plan.fits and m_plan.total_mb <= m_plan.budget_mb * (1 - MARGIN) + 1e-6


@pytest.mark.parametrize("total, budget", [(16860.0, 8192), (24105.0, 11264), (1500.0, AUTO_FLOOR_MB),
                                           (200_000.0, AUTO_CAP_MB), (None, FALLBACK_BUDGET_MB)])
def test_the_default_budget_is_half_the_machines_memory_within_floor_and_cap(monkeypatch, total, budget):
    import vsr.pipeline.memory as memory

    monkeypatch.setattr(memory, "total_memory_mb", lambda: total)
    b = machine_budget()
    assert b.mb == budget and b.mb % 1024 == 0
    assert (f"half of this machine's {total:.0f} MB" in b.why) if total else "does not say" in b.why


def test_the_default_budget_does_not_move_with_the_memory_free_now(monkeypatch):
    """Issue 40: a share of MemAvailable moved one machine's budget between 9,984 and 11,264 MB from run to run."""
    import builtins

    import vsr.pipeline.memory as memory

    real_open = builtins.open

    def meminfo(available_kb):
        def fake(path, *a, **kw):
            if str(path) == "/proc/meminfo":
                import io
                return io.StringIO(f"MemTotal:       24684092 kB\nMemFree:        {available_kb // 2} kB\n"
                                   f"MemAvailable:   {available_kb} kB\n")
            return real_open(path, *a, **kw)
        return fake

    budgets = set()
    for available_kb in (20_447_232, 23_068_672, 4_000_000):
        monkeypatch.setattr(builtins, "open", meminfo(available_kb))
        monkeypatch.setattr(vsr.machine, "_cgroup_limit_mb", lambda: None)
        budgets.add(machine_budget())
    assert budgets == {memory.Budget(11264, "default: half of this machine's 24106 MB")}


def test_the_machines_memory_is_read_from_this_machine():
    with open("/proc/meminfo") as f:
        fields = {line.split(":")[0]: int(line.split()[1]) / 1024 for line in f}
    assert 0 < total_memory_mb() <= fields["MemTotal"]  # MemTotal, or less where a cgroup's limit is lower
    assert total_memory_mb() == total_memory_mb()
