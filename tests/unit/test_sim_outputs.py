"""What the ns-3 driver wrote, read back into the RunRecord: a dualpi2 queue's figures at the end
(raw/ns3/dualpi2.csv) reach summary.json's dualpi2 as an emulated run's datapath stats do."""

from bloatlab.experiment.record import RunRecord, SimulatedDirection
from bloatlab.results.writer import summary
from bloatlab.sim.outputs import dualpi2_stats
from bloatlab.specs.experiment import load_preset

# A row of dualpi2.csv as the driver writes it (DualPi2QueueDisc::StatsRow).
ROW = {"direction": "s0->r", "prob": "0.0123", "delay_c_us": "14000", "delay_l_us": "300", "pkts_in_c": "20000",
       "pkts_in_l": "30000", "maxq": "90", "ecn_mark": "2000", "step_mark": "700", "credit": "-15140",
       "memory_used_bytes": "30280", "max_memory_used_bytes": "200000", "memory_limit_bytes": "30280000"}


def test_a_simulated_dualpi2_queue_fills_the_summary_as_an_emulated_one():
    stats = dualpi2_stats(ROW)
    assert (stats.prob, stats.credit, stats.step_mark) == (0.0123, -15140, 700)
    experiment = load_preset("l4s", ["aqm=dualpi2", "duration=15s"], backend="ns3")
    record = RunRecord(experiment, simulated_stats={"s0->r": SimulatedDirection(50_000, 75_000_000, 40, stats),
                                                    "c->s0": SimulatedDirection(30_000, 45_000_000, 0)})
    assert summary(record).to_dict()["dualpi2"] == {"s0->r": {
        "prob": 0.0123, "delay_c_ms": 14.0, "delay_l_ms": 0.3, "pkts_in_c": 20000, "pkts_in_l": 30000, "maxq": 90,
        "ecn_mark": 2000, "step_mark": 700, "credit": -15140, "memory_used_bytes": 30280,
        "max_memory_used_bytes": 200000, "memory_limit_bytes": 30280000}}
    # Without a dualpi2 queue, no section, as in an emulated run.
    plain = RunRecord(experiment, simulated_stats={"s0->r": SimulatedDirection(50_000, 75_000_000, 40)})
    assert "dualpi2" not in summary(plain).to_dict()
