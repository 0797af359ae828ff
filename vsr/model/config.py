"""Model configurations: one TOML file per variant in ``configs/`` (the single source of model variants)."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from vsr.errors import ConfigError, did_you_mean
from vsr.files import config_dir, loads_toml

PADDING_MODES = ("reflection_circle", "replicate")

# (field, least, most): the upper bounds are far above any published EDVR and keep a mistyped value from
# becoming a model of terabytes
_LIMITS = (("num_feat", 1, 1024), ("num_frame", 1, 31), ("num_extract_block", 1, 200),
           ("num_reconstruct_block", 1, 200), ("deformable_groups", 1, 64))
# the keys a config file may hold, by table; None is the top level
_KEYS = {None: {"name", "description", "model", "inference"},
         "model": {"arch", "num_feat", "num_frame", "num_extract_block", "num_reconstruct_block",
                   "deformable_groups", "with_tsa", "center_frame_idx"},
         "inference": {"padding", "memory_fixed_mb", "memory_bytes_per_pixel"}}
_REQUIRED = ("num_feat", "num_frame", "num_extract_block", "num_reconstruct_block")


@dataclass(frozen=True)
class ModelConfig:
    """An EDVR variant.  ``arch_kwargs`` are the keyword arguments of :class:`vsr.model.edvr.EDVR`."""

    name: str
    description: str
    num_feat: int
    num_frame: int
    num_extract_block: int
    num_reconstruct_block: int
    deformable_groups: int = 8
    with_tsa: bool = True
    center_frame_idx: int | None = None
    padding: str = "reflection_circle"
    source: str = field(default="", compare=False)
    # the model's measured working memory on the CPU backends (vsr.pipeline.memory.ModelMemory; None: the
    # EDVR-S figures there): MB fixed + bytes per LR pixel of one item, from scripts/bench_mem_pattern.py --memory
    memory_fixed_mb: float | None = field(default=None, compare=False)
    memory_bytes_per_pixel: float | None = field(default=None, compare=False)

    def __post_init__(self):
        for name, low, high in _LIMITS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{name} must be an integer, not {value!r}")
            if not low <= value <= high:
                raise ConfigError(f"{name} must be between {low} and {high}, not {value}")
        if self.num_feat % self.deformable_groups:
            raise ConfigError(f"num_feat {self.num_feat} must be a multiple of deformable_groups "
                              f"{self.deformable_groups}")
        if not isinstance(self.with_tsa, bool):
            raise ConfigError(f"with_tsa must be true or false, not {self.with_tsa!r}")
        c = self.center_frame_idx
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < self.num_frame):
            raise ConfigError(f"center_frame_idx must be an integer from 0 to num_frame - 1 "
                              f"({self.num_frame - 1}), not {c!r}")
        if self.padding not in PADDING_MODES:
            raise ConfigError(f"padding must be one of {', '.join(PADDING_MODES)}, not {self.padding!r}")
        for name in ("memory_fixed_mb", "memory_bytes_per_pixel"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1e9):
                raise ConfigError(f"{name} must be a positive number, not {v!r}")

    @property
    def center(self) -> int:
        return self.num_frame // 2 if self.center_frame_idx is None else self.center_frame_idx

    @property
    def radius(self) -> int:
        """Frames needed on each side of the output frame (the window is ``2*radius+1`` when T is odd)."""
        return self.num_frame // 2

    def arch_kwargs(self) -> dict:
        return dict(num_feat=self.num_feat, num_frame=self.num_frame, deformable_groups=self.deformable_groups,
                    num_extract_block=self.num_extract_block, num_reconstruct_block=self.num_reconstruct_block,
                    center_frame_idx=self.center_frame_idx, with_tsa=self.with_tsa)


def list_configs() -> list[str]:
    return sorted(p.stem for p in config_dir().glob("*.toml"))


def config_path(name_or_path: str | os.PathLike) -> Path:
    """Where config ``name_or_path`` is read from: a ``.toml`` path as given, else ``configs/<name>.toml``."""
    p = Path(name_or_path)
    return p if p.suffix == ".toml" else config_dir() / f"{name_or_path}.toml"


def load_config(name_or_path: str | os.PathLike) -> ModelConfig:
    """Load ``configs/<name>.toml`` or a TOML file path; every field is checked (one-line :class:`ConfigError`)."""
    p = config_path(name_or_path)
    if not p.is_file():
        hint = "" if Path(name_or_path).suffix == ".toml" else did_you_mean(str(name_or_path), list_configs())
        raise ConfigError(f"unknown config {str(name_or_path)!r}{hint} (known: {', '.join(list_configs())})")
    data = read_toml(p)
    try:
        return _from_toml(data, p)
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from None


def _from_toml(data: dict, p: Path) -> ModelConfig:
    _check_keys(data, None)
    m = data.get("model")
    if not isinstance(m, dict):
        raise ConfigError("missing [model] table")
    inference = data.get("inference", {})
    if not isinstance(inference, dict):
        raise ConfigError("inference must be a table")
    _check_keys(m, "model")
    _check_keys(inference, "inference")
    missing = [k for k in _REQUIRED if k not in m]
    if missing:
        raise ConfigError(f"[model] is missing {', '.join(missing)}")
    if m.get("arch", "EDVR") != "EDVR":
        raise ConfigError(f"unsupported arch {m.get('arch')!r} (only EDVR)")
    for key in ("name", "description"):
        if not isinstance(data.get(key, ""), str):
            raise ConfigError(f"{key} must be a string, not {data[key]!r}")
    return ModelConfig(
        name=data.get("name", p.stem), description=data.get("description", ""),
        num_feat=m["num_feat"], num_frame=m["num_frame"], num_extract_block=m["num_extract_block"],
        num_reconstruct_block=m["num_reconstruct_block"], deformable_groups=m.get("deformable_groups", 8),
        with_tsa=m.get("with_tsa", True), center_frame_idx=m.get("center_frame_idx"),
        padding=inference.get("padding", "reflection_circle"), source=str(p),
        memory_fixed_mb=inference.get("memory_fixed_mb"),
        memory_bytes_per_pixel=inference.get("memory_bytes_per_pixel"))


def _check_keys(table: dict, name: str | None) -> None:
    unknown = sorted(set(table) - _KEYS[name])
    if unknown:
        where = f"[{name}]" if name else "the top level"
        raise ConfigError(f"unknown key {unknown[0]!r} in {where} (known: {', '.join(sorted(_KEYS[name]))})")


def read_toml(p: Path) -> dict:
    """The table of TOML file ``p``; a file that is not TOML is one :class:`ConfigError` line."""
    try:
        return loads_toml(p.read_text())
    except UnicodeDecodeError:  # (not the codec's "can't decode byte 0x96 in position 42")
        raise ConfigError(f"{p}: not a TOML file (not text)") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not a TOML file ({str(e).splitlines()[0] if str(e) else type(e).__name__})") \
            from None
