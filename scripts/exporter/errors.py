"""The one error type the exporter raises for bad input.

export_graph.py catches it and prints its message alone (no traceback), so every
message must name the file and say what was expected.
"""


class ExporterError(Exception):
    """Bad input or an unsupported model: the message is shown to the user as is."""
