"""The experiment layer: what runs on a testbed's hosts and what it measures.

    hosts       what the layer needs of a testbed (a Protocol)
    workloads   iperf3, ping and web fetches as processes in the hosts
    schedule    the run's clock, and each workload started and stopped on time
    probes/     TCP (tracepoint or ss) and queue probes
    parsers     the tools' outputs parsed
    record      what a run measured, handed on to the results layer
    httpd       the web workload's server, run inside a host
"""
