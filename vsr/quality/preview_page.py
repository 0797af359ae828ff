"""A :class:`~vsr.quality.preview.Preview` as a side-by-side PNG or a self-contained HTML page with a slider.

PNG: the middle frame, bicubic on the left and vsr on the right (each scaled to fit ``PNG_WIDTH / 2``), and
below them the most detailed part of both that holds still (:func:`detail_crop`) at 2x, pixel for pixel (nearest
neighbour), where the difference shows, labelled with its frame.
HTML: the middle frame at full size, vsr over bicubic, a slider moving the border between the two.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

import cv2
import numpy as np

from vsr.errors import InputError, printable
from vsr.outfiles import check_file_output, write_file_output
from vsr.quality.preview import Preview
from vsr.video.png_colour import colour_chunks, with_chunks

PNG_WIDTH = 1920  # the side-by-side image's width at most
ZOOM = 2
GAP = 8  # pixels between the panels


def detail_crop(lr: np.ndarray, crop_h: int, crop_w: int, scale: int,
                neighbours: tuple[np.ndarray, ...] = ()) -> tuple[int, int]:
    """The top-left ``(y, x)`` of the HR crop of ``crop_h x crop_w`` over the LR frame's most detailed part that
    holds still (the largest mean gradient of ``lr`` averaged with its ``neighbours``, the frames beside it), on a
    grid of half-crop steps.  In the average what moves is smeared: a moving hand, motion-blurred in the frame
    itself, is not picked for its edges (issue 40); the still texture beside it is."""
    still = np.mean([f.astype(np.float32) for f in (lr, *neighbours)], axis=0)
    grey = cv2.cvtColor(still, cv2.COLOR_RGB2GRAY)
    energy = np.abs(cv2.Sobel(grey, cv2.CV_32F, 1, 0)) + np.abs(cv2.Sobel(grey, cv2.CV_32F, 0, 1))
    h, w = max(crop_h // scale, 1), max(crop_w // scale, 1)
    best, where = -1.0, (0, 0)
    for y in range(0, max(lr.shape[0] - h, 0) + 1, max(h // 2, 1)):
        for x in range(0, max(lr.shape[1] - w, 0) + 1, max(w // 2, 1)):
            e = float(energy[y:y + h, x:x + w].mean())
            if e > best:
                best, where = e, (y * scale, x * scale)
    return where


def _label(img: np.ndarray, text: str) -> np.ndarray:
    out = img.copy()
    for colour, thick in (((0, 0, 0), 4), ((255, 255, 255), 1)):
        cv2.putText(out, text, (10, 28), cv2.FONT_HERSHEY_SIMPLEX, 0.8, colour, thick, cv2.LINE_AA)
    return out


def side_by_side(p: Preview) -> np.ndarray:
    """The PNG's picture: uint8 RGB ``(H, W, 3)``, see the module's docstring."""
    k = len(p.sr) // 2
    bic, sr = p.bicubic[k], p.sr[k]
    hh, hw = sr.shape[:2]
    half = min(hw, (PNG_WIDTH - GAP) // 2)
    fit = half / hw
    size = (half, max(1, round(hh * fit)))
    cw, ch = max(half // ZOOM, 16), max(min(hh, round(size[1] / ZOOM)), 16)
    cw, ch = min(cw, hw), min(ch, hh)
    beside = tuple(p.lr[i] for i in (k - 1, k + 1) if 0 <= i < len(p.lr) and p.lr[i].shape == p.lr[k].shape)
    y, x = detail_crop(p.lr[k], ch, cw, hh // p.lr[k].shape[0], beside)
    y, x = min(y, hh - ch), min(x, hw - cw)
    panels = []
    for name, img in (("bicubic", bic), ("vsr" + (f" ({p.config})" if p.config else ""), sr)):
        full = cv2.resize(img, size, interpolation=cv2.INTER_AREA) if fit < 1 else img.copy()
        x0, y0, x1, y1 = (round(v * fit) for v in (x, y, x + cw, y + ch))
        cv2.rectangle(full, (x0, y0), (x1, y1), (255, 255, 0), 2)
        zoom = cv2.resize(img[y:y + ch, x:x + cw], (cw * ZOOM, ch * ZOOM), interpolation=cv2.INTER_NEAREST)
        zoom = _pad(zoom, size[0])
        panels.append(np.concatenate([_label(full, name), np.zeros((GAP, size[0], 3), np.uint8),
                                      _label(zoom, f"{name}, {ZOOM}x, frame {p.first + k}")], 0))
    return np.concatenate([panels[0], np.zeros((panels[0].shape[0], GAP, 3), np.uint8), panels[1]], 1)


def _pad(img: np.ndarray, width: int) -> np.ndarray:
    if img.shape[1] >= width:
        return img[:, :width]
    return np.concatenate([img, np.zeros((img.shape[0], width - img.shape[1], 3), np.uint8)], 1)


def _png_bytes(rgb: np.ndarray, p: Preview | None = None) -> bytes:
    """``rgb`` as a PNG file, tagged with the colour of ``p``'s source where it is HDR or wide gamut (``cICP``:
    a viewer that reads it shows PQ and HLG as they are, not as sRGB)."""
    ok, buf = cv2.imencode(".png", np.ascontiguousarray(rgb[:, :, ::-1]))
    if not ok:
        raise OSError("could not encode a PNG")
    colour = p.encoder.colour if p is not None and p.encoder is not None else None
    return with_chunks(buf.tobytes(), colour_chunks(colour, None) if colour is not None else b"")


_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>vsr preview: {title}</title>
<style>body{{font-family:sans-serif;margin:1em;background:#222;color:#eee}}
#box{{position:relative;display:inline-block;max-width:100%}} #box img{{display:block;max-width:100%}}
#sr{{position:absolute;top:0;left:0;clip-path:inset(0 0 0 50%)}} input{{width:100%}}</style></head>
<body><p>{title}: frame {frame}. Left of the border: bicubic; right: vsr. {estimate}</p>
<div id="box"><img src="data:image/png;base64,{bicubic}" alt="bicubic">
<img id="sr" src="data:image/png;base64,{sr}" alt="vsr"></div>
<p><input id="slider" type="range" min="0" max="100" value="50"></p>
<script>document.getElementById("slider").oninput=function(){{
document.getElementById("sr").style.clipPath="inset(0 0 0 "+this.value+"%)";}};</script>
</body></html>
"""


