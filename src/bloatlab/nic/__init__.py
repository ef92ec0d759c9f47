"""Real interfaces: sweep an interface's txqueuelen, Byte Queue Limits, offloads and root qdisc,
measured with iperf3 and ping against a server, and always put the interface back.

    knobs     read, set and restore each knob; snapshots
    journal   the original settings on disk before the first change (/run/bloatlab/nic/)
    plan      a sweep as data, from flags or a TOML file, validated
    measure   iperf3 TCP and UDP, ping; summaries and series

A sweep of them, the job, is bloatlab.lab.nic; the command line, `bloatlab nic sweep|restore|serve`,
bloatlab.cli.nic.
"""
