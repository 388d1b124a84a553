"""One module per algorithm, each with ``init``, ``round`` and ``evaluate``."""
