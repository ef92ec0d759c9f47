"""Calibration: an emulated path fitted to measurements of a real one (docs/calibration.md).

    path    a candidate path, the guess from physics, the measured test on a path as a spec
    search  the search (screen, refine, optuna's TPE, confirm) and the error it minimises
    job     a calibration from start to end: checks, search, calibration.json, path.toml,
            test.toml, plots and report.html
"""
