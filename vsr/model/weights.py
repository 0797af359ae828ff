"""Checkpoint loading: BasicSR, mmagic/mmediting and plain state dicts, ``weights_only=True`` always.

Entry point: :func:`load_model` (path, ``"random"``, a bundled name or a fetched official checkpoint's name ->
ready EDVR in eval mode; :func:`weights_path` resolves the names).  Bundled
weights are ``vsr/weights/<name>.pth``: ``default`` (clean bicubic training),
``real`` (fine-tuned on compressed, noisy, blurred LR: for lossy web and camera video) and, where the file
exists, ``clean``; ``vsr/weights/<name>.json`` records how each was trained.
"""

from __future__ import annotations

import functools
import json
import os
import pickle
import re
import warnings
import zipfile
import zlib
from pathlib import Path

import torch

from vsr.errors import InputError, WeightsError, did_you_mean
from vsr.files import sha256_file, sha256_once, source_checkout
from vsr.model.config import ModelConfig, list_configs, load_config
from vsr.model.official import (OFFICIAL, OfficialCheckpoint, check_weights_folder, fetched_path, find_official,
                                official_names)


WEIGHTS_DIR = Path(__file__).resolve().parents[1] / "weights"
DEFAULT_WEIGHTS = WEIGHTS_DIR / "default.pth"
BUNDLED_NAMES = ("default", "real", "clean")


def weights_path(weights: str | Path) -> Path:
    """The file behind ``--weights``: ``vsr/weights/<name>.pth`` for a bundled name (:data:`BUNDLED_NAMES`),
    the fetched file for an official checkpoint's name (:mod:`vsr.model.official`), else ``weights`` as a path.

    :class:`InputError` when a bundled name has no file in this build, or an official one is not fetched yet
    (it is never downloaded unasked)."""
    w = str(weights)
    official = find_official(w)
    if official is not None:
        p = fetched_path(official)
        if not p.is_file():
            raise InputError(f"{official.name} is not downloaded: run `vsr models fetch {official.name}` "
                             f"(from {official.hosts}), then --weights {official.name} finds it in {p.parent}")
        check_weights_folder(p)  # a name: vsr chose the file, so vsr checks where it is (a FILE is the user's)
        return p
    if w not in BUNDLED_NAMES:
        return Path(w)
    p = WEIGHTS_DIR / f"{w}.pth"
    if not p.is_file():
        raise InputError(f"no bundled {w!r} weights in this build; pass --weights FILE (or --weights random)")
    return p


def check_digest(weights: str, path: Path) -> None:
    """A bundled or fetched checkpoint must be the file vsr knows (:class:`WeightsError` otherwise): its sha256
    against the one recorded beside it (``vsr/weights/<name>.json``) or published (:mod:`vsr.model.official`),
    once per version of the file, so a damaged copy (a bad disk, an interrupted copy) is one line at load, not
    a model that silently computes something else.  Other files have nothing to be checked against."""
    official = find_official(weights)
    if official is not None:
        expected, label = official.digest, f"fetched {official.name!r}"
        fix = f"run `vsr models fetch {official.name}` to download it again"
    elif weights in BUNDLED_NAMES:
        expected, label = _bundled_digest(weights), f"bundled {weights!r}"
        # in a checkout the pair is the project's own (a shipping cut short by a kill): restored or shipped again
        fix = ("restore them (git checkout -- vsr/weights) or ship them again (python -m vsr.train.ship CHECKPOINT "
               f"--out {path} --overwrite)") if source_checkout() else "reinstall vsr"
    else:
        return
    if expected is None:
        return
    digest = sha256_once(path)
    previous = _bundled_digest(weights, "previous_sha256") if official is None else None
    if not digest.startswith(expected) and not (previous and digest.startswith(previous)):
        raise WeightsError(f"the {label} weights are damaged: {path} has sha256 {digest[:16]}..., not "
                           f"{expected[:16]}...; {fix}")


