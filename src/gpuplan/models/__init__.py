"""Model specs from HF configs and the bundled model registry."""
from .registry import RegistryEntry, get_model, list_models, registry_config
from .spec import Block, ModelSpec, SUPPORTED_MODEL_TYPES, spec_from_config

__all__ = ["Block", "ModelSpec", "RegistryEntry", "SUPPORTED_MODEL_TYPES", "get_model", "list_models",
           "registry_config", "spec_from_config"]
