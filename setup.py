"""Only the package list, which pyproject.toml cannot express: every package under vsr/ plus ``vsr.configs``,
whose files stay in the top-level ``configs/`` folder (``[tool.setuptools.package-dir]`` maps it)."""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["vsr", "vsr.*"]), "vsr.configs"])
