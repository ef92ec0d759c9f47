"""report.html of a synthetic run and sweep (tests/conftest.py): self-contained, escaped, with the
tables and figures it promises. tests/integration/test_report.py opens it in a real browser."""

import base64
import html
import re

import pytest

from bloatlab.analysis.report import write_report
from bloatlab.cli import main as cli
from bloatlab.errors import BloatlabError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def images(page):
    return re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)


def assert_self_contained(page):
    assert "<script" not in page.lower()
    assert not re.search(r'(src|href)="(?!data:)', page), "an external resource"
    assert "http://" not in page and "https://" not in page
    for data in images(page):
        assert base64.b64decode(data)[:8] == PNG_MAGIC


def test_a_sweep_report_holds_what_ran_the_tables_and_every_figure(make_sweep, hostile):
    out = make_sweep(failed=("maxq=100/rep2",))
    path = write_report(out)
    assert path == out / "report.html"
    page = path.read_text()
    assert_self_contained(page)
    assert page.count("<img ") == len(images(page)) == 13
    assert page.count("<figcaption>") == 13
    for heading in ("What was run", "Machine", "Topology", "Results per configuration", "Runs", "Figures"):
        assert f"<h2>{heading}</h2>" in page
    assert html.escape(hostile) in page and hostile not in page
    assert "bloatlab run --preset cs244 --sweep maxq=20,100 --repeat 2" in page  # the command
    assert "6.1.0-test" in page and "<th>iperf3</th><td>3.12</td>" in page
    assert "10 Mbit/s" in page and "droptail 20 packets" in page
    # The headline table: one row per point, n, mean ± sd (no sd with one run).
    row = re.search(r"<tr><td>maxq=20</td><td>20</td><td class=\"num\">2</td>(.*?)</tr>", page)
    assert row and row[1].count(" ± ") >= 5
    row = re.search(r"<tr><td>maxq=100</td><td>100</td><td class=\"num\">1</td>(.*?)</tr>", page)
    assert row and " ± " not in row[1]
    # The failed run, with its (escaped) reason.
    assert "<td>maxq=100/rep2</td><td>failed</td><td>iperf3 failed: &lt;boom&gt;</td>" in page


def test_a_nic_sweep_report_shows_its_own_metrics(make_sweep):
    page = write_report(make_sweep(axes=(("txqueuelen", (1, 1000, 100000)),), kind="nic")).read_text()
    assert_self_contained(page)
    for heading in ("TCP receiver (Mbit/s)", "UDP receiver (Mbit/s)", "ping min (ms)", "ping avg (ms)",
                    "ping max (ms)", "ping mdev (ms)"):
        assert f"<th>{heading}</th>" in page
    assert "<h2>Topology</h2>" not in page
    assert "Not drawn: compare-cwnd" in page
    assert len(images(page)) == 7


def test_a_run_report(make_run, hostile):
    run = make_run()
    page = write_report(run).read_text()
    assert_self_contained(page)
    assert len(images(page)) == 7
    assert "<td>bulk goodput</td>" in page and "web fetch mean ± sd" in page
    assert "<td>maxq</td><td>100</td>" in page and html.escape(hostile) in page and hostile not in page


def test_a_nic_run_report_has_its_numbers_and_only_the_figures_it_has_data_for(make_run):
    page = write_report(make_run(kind="nic")).read_text()
    assert_self_contained(page)
    assert "<td>tcp.receiver_mbps</td>" in page and "<td>ping.avg_ms</td>" in page
    assert len(images(page)) == 4  # rtt (over time, its CDF and box) and throughput
    assert "Not drawn: cwnd (no series/cwnd.csv), queue (no series/queue.csv), fetch (no series/fetch.csv)" in page


def test_neither_a_run_nor_a_sweep(tmp_path, capsys):
    with pytest.raises(BloatlabError, match="neither a run directory") as error:
        write_report(tmp_path)
    assert error.value.field == "DIR"
    assert cli.main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("bloatlab: error: DIR: ")


