"""``excerpt(src, dst, packets)``: the head of a video file, stream-copied (no re-encoding)."""

from __future__ import annotations

from pathlib import Path

import av


def excerpt(src: str | Path, dst: str | Path, packets: int) -> Path:
    """The first ``packets`` video packets of ``src`` (decode order) and the audio packets muxed before them,
    stream-copied into ``dst``: the same encoded pictures, a shorter clip (for tests and benchmarks)."""
    with av.open(str(src)) as ic, av.open(str(dst), "w") as oc:
        out = {st.index: oc.add_stream_from_template(st) for st in ic.streams if st.type in ("video", "audio")}
        n = 0
        for pkt in ic.demux(list(ic.streams)):
            if pkt.dts is None or pkt.stream.index not in out:
                continue
            if pkt.stream.type == "video":
                if n == packets:
                    break
                n += 1
            pkt.stream = out[pkt.stream.index]
            oc.mux(pkt)
    return Path(dst)
