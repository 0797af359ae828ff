"""vsr.files: file checksums and where built engines go."""

import hashlib

from vsr.files import engine_dir, sha256_file, source_checkout


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
