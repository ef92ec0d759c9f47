"""Experiment specs: presets load, parameters substitute with their types, --set is checked
against the parameter's type, and every invalid spec gives a one-line error on the right field
(also through the CLI, with exit status 2)."""

import subprocess
import sys
from pathlib import Path

import pytest

from bloatlab.errors import SpecError
from bloatlab.specs.experiment import Source, list_presets, load_experiment, load_preset, preset_info
from bloatlab.specs.model import Bulk, Ping, Web

SPEC = """
duration = "{duration}"
[params]
duration = { default = "20s", type = "duration" }
rate = { default = "10mbit", type = "rate", help = "bottleneck" }
maxq = { default = 100, type = "int", min = 1 }
[topology.hosts.h1]
[topology.hosts.h2]
[[topology.links]]
ends = ["h1", "h2"]
rate = "{rate}"
delay = "5ms"
queue = { packets = "{maxq}" }
[[workloads]]
kind = "bulk"
from = "h1"
to = "h2"
cc = "reno"
[[workloads]]
kind = "ping"
from = "h1"
to = "h2"
interval = "10ms"
"""


def load(tmp_path: Path, text: str = SPEC, sets=()):
    path = tmp_path / "exp.toml"
    path.write_text(text)
    return load_experiment(path, list(sets))


def error_of(tmp_path: Path, text: str, sets=()) -> SpecError:
    with pytest.raises(SpecError) as info:
        load(tmp_path, text, sets)
    assert "\n" not in str(info.value)
    return info.value


def test_every_preset_loads_and_validates():
    names = [name for name, _ in list_presets()]
    assert "cs244" in names
    for name in names:
        experiment = load_preset(name)
        assert experiment.workloads and experiment.duration_ns > 0
        description, params = preset_info(name)
        assert description and all(p.help for p in params)
        for p in params:  # every swept value is a valid one
            for value in p.sweep or ():
                assert load_preset(name, [f"{p.name}={value}"]).params[p.name] == value


def test_seed_presets_and_their_axes():
    names = {name for name, _ in list_presets()}
    assert {"cs244", "qlen-sweep", "aqm", "webpage-under-load", "fetch-times", "txqueuelen"} <= names
    sweeps = {name: {p.name: p.sweep for p in preset_info(name)[1] if p.sweep} for name in names}
    assert sweeps["qlen-sweep"] == {"maxq": (100, 80, 60, 40, 20)}
    assert sweeps["fetch-times"] == {"maxq": (20, 100)}
    assert sweeps["webpage-under-load"] == {"load": ("off", "on"), "maxq": (100, 20)}
    assert sweeps["txqueuelen"] == {"txqueuelen": (1, 10, 100, 1000, 10000, 100000)}
    assert load_preset("txqueuelen").repeat == 5 and load_preset("qlen-sweep").repeat == 5
    # load=off drops the competing flow; the fetches and pings stay.
    assert [w.kind for w in load_preset("webpage-under-load", ["load=off"]).workloads] == ["ping", "web"]
    # txqueuelen: the sender's own interface queue is a kernel pfifo of txqueuelen packets.
    nic = load_preset("txqueuelen", ["txqueuelen=10000"]).topology.links[0]
    assert nic.backend == "kernel" and nic.forward.queue.packets == 10000
    # Repetitions draw different seeds.
    assert load_preset("cs244", rep=3).seed == load_preset("cs244").seed + 2


def test_cs244_preset_is_the_original_experiment():
    exp = load_preset("cs244")
    assert exp.duration_s == 60
    h1_s0, s0_h2 = exp.topology.links
    assert h1_s0.forward.rate_bps == 10**9 and s0_h2.forward.rate_bps == 10**7
    assert all(d.delay_ns == 5 * 10**6 for link in exp.topology.links for d in (link.forward, link.reverse))
    assert s0_h2.forward.queue.packets == 100 and s0_h2.forward.queue.discipline == "droptail"
    kinds = {w.kind: w for w in exp.workloads}
    assert isinstance(kinds["bulk"], Bulk) and kinds["bulk"].cc == "reno"
    assert isinstance(kinds["ping"], Ping) and kinds["ping"].interval_ns == 100 * 10**6
    web = kinds["web"]
    assert isinstance(web, Web) and (web.count, web.every_ns, web.server, web.client) == (3, 5 * 10**9, "h1", "h2")
    assert exp.probes.queue == ("s0->h2",)


