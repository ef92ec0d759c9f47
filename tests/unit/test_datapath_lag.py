"""The run's own checks on what the userspace datapath did: its lateness, its lost frames, its captures.

Their figures are read as the run reads them, through the stats file's records, from a stats
file bloatlab-link wrote (tests/data/datapath-stats.json) with the figures each test sets."""

import copy
import json
from pathlib import Path

from bloatlab.analysis.summary import summary_lines
from bloatlab.results.summary import RunSummary
from bloatlab.testbed.datapath_stats import DatapathFigures, DatapathStats, DirectionStats, TimerOvershoot
from bloatlab.testbed.diagnostics import WorkerShare, capture_warnings, lag_warnings as datapath_lag_warnings, lateness, worker_shares

# cs244's two links through s0, a cake queue and a capture on s0->h2: what bloatlab-link wrote.
STATS = json.loads((Path(__file__).parents[1] / "data" / "datapath-stats.json").read_text())


def direction(p99_ns: int, max_ns: int = 0, rx_overrun: int = 0, tx_error: int = 0, worker: int = 0,
              **more) -> DirectionStats:
    doc = copy.deepcopy(STATS["links"]["h1-s0"]["forward"])  # neither captured nor cake
    doc["depart_error_ns"] = {"count": 1000, "p50": 5_000, "p99": p99_ns, "max": max_ns}
    doc["drops"].update(queue_full=7, loss=3, rx_overrun=rx_overrun, tx_error=tx_error)
    return DirectionStats.from_json({**doc, "worker": worker, **more})


def timer(**more) -> TimerOvershoot:
    return TimerOvershoot.from_json({**TIMER, **more})


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
    assert lateness({}, timer(p99_ns=30_000)) is None


TIMER = {"sleep_ns": 50_000, "count": 400, "p50_ns": 40_000, "p99_ns": 1_500_000, "max_ns": 9_000_000,
         "cpu_ns": 30_000, "rt_priority": None}


def test_lag_the_machines_own_timer_shows_too_is_put_down_to_the_machine():
    # The idle timer woke 1.5 ms late at p99: 1.2 ms of lateness is within its 1.52 ms allowance.
    assert datapath_lag_warnings({"s0->h2": direction(1_200_000)}, timer()) == []
    [beyond] = datapath_lag_warnings({"s0->h2": direction(2_000_000)}, timer())
    assert "beyond what this machine allows (1520 us: its idle timer's p99 1500 us + 20)" in beyond


def datapath(busy_share: float = 0.3, kernel_share: float = 0.2, wakeups_p99_ns: int = 60_000,
             sentinel_p99_ns: int = 1_100_000, sentinel_count: int = 5000,
             at_random_p99_ns: int | None = None) -> DatapathFigures:
    """The datapath's own figures: one worker, its sentinel."""
    wall = 10_000_000_000
    cpu = {"user_ns": int((busy_share - kernel_share) * wall), "kernel_ns": int(kernel_share * wall), "wall_ns": wall}
    worker = {**STATS["workers"][0], "name": "worker0", "cpu": cpu, "directions": ["s0-h2.forward"],
              "wakeups_late_ns": {"count": 900, "p50": 30_000, "p99": wakeups_p99_ns, "max": 2_000_000}}
    sentinel = {**STATS["sentinel"],
                "late_ns": {"count": sentinel_count, "p50": 40_000, "p99": sentinel_p99_ns, "max": 5_000_000},
                "late_at_random_ns": {"p50": 0, "p99": sentinel_p99_ns if at_random_p99_ns is None else at_random_p99_ns},
                "sleep_p50_ns": 1_201_000, "cpu_ns": 300_000_000, "rt_priority": 11}
    return DatapathFigures.from_json({"workers": [worker], "sentinel": sentinel, "switches": STATS["switches"]})


def test_lag_within_the_sentinels_wake_ups_under_the_same_load_is_the_machines_and_not_warned():
    # cs244 at 10 Mbit/s on a loaded VM: departures 1.05 ms late at p99 where a real-time thread
    # sleeping as the workers do woke 1.1 ms late: the idle timer (50 us) would have blamed the datapath.
    idle = timer(p99_ns=60_000)
    late = {"s0->h2": direction(1_050_000, worker=0)}
    assert datapath_lag_warnings(late, idle, datapath()) == []
    assert datapath_lag_warnings(late, idle) != []  # judged by the idle timer alone, it was warned
    # Too few of the sentinel's sleeps to judge by: the idle timer stands in.
    assert datapath_lag_warnings(late, idle, datapath(sentinel_count=10)) != []


