"""What ``vsr train --exclude`` leaves out of a run's files.

Each exclude is a path fragment, found case-insensitively anywhere in a file's path as ``--data`` spells it
(``vid4``, ``cockatoo``, ``b.mp4``).  And where it names a file or a folder that is there (``../data/x.mp4``, an
absolute path, ``./d/sub/``), that file and every file under that folder too, however ``--data`` spells them:
compared by real path, as a resume compares the files (a fragment alone missed ``--exclude ./d/b.mp4`` beside
``--data d``, and any absolute ``--exclude`` beside a relative ``--data``).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from vsr.errors import InputError

# excluded whatever the user gives (the default of vsr.train.options.TrainOptions.exclude): the validation set;
# never said to leave nothing out (a clone alone has no Vid4)
ALWAYS = ("vid4",)


class Excluded:
    """``Excluded(exclude)(path)``: the exclude that leaves ``path`` out, or None."""

    def __init__(self, exclude: tuple[str, ...]):
        self.fragments = [(x, x.lower()) for x in exclude]
        # (a fragment that is no path here, e.g. the default vid4, is a fragment alone)
        self.paths = [(x, os.path.realpath(x)) for x in exclude if x and os.path.exists(x)]

    def __call__(self, path: Path) -> str | None:
        text = str(path).lower()
        hit = next((x for x, low in self.fragments if low in text), None)
        if hit is not None or not self.paths:
            return hit
        real = os.path.realpath(path)
        return next((x for x, p in self.paths if real == p or real.startswith(p.rstrip(os.sep) + os.sep)), None)


def say_left_out(paths: list, exclude: tuple[str, ...], left_out: list[str], kept: bool) -> None:
    """What a run's excludes did, said: an InputError where they left out every image and video found (``kept``
    False: "no images or videos" of a folder of PNGs misled), a warning for each of the user's that left out
    nothing (a typo: the run would train on the file it was meant to leave out)."""
    where = ", ".join(map(str, paths))
    if not kept and left_out:
        x = left_out[0]
        why = "Vid4 is the validation set, never trained on" if x.lower() == "vid4" else "--exclude"
        how = f"they are {x!r} or under it" if x and os.path.exists(x) else f"their paths hold {x!r}"
        raise InputError(f"nothing to train on in {where}: the images and videos found there ({len(left_out)}) are "
                         f"excluded, as {how} ({why})")
    for x in dict.fromkeys(x for x in exclude if x not in left_out and x.lower() not in ALWAYS):
        warnings.warn(f"--exclude {x!r} leaves out nothing in {where}: no image's or video's path there holds "
                      "it or is under it")
