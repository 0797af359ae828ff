"""`vsr models fetch`: official checkpoints downloaded from a real HTTP server on 127.0.0.1
(tests/model/file_server.py), resumed with HTTP ranges, verified by sha256 before they are renamed into place,
and then loaded by name.

The served checkpoints are generated EDVR-tiny state dicts in BasicSR and mmagic format; the catalogue is
patched with their local URLs and digests (the real one is checked against the published key lists below)."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import vsr.model.official as official
from vsr.cli import main
from vsr.model import build_model, load_config, load_model
from vsr.model.official import OFFICIAL, OfficialCheckpoint
from vsr.model.weights import expected_shapes

from tests.data import EDVR_KEYS as KEYS, VIDEOS

from .file_server import FileServer, Served



def _saved(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


# mmagic's EDVRNet wraps these convolutions in mmcv's ConvModule (``.conv.weight``); the others are plain
# (open-mmlab/mmagic mmagic/models/editors/edvr/edvr_net.py, commit b3c855b5)
_CONV_MODULES = re.compile(r"^(pcd_alignment\.(offset_conv[123]|feat_conv)\.l\d|pcd_alignment\.cas_offset_conv[12]|"
                           r"fusion\.(feat_fusion|spatial_attn[1-4]|spatial_attn_l[1-3]|spatial_attn_add1))\.")


def to_mmagic(key: str) -> str:
    """A BasicSR EDVR key as mmagic's EDVRNet names it."""
    key = re.sub(r"^conv_l([23])_([12])\.", r"feat_l\1_conv\2.conv.", key)
    key = re.sub(r"^upconv([12])\.", r"upsample\1.upsample_conv.", key)
    key = key.replace("pcd_align.", "pcd_alignment.")
    return _CONV_MODULES.sub(r"\1.conv.", key)


@pytest.fixture(scope="module")
def tiny():
    """(state dict, its BasicSR checkpoint bytes, its mmagic checkpoint bytes)."""
    torch.manual_seed(3)
    sd = build_model(load_config("edvr-tiny")).state_dict()
    mmagic = {"meta": {"mmagic_version": "test"}, "state_dict": {"generator." + to_mmagic(k): v for k, v in sd.items()}}
    return sd, _saved({"params": sd}), _saved(mmagic)


def entry(name: str, data: bytes, urls, *, full: bool = True, digest: str | None = None) -> OfficialCheckpoint:
    sha = digest or hashlib.sha256(data).hexdigest()
    return OfficialCheckpoint(name, f"{name.upper()}-{sha[:8]}.pth", "edvr-tiny", sha if full else None, sha[:8],
                              "none", tuple(urls), "tests")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "weights"
    monkeypatch.setenv("VSR_WEIGHTS_DIR", str(folder))
    return folder


def use(monkeypatch, *entries) -> None:
    monkeypatch.setattr(official, "OFFICIAL", tuple(entries))


def fetch_cli(capsys, *args) -> tuple[int, str, str]:
    code = main(["models", "fetch", *args, "--quiet"])
    out, err = capsys.readouterr()
    return code, out, err


def files_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_fetch_basicsr_and_mmagic_checkpoints_then_load_them_by_name(cache, monkeypatch, capsys, tiny):
    sd, basicsr, mmagic = tiny
    with FileServer() as srv:
        srv.files = {"/b.pth": Served(basicsr), "/m.pth": Served(mmagic)}
        use(monkeypatch, entry("tiny-basicsr", basicsr, [srv.url("/b.pth")]),
            entry("tiny-mmagic", mmagic, [srv.url("/m.pth")], full=False))
        code, out, err = fetch_cli(capsys, "all")
        assert code == 0, err
        assert files_in(cache) == [official.OFFICIAL[0].filename, official.OFFICIAL[1].filename]
        assert (cache / official.OFFICIAL[1].filename).read_bytes() == mmagic
        for name in ("tiny-basicsr", "tiny-mmagic"):
            model, cfg = load_model(name)
            assert cfg.name == "edvr-tiny"
            assert all(torch.equal(v, sd[k]) for k, v in model.state_dict().items())
        served = len(srv.requests)
        code, out, _ = fetch_cli(capsys, "tiny-mmagic")  # present and verified: no request
        # only its 8-digit prefix is known: the line said "sha256 verified" as for a full digest
        prefix = official.OFFICIAL[1].prefix
        assert code == 0 and f"(already there, sha256 starts with the published {prefix})" in out
        assert len(srv.requests) == served
        code, out, _ = fetch_cli(capsys, "tiny-basicsr")
        assert code == 0 and "(already there, sha256 verified)" in out and len(srv.requests) == served
    assert main(["models", "--json"]) == 0
    listed = {o["name"]: o["path"] for o in json.loads(capsys.readouterr().out)["official"]}
    assert listed == {"tiny-basicsr": str(cache / official.OFFICIAL[0].filename),
                      "tiny-mmagic": str(cache / official.OFFICIAL[1].filename)}