def _bundled_digest(name: str, key: str = "sha256") -> str | None:
    """The sha256 recorded for the bundled weights ``name`` (None: its record has none).  ``previous_sha256``:
    the weights a shipping cut short by a kill left in place under the record that replaces them (it renames the
    record, then the weights: :func:`vsr.train.ship._publish`), accepted as well."""
    try:
        record = json.loads((WEIGHTS_DIR / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None
    digest = record.get(key) if isinstance(record, dict) else None
    return digest if isinstance(digest, str) and digest else None


bundled_path = weights_path  # its older name (vsr.jobs.spec, vsr.train.trainer)


def weights_names() -> tuple[str, ...]:
    """The names ``--weights`` takes besides a file: the bundled ones, the official checkpoints', ``random``."""
    return BUNDLED_NAMES + official_names() + ("random",)


def _closest_name(text: str) -> str:
    """``did you mean`` for a missing file given as a bare word (a typo of a name), nothing for a path."""
    if "/" in text or "\\" in text or Path(text).suffix:
        return ""
    return did_you_mean(text, weights_names())


def identify_official(path: Path, digest: str | None = None) -> OfficialCheckpoint | None:
    """Recognise an official BasicSR file by sha256, or by BasicSR's ``-<sha256[:8]>`` file-name suffix."""
    digest = digest or sha256_file(path)
    for off in OFFICIAL:
        if off.sha256 == digest:
            return off
    for off in OFFICIAL:
        if off.sha256 is None and digest.startswith(off.prefix):
            return off
    return None


def zip_damage(path: Path) -> str | None:
    """What is wrong with the zip archive of a ``torch.save`` file (a member whose CRC-32 does not match its
    bytes), or None; None too for a file that is not a zip (the legacy format carries no checksum).
    ``torch.load`` reads the members without checking their CRCs: a flipped byte loads as another weight."""
    st = os.stat(path)
    return _zip_damage_of_version(os.fspath(path), st.st_mtime_ns, st.st_size, st.st_ino)


@functools.lru_cache(maxsize=32)
def _zip_damage_of_version(path: str, mtime_ns: int, size: int, inode: int) -> str | None:
    if not zipfile.is_zipfile(path):
        return None
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as e:  # a damaged header or directory
        return f"its zip archive cannot be read ({e})"
    return None if bad is None else f"{bad!r} fails its CRC-32 check"


def read_checkpoint(path: str | Path) -> dict:
    """``torch.load(weights_only=True)`` with one-line errors for every way a file can be bad."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"weights file not found: {p}{_closest_name(str(path))}")
    if not p.is_file():
        raise InputError(f"weights path is not a file: {p}")
    damaged = zip_damage(p)
    if damaged:
        raise WeightsError(f"the weights file {p} is damaged: {damaged} (changed after it was saved: a bad disk, "
                           "an interrupted copy); copy or save it again")
    try:
        obj = torch.load(p, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        text = str(e)
        glob = next((ln.strip() for ln in text.splitlines() if "GLOBAL" in ln or "Unsupported global" in ln), "")
        if glob:
            raise WeightsError(f"{p}: refused: unpickling needs code execution ({glob[:120]}); only plain "
                               "tensor checkpoints are loaded (weights_only=True)") from None
        raise WeightsError(f"not a PyTorch checkpoint: {p} (weights_only=True could not read it: not a "
                           "torch.save file, or one holding arbitrary Python objects)") from None
    except Exception as e:  # noqa: BLE001 -- see below
        # torch's weights-only unpickler interprets the file's bytes; on garbage (a text file, a truncated zip)
        # it fails with whatever its stack machine hits: IndexError, KeyError, EOFError, RuntimeError, ...
        first = (str(e).splitlines()[0] if str(e) else "").split(". ")[0]
        raise WeightsError(f"not a PyTorch checkpoint: {p} (truncated, corrupt or another format: "
                           f"{type(e).__name__}{': ' + first[:120] if first else ''})") from None
    if not isinstance(obj, dict):
        raise WeightsError(f"{p}: checkpoint holds a {type(obj).__name__}, not a state dict")
    return obj


_MMAGIC_RENAMES = (
    (re.compile(r"^feat_l([23])_conv([12])\."), lambda m: f"conv_l{m.group(1)}_{m.group(2)}."),
    (re.compile(r"^pcd_alignment\."), lambda m: "pcd_align."),
    (re.compile(r"^upsample([12])\.upsample_conv\."), lambda m: f"upconv{m.group(1)}."),
    (re.compile(r"\.conv\.(weight|bias)$"), lambda m: f".{m.group(1)}"),  # mmcv ConvModule wrapper
)


def extract_state_dict(obj: dict, *, prefer_ema: bool = True) -> tuple[dict, str]:
    """Find the EDVR state dict inside a checkpoint; returns (state_dict, format description)."""
    if "params_ema" in obj and prefer_ema and isinstance(obj["params_ema"], dict):
        return dict(obj["params_ema"]), "basicsr:params_ema"
    if "params" in obj and isinstance(obj["params"], dict):
        return dict(obj["params"]), "basicsr:params"
    if "state_dict" in obj and isinstance(obj["state_dict"], dict):
        sd = obj["state_dict"]
        gen = {k[len("generator."):]: v for k, v in sd.items() if k.startswith("generator.")}
        if gen:
            sd, fmt = gen, "mmagic"
        else:
            fmt = "state_dict"
        out = {}
        for k, v in sd.items():
            for pat, rep in _MMAGIC_RENAMES:
                k = pat.sub(rep, k)
            out[k] = v
        return out, fmt
    sd = {k[len("module."):] if k.startswith("module.") else k: v for k, v in obj.items()}
    if not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise WeightsError("checkpoint has no 'params', 'params_ema' or 'state_dict' entry and is not a state dict")
    return sd, "plain"


def random_state(model: torch.nn.Module, seed: int = 0) -> None:
    """Seeded random init, with *non-zero* offset convolutions so that DCN samples really move."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            fan_in = max(p[0].numel(), 1) if p.dim() > 1 else 64
            bound = 1.0 / fan_in**0.5
            if "conv_offset" in name:
                # Offsets of up to a few pixels, varying per pixel: samples leave the regular grid
                # (and the image near its borders), masks spread over (0.1, 0.9).
                bound = 2.5 if name.endswith("bias") else 8.0 / fan_in**0.5
            p.copy_(torch.empty_like(p).uniform_(-bound, bound, generator=g))


def build_model(config: ModelConfig) -> torch.nn.Module:
    from vsr.model.edvr import EDVR

    return EDVR(**config.arch_kwargs())


def expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Parameter name -> shape of EDVR for ``config`` (built on the meta device: no memory, no init)."""
    with torch.device("meta"):
        return {k: tuple(v.shape) for k, v in build_model(config).state_dict().items()}


def mismatch(sd: dict, own: dict[str, tuple[int, ...]]) -> tuple[int, str]:
    """(how many keys or shapes of ``sd`` differ from ``own``, a description of them; 0 and "" when it fits)."""
    missing = [k for k in own if k not in sd]
    unexpected = [k for k in sd if k not in own]
    shapes = [k for k in sd if k in own and tuple(sd[k].shape) != own[k]]
    parts = []
    if missing:
        parts.append(f"missing {len(missing)} keys (first: {', '.join(missing[:3])})")
    if unexpected:
        parts.append(f"unexpected {len(unexpected)} keys (first: {', '.join(unexpected[:3])})")
    if shapes and not parts:
        k = shapes[0]
        parts.append(f"{k} has shape {tuple(sd[k].shape)}, config expects {own[k]}")
    return len(missing) + len(unexpected) + len(shapes), "; ".join(parts)


def load_state(model: torch.nn.Module, sd: dict, config: ModelConfig, source: str, strict: bool = True) -> None:
    own = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if strict:
        count, why = mismatch(sd, own)
    else:  # only the shapes of the keys both have
        count, why = mismatch({k: v for k, v in sd.items() if k in own}, {k: s for k, s in own.items() if k in sd})
    if count:
        raise WeightsError(f"{source} does not fit config {config.name!r}: {why}")
    model.load_state_dict({k: v.float() for k, v in sd.items() if k in own}, strict=strict)


def infer_config(sd: dict, source: str) -> ModelConfig:
    """The config in ``configs/`` whose EDVR has exactly ``sd``'s keys and shapes (edvr-m first where several
    do, as configs differing only in inference settings share a state dict)."""
    names = sorted(list_configs(), key=lambda n: (n != "edvr-m", n))
    scored = []
    for name in names:
        cfg = load_config(name)
        count, why = mismatch(sd, expected_shapes(cfg))
        if count == 0:
            return cfg
        scored.append((count, name, why))
    if not scored:
        raise WeightsError(f"{source}: no model configs to match it against; pass --config")
    count, name, why = min(scored)
    raise WeightsError(f"{source} fits none of the configs ({', '.join(sorted(names))}); closest is "
                       f"{name!r}: {why}; pass --config with a TOML file that matches it")


def resolve_config(weights: str | Path, config: str | ModelConfig | None) -> tuple[ModelConfig, str]:
    """The config to use for ``weights``: explicit, official-by-hash, stored in the checkpoint, or the one in
    ``configs/`` that its keys and shapes fit (:class:`WeightsError` naming the closest when none does)."""
    if isinstance(config, ModelConfig):
        return config, "given"
    if config is not None:
        return load_config(config), "given"
    w = str(weights)
    if w == "random":
        return load_config("edvr-m"), "default for random"
    p = weights_path(w)
    check_digest(w, p)
    off = find_official(w) or (identify_official(p) if p.is_file() else None)
    if off is not None:
        return load_config(off.config), f"official {off.filename}"
    obj = read_checkpoint(p)
    meta = obj.get("vsr") if isinstance(obj.get("vsr"), dict) else None
    if meta and "config" in meta:
        return load_config(meta["config"]), "stored in checkpoint"
    sd, _fmt = extract_state_dict(obj)
    return infer_config(sd, str(p)), "fits the checkpoint"


def load_model(weights: str | Path = "default", config: str | ModelConfig | None = None, *, seed: int = 0,
               strict: bool = True) -> tuple[torch.nn.Module, ModelConfig]:
    """Build EDVR for ``config`` and load ``weights`` (a path, a bundled name or ``"random"``).

    Returns ``(model in eval mode, float32, CPU; config)``.
    """
    w = str(weights)
    if w != "random":
        weights_path(w)  # a missing bundled or unfetched file fails here, before any config is guessed
    cfg, _ = resolve_config(weights, config)
    model = build_model(cfg)
    if w == "random":
        warnings.warn("using seeded random weights (--weights random): output is meaningless, for testing only",
                      stacklevel=2)
        random_state(model, seed)
    else:
        path = weights_path(w)
        check_digest(w, path)
        sd, _fmt = extract_state_dict(read_checkpoint(path))
        try:
            load_state(model, sd, cfg, str(path), strict=strict)
        except WeightsError:
            if w not in BUNDLED_NAMES:
                raise
            # `--config edvr-m` alone: the bundled weights (what no --weights means) are another model
            own, _ = resolve_config(w, None)
            raise WeightsError(f"the bundled {w!r} weights are for {own.name}, not {cfg.name}: with --config "
                               f"{cfg.name} give its weights too (--weights FILE, a fetched official checkpoint: "
                               f"see vsr models, or --weights random)") from None
    return model.eval(), cfg
