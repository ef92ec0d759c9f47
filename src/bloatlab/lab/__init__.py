"""The lab layer: jobs that cross the layers below.

    run        one run of an experiment (build, run, measure, write, draw), or a sweep of runs
    sweep      the sweep engine: points, repetitions, sweep.json, --resume
    executors  where a sweep's runs run (local; a cluster later)
    doctor     what this machine can do
    clean      remove what bloatlab left on this machine
    bench      the link benchmark
    replay     a queue discipline in virtual time
"""