def test_dir_puts_the_file_elsewhere_and_the_cache_stays_empty(cache, monkeypatch, capsys, tmp_path, tiny):
    sd, basicsr, _ = tiny
    with FileServer() as srv:
        srv.files = {"/b.pth": Served(basicsr)}
        use(monkeypatch, e := entry("tiny", basicsr, [srv.url("/b.pth")]))
        code, out, _ = fetch_cli(capsys, "tiny", "--dir", str(tmp_path / "mine"))
    assert code == 0 and out.strip() == f"tiny: {tmp_path / 'mine' / e.filename}"
    assert files_in(tmp_path / "mine") == [e.filename] and not cache.exists()
    model, _ = load_model(tmp_path / "mine" / e.filename, "edvr-tiny")
    assert all(torch.equal(v, sd[k]) for k, v in model.state_dict().items())


def test_a_cut_connection_keeps_the_part_and_the_next_run_resumes_with_a_range(cache, monkeypatch, capsys, tiny):
    data = tiny[1]
    with FileServer() as srv:
        srv.files = {"/b.pth": Served(data, modes=["cut"], cut=50_000)}
        use(monkeypatch, e := entry("tiny", data, [srv.url("/b.pth")]))
        code, _, err = fetch_cli(capsys, "tiny")
        assert code == 1 and err.count("\n") == 1 and "connection closed" in err and "run again to resume" in err
        assert files_in(cache) == [e.filename + ".part"]
        assert (cache / (e.filename + ".part")).read_bytes() == data[:50_000]
        code, _, err = fetch_cli(capsys, "tiny")
        assert code == 0, err
        last = srv.requests[-1]
        assert last.range == "bytes=50000-" and last.status == 206 and last.sent == len(data) - 50_000
    assert files_in(cache) == [e.filename] and (cache / e.filename).read_bytes() == data


def test_a_server_ignoring_the_range_answers_200_and_the_file_starts_over(cache, monkeypatch, capsys, tiny):
    data = tiny[1]
    with FileServer() as srv:
        srv.files = {"/b.pth": Served(data, modes=["norange"])}
        use(monkeypatch, e := entry("tiny", data, [srv.url("/b.pth")]))
        cache.mkdir()
        (cache / (e.filename + ".part")).write_bytes(b"stale bytes of another try")
        code, _, err = fetch_cli(capsys, "tiny")
        assert code == 0, err
        assert srv.requests[-1].range is not None and srv.requests[-1].status == 200
    assert files_in(cache) == [e.filename] and (cache / e.filename).read_bytes() == data


def test_a_complete_part_is_verified_after_the_server_answers_416(cache, monkeypatch, capsys, tiny):
    data = tiny[1]
    with FileServer() as srv:
        srv.files = {"/b.pth": Served(data)}
        use(monkeypatch, e := entry("tiny", data, [srv.url("/b.pth")]))
        cache.mkdir()
        (cache / (e.filename + ".part")).write_bytes(data)  # interrupted between the last byte and the rename
        assert fetch_cli(capsys, "tiny")[0] == 0
        assert srv.requests[-1].status == 416
    assert (cache / e.filename).read_bytes() == data


