"""A calibration from start to end: the checks before it, the search, and the files after it
(calibration.json, path.toml, the test specs, plots, report.html)."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bloatlab.errors import BloatlabError, SpecError
from bloatlab.lab.calibration.path import emulated, test_spec
from bloatlab.lab.calibration.search import Calibration, Settings, Trial
from bloatlab.lab.executors import Executor
from bloatlab.results.measurement import Measurement


# Writing ------------------------------------------------------------------------------------------

def write(cal: Calibration, fit: Trial) -> dict[str, Any]:
    """calibration.json, path.toml (the fitted link as a topology file) and one test spec per
    measurement (its test on the fitted path, the path's values as --set-able params)."""
    import tomli_w

    out = cal.out
    out.mkdir(parents=True, exist_ok=True)
    topology = test_spec(cal.measurements[0], fit.values)["topology"]
    (out / "path.toml").write_text("# The path bloatlab calibrate fitted (calibration.json says to what, and how "
                                   "well).\n# Any experiment can run on it: topology = \"path.toml\", hosts client "
                                   "and server.\n" + tomli_w.dumps(topology))
    tests = []
    for i, m in enumerate(cal.measurements):
        spec = test_spec(m, fit.values, None, cal.settings.seed, as_params=True)
        spec["description"] = f"The test of {m.source} ({m.test}) on the path bloatlab calibrate fitted to it."
        name = "test.toml" if len(cal.measurements) == 1 else f"test-{cal._key(i)}.toml"
        (out / name).write_text(tomli_w.dumps(_toml_ready(spec)))
        tests.append(name)
    figures = [{"measurement": key, "figure": name, **r} for key, figs in fit.residuals.items()
               for name, r in figs.items()]
    abs_errors = sorted(abs(f["relative_error"]) for f in figures)
    doc = {
        "kind": "calibration",
        "measurements": [{"key": cal._key(i), "source": m.source, "test": m.test, "duration_s": m.duration_s,
                          "flows": [asdict(f) for f in m.flows], "probes": [asdict(p) for p in m.probes],
                          "notes": m.notes} for i, m in enumerate(cal.measurements)],
        "fitted": asdict(fit.values), "fitted_text": fit.values.describe(), "error": fit.error,
        "median_abs_relative_error": abs_errors[len(abs_errors) // 2] if abs_errors else None,
        "residuals": figures, "best_run": str(fit.run_dir), "settings": asdict(cal.settings),
        "runs": len(cal.trials) * len(cal.measurements), "seconds": round(getattr(cal, "seconds", 0.0), 1),
        "trials": [t.to_dict() for t in cal.trials], "files": {"path": "path.toml", "tests": tests},
    }
    (out / "calibration.json").write_text(json.dumps(doc, indent=1, default=_json_default) + "\n")
    return doc


def _toml_ready(value: Any) -> Any:
    """tomli_w writes no None: drop such keys."""
    if isinstance(value, dict):
        return {k: _toml_ready(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_toml_ready(v) for v in value]
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    raise TypeError(f"{type(value).__name__} is not JSON")


def check_out(out: Path) -> None:
    """A calibration writes into a new or empty directory, or over an earlier calibration."""
    if out.exists() and any(out.iterdir()) and not (out / "calibration.json").exists() \
            and not (out / "trials").exists():
        raise BloatlabError(f"{out} is not empty and holds no calibration; give a new directory", field="--out")
    if (out / "trials").exists():
        shutil.rmtree(out / "trials")


def check_measurements(measurements: list[Measurement]) -> None:
    if not any(m.flows for m in measurements):
        raise SpecError(f"{measurements[0].source} has no TCP flow: a path's rate cannot be fitted from pings "
                        "alone; give a test with load (rrul, tcp_nup, tcp_ndown) as well", field="MEASUREMENT")


def calibrate(measurements: list[Measurement], out: Path, settings: Settings, executor: Executor | None = None,
              say: Callable[[str], None] = print) -> dict[str, Any]:
    """The whole job: search, then calibration.json, path.toml, the test specs, the figures of
    the fit's full-length run against the measurement, and report.html. calibration.json's
    document, with "plots" and "report" added."""
    from bloatlab.analysis import calibration as drawing

    check_measurements(measurements)
    check_out(out)
    cal = Calibration(measurements, out, settings, executor, say)
    fit = cal.run()
    doc = write(cal, fit)
    plots = []
    for i, m in enumerate(measurements):
        run_dir = cal.run_dir(fit, i)
        prefix = "" if len(measurements) == 1 else f"{cal._key(i)}-"
        plots += drawing.draw(m, emulated(run_dir, m), out / "plots", prefix)
    doc["plots"] = [str(p) for p in plots]
    doc["report"] = str(drawing.report(doc, plots, out))
    (out / "calibration.json").write_text(json.dumps(doc, indent=1, default=_json_default) + "\n")
    return doc
