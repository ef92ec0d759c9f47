"""`bloatlab completion bash|zsh`: a shell completion script, generated from the parser itself
(by shtab), so it never lags behind the commands and their options."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from bloatlab.cli.common import DIRECTORY, FILE, add_command, emit

SHELLS = ("bash", "zsh")
WHERE = {"bash": "~/.local/share/bash-completion/completions/bloatlab (or /etc/bash_completion.d/bloatlab)",
         "zsh": "a directory on your $fpath, as _bloatlab"}


def cmd_completion(args: argparse.Namespace) -> int:
    import shtab  # only here: with importlib.metadata, 40 ms that every other command would pay

    parser = args.parser_factory()
    _to_shtab(parser, {FILE: shtab.FILE, DIRECTORY: shtab.DIRECTORY})
    script = shtab.complete(parser, shell=args.shell)
    emit(args, {"shell": args.shell, "script": script}, script.rstrip("\n"))
    return 0


def _to_shtab(parser: argparse.ArgumentParser, shtab_kinds: dict[str, dict[str, str]]) -> None:
    """Each argument's `complete` marker (cli/common.py) as shtab's, in every subcommand."""
    for action in parser._actions:
        if isinstance(getattr(action, "complete", None), str):
            action.complete = shtab_kinds[action.complete]  # type: ignore[attr-defined]
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _to_shtab(sub, shtab_kinds)


def add_parsers(commands: argparse._SubParsersAction, parser_factory: Callable[[], argparse.ArgumentParser]) -> None:
    sub = add_command(commands, "completion", cmd_completion, "print a shell completion script (bash or zsh)",
                      "Completes commands, options, choices and file names. Load it in the running shell, or "
                      "save it\nwhere the shell looks: for bash " + WHERE["bash"] + ";\nfor zsh " + WHERE["zsh"] + ".",
                      ['eval "$(bloatlab completion bash)"',
                       "bloatlab completion bash > ~/.local/share/bash-completion/completions/bloatlab",
                       'bloatlab completion zsh > "${fpath[1]}/_bloatlab"'])
    sub.add_argument("shell", choices=SHELLS, help="the shell")
    sub.set_defaults(parser_factory=parser_factory)
