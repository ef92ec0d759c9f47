"""The simulated backend: an experiment run in ns-3 from the same spec (docs/simulation.md).

scenario.py turns the resolved experiment into the driver's scenario (and refuses what ns-3
cannot model), driver.py builds and runs the C++ driver (cxx/bloatlab_ns3.cc) against the
ns3 wheel, outputs.py reads what it wrote into the RunRecord an emulated run fills.
"""
