"""traces: cut the chosen step out of each source as a small SQLite and a Chrome/Perfetto JSON."""
from .jobs import TraceJob, cut_window, make_window_traces, publish_window
from .jsonout import ChromeTraceWriter

__all__ = [
    "ChromeTraceWriter", "TraceJob", "cut_window", "make_window_traces", "publish_window",
]
