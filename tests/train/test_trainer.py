"""`vsr train` on edvr-tiny and a tiny clip: the loss goes down, a resumed run is bit-exact, checkpoints
load wherever EDVR weights load, and shipping writes compact weights that `load_model` configures by itself."""

from __future__ import annotations

import math

import pytest
import torch

from vsr.model import load_model
from vsr.model.weights import read_checkpoint
from vsr.train import TrainOptions, Trainer, lr_at
from vsr.train.loss import charbonnier


@pytest.fixture
def clip(make_clip):
    return make_clip("train.mp4", width=48, height=40, frames=10)


def options(clip, out, **kw):
    base = dict(config="edvr-tiny", data=(str(clip),), out=str(out), iters=6, batch_size=2, lr_patch=8,
                lr=1e-3, warmup=2, val=(), ckpt_every=100, log_every=1, threads=1, segments_per_video=2,
                workers=0)
    base.update(kw)
    return TrainOptions(**base)


def fixed_batch_loss(trainer, iteration=0):
    lr, hr = trainer.sampler.batch(iteration)
    with torch.no_grad():
        return float(charbonnier(trainer.model.eval()(torch.from_numpy(lr)), torch.from_numpy(hr)))


def test_loss_goes_down(clip, tmp_path):
    tr = Trainer(options(clip, tmp_path / "run", iters=25))
    before = fixed_batch_loss(tr)
    tr.run(progress=False)
    assert fixed_batch_loss(tr) < 0.8 * before


@pytest.mark.parametrize("workers", [(0, 0), (2, 1)])
def test_resume_is_bit_exact(clip, tmp_path, workers):
    """... and batches made by worker processes (vsr.train.stream) train as the ones made in the run's process."""
    whole = Trainer(options(clip, tmp_path / "a"))
    whole.run(progress=False)
    first = Trainer(options(clip, tmp_path / "b", workers=workers[0]))
    first.run(stop_after=3, progress=False)  # stops and checkpoints at iteration 3
    second = Trainer(options(clip, tmp_path / "b", workers=workers[1]))
    assert second.resumed and second.state.iteration == 3
    second.run(progress=False)
    a, b = read_checkpoint(tmp_path / "a" / "latest.pth"), read_checkpoint(tmp_path / "b" / "latest.pth")
    assert a["train"]["iteration"] == b["train"]["iteration"] == 6
    for key in ("params", "params_ema"):
        for k in a[key]:
            assert torch.equal(a[key][k], b[key][k]), f"{key}.{k} differs after resume"
    for i, st in a["optimizer"]["state"].items():
        for k, v in st.items():
            assert torch.equal(v, b["optimizer"]["state"][i][k])
    assert torch.equal(a["rng"]["torch"], b["rng"]["torch"])


def test_a_run_resumed_between_two_log_lines_logs_the_same_loss_curve(clip, tmp_path):
    """(--ckpt-every 25 beside the log's 10, or a time slice's checkpoint: the first line after the resume averaged
    only the resumed steps' losses)"""
    import json

    def curve(run):
        lines = [json.loads(x) for x in (run / "log.jsonl").read_text().splitlines()]
        return [(e["iteration"], e["loss"]) for e in lines if e["event"] == "train"]

    Trainer(options(clip, tmp_path / "a", log_every=4, iters=8)).run(progress=False)
    Trainer(options(clip, tmp_path / "b", log_every=4, iters=8)).run(stop_after=3, progress=False)
    Trainer(options(clip, tmp_path / "b", log_every=4, iters=8)).run(progress=False)
    assert [it for it, _ in curve(tmp_path / "a")] == [4, 8]
    assert curve(tmp_path / "b") == curve(tmp_path / "a")


def test_the_last_iteration_is_logged_where_it_ends_no_stretch(clip, tmp_path):
    """(--iters 6 with the log every 10 steps: log.jsonl held no loss at all)"""
    import json

    Trainer(options(clip, tmp_path / "a", log_every=4, iters=6)).run(progress=False)
    lines = [json.loads(x) for x in (tmp_path / "a" / "log.jsonl").read_text().splitlines()]
    assert [e["iteration"] for e in lines if e["event"] == "train"] == [4, 6]


