"""traces: cut the chosen step out of each source as a small SQLite and a Chrome/Perfetto JSON."""
from .jobs import (TraceJob, cut_window, make_window_traces, nsys_sqlite_to_chrome, publish_window, trace_file_name,
                   trace_sqlite_name, window_chrome_trace_utc, window_gzip, window_nsys_sqlite)
from .jsonout import ChromeTraceWriter

__all__ = [
    "ChromeTraceWriter", "TraceJob", "cut_window", "make_window_traces", "publish_window",
    "nsys_sqlite_to_chrome", "trace_file_name", "trace_sqlite_name", "window_chrome_trace_utc", "window_gzip",
    "window_nsys_sqlite",
]
