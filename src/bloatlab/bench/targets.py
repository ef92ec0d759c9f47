"""The targets of `bloatlab bench machine` (bench/machine.py measures, this judges): each
target's limit, the cases it is judged on, its verdict beside the machine's own figure from the
same run, and the report (docs/bench.md). Nothing here builds a network or runs a tool.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from bloatlab.errors import BloatlabError
from bloatlab.bench.link import CaseResult
from bloatlab.specs.experiment import load_preset
from bloatlab.specs.units import format_duration_ns, format_rate
from bloatlab.testbed.diagnostics import TIMER_ALLOWANCE_US, TIMER_SLEEP_NS




@dataclass(frozen=True)
class Limit:
    value: float
    at_least: bool  # the figure passes at or above the limit; else at or below
    unit: str
    what: str


LIMITS: dict[str, Limit] = {
    "unlimited_tcp": Limit(0.95, True, "x", "unlimited TCP goodput / the kernel bridge's"),
    "shaped_tcp": Limit(0.80, True, "x", "best shaped TCP goodput within 3% of its rate / the bridge's"),
    "shaped_udp": Limit(0.97, True, "x", "worst UDP share of capacity at the shaped rates"),
    "idle_rtt": Limit(0.05, False, "ms", "idle RTT added over the delays, minus a plain veth pair's RTT"),
    "lateness": Limit(TIMER_ALLOWANCE_US, False, "us", "departure lateness p99 minus the timer's p99 overshoot"),
    "loaded_rtt": Limit(0.05, False, "x", "RTT p99 under load against base + queue / rate, relative error"),
    "up_down": Limit(0.5, False, "s", "up + down of h1 - s0 - h2"),
    "run_overhead": Limit(2.0, False, "s", "a cs244 run's wall time beyond its duration"),
    "switched_tcp": Limit(0.97, True, "x", "TCP goodput through h1 - s0 - h2 at 1 Gbit/s / its capacity"),
    "switched_fast": Limit(0.95, True, "x", "TCP goodput through h1 - s0 - h2 at 2.5 Gbit/s / one link's"),
    "slow_lateness": Limit(TIMER_ALLOWANCE_US, False, "us", "cs244 at 10 Mbit/s: lateness p99 minus the sentinel's"),
    "star_up": Limit(3.0, False, "s", "up of a star of 100 hosts"),
    "star_down": Limit(1.0, False, "s", "down of a star of 100 hosts"),
    "star_idle": Limit(1.0, False, "%", "a 100-host star's idle datapath CPU, % of a core"),
}
# The rates of the switched targets, in order: switched_tcp's, switched_fast's.
SWITCHED_RATES = (1_000_000_000, 2_500_000_000)
SLOW_RUN_S = 20  # each of slow_lateness's cs244 runs
STAR_HOSTS = 100
STAR_RATE_BPS = 100_000_000
# A new star's hosts send their IPv6 chatter (neighbour discovery, MLD) for ten seconds or so,
# which every switch floods to every port: the idle window starts after it.
STAR_SETTLE_S = 15.0
STAR_IDLE_S = 10.0
RRUL_RATE = "1gbit"
RRUL_DURATION_S = 30
WITHIN = 0.03  # "within 3% of its setting", above it or below
DELAY_CASE = (1_000_000_000, 10_000_000)  # 1 Gbit/s, 10 ms each way
RUN_DURATION_S = 5
RUN_REPEATS = 3  # the run_overhead target is judged on their median
TIMER_COUNT = 2000


@dataclass
class Target:
    name: str
    value: float | None  # what is judged: a ratio or a difference to the baseline
    limit: float
    figure: str  # bloatlab's own number, with its unit
    baseline: str  # the machine's, from the same run
    detail: str = ""
    # The same target judged on what the machine itself did in this run (htb for the shaped
    # targets, a real-time thread's own sleep under the same load for lateness): where that
    # misses too, the machine, not bloatlab, is what stops the target here.
    machine: float | None = None
    machine_figure: str = ""
    # bloatlab's own figure on the machine's terms, where those are not `value`'s: shaped_udp's
    # machine figure is htb's share at one rate, so bloatlab's is its share at that rate.
    matched: float | None = None

    def __post_init__(self) -> None:
        if self.machine is None:  # nothing measured: nothing named
            self.machine_figure = ""
            self.matched = None

    def _holds(self, value: float | None) -> bool:
        if value is None:
            return False
        return value >= self.limit if LIMITS[self.name].at_least else value <= self.limit

    @property
    def ok(self) -> bool:
        return self._holds(self.value)

    @property
    def machine_ok(self) -> bool | None:
        return None if self.machine is None else self._holds(self.machine)

    @property
    def mine(self) -> float | None:
        """bloatlab's figure on the machine figure's terms."""
        return self.value if self.matched is None else self.matched

    @property
    def trails(self) -> bool | None:
        """Whether bloatlab did worse than the machine's own work, judged the same way and by more
        than WITHIN of it: a target beyond this machine may still show a gap that is bloatlab's,
        but the same shaped rate reached with 2% less goodput is not one."""
        if self.machine is None or self.mine is None:
            return None
        margin = abs(self.machine) * WITHIN
        return self.mine < self.machine - margin if LIMITS[self.name].at_least else self.mine > self.machine + margin

    def line(self) -> str:
        lim = LIMITS[self.name]
        value = "-" if self.value is None else f"{self.value:.3f}"
        sign = ">=" if lim.at_least else "<="
        own = ""
        if self.machine is not None:
            mine = f" (bloatlab's there: {self.matched:.3f})" if self.matched is not None else ""
            own = (f"; the machine's own, {self.machine_figure}: {self.machine:.3f}, "
                   + ("holds" if self.machine_ok else "misses too") + mine)
        return (f"{'ok  ' if self.ok else 'MISS'} {self.name:13} {value:>8} {sign} {self.limit:g} {lim.unit:2} | "
                f"{self.figure} against {self.baseline}" + (f" ({self.detail})" if self.detail else "") + own)


def parse_limits(texts: list[str]) -> dict[str, float]:
    """--target NAME=LIMIT, each checked: a known target and a number."""
    out = {}
    for text in texts:
        name, eq, value = text.partition("=")
        name = name.strip()
        if not eq or name not in LIMITS:
            raise BloatlabError(f"{text!r} is not NAME=LIMIT with NAME one of {', '.join(LIMITS)}", field="--target")
        try:
            out[name] = float(value)
        except ValueError:
            raise BloatlabError(f"{value.strip()!r} is not a number; give e.g. {name}={LIMITS[name].value:g}",
                                field="--target") from None
    return out


def parse_only(text: str | None) -> list[str]:
    if not text:
        return list(LIMITS)
    names = [n.strip() for n in text.split(",") if n.strip()]
    if unknown := [n for n in names if n not in LIMITS]:
        raise BloatlabError(f"unknown target {unknown[0]!r}; give some of {', '.join(LIMITS)}", field="--only")
    return names



# Helpers of the verdicts (and of the measuring, which decides on them) ----------------------

def median_of(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def tcp_goodputs(results: list[CaseResult], backend: str, rate: int | None = None, delay: int = 0) -> list[float]:
    return [r.tcp_goodput_mbps for r in results if r.case.backend == backend and r.case.rate_bps == rate
            and r.case.delay_ns == delay and r.tcp_goodput_mbps]


def _shaped(results: list[CaseResult], backend: str) -> list[CaseResult]:
    """The backend's shaped cases without delay, by rate (not the switched targets' own)."""
    return sorted((r for r in results if r.case.backend == backend and r.case.rate_bps and not r.case.delay_ns
                   and not r.case.switched and not r.case.beside), key=lambda r: r.case.rate_bps or 0)


def _highest_within(cases: list[CaseResult]) -> CaseResult | None:
    """The highest-rate case whose TCP goodput is within WITHIN of its capacity, either way: a
    shaper that lets through more than its setting is as far from it as one that gives less
    (htb gave 103-108% at 1 and 2 Gbit/s on 2026-11-28)."""
    good = [r for r in cases if (share := _tcp_share(r)) is not None and abs(share - 1) <= WITHIN]
    return good[-1] if good else None


def _tcp_share(r: CaseResult) -> float | None:
    """The share of its capacity a case's TCP goodput was."""
    return r.tcp_goodput_mbps / r.tcp_capacity_mbps if r.tcp_goodput_mbps and r.tcp_capacity_mbps else None


