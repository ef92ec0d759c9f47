"""What every command of the CLI shares: how bad syntax is reported, how help is laid out,
how a command is added, and the root check."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from bloatlab.errors import BloatlabError, MachineError

Handler = Callable[[argparse.Namespace], int]


class UsageError(BloatlabError):
    """Bad command-line syntax, reported like every other user error."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own: usage plus message on two lines
        raise UsageError(f"{message} (see {self.prog} --help)")


def formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)


def add_command(commands: argparse._SubParsersAction, name: str, handler: Handler, summary: str,
                description: str, examples: list[str]) -> argparse.ArgumentParser:
    """A command with its one-line summary, a description under it, and examples at the end."""
    sub = commands.add_parser(name, help=summary, description=f"{summary}\n\n{description}",
                              epilog="examples:\n" + "\n".join(f"  {e}" for e in examples),
                              formatter_class=formatter)
    sub.set_defaults(handler=handler)
    return sub


def need_root(command: str) -> None:
    if os.geteuid() != 0:
        raise MachineError(f"bloatlab {command} needs root (it works with network namespaces); "
                           "run it with sudo")
