"""Errors a user can act on.  The CLI prints ``str(err)`` on one line and exits 2."""


class VsrError(Exception):
    """Base class of every error vsr raises on purpose."""

    exit_code = 2


class InputError(VsrError):
    """A path, file or option given by the user is unusable (missing, unreadable, wrong kind)."""


class WeightsError(VsrError):
    """A checkpoint cannot be loaded into the chosen configuration."""


class ConfigError(VsrError):
    """A model configuration is unknown or malformed."""


class BackendError(VsrError):
    """An inference backend is unavailable or failed to build."""


class MemoryBudgetError(InputError):
    """A run cannot fit its ``--memory-budget``; the message names a budget (or a smaller setting) that would."""


class BrokerError(VsrError):
    """The job broker (``--broker redis://...``) is unreachable, or its URL is not one vsr can use."""


class DownloadError(VsrError):
    """A download did not give the published file: the server failed, stalled or refused, or the file's sha256 is
    not the published one.  Not the user's input: running the command again may succeed (it resumes)."""

    exit_code = 1


class OutputError(VsrError):
    """An output could not be written: its disk is full, a quota is exceeded, the file system failed.  Not the
    user's input: the same command may succeed once there is room.  The message names the output."""

    exit_code = 1


class OutputClosed(VsrError):
    """The reader of an output stream (``vsr upscale IN -``) closed it before the end: the run stopped there."""

    exit_code = 141  # as a command-line tool stopped by SIGPIPE


def printable(text: object) -> str:
    """``text`` safe to print on one terminal line: control characters (newlines, escape sequences, ...) shown
    as Python escapes (``\\n``, ``\\x1b``), never sent; everything else as it is."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def tell(line: str) -> None:
    """``line`` on standard error (a status, a warning, a worker's news), flushed.  Standard error gone (its
    pipe's reader ended: a killed ``vsr jobs run`` whose workers finish their claim, ``2>&1 | head``; closed) is
    not the work's error: the line is lost, the work goes on (as Python's own warnings do)."""
    import sys

    try:
        # one write: print writes the text, then its newline, and a stop between the two ran `vsr: interrupted`
        # onto this line
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def did_you_mean(word: str, choices) -> str:
    """`` (did you mean 'real'?)`` for the choice closest to ``word`` (difflib's ratio 0.6 or more), else ``""``:
    the tail of an error message about an unknown name."""
    import difflib

    found = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1)
    return f" (did you mean {found[0]!r}?)" if found else ""
