"""The catalogue of queue disciplines is the one declaration: bloatlab-link's own defaults and
reason codes, the datapath config, docs/queues.md's tables and `bloatlab queues` all agree with it."""

import dataclasses
import json
import re
from pathlib import Path

import pytest

from bloatlab import binaries, proc
from bloatlab.cli.main import main
from bloatlab.cli.queues import BLOCK, markdown
from bloatlab.specs.disciplines import ALIASES, CATALOGUE, DisciplineName, from_config, to_config
from bloatlab.specs.model import DirectionSpec, QueueSpec
from bloatlab.specs.queues import parse_queue
from bloatlab.testbed.datapath import DROP_REASONS, MARK_REASONS, direction_config

DOCS = Path(__file__).resolve().parents[2] / "docs" / "queues.md"


@pytest.fixture(scope="module")
def described() -> dict:
    binary = binaries.locate("bloatlab-link")
    if binary is None:
        pytest.skip("bloatlab-link is not built (make setup)")
    return json.loads(proc.output([str(binary), "--describe"]))


def test_bloatlab_link_takes_exactly_the_catalogues_parameters_with_its_defaults(described):
    assert list(described["disciplines"]) == sorted(CATALOGUE)
    for name, discipline in CATALOGUE.items():
        assert described["disciplines"][name] == discipline.defaults(), name


def test_the_reason_codes_read_from_queue_logs_are_bloatlab_links(described):
    assert {int(code): name for code, name in described["drop_reasons"].items()} == DROP_REASONS
    assert {int(code): name for code, name in described["mark_reasons"].items()} == MARK_REASONS


def test_the_datapath_config_holds_every_parameter_resolved():
    config = direction_config(DirectionSpec(rate_bps=20_000_000, queue=QueueSpec("red", packets=1000)), seed=3)
    assert config["queue"] == {"discipline": "red", "packets": 1000, "bytes": None, "min": 83, "max": 250,
                               "avpkt_bytes": 1000, "burst_pkts": 138, "probability": 0.02,
                               "bandwidth_bps": 20_000_000, "ecn": False, "harddrop": False, "adaptive": False,
                               "gentle": False, "ns3": False}
    for name, discipline in CATALOGUE.items():
        queue = direction_config(DirectionSpec(queue=QueueSpec(name)), seed=1)["queue"]
        assert set(queue) == {"discipline", "packets", "bytes", *(p.config for p in discipline.params)}


def test_every_default_written_back_as_a_spec_parses_to_itself():
    # A default as `bloatlab queues` shows it is what a spec may write: it reads back as that value.
    for name, discipline in CATALOGUE.items():
        for param in discipline.settable:
            if param.default is None or param.kind in ("threshold",):
                continue
            value = param.default
            if param.kind == "duration":
                value = f"{value // 1000}us"
            elif param.kind == "rate":
                value = f"{value}bit"
            queue = parse_queue({"discipline": name, param.key: value}, "queue")
            assert queue.params == discipline.record(**{param.field: param.default}), (name, param.key)


# What a typed record holds for each kind of parameter.
KIND_TYPES = {"duration": "int", "size": "int", "rate": "int", "count": "int", "threshold": "int",
              "bool": "bool", "ratio": "float", "probability": "float", "choice": "str"}


def test_each_disciplines_typed_record_holds_its_catalogue_parameters():
    assert list(CATALOGUE) == list(DisciplineName)
    for name, discipline in CATALOGUE.items():
        assert discipline.name is name
        fields = dataclasses.fields(discipline.record)
        assert [f.name for f in fields] == [p.field for p in discipline.params], name
        for f, param in zip(fields, discipline.params):
            assert f.type == f"{KIND_TYPES[param.kind]} | None" and f.default is None, (name, f.name)
        # The field is the spec's key with its unit; the config's name maps to it and back.
        resolved = QueueSpec(name, bytes=150_000, packets=None).resolved(10_000_000)
        config = to_config(name, resolved)
        assert list(config) == [p.config for p in discipline.params]
        assert from_config(name, config) == resolved


def test_docs_tables_are_written_from_the_catalogue():
    text = DOCS.read_text()
    blocks = {m["name"]: m["body"] for m in BLOCK.finditer(text)}
    assert set(blocks) == {"disciplines", "config", *CATALOGUE}
    for name, body in blocks.items():
        assert body == markdown(name), f"docs/queues.md block {name} is stale: run make docs"


def test_the_queues_command_shows_the_catalogue(capsys):
    assert main(["queues"]) == 0
    listing = capsys.readouterr().out
    for name in CATALOGUE:
        assert re.search(rf"^{name}\s", listing, re.M), name
    assert main(["queues", "taildrop"]) == 0  # an alias shows its discipline
    assert capsys.readouterr().out.startswith("droptail: ")
    for name, discipline in CATALOGUE.items():
        assert main(["queues", name]) == 0
        text = capsys.readouterr().out
        for param in discipline.settable:
            assert re.search(rf"^  {param.key}\s", text, re.M), (name, param.key)
    assert main(["queues", "codle"]) == 2
    assert "NAME: no discipline 'codle'; choose one of: droptail" in capsys.readouterr().err
    assert set(ALIASES) == {"taildrop"}
