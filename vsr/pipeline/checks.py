"""Checks of what a model gives back before any of it is committed: broken weights (NaN, overflow) must stop a run
with one line, not leave a black video reported as a success (issue 32, item 2), nor a block of garbage pixels
(issue 37: one weight of 1e4 in the first layer)."""

from __future__ import annotations

import numpy as np

from vsr.errors import WeightsError

# A model's output is RGB in [0, 1], a little beyond where it sharpens an edge: past this, or a tile entirely far
# outside [0, 1], the weights are broken (NaN or overflowing values give black or flat frames once clipped)
SANE_OUTPUT = 1000.0
# (sane, low, high): what the post stage's conversion counts (vsr.video.planes.convert_tile) for this check; a
# tile with any value outside [low, high] is looked at closer (check_model_output)
OUTPUT_LIMITS = (SANE_OUTPUT, -0.5, 1.5)
# Values no working model gives: the bundled weights' worst case, a one-pixel checkerboard of black and white,
# reaches -1.04 and 1.72 (12 % of its values outside [-0.5, 1.5], so that range alone cannot judge); one weight
# of 1e4 in the first layer puts 1 to 86 % of a tile's values out here
FAR_OUTPUT = (-2.0, 3.0)
# the share of a tile's values out there that is garbage, not an edge's overshoot
FAR_SHARE = 0.001


def looks_suspicious(counts: tuple[int, int, int], values: int) -> bool:
    """Whether the conversion's ``counts`` (NaN or beyond +-sane, >= low, <= high, of :data:`OUTPUT_LIMITS`) over
    ``values`` values call for :func:`check_model_output`: almost never for working weights."""
    bad, at_least, at_most = counts
    return bool(bad) or at_least < values or at_most < values


def check_model_output(core: np.ndarray, index: int, weights: str | None) -> None:
    """:class:`WeightsError` naming ``weights`` when the float output ``core`` of frame ``index`` is not finite,
    is saturated (all of it outside [-0.5, 1.5]) or has more than :data:`FAR_SHARE` of its values beyond
    :data:`FAR_OUTPUT`.  Called only for a tile :func:`looks_suspicious`, so the passes here cost nothing usual."""
    lo, hi = float(core.min()), float(core.max())
    if not (np.isfinite(lo) and np.isfinite(hi)):
        what = "not finite (NaN or infinity)"
    elif lo < -SANE_OUTPUT or hi > SANE_OUTPUT or hi < OUTPUT_LIMITS[1] or lo > OUTPUT_LIMITS[2]:
        what = f"saturated (from {lo:.3g} to {hi:.3g}, where RGB is 0 to 1)"
    else:
        far = np.count_nonzero((core < FAR_OUTPUT[0]) | (core > FAR_OUTPUT[1]))
        if far <= FAR_SHARE * core.size:
            return
        what = (f"saturated ({100 * far / core.size:.2g} % of its values beyond {FAR_OUTPUT[0]:g} to "
                f"{FAR_OUTPUT[1]:g}, from {lo:.3g} to {hi:.3g}, where RGB is 0 to 1)")
    named = f"the weights {weights}" if weights else "the model's weights"
    raise WeightsError(f"the model's output for frame {index} is {what}: {named} are broken (NaN or "
                       "overflowing values); nothing was written")
