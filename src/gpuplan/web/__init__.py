"""HTTP API and web page over the library (optional extra: ``pip install 'gpuplan[web]'``).

FastAPI and uvicorn are imported only when an app is built or served, so ``import gpuplan.web``
works without them.
"""
from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def create_app(*, allow_hub: bool = False, **options: Any):
    """The FastAPI application; see :func:`gpuplan.web.app.create_app` for the options."""
    try:
        from .app import create_app as _create
    except ImportError as err:
        if (err.name or "").split(".")[0] in ("fastapi", "starlette", "pydantic"):
            from ..errors import MissingExtraError
            raise MissingExtraError("the web app", "web", "fastapi") from None
        raise
    return _create(allow_hub=allow_hub, **options)
