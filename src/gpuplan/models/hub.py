"""Fetching a config.json from the Hugging Face Hub, fast to fail when there is no network.

huggingface_hub retries a failed request five times with back-off (about 24 s before it gives up
when the host cannot even be resolved). Before asking it, we look in its local cache and probe the
endpoint with one TCP connection bounded by `PROBE_TIMEOUT_S`; name resolution runs in a daemon
thread because `getaddrinfo` has no timeout of its own. `HF_HUB_OFFLINE` is read with
huggingface_hub's own truth values ("1", "ON", "YES", "TRUE"; huggingface_hub/constants.py
`_is_true`), and offline the cached config is used when there is one.
"""
from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from urllib.parse import urlparse

PROBE_TIMEOUT_S = 1.5
DEFAULT_ENDPOINT = "https://huggingface.co"
_TRUE = {"1", "ON", "YES", "TRUE"}


def env_true(name: str) -> bool:
    return os.environ.get(name, "").upper() in _TRUE


def offline() -> bool:
    """True when hub look-ups are off: HF_HUB_OFFLINE (huggingface_hub's meaning) or GPUPLAN_OFFLINE."""
    return env_true("HF_HUB_OFFLINE") or env_true("GPUPLAN_OFFLINE")


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def probe_target(url: str) -> str:
    """What the probe connects to: the HTTPS/HTTP proxy when one is set (requests honours it), else `url`."""
    scheme = urlparse(url).scheme or "https"
    names = ("HTTPS_PROXY", "https_proxy") if scheme == "https" else ("HTTP_PROXY", "http_proxy")
    host = urlparse(url).hostname or ""
    no_proxy = os.environ.get("NO_PROXY") or os.environ.get("no_proxy") or ""
    if any(host.endswith(n.strip().lstrip(".")) for n in no_proxy.split(",") if n.strip()):
        return url
    for n in names:
        if os.environ.get(n):
            proxy = os.environ[n]
            return proxy if "://" in proxy else "http://" + proxy
    return url


def cached_config(repo_id: str) -> Path | None:
    """The config.json huggingface_hub cached for `repo_id` (latest revision), or None."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        hit = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # malformed repo id or cache folder: treat as not cached
        return None
    return Path(hit) if isinstance(hit, str) else None


def probe(url: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None when a TCP connection to `url`'s host opens within `timeout` seconds, else the reason."""
    parsed = urlparse(url)
    host = parsed.hostname
    if not host:
        return f"'{url}' has no host name"
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    result: list[str | None] = []

    def connect() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                result.append(None)
        except OSError as err:
            result.append(f"{type(err).__name__}: {err.strerror or err}")

    t = threading.Thread(target=connect, daemon=True)
    t.start()
    t.join(timeout)
    if not result:
        return f"no answer from {host}:{port} within {timeout:g} s"
    return result[0]
