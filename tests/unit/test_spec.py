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


# A bulk workload's count ------------------------------------------------------------------------

COUNTED = SPEC.replace('cc = "reno"', 'cc = "reno"\nname = "load"\ncount = 3')


def test_a_count_makes_separate_flows_named_after_their_table(tmp_path):
    import json

    from bloatlab.experiment.record import RunRecord
    from bloatlab.results.writer import record_from_document, run_document
    from bloatlab.sim.scenario import scenario

    exp = load(tmp_path, COUNTED)
    *flows, ping = exp.workloads
    assert [f.name for f in flows] == ["load-1", "load-2", "load-3"] and ping.name == "ping"
    # Each an ordinary bulk workload, as the table says, with the table's place and name.
    assert all(isinstance(f, Bulk) and (f.src, f.dst, f.cc, f.index, f.group) == ("h1", "h2", "reno", 0, "load")
               for f in flows)
    # run.json: each its own flow (its port, its codepoint), the spec's record giving the group back.
    record = RunRecord(exp, backends=["userspace"], ports={w.name: 5201 + i for i, w in enumerate(exp.workloads)})
    doc = json.loads(json.dumps(run_document(record)))
    assert {name: flow["port"] for name, flow in doc["flows"].items()} == {"load-1": 5201, "load-2": 5202,
                                                                           "load-3": 5203}
    assert [w.get("group") for w in doc["spec"]["workloads"]] == ["load", "load", "load", None]
    assert record_from_document(doc).experiment == exp
    # ns-3 sees three bulk flows.
    lines = scenario(exp, tmp_path, record.ports).splitlines()
    assert [line.split()[1] for line in lines if line.startswith("bulk ")] == ["load-1", "load-2", "load-3"]
    # A count of 1 is the table's one flow, under its own name, and run.json as before counts.
    one = load(tmp_path, COUNTED.replace("count = 3", "count = 1"))
    assert one.workloads[0].name == "load" and one.workloads[0].group is None
    assert "group" not in one.to_dict()["workloads"][0]
    # Unnamed, a counted table's flows are its kind's: bulk-1, bulk-2.
    unnamed = load(tmp_path, SPEC.replace('cc = "reno"', 'cc = "reno"\ncount = 2'))
    assert [w.name for w in unnamed.workloads] == ["bulk-1", "bulk-2", "ping"]


@pytest.mark.parametrize("change, field, needle", [
    (("count = 3", "count = 0"), "workloads[0].count", "0 is not a flow count; write a whole number from 1 to 64"),
    (("count = 3", "count = 65"), "workloads[0].count", "from 1 to 64"),
    (("count = 3", 'count = "3"'), "workloads[0].count", '"3" is not a flow count'),
    (("count = 3", "count = 2.0"), "workloads[0].count", "is not a flow count"),
    (("count = 3", "count = true"), "workloads[0].count", "is not a flow count"),
    # A flow's name must still be a name: NAME-64 takes three characters of the 31.
    (('name = "load"', f'name = "{"l" * 30}"'), "workloads[0].name",
     f'"{"l" * 30}" is too long for count = 3: its flows are named {"l" * 30}-1 to {"l" * 30}-3'),
    # The flows' names are as distinct as the tables' are, whichever comes first.
    (('kind = "ping"', 'kind = "ping"\nname = "load-2"'), "workloads[1].name",
     '"load-2" already names a flow of load (workloads[0], count = 3); give each a distinct name'),
    # A counted table's name is its flows' group: no other table or flow takes it.
    (('name = "load"', 'name = "load"\n[[workloads]]\nkind = "bulk"\nname = "load"\nfrom = "h1"\nto = "h2"'),
     "workloads[1].name", '"load" already names an earlier workload'),
    (('kind = "ping"', 'kind = "ping"\nname = "load"'), "workloads[1].name", '"load" already names an earlier workload'),
    # Only bulk workloads repeat; a web workload's count is its fetches per round.
    (('interval = "10ms"', 'interval = "10ms"\ncount = 2'), "workloads[1].count",
     "a ping workload takes no count (count = N makes N flows of a bulk workload); write a [[workloads]] table "
     "for each ping"),
    (('kind = "bulk"', 'kind = "udp"\nrate = "1mbit"'), "workloads[0].count", "a udp workload takes no count"),
])
def test_bad_counts_name_their_field_and_the_fix(tmp_path, change, field, needle):
    error = error_of(tmp_path, COUNTED.replace(*change))
    assert error.field == field and needle in error.message, (error.field, error.message)


def test_a_flow_named_as_a_counted_tables_flow_is_refused_even_before_it(tmp_path):
    first = SPEC.replace('cc = "reno"', 'cc = "reno"\nname = "load-2"')
    error = error_of(tmp_path, first + '[[workloads]]\nkind = "bulk"\nname = "load"\nfrom = "h1"\nto = "h2"\ncount = 2\n')
    assert error.field == "workloads[2].name" and error.message == (
        '"load-2" already names an earlier workload; give each a distinct name (this workload\'s count names its '
        "flows load-1 to load-2)")


def test_the_l4s_preset_counts_its_classic_and_scalable_flows():
    names = [w.name for w in load_preset("l4s").workloads]
    assert names == ["classic", "scalable", "ping_classic", "ping_scalable"]  # as before counts
    exp = load_preset("l4s", ["classic_flows=2", "scalable_flows=3"])
    bulk = [w for w in exp.workloads if isinstance(w, Bulk)]
    assert [(w.name, w.cc, w.ecn, w.src) for w in bulk] == [
        ("classic-1", "cubic", None, "c"), ("classic-2", "cubic", None, "c"), ("scalable-1", "dctcp", "ect1", "l"),
        ("scalable-2", "dctcp", "ect1", "l"), ("scalable-3", "dctcp", "ect1", "l")]
    for bad in ("0", "17", "two"):
        with pytest.raises(SpecError) as error:
            load_preset("l4s", [f"classic_flows={bad}"])
        assert error.value.field == "--set classic_flows", bad


def test_a_cc_parameter_sweeps_what_the_machine_offers():
    from bloatlab.specs.experiment import sweep_axes

    offered = lambda: ["bbr", "cubic", "reno", "mine"]  # noqa: E731
    assert sweep_axes("cc-plane", None, [], [], offered_ccs=offered) == [("cc", ["bbr", "cubic", "reno", "mine"])]
    assert sweep_axes("cc-plane", None, [], ["cc=offered,vegas"], offered_ccs=offered) == \
        [("cc", ["bbr", "cubic", "reno", "mine", "vegas"])]
    assert sweep_axes("cc-plane", None, ["cc=reno"], [], offered_ccs=offered) == []
    with pytest.raises(SpecError, match="only a run here can tell"):
        sweep_axes("cc-plane", None, [], [])
    with pytest.raises(SpecError) as error:
        load_preset("cc-plane", ["cc=Cubic!"])
    assert error.value.field == "--set cc" and "not a congestion control name" in error.value.message
    assert load_preset("cc-plane", ["cc=bbr"]).workloads[0].cc == "bbr"
