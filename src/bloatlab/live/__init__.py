"""The live view: a page in the browser that follows a run or a sweep while it goes on.

    follow    what a run's tools have written so far, read from its directory, as charts'
              points; a sweep's runs and their headlines
    server    the page, the results directory read only, and the stream of updates

It reads only what the run writes (raw/, run.json, sweep.json, the datapath's stats file), in
a process of its own at the machine's lowest priority: the run never waits for it.
"""
