"""Read an SQLite file's pages directly, where SQL would have to decode every cell.

Why: two questions scrub and check ask of every export cost a full decode in SQL, and both are
answered by the page layout alone (https://www.sqlite.org/fileformat2.html):

- `numeric_cells_are_numbers`: does any numeric-declared column of a table hold a text or blob
  cell? (A hostile export can put text anywhere; nsys never does.) In SQL that is one comparison
  per cell (bench/README.md). In a record header every NULL, integer and float cell is one
  serial-type byte below 12, and every text or blob cell a serial type >= 12: so the header bytes of
  every record of the table's leaf pages, checked at once with numpy, answer it;
- `unallocated_regions`: which bytes of the file no live cell holds (free pages, the gap between a
  page's cell pointers and its cells, freed blocks): where deleted rows survive, the only part of
  the file `check` must scan raw once the cells have been read through SQL.

Conservative by construction: anything this reader does not fully understand (an index b-tree, a
header wider than a byte per column, a pointer out of bounds, a cycle) answers None, and the caller
falls back to SQL or to scanning everything.
"""
from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..readers.sqlite_header import parse_header

_LEAF, _INTERIOR = 0x0D, 0x05        # table b-tree page types
_INDEX_TYPES = (0x02, 0x0A)


class _File:
    """The pages of one SQLite file, memory-mapped (read-only, pages touched on demand)."""

    def __init__(self, path: Path) -> None:
        size = os.path.getsize(path)
        if size < 512:
            raise ValueError("too small")
        with open(path, "rb") as fh:
            self.mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        self.buf = np.frombuffer(self.mm, dtype=np.uint8)      # a plain array: fast fancy indexing
        head = parse_header(self.mm[:100], size)
        self.page_size = head.page_size
        self.usable = self.page_size - head.reserved
        self.pages = size // self.page_size
        self.size = size
        if head.wal and Path(str(path) + "-wal").exists():
            raise ValueError("a write-ahead log holds newer pages")
        self.u16s = np.frombuffer(self.mm, dtype=">u2", count=size // 2)   # big-endian 16-bit words

    def release(self, first: int, last: int) -> None:
        """Drop pages `first`..`last` from this process's memory (they stay in the OS page cache):
        the process's peak stays about one chunk of pages, whatever the size of the file."""
        a = self.base(first) // mmap.PAGESIZE * mmap.PAGESIZE
        b = min(self.base(last) + self.page_size, self.size)
        if b > a and hasattr(mmap, "MADV_DONTNEED"):
            self.mm.madvise(mmap.MADV_DONTNEED, a, b - a)

    def base(self, page: int) -> int:
        return (page - 1) * self.page_size

    def hdr(self, page: int) -> int:
        return self.base(page) + (100 if page == 1 else 0)

    def u16(self, at: int) -> int:
        return (self.mm[at] << 8) | self.mm[at + 1]

    def u32(self, at: int) -> int:
        return int.from_bytes(self.mm[at:at + 4], "big")


def _leaves(f: _File, root: int) -> list[int] | None:
    """The leaf pages of the table b-tree rooted at `root`, or None when it is not one."""
    leaves: list[int] = []
    seen: set[int] = set()
    stack = [root]
    while stack:
        p = stack.pop()
        if not 1 <= p <= f.pages or p in seen:
            return None
        seen.add(p)
        h = f.hdr(p)
        kind = f.mm[h]
        if kind == _LEAF:
            leaves.append(p)
        elif kind == _INTERIOR:
            n = f.u16(h + 3)
            if 12 + 2 * n > f.usable:
                return None
            base = f.base(p)
            cells = base + np.frombuffer(f.mm, dtype=">u2", count=n, offset=h + 12).astype(np.int64)
            if (cells + 4 > base + f.usable).any():
                return None
            b = f.buf
            child = (b[cells].astype(np.int64) << 24) | (b[cells + 1].astype(np.int64) << 16) \
                | (b[cells + 2].astype(np.int64) << 8) | b[cells + 3]
            stack.extend(child.tolist())
            stack.append(f.u32(h + 8))
        else:
            return None
    return leaves


def numeric_cells_are_numbers(path: Path, root: int, ncols: int, numeric: list[int]) -> bool | None:
    """True when no cell of the columns `numeric` (indexes) of the rowid table rooted at page `root`
    holds text or a blob; False when one does; None when the pages cannot be read this way."""
    try:
        f = _File(path)
        leaves = _leaves(f, root)
    except (OSError, ValueError, IndexError):
        return None
    if leaves is None or not ncols:
        return None
    is_numeric = np.zeros(ncols, dtype=bool)
    is_numeric[[c for c in numeric if 0 <= c < ncols]] = True
    found = False
    for i in range(0, len(leaves), _CHUNK_PAGES):
        chunk = np.asarray(leaves[i:i + _CHUNK_PAGES], dtype=np.int64)
        verdict = _leaf_headers_numeric(f, chunk, ncols, is_numeric)
        f.release(int(chunk.min()), int(chunk.max()))
        if verdict is None:
            return None
        found |= not verdict
    return not found


_CHUNK_PAGES = 1024       # pages read at once: bounds the temporary arrays (~20 MB) and the mapped pages


def _leaf_headers_numeric(f: _File, pages: np.ndarray, ncols: int, is_numeric: np.ndarray) -> bool | None:
    """`numeric_cells_are_numbers` for some leaf pages of one table."""
    buf = f.buf
    bases = (pages - 1) * f.page_size
    hdrs = bases + np.where(pages == 1, 100, 0)
    ncells = (buf[hdrs + 3].astype(np.int64) << 8) | buf[hdrs + 4]
    total = int(ncells.sum())
    if total == 0:
        return True
    # the cell pointer arrays of the pages, flattened: page i's k-th pointer at hdrs[i] + 8 + 2k
    rank = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(ncells) - ncells, ncells)
    page_base = np.repeat(bases, ncells)
    page_end = page_base + f.usable
    ptr_at = np.repeat(hdrs + 8, ncells) + 2 * rank
    if (ptr_at + 2 > page_end).any():
        return None
    cell = page_base + f.u16s[ptr_at >> 1]          # pointers sit at even offsets: one big-endian gather
    if (cell < page_base + 8).any() or (cell >= page_end).any() or (cell + 20 > f.size).any():
        return None
    # a leaf cell: payload length varint, rowid varint, then the record: header size, serial types
    rec = cell + _varint_len(buf, cell)
    rec = rec + _varint_len(buf, rec)
    b0 = buf[rec].astype(np.int64)
    b1 = buf[rec + 1].astype(np.int64)
    wide = b0 >= 0x80
    if (wide & (b1 >= 0x80)).any():
        return None                                   # a header of 16 KB or more
    hsize = np.where(wide, ((b0 & 0x7F) << 7) | b1, b0)
    end = rec + hsize
    if (hsize < 1).any() or (end > page_end).any():
        return None
    # A serial type below 12 is one byte below 12; text and blobs are serial types >= 12, whose first
    # byte is >= 12 however many bytes they take. Records holding every column in one byte each (all
    # of them in nsys's numeric tables) are read as one (cells x columns) byte matrix ...
    full = ~wide & (hsize == ncols + 1) & (rec + ncols + 1 <= f.size)
    if full.any():
        ser = sliding_window_view(buf, ncols + 1)[rec[full]][:, 1:]
        if full.all() and int(ser.max()) < 12:
            return True                               # every cell NULL, an integer or a float
        one_byte = (ser < 0x80).all(axis=1)
        if (ser[one_byte][:, is_numeric] >= 12).any():
            return False
        full[np.flatnonzero(full)[~one_byte]] = False
        if full.all():
            return True
        rest = ~full
        rec, wide, end = rec[rest], wide[rest], end[rest]
    # ... and the others column by column, over every such cell at once.
    pos = rec + np.where(wide, 2, 1)
    for k in range(ncols):
        if not (pos < end).all():
            return None         # a row older than an added column: SQL returns the column's default
        if is_numeric[k] and (buf[pos] >= 12).any():
            return False
        pos = pos + _varint_len(buf, pos)
    if (pos != end).any():
        return None                                   # more serial types than the table has columns
    return True


