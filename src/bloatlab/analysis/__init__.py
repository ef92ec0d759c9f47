"""The analysis layer: what is drawn and computed from results, read through
bloatlab.results.reader alone.

    plots        a run's figures
    sweep_plots  a sweep's comparison figures
    aggregate    statistics per sweep point; the long series export
    report       report.html of a run or a sweep; a sweep's finish
    summary      summaries as text, for the terminal
"""
