"""Video in and out: sources (PyAV decode, folders of frames), sinks (PyAV encode + stream copy, PNG folders),
and the colour conversions between YUV and the model's RGB.

Modules: ``source`` (decode), ``colour`` (YUV <-> RGB, the colour maths' one table), ``planes`` (RGB -> a sink's
planes in one parallel pass), ``base`` (the ``Sink`` protocol), ``output`` (output paths, overwrite rules, atomic
commit), ``codecs`` (what vsr knows of each encoder and container: the tables), ``encoder_choice`` (the encoder of
one output, decided once: ``choose_encoder``), ``encoder_open`` (opening the encoder chosen), ``nvenc`` (NVIDIA's
hardware encoders), ``hdr`` (HDR metadata), ``formats`` (which pixel formats an output keeps), ``dts`` (packet
timestamp repair), ``passthrough`` (audio/subtitle copy; ``joins``: across a joined MPEG-TS's clock),
``frame_source`` (a folder of frames, or one picture), ``png_sink``, ``picture_sink`` and ``sink`` (the
file sinks), ``pipe_source`` and ``pipe_sink`` (``-``: standard input and output),
``endpoints`` (which of them a name opens).
"""

from vsr.video.base import Sink
from vsr.video.colour import ColourSpec
from vsr.video.encoder_choice import EncoderSettings
from vsr.video.output import check_output
from vsr.video.endpoints import open_sink, open_source
from vsr.video.png_sink import PngFolderSink
from vsr.video.sink import VideoSink
from vsr.video.frame_source import FrameFolderSource
from vsr.video.source import SourceFrame, VideoInfo, VideoSource

__all__ = ["ColourSpec", "EncoderSettings", "PngFolderSink", "Sink", "VideoSink", "check_output", "open_sink",
           "FrameFolderSource", "PngFolderSource", "SourceFrame", "VideoInfo", "VideoSource", "open_source"]

PngFolderSource = FrameFolderSource  # (its name while a folder held PNG frames alone: kept for code that imports it)
