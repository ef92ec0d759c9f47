"""`bloatlab queues [NAME]`: the catalogue of queue disciplines (bloatlab.specs.disciplines) for
people: on the terminal, and as the tables of docs/queues.md, which `make docs` rewrites from
it (python -m bloatlab.cli.queues docs/queues.md) and a test holds equal to it.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from bloatlab.cli.common import add_command, emit
from bloatlab.errors import SpecError
from bloatlab.specs.disciplines import ALIASES, CATALOGUE, LIMIT_KEYS, MIB, Discipline, Param
from bloatlab.specs.units import format_duration_ns

# A generated block of docs/queues.md: <!-- catalogue: NAME --> ... <!-- end catalogue -->.
BLOCK = re.compile(r"(<!-- catalogue: (?P<name>[a-z0-9_]+) -->\n)(?P<body>.*?)(<!-- end catalogue -->)", re.DOTALL)


def unit(param: Param) -> str:
    """How a value is written, and its bounds."""
    if param.kind == "count":
        return f"count, {param.low} to {param.high}"
    if param.kind == "choice":
        return "one of " + ", ".join(f"`{c}`" for c in param.choices)
    return {"duration": "duration", "size": "size", "rate": "rate", "bool": "true/false", "ratio": "number >= 0",
            "probability": "probability, 0 to 1", "threshold": "the limit's unit"}[param.kind]


def shown_default(param: Param) -> str:
    """The default as a spec would write it, or how it is derived."""
    value = param.default
    if value is None:
        return param.derived
    if param.kind == "duration":
        text = f'`"{format_duration_ns(value).replace(" ", "")}"`'
    elif param.kind == "bool":
        text = f"`{str(value).lower()}`"
    elif param.kind == "size":
        text = f'`"{value // MIB}mib"`' if value % MIB == 0 else f"{value} bytes"
    elif param.kind == "rate":
        text = f'`"{value // 10**6}mbit"`' if value % 10**6 == 0 else f"{value} bit/s"
    else:
        text = f"{value:.10g}" if isinstance(value, float) else str(value)  # 41/256 in full
    return f"{param.derived}, else {text}" if param.derived else text


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"


def _name(d: Discipline) -> str:
    return f"`{d.name}`" + (f" (alias {', '.join(f'`{a}`' for a in d.aliases)})" if d.aliases else "")


def markdown(block: str) -> str:
    """One generated block of docs/queues.md: "disciplines", "config", or a discipline's name."""
    if block == "disciplines":
        return _table(["discipline", "what it does", "default limit"],
                      [[_name(d), d.summary, f"{d.packets} packets"] for d in CATALOGUE.values()])
    if block == "config":
        return _table(["discipline", f"keys besides {', '.join(f'`{k}`' for k in LIMIT_KEYS)}"],
                      [[f"`{d.name}`", ", ".join(f"`{p.config}`" for p in d.params) or "none"]
                       for d in CATALOGUE.values()])
    d = CATALOGUE[block]
    rows = [["`packets`", "packets", str(d.packets), "the limit when neither packets nor bytes is given",
             d.packets_source]]
    rows += [[f"`{p.key}`", unit(p), shown_default(p), p.help, p.source] for p in d.settable]
    return _table(["key", "unit", "default", "what it does", "source"], rows)


def update_docs(path: Path) -> bool:
    """Rewrite every generated block of the file from the catalogue; whether anything changed."""
    text = path.read_text()
    new = BLOCK.sub(lambda m: m.group(1) + markdown(m.group("name")) + m.group(4), text)
    if new != text:
        path.write_text(new)
    return new != text


def render(name: str | None) -> str:
    """The catalogue, or one discipline, for the terminal."""
    if name is None:
        width = max(len(n) for n in CATALOGUE)
        lines = [f"{d.name:<{width}}  {d.summary} (default limit {d.packets} packets)" for d in CATALOGUE.values()]
        lines += ["", "every queue takes: discipline, packets or bytes (the limit), and its discipline's parameters",
                  "its parameters:    bloatlab queues NAME"]
        return "\n".join(lines)
    d = CATALOGUE[ALIASES.get(name, name)]
    lines = [f"{d.name}: {d.summary}", "", f"  packets  default {d.packets} ({d.packets_source})"]
    width = max((len(p.key) for p in d.settable), default=0)
    for p in d.settable:
        default = shown_default(p).replace("`", "")
        lines.append(f"  {p.key:<{width}}  {p.help}; {unit(p)}, default {default} ({p.source.replace('`', '')})")
    lines += ["", f'in a topology: queue = {{ discipline = "{d.name}", packets = {d.packets}'
                  + "".join(f", {p.key} = ..." for p in d.settable[:2]) + " }"]
    return "\n".join(lines)


def as_data(d: Discipline) -> dict:
    """A discipline for --json: its parameters in their config units (target_ns, ...)."""
    return {"name": d.name, "aliases": list(d.aliases), "summary": d.summary,
            "packets": {"default": d.packets, "source": d.packets_source},
            "params": [{"key": p.key, "config": p.config, "kind": p.kind, "default": p.default,
                        "derived": p.derived or None, "low": p.low, "high": p.high, "help": p.help,
                        "source": p.source} for p in d.settable]}


def cmd_queues(args: argparse.Namespace) -> int:
    if args.name is not None and args.name not in CATALOGUE and args.name not in ALIASES:
        raise SpecError(f"no discipline {args.name!r}; choose one of: {', '.join(CATALOGUE)}", field="NAME")
    doc = ({"disciplines": [as_data(d) for d in CATALOGUE.values()]} if args.name is None
           else as_data(CATALOGUE[ALIASES.get(args.name, args.name)]))
    emit(args, doc, render(args.name))
    return 0


def add_parsers(commands: argparse._SubParsersAction) -> None:
    sub = add_command(commands, "queues", cmd_queues, "list the queue disciplines, or show one's parameters",
                      "Without NAME: every discipline a link's queue can have. With NAME: its parameters, with "
                      "their units,\ndefaults and sources, as a topology's queue table takes them "
                      "(docs/queues.md).",
                      ["bloatlab queues", "bloatlab queues codel"])
    sub.add_argument("name", metavar="NAME", nargs="?", help="a discipline")


if __name__ == "__main__":  # make docs
    for file in sys.argv[1:]:
        print(f"{file}: {'rewritten' if update_docs(Path(file)) else 'up to date'}")
