"""The fuzz targets' shared module (fuzzkit.py, beside this file) on the path, and the campaign
(BLOATLAB_FUZZ: short, the default, or long) loaded before any target is collected."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzzkit import LONG_FACTOR, PROFILE  # noqa: E402  (registers and loads the Hypothesis profile)


def pytest_report_header(config) -> str:
    more = f", {LONG_FACTOR} times the short campaign's examples" if PROFILE == "long" else ""
    return f"fuzz campaign: {PROFILE} (BLOATLAB_FUZZ){more}"
