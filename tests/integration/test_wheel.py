"""The package as pip gives it: `pip wheel .`, then the wheel installed into a fresh venv in a
temporary directory, and bloatlab run from there, far from the checkout: it must find its Rust
binaries in the package, not in target/release."""

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest

from bloatlab.version import __version__

REPO = Path(__file__).resolve().parents[2]
# Root for the whole module: its last test runs in namespaces, and the venv its fixture builds is
# better built once, in make test's namespace pass, than once in each.
pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the venv's bloatlab command, a working directory outside the checkout, its environment)."""
    tmp = tmp_path_factory.mktemp("wheel")
    assert not tmp.resolve().is_relative_to(REPO)
    cargo = shutil.which("cargo") or str(Path.home() / ".cargo" / "bin" / "cargo")
    assert Path(cargo).exists(), "the wheel's build needs cargo (make build finds it)"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "BLOATLAB_LINK", "BLOATLAB_REPLAY", "BLOATLAB_DCTCP_BPF", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join([str(Path(cargo).parent), "/usr/local/sbin", "/usr/local/bin", "/usr/sbin",
                                   "/usr/bin", "/sbin", "/bin"])
    # The release binaries make build left are the wheel's to take: cargo finds them fresh (16 s of a
    # rebuild from nothing saved), and the wheel must still carry and find them.
    env["CARGO_TARGET_DIR"] = str(REPO / "target")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "--disable-pip-version-check",
                            "-w", str(tmp / "dist"), str(REPO)], capture_output=True, text=True, env=env,
                           timeout=900)
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = (tmp / "dist").glob("bloatlab-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {"bloatlab/_bin/bloatlab-link", "bloatlab/_bin/bloatlab-replay"} <= set(names), names
    # The BPF DCTCP where this machine builds it (make packages gives it what that takes), and
    # nothing of its build beside it.
    assert ("bloatlab/_bin/bloatlab_dctcp.bpf.o" in names) == builds_bpf(), (builds_bpf(), names)
    assert not [n for n in names if n.endswith("vmlinux.h")], names
    # The live page with its charting library, and the reports' stylesheet it shares: no network needed.
    assert {"bloatlab/live/static/index.html", "bloatlab/live/static/live.js", "bloatlab/live/static/uPlot.iife.min.js",
            "bloatlab/live/static/LICENSE.uPlot", "bloatlab/analysis/page.css"} <= set(names), names
    base = Path(sys.base_prefix) / "bin" / "python3"  # a python with no venv of ours around it
    # The venv without a pip of its own (ensurepip's 6 s): this pip installs into it. And no
    # byte-compiling of numpy's, pandas' and matplotlib's every module (15 of the install's 25 s),
    # which is nothing the wheel is tested for.
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(tmp / "venv")], check=True, timeout=120)
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(tmp / "venv" / "bin" / "python"), "install", "-q",
                          "--no-compile", "--disable-pip-version-check", str(wheel)], capture_output=True, text=True, env=env, timeout=900)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    work = tmp / "work"
    work.mkdir()
    return tmp / "venv" / "bin" / "bloatlab", work, env


def builds_bpf() -> bool:
    """Whether bpf/build.sh can build the BPF DCTCP here: BTF, clang, bpftool, libbpf's headers."""
    bpftool = shutil.which("bpftool") or next((p for p in ("/usr/sbin/bpftool", "/sbin/bpftool") if Path(p).exists()), None)
    return (os.access("/sys/kernel/btf/vmlinux", os.R_OK) and shutil.which("clang") is not None and bpftool is not None
            and Path("/usr/include/bpf/bpf_helpers.h").exists())


def bloatlab(installed, *args, timeout=120):
    command, work, env = installed
    return subprocess.run([str(command), *args], cwd=work, env=env, capture_output=True, text=True, timeout=timeout)


def test_version_finds_the_binaries_in_the_package(installed):
    done = bloatlab(installed, "--version")
    assert done.returncode == 0, done.stderr
    package = installed[0].parents[1] / "lib"
    lines = done.stdout.splitlines()
    assert lines[0] == f"bloatlab {__version__}"
    for line, name in zip(lines[1:], ("bloatlab-link", "bloatlab-replay")):
        word, version, path = line.split()
        assert (word, version) == (name, __version__)
        assert Path(path).is_relative_to(package) and Path(path).parent.name == "_bin", line


def test_doctor_json_from_the_wheel(installed):
    done = bloatlab(installed, "doctor", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["bloatlab"] == __version__
    for binary in report["binaries"].values():
        assert binary["problem"] is None and binary["version"] == __version__
        assert "/_bin/" in binary["path"] and not Path(binary["path"]).is_relative_to(REPO)
    assert report["backends"]["userspace"]["queue_codel"]
    dctcp = report["congestion_control"]["dctcp"]
    if builds_bpf() and not dctcp["kernel_module"]:  # the package's own object stands in
        assert dctcp["provider"] == "bpf" and "/_bin/" in dctcp["object"], dctcp
        assert not Path(dctcp["object"]).is_relative_to(REPO), dctcp


def test_replay_from_the_wheel(installed):
    out = installed[1] / "replay"
    done = bloatlab(installed, "replay", "--queue", "discipline=codel,packets=1000", "--rate", "10mbit",
                    "--synthetic", "poisson", "--load", "1.2", "--packets", "20000", "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)["summary"]
    assert summary["packets"] == 20000 and summary["version"] == __version__
    assert summary["departed"] + summary["dropped_total"] == 20000 and summary["dropped_total"] > 0


def test_a_run_from_the_wheel(installed):
    # Its flow DCTCP where the wheel carries the BPF one (or the kernel has its own): a pip
    # install runs cc = "dctcp" with nothing built by hand. 100 packets of queue: DCTCP has no
    # HyStart, and would slow-start into a default 1000 (1.2 s, undelivered at the run's end).
    kernel = "dctcp" in Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    cc = "dctcp" if builds_bpf() or kernel else "cubic"
    spec = installed[1] / "tiny.toml"
    spec.write_text('name = "tiny"\nduration = "3s"\n[topology.hosts.h1]\n[topology.hosts.h2]\n'
                    '[[topology.links]]\nends = ["h1", "h2"]\nrate = "10mbit"\ndelay = "5ms"\n'
                    f'backend = "userspace"\nqueue = {{ packets = 100 }}\n[[workloads]]\nkind = "bulk"\nfrom = "h1"\nto = "h2"\nstart = "1s"\ncc = "{cc}"\n'
                    '[[workloads]]\nkind = "ping"\nfrom = "h1"\nto = "h2"\ninterval = "100ms"\n')
    done = bloatlab(installed, "run", str(spec), "--out", str(installed[1] / "run"), "--json", "-q")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["complete"] and 8 < doc["summary"]["flows"]["bulk"]["goodput_mbps"] < 10
    assert doc["summary"]["flows"]["bulk"]["cc"] == cc
    assert doc["summary"]["rtt_ms"]["min"] == pytest.approx(10, abs=1.5)  # before the flow: 2 x 5 ms
    # Its live page from the package, with nothing fetched from anywhere else.
    view = subprocess.Popen([str(installed[0]), "view", str(installed[1] / "run")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=installed[2])
    try:
        url = view.stdout.readline().removeprefix("bloatlab view: ").strip()
        for path in ("", "static/live.js", "static/uPlot.iife.min.js", "static/page.css", "files/summary.json"):
            with urllib.request.urlopen(url + path, timeout=10) as response:
                assert response.status == 200 and response.read(), path
    finally:
        view.send_signal(signal.SIGINT)
        assert view.wait(timeout=30) == 0, view.stderr.read()
