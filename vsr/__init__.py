"""vsr: video super-resolution batch pipeline (EDVR x4).

Nothing heavy is imported here; import the submodule you need
(``vsr.model``, ``vsr.export``, ``vsr.backends``, ``vsr.video``, ``vsr.pipeline`` ...).
"""

import os

__version__ = "0.1.0"

# Large torch tensors in 2 MB pages, as numpy already allocates its large arrays (torch's own switch, read at its
# first allocation: vsr imports torch after this; THP_MEM_ALLOC_ENABLE=0 opts out): a 4K frame's float32 output (100 MB)
# is then faulted in and unmapped 50 pages at a time, not 25,000 (12 ms, not 50, to fill; 0.5 ms, not 10, to free: in
# the post stage, where the last reference goes; docs/benchmarks.md, "The post stage per 4K frame")
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

# ONNX Runtime's Linux builds (1.32) start Microsoft's 1DS telemetry when imported: a device id and an event
# database in ~/.cache/Microsoft/DeveloperTools, outside every path the user gave vsr, and events sent where
# the machine reaches the network.  Off unless the user sets ORT_DISABLE_TELEMETRY=0 (read at its import).
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

# torch's dynamo (the ONNX export's tracer; training's torch.compile) makes its inductor cache folder as it is
# imported, by default a predictable one in the shared temporary folder (/tmp/torchinductor_USER, which another
# user can make first): vsr's own cache folder instead, where the rest of what vsr keeps lives (vsr.files).  No
# home (HOME unset, a uid with no passwd entry): expanduser gives "~", a relative folder; with HOME empty, "/".
# Left unset then, and vsr.files.torch_cache_dir sets it, or says what to set, before dynamo is imported.
_cache = (os.environ["XDG_CACHE_HOME"] if os.path.isabs(os.environ.get("XDG_CACHE_HOME", "")) else
          os.path.join(os.path.expanduser("~"), ".cache") if os.environ.get("HOME", "~") else "")
if os.path.isabs(_cache):
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_cache, "vsr", "torchinductor"))
del _cache
