"""bloatlab: a laboratory for bufferbloat and queue-management experiments on Linux."""

__version__ = "0.1.0"