def test_a_run_interrupted_mid_step_resumes_from_its_last_checkpoint_exactly(clip, tmp_path, monkeypatch):
    whole = Trainer(options(clip, tmp_path / "a"))
    whole.run(progress=False)
    first = Trainer(options(clip, tmp_path / "b", ckpt_every=2))
    batch = first.sampler.batch_uint8

    def interrupted(it):
        if it == 3:
            raise KeyboardInterrupt
        return batch(it)

    monkeypatch.setattr(first.sampler, "batch_uint8", interrupted)
    with pytest.raises(KeyboardInterrupt):
        first.run(progress=False)
    assert read_checkpoint(tmp_path / "b" / "latest.pth")["train"]["iteration"] == 2
    second = Trainer(options(clip, tmp_path / "b", ckpt_every=2))
    assert second.resumed and second.state.iteration == 2
    second.run(progress=False)
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["latest.pth", "log.jsonl"]
    a, b = read_checkpoint(tmp_path / "a" / "latest.pth"), read_checkpoint(tmp_path / "b" / "latest.pth")
    for key in ("params", "params_ema"):
        assert all(torch.equal(a[key][k], b[key][k]) for k in a[key]), key


def test_resume_refuses_other_options(clip, tmp_path):
    from vsr.errors import InputError

    Trainer(options(clip, tmp_path / "r")).run(stop_after=1, progress=False)
    with pytest.raises(InputError, match="lr"):
        Trainer(options(clip, tmp_path / "r", lr=5e-4))


def test_checkpoint_is_basicsr_format_and_loads(clip, tmp_path):
    Trainer(options(clip, tmp_path / "c", iters=2)).run(progress=False)
    path = tmp_path / "c" / "latest.pth"
    ck = torch.load(path, weights_only=True)
    assert {"params", "params_ema"} <= set(ck)
    model, cfg = load_model(path)  # config read from the checkpoint's "vsr" entry
    assert cfg.name == "edvr-tiny"
    assert torch.equal(model.state_dict()["conv_last.weight"], ck["params_ema"]["conv_last.weight"])


def test_init_starts_from_given_weights(clip, tmp_path):
    Trainer(options(clip, tmp_path / "src", iters=2)).run(progress=False)
    src = read_checkpoint(tmp_path / "src" / "latest.pth")["params_ema"]
    tr = Trainer(options(clip, tmp_path / "ft", config=None, init=str(tmp_path / "src" / "latest.pth")))
    assert tr.cfg.name == "edvr-tiny"
    assert all(torch.equal(v, src[k]) for k, v in tr.model.state_dict().items())


def test_ship_writes_fp16_params_that_load(clip, tmp_path):
    from vsr.train.ship import ship

    Trainer(options(clip, tmp_path / "s", iters=2)).run(progress=False)
    out = tmp_path / "w" / "default.pth"
    info = ship(tmp_path / "s" / "latest.pth", out, which="ema")
    ck = torch.load(out, weights_only=True)
    assert set(ck) == {"params", "vsr"}
    assert all(v.dtype == torch.float16 for v in ck["params"].values())
    assert out.with_suffix(".json").is_file() and info["iteration"] == 2
    model, cfg = load_model(out)
    assert cfg.name == "edvr-tiny"


def test_ship_refuses_weights_that_are_not_a_training_checkpoint(clip, tmp_path):
    from vsr.errors import WeightsError
    from vsr.train.ship import ship

    Trainer(options(clip, tmp_path / "s", iters=1)).run(progress=False)
    shipped = tmp_path / "w" / "default.pth"
    ship(tmp_path / "s" / "latest.pth", shipped, which="ema")
    again = tmp_path / "again.pth"
    with pytest.raises(WeightsError, match="not a vsr training checkpoint"):
        ship(shipped, again)  # shipped weights hold "params" only
    assert not again.exists()


