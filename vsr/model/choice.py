"""The weights for a source when none are given: ``real`` for a compressed source, ``default`` for a clean one.

:func:`choose_weights` applies the rule of ``configs/pipeline/weights.toml`` (:class:`WeightsRule`) to what
:func:`vsr.video.compression.measure` found; :class:`WeightsChoice` says which and why in one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vsr.errors import ConfigError
from vsr.video.compression import CompressionFacts, measure

AUTO = "auto"  # --weights auto (the default of vsr upscale, preview and jobs add): chosen per source


@dataclass(frozen=True)
class WeightsRule:
    """``real`` where ``blockiness >= blockiness``; else ``default`` for a ``lossless`` codec or a lossy one at
    ``clean_bits_per_pixel`` or more; else ``real``."""

    blockiness: float = 1.1
    clean_bits_per_pixel: float = 1.5
    lossless: frozenset[str] = frozenset({"png", "ffv1", "rawvideo"})

    @classmethod
    def load(cls, path: str | Path | None = None) -> WeightsRule:
        """``configs/pipeline/weights.toml`` (or ``path``)."""
        from vsr.files import config_dir, load_config

        rule = load_config(path, "pipeline/weights.toml", "weights rule", lambda data: cls(
            float(data["blockiness"]), float(data["clean_bits_per_pixel"]),
            frozenset(str(c) for c in data["lossless"])))
        if not rule.blockiness > 1 or not rule.clean_bits_per_pixel > 0:
            p = Path(path) if path is not None else config_dir() / "pipeline" / "weights.toml"
            raise ConfigError(f"{p}: the weights rule needs blockiness > 1 and clean_bits_per_pixel > 0")
        return rule


@dataclass(frozen=True)
class WeightsChoice:
    """``weights`` (a bundled name) for a source with ``facts``, and ``why`` in a few words."""

    weights: str
    why: str
    facts: CompressionFacts

    def line(self) -> str:
        """``real (h264 at 0.038 bits/pixel, blockiness 1.08: compressed source; --weights default to
        override)``: what ``vsr upscale`` prints."""
        other = "default" if self.weights == "real" else "real"
        return f"{self.weights} ({self.why}; --weights {other} to override)"

    def to_dict(self) -> dict:
        """The run report's ``weights_choice``: the rule's inputs and its answer."""
        return {"weights": self.weights, "why": self.why, **self.facts.to_dict()}


def _describe(f: CompressionFacts) -> str:
    parts = [f.codec if f.bits_per_pixel is None else f"{f.codec} at {f.bits_per_pixel:.3g} bits/pixel"]
    parts.append("no frame with detail to measure blockiness" if f.blockiness is None
                 else f"blockiness {f.blockiness:.2f}")
    return ", ".join(parts)


def choose_weights(facts: CompressionFacts, rule: WeightsRule | None = None) -> WeightsChoice:
    """The rule applied to ``facts`` (see :class:`WeightsRule`)."""
    rule = rule or WeightsRule.load()
    what = _describe(facts)
    if facts.codec.startswith("unreadable"):
        return WeightsChoice("default", f"{what}: not measured", facts)
    if facts.blockiness is not None and facts.blockiness >= rule.blockiness:
        return WeightsChoice("real", f"{what}: a block codec's grid shows", facts)
    if facts.codec in rule.lossless:
        return WeightsChoice("default", f"{what}: clean source", facts)
    if facts.bits_per_pixel is not None and facts.bits_per_pixel >= rule.clean_bits_per_pixel:
        return WeightsChoice("default", f"{what}: lossy at a high rate, clean source", facts)
    if facts.bits_per_pixel is None:
        return WeightsChoice("real", f"{what}: lossy, rate unknown, taken as compressed", facts)
    return WeightsChoice("real", f"{what}: compressed source", facts)


def choose_for(source, rule: WeightsRule | None = None) -> WeightsChoice:
    """:func:`choose_weights` for an open source (:func:`vsr.video.open_source`; a pipe is not read again)."""
    return choose_weights(measure(source), rule)