@pytest.mark.parametrize("full", [True, False])
def test_a_wrong_digest_is_one_line_and_leaves_no_file(cache, monkeypatch, capsys, tiny, full):
    data = tiny[1]
    with FileServer() as srv:
        srv.files = {"/b.pth": Served(data)}
        use(monkeypatch, entry("tiny", data, [srv.url("/b.pth")], full=full, digest="0badc0de" * 8))
        code, _, err = fetch_cli(capsys, "tiny")
    assert code == 1 and err.count("\n") == 1
    assert "is not the published 0badc0de" in err and "deleted" in err
    assert files_in(cache) == []


def test_a_404_tries_the_next_url_and_all_failing_is_one_line(cache, monkeypatch, capsys, tiny):
    data = tiny[1]
    with FileServer() as srv:
        srv.files = {"/b.pth": Served(data)}
        use(monkeypatch, e := entry("tiny", data, [srv.url("/gone.pth"), srv.url("/b.pth")]),
            entry("lost", data, [srv.url("/gone.pth")]))
        assert fetch_cli(capsys, "tiny")[0] == 0
        assert [r.status for r in srv.requests] == [404, 200]
        code, _, err = fetch_cli(capsys, "lost")
    assert code == 1 and err.count("\n") == 1 and "127.0.0.1: HTTP 404" in err
    assert files_in(cache) == [e.filename]


def test_a_stalled_server_times_out_and_keeps_what_came(cache, monkeypatch, capsys, tiny):
    data = tiny[1]
    with FileServer() as srv:
        srv.files = {"/b.pth": Served(data, modes=["stall"], cut=20_000)}
        use(monkeypatch, e := entry("tiny", data, [srv.url("/b.pth")]))
        t0 = time.monotonic()
        code, _, err = fetch_cli(capsys, "tiny", "--timeout", "1")
        assert time.monotonic() - t0 < 20
    assert code == 1 and err.count("\n") == 1 and "stalled: no data for 1 s" in err
    assert files_in(cache) == [e.filename + ".part"] and (cache / (e.filename + ".part")).stat().st_size == 20_000


def test_google_drive_confirm_page_is_followed_and_resumes(cache, monkeypatch, capsys, tiny):
    data = tiny[2]
    with FileServer() as srv:
        srv.drive = {"1AbC-dEf_9": Served(data, modes=["cut"], cut=30_000)}
        use(monkeypatch, e := entry("tiny-drive", data, [srv.drive_url("1AbC-dEf_9")], full=False))
        code, _, err = fetch_cli(capsys, "tiny-drive")
        assert code == 1 and "connection closed" in err
        assert fetch_cli(capsys, "tiny-drive")[0] == 0
        page, confirmed = srv.requests[-2:]
        assert page.path.startswith("/uc?") and page.range == "bytes=30000-" and page.status == 200
        assert "confirm=t" in confirmed.path and "uuid=u-9_fEd-CbA1" in confirmed.path
        assert confirmed.range == "bytes=30000-" and confirmed.status == 206
        assert "download_warning_1AbC-dEf_9=t" in (confirmed.cookie or "")
    assert (cache / e.filename).read_bytes() == data


def test_google_drive_refusal_is_one_line_with_its_reason(cache, monkeypatch, capsys, tiny):
    with FileServer() as srv:
        srv.drive = {"q1": Served(tiny[1])}
        srv.drive_quota = {"q1"}
        use(monkeypatch, entry("tiny", tiny[1], [srv.drive_url("q1")]))
        code, _, err = fetch_cli(capsys, "tiny")
    assert code == 1 and err.count("\n") == 1
    assert "an HTML page instead of the file (Too many users have viewed or downloaded this file" in err
    assert files_in(cache) == []


