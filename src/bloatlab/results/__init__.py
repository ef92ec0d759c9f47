"""The results layer: a run's and a sweep's files (docs/results.md, docs/sweeps.md).

    files    the layout of a run directory and how its files are written
    writer   a RunRecord -> series, summary.json, run.json
    reader   the one reader: load_run, load_sweep, every series as a pandas DataFrame
    stats    statistics of samples and of repetitions
"""
