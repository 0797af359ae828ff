"""A subgraph plan on disk, and the cache of plans under ``engines/plans/``.

A plan directory holds::

    manifest.json       readable: cache key fields, steps (segment / bridge), tensors with shapes and dtypes,
                        memory plan for batch 1, sha256 of every file
    segmentNN.onnx      one standalone ONNX model per segment
    constants.npz       the bridge ops' constant inputs (DCN weights and biases)

The directory name is a hash of everything that makes the plan valid (:class:`PlanKey`): the ONNX model's
checksum, its input shape bucket, the precision (with, for int8, the digest of the quantization parameters), the
segment backend and its version, the bridge op set, whether the per-frame front is cut off (``front``) and the
plan format.  :class:`PlanCache` never uses a stale plan (different key -> different directory; a directory
whose manifest or files do not match is rebuilt) and never rebuilds a valid one; building one removes the plans
of the same model (:func:`model_of`) that no run used for :data:`vsr.unused.UNUSED_DAYS` (a run marks the plan
it uses), each key change having left its plan behind for good, and the build folders (``.<digest>.<random>``)
of builds killed outright, not written for :data:`ABANDONED_DAYS`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import warnings
import zipfile
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx

from vsr.errors import BackendError, InputError
from vsr.files import code_digest, engine_dir, engine_write_error, private_folder, sha256_file, untrusted
from vsr.plan.arena import ArenaPlan, Buffer, plan_arena
from vsr.plan.front import FRAMES
from vsr.plan.partition import DEFAULT_BRIDGE_OPS, Partition, Step, TensorInfo, eval_dim, partition
from vsr.unused import UNUSED_DAYS, mark_used, remove_unused

log = logging.getLogger(__name__)

PLAN_FORMAT = 1
MANIFEST = "manifest.json"
CONSTANTS = "constants.npz"


@dataclass(frozen=True)
class PlanKey:
    """Everything a plan's validity depends on; ``digest`` names its directory."""

    model_sha256: str
    bucket: tuple  # the model input's shape (symbolic batch kept as a string)
    precision: str = "fp32"
    backend: str = "onnxruntime"
    backend_version: str = ""
    bridge_ops: tuple[str, ...] = DEFAULT_BRIDGE_OPS
    fuse_activations: bool = True
    kernel_device: str = "cpu"
    plan_format: int = PLAN_FORMAT
    quant: str = ""  # digest of the quantization parameters (int8 plans; "" for fp32)
    front: bool = False  # the per-frame front is a segment of its own (vsr.plan.front)
    tools: str = ""  # onnx's version and a digest of vsr's code that writes plans (:func:`plan_tools`)

    def fields(self) -> dict:
        d = asdict(self)
        for name in ("quant", "front"):
            if not d[name]:
                del d[name]  # the keys (and cached plans) of plans without it stay as they were
        d["bucket"] = list(self.bucket)
        d["bridge_ops"] = sorted(self.bridge_ops)
        return d

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.fields(), sort_keys=True).encode()).hexdigest()[:24]


