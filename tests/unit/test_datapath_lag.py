"""The run's own checks on what the userspace datapath did."""

from bloatlab.testbed.datapath import lag_warnings as datapath_lag_warnings


def direction(p99_ns: int, max_ns: int = 0, rx_overrun: int = 0, tx_error: int = 0) -> dict:
    return {"depart_error_ns": {"count": 1000, "p50": 5_000, "p99": p99_ns, "max": max_ns},
            "drops": {"queue_full": 7, "loss": 3, "rx_overrun": rx_overrun, "tx_error": tx_error}}


def test_a_datapath_that_kept_up_says_nothing():
    # Queue and random-loss drops are the link's own; 0.9 ms late at p99 is still timing noise.
    assert datapath_lag_warnings({"s0->h2": direction(900_000), "h2->s0": direction(20_000)}) == []


def test_departures_a_millisecond_late_at_p99_are_delay_nobody_asked_for():
    [w] = datapath_lag_warnings({"s0->h2": direction(12_700_000, max_ns=29_300_000)})
    assert w.startswith("s0->h2: the datapath fell behind: departures 12.7 ms late at p99 (max 29.3 ms)")


def test_frames_lost_outside_the_link_are_counted_by_reason():
    [w] = datapath_lag_warnings({"h1->s0": direction(10_000, rx_overrun=720, tx_error=2)})
    assert w.startswith("h1->s0: 722 frames lost outside the emulated link (rx_overrun 720, tx_error 2)")


def test_a_kernel_link_has_no_datapath_stats_and_no_warning():
    assert datapath_lag_warnings({}) == []
