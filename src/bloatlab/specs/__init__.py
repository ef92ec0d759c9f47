"""The specs layer: an experiment as data. TOML files and --set values validated into the typed
model (model.py): topologies, link directions, queues, workloads, probes. The catalogue of
queue disciplines (disciplines.py) declares every discipline's parameters once. Nothing here
touches the machine; every layer above reads this one.

    units        rates, durations, sizes, percentages: parsed and formatted
    reading      TOML files into tables; field names for errors
    disciplines  the catalogue of queue disciplines
    model        the typed model
    queues       queue tables -> QueueSpec
    topology     topology files -> Topology
    experiment   experiment specs and presets -> Experiment; sweep plans
"""
