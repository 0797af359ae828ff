"""Thin command-line interface: parse, call one library function, print.

Each subcommand lives in its own module here with ``add_parser(subparsers)`` and ``run(args) -> int``.
Every :class:`vsr.errors.VsrError` becomes one line on stderr and exit code 2; Ctrl-C exits 130, and so do SIGTERM
and SIGHUP, which take its path (:mod:`vsr.interrupt`: a temporary output is removed, a claimed job given back).
"""

from __future__ import annotations

import argparse
import ast
import gc
import importlib
import logging
import os
import re
import signal
import sys
import warnings

# argparse's "invalid choice: 'upscal' (choose from ...)": the word, as a Python literal
_INVALID_CHOICE = re.compile(r"invalid choice: ('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")")
COMMANDS = ("upscale", "preview", "export", "eval", "models", "train", "report", "bench", "jobs")


class _Parser(argparse.ArgumentParser):
    """argparse with vsr's error form, the one every error line has: ``vsr: error: <message>``, exit 2.  A
    subcommand's own errors name it inside the message (``vsr: error: upscale: unrecognized arguments: --foo
    (see 'vsr upscale --help')``), and a misspelt command, action or option gets the closest one (``(did you
    mean '--crf'?)``); ``--help`` still prints the usage.  Options are never abbreviated: argparse's prefix
    matching would take ``--frame`` for ``--frames`` without a word (every subparser is a ``_Parser`` too)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})

    def error(self, message: str):
        command = self.prog.removeprefix("vsr").strip()
        where = f"{command}: " if command else ""
        self.exit(2, f"vsr: error: {where}{message}{self._suggestion(message)} (see '{self.prog} --help')\n")

    def _suggestion(self, message: str) -> str:
        """`` (did you mean 'upscale'?)`` for the word of an "invalid choice" error (a command, an action, a
        choice of an option), from this parser's choices."""
        from vsr.errors import did_you_mean

        m = _INVALID_CHOICE.search(message)
        if m is None:
            return ""
        choices = [c for a in self._actions if a.choices is not None for c in a.choices]
        return did_you_mean(ast.literal_eval(m[1]), choices)

    def parse_args(self, args=None, namespace=None):
        # argparse hands a subcommand's unknown options back to the top parser, whose error would name only
        # 'vsr': the subcommand that was given reports them
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            chosen = self._chosen(parsed)
            option = next((e.partition("=")[0] for e in extras if e[:2] == "--" or e[1:2].isalpha()), None)
            hint = _closest_option(option, chosen._option_string_actions) if option else ""
            chosen.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return parsed

    def _chosen(self, parsed) -> argparse.ArgumentParser:
        """The deepest (sub)command parser that ``parsed`` went through."""
        parser = self
        while True:
            action = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
            name = getattr(parsed, action.dest, None) if action is not None else None
            if name not in getattr(action, "choices", {}):
                return parser
            parser = action.choices[name]


def _closest_option(option: str, options) -> str:
    """`` (did you mean '--crf'?)`` for ``--crff``: names compared without their dashes (every option has them,
    and they would make '--foo' look like '--format')."""
    import difflib

    by_name = {o.lstrip("-"): o for o in options}
    found = difflib.get_close_matches(option.lstrip("-"), by_name, n=1)
    return f" (did you mean {by_name[found[0]]!r}?)" if found else ""


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line, or with ``argv`` only the subcommand it names (where it names one): building
    every subcommand's options imports what their choices come from (``train``'s: torch, seconds), and a run
    of ``vsr upscale`` should say what it is doing within a second."""
    from vsr import __version__

    parser = _Parser(prog="vsr", description="Video super-resolution x4 with EDVR.")
    parser.add_argument("--version", action="version", version=f"vsr {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more (and show tracebacks)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    named = next((a for a in argv or () if not a.startswith("-")), None)
    if named is not None and named not in COMMANDS:  # misspelt: its error names the commands, nothing imported
        for name in COMMANDS:
            sub.add_parser(name)
        return parser
    for name in (named,) if named in COMMANDS else COMMANDS:
        importlib.import_module(f"vsr.cli.{name}").add_parser(sub)
    return parser



def _warning_line(message, category, filename, lineno, file=None, line=None):
    from vsr.errors import printable, tell

    text = str(message)
    if not os.path.abspath(filename).startswith(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))):
        # a library's own paragraph (Celery's to a worker run as root): its words on one line, not its '\n's
        text = " ".join(text.split())
    tell(f"vsr: warning: {printable(text)}")  # (standard error gone: no error of the work's, as Python's own)


def speak_as_vsr(verbose: bool = False) -> None:
    """This process's log and warning lines as ``vsr: ...`` (:func:`main` sets it up; a worker process that the
    CLI spawns calls it too)."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="vsr: %(message)s")
    warnings.showwarning = _warning_line


