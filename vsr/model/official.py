"""The official EDVR checkpoints: what each is, where it is published, where vsr keeps it once fetched.

This table is the one place their names, URLs and digests live.  A checkpoint is recognised by its sha256
wherever it comes from (:func:`vsr.model.weights.identify_official`), fetched by its short name
(``vsr models fetch NAME``, :func:`fetch`) and then loaded by that name (``--weights NAME``,
:func:`vsr.model.weights.weights_path`).  Nothing is ever downloaded unless asked for.

Sources (each entry's ``source`` says which):

- BASICSR: the EDVR authors' own release.  File names, and the Google Drive file ids they are published under:
  XPixelGroup/BasicSR ``scripts/download_pretrained_models.py`` (commit ddaadd86a4c930bd9e00a4bdbf4446f1e2f636a3);
  architectures ``options/test/EDVR/*.yml`` and figures ``docs/ModelZoo.md`` (commit 8d56e3a0).  The file
  name ends in the first 8 hex digits of the file's sha256.
- CCRESTORATION: plain HTTPS copies of two of those files in TensoRaws/ccrestoration's ``model_zoo`` release,
  with their full sha256 (``ccrestoration/config/edvr_config.py``, commit ef11d44f): the digest equals
  BasicSR's published prefix, so they are the same files and a mirror, tried first (no Google Drive quota).
- MMAGIC: OpenMMLab's own trainings of EDVR on REDS (different files, slightly different figures), at plain
  HTTPS URLs whose names end in the first 8 hex digits of the sha256: open-mmlab/mmagic
  ``configs/edvr/README.md`` (commit 31d5ab53) and ``configs/edvr/metafile.yml`` (commit 146c7c13).  Their
  checkpoints store the generator under ``state_dict`` with mmagic's key names (mapped on load).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from vsr.errors import DownloadError, InputError
from vsr.files import sha256_file, untrusted, weights_dir

BASICSR = "XPixelGroup/BasicSR scripts/download_pretrained_models.py @ ddaadd86, docs/ModelZoo.md @ 8d56e3a0"
CCRESTORATION = "TensoRaws/ccrestoration ccrestoration/config/edvr_config.py @ ef11d44f (full sha256, mirror)"
MMAGIC = "open-mmlab/mmagic configs/edvr/README.md @ 31d5ab53, configs/edvr/metafile.yml @ 146c7c13"


def _drive(file_id: str) -> str:
    """Google Drive's download address of a file id (large files answer with a confirm page first, which
    :mod:`vsr.model.download` follows)."""
    return f"https://drive.google.com/uc?export=download&id={file_id}"


_CCR = "https://github.com/TensoRaws/ccrestoration/releases/download/model_zoo/"
_MMAGIC = "https://download.openmmlab.com/mmediting/restorers/edvr/"


@dataclass(frozen=True)
class OfficialCheckpoint:
    """One published checkpoint: its short ``name`` (``--weights NAME``), the ``filename`` it is published and
    kept under, the vsr ``config`` it fits, its ``sha256`` (None where only the 8-digit ``prefix`` in the file
    name is published), the published figure ``psnr``, the ``urls`` it is fetched from (in order; all serve
    the same bytes) and the ``source`` that publishes them."""

    name: str
    filename: str
    config: str
    sha256: str | None
    prefix: str
    psnr: str
    urls: tuple[str, ...]
    source: str

    @property
    def digest(self) -> str:
        """What a fetched file's sha256 must be (or start with, where only the prefix is published)."""
        return self.sha256 or self.prefix

    @property
    def hosts(self) -> str:
        return ", ".join(dict.fromkeys(urlsplit(u).hostname or u for u in self.urls))


OFFICIAL = (
    OfficialCheckpoint("edvr-m-reds", "EDVR_M_x4_SR_REDS_official-32075921.pth", "edvr-m",
                       "32075921635eb07d56c83ec4009341bd82d882900ca7043f9c51cc7951033efd", "32075921",
                       "REDS4 30.53 dB / 0.8699 (RGB)",
                       (_CCR + "EDVR_M_SR_REDS_official_4x.pth", _drive("1dd6aFj-5w2v08VJTq5mS9OFsD-wALYD6")),
                       f"{BASICSR}; {CCRESTORATION}"),
    OfficialCheckpoint("edvr-m-wotsa-reds", "EDVR_M_woTSA_x4_SR_REDS_official-1edf645c.pth", "edvr-m-wotsa",
                       "1edf645c117ba34ea1c7fcf5506079cf9dd361c2bd26b6f3cad9197a0ba7adbf", "1edf645c",
                       "none in BasicSR's ModelZoo (mmagic's own woTSA training: REDS4 30.34 dB RGB)",
                       (_CCR + "EDVR_M_woTSA_SR_REDS_official_4x.pth", _drive("1C_WdN-NyNj-P7SOB5xIVuHl4EBOwd-Ny")),
                       f"{BASICSR}; {CCRESTORATION}"),
    OfficialCheckpoint("edvr-l-reds", "EDVR_L_x4_SR_REDS_official-9f5f5039.pth", "edvr-l", None, "9f5f5039",
                       "REDS4 31.09 dB / 0.8800 (RGB)", (_drive("127KXEjlCwfoPC1aXyDkluNwr9elwyHNb"),), BASICSR),
    OfficialCheckpoint("edvr-l-vimeo90k", "EDVR_L_x4_SR_Vimeo90K_official-162b54e4.pth", "edvr-l-7f", None,
                       "162b54e4", "Vid4 27.35 dB / 0.8264 (Y)", (_drive("1aVR3lkX6ItCphNLcT7F5bbbC484h4Qqy"),),
                       BASICSR),
    OfficialCheckpoint("edvr-m-reds-mmagic", "edvrm_x4_8x4_600k_reds_20210625-e29b71b5.pth", "edvr-m", None,
                       "e29b71b5", "REDS4 30.4194 dB / 0.8684 (RGB)",
                       (_MMAGIC + "edvrm_x4_8x4_600k_reds_20210625-e29b71b5.pth",), MMAGIC),
    OfficialCheckpoint("edvr-m-wotsa-reds-mmagic", "edvrm_wotsa_x4_8x4_600k_reds_20200522-0570e567.pth",
                       "edvr-m-wotsa", None, "0570e567", "REDS4 30.3430 dB / 0.8664 (RGB)",
                       (_MMAGIC + "edvrm_wotsa_x4_8x4_600k_reds_20200522-0570e567.pth",), MMAGIC),
    OfficialCheckpoint("edvr-l-reds-mmagic", "edvrl_c128b40_8x8_lr2e-4_600k_reds4_20220104-4509865f.pth", "edvr-l",
                       None, "4509865f", "REDS4 31.0467 dB / 0.8793 (RGB)",
                       (_MMAGIC + "edvrl_c128b40_8x8_lr2e-4_600k_reds4_20220104-4509865f.pth",), MMAGIC),
    OfficialCheckpoint("edvr-l-wotsa-reds-mmagic", "edvrl_wotsa_c128b40_8x8_lr2e-4_600k_reds4_20211228-d895a769.pth",
                       "edvr-l-wotsa", None, "d895a769", "REDS4 31.0010 dB / 0.8784 (RGB)",
                       (_MMAGIC + "edvrl_wotsa_c128b40_8x8_lr2e-4_600k_reds4_20211228-d895a769.pth",), MMAGIC),
)


