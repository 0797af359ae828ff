"""What ``vsr train --exclude`` leaves out of a run's files.

Each exclude is a path fragment, found case-insensitively anywhere in a file's path as ``--data`` spells it
(``vid4``, ``cockatoo``, ``b.mp4``).  And where it names a file or a folder that is there (``../data/x.mp4``, an
absolute path, ``./d/sub/``), that file and every file under that folder too, however ``--data`` spells them:
compared by real path, as a resume compares the files (a fragment alone missed ``--exclude ./d/b.mp4`` beside
``--data d``, and any absolute ``--exclude`` beside a relative ``--data``).
"""

from __future__ import annotations

import os
from pathlib import Path


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
