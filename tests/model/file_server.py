"""A real HTTP file server on 127.0.0.1 for the download tests: byte ranges as HTTP/1.1 servers do them, and
the ways servers fail (a 404, a connection cut short, a stall, no range support, a slow trickle), plus an
emulation of Google Drive's confirm page for large files."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

# What a file's next request does: "ok", "norange" (200 and the whole file, whatever Range says), "cut" (the
# headers promise the rest, the connection closes after ``cut`` bytes), "stall" (``cut`` bytes, then nothing
# until the test ends), "slow" (32 KiB every 50 ms), "proxy" (a broken proxy's 502 whose reason phrase is
# :data:`PROXY_GARBAGE`).
MODES = ("ok", "norange", "cut", "stall", "slow", "proxy")
# 850 characters of a proxy's reason phrase: a terminal escape (clear the screen), non-ASCII, then filler
PROXY_GARBAGE = ("upstream \x1b[2J\x1b[31mfailed\u00e9 " + "garbage " * 110)[:850]


@dataclass
class Served:
    data: bytes
    modes: list[str] = field(default_factory=list)  # one per request, then "ok"
    cut: int = 0


@dataclass
class Request:
    path: str
    range: str | None
    cookie: str | None
    status: int = 0
    sent: int = 0


DRIVE_PAGE = """<!DOCTYPE html><html><head><title>Google Drive - Virus scan warning</title></head><body>
<div class="uc-main"><div id="uc-text"><p class="uc-warning-caption">Google Drive can't scan this file for viruses.
</p><p class="uc-warning-subcaption"><span class="uc-name-size"><a href="/open?id={id}">{name}</a> (13M)</span>
is too large for Google to scan for viruses. Would you still like to download this file?</p>
<form id="download-form" action="{base}/download" method="get">
<input type="submit" id="uc-download-link" class="goog-inline-block jfk-button" value="Download anyway"/>
<input type="hidden" name="id" value="{id}"><input type="hidden" name="export" value="download">
<input type="hidden" name="confirm" value="t"><input type="hidden" name="uuid" value="{uuid}">
</form></div></div></body></html>"""

DRIVE_QUOTA = """<!DOCTYPE html><html><head><title>Google Drive - Quota exceeded</title></head><body>
<div class="uc-main"><div id="uc-text"><p class="uc-error-caption">Sorry, you can't view or download this file at
this time.</p><p class="uc-error-subcaption">Too many users have viewed or downloaded this file recently. Please try
accessing the file again later.</p></div></div></body></html>"""


class FileServer:
    """``files``: path -> :class:`Served`; ``drive``: Google Drive file id -> :class:`Served` (``/uc?id=`` answers
    the confirm page, its form leads to ``/download``); ``drive_quota``: ids whose page is a refusal."""

    def __init__(self):
        self.files: dict[str, Served] = {}
        self.drive: dict[str, Served] = {}
        self.drive_quota: set[str] = set()
        self.requests: list[Request] = []
        self.release = threading.Event()  # ends every stall
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                server._get(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "FileServer":
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def url(self, path: str) -> str:
        return self.base + path

    def drive_url(self, file_id: str) -> str:
        return f"{self.base}/uc?export=download&id={file_id}"

    # ---- the handler -----------------------------------------------------------------------------------------

    def _get(self, h: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        req = Request(h.path, h.headers.get("Range"), h.headers.get("Cookie"))
        self.requests.append(req)
        if parts.path == "/uc" and query.get("id") in self.drive:
            return self._drive_page(h, req, query["id"])
        if parts.path == "/download" and query.get("id") in self.drive:
            if query.get("confirm") != "t" or query.get("uuid") != _uuid(query["id"]):
                return self._drive_page(h, req, query["id"])
            return self._serve(h, req, self.drive[query["id"]])
        served = self.files.get(parts.path)
        if served is None:
            return self._reply(h, req, 404, b"not found", "text/plain")
        self._serve(h, req, served)

    def _drive_page(self, h, req: Request, file_id: str) -> None:
        page = DRIVE_QUOTA if file_id in self.drive_quota else \
            DRIVE_PAGE.format(base=self.base, id=file_id, uuid=_uuid(file_id), name=f"{file_id}.pth")
        self._reply(h, req, 200, page.encode(), "text/html; charset=utf-8",
                    {"Set-Cookie": f"download_warning_{file_id}=t; Path=/"})

    def _reply(self, h, req: Request, status: int, body: bytes, ctype: str, headers: dict | None = None,
               reason: str | None = None) -> None:
        req.status = status
        h.send_response(status, reason)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body)
        req.sent = len(body)

    def _serve(self, h, req: Request, served: Served) -> None:
        mode = served.modes.pop(0) if served.modes else "ok"
        if mode == "proxy":
            return self._reply(h, req, 502, b"", "text/plain", reason=PROXY_GARBAGE)
        data, size = served.data, len(served.data)
        start = 0
        m = re.fullmatch(r"bytes=(\d+)-", req.range or "")
        if m and mode != "norange":
            start = int(m[1])
            if start >= size:
                return self._reply(h, req, 416, b"", "text/plain", {"Content-Range": f"bytes */{size}"})
        req.status = 206 if start else 200
        h.send_response(req.status)
        h.send_header("Content-Type", "application/octet-stream")
        h.send_header("Content-Length", str(size - start))
        h.send_header("Accept-Ranges", "bytes")
        if start:
            h.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        h.end_headers()
        body = data[start:]
        if mode in ("cut", "stall"):
            self._write(h, req, body[:served.cut])
            if mode == "stall":
                self.release.wait(60)
            h.close_connection = True
            return
        step = 32768 if mode == "slow" else len(body)
        for i in range(0, len(body), step):
            if not self._write(h, req, body[i:i + step]):
                return
            if mode == "slow":
                time.sleep(0.05)

    @staticmethod
    def _write(h, req: Request, chunk: bytes) -> bool:
        req.sent += len(chunk)  # counted before the client can have them: a test reading it after the client
        try:                    # finished never races this thread
            h.wfile.write(chunk)
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            req.sent -= len(chunk)
            h.close_connection = True
            return False
        return True


def _uuid(file_id: str) -> str:
    return f"u-{file_id[::-1]}"
