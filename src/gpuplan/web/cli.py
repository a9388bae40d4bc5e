"""`gpuplan web`: serve the HTTP API and the page (needs the optional extra gpuplan[web])."""
from __future__ import annotations

import argparse
import ipaddress
import sys

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]", "::1")

PIP_HINT = "pip install 'gpuplan[web]'"


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("web", help="serve the web page and HTTP API",
                              description="Serve the gpuplan page and JSON API (OpenAPI at /openapi.json). "
                                          "Binds to 127.0.0.1 unless --host says otherwise.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--allow-hub", action="store_true",
                   help="let clients name Hugging Face repo ids (the server then downloads their config.json)")
    p.add_argument("--time-limit", type=float, default=30.0, metavar="S", help="seconds per request (default 30)")
    p.add_argument("--workers", type=int, default=4, help="computations at once (default 4)")
    p.set_defaults(func=run)
    return p


def is_loopback(host: str) -> bool:
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def run(args: argparse.Namespace) -> int:
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError as err:
        print(f"error: `gpuplan web` needs the optional package '{err.name}', which is not installed. "
              f"Fix: {PIP_HINT}", file=sys.stderr)
        return 2
    from .app import create_app
    if not 1 <= args.port <= 65535:
        print(f"error: --port {args.port} is not a port number (1-65535).", file=sys.stderr)
        return 2
    loopback = is_loopback(args.host)
    app = create_app(allow_hub=args.allow_hub, time_limit_s=args.time_limit, workers=max(1, args.workers),
                     allowed_hosts=LOOPBACK_NAMES if loopback else None)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"gpuplan web: http://{shown}:{args.port}/  (API: /openapi.json; Ctrl-C stops)", file=sys.stderr)
    if not loopback:
        print("warning: listening beyond this machine; anyone who can reach it can use the API.", file=sys.stderr)
    if args.allow_hub:
        print("note: Hugging Face Hub look-ups are on: clients can make this server download config.json files.",
              file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", server_header=False)
    return 0
