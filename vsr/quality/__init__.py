"""Quality evaluation: MATLAB-style bicubic resizing, BasicSR-compatible PSNR/SSIM, sequence evaluation.

``resize`` (the BI x4 degradation and the bicubic baseline) -> ``metrics`` (per-frame scores) ->
``evaluate`` (a PNG sequence, model vs bicubic).
"""

from vsr.quality.evaluate import EvalResult, evaluate, evaluate_sequence
from vsr.quality.metrics import FrameScores, frame_scores, psnr, rgb_to_y, ssim
from vsr.quality.resize import bicubic_downscale_x4, bicubic_upscale_x4, imresize, mod_crop

__all__ = ["EvalResult", "evaluate", "evaluate_sequence", "FrameScores", "frame_scores", "psnr", "rgb_to_y",
           "ssim", "bicubic_downscale_x4", "bicubic_upscale_x4", "imresize", "mod_crop"]
