"""The ``vsr`` console script's entry: the CLI's own imports under a Ctrl-C that ends quietly.

:func:`vsr.cli.entry` handles a stop from its first line, but importing :mod:`vsr.cli` (argparse, re, the
standard library's pieces: ~20 ms) comes before it; a Ctrl-C then printed Python's traceback.  Here, nothing is
imported before the guard, and a stop during that import is exit 130 with vsr's one line, as a stop a moment
later is.
"""

import sys


def entry() -> None:
    try:
        from vsr.cli import entry as run
    except KeyboardInterrupt:
        print("vsr: interrupted", file=sys.stderr)
        sys.exit(130)
    run()
