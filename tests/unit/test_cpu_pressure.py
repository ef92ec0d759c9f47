"""How short of CPU the machine was while a run played: the kernel's pressure (PSI), read,
turned into a share of the run, and said when the hosts' figures may be the machine's."""

import json
import re
from pathlib import Path

import pytest

from bloatlab.analysis.summary import summary_lines
from bloatlab.results.summary import CpuShare, RunSummary
from bloatlab.testbed.datapath_stats import DatapathStats
from bloatlab.testbed.diagnostics import batching_share
from bloatlab.testbed.machine import (BATCHING_WARN, CPU_PRESSURE_WARN, cpu_pressure_us, pressure_share,
                                      pressure_warnings)

CONFIG_RS = Path(__file__).parents[2] / "datapath" / "link" / "src" / "config.rs"

PSI = ("some avg10=41.20 avg60=12.01 avg300=3.10 total=4765577765\n"
       "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")


def test_the_some_total_is_read_and_a_kernel_without_psi_gives_none(tmp_path):
    (tmp_path / "cpu").write_text(PSI)
    assert cpu_pressure_us(str(tmp_path / "cpu")) == 4765577765
    assert cpu_pressure_us(str(tmp_path / "absent")) is None
    (tmp_path / "odd").write_text("some avg10=1.0\n")  # no total: not a number to judge by
    assert cpu_pressure_us(str(tmp_path / "odd")) is None


def test_the_share_is_the_waiting_over_the_wall_time():
    assert pressure_share((1_000_000, 10.0), (3_000_000, 15.0)) == pytest.approx(0.4)
    assert pressure_share((None, 10.0), (3_000_000, 15.0)) is None
    assert pressure_share((1_000_000, 10.0), (1_000_000, 10.0)) is None  # no time passed
    # Counters read a moment apart can overshoot the wall clock a little: a share stays a share.
    assert pressure_share((0, 0.0), (1_100_000, 1.0)) == 1.0


def test_a_run_short_of_cpu_says_so_and_what_the_links_did_about_it():
    assert pressure_warnings(None, None) == [] and pressure_warnings(CPU_PRESSURE_WARN - 0.01, 0.0) == []
    [w] = pressure_warnings(0.52, 0.8)
    assert w.startswith("this machine was short of CPU: tasks waited for a CPU during 52% of the run")
    assert "the links batched their departures in 80% of their report periods" in w and "not the network's" in w
    [kernel] = pressure_warnings(0.45, None)  # kernel links: no datapath to batch
    assert "batched" not in kernel
    # Batching lowers the pressure it answers: links that batched most of the run warn below 0.4.
    [relieved] = pressure_warnings(0.33, BATCHING_WARN)
    assert "during 33% of the run" in relieved and "batched their departures in 50%" in relieved
    assert pressure_warnings(0.33, BATCHING_WARN - 0.01) == []


def test_the_warning_starts_where_the_datapath_starts_batching():
    # The datapath's default (Rust) and the run's warning (Python) name the same pressure.
    default = re.search(r"impl Default for Batching \{.*?enter_pressure: ([0-9.]+)", CONFIG_RS.read_text(), re.S)
    assert default and float(default[1]) == CPU_PRESSURE_WARN


def test_the_terminal_summary_shows_the_pressure():
    assert dict(summary_lines(RunSummary(cpu=CpuShare(pressure=0.123, links_batching=0.0))))["CPU pressure"] == (
        "some task waited for a CPU 12% of the run; the links batched in 0% of their report periods")
    assert dict(summary_lines(RunSummary(cpu=CpuShare(pressure=0.5, links_batching=None))))["CPU pressure"] == (
        "some task waited for a CPU 50% of the run")


def test_the_links_batching_share_is_taken_between_two_of_the_datapath_s_reports():
    # The stats file bloatlab-link wrote, with the batching of each report.
    written = json.loads((Path(__file__).parents[1] / "data" / "datapath-stats.json").read_text())

    def stats(batching: dict | None) -> DatapathStats:
        return DatapathStats.from_json({**written, "batching": batching})
    at_t0 = stats({"pressure": 0.1, "active": False, "periods": 10, "periods_batching": 2})
    final = stats({"pressure": 0.5, "active": True, "periods": 30, "periods_batching": 17})
    assert batching_share(at_t0, final) == pytest.approx(15 / 20)
    assert batching_share(None, final) == pytest.approx(17 / 30)  # no earlier report: all of it
    assert batching_share(at_t0, stats(None)) is None  # batching off, or no PSI
    assert batching_share(final, final) is None  # no period ended between them
