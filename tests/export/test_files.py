"""vsr.files: file checksums, where built engines and fetched weights go, where the configs are read from."""

import hashlib
import importlib.resources
import os
import shutil
import tomllib
from pathlib import Path

import pytest

from vsr.files import config_dir, engine_dir, sha256_file, source_checkout, weights_dir


def test_sha256_file_matches_hashlib(tmp_path):
    p = tmp_path / "x.bin"
    data = bytes(range(256)) * 5000  # more than one read chunk
    p.write_bytes(data)
    assert sha256_file(p) == hashlib.sha256(data).hexdigest()


def _checkout(root, git=True, pyproject=True, engines=True):
    root.mkdir()
    if git:
        (root / ".git").write_text("gitdir: elsewhere\n")  # a worktree's .git is a file
    if pyproject:
        (root / "pyproject.toml").write_text("[project]\nname = 'vsr'\n")
    if engines:
        (root / "engines").mkdir()
    return root


def test_engine_dir_env_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("VSR_ENGINE_DIR", str(tmp_path / "custom"))
    assert engine_dir(_checkout(tmp_path / "repo")) == tmp_path / "custom"


def test_engine_dir_is_the_checkouts_engines_when_running_from_source(tmp_path, monkeypatch):
    monkeypatch.delenv("VSR_ENGINE_DIR", raising=False)
    root = _checkout(tmp_path / "repo")
    assert source_checkout(root)
    assert engine_dir(root) == root / "engines"


def test_engine_dir_is_the_user_cache_elsewhere(tmp_path, monkeypatch):
    monkeypatch.delenv("VSR_ENGINE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name, kw in [("no-git", {"git": False}), ("no-pyproject", {"pyproject": False}),
                     ("no-engines", {"engines": False})]:
        root = _checkout(tmp_path / name, **kw)
        assert not source_checkout(root)
        assert engine_dir(root) == tmp_path / "cache" / "vsr" / "engines"


def test_engine_dir_falls_back_to_home_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("VSR_ENGINE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    site = tmp_path / "site-packages"
    site.mkdir()
    assert engine_dir(site) == tmp_path / "home" / ".cache" / "vsr" / "engines"


def _user_namespaces() -> bool:
    """Whether a process can run as a user id with no passwd entry here (a user namespace: ``unshare``)."""
    import subprocess

    try:
        return subprocess.run(["unshare", "--user", "--map-user=12345", "--map-group=12345", "true"],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.parametrize("home", ["relative", "unset"])
def test_no_home_is_one_line_naming_what_to_set_and_no_folder_named_tilde(tmp_path, home):
    """HOME unset under a uid with no passwd entry (a container's ``--user 12345``), or relative: ``Path.home()``
    raised RuntimeError (a traceback from ``vsr jobs list``) and ``expanduser("~")`` gave ``~``, so ``vsr export``
    made ``./~/.cache/vsr/torchinductor`` in the current folder.  Commands that keep nothing still run."""
    import subprocess
    import sys

    if home == "unset" and not _user_namespaces():
        pytest.skip("no user namespaces here (unshare --user)")
    work, tmp = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME",
                                                            "TORCHINDUCTOR_CACHE_DIR", "VSR_JOBS_STORE", "VSR_JOBS")}
    env.update(TMPDIR=str(tmp), **({"HOME": "nohome"} if home == "relative" else {}))
    prefix = [] if home == "relative" else ["unshare", "--user", "--map-user=12345", "--map-group=12345"]

    def vsr(*args):
        return subprocess.run([*prefix, sys.executable, "-m", "vsr", *args], capture_output=True, text=True,
                              env=env, cwd=work, timeout=600)

    for args, names in [(["export", "--weights", "random", "--config", "edvr-tiny", "--height", "16", "--width",
                          "16", "--out", "m.onnx"], "TORCHINDUCTOR_CACHE_DIR, XDG_CACHE_HOME or HOME"),
                        (["jobs", "list"], "VSR_JOBS_STORE, XDG_DATA_HOME or HOME")]:
        p = vsr(*args)
        last = p.stderr.strip().splitlines()[-1]
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        assert last.startswith("vsr: error: no home folder") and last.endswith(f": set {names}"), last
    assert sorted(os.listdir(work)) == [] and os.listdir(tmp) == []  # no ./~, no /tmp/torchinductor_*
    for args in (["--help"], ["upscale", "--help"]):
        assert vsr(*args).returncode == 0


