"""vsr: video super-resolution batch pipeline (EDVR x4).

Nothing heavy is imported here; import the submodule you need
(``vsr.model``, ``vsr.export``, ``vsr.backends``, ``vsr.video``, ``vsr.pipeline`` ...).
"""

__version__ = "0.1.0"
