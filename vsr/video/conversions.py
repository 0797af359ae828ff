"""What an audio or subtitle stream becomes where the output container cannot hold it as it is (used by
:mod:`vsr.video.passthrough`): the codec, sample rate, format and channel layout an audio track is re-encoded
with, the codecs a container's muxer takes but players do not read, and the plain text of a subtitle packet."""

from __future__ import annotations

import re
import struct

import av

TEXT_SUBTITLES = ("subrip", "srt", "ass", "ssa", "webvtt", "text", "mov_text")
# FFmpeg's muxers of the mp4 family: they write no track title, only the handler name (``hdlr``), which mp4 tools
# and ffprobe show as the track's name
TITLE_AS_HANDLER = ("mp4", "ipod", "3gp", "3g2", "psp", "ismv", "f4v")


def track_tags(metadata: dict, fmt: str, dropped: tuple[str, ...]) -> dict:
    """A source track's tags for its output track in FFmpeg's muxer ``fmt``, those ``dropped`` names (upper case)
    left out; into the mp4 family its title as its handler name too, which mp4 keeps (an anime .mkv's two English
    subtitle tracks, "Full" and "Signs", became two nameless ones)."""
    out = {k: v for k, v in metadata.items() if k.upper() not in dropped}
    title = next((v for k, v in out.items() if k.lower() == "title"), None)
    if title and fmt in TITLE_AS_HANDLER:
        out = {k: v for k, v in out.items() if k.lower() != "handler_name"} | {"handler_name": title}
    return out


def subtitle_text(data: bytes, codec: str) -> str:
    """The plain text of one subtitle packet (ASS events lose their fields and override tags; mov_text its
    length and style boxes)."""
    if codec == "mov_text":
        n = struct.unpack(">H", data[:2])[0] if len(data) >= 2 else 0
        data = data[2:2 + n]
    text = data.decode("utf-8", errors="replace")
    if codec in ("ass", "ssa"):
        text = text.split(",", 8)[-1]
        text = re.sub(r"\{[^}]*\}", "", text).replace("\\N", "\n").replace("\\n", "\n")
    return text


def encoder_rate(codec: str, rate: int) -> int:
    """The sample rate ``codec`` encodes ``rate`` Hz audio at: ``rate`` where it takes it, else the lowest it
    takes above (the highest below where none is): Opus takes 48 kHz and its divisors, not 44.1 kHz (PyAV's
    encoder resamples the frames to it)."""
    rates = av.Codec(codec, "w").audio_rates
    if not rates or rate in rates:
        return rate
    above = [r for r in rates if r > rate]
    return min(above) if above else max(rates)


# FFmpeg's default layout of n channels, for audio whose channels come in no stated order (WMA, PCM in AVI:
# "1 channels"), which encoders refuse
DEFAULT_LAYOUTS = {1: "mono", 2: "stereo", 3: "2.1", 4: "quad", 5: "5.0", 6: "5.1", 7: "6.1", 8: "7.1"}


def encoder_format(codec: str, fmt) -> str | None:
    """The sample format of ``codec``'s that is as deep as ``fmt`` (16-bit FLAC into ALAC as 16 bits, not 32),
    or None (the encoder's own choice)."""
    formats = av.Codec(codec, "w").audio_formats or []
    if fmt is None:
        return None
    same = [f.name for f in formats if f.bytes == fmt.bytes and f.name.rstrip("p") == fmt.name.rstrip("p")]
    return same[0] if same else None


def ordered_layout(layout):
    """``layout`` where its channels are named, else the default layout of as many channels."""
    if layout is not None and any(ch.name == "NONE" for ch in layout.channels):
        name = DEFAULT_LAYOUTS.get(layout.nb_channels)
        if name is not None:
            return av.AudioLayout(name)
    return layout


# the most channels the encoders of containers' default audio take (MP2 and MP3: stereo; AC-3: 5.1)
MAX_CHANNELS = {"mp2": 2, "libtwolame": 2, "mp3": 2, "libmp3lame": 2, "ac3": 6}


def fit_channels(target: str, layout, holds: frozenset[str]) -> tuple[str, object, str]:
    """``(codec, layout, what to add to the re-encode's warning)`` for a track of ``layout`` re-encoded to
    ``target`` in a container holding ``holds``: where ``target`` takes fewer channels, AC-3 (5.1: DVD's audio)
    where the container holds it, else ``target`` with the channels downmixed to as many as it takes (what
    ``ffmpeg`` writes; a player of .mpg expects stereo MP2), the output that keeps them named."""
    n, most = layout.nb_channels, MAX_CHANNELS.get(target)
    if most is None or n <= most:
        return target, layout, ""
    if target != "ac3" and "ac3" in holds and "ac3" in av.codecs_available:
        if n <= MAX_CHANNELS["ac3"]:
            return "ac3", layout, f" (DVD's audio: it keeps the {layout.name} channels, {target} takes {most} at most)"
        target, most = "ac3", MAX_CHANNELS["ac3"]
    keeps = "a .vob (AC-3) or .mkv output" if n <= MAX_CHANNELS["ac3"] else "an .mkv output"
    down = av.AudioLayout(DEFAULT_LAYOUTS[most])
    return target, down, (f", its {layout.name} channels downmixed to {down.name} ({target} takes {most} at most; "
                          f"{keeps} keeps them)")


# lossless codecs, and what a lossless track is re-encoded to where its own codec cannot go (first held)
LOSSLESS_AUDIO = ("flac", "alac", "truehd", "mlp", "wavpack", "tta") + tuple(
    f"pcm_{k}" for k in ("s16le", "s16be", "s24le", "s24be", "s32le", "s32be", "f32le", "f32be", "f64le", "u8"))
LOSSLESS_TARGETS = ("alac", "flac", "pcm_s24le", "pcm_s16le")
# codecs (name prefixes) a container's muxer writes in a form few players read, re-encoded instead: PCM in .mp4
# is ISO 'ipcm' (ISO/IEC 23003-5), which QuickTime and FFmpeg before 6 do not read
UNREAD_IN = {"mp4": ("pcm_",)}
# text subtitle codecs a container may hold, the first held taking the others' text (WebM holds WebVTT alone)
TEXT_TARGETS = ("mov_text", "subrip", "webvtt")
