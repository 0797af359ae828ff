"""Video in and out: sources (PyAV decode, PNG folders), sinks (PyAV encode + stream copy, PNG folders),
and the colour conversions between YUV and the model's RGB."""

from vsr.video.colour import ColourSpec
from vsr.video.sink import EncoderSettings, PngFolderSink, VideoSink, check_output, open_sink
from vsr.video.source import PngFolderSource, SourceFrame, VideoInfo, VideoSource, open_source

__all__ = ["ColourSpec", "EncoderSettings", "PngFolderSink", "VideoSink", "check_output", "open_sink",
           "PngFolderSource", "SourceFrame", "VideoInfo", "VideoSource", "open_source"]
