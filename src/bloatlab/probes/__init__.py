"""Probes: what a run measures besides the workloads' own output.

    tcp     cwnd, ssthresh and srtt of every flow (tcp:tcp_probe tracepoint, or `ss -tin` polling)
    qdisc   a kernel qdisc's backlog and drops, sampled over netlink (kernel-backend links)
    queue   the userspace datapath's queue logs as a series and a summary
"""
