"""Checks of what a model gives back before any of it is committed: broken weights (NaN, overflow) must stop a run
with one line, not leave a black video reported as a success (issue 32, item 2)."""

from __future__ import annotations

import numpy as np

from vsr.errors import WeightsError

# A model's output is RGB in [0, 1], a little beyond where it sharpens an edge: past this, or a tile entirely far
# outside [0, 1], the weights are broken (NaN or overflowing values give black or flat frames once clipped)
SANE_OUTPUT = 1000.0
# (sane, low, high): what the post stage's conversion counts (vsr.video.planes.convert_tile) for this check
OUTPUT_LIMITS = (SANE_OUTPUT, -0.5, 1.5)


def check_model_output(core: np.ndarray, index: int, weights: str | None) -> None:
    """:class:`WeightsError` naming ``weights`` when the float output ``core`` of frame ``index`` is not finite or
    is saturated.  Two reductions over the tile (no copy): a small share of the post stage's own work."""
    lo, hi = float(core.min()), float(core.max())
    if -SANE_OUTPUT <= lo and hi <= SANE_OUTPUT and not (hi < OUTPUT_LIMITS[1] or lo > OUTPUT_LIMITS[2]):
        return
    what = ("not finite (NaN or infinity)" if not (np.isfinite(lo) and np.isfinite(hi)) else
            f"saturated (from {lo:.3g} to {hi:.3g}, where RGB is 0 to 1)")
    named = f"the weights {weights}" if weights else "the model's weights"
    raise WeightsError(f"the model's output for frame {index} is {what}: {named} are broken (NaN or "
                       "overflowing values); nothing was written")
