"""Scrub a torch CUDA memory snapshot (`torch.cuda.memory._dump_snapshot` pickle).

Why: every allocation in a snapshot carries its Python and C++ stack, so absolute paths (home
directories, user names, virtual-env locations) appear in every frame; `allocator_settings` and
annotation names can carry anything. The snapshot is loaded with the restricted unpickler (a hostile
pickle is refused before anything runs), every string goes through the `Scrubber`, and the result
is written as a pickle of builtins only (protocol 4), which torch's memory viz still opens.
Identical strings stay one object (the scrubber caches per string), so pickle's memo keeps the
output as compact as the input.
"""
from __future__ import annotations

import pickle
from collections import OrderedDict
from pathlib import Path
from typing import Any

from ..core.errors import BadInputError
from ..readers.memory_snapshot import load_snapshot
from .identities import Identities, IdentityCollector
from .policy import Policy
from .provenance import is_toolchain_frame
from .scrubber import LocationNames, Scrubber

# Keys of snapshot records; they need no scrubbing themselves (values under them still are).
_KNOWN_KEYS = frozenset({
    "segments", "device_traces", "allocator_settings", "external_annotations", "device", "address",
    "total_size", "allocated_size", "active_size", "requested_size", "stream", "segment_type",
    "segment_pool_id", "is_expandable", "blocks", "frames", "size", "state", "name", "filename",
    "line", "action", "addr", "time_us", "compile_context", "user_metadata", "stage",
    "PYTORCH_CUDA_ALLOC_CONF", "max_split_size", "garbage_collection_threshold", "expandable_segments",
    "pinned_num_register_threads", "release_lock_on_cudamalloc", "pinned_use_cuda_host_register",
    "graph_capture_record_stream_reuse", "roundup_power2_divisions", "history", "real_size",
})


class _Walker:
    def __init__(self, scrubber: Scrubber) -> None:
        self.sc = scrubber
        self._names = LocationNames(10_000)
        # Snapshots share frame dicts and lists between records (pickle memo); scrubbing each
        # shared container once keeps that sharing in the output (same size, a fraction of the
        # time). Counts are therefore per stored object, not per reference.
        self._memo: dict[tuple[int, str | None], Any] = {}

    def loc(self, parent: str, key: str) -> str:
        return self._names.child(parent, key)

    def walk(self, obj: Any, key: str | None, loc: str, depth: int = 0) -> Any:
        t = type(obj)
        if t is str:
            return self.sc.scrub_keyed(key, obj, loc) if key else self.sc.scrub(obj, loc)
        if t is dict or t is OrderedDict or t is list or t is tuple:
            mk = (id(obj), key)
            hit = self._memo.get(mk)
            if hit is not None:
                return hit
            res = self._container(obj, t, key, loc, depth)
            self._memo[mk] = res
            return res
        if t is set or t is frozenset:
            return t(self.walk(v, key, loc, depth + 1) for v in obj)
        if t is bytes:
            text = obj.decode("latin-1")
            clean = self.sc.scrub(text, loc)
            return obj if clean is text else clean.encode("latin-1", "replace")
        return obj

    def _container(self, obj: Any, t: type, key: str | None, loc: str, depth: int) -> Any:
        if depth > 200:
            raise RecursionError
        if t is dict or t is OrderedDict:
            out = {}
            frame = obj.get("filename")
            if isinstance(frame, str) and isinstance(obj.get("name"), str):
                # a stack frame: its file says who wrote it, for its function name too (provenance.py)
                field = "snapshot.frame[toolchain]" if is_toolchain_frame(frame) else "snapshot.frame[user]"
                for k, v in obj.items():
                    ks = k if k in _KNOWN_KEYS or not isinstance(k, str) else self.sc.scrub(k, loc + ".<key>")
                    sub = self.loc(loc, ks) if isinstance(ks, str) else loc
                    out[ks] = (self.sc.scrub(v, sub, field + (".filename" if k == "filename" else ""))
                               if k in ("filename", "name") and type(v) is str
                               else self.walk(v, k if isinstance(k, str) else None, sub, depth + 1))
                return out
            for k, v in obj.items():
                if isinstance(k, str):
                    ks = k if k in _KNOWN_KEYS else self.sc.scrub(k, loc + ".<key>")
                    out[ks] = self.walk(v, k, self.loc(loc, ks), depth + 1)
                else:
                    out[k] = self.walk(v, None, loc, depth + 1)
            return out
        if t is list:
            sub = loc if loc.endswith("[]") else loc + "[]"
            return [self.walk(v, key, sub, depth + 1) for v in obj]
        return tuple(self.walk(v, key, loc, depth + 1) for v in obj)


def scrub_snapshot(src: Path, dst_tmp: Path, scrubber: Scrubber) -> dict[str, int]:
    snap = load_snapshot(src)
    try:
        clean = _Walker(scrubber).walk(snap, None, "snapshot")
    except RecursionError:
        raise BadInputError(src, "snapshot nested too deeply") from None
    with open(dst_tmp, "wb") as f:
        pickle.dump(clean, f, protocol=4)
    return {"segments": len(clean.get("segments", [])),
            "trace_entries": sum(len(t) for t in clean.get("device_traces", []) if isinstance(t, list))}


def find_snapshot_identities(path: Path, policy: Policy) -> Identities:
    col = IdentityCollector(policy)
    try:
        col.feed_obj(load_snapshot(path))
    except RecursionError:
        raise BadInputError(path, "snapshot nested too deeply") from None
    return col.ids
