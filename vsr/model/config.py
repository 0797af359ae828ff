"""Model configurations: one TOML file per variant in ``configs/`` (the single source of model variants)."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from vsr.errors import ConfigError

PADDING_MODES = ("reflection_circle", "replicate")


def config_dir() -> Path:
    """``$VSR_CONFIG_DIR`` or the repository's ``configs/`` folder."""
    env = os.environ.get("VSR_CONFIG_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "configs"


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


def load_config(name_or_path: str | os.PathLike) -> ModelConfig:
    """Load ``configs/<name>.toml`` or a TOML file path."""
    p = Path(name_or_path)
    if p.suffix != ".toml":
        p = config_dir() / f"{name_or_path}.toml"
    if not p.is_file():
        raise ConfigError(f"unknown config {str(name_or_path)!r} (known: {', '.join(list_configs())})")
    try:
        data = tomllib.loads(p.read_text())
        m = data["model"]
        if m.get("arch", "EDVR") != "EDVR":
            raise ConfigError(f"{p}: unsupported arch {m.get('arch')!r}")
        padding = data.get("inference", {}).get("padding", "reflection_circle")
        if padding not in PADDING_MODES:
            raise ConfigError(f"{p}: padding must be one of {PADDING_MODES}, not {padding!r}")
        return ModelConfig(
            name=data.get("name", p.stem), description=data.get("description", ""),
            num_feat=int(m["num_feat"]), num_frame=int(m["num_frame"]),
            num_extract_block=int(m["num_extract_block"]), num_reconstruct_block=int(m["num_reconstruct_block"]),
            deformable_groups=int(m.get("deformable_groups", 8)), with_tsa=bool(m.get("with_tsa", True)),
            center_frame_idx=m.get("center_frame_idx"), padding=padding, source=str(p))
    except (KeyError, ValueError, TypeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{p}: malformed config ({e})") from None