def test_the_cli_writes_the_report_and_prints_its_path(make_sweep, capsys):
    out = make_sweep()
    assert cli.main(["report", str(out)]) == 0
    assert capsys.readouterr().out == f"{out / 'report.html'}\n"
    assert (out / "report.html").stat().st_size > 0


def test_a_grade_without_an_idle_latency_says_why_not_plus_nothing():
    """cs244's flow starts with the run: no probe is idle, so there is no grade to give."""
    from bloatlab.analysis.summary import headline, summary_lines
    from bloatlab.results.summary import RunSummary

    none = RunSummary.from_json({"bufferbloat": {"idle_ms": None, "loaded_ms": 90.1, "increase_ms": None, "grade": None}})
    lines = dict(summary_lines(none))
    assert lines["latency idle / under load"] == "- / 90.1 ms"
    assert lines["bufferbloat grade"] == "- (no idle latency: no probe answered before the load started)"
    assert "grade" not in headline(none)
    some = RunSummary.from_json({"bufferbloat": {"idle_ms": 20.0, "loaded_ms": 150.0, "increase_ms": 130.0, "grade": "C"}})
    assert dict(summary_lines(some))["bufferbloat grade"] == "C (+130.0 ms)"
    assert "grade C (+130 ms under load)" in headline(some)


def test_cakes_tins_are_a_table_as_tc_shows_them(make_run):
    """A column per tin, a row per figure (ack drops and way counters included)."""
    import json

    run = make_run()
    summary = json.loads((run / "summary.json").read_text())
    tin = {"threshold_mbps": 2.5, "target_ms": 5.0, "interval_ms": 100.0, "packets": 120, "bytes": 180_000,
           "backlog_bytes": 3028, "drops": 3, "ack_drops": 47, "marks": 1, "avg_delay_ms": 0.8,
           "peak_delay_ms": 2.5, "base_delay_ms": 0.04, "sparse_flows": 1, "bulk_flows": 2, "unresponsive_flows": 0,
           "way_indirect_hits": 5, "way_misses": 9, "way_collisions": 0}
    summary["tins"] = {"s0->h2": {"Bulk": {**tin, "threshold_mbps": 0.625}, "Best Effort": tin}}
    (run / "summary.json").write_text(json.dumps(summary))
    page = write_report(run).read_text()
    table = page.split("<h3>Tins of s0-&gt;h2</h3>")[1].split("</table>")[0]
    assert "<th></th><th>Bulk</th><th>Best Effort</th>" in table
    assert '<td>ack drops</td><td class="num">47</td><td class="num">47</td>' in table
    assert '<td>threshold Mbit/s</td><td class="num">0.625</td><td class="num">2.50</td>' in table
    for row in ("target ms", "interval ms", "backlog bytes", "way misses", "way collisions", "sparse delay ms"):
        assert f"<td>{row}</td>" in table, row


def test_the_flows_table_has_an_ecn_column_only_where_a_flow_carried_ecn(make_run):
    """run.json's flows.NAME.ecn: the codepoint and who set it. A run of Not-ECT flows (cs244's,
    or one from before run.json said) keeps its table as it was."""
    import json

    run = make_run()
    head = "<th>flow</th><th>kind</th><th>from</th><th>to</th><th>congestion control</th><th>DSCP</th>"
    assert head + "</tr>" in write_report(run).read_text()  # no ecn in run.json
    meta = json.loads((run / "run.json").read_text())
    for flow in meta["flows"].values():
        flow["ecn"] = "not-ect"
    (run / "run.json").write_text(json.dumps(meta))
    assert head + "</tr>" in write_report(run).read_text()
    meta["flows"]["bulk"].update(cc="dctcp", ecn="ect0 (the kernel's)")
    (run / "run.json").write_text(json.dumps(meta))
    page = write_report(run).read_text()
    assert head + "<th>ECN</th></tr>" in page
    assert "<td>dctcp</td><td>-</td><td>ect0 (the kernel&#x27;s)</td>" in page and "<td>reno</td><td>-</td><td>not-ect</td>" in page
