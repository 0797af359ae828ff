"""Quality evaluation: MATLAB-style bicubic resizing, BasicSR-compatible PSNR/SSIM, sequence evaluation.

``resize`` (the BI x4 degradation and the bicubic baseline) -> ``metrics`` (per-frame scores) ->
``evaluate`` (a PNG sequence, model vs bicubic).
"""

from vsr.quality.resize import bicubic_downscale_x4, bicubic_upscale_x4, imresize, mod_crop

__all__ = ["bicubic_downscale_x4", "bicubic_upscale_x4", "imresize", "mod_crop"]
