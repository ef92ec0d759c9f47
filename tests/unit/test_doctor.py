"""render() and backend_support() on constructed reports: no root, no probing."""

import re

from bloatlab.lab import doctor
from bloatlab.testbed import capabilities
from bloatlab.version import __version__


def make_report(**overrides):
    """A report shaped like collect()'s: root, namespaces fine, netem missing, ethtool missing."""
    qdiscs = dict.fromkeys(capabilities.QDISC_PROBES, True)
    qdiscs["netem"] = False
    report = {
        "bloatlab": "0.1.0",
        "kernel": "6.1.0-test",
        "python": "3.11.2",
        "root": True,
        "euid": 0,
        "sandbox": {"netns": True, "veth": True, "error": None},
        "tun": True,
        "tracefs": {
            "path": "/sys/kernel/tracing",
            "mounted": True,
            "mounted_by_doctor": True,
            "tcp_probe": True,
            "error": None,
        },
        "qdiscs": qdiscs,
        "qdisc_errors": {},
        "tools": {name: {"path": f"/usr/bin/{name}", "version": f"{name} 1.0"} for name in doctor.TOOLS},
        "binaries": {name: {"path": f"/opt/{name}", "version": __version__, "env": None, "problem": None}
                     for name in ("bloatlab-link", "bloatlab-replay")},
        "congestion_control": {"available": ["reno", "cubic"], "allowed": ["reno", "cubic"], "default": "cubic"},
    }
    report["tools"]["ethtool"] = {"path": None, "version": None}
    report.update(overrides)
    report["datapath"] = report["binaries"]["bloatlab-link"]
    report["backends"] = doctor.backend_support(report)
    return report


def line_for(text, label):
    [line] = [ln for ln in text.splitlines() if re.match(rf"\s+\S+\s+{re.escape(label)}\s", ln + " ")]
    return line


def table_row(text, label):
    [line] = [ln for ln in text.splitlines() if ln.startswith(f"  {label}  ")]
    return line


def test_present_and_missing_lines_with_fixes():
    text = doctor.render(make_report())
    assert line_for(text, "htb").split()[0] == "✓"
    netem = line_for(text, "netem")
    assert netem.split()[0] == "✗"
    assert "modprobe sch_netem / a kernel with CONFIG_NET_SCH_NETEM" in netem
    ethtool = line_for(text, "ethtool")
    assert ethtool.split()[0] == "✗" and "apt-get install ethtool" in ethtool
    assert "iperf3 1.0" in line_for(text, "iperf3")
    assert "mounted it just now" in line_for(text, "tracefs")
    assert "NOT ROOT" not in text


def test_details_start_in_one_column():
    text = doctor.render(make_report())
    columns = {line.index("modprobe") for line in text.splitlines() if "modprobe sch_" in line}
    columns |= {line.index("apt-get") for line in text.splitlines() if "apt-get install" in line}
    assert len(columns) == 1


def test_backend_table_kernel_without_netem():
    report = make_report()
    userspace = report["backends"]["userspace"]
    assert all(ok for feature, ok in userspace.items() if feature != "queue_at_sender")
    assert not userspace["queue_at_sender"]  # bloatlab-link is always between the ends
    kernel = report["backends"]["kernel"]
    assert kernel["queue_at_sender"]
    assert kernel["rate"] and kernel["queue_droptail_packets"] and kernel["queue_drophead"]
    assert not kernel["delay"] and not kernel["jitter"] and not kernel["loss"]
    assert not kernel["trace"]
    text = doctor.render(report)
    assert table_row(text, "delay").split()[1:] == ["✓", "✗", "(needs", "netem)"]
    assert table_row(text, "rate").split()[1:] == ["✓", "✓"]
    assert "no kernel qdisc does this" in text
    assert table_row(text, "queue_at = sender").split()[3:] == \
        ["✗", "✓", "(kernel", "only:", "bloatlab-link", "sits", "between", "the", "ends)"]


