"""`gpuplan web`: serve the HTTP API and the page (needs the optional extra gpuplan[web])."""
from __future__ import annotations

import argparse
import ipaddress
import sys

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]", "::1")

PIP_HINT = "from the gpuplan checkout: pip install '.[web]'"


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


def check_args(args: argparse.Namespace) -> str | None:
    """The error message for an invalid server option, or None (checked before anything starts)."""
    from ..errors import InputError
    from .workers import check_server_options
    try:
        check_server_options(time_limit_s=args.time_limit, workers=args.workers, queue_wait_s=5.0, per_client=2,
                             body_timeout_s=10.0, max_body_bytes=256 * 1024, port=args.port)
    except InputError as err:
        flag = {"time limit": "--time-limit", "workers": "--workers", "port": "--port"}
        name = err.what.split(" ")[0] if not err.what.startswith("time limit") else "time limit"
        return f"error: {flag.get(name, name)} {err.what[len(name):].strip()}: {err.why} Fix: {err.fix}"
    if not args.host or not args.host.strip():
        return "error: --host is empty. Fix: pass an address to bind, e.g. --host 127.0.0.1."
    return None


def allowed_hosts(host: str) -> tuple[str, ...] | None:
    """Host header names the server answers to: None (any) beyond loopback; the loopback names and
    the bound address otherwise (any loopback address literal is accepted by the app as well)."""
    if not is_loopback(host):
        return None
    bound = host.strip().lower()
    return LOOPBACK_NAMES + ((bound,) if bound not in LOOPBACK_NAMES else ())


def run(args: argparse.Namespace) -> int:
    problem = check_args(args)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError as err:
        print(f"error: `gpuplan web` needs the optional package '{err.name}', which is not installed. "
              f"Fix: {PIP_HINT}", file=sys.stderr)
        return 2
    from .app import create_app
    loopback = is_loopback(args.host)
    app = create_app(allow_hub=args.allow_hub, time_limit_s=args.time_limit, workers=args.workers,
                     allowed_hosts=allowed_hosts(args.host))
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"gpuplan web: http://{shown}:{args.port}/  (API: /openapi.json; Ctrl-C stops)", file=sys.stderr)
    if not loopback:
        print("warning: listening beyond this machine; anyone who can reach it can use the API.", file=sys.stderr)
    if args.allow_hub:
        print("note: Hugging Face Hub look-ups are on: clients can make this server download config.json files.",
              file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", server_header=False,
                timeout_graceful_shutdown=1)   # then in-flight requests answer 503
    return 0
