"""Cache keys of the CUDA runtime: a deterministic function of the device and the software stack, checked with
stand-in values (no GPU here)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch

from vsr.backends.cuda.keys import DeviceFacts, cache_folder, device_facts, runtime_key
from vsr.kernels.cuda.sources import sources_digest

H100 = DeviceFacts(device_name="NVIDIA H100 80GB HBM3", capability="9.0", cuda="12.4", driver="12.6",
                   torch="2.5.1+cu124", tensorrt="10.6.0", kernels="ab" * 32)


def test_the_key_is_pinned_so_that_a_change_of_its_recipe_is_a_decision():
    assert runtime_key(H100) == runtime_key(dataclasses.replace(H100))
    # a change here invalidates every cached engine: bump KEY_VERSION deliberately, then update this value
    assert runtime_key(H100, "fp16") == "6607613b1609b469db22"


@pytest.mark.parametrize("field, value", [("device_name", "NVIDIA H200"), ("capability", "8.0"), ("cuda", "12.1"),
                                          ("driver", "12.4"), ("torch", "2.6.0+cu124"), ("tensorrt", None),
                                          ("kernels", "cd" * 32)])
def test_every_fact_changes_the_key(field, value):
    assert runtime_key(dataclasses.replace(H100, **{field: value})) != runtime_key(H100)


def test_extra_fields_change_the_key_and_their_order_matters():
    assert runtime_key(H100, "fp16") != runtime_key(H100, "fp32")
    assert runtime_key(H100, "a", "b") != runtime_key(H100, "b", "a")
    assert runtime_key(H100, "ab") != runtime_key(H100, "a", "b")


def test_the_key_is_the_same_in_another_process():
    code = ("from vsr.backends.cuda.keys import DeviceFacts, runtime_key; "
            f"print(runtime_key(DeviceFacts(**{dataclasses.asdict(H100)!r}), 'fp16'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == runtime_key(H100, "fp16")


def test_cache_folder_is_readable_and_records_its_facts(tmp_path):
    folder = cache_folder(H100, tmp_path, "tensorrt", "fp16")
    assert folder.parent == tmp_path
    assert folder.name == f"nvidia-h100-80gb-hbm3-{runtime_key(H100, 'tensorrt', 'fp16')}"
    manifest = json.loads((folder / "facts.json").read_text())
    assert manifest == {"facts": dataclasses.asdict(H100), "extra": ["tensorrt", "fp16"]}
    assert cache_folder(H100, tmp_path, "tensorrt", "fp16") == folder  # found again, not rebuilt
    assert cache_folder(dataclasses.replace(H100, driver="12.8"), tmp_path, "tensorrt", "fp16") != folder


def test_facts_of_the_cpu_have_no_cuda_and_name_the_kernel_sources():
    facts = device_facts(torch.device("cpu"))
    assert facts.cuda is None and facts.driver is None and facts.capability is None
    assert facts.device_name.startswith("cpu") and facts.torch == torch.__version__
    assert facts.kernels == sources_digest()


def test_a_link_planted_at_the_facts_temporary_is_not_written_through(tmp_path):
    """Another user (a shared VSR_ENGINE_DIR) or a stale link at the temporary's name: facts.json was written to
    the link's target, overwriting a file of this user's."""
    import os

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    folder = tmp_path / "engines" / f"nvidia-h100-80gb-hbm3-{runtime_key(H100, 'tensorrt')}"
    folder.mkdir(parents=True)
    for name in (f"vsr-partial-{os.getpid()}", f"{id(H100)}.tmp"):  # this vsr's name for it, and one before
        (folder / f".facts.json.{name}").symlink_to(victim)
    assert cache_folder(H100, tmp_path / "engines", "tensorrt") == folder
    assert victim.read_text() == "keep me\n"
    assert json.loads((folder / "facts.json").read_text())["extra"] == ["tensorrt"]
    assert not (folder / "facts.json").is_symlink()


def test_a_cache_folder_others_can_write_is_refused_and_a_new_one_is_private(tmp_path, shared_group):
    """Engines and compiled kernels are code; the device's folder was made with mkdir(exist_ok=True) and used
    whoever had made it and whatever its mode."""
    from vsr.errors import InputError

    folder = cache_folder(H100, tmp_path, "tensorrt", "fp16")
    assert folder.stat().st_mode & 0o777 == 0o700
    os.chown(folder, -1, shared_group)  # a group other users are in
    folder.chmod(0o775)
    with pytest.raises(InputError, match=r"will not keep compiled kernels and engines in .*: other users can write "
                                         r"to it \(mode 775\)"):
        cache_folder(H100, tmp_path, "tensorrt", "fp16")


def _aged(path, days):
    import time

    t = time.time() - days * 86400
    os.utime(path, (t, t), follow_symlinks=False)
    return path


def test_a_cache_folder_no_run_used_for_a_week_is_removed_when_a_new_one_is_made(tmp_path):
    """After a driver, torch or TensorRT upgrade the device's earlier folder (its engines, tens of MB each) stayed
    in ``<engine dir>/cuda`` for good; now making a new folder removes the ones no run used for a week."""
    root = tmp_path / "cuda"
    old = cache_folder(dataclasses.replace(H100, driver="12.4"), root, "tensorrt")
    (old / "segment.engine").write_bytes(b"engine")
    recent = cache_folder(dataclasses.replace(H100, torch="2.4.0"), root, "tensorrt")
    used = cache_folder(H100, root, "fp16")
    unknown = root / f"mine-{'0' * 20}"  # not a cache folder of vsr's: no facts.json
    unknown.mkdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    (root / f"link-{'1' * 20}").symlink_to(victim, target_is_directory=True)
    for folder, days in ((old, 8), (recent, 2), (used, 8), (unknown, 8)):
        _aged(folder, days)
    assert cache_folder(H100, root, "fp16") == used  # used now: marked
    new = cache_folder(H100, root, "tensorrt")
    assert sorted(os.listdir(root)) == sorted([recent.name, used.name, unknown.name, new.name, f"link-{'1' * 20}"])
    assert victim.is_dir() and (new / "facts.json").is_file()
