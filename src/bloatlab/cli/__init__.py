"""The command line: a thin shell over the layers, one module per group of commands; main.py
assembles them."""
