"""Frame-queue runner: decode -> windows -> batches -> backend -> encode.  Entry point: :func:`upscale`."""

from vsr.pipeline.runner import FrameQueueRunner, RunnerSettings
from vsr.pipeline.upscale import upscale
from vsr.pipeline.windows import FrameWindow

__all__ = ["FrameQueueRunner", "FrameWindow", "RunnerSettings", "upscale"]
