"""What every command of the CLI shares: the options every subcommand takes (-v, -q, --json),
the exit statuses, how bad syntax is reported, how help is laid out, and the root check."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from bloatlab.errors import BloatlabError, MachineError

# What an argument completes to in the shell: `add_argument(...).complete = FILE`. The completion
# command turns these into shtab's own (cli/completion.py), so other commands never load shtab.
FILE, DIRECTORY = "file", "directory"

Handler = Callable[[argparse.Namespace], int]

# The exit statuses, as --help and the README state them.
EXIT_STATUSES = ("exit status: 0 done; 1 the work ran but a check failed (a run incomplete, a target missed);\n"
                 "2 bad input (one line names the field); 3 this machine lacks something it needs (root, a tool,\n"
                 "a binary, a kernel feature); 130 interrupted, once whatever was half built is removed.")


class UsageError(BloatlabError):
    """Bad command-line syntax, reported like every other user error."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own: usage plus message on two lines
        raise UsageError(f"{message} (see {self.prog} --help)")


def formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)


def common_options() -> argparse.ArgumentParser:
    """-v, -q and --json: what every subcommand takes (a parent parser)."""
    options = Parser(add_help=False)
    group = options.add_argument_group("every command")
    group.add_argument("-v", "--verbose", action="store_true",
                       help="debug logging on stderr: every command bloatlab runs, and why")
    group.add_argument("-q", "--quiet", action="store_true",
                       help="no progress display and no notes on stderr; warnings and errors only")
    group.add_argument("--json", action="store_true",
                       help="one JSON document on stdout; progress and logs go to stderr")
    return options


COMMON = common_options()


def add_command(commands: argparse._SubParsersAction, name: str, handler: Handler, summary: str,
                description: str, examples: list[str], aliases: tuple[str, ...] = ()) -> argparse.ArgumentParser:
    """A command with its one-line summary, a description under it, examples and the exit
    statuses at the end, and the options every command takes (-v, -q, --json)."""
    epilog = ("examples:\n" + "\n".join(f"  {e}" for e in examples) + "\n\n" if examples else "") + EXIT_STATUSES
    sub = commands.add_parser(name, help=summary, description=f"{summary}\n\n{description}", epilog=epilog,
                              formatter_class=formatter, parents=[COMMON], aliases=list(aliases))
    sub.set_defaults(handler=handler)
    return sub


def configure_logging(args: argparse.Namespace) -> None:
    """-v shows bloatlab's debug logging (each command it runs); -q leaves warnings and errors.
    Other libraries' logs stay at warnings: matplotlib's debug lines are no one's business here."""
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, force=True,
                        format="%(asctime)s %(name)s: %(message)s" if args.verbose
                        else "bloatlab: %(levelname)s: %(message)s")
    logging.getLogger("bloatlab").setLevel(level)


def emit(args: argparse.Namespace, doc: Any, text: str | None = None) -> None:
    """What a command reports: `doc` as one JSON document with --json, else `text` (if any).
    With --json, main() has sent everything else printed to stderr; the document alone goes to
    the real stdout (args.document_out)."""
    if getattr(args, "json", False):
        out = getattr(args, "document_out", sys.stdout)
        out.write(json.dumps(doc, indent=2, default=str) + "\n")
        out.flush()
        args.emitted = True
    elif text is not None:
        print(text)


def note(args: argparse.Namespace, message: str) -> None:
    """A line for the person at the terminal, on stderr; -q silences it."""
    if not getattr(args, "quiet", False):
        print(message, file=sys.stderr)


def need_root(command: str) -> None:
    if os.geteuid() != 0:
        raise MachineError(f"bloatlab {command} needs root (it works with network namespaces); "
                           "run it with sudo")
