"""`bloatlab export`: a run, or every complete run of a sweep, in the field's formats
(bloatlab.results.flent writes Flent's data files)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bloatlab.cli.common import DIRECTORY, FILE, add_command, emit, note
from bloatlab.errors import BloatlabError


def cmd_export(args: argparse.Namespace) -> int:
    # The reader brings pandas (half a second): imported by the command that reads, not by every command.
    from bloatlab.results import flent
    from bloatlab.results.reader import is_run, is_sweep, load_run, load_sweep

    path = Path(args.dir)
    if is_sweep(path):
        if args.out is not None:
            raise BloatlabError("a sweep exports one file per run, into each run's directory; drop --out",
                                field="--out")
        sweep = load_sweep(path)
        runs = [run for _, _, run in sweep.runs()]
        if not runs:
            raise BloatlabError(f"{path} has no complete run to export", field="DIR")
    elif is_run(path):
        runs = [load_run(path)]
    else:
        raise BloatlabError(f"{path} is neither a run directory (run.json and summary.json) nor a sweep "
                            "directory (sweep.json)", field="DIR")
    written = []
    for run in runs:
        out = flent.export(run, args.out)
        written.append({"run": str(run.path), "file": str(out)})
        note(args, f"wrote {out}")
    first = written[0]["file"]
    plot = "all_scaled" if Path(first).name.startswith("rrul") else "totals"  # each Flent test's own default
    emit(args, {"files": written}, "\n".join(["open with Flent:", f"  flent -i {first} -f summary",
                                             f"  flent -i {first} -p {plot} -o plot.png"]))
    return 0


def add_parsers(commands: argparse._SubParsersAction) -> None:
    sub = add_command(commands, "export", cmd_export, "write a run in the field's formats (Flent)",
                      "--flent writes a Flent data file (.flent.gz, format 4) that Flent 2.3 opens: the run as\n"
                      "the Flent test of its shape (rrul, rrul_be, tcp_nup, tcp_ndown, ping) with Flent's series\n"
                      "names. A sweep's complete runs each get one, in their directories (docs/results.md).",
                      ["bloatlab export --flent results/rrul", "bloatlab export --flent results/cs244 --out cs244.flent.gz",
                       "flent -i results/rrul/rrul-rrul.flent.gz -p all_scaled -o rrul.png"])
    sub.add_argument("--flent", action="store_true", required=True, help="as a Flent data file (the only format yet)")
    sub.add_argument("dir", metavar="DIR", help="a run's or a sweep's directory").complete = DIRECTORY
    sub.add_argument("--out", metavar="FILE", type=Path, default=None,
                     help="where to write it (a single run only; default RUN/TEST-RUN.flent.gz)").complete = FILE
