"""Downloading a published file: resumable, verified, and never a half file under the final name.

:func:`download` writes into ``NAME.part`` beside the destination (opened without following a planted link,
locked against a second vsr downloading the same file), resumes it with an HTTP ``Range`` request after an
interruption (a server answering 200 instead of 206 starts it over), checks its sha256 against the published
digest and only then renames it to ``NAME``.  A mismatch deletes the ``.part``; a stalled server (no byte for
``timeout`` seconds), a cut connection or Ctrl-C keep it for the next run to resume.  Each URL of a file is
tried in turn (they must serve the same bytes: the digest decides).

Google Drive answers a large file's address with an HTML page asking to confirm the download; its form
(or, on older pages, its download link) is followed, with Drive's cookies, as a browser would.
"""

from __future__ import annotations

import fcntl
import http.client
import os
import re
import tempfile
import urllib.error
import urllib.request
from contextlib import contextmanager
from html.parser import HTMLParser
from http.cookiejar import CookieJar
from pathlib import Path
from typing import BinaryIO, Iterator, Sequence
from urllib.parse import urlencode, urljoin, urlsplit

from vsr.errors import DownloadError, InputError, printable
from vsr.files import sha256_file

CHUNK = 1 << 20
HTML_LIMIT = 1 << 20  # a confirm page is a few kB; more than this is not one
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


class _SourceFailed(Exception):
    """This URL did not deliver the file (HTTP error, stall, cut connection, an HTML page); the next may."""


def download(urls: Sequence[str], dest: Path, digest: str, *, timeout: float = 30.0, label: str | None = None,
             quiet: bool = False, folder_mode: int = 0o777) -> Path:
    """Fetch ``dest`` from the first of ``urls`` that delivers it; its sha256 must start with ``digest`` (a
    full digest or a published prefix).  Returns ``dest``; raises :class:`vsr.errors.DownloadError` (one line),
    or :class:`vsr.errors.InputError` where ``dest``'s folder cannot be made or written.  A download that fails
    leaves no folder it made, nor an empty ``.part``."""
    dest = Path(dest)
    if dest.is_dir() and not dest.is_symlink():  # else the whole file came down, then IsADirectoryError
        raise InputError(f"cannot download {dest.name} into {dest.parent}: {dest} is a folder; move it away, or "
                         "give --dir another folder")
    made = _make_folder(dest.parent, folder_mode)
    try:
        _check_writable(dest.parent)
        _download(urls, dest, digest, timeout, label or dest.name, quiet)
    except BaseException:
        for folder in made:  # the deepest first; one holding a .part to resume (or anything else) stays
            try:
                folder.rmdir()
            except OSError:
                break
        raise
    return dest


def _download(urls: Sequence[str], dest: Path, digest: str, timeout: float, label: str, quiet: bool) -> None:
    part = dest.with_name(dest.name + ".part")
    failures = []
    with _locked_part(part) as f:
        try:
            for url in urls:
                try:
                    _transfer(url, f, timeout, label, quiet)
                    break
                except _SourceFailed as e:
                    failures.append(f"{urlsplit(url).hostname}: {_shown(str(e))}")
            else:
                kept = os.fstat(f.fileno()).st_size
                raise DownloadError(f"could not download {dest.name} ({'; '.join(failures)})"
                                    + (f"; {_size(kept)} kept in {part}, run again to resume" if kept else ""))
        except BaseException:
            if not os.fstat(f.fileno()).st_size:
                part.unlink()
            raise
        f.flush()
        actual = sha256_file(part)
        if not actual.startswith(digest.lower()):
            part.unlink()
            raise DownloadError(f"{dest.name}: downloaded sha256 {actual[:16]}... is not the published "
                                f"{digest[:16]}...: deleted (the source may have changed, or the transfer is corrupt)")
        os.replace(part, dest)  # replaces a link at dest itself, never what it points to


