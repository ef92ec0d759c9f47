"""The lab layer: jobs that cross the layers below.

    run        one run of an experiment (build, run, measure, write, draw), or a sweep of runs
    sweep      the sweep engine: points, repetitions, sweep.json, --resume
    executors  where a sweep's runs run: this machine, or a Ray cluster (cluster)
    cluster    a sweep's runs on the nodes of a Ray cluster
    simulate   a run simulated in ns-3
    calibration  an emulated path fitted to measurements of a real one
    outcome    a run's headline figures and grade, for sweep tables
    nic        sweeps of a real interface's knobs, always restored
    replay     a queue discipline in virtual time
    doctor     what this machine can do
    clean      remove what bloatlab left on this machine
"""