def page(p: Preview, estimate: str = "") -> str:
    """The HTML page (images inline as base64 PNG)."""
    k = len(p.sr) // 2
    b64 = [base64.b64encode(_png_bytes(img, p)).decode("ascii") for img in (p.bicubic[k], p.sr[k])]
    return _PAGE.format(title=html.escape(printable(p.src.name)), frame=p.first + k, estimate=html.escape(estimate),
                        bicubic=b64[0], sr=b64[1])


def check_out(out: str | Path, overwrite: bool = False, inputs: tuple = ()) -> Path:
    """One-line errors for a preview file that cannot be written, before the preview runs (the rules of
    :mod:`vsr.outfiles`; never one of ``inputs``)."""
    out = Path(out)
    if out.suffix.lower() not in (".png", ".html", ".htm"):
        raise InputError(f"--out must end in .png or .html, not {out.name!r}")
    return check_file_output(out, "--out", "picture", overwrite=overwrite, inputs=inputs)


def write_preview(p: Preview, out: str | Path, estimate: str = "", overwrite: bool = False) -> Path:
    """``out``: ``.png`` (:func:`side_by_side`) or ``.html`` (:func:`page`), written under a temporary name and
    renamed; an existing file is replaced only with ``overwrite``, never the input."""
    out = check_out(out, overwrite, inputs=(p.src,))
    kind = out.suffix.lower()
    write_file_output(out, _png_bytes(side_by_side(p), p) if kind == ".png" else page(p, estimate).encode("utf-8"))
    return out