def test_lag_beyond_the_sentinel_names_the_cause_its_worker_measured():
    late = {"s0->h2": direction(2_500_000, worker=0)}
    [busy] = datapath_lag_warnings(late, timer(), datapath(busy_share=0.96, kernel_share=0.86))
    assert "beyond the machine's own stalls under this load (1120 us: the sentinel's p99 at a random moment 1100 us + 20)" in busy
    assert busy.endswith("the datapath was short of CPU for this traffic (its worker, worker0, busy 96% of a core over "
                         "the run, 86 of it in the kernel: the frames' copies and the receiving host's stack)")
    [starved] = datapath_lag_warnings(late, timer(), datapath(wakeups_p99_ns=3_000_000))
    assert "its worker (worker0, busy 30% of a core) woke 3000 us late at p99, later than the machine's sentinel" in starved
    [own] = datapath_lag_warnings(late, timer(), datapath())
    assert own.endswith("its worker (worker0) was busy only 30% of a core and woke on time: the lateness is its own work "
                        "between departures (a send runs the receiving host's stack inline)")
    [unjudged] = datapath_lag_warnings(late)
    assert unjudged.endswith("delay no link asked for; the datapath was short of CPU for this traffic")


def test_worker_shares_between_two_reads_of_the_stats():
    def stats(user_ms, kernel_ms, wall_ms, second=True):
        cpu = {"user_ns": user_ms * 10**6, "kernel_ns": kernel_ms * 10**6, "wall_ns": wall_ms * 10**6}
        workers = [{**STATS["workers"][0], "name": "worker0", "cpu": cpu, "directions": ["h1-h2.forward"]}]
        workers += [{**STATS["workers"][1], "name": "worker1", "cpu": cpu, "directions": []}] if second else []
        return DatapathStats.from_json({**STATS, "workers": workers})
    shares = worker_shares(stats(10, 50, 1000, second=False), stats(110, 850, 2000))
    assert shares == {"worker0": WorkerShare(user_pct=10.0, kernel_pct=80.0, directions=["h1-h2.forward"])}
    assert worker_shares(None, stats(1, 1, 1)) == {} and worker_shares(stats(1, 1, 5), stats(1, 1, 5)) == {}


def test_lateness_is_the_worst_direction_beside_the_timer_allowance():
    stats = {"s0->h2": direction(45_000, max_ns=900_000), "h2->s0": direction(12_000)}
    late = lateness(stats, timer(p99_ns=30_000))
    assert late.to_dict() == {"direction": "s0->h2", "p99_us": 45.0, "max_us": 900.0, "timer_p99_us": 30.0,
                    "sentinel_p99_us": None, "sentinel_at_random_p99_us": None, "sentinel_sleep_us": None,
                    "allowed_us": 50.0, "within": True, "added_us": 0.0}
    assert lateness(stats, timer(p99_ns=20_000)).within is False
    assert lateness(stats, None).within is None  # no timer sample: no verdict
    [(label, value)] = summary_lines(RunSummary(lateness=late))
    assert (label, value) == ("datapath lateness p99", "45 us (s0->h2), within what this machine allows: "
                                                       "50 us (its timer's p99 30 us + 20)")


def test_lateness_beside_the_sentinel_says_what_the_datapath_added():
    stats = {"s0->h2": direction(1_300_000)}
    late = lateness(stats, timer(p99_ns=60_000), datapath())
    assert (late.sentinel_p99_us, late.allowed_us, late.within, late.added_us) == (1100.0, 1120.0, False, 180.0)
    [(_, value)] = summary_lines(RunSummary(lateness=late))
    assert value == ("1300 us (s0->h2); the machine's own under this load 1100 us (a real-time sentinel's "
                     "1.2 ms sleeps, at a random moment): the datapath added 200 us of its own")
    within = lateness({"s0->h2": direction(900_000)}, None, datapath())
    assert within.within is True and summary_lines(RunSummary(lateness=within))[0][1].endswith(
        "the datapath added nothing beyond it")


def test_a_stall_of_the_machine_weighs_as_long_as_it_lasted():
    # A 10 s cs244 on a noisy spell: the sentinel's sleeps 503 us late at p99 but stalls up to
    # 22 ms, which at a random moment make 1.6 ms; departures 1.5 ms late at p99 were the machine's.
    noisy = datapath(sentinel_p99_ns=503_000, at_random_p99_ns=1_600_000)
    late = {"s0->h1": direction(1_489_000, worker=0)}
    assert datapath_lag_warnings(late, None, noisy) == []
    verdict = lateness(late, None, noisy)
    assert (verdict.sentinel_p99_us, verdict.sentinel_at_random_p99_us, verdict.within) == (503.0, 1600.0, True)
    # Judged sleep by sleep it would have been the datapath's 986 us: what the run said before.
    assert datapath_lag_warnings(late, None, datapath(sentinel_p99_ns=503_000)) != []
    # The worker's own wake-ups are still judged sleep by sleep: 700 us > 503 + 20.
    [starved] = datapath_lag_warnings({"s0->h1": direction(2_500_000, worker=0)}, None,
                                      datapath(sentinel_p99_ns=503_000, at_random_p99_ns=1_600_000, wakeups_p99_ns=700_000))
    assert "woke 700 us late at p99, later than the machine's sentinel" in starved


def capture(written: int, cut: int = 0, lost: int = 0, error: str | None = None) -> DirectionStats:
    return direction(10_000, capture={"departures": {"written": written, "cut": cut, "lost": lost, "bytes": 65_000},
                                      "drops": {"written": 3, "cut": 0, "lost": 0, "bytes": 500}, "error": error})


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
