"""EDVR model, its configurations and checkpoint loading.  Entry point: :func:`load_model`."""

from vsr.model.config import ModelConfig, list_configs, load_config
from vsr.model.weights import OFFICIAL, build_model, load_model

__all__ = ["ModelConfig", "list_configs", "load_config", "OFFICIAL", "build_model", "load_model"]