def test_set_changes_typed_parameters():
    exp = load_preset("cs244", ["maxq=20", "bw_net=1.5mbit", "duration=15s", "cc=cubic"])
    assert exp.topology.links[1].forward.queue.packets == 20  # an int, not "20"
    assert exp.topology.links[1].forward.rate_bps == 1_500_000
    assert exp.duration_ns == 15 * 10**9
    assert exp.workloads[0].stop_ns == 15 * 10**9 and exp.workloads[0].cc == "cubic"
    assert exp.params["maxq"] == 20


def test_defaults_and_names(tmp_path):
    exp = load(tmp_path)
    bulk, ping = exp.workloads
    assert (bulk.name, ping.name) == ("bulk", "ping")
    assert (bulk.start_ns, bulk.stop_ns) == (0, 20 * 10**9)
    assert exp.probes.tcp == "auto" and exp.probes.queue == ("h1->h2", "h2->h1")  # the lowest rate
    twice = SPEC + '[[workloads]]\nkind = "ping"\nfrom = "h2"\nto = "h1"\n'
    assert [w.name for w in load(tmp_path, twice).workloads] == ["bulk", "ping1", "ping2"]


@pytest.mark.parametrize("change, field", [
    (("duration = \"{duration}\"", ""), "duration"),                                # missing duration
    (("cc = \"reno\"", "cc = \"reno\"\ncolour = 1"), "workloads[0].colour"),         # unknown field
    (("kind = \"bulk\"", "kind = \"bulkk\""), "workloads[0].kind"),                  # unknown kind
    (("to = \"h2\"\ncc", "to = \"h9\"\ncc"), "workloads[0].to"),                     # unknown host
    (("rate = \"{rate}\"", "rate = \"-5mbit\""), "topology.links[0].rate"),           # negative rate
    (("delay = \"5ms\"", "delay = \"5 parsecs\""), "topology.links[0].delay"),       # bad unit
    (("interval = \"10ms\"", "interval = \"5ms\""), "workloads[1].interval"),        # below 10 ms
    (("kind = \"ping\"", "kind = \"ping\"\nname = \"bulk\""), "workloads[1].name"),  # duplicate name
    (("[topology.hosts.h2]", "[topology.hosts.h2]\n[topology.switches.h2]"), "topology.switches.h2"),
    (("cc = \"reno\"", "cc = \"reno\"\nstop = \"30s\""), "workloads[0].stop"),      # after the end
    (("cc = \"reno\"", "cc = \"reno\"\nstop = \"2.5s\""), "workloads[0].stop"),     # iperf3: whole s
    (("rate = \"{rate}\"", "rate = \"{rte}\""), "topology.links[0].rate"),           # unknown placeholder
    (("maxq = { default = 100", "maxq = { default = \"x\""), "params.maxq.default"),
    (("maxq = { default = 100", "maxq = { label = 3, default = 100"), "params.maxq.label"),
    (("maxq = { default = 100", "maxq = { tag = \"yes\", default = 100"), "params.maxq.tag"),
])
def test_invalid_specs_name_the_field(tmp_path, change, field):
    old, new = change
    assert old in SPEC
    assert error_of(tmp_path, SPEC.replace(old, new, 1)).field == field


@pytest.mark.parametrize("sets, field", [
    (["rat=1mbit"], "--set rat"),
    (["rate=-1mbit"], "--set rate"),
    (["rate=fast"], "--set rate"),
    (["maxq=0"], "--set maxq"),
    (["maxq=1.5"], "--set maxq"),
    (["maxq"], "--set"),
    (["duration=10"], "--set duration"),
])
def test_bad_sets_name_the_parameter(tmp_path, sets, field):
    assert error_of(tmp_path, SPEC, sets).field == field


def test_unknown_preset_suggests_one():
    with pytest.raises(SpecError, match="did you mean cs244"):
        load_preset("cs24")


