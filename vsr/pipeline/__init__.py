"""Frame-queue runner: decode -> windows -> batches -> backend -> encode.  Entry point: :func:`upscale`."""

from vsr.pipeline.runner import FrameQueueRunner, FrameWindow, RunnerSettings
from vsr.pipeline.upscale import upscale

__all__ = ["FrameQueueRunner", "FrameWindow", "RunnerSettings", "upscale"]
