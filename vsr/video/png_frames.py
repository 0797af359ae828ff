"""The frames of a folder of picture files (PNG, JPEG, TIFF, BMP, WebP: :data:`FRAME_KINDS`), in the order their
names number them.

FFmpeg's ``%d.png`` names frames 1.png ... 12.png, which text order reads 1, 10, 11, 12, 2, ...: a video
scrambled in time.  Where every name is one pattern -- the same text before and after a number -- the number
orders the frames, and a number missing between the first and the last (or two files for one number) is an
error naming it: closing the gap up would move every later frame in time.  Other names: natural order (runs of
digits compared as numbers).  A folder holds one kind of picture: frames of two kinds (``1.png`` beside
``2.jpg``) are an error naming both, never a pick of one of them.
"""

from __future__ import annotations

import re
from pathlib import Path

from vsr.errors import InputError
from vsr.files import special_kind

_NUMBERED = re.compile(r"^(.*?)(\d+)(\D*)$")  # a stem's text, its last run of digits, what follows


def natural_key(name: str) -> list:
    """``name``'s text with each run of digits as a number: ``f2`` before ``f10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


# The pictures a folder of frames may hold, by suffix (any case), and the kind each is: what ffmpeg -i x.mp4
# %04d.jpg, a camera's time-lapse or a VFX pipeline's TIFFs make, beside PNG
FRAME_KINDS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".tif": "TIFF", ".tiff": "TIFF", ".bmp": "BMP",
               ".webp": "WebP"}
KIND_NAMES = "PNG, JPEG, TIFF, BMP or WebP"  # (what a message names for them)


def frame_kind(path: Path) -> str | None:
    """The kind of picture ``path`` names by its suffix (``"PNG"``, ``"JPEG"``, ...); None: no frame's suffix."""
    name = Path(path).name.lower()
    return FRAME_KINDS.get(name[name.rfind("."):]) if "." in name else None


def one_picture(path: Path) -> bool:
    """Whether ``path`` is a regular file of one picture by its suffix (:data:`FRAME_KINDS`): not an animation
    (an animated WebP, an APNG named ``.png``), which FFmpeg reads as a video."""
    from vsr.video.animation import plays_of
    from vsr.video.webp_source import is_animated_webp

    path = Path(path)
    if frame_kind(path) is None or not path.is_file() or is_animated_webp(path):
        return False
    return frame_kind(path) != "PNG" or plays_of(path, "apng") is None


def frame_paths(folder: Path) -> list[Path]:
    """The frame files of ``folder`` (:data:`FRAME_KINDS`, their suffix in any case), in no order; frames of two
    kinds are an :class:`InputError` naming both."""
    files = [p for p in Path(folder).glob("*") if frame_kind(p) is not None]
    kinds: dict[str, Path] = {}
    for p in sorted(files, key=lambda p: natural_key(p.name)):
        kinds.setdefault(frame_kind(p), p)
    if len(kinds) > 1:
        (a, pa), (b, pb) = list(kinds.items())[:2]
        raise InputError(f"{folder} holds {a} frames ({pa.name}) and {b} frames ({pb.name}): a folder of frames "
                         f"is one kind of picture; move the others out")
    return files


def frame_files(folder: Path, gaps: bool = False) -> list[Path]:
    """The frames of ``folder`` (:func:`frame_paths`) in frame order (see the module's docstring); [] where there
    is none.  ``gaps``: numbers may be missing (a folder read as a set of frames paired by name, not as a video)."""
    files = frame_paths(folder)
    for p in files:  # (a named pipe waited for ever for a writer, and no Ctrl-C reached the read)
        kind = special_kind(p.stat().st_mode) if p.exists() else None
        if kind is not None:
            raise InputError(f"{p} is {kind}, not a {frame_kind(p)} frame")
    matches = [(_NUMBERED.match(p.stem), p) for p in files]
    if not files or not all(m for m, _ in matches) or len({(m[1], m[3]) for m, _ in matches}) != 1:
        return sorted(files, key=lambda p: natural_key(p.name))
    numbered = sorted((int(m[2]), p.name, p) for m, p in matches)
    for (a, name_a, _), (b, name_b, _) in zip(numbered, numbered[1:]):
        if a == b:
            raise InputError(f"{folder}: {name_a} and {name_b} both number frame {a}")
        if b != a + 1 and not gaps:
            missing = f"frame {a + 1}" if b == a + 2 else f"frames {a + 1} to {b - 1}"
            raise InputError(f"{folder}: {missing} missing ({name_a} is followed by {name_b}); every later frame "
                             f"would move earlier in time: add the missing frames or number the files without a gap")
    return [p for _, _, p in numbered]
