"""collect() on this machine: real namespaces, veths and tc."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bloatlab.lab import doctor
from bloatlab.testbed import capabilities

pytestmark = [pytest.mark.netns,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")]


def doctor_namespaces():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line.startswith("bloatlab-doctor")]


def test_collect_probes_namespaces_and_qdiscs():
    started = time.monotonic()
    report = doctor.collect()
    elapsed_s = time.monotonic() - started
    assert report["root"]
    assert report["sandbox"] == {"netns": True, "veth": True, "error": None}
    # Any Linux with CONFIG_NET_SCHED has these; the kernel backend builds on them.
    assert report["qdiscs"]["htb"] and report["qdiscs"]["pfifo"] and report["qdiscs"]["bfifo"]
    assert report["backends"]["kernel"]["rate"]
    assert not report["backends"]["kernel"]["trace"]
    assert doctor_namespaces() == []
    json.dumps(report)  # JSON-ready, for `bloatlab doctor --json`
    # The brief is < 2 s; a loaded 2-core CI box gets some slack before this calls it a hang.
    assert elapsed_s < 5, f"collect() took {elapsed_s:.1f} s"


def test_kernel_qdiscs_matches_collect_and_is_cached(monkeypatch):
    htb = capabilities.kernel_qdiscs(["htb", "no-such-kind"])  # what a run asks: its links' kinds
    qdiscs = capabilities.kernel_qdiscs()
    assert htb == {"htb": qdiscs["htb"]}
    assert qdiscs == {kind: bool(v) for kind, v in doctor.collect()["qdiscs"].items()}
    assert doctor_namespaces() == []

    def probe_again(*args):
        raise AssertionError("probed a kind twice")

    monkeypatch.setattr(capabilities, "probe_sandbox", probe_again)
    assert capabilities.kernel_qdiscs() == qdiscs
    assert capabilities.kernel_qdiscs(["codel", "tbf"]) == {"codel": qdiscs["codel"], "tbf": qdiscs["tbf"]}


def test_rendered_report_lists_every_qdisc():
    text = doctor.render(doctor.collect())
    for kind in capabilities.QDISC_PROBES:
        assert any(line.split()[1:2] == [kind] for line in text.splitlines()), kind


def test_mounts_tracefs_when_missing():
    # Unmount tracefs only inside a private mount namespace: the host's mount is untouched.
    src = Path(doctor.__file__).resolve().parents[2]
    script = ("umount /sys/kernel/tracing 2>/dev/null || exit 77; "
              "grep -q ' /sys/kernel/tracing tracefs ' /proc/self/mounts && exit 77; "
              f"exec {sys.executable} -c 'import json; from bloatlab.lab import doctor; "
              "print(json.dumps(doctor._probe_tracefs(True)))'")
    run = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                         capture_output=True, text=True, timeout=30,
                         env={**os.environ, "PYTHONPATH": str(src)})
    if run.returncode == 77:
        pytest.skip("tracefs is not mounted at /sys/kernel/tracing here, or cannot be unmounted")
    assert run.returncode == 0, run.stderr
    tracefs = json.loads(run.stdout)
    assert tracefs["mounted"] and tracefs["mounted_by_doctor"], tracefs
