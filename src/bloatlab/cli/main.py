"""The `bloatlab` command line: a thin shell over the layers below. Each command lives in the
module named after what it works on (net, run, queues, doctor, bench, replay, nic); this
assembles them and turns every error into one line.

Exit statuses: 0 done; 1 a run or sweep is incomplete, or a benchmark missed a target; 2 bad
input (one line names the field); 130 interrupted, after whatever was half built is removed.
"""

from __future__ import annotations

import argparse
import os
import sys

from bloatlab.cli import bench, doctor, net, nic, queues, replay, run
from bloatlab.cli.common import Parser, formatter
from bloatlab.errors import BloatlabError
from bloatlab.version import __version__


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
               "exit status: 0 done; 1 a run is incomplete or a benchmark missed a target; 2 bad input;\n"
               "130 interrupted.\n\n"
               "`bloatlab COMMAND --help` tells more about each command.")
    parser.add_argument("--version", action="version", version=f"bloatlab {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    net.add_parsers(commands)
    doctor.add_parsers(commands)
    run.add_parsers(commands)
    queues.add_parsers(commands)
    replay.add_parser(commands)
    nic.add_parser(commands, formatter)
    bench.add_parsers(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.handler(args)
    except BloatlabError as error:
        message = " ".join(str(error).split("\n"))
        print(f"bloatlab: error: {message}", file=sys.stderr)
        return error.exit_status
    except KeyboardInterrupt:
        print("bloatlab: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `bloatlab doctor | head`: the reader has gone, which is no error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so exit's flush is quiet
        return 141
    except SystemExit as done:  # --help and --version
        return done.code if isinstance(done.code, int) else 0