def main(argv: list[str] | None = None) -> int:
    from vsr import interrupt
    from vsr.errors import VsrError, printable

    _hold_closed_streams()
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    speak_as_vsr(args.verbose)
    try:
        with interrupt.handled():
            try:
                return int(args.func(args) or 0)
            except Exception:
                # a library that caught the stop's KeyboardInterrupt and raised its own error instead (torch's
                # exporter, interrupted in a lazy import, fails on the half-imported module): the stop's exit
                interrupt.check()
                raise
    except VsrError as e:
        if args.verbose:
            raise
        print(f"vsr: error: {printable(e)}", file=sys.stderr)  # a file name may hold a newline or an escape
        return e.exit_code
    except KeyboardInterrupt:
        print("vsr: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _stdout_closed()
    except (MemoryError, OSError) as e:
        if args.verbose:
            raise
        print(f"vsr: error: {type(e).__name__}: {printable(e)}", file=sys.stderr)
        return 1


def _stdout_closed() -> int:
    """The reader of standard output went away (``vsr models | head -1``): stop quietly, with nothing left for
    the interpreter to fail to flush at exit.  Exit 0: what the reader took was what it asked for, and a listing
    small enough for the pipe's buffer never learns that its reader left, so 141 would depend on its length (the
    video stream's reader, ``vsr upscale IN -``, cuts a run short: :class:`vsr.errors.OutputClosed`, 141).  A
    BrokenPipeError from another pipe (stdout's reader still there) keeps 141."""
    code = 0 if _stdout_reader_gone() else 141
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    return code


def _stdout_reader_gone() -> bool:
    """Whether standard output is a pipe or socket whose reader closed it (Linux's poll: POLLERR, POLLHUP)."""
    import select

    try:
        poll = select.poll()
        poll.register(1, select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poll.poll(0))
    except (OSError, ValueError, AttributeError):  # (no poll on this platform: the old answer)
        return False


def _hold_closed_streams() -> None:
    """A standard stream closed when vsr started (``<&-``, ``>&-``: Python's ``sys.stdin``/``sys.stdout`` is
    None) gets /dev/null at its descriptor, so that no file vsr opens later lands on descriptor 0, 1 or 2 and
    is read or written as if it were that stream.  ``sys.stdin``/``sys.stdout`` stay None: a command that needs
    the stream (``vsr upscale - OUT``, ``IN -``) says it is closed (:func:`vsr.video.output.stream_closed`);
    what vsr says on a closed standard error goes nowhere, as asked."""
    streams = ((0, sys.stdin, os.O_RDONLY), (1, sys.stdout, os.O_WRONLY), (2, sys.stderr, os.O_WRONLY))
    for fd, stream, mode in streams:
        if stream is None:
            try:
                os.fstat(fd)
                continue  # taken by now: not ours to replace
            except OSError:
                pass
            null = os.open(os.devnull, mode)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    if sys.stderr is None:  # print(file=None) would write to standard output: into a video stream there (-)
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115 -- /dev/null, for the process's life


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:  # None: closed when vsr started
            stream.flush()


def entry() -> None:
    """The ``vsr`` console script: :func:`main`, then the exit.

    After an interrupt, an inference call may still be running in its (daemon) thread for a while; by then the
    output's temporary file is already gone and the containers are closed.  The normal interpreter shutdown
    would tear down ONNX Runtime's or torch's global state under that call (a native crash), so such a process
    ends with ``os._exit`` once its output streams are flushed; so does any interrupted run (exit 130) with no
    child process left, whose cleanup is done by then.  Once the command is over, a stop signal is ignored: the
    interpreter's teardown after it (0.7-1.6 s with torch, ONNX Runtime and numba loaded) must not turn a
    finished run, its output published, into a process killed by SIGTERM.
    """
    code = 1
    try:
        from vsr import interrupt

        with interrupt.handled(then=signal.SIG_IGN):  # from the start: the imports and parsing too
            code = main()
            if sys.stdout is not None:
                sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
    except KeyboardInterrupt:  # before the command started, or as it ended
        print("vsr: interrupted", file=sys.stderr)
        code = 130
    except BrokenPipeError:
        code = _stdout_closed()
    except SystemExit as e:  # argparse
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    finally:
        runner = sys.modules.get("vsr.pipeline.runner")
        abandoned = runner is not None and runner.infer_still_running()
        # an interrupted run has cleaned up already (its temporary output is gone): the native libraries'
        # teardown after a stop in their midst can still abort the process ("terminate called", SIGABRT)
        if abandoned or (code == 130 and not _children()):
            # the interrupted call's frames (a reference cycle with its traceback) may still hold multiprocessing
            # queues (`vsr train --workers`): collected here, their semaphores are released now, as an exit that
            # skips the interpreter's shutdown would not, and the resource tracker has no leak to warn about
            gc.collect()
            _remove_multiprocessing_folder()
            _flush()
            os._exit(code)
    sys.exit(code)


def _children() -> list:
    """Child processes still alive (``vsr jobs run --workers N``): an exit that skips the interpreter's shutdown
    would not wait for them."""
    mp = sys.modules.get("multiprocessing")
    return mp.active_children() if mp is not None else []


def _remove_multiprocessing_folder() -> None:
    """multiprocessing's folder in the temporary folder (``pymp-*``: the fork server's socket, `vsr train
    --workers`), which its exit handler removes: an exit that skips that handler left it behind for good."""
    process = sys.modules.get("multiprocessing.process")
    folder = process.current_process()._config.get("tempdir") if process is not None else None
    if folder:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
