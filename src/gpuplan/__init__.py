"""gpuplan: plan LLM hardware before you buy or rent it."""
__version__ = "0.1.0"

from .errors import GpuplanError  # noqa: E402

__all__ = ["GpuplanError", "__version__"]