@pytest.mark.parametrize("argv, needle", [
    (["run", "--preset", "cs244", "--set", "colour=red"], "--set colour: unknown parameter"),
    (["run", "--preset", "nope"], "--preset: no preset"),
    (["run"], "give a spec file or --preset"),
    (["run", "/nonexistent.toml"], "/nonexistent.toml: no such file"),
    (["run", "--preset", "cs244", "--sweep", "maxq"], "--sweep: 'maxq' is not NAME=V1,V2"),
    (["run", "--preset", "cs244", "--sweep", "maxq=20,,100"], "--sweep: 'maxq=20,,100' is not NAME=V1,V2"),
    (["run", "--preset", "cs244", "--sweep", "mxq=20,100"], "--sweep mxq: unknown parameter 'mxq'; did you mean maxq?"),
    (["run", "--preset", "cs244", "--sweep", "maxq=20,-1"], "--sweep maxq: -1 is below the minimum"),
    (["run", "--preset", "cs244", "--sweep", "maxq=20,020"], "--sweep maxq: 20,020 names a value twice"),
    (["run", "--preset", "cs244", "--sweep", "maxq=20,20"], "--sweep maxq: '20,20' lists a value twice"),
    (["run", "--preset", "cs244", "--sweep", "maxq=20", "--sweep", "maxq=100"], "--sweep maxq: maxq is swept twice"),
    (["run", "--preset", "cs244", "--set", "maxq=20", "--sweep", "maxq=100"], "--sweep maxq: maxq is both --set and swept"),
    (["run", "--preset", "cs244", "--repeat", "0"], "give --repeat a whole number from 1 to 1000"),
    (["run", "--preset", "cs244", "--resume"], "--resume needs --out DIR"),
    (["run", "--preset", "cs244", "--pcap", "s0->h3"], '--pcap: "s0->h3" is no link direction; the directions are h1->s0'),
])
def test_cli_errors_are_one_line_with_status_2(argv, needle):
    proc = subprocess.run([sys.executable, "-m", "bloatlab", *argv], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr


def test_a_workload_takes_its_sending_hosts_congestion_control(tmp_path):
    spec = tmp_path / "cc.toml"
    spec.write_text('name = "cc"\nduration = "2s"\n[topology]\ncc = "reno"\n[topology.hosts.h1]\n'
                    '[topology.hosts.h2]\ncc = "bbr"\n[[topology.links]]\nends = ["h1", "h2"]\n'
                    '[[workloads]]\nkind = "bulk"\nfrom = "h1"\nto = "h2"\n'
                    '[[workloads]]\nkind = "bulk"\nfrom = "h2"\nto = "h1"\n'
                    '[[workloads]]\nkind = "bulk"\nfrom = "h1"\nto = "h2"\ncc = "cubic"\n'
                    '[[workloads]]\nkind = "web"\nserver = "h2"\nclient = "h1"\n')
    ccs = [w.cc for w in load_experiment(spec).workloads]
    assert ccs == ["reno", "bbr", "cubic", "bbr"]  # the host's, unless the workload names its own
    spec.write_text(spec.read_text().replace('cc = "reno"\n', "").replace('cc = "bbr"\n', ""))
    assert [w.cc for w in load_experiment(spec).workloads] == ["cubic"] * 4  # no host names one


def test_dscp_marks_by_name_or_number(tmp_path):
    text = SPEC.replace('cc = "reno"', 'cc = "reno"\ndscp = "ef"').replace('interval = "10ms"', 'interval = "10ms"\ndscp = 10')
    bulk, ping = load(tmp_path, text).workloads
    assert (bulk.dscp, ping.dscp) == (46, 10)
    for bad in ('"EX"', "64", "-1", "true", '"46"'):
        error = error_of(tmp_path, SPEC.replace('cc = "reno"', f'cc = "reno"\ndscp = {bad}'))
        assert error.field == "workloads[0].dscp" and "0-63" in error.message


def test_an_irtt_probe_and_its_bounds(tmp_path):
    probe = SPEC + '[[workloads]]\nkind = "irtt"\nfrom = "h1"\nto = "h2"\ndscp = "CS5"\ninterval = "{i}"\n'
    irtt = load(tmp_path, probe.replace("{i}", "20ms")).workloads[2]
    assert (irtt.kind, irtt.src, irtt.dst, irtt.interval_ns, irtt.dscp) == ("irtt", "h1", "h2", 20 * 10**6, 40)
    assert error_of(tmp_path, probe.replace("{i}", "100us")).field == "workloads[2].interval"
    assert error_of(tmp_path, probe.replace("{i}", "15s")).field == "workloads[2].interval"


def test_a_stop_before_the_end(tmp_path):
    text = SPEC.replace('cc = "reno"', 'cc = "reno"\nstart = "5s"\nstop = "-5s"')
    bulk = load(tmp_path, text).workloads[0]
    assert (bulk.start_ns, bulk.stop_ns) == (5 * 10**9, 15 * 10**9)
    assert load(tmp_path, text, ["duration=30s"]).workloads[0].stop_ns == 25 * 10**9
    assert error_of(tmp_path, text.replace('"-5s"', '"-20s"')).field == "workloads[0].stop"
    assert error_of(tmp_path, text.replace('"-5s"', '"-15s"')).field == "workloads[0].start"


def test_one_responsiveness_test_per_run_and_its_cc_owns_its_route(tmp_path):
    test = '[[workloads]]\nkind = "responsiveness"\nserver = "h2"\nclient = "h1"\ncc = "bbr"\n'
    assert error_of(tmp_path, SPEC + test + test.replace("bbr", "reno")).field == "workloads[3].kind"
    reverse = SPEC.replace('from = "h1"\nto = "h2"\ncc = "reno"', 'from = "h2"\nto = "h1"\ncc = "reno"')
    assert error_of(tmp_path, reverse + test).field == "workloads[0].cc"
    assert load(tmp_path, reverse + test.replace("bbr", "reno")).workloads[2].cc == "reno"


def test_errors_name_a_workload_by_its_place_in_the_spec_disabled_ones_too(tmp_path):
    off = '[[workloads]]\nkind = "ping"\nfrom = "h1"\nto = "h2"\nenabled = false\n'
    text = SPEC.replace("[[workloads]]", off + "[[workloads]]", 1)
    reverse = text.replace('from = "h1"\nto = "h2"\ncc = "reno"', 'from = "h2"\nto = "h1"\ncc = "reno"')
    test = '[[workloads]]\nkind = "responsiveness"\nserver = "h2"\nclient = "h1"\ncc = "bbr"\n'
    assert error_of(tmp_path, reverse + test).field == "workloads[1].cc"
    assert [w.index for w in load(tmp_path, text).workloads] == [1, 2]


def test_captures_are_link_directions_with_a_snap_length_and_a_limit(tmp_path):
    exp = load(tmp_path, SPEC + '[probes]\npcap = ["h2->h1", "h1->h2", "h2->h1"]\npcap_snaplen = 1514\npcap_limit = "1mib"\n')
    assert (exp.probes.pcap, exp.probes.pcap_snaplen, exp.probes.pcap_limit_bytes) == (("h2->h1", "h1->h2"), 1514, 2**20)
    assert exp.to_dict()["probes"]["pcap"] == ["h2->h1", "h1->h2"]
    default = load(tmp_path)
    assert (default.probes.pcap, default.probes.pcap_snaplen, default.probes.pcap_limit_bytes) == ((), 128, 100_000_000)
    from_cli = Source(path=tmp_path / "exp.toml", pcap=("h1->h2",)).load()
    assert from_cli.probes.pcap == ("h1->h2",)


@pytest.mark.parametrize("probes, field, needle", [
    ('pcap = "h1->h2"', "probes.pcap", 'must be a list of link directions, e.g. pcap = ["s0->h2"]'),
    ('pcap = ["h1->h3"]', "probes.pcap[0]", '"h1->h3" is no link direction; the directions are h1->h2, h2->h1'),
    ("pcap_snaplen = 13", "probes.pcap_snaplen", "write a whole number of bytes from 14 to 262144"),
    ("pcap_snaplen = 262145", "probes.pcap_snaplen", "write a whole number of bytes from 14 to 262144"),
    ('pcap_snaplen = "128b"', "probes.pcap_snaplen", "is not a snap length"),
    ('pcap_limit = "4kb"', "probes.pcap_limit", 'too small to hold a packet; write at least "4kib"'),
    ("pcap_limit = -1", "probes.pcap_limit", "is not a positive size"),
    ("pcap_size = 1", "probes.pcap_size", "unknown"),
])
def test_bad_captures_name_their_field(tmp_path, probes, field, needle):
    error = error_of(tmp_path, SPEC + f"[probes]\n{probes}\n")
    assert error.field == field and needle in error.message, (error.field, error.message)


def test_a_dscp_parameter_takes_names_and_codepoints_and_names_itself_when_wrong():
    marks = {w.name: w.dscp for w in load_preset("rrul", ["mark_ef=34", "mark_cs5=be"]).workloads if isinstance(w, Bulk)}
    assert marks["up_ef"] == 34 and marks["down_cs5"] == 0 and marks["up_bk"] == 8
    for bad in ("XX", "64", "-1"):
        with pytest.raises(SpecError) as error:
            load_preset("rrul", [f"mark_ef={bad}"])
        assert error.value.field == "--set mark_ef" and "is not a DSCP" in error.value.message, bad


def test_a_default_run_directory_is_named_by_the_tagged_parameters():
    from pathlib import Path

    from bloatlab.lab.outcome import default_out

    # cs244 tags maxq and cc (and so aqm where a preset has it), as before tags were declared.
    out = default_out(load_preset("cs244", ["maxq=20"]), Path("r"))
    assert out.name.startswith("cs244-maxq20-ccreno-")
    assert default_out(load_preset("aqm", ["aqm=codel"]), Path("r")).name.startswith("aqm-aqmcodel-maxq1000-ccreno-")