@dataclass
class SubgraphPlan:
    """A loaded plan: steps, tensors, graph I/O, bridge constants, and where its segment files are."""

    directory: Path
    steps: list[Step]
    tensors: dict[str, TensorInfo]
    inputs: list[str]
    outputs: list[str]
    constants: dict[str, np.ndarray]
    key: dict = field(default_factory=dict)
    frame_input: str | None = None  # the per-frame front's input, where the plan has one

    def per_frame_plan(self) -> "SubgraphPlan":
        """The per-frame front on its own: input the frames ``(F, C, H, W)`` (``frame_input``), outputs every
        frame's features ``(F, ...)``; F is any number of frames, bound by the caller."""
        steps = [s for s in self.steps if s.per_frame]
        if self.frame_input is None or not steps:
            raise BackendError(f"{self.directory}: the plan has no per-frame front")
        outs = [t for s in steps for t in s.outputs]
        tensors = {t: TensorInfo(t, (FRAMES,) + tuple(self.tensors[t].shape[1:]), self.tensors[t].dtype)
                   for t in [self.frame_input] + outs}
        return SubgraphPlan(self.directory, steps, tensors, [self.frame_input], outs, {}, self.key)

    def window_plan(self) -> "SubgraphPlan":
        """The plan without its per-frame front (the plan itself when it has none): inputs the windows and, after
        them, the front's outputs as ``(N*T, ...)`` rows, window-major."""
        if self.frame_input is None:
            return self
        feats = [t for s in self.steps if s.per_frame for t in s.outputs]
        return SubgraphPlan(self.directory, [s for s in self.steps if not s.per_frame], self.tensors,
                            self.inputs + feats, self.outputs, self.constants, self.key)

    def symbols(self, input_shapes: dict[str, tuple[int, ...]]) -> dict[str, int]:
        """Bind the symbolic dimensions of the graph inputs (e.g. ``N``) from concrete input shapes."""
        env: dict[str, int] = {}
        for name, shape in input_shapes.items():
            decl = self.tensors[name].shape
            if len(decl) != len(shape):
                raise InputError(f"plan input {name!r} has rank {len(decl)}, got shape {tuple(shape)}")
            for d, v in zip(decl, shape):
                if isinstance(d, str) and d.isidentifier():
                    if env.setdefault(d, int(v)) != int(v):
                        raise InputError(f"plan input {name!r}: dimension {d} bound twice ({env[d]} and {v})")
                elif not isinstance(d, str) and d != v:
                    raise InputError(f"plan input {name!r} expects shape {decl}, got {tuple(shape)}")
        for name, shape in input_shapes.items():  # dimensions such as "5*N": what the symbols make them
            decl = self.tensors[name].shape
            if any(isinstance(d, str) and not d.isidentifier() and eval_dim(d, env) != v for d, v in zip(decl, shape)):
                raise InputError(f"plan input {name!r} expects shape {decl} with {env}, got {tuple(shape)}")
        return env

    def arena_plan(self, env: dict[str, int], workspaces: dict[int, int] | None = None) -> ArenaPlan:
        """Lifetimes of every exchanged tensor (and of each step's workspace), packed into one arena."""
        n = len(self.steps)
        first: dict[str, int] = {t: -1 for t in self.inputs}
        last: dict[str, int] = {t: -1 for t in self.inputs}
        for i, s in enumerate(self.steps):
            for t in s.runtime_inputs():
                last[t] = i
            for t in s.outputs:
                first.setdefault(t, i)
                last.setdefault(t, i)
        for t in self.outputs:
            last[t] = n
        bufs = [Buffer(t, self.tensors[t].nbytes(env), first[t], last[t]) for t in first]
        for i, nbytes in (workspaces or {}).items():
            if nbytes:
                bufs.append(Buffer(f"workspace:{self.steps[i].name}", nbytes, i, i))
        return plan_arena(bufs)

    @classmethod
    def load(cls, directory: str | os.PathLike, verify: bool = True) -> "SubgraphPlan":
        """The plan in ``directory``; BackendError (one line) where it is not a whole one: its manifest missing,
        damaged or incomplete, or (``verify``) a file not the one its manifest lists."""
        d = Path(directory)
        try:
            m = json.loads((d / MANIFEST).read_text())
        except (OSError, ValueError) as e:
            raise BackendError(f"{d}: not a readable plan ({e})") from None
        if not isinstance(m, dict) or m.get("plan_format") != PLAN_FORMAT:
            raise BackendError(f"{d}: plan format {m.get('plan_format') if isinstance(m, dict) else None} "
                               f"(this vsr reads {PLAN_FORMAT})")
        try:
            return cls._from_manifest(d, m, verify)
        except (KeyError, TypeError, ValueError, AttributeError, OSError, zipfile.BadZipFile) as e:
            raise BackendError(f"{d}: not a whole plan ({type(e).__name__}: {e})") from None

    @classmethod
    def _from_manifest(cls, d: Path, m: dict, verify: bool) -> "SubgraphPlan":
        if verify:
            for name, sha in m["files"].items():
                p = d / name
                if not p.is_file() or sha256_file(p) != sha:
                    raise BackendError(f"{d}: {name} is missing or does not match the manifest")
        with open(d / CONSTANTS, "rb") as f, np.load(f) as z:  # (np.load leaves its file open on BadZipFile)
            # npz keys are the initializer names, escaped by index (names may contain '/')
            constants = {name: z[f"c{i}"] for i, name in enumerate(m["constants"])}
        tensors = {k: TensorInfo(k, tuple(v["shape"]), v["dtype"]) for k, v in m["tensors"].items()}
        return cls(directory=d, steps=[Step.from_json(s) for s in m["steps"]], tensors=tensors,
                   inputs=list(m["inputs"]), outputs=list(m["outputs"]), constants=constants, key=m.get("key", {}),
                   frame_input=m.get("frame_input"))


