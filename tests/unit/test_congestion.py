"""cc = "dctcp" from the spec to the hosts: which TCP workloads must run it between the same two
hosts, the names the hosts' sockets are given, the one-line error where it cannot be had, and the
BPF DCTCP's records as bpftool prints them (testbed/congestion.py; registering it for real:
tests/integration/test_dctcp.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bloatlab.errors import MachineError, SpecError
from bloatlab.experiment.workloads import congestion_controls
from bloatlab.specs.experiment import load_experiment
from bloatlab.testbed import congestion
from bloatlab.testbed.network import Network

SPEC = """
duration = "10s"
[topology.hosts.h1]
[topology.hosts.h2]
[topology.hosts.h3]
[topology.switches.s0]
[[topology.links]]
ends = ["h1", "s0"]
[[topology.links]]
ends = ["h2", "s0"]
[[topology.links]]
ends = ["h3", "s0"]
[[workloads]]
kind = "bulk"
from = "h1"
to = "h2"
cc = "dctcp"
"""


def load(tmp_path: Path, extra: str):
    path = tmp_path / "exp.toml"
    path.write_text(SPEC + extra)
    return load_experiment(path)


@pytest.mark.parametrize("other", [
    '[[workloads]]\nkind = "bulk"\nfrom = "h2"\nto = "h1"\ncc = "cubic"\n',  # the other way
    '[[workloads]]\nkind = "web"\nserver = "h1"\nclient = "h2"\ncc = "bbr"\n',
    '[[workloads]]\nkind = "responsiveness"\nserver = "h2"\nclient = "h1"\n',  # each host's default
])
def test_every_tcp_workload_between_dctcps_two_hosts_must_run_it(tmp_path, other):
    with pytest.raises(SpecError) as info:
        load(tmp_path, other)
    error = info.value
    assert error.field == "workloads[1].cc" and "\n" not in str(error)
    assert "runs dctcp between h1 and h2" in error.message and 'cc = "dctcp"' in error.message


def test_other_pairs_and_other_protocols_keep_their_own(tmp_path):
    extra = ('[[workloads]]\nkind = "bulk"\nfrom = "h1"\nto = "h3"\ncc = "cubic"\n'  # another pair
             '[[workloads]]\nkind = "udp"\nfrom = "h2"\nto = "h1"\nrate = "1mbit"\n'  # not TCP
             '[[workloads]]\nkind = "ping"\nfrom = "h2"\nto = "h1"\n'
             '[[workloads]]\nkind = "web"\nserver = "h2"\nclient = "h1"\ncc = "dctcp"\n')  # dctcp too
    workloads = load(tmp_path, extra).workloads
    assert [getattr(w, "cc", None) for w in workloads] == ["dctcp", "cubic", None, None, "dctcp"]
    # What the network provides before its hosts are built, by the spec's names, once each.
    assert congestion_controls(workloads) == ["dctcp", "cubic"]


def test_a_network_gives_its_hosts_the_kernels_name_for_the_specs(tmp_path):
    topology = load(tmp_path, "").topology
    net = Network(topology, "u1", congestion_controls=["dctcp", "reno"])
    assert net.congestion_control("dctcp") == "dctcp"  # nothing provided yet: the name itself
    net.cc_names = {"dctcp": "bloatlab_dctcp", "reno": "reno"}  # as up() sets it where the kernel has none
    assert [net.congestion_control(cc) for cc in ("dctcp", "reno", "cubic")] == ["bloatlab_dctcp", "reno", "cubic"]


def test_the_bpf_stand_in_is_named_apart_from_the_kernels():
    bpf = congestion.BPF_CCS["dctcp"]
    # The kernel's names hold 15 characters (TCP_CA_NAME_MAX and BPF_OBJ_NAME_LEN, less the NUL).
    assert bpf.kernel_name != "dctcp" and len(bpf.kernel_name) <= 15 and len(bpf.stats_map) <= 15
    source = (Path(__file__).resolve().parents[2] / "bpf" / "bloatlab_dctcp.bpf.c").read_text()
    # The object's own names are these: the congestion control, its struct_ops map, its stats map.
    assert f'.name = "{bpf.kernel_name}"' in source and f"tcp_congestion_ops {bpf.kernel_name} =" in source
    assert f"}} {bpf.stats_map} SEC(\".maps\")" in source


def kernel_has_dctcp() -> bool:
    return congestion.dctcp_support().kernel_module


@pytest.mark.skipif(kernel_has_dctcp(), reason="this kernel has its own dctcp: nothing to stand in for")
def test_dctcp_that_cannot_be_had_is_one_line_naming_the_field_and_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("BLOATLAB_DCTCP_BPF", str(tmp_path / "not-built.bpf.o"))
    support = congestion.dctcp_support()
    assert support.provider is None and support.name is None
    assert "BLOATLAB_DCTCP_BPF" in support.reason and support.summary().startswith("dctcp: unavailable: ")
    with pytest.raises(MachineError) as info:
        congestion.check("dctcp", "workloads[0].cc")
    assert info.value.field == "workloads[0].cc" and "\n" not in str(info.value)
    assert info.value.message.startswith("this kernel has no dctcp, and bloatlab's BPF DCTCP cannot stand in")
    with pytest.raises(MachineError) as info:
        congestion.check("dctcp", "hosts.h1.cc", as_default=True)
    assert info.value.field == "hosts.h1.cc"


def test_other_names_are_the_kernels_alone():
    congestion.check("reno", "workloads[0].cc")  # every kernel has reno
    with pytest.raises(MachineError) as info:
        congestion.check("nosuchcc", "workloads[2].cc")
    assert info.value.field == "workloads[2].cc" and "modprobe tcp_nosuchcc" in info.value.message
    assert congestion.provide(["reno", "cubic", "reno"]) == {"reno": "reno", "cubic": "cubic"}  # nothing to register


def test_the_doctor_line_for_each_way_dctcp_is_had():
    common = dict(cc="dctcp", kernel_module=False, btf=True, struct_ops=True, bpftool="/usr/sbin/bpftool",
                  object="/src/target/bpf/bloatlab_dctcp.bpf.o", registered=False, reason=None)
    bpf = congestion.Support(provider="bpf", name="bloatlab_dctcp", **common)
    assert bpf.summary() == ("dctcp: bloatlab's BPF DCTCP (/src/target/bpf/bloatlab_dctcp.bpf.o), registered as "
                             "bloatlab_dctcp while a run uses it (this kernel has no tcp_dctcp)")
    kernel = congestion.Support(provider="kernel", name="dctcp", **{**common, "kernel_module": True})
    assert kernel.summary() == "dctcp: the kernel's own (tcp_dctcp)"
    assert bpf.to_dict()["provider"] == "bpf" and set(bpf.to_dict()) == set(common) | {"provider", "name"}


def test_a_flow_as_bpftool_prints_the_map():
    # One entry of `bpftool -j map dump id N`: its "formatted" part, as BTF describes it.
    key = {"local_addr": [10, 0, 0, 1], "remote_addr": [10, 0, 0, 2], "local_port": 38868, "remote_port": 5201}
    value = {"alpha": 110, "cwnd": 54, "ssthresh": 49, "fallback": 0, "windows": 261, "marked_windows": 77,
             "cwnd_sum": 13680, "bytes_acked": 19010829, "bytes_marked": 2408024, "reductions": 60, "losses": 0,
             "ce_segments": 0, "ce_changes": 0, "delayed_acks_flushed": 0, "updated_ns": 26188616682313}
    flow = congestion.BpfFlow.from_map(key, value)
    assert (flow.local, flow.remote) == ("10.0.0.1:38868", "10.0.0.2:5201")
    assert flow.alpha == pytest.approx(110 / 1024) and flow.fallback is False
    assert flow.cwnd_sum_pkts / flow.windows == pytest.approx(52.4, abs=0.1)


def test_bpftools_reason_is_its_error_line_else_the_last_it_printed():
    verifier = subprocess.CompletedProcess([], 255, "", "libbpf: prog 'x': BPF program load failed: Permission denied\n"
                                           "0: R1=ctx() R10=fp0\ninvalid access to map value\n"
                                           "Error: failed to load object file\n")
    assert congestion._bpftool_error(verifier) == "Error: failed to load object file"
    assert congestion._bpftool_error(subprocess.CompletedProcess([], 1, "", "only this\n")) == "only this"
    assert congestion._bpftool_error(subprocess.CompletedProcess([], 1, "", "")) == "exit status 1"
