"""``--precision auto``: int8 where this CPU's int8 ISA measured it faster than fp32 per run, fp32 elsewhere.

The rule is ``configs/quant/precision.toml`` (:class:`PrecisionRule`): per int8 ISA (:mod:`vsr.quant.isa`, read
from the CPU's flags) the precision ``auto`` means there and the measurement that decided it.  Only a backend
with an int8 plan (the split plan) is chosen for; any other keeps its own precision and gets no choice (None).
:class:`PrecisionChoice` is what was chosen and why: the run's first line, and its report's settings.

``$VSR_PRECISION`` (auto | fp32 | int8) stands for a ``--precision`` that was not given: a site (or the test suite)
that wants one precision on every machine sets it.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from functools import lru_cache

from vsr.errors import ConfigError

AUTO = "auto"
ENV = "VSR_PRECISION"
ASKED = (AUTO, "fp32", "int8")


@dataclass(frozen=True)
class IsaEntry:
    """What ``auto`` means on one int8 ISA: ``precision``, the CPU in words, the figure it rests on."""

    precision: str
    cpu: str
    measured: str


@dataclass(frozen=True)
class PrecisionRule:
    """``configs/quant/precision.toml``: an :class:`IsaEntry` per int8 ISA; an ISA it does not list keeps fp32."""

    isas: dict[str, IsaEntry]

    @classmethod
    def load(cls, path: str | os.PathLike | None = None) -> "PrecisionRule":
        from vsr.files import load_config

        def build(data: dict) -> "PrecisionRule":
            isas = {name: IsaEntry(str(e["precision"]), str(e["cpu"]), str(e["measured"]))
                    for name, e in data["isa"].items()}
            bad = [n for n, e in isas.items() if e.precision not in ("fp32", "int8")]
            if bad:
                raise ConfigError(f"precision rule: isa.{bad[0]}.precision must be fp32 or int8")
            return cls(isas)

        return load_config(path, "quant/precision.toml", "precision rule", build)


@lru_cache(maxsize=1)
def default_rule() -> PrecisionRule:
    return PrecisionRule.load()


@dataclass(frozen=True)
class PrecisionChoice:
    """The split plan's precision for a run: ``precision`` (fp32 | int8) for ``asked`` (auto | fp32 | int8), on a
    CPU whose int8 ISA is ``isa``, and ``reason`` in words."""

    precision: str
    asked: str
    isa: str
    reason: str

    def line(self) -> str:
        """``int8 (this CPU has AVX-512 VNNI: int8 ran 2.2x fp32 per run ...; --precision fp32 to override)``."""
        return f"{self.precision} ({self.reason})"

    def to_dict(self) -> dict:
        return asdict(self)


def asked_precision(value: str | None) -> tuple[str, str]:
    """``(precision asked for, by what)``: ``--precision`` as given, else ``$VSR_PRECISION``, else auto; a
    ConfigError for any other name."""
    env = os.environ.get(ENV)
    asked, by = (value, "--precision") if value is not None else (env, f"${ENV}") if env else (AUTO, "default")
    if asked not in ASKED:
        raise ConfigError(f"{by} must be one of {', '.join(ASKED)}, not {asked!r}")
    return asked, by


def choose_precision(asked: str, isa: str | None = None, rule: PrecisionRule | None = None,
                     given_by: str = "--precision") -> PrecisionChoice:
    """The split plan's precision for ``asked`` (given by ``given_by``: an option's or a variable's name) on a CPU
    whose int8 ISA is ``isa`` (None: this one's, :func:`vsr.quant.isa.int8_isa`)."""
    if isa is None:
        from vsr.quant.isa import int8_isa

        isa = int8_isa()
    if asked != AUTO:
        return PrecisionChoice(asked, asked, isa, f"{given_by} {asked}")
    entry = (rule or default_rule()).isas.get(isa)
    if entry is None:
        return PrecisionChoice("fp32", asked, isa, f"int8 ISA {isa} is not in the precision rule; "
                                                   "--precision int8 to try it")
    other = "fp32" if entry.precision == "int8" else "int8"
    verb = "override" if entry.precision == "int8" else "try it"
    return PrecisionChoice(entry.precision, asked, isa,
                           f"this CPU has {entry.cpu}: {entry.measured}; --precision {other} to {verb}")
