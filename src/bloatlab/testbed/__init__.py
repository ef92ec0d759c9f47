"""The testbed layer: turns a Topology into namespaces, veths, bridges, qdiscs and a datapath
process, and takes them down again, also after a crash.

    network      build, attach to and remove networks (the only module that builds)
    links/       the link backends: one interface (base), kernel qdiscs, bloatlab-link
    datapath     the bloatlab-link contract: its config and process, and its queue logs
    datapath_stats  its stats file as typed records, and their one reader
    diagnostics  what the datapath's stats say of a run: lateness against the machine, CPU, warnings
    netns        namespaces, and the netlink, ethtool and sysctl verbs the build uses
    state        the registry of networks (/run/bloatlab)
    capabilities what this kernel offers (probed qdiscs, its congestion controls)
    congestion   a congestion control the kernel lacks (dctcp): bloatlab's BPF stand-in, registered
                 while a network holds it
    machine      facts about the machine and its namespaces, for results
"""