def test_rate_needs_htb_as_the_kernel_backend_builds_it():
    qdiscs = dict.fromkeys(capabilities.QDISC_PROBES, False)
    qdiscs["tbf"] = True  # tbf alone is not enough: the kernel backend shapes with htb
    assert not make_report(qdiscs=qdiscs)["backends"]["kernel"]["rate"]
    qdiscs["htb"] = True
    assert make_report(qdiscs=qdiscs)["backends"]["kernel"]["rate"]


def test_jitter_is_never_the_kernels_even_with_netem():
    report = make_report(qdiscs=dict.fromkeys(capabilities.QDISC_PROBES, True))
    assert report["backends"]["kernel"]["delay"] and not report["backends"]["kernel"]["jitter"]
    assert "netem reorders packets under jitter" in table_row(doctor.render(report), "jitter")


def test_doctors_table_says_what_the_kernel_backend_builds():
    # Derived from links.kernel_needs, one sample direction per feature: pinned here so that a
    # change of what the kernel backend builds shows up as a change of doctor's table too.
    assert set(doctor.kernel_support()) == set(doctor.FEATURES)
    assert {feature: needs for feature, (needs, _) in doctor.kernel_support().items()} == {
        "rate": ("htb",), "delay": ("netem",), "jitter": (), "loss": ("netem",),
        "queue_droptail_packets": ("pfifo",), "queue_droptail_bytes": ("bfifo",),
        "queue_drophead": ("pfifo_head_drop",), "queue_codel": ("codel",), "queue_fq_codel": ("fq_codel",),
        "queue_red_bytes": ("red",), "queue_red_packets": (), "queue_pie": ("pie",), "queue_cake": ("cake",),
        "queue_dualpi2": ("dualpi2",),
        "trace": (),
        "queue_at_sender": ("pfifo",),
    }
    why_not = {feature: why for feature, (needs, why) in doctor.kernel_support().items() if not needs}
    assert why_not == {"jitter": "netem reorders packets under jitter",
                       "queue_red_packets": "Linux red counts bytes and this queue is limited in packets",
                       "trace": "no qdisc replays a trace"}
    text = doctor.render(make_report())  # netem missing in the report
    assert "needs netem" in table_row(text, "delay")
    assert "no kernel qdisc does this: Linux red counts bytes" in table_row(text, "queue red (packets)")


def test_userspace_needs_binary(monkeypatch):
    monkeypatch.setenv("BLOATLAB_LINK", "/nowhere/bloatlab-link")
    link = doctor.probe_binary("bloatlab-link")
    report = make_report(binaries={"bloatlab-link": link, "bloatlab-replay": link})
    assert not any(report["backends"]["userspace"].values())
    text = doctor.render(report)
    assert "make build, pip install bloatlab, or set BLOATLAB_LINK" in line_for(text, "bloatlab-link")
    assert "note: BLOATLAB_LINK: /nowhere/bloatlab-link is not an executable file; fix the variable" in text
    assert "missing bloatlab-link" in text


def test_not_root_says_so_and_marks_unknown():
    report = make_report(
        root=False,
        euid=1000,
        tun=None,
        sandbox={"netns": None, "veth": None, "error": "not root"},
        qdiscs=dict.fromkeys(capabilities.QDISC_PROBES),
    )
    assert not any(report["backends"]["kernel"].values())
    text = doctor.render(report)
    assert "NOT ROOT" in text and "need root" in text
    assert line_for(text, "htb").split()[0] == "?"
    assert "needs root" in line_for(text, "network namespaces")


def test_ascii_only_uses_yes_no():
    text = doctor.render(make_report(), ascii_only=True)
    assert "✓" not in text and "✗" not in text
    assert line_for(text, "htb").split()[0] == "yes"
    assert line_for(text, "netem").split()[0] == "no"


