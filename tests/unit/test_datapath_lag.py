"""The run's own checks on what the userspace datapath did: its lateness, its lost frames, its captures."""

from bloatlab.analysis.summary import summary_lines
from bloatlab.testbed.datapath import capture_warnings, lag_warnings as datapath_lag_warnings, lateness, thread_shares


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
    assert lateness({}, {"p99_ns": 30_000}) is None


TIMER = {"sleep_ns": 50_000, "count": 400, "p50_ns": 40_000, "p99_ns": 1_500_000, "max_ns": 9_000_000}


def test_lag_the_machines_own_timer_shows_too_is_put_down_to_the_machine():
    # The timer woke 1.5 ms late at p99: 1.2 ms of lateness is within its 1.52 ms allowance.
    [within] = datapath_lag_warnings({"s0->h2": direction(1_200_000)}, TIMER)
    assert within.endswith("within what this machine allows: its own timer woke 1500 us late at p99 for a "
                           "50 us sleep, so the machine, not the datapath, set this")
    [beyond] = datapath_lag_warnings({"s0->h2": direction(2_000_000)}, TIMER)
    assert "beyond what this machine allows (1520 us: its timer's p99 1500 us + 20)" in beyond


def test_lag_beyond_the_machine_names_how_busy_the_link_thread_was():
    cpu = {"user_ns": 1_000_000_000, "kernel_ns": 8_600_000_000, "wall_ns": 10_000_000_000}
    [beyond] = datapath_lag_warnings({"s0->h2": {**direction(2_000_000), "cpu": cpu}}, TIMER)
    assert beyond.endswith("the datapath was short of CPU for this traffic (its link thread busy 96% of a core "
                           "over the run, 86 of it in the kernel: the frames' copies and the receiving host's stack)")
    [unjudged] = datapath_lag_warnings({"s0->h2": {**direction(2_000_000), "cpu": cpu}})
    assert "its link thread busy 96% of a core" in unjudged
    [within] = datapath_lag_warnings({"s0->h2": {**direction(1_200_000), "cpu": cpu}}, TIMER)
    assert "link thread" not in within  # the machine set it: the thread's load is beside the point


def test_thread_shares_between_two_reads_of_the_stats():
    def stats(user_ms, kernel_ms, wall_ms, reverse=True):
        cpu = {"user_ns": user_ms * 10**6, "kernel_ns": kernel_ms * 10**6, "wall_ns": wall_ms * 10**6}
        pair = {"forward": {"cpu": cpu}, **({"reverse": {"cpu": cpu}} if reverse else {})}
        return {"links": {"h1-h2": pair}}
    shares = thread_shares(stats(10, 50, 1000, reverse=False), stats(110, 850, 2000))
    assert shares == {"h1-h2.forward": {"user_pct": 10.0, "kernel_pct": 80.0}}  # reverse: no first read
    assert thread_shares(None, stats(1, 1, 1)) == {} and thread_shares(stats(1, 1, 5), stats(1, 1, 5)) == {}


def test_lateness_is_the_worst_direction_beside_the_timer_allowance():
    stats = {"s0->h2": direction(45_000, max_ns=900_000), "h2->s0": direction(12_000)}
    late = lateness(stats, {**TIMER, "p99_ns": 30_000})
    assert late == {"direction": "s0->h2", "p99_us": 45.0, "max_us": 900.0, "timer_p99_us": 30.0,
                    "allowed_us": 50.0, "within": True}
    assert lateness(stats, {**TIMER, "p99_ns": 20_000})["within"] is False
    assert lateness(stats, None)["within"] is None  # no timer sample: no verdict
    [(label, value)] = summary_lines({"lateness": late})
    assert (label, value) == ("datapath lateness p99", "45 us (s0->h2), within what this machine allows: "
                                                       "50 us (its timer's p99 30 us + 20)")


def capture(written: int, cut: int = 0, lost: int = 0, error: str | None = None) -> dict:
    return {"capture": {"departures": {"written": written, "cut": cut, "lost": lost, "bytes": 65_000},
                        "drops": {"written": 3, "cut": 0, "lost": 0, "bytes": 500}, "error": error}}


def test_a_whole_capture_says_nothing():
    assert capture_warnings({"s0->h2": capture(5000), "h1->s0": direction(10_000)}) == []


def test_a_capture_cut_by_its_limit_or_lost_to_the_disk_says_how_much():
    cut, lost, failed = capture_warnings({"s0->h2": capture(400, cut=600, lost=0),
                                          "h2->s0": capture(900, lost=100),
                                          "h1->s0": capture(10, error="capture: No space left on device")})
    assert cut.startswith("s0->h2: the capture of its departures reached probes.pcap_limit at 0.1 MB; "
                          "600 of 1000 packets are not in it")
    assert lost.startswith("h2->s0: the capture of its departures lost 100 packets: the disk fell behind")
    assert failed == "h1->s0: the capture stopped: capture: No space left on device"