def _udp_share(r: CaseResult) -> float | None:
    """The share of its capacity a case's UDP delivered."""
    return r.udp_received_mbps / r.udp_capacity_mbps if r.udp_received_mbps and r.udp_capacity_mbps else None


def _shares(cases: list[CaseResult], proto: str) -> str:
    """Each case's share of its capacity ("1 Gbit/s 99.5%, ..."), TCP's goodput or UDP's arrivals."""
    share = _tcp_share if proto == "tcp" else _udp_share
    return ", ".join(f"{format_rate(r.case.rate_bps)} " + (f"{100 * v:.1f}%" if (v := share(r)) is not None else "-")
                     for r in cases)


def cpu_account(r: CaseResult) -> str:
    """Where a case's CPU went: the machine's busy share, and the busiest worker's share of a core
    split into bloatlab-link's own code and the kernel's work on that thread (the frames' copies
    into and out of the process, and the receiving host's stack, which runs on it)."""
    parts = [f"the machine {r.machine_busy_pct:.0f}% busy"] if r.machine_busy_pct is not None else []
    if r.datapath_workers:
        name, t = max(r.datapath_workers.items(), key=lambda kv: kv[1]["user_pct"] + kv[1]["kernel_pct"])
        serves = f": {', '.join(t['directions'])}" if t.get("directions") else ""
        parts.append(f"its busiest worker ({name}{serves}) {t['user_pct'] + t['kernel_pct']:.0f}% of a core, "
                     f"{t['user_pct']:.0f} of it in bloatlab-link's own code and {t['kernel_pct']:.0f} in the kernel")
    return ", ".join(parts)


