"""The frames of a folder of PNG files, in the order their names number them.

FFmpeg's ``%d.png`` names frames 1.png ... 12.png, which text order reads 1, 10, 11, 12, 2, ...: a video
scrambled in time.  Where every name is one pattern -- the same text before and after a number -- the number
orders the frames, and a number missing between the first and the last (or two files for one number) is an
error naming it: closing the gap up would move every later frame in time.  Other names: natural order (runs of
digits compared as numbers).
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


def png_paths(folder: Path) -> list[Path]:
    """The PNG files of ``folder``, their suffix in any case (a camera's or a Windows tool's ``.PNG`` made the
    folder one of no frames), in no order."""
    return list(Path(folder).glob("*.[pP][nN][gG]"))


def frame_files(folder: Path, gaps: bool = False) -> list[Path]:
    """The ``*.png`` of ``folder`` (:func:`png_paths`) in frame order (see the module's docstring); [] where there
    is none.  ``gaps``: numbers may be missing (a folder read as a set of frames paired by name, not as a video)."""
    files = png_paths(folder)
    for p in files:  # (a named pipe waited for ever for a writer, and no Ctrl-C reached the read)
        kind = special_kind(p.stat().st_mode) if p.exists() else None
        if kind is not None:
            raise InputError(f"{p} is {kind}, not a PNG frame")
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
