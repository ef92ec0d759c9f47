"""A sweep runs every point on one backend per link, chosen before the first run: the first
that serves the link at every point (lab/run.py one_backend_per_link). No run here: the
choice is made from the points' specs and what the kernel offers, given as data."""

import pytest

from bloatlab.errors import SpecError
from bloatlab.lab.run import one_backend_per_link
from bloatlab.specs.experiment import Source, plan_sweep
from bloatlab.testbed.capabilities import QDISC_PROBES
from bloatlab.testbed.network import choose_backend

BOTTLENECK = "s0-h2"


AQMS = ["taildrop", "red", "codel", "pie", "fq_codel", "cake"]
KERNEL_ABLE = ["taildrop", "codel", "pie", "fq_codel"]  # red and cake: Linux's limits differ (bytes, memory)


def aqm_plan(sets=("duration=5s",), aqms=AQMS):
    return plan_sweep(Source(preset="aqm"), list(sets), [("aqm", list(aqms))])


def kernel(*missing):
    """What a kernel offers: every qdisc bloatlab probes for, but those `missing`."""
    return {kind: kind not in missing for kind in QDISC_PROBES}


def backends(plan):
    """Each point's backend of the bottleneck, by its aqm."""
    return {e.params["aqm"]: next(link.backend for link in e.topology.links if link.name == BOTTLENECK)
            for e in plan.points.values()}


def test_an_aqm_sweep_on_a_kernel_with_netem_runs_every_point_on_the_datapath():
    # With delay, the kernel's queue is netem's own tail drop: it can serve only taildrop.
    plan, qdiscs = aqm_plan(), kernel()
    taildrop = next(e for e in plan.points.values() if e.params["aqm"] == "taildrop")
    link = next(link for link in taildrop.topology.links if link.name == BOTTLENECK)
    # Alone, the taildrop point would go to the kernel: that is the mix a sweep must not make.
    assert qdiscs["netem"] and choose_backend(link, qdiscs) == "kernel"
    pinned, chosen = one_backend_per_link(plan, qdiscs)
    assert chosen[BOTTLENECK] == "userspace"
    assert set(backends(pinned).values()) == {"userspace"} and len(backends(pinned)) == len(AQMS)
    # Each run builds what its spec now names: the same backend at every point.
    for e in pinned.points.values():
        assert all(choose_backend(link, qdiscs) == chosen[link.name] for link in e.topology.links)


def test_without_delay_a_kernel_with_every_qdisc_runs_every_point_on_the_kernel():
    pinned, chosen = one_backend_per_link(aqm_plan(["duration=5s", "delay=0ms"], KERNEL_ABLE), kernel())
    assert set(chosen.values()) == {"kernel"}
    assert set(backends(pinned).values()) == {"kernel"}


def test_without_delay_a_kernel_lacking_one_aqm_runs_every_point_on_the_datapath():
    pinned, chosen = one_backend_per_link(aqm_plan(["duration=5s", "delay=0ms"], KERNEL_ABLE), kernel("pie"))
    assert chosen[BOTTLENECK] == "userspace" and set(backends(pinned).values()) == {"userspace"}


def test_repetitions_of_a_pinned_point_keep_its_backend_and_move_their_seeds():
    pinned, _ = one_backend_per_link(aqm_plan(), kernel())
    values = {"aqm": "codel"}
    first, third = pinned.load(values, 1), pinned.load(values, 3)
    assert third.seed == first.seed + 2 and third.topology.seed == first.topology.seed + 2
    assert [link.backend for link in third.topology.links] == [link.backend for link in first.topology.links]
    # The same experiment as loading the spec again at that repetition, but for the pinned backends.
    again = Source(preset="aqm").load(["duration=5s", "aqm=codel"], 3)
    assert again.with_link_backends({link.name: link.backend for link in third.topology.links}) == third


def test_a_link_that_names_its_backend_keeps_it_and_a_sweep_no_backend_serves_whole_is_refused(tmp_path):
    spec = tmp_path / "exp.toml"
    spec.write_text("""
duration = "5s"
[params]
at = { default = "link", choices = ["link", "sender"] }
[topology.hosts.h1]
[topology.hosts.h2]
[[topology.links]]
ends = ["h1", "h2"]
rate = "10mbit"
queue_at = "{at}"
queue = { discipline = "cake" }
""")
    plan = plan_sweep(Source(path=spec), [], [("at", ["link", "sender"])])
    # The kernel lacks cake: it cannot serve either point; the datapath cannot queue at the sender.
    with pytest.raises(SpecError) as e:
        one_backend_per_link(plan, {"netem": True, "htb": True, "cake": False})
    assert e.value.field == "links[0].backend" and "every point" in str(e.value) and "cake" in str(e.value)
    named = plan_sweep(Source(path=spec), ["at=link"], [])
    assert one_backend_per_link(named, {"cake": False})[1] == {"h1-h2": "userspace"}
