"""Whether a source is damaged: bytes overwritten in a file's middle (a bad sector, a broken download resumed
in the wrong place) are decoded without an error raised.  FFmpeg's demuxer skips what it cannot parse (a
Matroska cluster: frames missing, a silent gap in time) and its decoder conceals what it cannot decode (a frame
flagged corrupt); both only log an error line, and PyAV's log is off by default.

So while a source decodes, :class:`Damage` counts the frames flagged corrupt and the error-level lines its
demuxer and decoder log (by their names: a frame-threaded decoder logs from FFmpeg's own threads, which only a
process-wide capture hears), and the run says one line at its end.  Nothing is done per frame while nothing is
logged; lines of other names are handed on to Python's logging where PyAV's level asked for them, as PyAV would
have.  Only errors count: FFmpeg's warnings about a whole file are not damage.

PyAV gives a line's name, not the context that logged it, so two sources decoded at once in one process would
count each other's lines (of one demuxer or decoder name).  None is: each command decodes one source at a time
(``vsr jobs run --workers N`` runs a process each), and the run's own second reader of its source, the encode
stage's copy of its audio and subtitles, logs under :func:`unwatched` (it counted the damaged bytes again).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from fractions import Fraction

import av
import av.logging

_lock = threading.Lock()
_users = 0
_shared: dict = {}  # while any source decodes: the capture's ``logs``, and what it changed to restore
_watchers: list["Damage"] = []
# what a demuxer logs as an error of a file that is only cut short, not damaged: an early end, which
# vsr.video.ends says (or a preview, in its own words): Matroska's, MP4's of each sample its data lacks, NUT's
# opening of a file whose end (its index, its last timestamps) is missing
CUT_LINES = ("File ended prematurely", ": partial file", "read_timestamp failed")
# packets in a row the decoder may refuse before the source is taken as undecodable, not damaged
REFUSED_IN_A_ROW = 64


class Damage:
    """What a source's decode met: ``frames`` flagged corrupt, ``errors`` error lines of its demuxer or decoder
    (``names``: theirs, FFmpeg's), the first of those lines and where (seconds into the source) the first sign
    was.  A context (entered once, in the decoding thread); :meth:`frame` sees each frame decoded."""

    def __init__(self, names: set[str], before: "Damage | None" = None, keep: bool = False,
                 demuxer: str | None = None):
        self.names = names
        self.demuxer = demuxer  # (of ``names``, the demuxer's: its lines are the file's structure broken)
        self.demuxer_errors = 0
        self.kept: list[str] | None = [] if keep else None  # ``keep``: the lines counted (a stream's probe)
        self.frames = self.errors = 0
        self.first_s: float | None = None
        self.first_line: str | None = None
        if before is not None:  # (a watch of the frames a stream was probed with: they are not decoded again)
            self.frames, self.errors, self.first_s, self.first_line = (before.frames, before.errors, before.first_s,
                                                                       before.first_line)
            self.demuxer_errors = before.demuxer_errors
        self.logs: list = []
        self.counting = True  # (lines logged while frames before the run's first decode are not the run's)

    def __enter__(self) -> "Damage":
        global _users
        with _lock:
            if not _users:
                _shared["level"], _shared["skip"] = av.logging.get_level(), av.logging.get_skip_repeated()
                level = _shared["level"]
                av.logging.set_level(av.logging.ERROR if level is None else max(level, av.logging.ERROR))
                av.logging.set_skip_repeated(False)  # each line counts
                _shared["capture"] = capture = av.logging.Capture(local=False)
                _shared["logs"] = capture.__enter__()
            _users += 1
            _watchers.append(self)
            self.logs = _shared["logs"]
        return self

    def __exit__(self, *_exc) -> None:
        global _users
        with _lock:
            _drain()
            _watchers.remove(self)
            _users -= 1
            if not _users:
                _shared["capture"].__exit__(None, None, None)
                av.logging.set_skip_repeated(_shared["skip"])
                av.logging.set_level(_shared["level"])
                _shared.clear()
        self.logs = []

    def frame(self, frame: av.VideoFrame, seconds: float, counted: bool = True) -> None:
        """A decoded frame, ``seconds`` into the source: counted where flagged corrupt, and the lines logged
        before it drained (the first of them placed here); ``counted``: False for a frame before the run's."""
        self.counting = counted
        if frame.is_corrupt and counted:
            self.frames += 1
            self._first(seconds)
        if self.logs:
            errors = self.errors
            with _lock:
                _drain()
            if self.errors > errors:
                self._first(seconds)

    def opened(self, demuxer: str, decoder: str, counted: bool = True) -> None:
        """The source's file opened under this watch: what its ``demuxer`` logged meanwhile counted (``counted``:
        the run decodes from its first frame), not what its ``decoder`` did (the opening decodes the first frames
        to find the stream's parameters, and the decode says their lines again); both watched from here."""
        self.names, self.demuxer, self.counting = {demuxer}, demuxer, counted
        with _lock:
            _drain()
        if self.errors:  # (placed at the first frame, as a stream's opening is: before_first_frame)
            self._first(0.0)
        self.names, self.counting = {demuxer, decoder}, True

    def before_first_frame(self, lines: list = ()) -> None:
        """``lines`` (level, name, text) logged where no watch was on (a stream on standard input while it was
        opened: its bytes are read once), counted as this watch's but for those it counted again (its ``kept``:
        the opening decodes the probe's frames too, and their decoder says the same again under the watch, where
        the demuxer's parser does not); they and what it met so far are placed at the first frame."""
        again, first = Counter(self.kept or ()), None
        for level, name, text in lines:
            if _is_damage(level, text) and name in self.names:
                if again[text.strip()]:
                    again[text.strip()] -= 1
                else:
                    self._count(text, name)
                    first = first or text.strip()[:120]
        self.first_line = first or self.first_line  # (logged before those of the watch)
        if self.frames or self.errors:
            self._first(0.0)

    def _count(self, text: str, name: str) -> None:
        self.errors += 1
        self.demuxer_errors += name == self.demuxer
        self.first_line = self.first_line or text.strip()[:120]
        if self.kept is not None:
            self.kept.append(text.strip())

    def _first(self, seconds: float) -> None:
        if self.first_s is None:
            self.first_s = round(seconds, 3)

    def record(self) -> dict | None:
        """For the run report's settings (``input_damaged``); None where nothing was met."""
        if not self.frames and not self.errors:
            return None
        record = {"frames_with_errors": self.frames, "error_lines": self.errors, "first_s": self.first_s,
                  "first_error": self.first_line}
        if self.demuxer_errors:  # (damage in the file's structure, which a cut alone does not log: said beside an
            record["demuxer_error_lines"] = self.demuxer_errors  # early end, vsr.pipeline.runner)
        return record


def _drain() -> None:
    """The lines captured so far: each counted by the sources whose demuxer or decoder logged it, handed on to
    Python's logging where the level PyAV had before asked for it (under ``_lock``)."""
    logs = _shared.get("logs")
    if not logs:
        return
    lines = logs[:]
    del logs[:len(lines)]  # (a line appended meanwhile by another thread stays for the next drain)
    wanted = _shared["level"]
    for level, name, text in lines:
        ours = [d for d in _watchers if d.counting and name in d.names] if _is_damage(level, text) else []
        for d in ours:
            d._count(text, name)
        _hand_on(level, name, text, wanted)


def _hand_on(level: int, name: str, text: str, wanted: int | None) -> None:
    """A line to Python's logging, as PyAV sends it where nothing captures, if ``wanted`` (PyAV's level) asks."""
    if wanted is not None and level <= wanted:
        logging.getLogger(f"libav.{name or 'generic'}").log(av.logging.adapt_level(level), text.strip())


def unwatched(items: Iterator) -> Iterator:
    """``items``, made in this thread; FFmpeg's lines logged here meanwhile are no watch's, handed on as PyAV
    would.  The watch is process-wide and knows a line's name alone (PyAV gives no context), so the encode
    stage's own demuxer of the source (its audio copied) counted the damaged bytes' lines again; an encoder of
    the decoder's name (ffv1) would be counted too.  Only one source is watched at a time in a process: no
    command decodes two at once (``vsr jobs run --workers N`` runs a process each)."""
    with av.logging.Capture(local=True) as logs:
        try:
            for item in items:
                _handed_on(logs)
                yield item
        finally:
            _handed_on(logs)


def _handed_on(logs: list) -> None:
    lines = logs[:]
    del logs[:len(lines)]
    with _lock:
        wanted = _shared["level"] if "level" in _shared else av.logging.get_level()
    for level, name, text in lines:
        _hand_on(level, name, text, wanted)


def _is_damage(level: int, text: str) -> bool:
    """Whether a line FFmpeg logged is a sign of damage: an error, not a cut (:data:`CUT_LINES`)."""
    return level <= av.logging.ERROR and not any(line in text for line in CUT_LINES)


def past_damage(c, st, decode: Callable = lambda packet: packet.decode()) -> Iterator[av.VideoFrame]:
    """``c.decode(st)`` (each packet of ``st`` through ``decode``), a packet its decoder refuses as invalid data
    skipped, as FFmpeg's own tools do (a damaged MP4's mdat stopped the run at its first such packet, the rest of
    the file lost; the decoder's error line is what :class:`Damage` counts).  :data:`REFUSED_IN_A_ROW` refused in a
    row: the error raised, a stream this decoder cannot decode."""
    refused = Refused()
    for packet in c.demux(st):
        yield from refused.frames(packet, decode)


class Refused:
    """The packets in a row a decoder refused as invalid data (see :func:`past_damage`)."""

    def __init__(self) -> None:
        self.in_a_row = 0

    def frames(self, packet, decode: Callable) -> list:
        """``decode(packet)``, or no frames where the decoder refuses it (the error raised at
        :data:`REFUSED_IN_A_ROW` in a row)."""
        try:
            frames = decode(packet)
        except av.InvalidDataError:
            self.in_a_row += 1
            if self.in_a_row >= REFUSED_IN_A_ROW:
                raise
            return []
        self.in_a_row = 0
        return frames


def message(path: str | os.PathLike, record: dict) -> str:
    """The one line a run says of a damaged source (its :meth:`Damage.record`)."""
    name = "standard input" if os.fspath(path) == "-" else os.fspath(path)
    n, lines = record.get("frames_with_errors", 0), record.get("error_lines", 0)
    what = [f"{n} frame{'s' if n != 1 else ''} decoded with errors (FFmpeg concealed them)"] if n else []
    if lines:
        what.append(f"{lines} FFmpeg error{'s' if lines != 1 else ''} (\"{record.get('first_error')}\": damaged data "
                    "is skipped, frames may be missing)")
    near = f", first near {record['first_s']:.2f} s" if record.get("first_s") is not None else ""
    return f"{name} is damaged: {' and '.join(what)}{near}: the output has what FFmpeg recovered"


def seconds(pts: int, info) -> float:
    """``pts`` (in the source's time base) as seconds from its first frame."""
    return float((pts - info.start_pts) * Fraction(info.time_base))