def official_names() -> tuple[str, ...]:
    return tuple(o.name for o in OFFICIAL)


def find_official(name: str) -> OfficialCheckpoint | None:
    """The checkpoint whose short name is ``name``, or None."""
    return next((o for o in OFFICIAL if o.name == name), None)


def fetched_path(ckpt: OfficialCheckpoint, folder: Path | None = None) -> Path:
    """Where ``ckpt`` is kept once fetched: ``folder`` (``--dir``), else :func:`vsr.files.weights_dir`."""
    return Path(folder if folder is not None else weights_dir()) / ckpt.filename


def check_weights_folder(path: Path | None = None, verb: str = "load weights from") -> None:
    """The weights folder (:func:`vsr.files.weights_dir`), and ``path``, a checkpoint in it, held to the caches'
    rule (:func:`vsr.files.untrusted`): this user's, and no other user can write them.  What is loaded from there
    decides the output's pixels (and a published 8-digit digest prefix is no guard against a file made to match
    it); one :class:`InputError` line naming the folder and the variable that moves it.  A ``--weights FILE``
    or a ``--dir`` the user names is theirs to choose: not checked."""
    folder = weights_dir()
    for where in (folder, path) if path is not None else (folder,):
        why = untrusted(where)
        if why is not None:
            what = "" if where == folder else f"{where.name}: "
            raise InputError(f"will not {verb} {folder}: {what}{why}; what is loaded from there decides your output "
                             "(make it yours, writable by you alone: vsr makes the folder mode 0700; or set "
                             "VSR_WEIGHTS_DIR to a folder of yours alone)")


def fetch(name: str, folder: Path | None = None, *, timeout: float = 30.0, quiet: bool = False) -> tuple[Path, bool]:
    """Download the checkpoint ``name`` into ``folder`` (None: the weights cache) unless a verified copy is
    there; returns ``(path, downloaded)``.  Resumes an interrupted download; a file whose sha256 is not the
    published one is deleted and reported (:class:`vsr.errors.DownloadError`), never renamed into place."""
    from vsr.model.download import download

    ckpt = find_official(name)
    if ckpt is None:
        raise InputError(f"unknown official checkpoint {name!r} (known: {', '.join(official_names())}, or all)")
    dest = fetched_path(ckpt, folder)
    if folder is None and os.path.lexists(dest.parent):
        check_weights_folder(dest if os.path.lexists(dest) else None, "keep fetched weights in")
    if fetched_state(ckpt, folder) == DOWNLOADED:
        return dest, False
    try:
        # the weights folder made this user's alone (mode 0700), as the caches are: the loader holds it to that
        return download(ckpt.urls, dest, ckpt.digest, timeout=timeout, label=ckpt.name, quiet=quiet,
                        folder_mode=0o700 if folder is None else 0o777), True
    except DownloadError as e:
        raise DownloadError(f"{e}; {elsewhere(ckpt, folder)}") from None


DOWNLOADED, CORRUPT, MISSING = "downloaded", "corrupt", "missing"


def fetched_state(ckpt: OfficialCheckpoint, folder: Path | None = None) -> str:
    """Whether ``ckpt`` is at :func:`fetched_path`: :data:`DOWNLOADED` (its sha256 is the published one),
    :data:`CORRUPT` (a file there whose sha256 is not: cut short, damaged, or another file under its name) or
    :data:`MISSING`."""
    path = fetched_path(ckpt, folder)
    if not path.is_file():
        return MISSING
    try:
        return DOWNLOADED if sha256_file(path).startswith(ckpt.digest) else CORRUPT
    except OSError:
        return CORRUPT


def elsewhere(ckpt: OfficialCheckpoint, folder: Path | None = None) -> str:
    """How to install ``ckpt`` downloaded by other means, in a clause of a sentence."""
    return (f"a copy downloaded elsewhere (a browser, another machine: {ckpt.urls[0]}) works as well: put it at "
            f"{fetched_path(ckpt, folder)}")