def _model_bucket(model: onnx.ModelProto) -> tuple:
    inits = {t.name for t in model.graph.initializer}
    shapes = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shapes.append([d.dim_param if d.HasField("dim_param") else int(d.dim_value)
                       for d in vi.type.tensor_type.shape.dim])
    return tuple(tuple(s) for s in shapes) if len(shapes) != 1 else tuple(shapes[0])


# vsr's files whose code decides what a plan holds (PLAN_FORMAT and QUANT_FORMAT are bumped by hand, and
# vsr's version number never changes): the partition, and for int8 plans the rewrite and its calibration
PLAN_CODE = ("vsr/plan/partition.py", "vsr/plan/front.py", "vsr/plan/plan.py")
INT8_CODE = ("vsr/quant/int8_plan.py", "vsr/quant/rewrite.py", "vsr/quant/calibrate.py",
             "vsr/quant/segment_graph.py", "vsr/quant/config.py")


@functools.lru_cache(maxsize=2)
def plan_tools(int8: bool = False) -> str:
    """onnx's version (it writes the segments) and a digest of :data:`PLAN_CODE` (and :data:`INT8_CODE`)."""
    return f"onnx {onnx.__version__}, code {code_digest(PLAN_CODE + (INT8_CODE if int8 else ()))[:16]}"


def plan_key(onnx_path: str | os.PathLike, *, backend: str = "onnxruntime", backend_version: str | None = None,
             precision: str = "fp32", bridge_ops=DEFAULT_BRIDGE_OPS, fuse_activations: bool = True,
             kernel_device: str = "cpu", model: onnx.ModelProto | None = None, quant: str = "",
             front: bool = False) -> PlanKey:
    if backend_version is None:
        if backend != "onnxruntime":
            raise BackendError(f"plan_key: give backend_version for backend {backend!r}")
        import onnxruntime as ort

        backend_version = ort.__version__
    model = model if model is not None else onnx.load(str(onnx_path), load_external_data=False)
    return PlanKey(model_sha256=sha256_file(onnx_path), bucket=_model_bucket(model), precision=precision,
                   backend=backend, backend_version=backend_version, bridge_ops=tuple(sorted(set(bridge_ops))),
                   fuse_activations=fuse_activations, kernel_device=kernel_device, quant=quant, front=front,
                   tools=plan_tools(bool(quant)))


# transform(partition, model, out_dir) -> manifest additions: rewrites ``partition.segments`` in place (e.g. into
# int8) and may write extra files into ``out_dir`` (listed under "extra_files" in what it returns).
PlanTransform = Callable[[Partition, onnx.ModelProto, Path], dict]


