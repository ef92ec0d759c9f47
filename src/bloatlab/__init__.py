"""bloatlab: a laboratory for bufferbloat and queue-management experiments on Linux.

    import bloatlab
    run = bloatlab.load_run("results/cs244-maxq100-20261121-101500")
    run.ping, run.cwnd, run.queue, run.fetches, run.goodput     # pandas DataFrames
    sweep = bloatlab.load_sweep("results/qlen")

The layers, each a package, data crossing them one way: spec -> testbed -> experiment ->
results -> analysis; lab runs jobs across them, nic works on real interfaces, cli is the
command line (docs/layout.md).
"""

from typing import Any

from bloatlab.version import __version__
__all__ = ["__version__", "load_run", "load_sweep"]


def __getattr__(name: str) -> Any:
    # The reader needs pandas: imported on first use, not by every `import bloatlab.x`.
    if name in ("load_run", "load_sweep"):
        from bloatlab.results import reader

        return getattr(reader, name)
    raise AttributeError(f"module 'bloatlab' has no attribute {name!r}")
