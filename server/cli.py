"""`tl lsp`: start the language server on stdio (default) or TCP. `tl_language.cli` calls `register`."""

from __future__ import annotations

import argparse
import gc
import logging
import sys


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "lsp",
        help="run the TL language server (stdio; --tcp HOST:PORT for TCP)",
        description="Run the TL language server. Editors start it as `tl lsp`.",
    )
    p.add_argument("--stdio", action="store_true", help="talk LSP over stdin/stdout (the default)")
    p.add_argument("--tcp", metavar="HOST:PORT", help="listen on a TCP socket instead of stdio")
    p.add_argument("--log-file", metavar="PATH", help="also write the server log to this file")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # stderr only: stdout is the protocol.
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if getattr(args, "log_file", None):
        handlers.append(logging.FileHandler(args.log_file))
    logging.basicConfig(
        level=getattr(args, "log_level", "INFO"),
        handlers=handlers,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    if getattr(args, "log_level", "INFO") != "DEBUG":
        logging.getLogger("pygls").setLevel(logging.WARNING)  # pygls logs every message at INFO
    from server.app import create_server

    server = create_server()
    # Everything imported so far lives for the whole session: keep it out of the cyclic GC's full passes,
    # which otherwise add tens of milliseconds to a didChange now and then.
    gc.collect()
    gc.freeze()
    tcp = getattr(args, "tcp", None)
    if tcp:
        host, _, port = tcp.rpartition(":")
        try:
            port_no = int(port)
        except ValueError:
            sys.stderr.write(f"tl lsp: --tcp wants HOST:PORT, got {tcp!r}\n")
            return 2
        server.start_tcp(host or "127.0.0.1", port_no)
    else:
        server.start_io()
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m server`: the same as `tl lsp`, for when the `tl` script is not on PATH."""
    parser = argparse.ArgumentParser(prog="python -m server")
    sub = parser.add_subparsers(dest="command")
    register(sub)
    args = parser.parse_args(["lsp", *(argv if argv is not None else sys.argv[1:])])
    return int(args.func(args))