def test_the_caches_without_a_home_name_their_own_variable(tmp_path, monkeypatch):
    from vsr.errors import InputError
    from vsr.files import user_data_dir

    for name in ("VSR_ENGINE_DIR", "VSR_WEIGHTS_DIR", "XDG_CACHE_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", "relative")
    monkeypatch.chdir(tmp_path)
    site = tmp_path / "site-packages"  # an installed vsr: its engines in the user's cache
    site.mkdir()
    for call, names in [(lambda: engine_dir(site), "VSR_ENGINE_DIR, XDG_CACHE_HOME or HOME"),
                        (weights_dir, "VSR_WEIGHTS_DIR, XDG_CACHE_HOME or HOME"),
                        (user_data_dir, "XDG_DATA_HOME or HOME")]:
        with pytest.raises(InputError, match="HOME=relative is not an absolute path") as e:
            call()
        assert str(e.value).endswith(f": set {names}")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # what the line asks for is enough
    assert engine_dir(site) == tmp_path / "cache" / "vsr" / "engines"
    assert sorted(os.listdir(tmp_path)) == ["site-packages"]



def test_an_empty_home_is_the_password_databases_not_the_root_folder(tmp_path, monkeypatch):
    """HOME set but empty: Python's ``~`` is ``/``, so vsr kept its caches in /.cache/vsr (as root: written there)
    and torch's inductor cache was /.cache/vsr/torchinductor; the password database's home as with HOME unset."""
    import pwd
    import subprocess
    import sys

    from vsr.files import user_cache_dir, user_data_dir

    for name in ("XDG_CACHE_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", "")
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    assert user_cache_dir() == home / ".cache" / "vsr" and user_data_dir() == home / ".local" / "share" / "vsr"
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME")}
    p = subprocess.run([sys.executable, "-c", "import os, vsr; print(os.environ.get('TORCHINDUCTOR_CACHE_DIR'))"],
                       capture_output=True, text=True, env={**env, "HOME": ""}, cwd=tmp_path, timeout=120)
    assert p.returncode == 0 and not p.stdout.startswith("/.cache"), p.stdout + p.stderr

# ---- configuration files: one resolver, shipped in the package ------------------------------------------------

REPO = Path(__file__).resolve().parents[2]


def test_config_dir_is_the_installed_vsr_configs_package(monkeypatch):
    monkeypatch.delenv("VSR_CONFIG_DIR", raising=False)
    root = config_dir()
    assert root == importlib.resources.files("vsr.configs")
    for rel in ("edvr-m.toml", "plan/buckets.toml", "pipeline/scenes.toml", "degrade/mix.toml"):
        assert (root / rel).is_file(), rel


def test_an_editable_install_older_than_vsr_configs_still_finds_the_checkouts_configs(monkeypatch):
    import vsr.files

    def no_such_package(name):
        raise ModuleNotFoundError(f"No module named {name!r}")

    monkeypatch.delenv("VSR_CONFIG_DIR", raising=False)
    monkeypatch.setattr(vsr.files.importlib.resources, "files", no_such_package)
    assert config_dir() == REPO / "configs"


def test_every_config_and_data_file_is_package_data_of_the_wheel():
    """pyproject's package-data globs must cover every TOML under configs/ and every file under vsr/ that is not
    Python: a file they miss is absent from an installed vsr (scripts/check_wheel.sh finds that only in CI)."""
    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert tool["package-dir"]["vsr.configs"] == "configs"
    shipped = {p for pattern in tool["package-data"]["vsr.configs"] for p in (REPO / "configs").glob(pattern)}
    assert set((REPO / "configs").rglob("*.toml")) == shipped
    data = {p for p in (REPO / "vsr").rglob("*") if p.is_file() and p.suffix != ".py" and "__pycache__" not in p.parts}
    assert data <= {p for pattern in tool["package-data"]["vsr"] for p in (REPO / "vsr").glob(pattern)}


def test_every_config_loader_reads_through_config_dir(tmp_path, monkeypatch):
    """Model configs, shape buckets, scene-cut rule and degradations all follow VSR_CONFIG_DIR."""
    from vsr.backends.buckets import BucketPolicy
    from vsr.model.config import list_configs, load_config
    from vsr.pipeline.scenes import CutRule
    from vsr.train.degrade import load_degrade

    copy = tmp_path / "configs"
    shutil.copytree(REPO / "configs", copy)
    (copy / "edvr-m.toml").rename(copy / "edvr-x.toml")
    (copy / "plan" / "buckets.toml").write_text("sizes = [[64, 96]]\nalign = 8\n")
    (copy / "pipeline" / "scenes.toml").write_text("threshold = 7.5\nmin_score = 2\n")
    mix = copy / "degrade" / "mix.toml"
    mix.write_text(mix.read_text().replace('name = "mix"', 'name = "mixed-here"'))
    monkeypatch.setenv("VSR_CONFIG_DIR", str(copy))
    assert "edvr-x" in list_configs() and "edvr-m" not in list_configs()
    assert load_config("edvr-x").num_feat == 64
    assert BucketPolicy.load().sizes == ((64, 96),) and BucketPolicy.load().align == 8
    assert CutRule.load() == CutRule(7.5, 2.0)
    assert load_degrade("mix").name == "mixed-here"


