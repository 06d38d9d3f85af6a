"""`deltalens app [--checkpoints DIR_OR_ID ...] [--port N] [--host H] [--headless]`: start the dashboard."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import webbrowser
from pathlib import Path

from deltalens.cli import arguments
from deltalens.core.errors import DeltalensError

HOME = Path(__file__).resolve().parents[1] / "app" / "Home.py"
SHIPPED = HOME.parents[1] / "checkpoints"  # what the dashboard shows by default (app/folder.py); absent from a wheel


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "app",
        help="start the Streamlit dashboard over the shipped checkpoints (or a folder of your own)",
        description="Start the deltalens dashboard (Streamlit): checkpoints, trace explorer, heads, interventions, "
        "circuit, census (per layer and head: beta > 1, eigenvalues, state rank) and beliefs. It serves on "
        "127.0.0.1 unless --host says otherwise; stop it with Ctrl-C.",
    )
    parser.add_argument(
        "--checkpoints",
        metavar="DIR_OR_ID",
        nargs="+",
        help="what to show, one or more: a folder of checkpoints, a model folder (any folder deltalens.load "
        "opens) or a Hugging Face Hub id org/name[@revision] (default: the shipped checkpoints/)",
    )
    parser.add_argument("--port", type=arguments.whole(1, 65535), default=8501, help="port to serve on (default 8501)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--headless", action="store_true", help="do not open a browser")
    parser.set_defaults(func=run)


def command(args) -> list[str]:
    # Always headless for Streamlit itself: otherwise its first run on a machine stops to ask for an
    # e-mail address on stdin. The browser is opened by `run` instead (unless --headless). Streamlit's
    # command line through app/serve.py, which starts the pages' imports with the server.
    return [
        sys.executable,
        "-m",
        "deltalens.app.serve",
        "run",
        str(HOME),
        "--server.address",
        args.host,
        "--server.port",
        str(args.port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "viewer",
    ]


def source(given: str) -> str:
    """A folder as an absolute path (the server runs elsewhere), or a Hub id as given; anything else is refused
    here, before the server starts."""
    from deltalens.models.io.hub import split_hub_id

    folder = Path(given).expanduser()
    if folder.is_dir():
        return str(folder.resolve())
    if split_hub_id(given) is not None and not folder.is_absolute() and not given.startswith("."):
        return given  # opened (from the Hugging Face cache, or fetched) by the page that shows it
    raise DeltalensError(
        f"{given} is neither a folder nor a Hub id (org/name); pass folders of checkpoints, model folders or Hub ids."
    )


def run(args) -> int:
    env = dict(os.environ)
    if args.checkpoints:
        env["DELTALENS_APP_CHECKPOINTS"] = "\n".join(source(given) for given in args.checkpoints)
    elif not env.get("DELTALENS_APP_CHECKPOINTS") and not SHIPPED.is_dir():
        raise DeltalensError(
            "this install has no shipped checkpoints (a non-editable `pip install` leaves the repository's "
            "checkpoints/ folder behind); pass --checkpoints DIR_OR_ID: a clone's checkpoints/, a model folder "
            "or a Hub id."
        )
    if not 1 <= args.port <= 65535:
        raise DeltalensError(f"--port must be between 1 and 65535, got {args.port}.")
    url = f"http://{args.host}:{args.port}"
    print(f"deltalens app: {url}  (Ctrl-C stops it)", file=sys.stderr)
    if not args.headless:  # open a browser once the server had time to start (no-op without one)
        threading.Timer(3.0, webbrowser.open, args=(url,)).start()
    server = subprocess.Popen(command(args), env=env, stdin=subprocess.DEVNULL)
    # a `kill` of this process stops the server too (Ctrl-C reaches both through the terminal)
    signal.signal(signal.SIGTERM, lambda signum, frame: server.terminate())
    try:
        return server.wait()
    except KeyboardInterrupt:
        server.terminate()
        server.wait()
        return 130