def write_plan(onnx_path: str | os.PathLike, out_dir: str | os.PathLike, *, bridge_ops=DEFAULT_BRIDGE_OPS,
               fuse_activations: bool = True, precision: str = "fp32", backend: str = "onnxruntime",
               backend_version: str | None = None, kernel_device: str = "cpu", quant: str = "",
               transform: PlanTransform | None = None, front: bool = False,
               source: str | os.PathLike | None = None) -> SubgraphPlan:
    """Partition the ONNX model at ``onnx_path`` and write the plan into ``out_dir`` (created; files replaced).

    This is what ``vsr export ... --split DIR`` calls.  Returns the loaded plan.  A plan of another precision
    than fp32 needs the ``transform`` that makes its segments (:func:`vsr.quant.int8_plan_transform`).  ``front``:
    the per-frame front becomes a segment of its own (:func:`vsr.plan.partition.partition`).  ``source``: the
    model's name in the manifest, where ``onnx_path`` is a temporary name it will be published under.
    """
    src = Path(onnx_path)
    if not src.is_file():
        raise InputError(f"{src}: no such ONNX file")
    if (precision == "fp32") != (transform is None):
        raise BackendError(f"precision {precision!r}: an fp32 plan takes no transform, any other needs one")
    try:
        model = onnx.load(str(src))
    except Exception as e:
        raise InputError(f"{src}: not a readable ONNX model ({e})") from None
    key = plan_key(src, backend=backend, backend_version=backend_version, precision=precision,
                   bridge_ops=bridge_ops, fuse_activations=fuse_activations, kernel_device=kernel_device, model=model,
                   quant=quant, front=front)
    part = partition(model, bridge_ops=key.bridge_ops, fuse_activations=fuse_activations, front=front)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    extra = transform(part, model, out) if transform is not None else {}
    files = {name: sha256_file(out / name) for name in extra.pop("extra_files", [])}
    for name, seg in part.segments.items():
        p = out / f"{name}.onnx"
        onnx.save(seg, str(p))
        files[p.name] = sha256_file(p)
    const_names = sorted(part.constants)
    np.savez(out / CONSTANTS, **{f"c{i}": part.constants[n] for i, n in enumerate(const_names)})
    files[CONSTANTS] = sha256_file(out / CONSTANTS)
    plan = SubgraphPlan(directory=out, steps=part.steps, tensors=part.tensors, inputs=part.inputs,
                        outputs=part.outputs, constants=part.constants, key=key.fields(), frame_input=part.frame_input)
    batch1 = {d: 1 for t in part.inputs for d in part.tensors[t].shape if isinstance(d, str)}
    mem = plan.window_plan().arena_plan(batch1)
    manifest = {
        "plan_format": PLAN_FORMAT,
        "key": key.fields(),
        "key_digest": key.digest,
        "source": str(src if source is None else source),
        "inputs": part.inputs,
        "outputs": part.outputs,
        **({"frame_input": part.frame_input} if part.frame_input else {}),
        "steps": [s.to_json() for s in part.steps],
        "tensors": {k: {"shape": list(v.shape), "dtype": v.dtype} for k, v in part.tensors.items()},
        "memory_batch1_without_workspaces": mem.summary() | {"symbols": batch1},
        "constants": const_names,
        "files": files,
        **extra,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    log.info("plan %s: %d steps (%d segments) in %s", key.digest, len(part.steps), len(part.segments), out)
    return plan


_DIGEST = re.compile(r"[0-9a-f]{24}")  # a plan folder's name (PlanKey.digest)
_BUILDING = re.compile(r"\.[0-9a-f]{24}\.[a-z0-9_]{8}")  # a plan being built (mkdtemp's name in PlanCache.get)
ABANDONED_DAYS = 1  # a build folder not written for this long was left by a killed run (a build takes minutes)


def model_of(source: str | os.PathLike) -> str:
    """The model a plan is made from: the ONNX file's path less its cache key (``<config>-<H>x<W>``, any weights
    and key, of :func:`vsr.export.cache.cached_export`), or the whole path of another file."""
    return re.sub(r"-[0-9a-f]{20}\.onnx$", "", os.path.abspath(source))


def _of_model(onnx_path: str | os.PathLike) -> Callable[[int], bool]:
    """Whether the plan folder (a descriptor) was made from the model of ``onnx_path``: its manifest's source."""
    model = model_of(onnx_path)

    def belongs(folder: int) -> bool:
        fd = os.open(MANIFEST, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
        with open(fd, "rb") as f:
            manifest = json.loads(f.read(1 << 24))
        source = manifest.get("source") if isinstance(manifest, dict) else None
        return isinstance(source, str) and model_of(source) == model

    return belongs


def plans_dir() -> Path:
    """``<engine dir>/plans`` (:func:`vsr.files.engine_dir`)."""
    return engine_dir() / "plans"


class PlanCache:
    """Plans under ``root`` (default :func:`plans_dir`), one directory per :class:`PlanKey` digest."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else plans_dir()
        self.built = 0  # plans built by this object (tests check that a valid plan is not rebuilt)

    def path(self, key: PlanKey) -> Path:
        return self.root / key.digest

    def get(self, onnx_path: str | os.PathLike, transform: PlanTransform | None = None,
            on_build: Callable[[], None] = lambda: None, **key_fields) -> SubgraphPlan:
        """The valid plan of ``onnx_path``, built on first use or where the cached one is damaged (``on_build()``
        first).  ``transform``: see :func:`write_plan`; its parameters must be in the key (``quant``)."""
        key = plan_key(onnx_path, **key_fields)
        private_folder(self.root, "cached split plans", "what is read back from there decides your output",
                       "VSR_ENGINE_DIR")
        d = self.path(key)
        mark_used(d)  # first: a run that removes plans meanwhile sees this one used
        plan, why = self._cached(d, key)
        if plan is not None:
            return plan
        if why:
            warnings.warn(f"the cached plan {d} {why}; building it again", stacklevel=2)
        on_build()
        tmp = Path(tempfile.mkdtemp(prefix=f".{key.digest}.", dir=self.root))
        try:
            write_plan(onnx_path, tmp, transform=transform, **{k: v for k, v in key_fields.items() if k != "model"})
            if d.is_symlink() or d.is_file():
                d.unlink()
            elif d.exists():
                shutil.rmtree(d)
            os.replace(tmp, d)
        except BaseException as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise engine_write_error(e, self.root, "a split plan")
        self.built += 1
        remove_unused(self.root, _DIGEST.fullmatch, UNUSED_DAYS, keep=d.name, belongs=_of_model(onnx_path),
                      folders=True)
        # what a killed build (SIGKILL, power loss) left; a fresh one may be another machine's build in progress
        remove_unused(self.root, _BUILDING.fullmatch, ABANDONED_DAYS, folders=True)
        return SubgraphPlan.load(d)

    @staticmethod
    def _cached(d: Path, key: PlanKey) -> tuple[SubgraphPlan | None, str]:
        """The cached plan ``d``, or None and why it cannot be used (``""``: there is none): it is not the
        user's alone (a folder of theirs no other user can write, not a link) or not a whole plan of ``key``."""
        if not os.path.lexists(d):
            return None, ""
        why = untrusted(d)
        if why is not None:
            return None, f"is not yours alone ({why})"
        try:
            plan = SubgraphPlan.load(d)
        except BackendError as e:
            return None, f"is unusable: {str(e).removeprefix(f'{d}: ')}"
        if plan.key != json.loads(json.dumps(key.fields())):
            return None, "has a manifest whose key is not its folder's name"
        return plan, ""


def window_input_shape(path: Path) -> list:
    """The dimensions of the one input ``(N, T, 3, H, W)`` of the ONNX model at ``path`` (H and W fixed)."""
    if not path.is_file():
        raise InputError(f"{path}: no such ONNX file")
    try:
        m = onnx.load(str(path), load_external_data=False)
    except Exception as e:
        raise InputError(f"{path}: not a readable ONNX model ({e})") from None
    inits = {t.name for t in m.graph.initializer}
    ins = [vi for vi in m.graph.input if vi.name not in inits]
    if len(ins) != 1:
        raise BackendError(f"{path}: expected one input (N, T, 3, H, W), found {len(ins)}")
    dims = [d.dim_param if d.HasField("dim_param") else int(d.dim_value) for d in ins[0].type.tensor_type.shape.dim]
    if len(dims) != 5 or not all(isinstance(d, int) for d in dims[-2:]):
        raise BackendError(f"{path}: input shape {dims} is not (N, T, 3, H, W) with fixed H and W")
    return dims