def verdicts(names: list[str], limits: dict[str, float], results: list[CaseResult], timer: dict[str, Any],
             extra: dict[str, Any]) -> list[Target]:
    """Each chosen target on this run's figures; a figure not measured is a miss, not a pass."""
    bridge = median_of(tcp_goodputs(results, "kernel"))
    veth = median_of(tcp_goodputs(results, "veth"))
    base = f"the bridge's {bridge:.0f} Mbit/s" if bridge else "the bridge (not measured)"
    shaped = _shaped(results, "userspace")
    htb = _shaped(results, "kernel")
    delayed = next((r for r in results if r.case.backend == "userspace" and r.case.delay_ns), None)
    veth_rtt = median_of([r.min_rtt_ms for r in results if r.case.backend == "veth" and r.min_rtt_ms is not None])
    out = []
    for name in names:
        limit = limits[name]
        if name == "unlimited_tcp":
            ratios = [u / b for u, b in zip(tcp_goodputs(results, "userspace"), tcp_goodputs(results, "kernel"))]
            mine = median_of(tcp_goodputs(results, "userspace"))
            rounds = [r for r in results if r.case.backend == "userspace" and r.case.rate_bps is None
                      and not r.case.delay_ns and r.tcp_goodput_mbps]
            # Where its CPU went in the round nearest the median: what a faster datapath could win.
            near = min(rounds, key=lambda r: abs((r.tcp_goodput_mbps or 0) - (mine or 0)), default=None)
            out.append(Target(name, median_of(ratios), limit, f"{mine or 0:.0f} Mbit/s", base,
                              f"median of {len(ratios)} rounds; plain veth {veth or 0:.0f} Mbit/s"
                              + (f"; {cpu}" if near and (cpu := cpu_account(near)) else "")))
        elif name == "shaped_tcp":
            best = _highest_within(shaped)
            value = (best.tcp_goodput_mbps or 0) / bridge if best and bridge else (0.0 if bridge else None)
            figure = f"{best.tcp_goodput_mbps:.0f} Mbit/s at {format_rate(best.case.rate_bps)}" if best else "no rate within 3%"
            detail = f"share of capacity: {_shares(shaped, 'tcp')}"
            missed = next((r for r in shaped if (v := _tcp_share(r)) is not None and abs(v - 1) > WITHIN), None)
            if missed and (cpu := cpu_account(missed)):
                detail += f"; at {format_rate(missed.case.rate_bps)}, {cpu}"
            own = None
            if htb:  # the machine's own shaper, judged the same way
                kernel = _highest_within(htb)
                reach = format_rate(kernel.case.rate_bps) if kernel else "no rate within 3%"
                if kernel and bridge:
                    reach += f", {(kernel.tcp_goodput_mbps or 0) / bridge:.2f} of the bridge"
                detail += f"; htb, same queue: {_shares(htb, 'tcp')} (highest within 3%: {reach})"
                if bridge:
                    own = (kernel.tcp_goodput_mbps or 0) / bridge if kernel else 0.0
            out.append(Target(name, value, limit, figure, base, detail, own, "htb"))
        elif name == "shaped_udp":
            shares = [(r, s) for r in shaped if (s := _udp_share(r)) is not None]
            worst = min(shares, key=lambda s: s[1]) if shares else None
            drops = sum(r.udp_rcvbuf_drops or 0 for r in shaped)
            # The machine's own at the lowest rate bloatlab's UDP misses (its worst where none
            # does): where htb holds a rate bloatlab misses, that miss is bloatlab's whatever
            # the higher rates do.
            first = next(((r, s) for r, s in shares if s < limit), worst)
            kernel = next((s for r in htb if first and r.case.rate_bps == first[0].case.rate_bps
                           and (s := _udp_share(r)) is not None), None)
            at = f"htb at {format_rate(first[0].case.rate_bps)}, " if first else ""
            at += ("where bloatlab's first misses" if first and first[1] < limit else "bloatlab's worst rate")
            out.append(Target(name, worst[1] if worst else None, limit,
                              f"{100 * worst[1]:.1f}% at {format_rate(worst[0].case.rate_bps)}" if worst else "-",
                              "each rate's capacity",
                              ", ".join(f"{format_rate(r.case.rate_bps)} {100 * s:.1f}%" for r, s in shares)
                              + (f"; the receiving socket dropped {drops} datagrams (host CPU)" if drops else "")
                              + (f"; htb, same queue: {_shares([r for r in htb if r.case.udp], 'udp')}" if htb else ""),
                              kernel, at, first[1] if first else None))
        elif name == "idle_rtt":
            added = delayed.min_rtt_ms - delayed.expected_min_rtt_ms if delayed and delayed.min_rtt_ms is not None \
                and delayed.expected_min_rtt_ms is not None else None
            value = added - veth_rtt if added is not None and veth_rtt is not None else None
            out.append(Target(name, value, limit, f"+{added:.3f} ms over 20 ms" if added is not None else "-",
                              f"the plain veth's {veth_rtt:.3f} ms" if veth_rtt is not None else "the veth (not measured)"))
        elif name == "lateness":
            p99 = delayed.depart_error_p99_us if delayed else None
            idle = extra.get("timer_before_lateness") or timer
            tp99 = idle["p99_ns"] / 1e3
            when = "" if idle is timer else f" just before the case; {timer['p99_ns'] / 1e3:.1f} at the bench's start"
            loaded = extra.get("timer_loaded")
            context = [f"datapath CPU {delayed.datapath_cpu_pct:.0f}% of one core"] if delayed and delayed.datapath_cpu_pct else []
            if delayed and delayed.machine_busy_pct is not None:
                context.append(f"the machine {delayed.machine_busy_pct:.0f}% busy")
            if delayed and delayed.cpu_pressure_pct is not None:
                context.append(f"tasks waiting for a CPU {delayed.cpu_pressure_pct:.0f}% of the case")
            if delayed and delayed.batching_pct is not None:
                context.append(f"batching {delayed.batching_pct:.0f}% of the case")
            sleeps = []
            own, whose = None, ""
            if rt := extra.get("timer_loaded_rt"):
                own = rt["p99_ns"] / 1e3 - tp99
                whose = (f"a real-time thread's {TIMER_SLEEP_NS / 1e3:.0f} us sleep under that load, above the link "
                         "threads' priority" if rt.get("rt_priority") else
                         f"a plain thread's {TIMER_SLEEP_NS / 1e3:.0f} us sleep under that load (real-time refused)")
                sleeps.append(f"{'a real-time thread' if rt.get('rt_priority') else 'real-time refused, a thread'}'s "
                              f"p99 {rt['p99_ns'] / 1e3:.0f} us")
            if loaded:
                sleeps.append(f"a plain thread's p99 {loaded['p99_ns'] / 1e3:.0f} us")
            if sleeps:
                context.append(f"a {TIMER_SLEEP_NS / 1e3:.0f} us sleep under that load: " + ", ".join(sleeps))
            out.append(Target(name, p99 - tp99 if p99 is not None else None, limit,
                              f"p99 {p99:.1f} us" if p99 is not None else "-",
                              f"the timer's p99 {tp99:.1f} us (p50 {idle['p50_ns'] / 1e3:.1f}{when})", "; ".join(context),
                              own, whose))
        elif name == "loaded_rtt":
            # Behind the UDP overload the queue stays full: the p99 is base + queue / rate. A TCP
            # flow fills it only at the top of its sawtooth, and Cubic's takes 13 s at this BDP.
            p99 = delayed.full_queue_rtt_p99_ms if delayed else None
            physics = delayed.expected_peak_rtt_ms if delayed else None
            tcp = f"under TCP: p99 {delayed.loaded_rtt_p99_ms:.1f}, max {delayed.peak_rtt_ms:.1f} ms" \
                if delayed and delayed.loaded_rtt_p99_ms and delayed.peak_rtt_ms else ""
            out.append(Target(name, abs(p99 / physics - 1) if p99 and physics else None, limit,
                              f"p99 {p99:.1f} ms behind UDP at 1.1 x the rate" if p99 else "-",
                              f"physics {physics:.1f} ms" if physics else "-", tcp))
        elif name == "up_down":
            out.append(Target(name, extra.get("up_down_s"), limit, f"{extra.get('up_down_s', 0):.2f} s",
                              f"plain ip calls {extra.get('plain_ip_s', 0):.2f} s",
                              f"up {extra.get('up_s', 0):.2f}, down {extra.get('down_s', 0):.2f}; median of 3",
                              extra.get("plain_ip_s"), "plain ip calls"))
        elif name in ("switched_tcp", "switched_fast"):
            rate = SWITCHED_RATES[0] if name == "switched_tcp" else SWITCHED_RATES[1]

            def every(backend: str, switched: bool) -> list[CaseResult]:
                return [r for r in results if r.case.backend == backend and r.case.rate_bps == rate
                        and (r.case.switched if switched else r.case.beside) and not r.case.delay_ns
                        and r.tcp_goodput_mbps]

            # The round whose ratio is the median (switched_fast's alternate), or the one pair.
            pairs = sorted(zip(every("userspace", True), every("userspace", False)),
                           key=lambda p: (p[0].tcp_goodput_mbps or 0) / (p[1].tcp_goodput_mbps or 1))
            mine, single = pairs[len(pairs) // 2] if pairs else (None, None)
            kernel = next(iter(every("kernel", True)), None)
            shares = {k: _tcp_share(r) for k, r in (("mine", mine), ("single", single), ("kernel", kernel)) if r}
            figure = (f"{mine.tcp_goodput_mbps:.0f} Mbit/s ({100 * shares['mine']:.1f}%) at {format_rate(rate)}"
                      if mine and "mine" in shares else "-")
            baseline = (f"one link's {single.tcp_goodput_mbps:.0f} Mbit/s ({100 * shares['single']:.1f}%)"
                        if single and "single" in shares else "one link (not measured)")
            detail = "; ".join(part for part in (
                f"kernel bridges and htb {kernel.tcp_goodput_mbps:.0f} Mbit/s ({100 * shares['kernel']:.1f}%)"
                if kernel and "kernel" in shares else "",
                cpu_account(mine) if mine else "") if part)
            if name == "switched_tcp":
                value = shares.get("mine")
                own, whose = shares.get("kernel"), "kernel bridges and htb"
            else:
                value = mine.tcp_goodput_mbps / single.tcp_goodput_mbps if mine and single else None
                own = kernel.tcp_goodput_mbps / single.tcp_goodput_mbps if kernel and single else None
                whose = "kernel bridges and htb against the same link"
                if len(pairs) > 1:
                    detail = (f"median of {len(pairs)} alternating rounds: "
                              + ", ".join(f"{(a.tcp_goodput_mbps or 0) / (b.tcp_goodput_mbps or 1):.3f}" for a, b in pairs)
                              + (f"; {detail}" if detail else ""))
            out.append(Target(name, value, limit, figure, baseline, detail, own, whose))
        elif name == "slow_lateness":
            runs = extra.get("slow_lateness") or {}
            plain, punctual = runs.get("default") or {}, runs.get("punctual") or {}
            p99, watch = plain.get("p99_us"), plain.get("sentinel_p99_us")

            def cost(r: dict[str, Any]) -> str:
                busy = ", ".join(f"{w:.0f}%" for w in r.get("workers_pct") or [])
                return f"workers {busy} of a core" + (f", the sentinel {r['sentinel_cpu_pct']:.1f}%"
                                                       if r.get("sentinel_cpu_pct") is not None else "")
            detail = f"{cost(plain)}" if plain else ""
            if punctual.get("p99_us") is not None and punctual.get("sentinel_p99_us") is not None:
                detail += (f"; punctual: p99 {punctual['p99_us']:.0f} us against the sentinel's "
                           f"{punctual['sentinel_p99_us']:.0f}, {cost(punctual)}")
            sleep = f", {plain['sentinel_sleep_us'] / 1e3:.1f} ms sleeps" if plain.get("sentinel_sleep_us") else ""
            out.append(Target(name, p99 - watch if p99 is not None and watch is not None else None, limit,
                              f"p99 {p99:.0f} us ({plain.get('direction')})" if p99 is not None else "-",
                              f"the sentinel's p99 {watch:.0f} us under the same load{sleep}" if watch is not None
                              else "the sentinel (too few sleeps)", detail))
        elif name == "star_up":
            out.append(Target(name, extra.get("star_up_s"), limit, f"{extra.get('star_up_s', 0):.2f} s",
                              f"plain ip calls {extra.get('star_plain_ip_s', 0):.2f} s",
                              f"{STAR_HOSTS} hosts at {format_rate(STAR_RATE_BPS)}, s0 inside the datapath; "
                              "the datapath's start included"))
        elif name == "star_down":
            out.append(Target(name, extra.get("star_down_s"), limit, f"{extra.get('star_down_s', 0):.2f} s",
                              f"plain ip calls {extra.get('star_plain_ip_s', 0):.2f} s (up and down)"))
        elif name == "star_idle":
            busy = extra.get("star_machine_busy_pct")
            out.append(Target(name, extra.get("star_idle_pct"), limit, f"{extra.get('star_idle_pct', 0):.2f}% of a core",
                              f"the machine {busy:.1f}% busy then" if busy is not None else "the machine (not measured)",
                              f"over {STAR_IDLE_S:.0f} s, {STAR_SETTLE_S:.0f} s after up; {extra.get('star_idle_frames', 0)} "
                              f"frames came meanwhile; {extra.get('star_threads', 0)} threads"))
        elif name == "run_overhead":
            wall = extra.get("run_wall_s")
            split = (f"median of {len(extra.get('run_walls_s', []))} runs; its results written at "
                     f"{extra['run_results_s']:.2f} s, plots and report at {extra['run_report_s']:.2f} s"
                     if "run_results_s" in extra else "")
            out.append(Target(name, wall - RUN_DURATION_S if wall is not None else None, limit,
                              f"{wall or 0:.2f} s for a {RUN_DURATION_S} s run", f"python's start-up {extra.get('python_s', 0):.2f} s",
                              split))
    return out


def rrul_line(rrul: dict[str, Any]) -> str:
    """RRUL's totals each way and lateness, bloatlab's datapath beside kernel bridges with htb."""
    def one(r: dict[str, Any]) -> str:
        if r.get("error"):
            return f"not run ({r['error']})"
        totals = ", ".join(f"{pair} {mbps:.0f}" for pair, mbps in sorted((r.get("totals_mbps") or {}).items()))
        late = (f"; lateness p99 {r['p99_us']:.0f} us (the sentinel's {r['sentinel_p99_us']:.0f})"
                if r.get("p99_us") is not None and r.get("sentinel_p99_us") is not None else "")
        return f"totals {totals} Mbit/s{late}"
    delay = format_duration_ns(load_preset("rrul").topology.links[0].forward.delay_ns)
    return (f"bloatlab, {delay} on each link: {one(rrul.get('userspace', {}))}; without delay: bloatlab "
            f"{one(rrul.get('userspace_0ms', {}))}, kernel bridges and htb {one(rrul.get('kernel_0ms', {}))}")


def timer_summary(timer: dict[str, Any]) -> str:
    cost = f", and costs {timer['cpu_ns'] / 1e3:.1f} us of CPU" if timer.get("cpu_ns") is not None else ""
    return (f"a {timer['sleep_ns'] / 1e3:.0f} us sleep overshoots {timer['p50_ns'] / 1e3:.1f} us p50, "
            f"{timer['p99_ns'] / 1e3:.1f} us p99{cost}")


def render(doc: dict[str, Any]) -> str:
    head = (f"bloatlab {doc['bloatlab_version']} on {doc['kernel']}, {doc['cpus']} CPUs, {doc['date']}; "
            f"timer: {timer_summary(doc['timer'])}")
    lines = [head, ""]
    targets = [Target(**{k: t[k] for k in ("name", "value", "limit", "figure", "baseline", "detail")},
                      machine=t.get("machine"), machine_figure=t.get("machine_figure", ""), matched=t.get("matched"))
               for t in doc["targets"]]
    lines += [t.line() for t in targets]
    if doc.get("figures"):
        lines += ["", *doc["figures"]]
    if missed := [t for t in targets if not t.ok]:
        # Whose miss each is: a target the machine's own baseline misses too is beyond this machine.
        def whose(t: Target) -> str:
            if t.machine_ok is None:
                return ""
            if t.machine_ok:
                return " (bloatlab's: the machine's own holds)"
            gap = f", but bloatlab trails it: {t.mine:.3f} against {t.machine:.3f}" if t.trails else ""
            return f" (beyond this machine: its own misses too{gap})"
        lines += ["", f"{len(missed)} of {len(targets)} targets miss: " + ", ".join(t.name + whose(t) for t in missed)]
    return "\n".join(lines)
