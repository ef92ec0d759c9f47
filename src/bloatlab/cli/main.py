"""The `bloatlab` command line: a thin shell over the layers below. Each command lives in the
module named after what it works on (net, run, export, queues, doctor, bench, replay, nic); this
assembles them and turns every error into one line.

Every command takes -v (debug logging), -q (no progress, no notes) and --json (one document on
stdout; everything else on stderr). Exit statuses are common.EXIT_STATUSES.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import sys
import threading

from bloatlab.binaries import BINARIES, check, locate, version_argv
from bloatlab.cli import bench, calibrate, completion, doctor, export, net, nic, queues, replay, run, view
from bloatlab.cli.common import EXIT_STATUSES, Parser, configure_logging, formatter
from bloatlab.errors import BloatlabError
from bloatlab.testbed import capabilities
from bloatlab.version import __version__


class VersionAction(argparse.Action):
    """bloatlab's version, and each binary's with where it is: one of another version is an error."""

    def __call__(self, parser, namespace, values, option_string=None):
        lines = [f"bloatlab {__version__}"]
        for name in BINARIES:
            path = locate(name)
            if path is None:
                lines.append(f"{name} not found (make setup, or install bloatlab with pip)")
                continue
            check(name, path, capabilities.version_output(version_argv(path)))
            lines.append(f"{name} {__version__} {path}")
        print("\n".join(lines))
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="bloatlab", formatter_class=formatter,
        description="A laboratory for bufferbloat experiments: hosts in network namespaces, joined "
                    "by emulated links with a rate, a delay, loss and a bounded queue.",
        epilog="examples:\n"
               "  sudo bloatlab run --preset cs244\n"
               f"  sudo bloatlab up {net.EXAMPLE_TOPOLOGY} --name t1\n"
               "  sudo bloatlab exec t1 h1 -- ping -c 3 h2\n"
               "  sudo bloatlab down t1\n\n"
               "every command takes -v (debug logging), -q (no progress or notes) and --json (one JSON\n"
               "document on stdout, everything else on stderr).\n\n"
               f"{EXIT_STATUSES}\n\n"
               "`bloatlab COMMAND --help` tells more about each command.")
    parser.add_argument("--version", action=VersionAction, nargs=0,
                        help="show bloatlab's version and its binaries', and exit (an error if they differ)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    net.add_parsers(commands)
    doctor.add_parsers(commands)
    run.add_parsers(commands)
    view.add_parsers(commands)
    export.add_parsers(commands)
    calibrate.add_parsers(commands)
    queues.add_parsers(commands)
    replay.add_parsers(commands)
    nic.add_parsers(commands)
    bench.add_parsers(commands)
    completion.add_parsers(commands, build_parser)
    return parser


def _wants_json(argv: list[str] | None) -> bool:
    """--json among the options (not in a command after `--`), for errors before parsing ends."""
    argv = sys.argv[1:] if argv is None else argv
    return "--json" in (argv[:argv.index("--")] if "--" in argv else argv)


def _run(args: argparse.Namespace) -> int:
    if not args.json:
        return args.handler(args)
    # stdout carries the one document; whatever else the work prints goes to stderr.
    args.document_out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        return args.handler(args)


def _error_document(args: argparse.Namespace | None, argv: list[str] | None, message: str,
                    field: str | None, status: int) -> None:
    """With --json, a failure is a document too, unless the command already printed its own."""
    if (args.json and not getattr(args, "emitted", False)) if args is not None else _wants_json(argv):
        print(json.dumps({"error": {"message": message, "field": field, "exit_status": status}}, indent=2))


def main(argv: list[str] | None = None) -> int:
    args = None
    try:
        args = build_parser().parse_args(argv)
        configure_logging(args)
        return _run(args)
    except BloatlabError as error:
        message = " ".join(str(error).split("\n"))
        print(f"bloatlab: error: {message}", file=sys.stderr)
        _error_document(args, argv, " ".join(error.message.split("\n")), error.field, error.exit_status)
        return error.exit_status
    except KeyboardInterrupt:
        print("bloatlab: interrupted", file=sys.stderr)
        _error_document(args, argv, "interrupted", None, 130)
        return 130
    except BrokenPipeError:  # `bloatlab doctor | head`: the reader has gone, which is no error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so exit's flush is quiet
        return 141
    except SystemExit as done:  # --help and --version
        return done.code if isinstance(done.code, int) else 0


def entry() -> None:
    """The `bloatlab` command (and `python -m bloatlab`): main(), then the process's exit. When
    the work is done and only this thread is left, what registered to run at exit (logging's
    flush, a Ray client's disconnect) runs, and the process ends without freeing its modules
    one by one: after a run has loaded matplotlib and pandas that takes 0.2 s, for nothing."""
    status = main()
    if threading.active_count() > 1:  # someone's thread still works: the ordinary exit waits for it
        raise SystemExit(status)
    with contextlib.suppress(OSError, ValueError):  # a reader gone, or a stream already closed
        sys.stdout.flush()
        sys.stderr.flush()
    atexit._run_exitfuncs()  # what `exit` runs first; os._exit then skips the rest
    os._exit(status)
