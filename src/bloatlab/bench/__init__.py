"""The bench layer: benchmarks of bloatlab itself, each beside a baseline from the same run
(docs/bench.md). It builds networks and runs experiments through the layers below; nothing
below imports it.

    link     `bench link`: one emulated link's fidelity, each backend at each rate and delay
    machine  `bench machine`: bloatlab against this machine's own baselines (bridges, veth, timer):
             what it measures, and how
    targets  its targets: limits, verdicts beside the machine's figures, the report
    sim      `bench sim`: a simulated cs244 beside the same run emulated
    replay   `bench replay`: packets per second through each discipline in virtual time
"""
