"""`bloatlab completion bash|zsh`: a shell completion script, generated from the parser itself
(by shtab), so it never lags behind the commands and their options."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import shtab

from bloatlab.cli.common import add_command, emit

SHELLS = ("bash", "zsh")
WHERE = {"bash": "~/.local/share/bash-completion/completions/bloatlab (or /etc/bash_completion.d/bloatlab)",
         "zsh": "a directory on your $fpath, as _bloatlab"}


def cmd_completion(args: argparse.Namespace) -> int:
    script = shtab.complete(args.parser_factory(), shell=args.shell)
    emit(args, {"shell": args.shell, "script": script}, script.rstrip("\n"))
    return 0


def add_parsers(commands: argparse._SubParsersAction, parser_factory: Callable[[], argparse.ArgumentParser]) -> None:
    sub = add_command(commands, "completion", cmd_completion, "print a shell completion script (bash or zsh)",
                      "Completes commands, options, choices and file names. Load it in the running shell, or "
                      "save it\nwhere the shell looks: for bash " + WHERE["bash"] + ";\nfor zsh " + WHERE["zsh"] + ".",
                      ['eval "$(bloatlab completion bash)"',
                       "bloatlab completion bash > ~/.local/share/bash-completion/completions/bloatlab",
                       'bloatlab completion zsh > "${fpath[1]}/_bloatlab"'])
    sub.add_argument("shell", choices=SHELLS, help="the shell")
    sub.set_defaults(parser_factory=parser_factory)