def test_probe_binary_prefers_env_and_checks_its_version(tmp_path, monkeypatch):
    binary = tmp_path / "bloatlab-link"
    binary.write_text(f"#!/bin/sh\necho bloatlab-link {__version__}\n")
    binary.chmod(0o755)
    monkeypatch.setenv("BLOATLAB_LINK", str(binary))
    assert doctor.probe_binary("bloatlab-link") == {"path": str(binary), "version": __version__,
                                                     "env": str(binary), "problem": None}
    binary.write_text("#!/bin/sh\necho bloatlab-link 0.0.1\n")  # another version: found, and refused
    found = doctor.probe_binary("bloatlab-link")
    assert found["version"] == "0.0.1" and f"this bloatlab is {__version__}" in found["problem"]
    report = make_report(binaries={"bloatlab-link": found, "bloatlab-replay": found})
    assert not any(report["backends"]["userspace"].values())
    assert line_for(doctor.render(report), "bloatlab-link").split()[0] == "✗"
    binary.chmod(0o644)  # not executable: none, and doctor says why
    found = doctor.probe_binary("bloatlab-link")
    assert found["path"] is None and "BLOATLAB_LINK" in found["problem"]


def test_backend_table_has_the_queue_disciplines_per_probed_qdisc():
    qdiscs = dict.fromkeys(capabilities.QDISC_PROBES, True)
    qdiscs.update(codel=False, pie=False, cake=False)
    report = make_report(qdiscs=qdiscs)
    userspace, kernel = report["backends"]["userspace"], report["backends"]["kernel"]
    aqm = ["queue_codel", "queue_fq_codel", "queue_red_bytes", "queue_red_packets", "queue_pie", "queue_cake"]
    assert all(userspace[feature] for feature in aqm)
    assert {feature: kernel[feature] for feature in aqm} == {
        "queue_codel": False, "queue_fq_codel": True, "queue_red_bytes": True, "queue_red_packets": False,
        "queue_pie": False, "queue_cake": False}
    assert table_row(doctor.render(report), "queue cake").split()[2:] == ["✓", "✗", "(needs", "cake)"]
    text = doctor.render(report)
    assert table_row(text, "queue codel").split()[2:] == ["✓", "✗", "(needs", "codel)"]
    assert table_row(text, "queue fq_codel").split()[2:] == ["✓", "✓"]
    assert table_row(text, "queue red (bytes)").split()[3:] == ["✓", "✓"]
    assert "no kernel qdisc does this" in table_row(text, "queue red (packets)")


def test_the_simulation_section_says_what_the_ns3_backend_lacks():
    text = doctor.render(make_report(simulation={"ns3": None, "compiler": None, "driver": None, "problem": "x"}))
    assert "pip install 'bloatlab[sim]'" in line_for(text, "ns3 wheel")
    text = doctor.render(make_report(simulation={"ns3": "3.44.post0", "compiler": None, "driver": None,
                                                 "problem": "needs a C++ compiler"}))
    assert line_for(text, "ns3 wheel").split()[0] == "✓" and "apt-get install g++" in line_for(text, "C++ compiler")
    text = doctor.render(make_report(simulation={"ns3": "3.44.post0", "compiler": "/usr/bin/g++", "driver": None,
                                                 "problem": None}))
    assert "built on the first simulated run" in line_for(text, "driver")


def test_problems_are_what_stops_an_emulated_run_each_with_its_fix():
    assert doctor.problems(make_report()) == []  # ethtool is missing, but no run starts it
    report = make_report(root=False, euid=1000)
    report["tools"]["irtt"] = {"path": None, "version": None}
    report["tools"]["tc"] = {"path": None, "version": None}
    report["datapath"] = {"path": None, "version": None, "env": None, "problem": None}
    assert doctor.problems(report) == [
        "not root (euid 1000); run bloatlab as root",
        "bloatlab-link unusable: not found; make setup builds it",
        "irtt, tc not installed; apt-get install irtt iproute2"]


def test_the_calibration_section_says_what_calibrate_lacks():
    text = doctor.render(make_report(calibration={"optuna": None, "tomli_w": "1.2.0"}))
    assert "pip install 'bloatlab[calibrate]'" in text and "tomli-w" in text and "1.2.0" in text
    assert "Calibration" in doctor.render(make_report())  # a report without the section still renders it