def test_weights_dir_is_the_user_cache_unless_set(tmp_path, monkeypatch):
    monkeypatch.delenv("VSR_WEIGHTS_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert weights_dir() == tmp_path / "xdg" / "vsr" / "weights"
    monkeypatch.setenv("VSR_WEIGHTS_DIR", str(tmp_path / "w"))
    assert weights_dir() == tmp_path / "w"


def test_not_writable_probes_without_following_a_planted_link_or_leaving_anything(tmp_path):
    import os

    from vsr.files import not_writable

    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file\n")
    folder = tmp_path / "out"
    folder.mkdir()
    os.symlink(victim, folder / f".vsr-write-test-{os.getpid()}")  # planted at the probe's name
    assert not_writable(folder) is None
    assert victim.read_text() == "the user's file\n" and os.listdir(folder) == []
    (folder / f".vsr-write-test-{os.getpid()}").write_text("")  # one left by a killed process of this id
    assert not_writable(folder) is None and os.listdir(folder) == []
    if os.geteuid() != 0:  # root writes anywhere
        folder.chmod(0o500)
        try:
            assert not_writable(folder) == "Permission denied"
        finally:
            folder.chmod(0o700)
    assert not_writable(tmp_path / "missing") == "No such file or directory"


def test_create_new_makes_its_own_file_whatever_is_planted_at_the_name(tmp_path):
    """The one creator of vsr's temporaries (the probe, report and page files, a video's partial output): a link
    at the name is removed, never followed (a dangling one included: O_CREAT alone would create its target)."""
    import os

    import pytest

    from vsr.files import create_new

    victim, name = tmp_path / "victim.txt", tmp_path / f".x-{os.getpid()}"
    victim.write_text("the user's file\n")
    for target in (victim, tmp_path / "nowhere.txt"):
        os.symlink(target, name)
        fd = create_new(name)
        os.write(fd, b"vsr's")
        os.close(fd)
        assert not name.is_symlink() and name.read_bytes() == b"vsr's"
        name.unlink()
    assert victim.read_text() == "the user's file\n" and not (tmp_path / "nowhere.txt").exists()
    name.mkdir()  # not an entry it may remove: the system's error, the folder kept
    with pytest.raises(OSError):
        create_new(name)
    assert name.is_dir()


def test_the_export_leaves_nothing_in_the_temporary_folder(tmp_path):
    """torch's dynamo made /tmp/torchinductor_USER (a predictable shared name) as the exporter imported it: its
    cache goes to vsr's cache folder."""
    import os
    import subprocess
    import sys

    tmp, cache = tmp_path / "tmp", tmp_path / "cache"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), XDG_CACHE_HOME=str(cache))
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    p = subprocess.run([sys.executable, "-m", "vsr", "export", "--weights", "random", "--config", "edvr-tiny",
                        "--height", "16", "--width", "16", "--out", str(tmp_path / "m.onnx")], capture_output=True,
                       text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    assert list(tmp.iterdir()) == [] and (cache / "vsr" / "torchinductor").is_dir()


def _members(gid: int) -> tuple[set[int], set[str]]:
    """The users whose primary group ``gid`` is, and the names listed in it: the system's databases as read."""
    import grp
    import pwd
    return {p.pw_uid for p in pwd.getpwall() if p.pw_gid == gid}, set(grp.getgrgid(gid).gr_mem)


def test_a_folder_writable_by_the_users_own_group_alone_is_trusted_one_shared_is_not(tmp_path, shared_group):
    """Debian's and Ubuntu's users have a group of their own and umask 002: every folder they make is mode 775,
    and a VSR_ENGINE_DIR they made was refused.  A group-writable folder is trusted where its group holds this
    user alone (OpenSSH's rule as Debian keeps it), never where the group has other users or no user at all."""
    import grp
    import os

    from vsr.files import untrusted

    me, mine = os.geteuid(), os.getegid()
    folder = tmp_path / "engines"
    folder.mkdir(mode=0o775)
    folder.chmod(0o775)
    primary, listed = _members(mine)
    alone = primary <= {me} and not listed - {__import__("pwd").getpwuid(me).pw_name}
    assert untrusted(folder) == (None if alone else "other users can write to it (mode 775)")
    os.chown(folder, -1, shared_group)  # another user's primary group
    assert untrusted(folder) == "other users can write to it (mode 775)"
    folder.chmod(0o757)
    assert untrusted(folder) == "other users can write to it (mode 757)"
    empty = [g.gr_gid for g in grp.getgrall() if _members(g.gr_gid) == (set(), set())]
    if me == 0 and empty:  # a group with nobody in it (a setgid program's): not this user's own
        os.chown(folder, -1, empty[0])
        folder.chmod(0o775)
        assert untrusted(folder) == "other users can write to it (mode 775)"