def test_schedule_warms_up_then_decays_to_min():
    o = TrainOptions(config="edvr-tiny", data=(), out="", iters=100, lr=1e-3, min_lr=1e-6, warmup=10)
    lrs = [lr_at(i, o) for i in range(100)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
    assert lr_at(100, o) == pytest.approx(1e-6) and not math.isnan(lrs[-1])


def test_finetune_validates_held_out_frames_before_and_during(make_clip, tmp_path):
    clip = make_clip("mine.mp4", width=64, height=48, frames=12)
    Trainer(options(clip, tmp_path / "src", iters=2)).run(progress=False)
    o = options(clip, tmp_path / "ft", config=None, init=str(tmp_path / "src" / "latest.pth"), iters=4,
                holdout=0.25, val=("holdout",), val_every=2)
    tr = Trainer(o)
    (vs,) = tr.val_sets
    assert len(list(vs.gt_dir.glob("*.png"))) == 3  # the last quarter of 12 frames, never trained on
    tr.run(progress=False)
    iters = [h["iteration"] for h in tr.state.history]
    assert iters == [0, 2, 4]
    first = tr.state.history[0]["val"]["ema"][vs.name]
    assert math.isfinite(first["psnr_y"]) and first["bicubic_y"] > 10


def test_the_loss_is_read_from_the_device_only_at_each_log(clip, tmp_path, monkeypatch):
    """Reading a loss waits for its step on a GPU: the steps between two logs queue without a wait."""
    import json

    reads = []
    real = torch.Tensor.__float__

    def counted(t):
        reads.append(t.dim())
        return real(t)

    tr = Trainer(options(clip, tmp_path / "r", iters=6, log_every=3))
    monkeypatch.setattr(torch.Tensor, "__float__", counted)
    losses = []
    step = tr.step
    monkeypatch.setattr(tr, "step", lambda *batch: losses.append(step(*batch)) or losses[-1])
    tr.run(progress=False)
    monkeypatch.undo()
    assert len(reads) == 2 and all(isinstance(v, torch.Tensor) for v in losses)
    logged = [r for r in map(json.loads, (tmp_path / "r" / "log.jsonl").read_text().splitlines())
              if r["event"] == "train"]
    assert [r["iteration"] for r in logged] == [3, 6]
    for r, chunk in zip(logged, (losses[:3], losses[3:])):  # each the mean of its stretch's step losses
        assert r["loss"] == pytest.approx(sum(float(v) for v in chunk) / 3, rel=1e-6)


def test_a_validation_is_not_counted_in_the_next_stretchs_it_per_s(clip, tmp_path, monkeypatch):
    """(the stretch after each validation reported its steps over the validation's time too: a dip in it/s)"""
    import json
    import time

    tr = Trainer(options(clip, tmp_path / "r", iters=4, log_every=2, val_every=2))
    tr.val_sets = ["a set"]
    monkeypatch.setattr(tr, "validate", lambda: time.sleep(5) or {"ema": {"s": {"psnr_y": 30.0, "bicubic_y": 29.0}}})
    tr.run(progress=False)
    logged = [r for r in map(json.loads, (tmp_path / "r" / "log.jsonl").read_text().splitlines())
              if r["event"] == "train"]
    assert [r["iteration"] for r in logged] == [2, 4]
    assert logged[1]["it_per_s"] > 2 / 5  # two steps of edvr-tiny on 8x8 patches: well under 5 s


def test_adam_is_fused_on_cuda_and_as_before_elsewhere(clip, tmp_path):
    from vsr.train.trainer import adam_options

    assert adam_options(torch.device("cuda", 1)) == {"fused": True}
    assert adam_options(torch.device("cpu")) == {}
    tr = Trainer(options(clip, tmp_path / "f"))
    assert not any(g.get("fused") for g in tr.opt.param_groups)


def test_the_log_says_the_batch_workers_kept_and_why(clip, tmp_path, monkeypatch):
    """Asked for 2 workers where /dev/shm has room for less than one batch in flight: the run makes its batches
    itself, and its log says so with the reason (not only the 2 asked for, as its start line does)."""
    import json
    import shutil
    from types import SimpleNamespace

    from vsr.train import stream

    monkeypatch.setattr(stream.shutil, "disk_usage", lambda path: SimpleNamespace(free=1024) if "shm" in str(path)
                        else shutil.disk_usage(path))
    tr = Trainer(options(clip, tmp_path / "run", iters=2, workers=2))
    tr.run(progress=False)
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    [kept] = [e for e in log if e["event"] == "batch_workers"]
    assert (kept["asked"], kept["kept"], kept["prefetch"]) == (2, 0, 0)
    assert "/dev/shm has 0 MiB free" in kept["why"]