def _varint_len(buf: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Length in bytes (1-9) of the varint starting at each offset (most are one byte)."""
    going = buf[at] >= 0x80
    n = np.ones(len(at), dtype=np.int64)
    if not going.any():
        return n
    n += going
    for k in range(1, 8):
        going &= buf[at + k] >= 0x80
        if not going.any():
            break
        n += going
    return n


def unallocated_regions(path: Path) -> list[tuple[int, int]] | None:
    """[start, end) byte ranges of `path` that no live b-tree cell holds: every page that is not a
    b-tree page (free-list pages, overflow pages and anything unknown: whole), and in each b-tree
    page the gap between its cell pointers and its cell content plus its freed blocks. None when the
    file cannot be read this way (then everything is)."""
    try:
        f = _File(path)
        free = _freelist(f)
    except (OSError, ValueError, IndexError):
        return None
    if free is None:
        return None
    regions: list[tuple[int, int]] = []
    for first in range(1, f.pages + 1, _CHUNK_PAGES):
        last = min(first + _CHUNK_PAGES - 1, f.pages)
        if not _page_regions(f, np.arange(first, last + 1, dtype=np.int64), free, regions):
            return None
        f.release(first, last)
    tail = f.pages * f.page_size
    if tail < f.size:
        regions.append((tail, f.size))
    regions.sort()
    return regions


def _page_regions(f: _File, pages: np.ndarray, free: set[int], regions: list[tuple[int, int]]) -> bool:
    """Add the unallocated regions of `pages` to `regions`; False when a page cannot be read."""
    buf = f.buf
    bases = (pages - 1) * f.page_size
    hdrs = bases + np.where(pages == 1, 100, 0)
    kind = buf[hdrs]
    ncell = (buf[hdrs + 3].astype(np.int64) << 8) | buf[hdrs + 4]
    content = (buf[hdrs + 5].astype(np.int64) << 8) | buf[hdrs + 6]
    content = np.where(content == 0, 65536, content)
    interior = (kind == _INTERIOR) | (kind == 0x02)
    gap_a = hdrs + np.where(interior, 12, 8) + 2 * ncell
    gap_b = bases + content
    # b-tree pages whose header makes sense; a free-list page can look like one (its old content),
    # so pages on the free list are whole regions whatever they hold
    btree = np.isin(kind, (_LEAF, _INTERIOR) + _INDEX_TYPES) & (gap_a <= gap_b) & (content <= f.usable)
    if free:
        btree &= ~np.isin(pages, np.fromiter(free, dtype=np.int64))
    for b in bases[~btree].tolist():
        regions.append((b, min(b + f.page_size, f.size)))
    for a, b in zip(gap_a[btree].tolist(), gap_b[btree].tolist()):
        if b > a:
            regions.append((a, b))
    firstfree = (buf[hdrs + 1].astype(np.int64) << 8) | buf[hdrs + 2]
    chained = btree & (firstfree > 0)
    for p, fb in zip(pages[chained].tolist(), firstfree[chained].tolist()):
        base = f.base(p)
        seen = 0
        while fb and seen < 10_000:
            if fb + 4 > f.usable:
                return False
            at = base + fb
            regions.append((at, min(at + max(f.u16(at + 2), 4), base + f.page_size)))
            fb = f.u16(at)
            seen += 1
    return True


def _freelist(f: _File) -> set[int] | None:
    trunk = f.u32(32)
    out: set[int] = set()
    seen = 0
    while trunk:
        if not 1 <= trunk <= f.pages or trunk in out or seen > f.pages:
            return None
        out.add(trunk)
        b = f.base(trunk)
        nxt = f.u32(b)
        k = f.u32(b + 4)
        if 8 + 4 * k > f.usable:
            return None
        for i in range(k):
            leaf = f.u32(b + 8 + 4 * i)
            if 1 <= leaf <= f.pages:
                out.add(leaf)
        trunk = nxt
        seen += 1
    return out


__all__ = ["numeric_cells_are_numbers", "unallocated_regions"]
