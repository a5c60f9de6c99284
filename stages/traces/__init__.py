"""traces: cut the chosen step out of each source as a small SQLite and a Chrome/Perfetto JSON."""
from .jobs import TraceJob, make_window_traces

__all__ = [
    "TraceJob", "make_window_traces",
]