def _make_folder(folder: Path, mode: int = 0o777) -> list[Path]:
    """``folder`` (``mode`` less the umask) and its missing parents, made; those this made, the deepest first."""
    missing = []
    p = folder
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    try:
        folder.mkdir(mode=mode, parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise InputError(f"cannot download into {folder}: it is not a folder") from None
    except OSError as e:
        raise InputError(f"cannot create the folder {folder}: {e.strerror}") from None
    return missing


def _check_writable(folder: Path) -> None:
    """``folder`` takes a new file: bad input, said before any byte is fetched, where it does not (a folder of
    another user's, a read-only or virtual file system; tried, not asked of os.access, which says yes to root)."""
    try:
        tempfile.TemporaryFile(dir=folder).close()  # unnamed where the file system allows it (O_TMPFILE)
    except OSError as e:
        raise InputError(f"cannot write into the folder {folder}: {e.strerror or e}") from None


def _shown(reason: str, limit: int = 120) -> str:
    """What a server said (a reason phrase, a header, a proxy's garbage) fit for one terminal line: control
    characters escaped, cut to ``limit`` characters."""
    text = printable(" ".join(reason.split()))
    return text if len(text) <= limit else text[:limit - 3] + "..."


@contextmanager
def _locked_part(part: Path) -> Iterator[BinaryIO]:
    """``part`` opened for appending, without following a link planted there, and locked for this process."""
    try:
        fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise DownloadError(f"cannot write {part}: {e.strerror}") from None
    with os.fdopen(fd, "r+b", buffering=0) as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DownloadError(f"another process is downloading {part.name[:-5]} into {part.parent}") from None
        yield f


def _transfer(url: str, f: BinaryIO, timeout: float, label: str, quiet: bool) -> None:
    """Append the rest of ``url``'s file to ``f`` (all of it when the server cannot resume)."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
    have = os.fstat(f.fileno()).st_size
    resp = _answer(opener, url, have, timeout)
    if _status(resp) == 416 and not _complete(resp, have):
        # nothing of the file is left after ``have``, yet the .part is not all of it: longer than the file now
        # published (or of another file); resuming would fail forever, so it starts over
        resp.close()
        f.truncate(0)
        have = 0
        resp = _answer(opener, url, have, timeout)
    with resp:
        total = _remaining(resp, have)
        if total is None:  # 200: the server sends the whole file
            f.truncate(0)
            have = 0
            length = resp.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
        elif have == total:
            return  # 416: the .part already holds all of it
        _copy(resp, f, have, total, timeout, label, quiet)


def _open(opener, url: str, have: int, timeout: float):
    from vsr import __version__

    headers = {"User-Agent": f"vsr/{__version__}", "Accept-Encoding": "identity"}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        return opener.open(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # nothing left after ``have``: the .part may be the whole file
            return e
        raise _SourceFailed(f"HTTP {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        raise _SourceFailed(str(e.reason)) from None
    except (TimeoutError, OSError, http.client.HTTPException) as e:
        raise _SourceFailed(_why(e, timeout)) from None


def _answer(opener, url: str, have: int, timeout: float):
    """The server's answer to a request for ``url`` from byte ``have`` (through a Google Drive confirm page)."""
    resp = _open(opener, url, have, timeout)
    return resp if _status(resp) == 416 else _through_confirm_page(opener, resp, have, timeout)


def _complete(resp, have: int) -> bool:
    """Whether a 416 answer says the file is ``have`` bytes long: the .part holds all of it."""
    m = re.fullmatch(r"bytes \*/(\d+)", resp.headers.get("Content-Range", "").strip())
    return m is not None and int(m[1]) == have


def _remaining(resp, have: int) -> int | None:
    """The file's total size where ``resp`` continues the ``.part`` at byte ``have`` (206, or 416 with the part
    complete); None where it is the whole file from byte 0 (200)."""
    status = _status(resp)
    if status == 200:
        return None
    text = resp.headers.get("Content-Range", "")
    if status == 416:
        return have  # _transfer started over where the .part is not the whole file
    m = _CONTENT_RANGE.fullmatch(text.strip())
    if status != 206 or not m or int(m[1]) != have or m[3] == "*":
        raise _SourceFailed(f"unexpected answer to a resume at byte {have}: HTTP {status} {text}")
    return int(m[3])


def _status(resp) -> int:
    return resp.code if isinstance(resp, urllib.error.HTTPError) else resp.status


def _copy(resp, f: BinaryIO, have: int, total: int | None, timeout: float, label: str, quiet: bool) -> None:
    from vsr.report.progress import progress_bar  # plain lines, not redraws, into a log

    got = have
    with progress_bar(total=total, initial=have, unit="B", unit_scale=True, unit_divisor=1024, desc=label,
                      disable=quiet) as bar:
        try:
            while chunk := resp.read1(CHUNK):  # what has arrived: a stall keeps it
                f.write(chunk)
                got += len(chunk)
                bar.update(len(chunk))
        except (TimeoutError, OSError, http.client.HTTPException) as e:
            raise _SourceFailed(f"{_why(e, timeout)} at {_size(got)} of {_size(total)}") from None
    if total is not None and got != total:
        raise _SourceFailed(f"the connection closed at {_size(got)} of {_size(total)}")


def _why(e: BaseException, timeout: float) -> str:
    if isinstance(e, TimeoutError):
        return f"stalled: no data for {timeout:g} s"
    if isinstance(e, http.client.IncompleteRead):
        return "the connection closed early"
    return str(e) or type(e).__name__


def _size(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**20:.1f} MiB"


class _ConfirmPage(HTMLParser):
    """The parts of a Google Drive confirm page that lead on: the ``download-form`` (its action and hidden
    inputs), the older pages' download link, and the error text of a refusal."""

    def __init__(self):
        super().__init__()
        self.action: str | None = None
        self.fields: dict[str, str] = {}
        self.link: str | None = None
        self.error = ""
        self._in_form = self._in_error = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form" and a.get("id") == "download-form":
            self.action, self._in_form = a.get("action"), True
        elif tag == "input" and self._in_form and a.get("name"):
            self.fields[a["name"]] = a.get("value") or ""
        elif tag == "a" and a.get("id") == "uc-download-link":
            self.link = a.get("href")
        elif "uc-error-subcaption" in (a.get("class") or ""):
            self._in_error = True

    def handle_endtag(self, tag):
        if tag == "form":
            self._in_form = False
        elif tag == "p":
            self._in_error = False

    def handle_data(self, data):
        if self._in_error:
            self.error += data

    def next_url(self, base: str) -> str | None:
        if self.action:
            return urljoin(base, self.action) + "?" + urlencode(self.fields)
        return urljoin(base, self.link) if self.link else None


def _through_confirm_page(opener, resp, have: int, timeout: float):
    """``resp`` itself, or where a Google Drive confirm page in it leads; an HTML page that is not one fails."""
    if not resp.headers.get_content_type() == "text/html":
        return resp
    with resp:
        page = _ConfirmPage()
        page.feed(resp.read(HTML_LIMIT).decode("utf-8", "replace"))
    nxt = page.next_url(resp.geturl())
    if nxt is None or urlsplit(nxt).scheme not in ("http", "https"):
        why = " ".join(page.error.split()) or "no download form in it"
        raise _SourceFailed(f"an HTML page instead of the file ({why[:160]})")
    resp = _open(opener, nxt, have, timeout)
    if resp.headers.get_content_type() == "text/html":
        resp.close()
        raise _SourceFailed("the confirmed download is still an HTML page (Google Drive quota or access limit?)")
    return resp
