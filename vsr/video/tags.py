"""The source's QuickTime metadata keys in an mp4 or QuickTime output: where and when a phone filmed it.

Phones write what they know of a recording as reverse-DNS keys in ``moov/meta`` (handler ``mdta``): Apple's
``com.apple.quicktime.location.ISO6709``, ``...creationdate``, ``...make``, ``...model``, Android's
``com.android.capture.fps`` (a slow-motion clip's capture rate), ``com.android.version``.  FFmpeg reads them as
container tags, but its mov muxer writes such keys only with ``movflags=use_metadata_tags``, which then writes
*every* tag that way (a title no longer where other players read it).  So vsr lets the muxer write the tags it
knows as it does, and adds the keys it drops to the closed file as Apple's cameras write them
(:func:`vsr.video.isobmff.mdta_meta`).  A Matroska output keeps every tag of itself.
"""

from __future__ import annotations

import re

from vsr.video import isobmff

CONTAINERS = ("mp4", "mov")  # FFmpeg's names of the formats whose files get the keys
_KEY = re.compile(r"[a-z][a-z0-9-]*(\.[A-Za-z0-9_-]+)+", re.IGNORECASE)
# the case of the keys a Matroska source hands over in capitals, where it is not lower case
_CASED = {"iso6709": "ISO6709"}


def quicktime_keys(metadata: dict) -> list[tuple[str, str]]:
    """The reverse-DNS keys of ``metadata`` (container tags) with their values, as QuickTime names them (a
    Matroska source's capitals back in lower case)."""
    out = []
    for k, v in metadata.items():
        if not _KEY.fullmatch(k) or not isinstance(v, str):
            continue
        if k.isupper():
            k = ".".join(_CASED.get(part, part) for part in k.lower().split("."))
        out.append((k, v))
    return out


def write_container_keys(path, container: str, metadata: dict) -> str | None:
    """Add the source's QuickTime keys (:func:`quicktime_keys` of its container ``metadata``) to the closed file
    at ``path`` of FFmpeg's format ``container``; why it could not (one line), or None."""
    keys = quicktime_keys(metadata) if container in CONTAINERS else []
    if not keys:
        return None
    try:
        isobmff.add_moov_box(path, isobmff.mdta_meta(keys))
    except isobmff.NotWritable as e:
        return f"the source's {', '.join(k for k, _ in keys[:3])} could not be written into the {container} file ({e})"
    return None
