"""The results writer: a RunRecord into summary.json and run.json, also for a run cut short
before anything was measured."""

from bloatlab.experiment.record import RunRecord
from bloatlab.results.writer import run_document, summary
from bloatlab.specs.experiment import load_preset


def test_a_run_cut_short_before_its_probes_still_names_every_probed_queue():
    experiment = load_preset("cs244", ["duration=10s"])
    record = RunRecord(experiment, incomplete_reason="failed: bloatlab-link exited", backends=["userspace"] * 2)
    doc = summary(record)
    assert doc["complete"] is False
    assert doc["queue"] == {"s0->h2": {"mean_pkts": None, "max_pkts": None, "mean_bytes": None, "max_bytes": None,
                                       "drops": None}}
    assert doc["rtt_ms"]["count"] == 0 and doc["rtt_ms"]["median"] is None
    meta = run_document(record)
    assert [link["backend"] for link in meta["links"]] == ["userspace", "userspace"]
    assert meta["probes"]["queue"] == {}  # nothing was measured, so by nothing
    # The queue as it ran: the discipline's every parameter, defaults filled in.
    assert meta["links"][1]["forward"]["queue"] == {"discipline": "droptail", "packets": 100, "bytes": None}
