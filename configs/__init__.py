"""vsr's configuration files, installed as the package ``vsr.configs`` (``pyproject.toml`` maps it here).

Read them through :func:`vsr.files.config_dir`, never by a path relative to the source tree: an installed vsr
has no source tree.
"""