def test_ctrl_c_mid_download_leaves_no_weights_file_and_the_next_run_resumes(cache, monkeypatch, tiny):
    data = os.urandom(6 << 20)  # 6 MiB at 640 KiB/s: in flight long enough to interrupt
    with FileServer() as srv:
        srv.files = {"/big.pth": Served(data, modes=["slow"])}
        e = entry("big", data, [srv.url("/big.pth")])
        record = json.dumps([dataclasses.asdict(e)])
        code = ("import json, sys; import vsr.model.official as o; "
                "o.OFFICIAL = tuple(o.OfficialCheckpoint(**{**d, 'urls': tuple(d['urls'])}) "
                "for d in json.loads(sys.argv[1])); sys.argv = ['vsr', *sys.argv[2:]]; "
                "from vsr.cli import entry; entry()")
        env = {**os.environ, "VSR_WEIGHTS_DIR": str(cache)}
        proc = subprocess.Popen([sys.executable, "-c", code, record, "models", "fetch", "big"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as from a terminal
        part = cache / (e.filename + ".part")
        deadline = time.monotonic() + 60
        while not (part.is_file() and part.stat().st_size > 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        assert err.splitlines()[-1] == "vsr: interrupted" and "Traceback" not in err
        assert files_in(cache) == [part.name] and 0 < part.stat().st_size < len(data)
        kept = part.stat().st_size
        srv.files["/big.pth"].modes = []
        use(monkeypatch, e)
        assert main(["models", "fetch", "big", "--quiet"]) == 0
        assert srv.requests[-1].range == f"bytes={kept}-"
    assert files_in(cache) == [e.filename] and (cache / e.filename).read_bytes() == data


def test_a_planted_link_at_the_part_name_is_not_followed(cache, monkeypatch, capsys, tmp_path, tiny):
    with FileServer() as srv:
        srv.files = {"/b.pth": Served(tiny[1])}
        use(monkeypatch, e := entry("tiny", tiny[1], [srv.url("/b.pth")]))
        cache.mkdir()
        victim = tmp_path / "victim"
        victim.write_bytes(b"precious")
        (cache / (e.filename + ".part")).symlink_to(victim)
        code, _, err = fetch_cli(capsys, "tiny")
    assert code == 1 and err.count("\n") == 1 and "cannot write" in err
    assert victim.read_bytes() == b"precious" and not (cache / e.filename).exists()


def test_unknown_names_and_unfetched_weights_are_one_line_without_any_download(cache, capsys, tmp_path):
    code, _, err = fetch_cli(capsys, "edvr-m-redz")
    assert code == 2 and err.count("\n") == 1 and "edvr-m-reds" in err
    out = tmp_path / "out.mkv"
    code = main(["upscale", str(VIDEOS / "h264_256x240_35fps_1s_noaudio.mp4"), str(out), "--weights", "edvr-m-reds",
                 "--frames", "0:1", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "edvr-m-reds is not downloaded: run `vsr models fetch edvr-m-reds`" in err
    assert not cache.exists() and files_in(tmp_path) == []


def test_an_unfetched_name_fails_before_any_config_is_guessed(cache):
    from vsr.errors import InputError

    with pytest.raises(InputError, match=r"edvr-l-vimeo90k is not downloaded: run `vsr models fetch edvr-l-vimeo90k`"):
        load_model("edvr-l-vimeo90k")


def _published_keys(name: str) -> dict[str, tuple[int, ...]]:
    out = {}
    for line in (KEYS / name).read_text().splitlines():
        if line and not line.startswith("#"):
            key, shape = line.split("\t")
            out[key] = tuple(int(d) for d in re.findall(r"\d+", shape))
    return out


def test_the_real_catalogue_is_consistent_and_its_configs_fit_the_published_key_lists():
    names = [o.name for o in OFFICIAL]
    assert len(set(names)) == len(names) and len({o.filename for o in OFFICIAL}) == len(OFFICIAL)
    for o in OFFICIAL:
        assert re.search(rf"-{o.prefix}\.pth$", o.filename), o.filename
        assert o.sha256 is None or (len(o.sha256) == 64 and o.sha256.startswith(o.prefix))
        assert o.urls and all(u.startswith("https://") for u in o.urls)
        load_config(o.config)
    keys = {"edvr-m-reds": "EDVR_M_x4_SR_REDS.txt", "edvr-m-wotsa-reds": "EDVR_M_woTSA_x4_SR_REDS.txt",
            "edvr-l-reds": "EDVR_L_x4_SR_REDS.txt", "edvr-l-vimeo90k": "EDVR_L_x4_SR_Vimeo90K.txt"}
    for name, listing in keys.items():
        if not (KEYS / listing).is_file():
            pytest.skip(f"no {KEYS / listing}")
        assert expected_shapes(load_config(official.find_official(name).config)) == _published_keys(listing), name


def test_the_default_weights_folder_is_held_to_the_caches_rule(tmp_path, monkeypatch, capsys, tiny):
    """A fetched checkpoint in a weights folder other users can write was loaded by name (its digest checked,
    but for most only an 8-digit prefix is published: no guard against a file made to match).  Now, as the
    engine caches: one line naming the folder and VSR_WEIGHTS_DIR; the same file named on the command line loads
    (the user's choice); a fetch makes the folder mode 0700 and keeps nothing in a folder others can write."""
    from vsr.errors import InputError

    sd, basicsr, _ = tiny
    monkeypatch.delenv("VSR_WEIGHTS_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    folder = tmp_path / "xdg" / "vsr" / "weights"
    with FileServer() as srv:
        srv.files = {"/b.pth": Served(basicsr)}
        use(monkeypatch, e := entry("tiny", basicsr, [srv.url("/b.pth")]))
        code, _, err = fetch_cli(capsys, "tiny")
        assert code == 0, err
        assert (folder.stat().st_mode & 0o777) == 0o700 and load_model("tiny")[1].name == "edvr-tiny"
        folder.chmod(0o777)
        served = len(srv.requests)
        code, _, err = fetch_cli(capsys, "tiny")
        assert code == 2 and len(srv.requests) == served
        assert err.startswith(f"vsr: error: will not keep fetched weights in {folder}: other users can write to "
                              "it (mode 777); ") and err.count("\n") == 1
    line = (f"will not load weights from {folder}: other users can write to it (mode 777); what is loaded from "
            "there decides your output (make it yours, writable by you alone: vsr makes the folder mode 0700; or "
            "set VSR_WEIGHTS_DIR to a folder of yours alone)")
    with pytest.raises(InputError) as refused:
        load_model("tiny")
    assert str(refused.value) == line
    assert main(["models"]) == 0  # the listing says so too (it said "downloaded: PATH" alone)
    assert (f"downloaded: {folder / e.filename} (not loaded from there: other users can write to it (mode 777); "
            "see VSR_WEIGHTS_DIR)") in capsys.readouterr().out
    out = tmp_path / "out.mkv"
    code = main(["upscale", str(VIDEOS / "h264_256x240_35fps_1s_noaudio.mp4"), str(out), "--weights", "tiny",
                 "--frames", "0:1", "--quiet"])
    assert code == 2 and capsys.readouterr().err == f"vsr: error: {line}\n" and not out.exists()
    model, _ = load_model(folder / e.filename, "edvr-tiny")  # named as a file: the user's choice, loaded
    assert all(torch.equal(v, sd[k]) for k, v in model.state_dict().items())
    folder.chmod(0o755)
    (folder / e.filename).chmod(0o666)  # the folder fine, the file writable by anyone who reaches it
    with pytest.raises(InputError, match=rf"from {re.escape(str(folder))}: {e.filename}: other users can write "):
        load_model("tiny")


def test_a_folder_that_cannot_be_written_is_one_line_before_any_download(cache, monkeypatch, capsys, tmp_path, tiny):
    """`--dir /sys/kernel` (a folder that exists and takes no file) exited 1 with "cannot write ....part:
    Permission denied; a copy downloaded elsewhere ... put it at /sys/kernel/...", advice that cannot work there:
    it is bad input, known before any download, as a missing folder is (exit 2).  (A planted link at the .part
    name, a file vsr will not write through, stays exit 1 with that advice: the folder takes a copy.)"""
    if os.geteuid() == 0:  # mode bits do not stop root; sysfs takes no new file from anyone
        folder = Path("/sys/kernel")
        if not folder.is_dir():
            pytest.skip("no /sys/kernel to stand for a folder root cannot write")
    else:
        folder = tmp_path / "locked"
        folder.mkdir(mode=0o500)
    with FileServer() as srv:
        srv.files = {"/b.pth": Served(tiny[1])}
        use(monkeypatch, e := entry("tiny", tiny[1], [srv.url("/b.pth")]))
        code, _, err = fetch_cli(capsys, "tiny", "--dir", str(folder))
        assert srv.requests == []
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"vsr: error: cannot write into the folder {folder}: ") and "elsewhere" not in err
    assert not (folder / e.filename).exists() and not (folder / (e.filename + ".part")).exists()
    assert not cache.exists()
