"""Physical limits and ratio tables for mqstore's benchmarks.

Every benchmark in this folder prints its results beside a limit measured in the same run on
the same machine and disk, never beside a number copied from elsewhere. This module holds
those measurements and the printing, so that the embedded benchmark and a later pipeline
benchmark measure the limits the same way:

- `write_limit`: sequential `os.write` of 1 MiB chunks into a preallocated
  (`posix_fallocate`) file, then one `os.fdatasync`; MB/s of durable sequential writes
  (shared/reference/perf-anchors.md sections 1.1 and 1.3: about 1.6-2.2 GB/s here).
- `page_growth`: the CPU price of each new 4 KiB page of page cache, block by block through a
  512 MiB file: the price every byte a store keeps cached pays once.
- `fsync_limit`: `os.pwrite` of one operation's bytes, then `os.fdatasync`, one after the
  other, into a file whose blocks were written and synced beforehand (RocketMQ's warmed
  segment, the fastest case of perf-anchors.md section 1.3): what a writer that waits for its
  own fsync can do at best; each fdatasync is timed too (`Measure.latencies`: its p50 is the
  fsync part of a durable put's floor in pipeline.py).
- `slice_copy_limit` and `bulk_copy_limit`: reading from the page cache. The first slices
  every record of the written segments out of their mmap into a `bytes` object (the least a
  Python read path that hands out one object per message must do); the second copies the
  same bytes in 64 MiB pieces (memcpy bandwidth).
- `cpu_append_ref` and `cpu_scan_ref`: bare Python loops over RocketMQ-shaped records. The
  first packs the 88-byte header (TOTALSIZE to BODYLENGTH) with `struct.pack_into`, computes
  the body CRC (with the store's routine, `core.record.crc`) and copies the body into a populated
  file mapping; the second walks such records (unpack the header, CRC the body, advance). They are the CPU floor of one Python
  thread for appending and for scanning: no engine can do less work per record in Python.

`Row` and `print_table` format the result table (ours, the limit, the ratio, the target).
"""
from __future__ import annotations

import mmap
import os
import platform
import struct
import sys
import time
from array import array
from dataclasses import dataclass, field

from core.record.crc import crc32 as body_crc32      # the store's own CRC routine, so the floor is fair

MB = 1_000_000                      # rates are printed in decimal MB/s, like dd
MiB = 1 << 20


def size_name(body: int) -> str:
    """A body size as the tables name it: 1KiB, 100B."""
    return "1KiB" if body == 1024 else f"{body}B"

MADV_POPULATE_WRITE = 23            # Linux 5.14+
RECORD_HEADER = struct.Struct(">iiiiiqqiqqqqiqi")   # 88 bytes: TOTALSIZE .. BODYLENGTH
MAGIC_V1 = -626843481               # 0xDAA320A7
MAGIC_V2 = -626843477
_SIZE_MAGIC = struct.Struct(">ii")
assert RECORD_HEADER.size == 88


# ---- the machine and the disk ----------------------------------------------------------

def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def mount_of(path: str) -> dict:
    """The mount holding `path`: mount point, filesystem type and source device."""
    path = os.path.realpath(path)
    best = {"mount_point": "/", "fs_type": "unknown", "source": "unknown"}
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                pre, _, post = line.partition(" - ")
                mp = pre.split()[4].replace("\\040", " ")
                fs_type, source = post.split()[:2]
                inside = path == mp or path.startswith(mp.rstrip("/") + "/")
                if inside and len(mp) >= len(best["mount_point"]):
                    best = {"mount_point": mp, "fs_type": fs_type, "source": source}
    except OSError:
        pass
    return best


def disk_info(path: str, reference: str | None = None) -> dict:
    """Where `path` lives, its free space and whether it is on the same device as `reference`."""
    info = mount_of(path)
    st = os.statvfs(path)
    info["free_bytes"] = st.f_bavail * st.f_frsize
    info["path"] = os.path.realpath(path)
    if reference is not None:
        info["same_device_as"] = os.path.realpath(reference)
        info["same_device"] = os.stat(path).st_dev == os.stat(reference).st_dev
    return info


def machine_info() -> dict:
    return {
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model(),
        "python": sys.version.split()[0],
        "python_impl": platform.python_implementation(),
        "kernel": platform.release(),
        "mem_total_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
    }


def print_machine(info: dict, disk: dict | None = None, file=sys.stdout) -> None:
    print(f"machine: {info['nproc']} CPUs, {info['cpu_model']}, "
          f"{info['mem_total_bytes'] / (1 << 30):.1f} GiB RAM, kernel {info['kernel']}, "
          f"{info['python_impl']} {info['python']}", file=file)
    if disk is not None:
        same = "" if "same_device" not in disk else (
            ", same device as the repository" if disk["same_device"] else ", NOT the repository's device")
        print(f"data dir: {disk['path']} on {disk['source']} ({disk['fs_type']}, mounted at "
              f"{disk['mount_point']}{same}), {disk['free_bytes'] / (1 << 30):.1f} GiB free", file=file)


def machine_ticks() -> tuple[int, int]:
    """(busy, all) clock ticks of the whole machine since boot (/proc/stat; idle and iowait are
    not busy, guest time is not counted)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    total = sum(fields[:8])
    return total - idle, total


class CpuContention:
    """How much CPU other processes used while this one ran: the machine is shared, and on
    2 CPUs a busy neighbour moves every number. `start()`, then `stop()` -> dict."""

    def start(self) -> "CpuContention":
        self.t0 = time.perf_counter()
        self.times0 = os.times()
        try:
            self.busy0, self.total0 = machine_ticks()
        except (OSError, ValueError, IndexError):
            self.busy0 = None
        self.load0 = os.getloadavg()[0]
        return self

    def stop(self) -> dict:
        wall = time.perf_counter() - self.t0
        t = os.times()
        ours = (t.user - self.times0.user) + (t.system - self.times0.system)
        out = {"wall_seconds": wall, "our_cpus": ours / wall if wall else 0.0,
               "loadavg_start": self.load0, "loadavg_end": os.getloadavg()[0]}
        if self.busy0 is not None:
            busy, total = machine_ticks()
            ticks = os.sysconf("SC_CLK_TCK")
            all_busy = (busy - self.busy0) / ticks
            out["all_cpus_busy"] = all_busy / wall if wall else 0.0
            out["other_cpus"] = max(0.0, (all_busy - ours) / wall) if wall else 0.0
        return out


def print_contention(c: dict, file=sys.stdout) -> None:
    other = c.get("other_cpus")
    text = (f"CPU use during the run: this process {c['our_cpus']:.2f} CPUs"
            + (f", everything else {other:.2f} CPUs" if other is not None else "")
            + f" (load average {c['loadavg_start']:.1f} at start, {c['loadavg_end']:.1f} at end)")
    print(text, file=file)
    if other is not None and other > 0.2:
        print(f"WARNING: other processes used {other:.2f} of {os.cpu_count()} CPUs during the run; "
              "rates are lower and noisier than on an idle machine.", file=file)


# ---- timing ----------------------------------------------------------------------------

@dataclass
class Measure:
    """One timed run: `ops` operations moving `nbytes` bytes in `seconds` (and, where the run
    timed each, their `latencies` in seconds, in order)."""
    ops: int
    nbytes: int
    seconds: float
    latencies: list = field(default_factory=list, repr=False)

    @property
    def ops_per_s(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else float("inf")

    @property
    def mb_per_s(self) -> float:
        return self.nbytes / self.seconds / MB if self.seconds > 0 else float("inf")


def _rate(m: Measure) -> float:
    return m.ops_per_s if m.ops else m.mb_per_s


def median_of(runs: list[Measure]) -> Measure:
    """The run with the median rate (an odd count gives a real run)."""
    ordered = sorted(runs, key=_rate)
    return ordered[len(ordered) // 2]


def best_of(runs: list[Measure]) -> Measure:
    """The fastest run: a limit is what the machine can do, and on a shared machine the slower
    runs measure the neighbours."""
    return max(runs, key=_rate)


# ---- disk limits -----------------------------------------------------------------------

def _fresh_fd(path: str) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)


def write_limit(directory: str, nbytes: int, chunk: int = MiB) -> Measure:
    """Durable sequential writes: `os.write` 1 MiB chunks into a posix_fallocate'd file, then
    one `os.fdatasync`, timed together. The file is deleted afterwards (not timed)."""
    n = max(1, -(-nbytes // chunk))
    path = os.path.join(directory, "limit-write.bin")
    data = os.urandom(chunk)
    fd = _fresh_fd(path)
    try:
        os.posix_fallocate(fd, 0, n * chunk)
        os.fsync(fd)
        t0 = time.perf_counter()
        for _ in range(n):
            os.write(fd, data)
        os.fdatasync(fd)
        seconds = time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    return Measure(n, n * chunk, seconds)


GROWTH_BYTES = 512 * MiB            # page_growth: one new file this large ...
GROWTH_BLOCK = 64 * MiB             # ... timed this much at a time


def page_growth(directory: str, nbytes: int = GROWTH_BYTES, block: int = GROWTH_BLOCK) -> list[float]:
    """What growing the page cache costs: `os.write` of 1 MiB chunks into one new file of
    `nbytes`, as microseconds of CPU per 4 KiB page for each `block` in turn (the file is
    deleted afterwards). A store keeps what it writes cached, so its appends pay for new pages
    all the time; a file written and deleted again and again (the write limit) may be served
    from memory freed moments before. On a virtual machine whose freed memory goes back to the
    host the two differ several times over."""
    data = os.urandom(MiB)
    path = os.path.join(directory, "limit-growth.bin")
    fd = _fresh_fd(path)
    costs = []
    try:
        for _ in range(max(1, nbytes // block)):
            t0 = time.process_time()
            for _ in range(block // MiB):
                os.write(fd, data)
            costs.append((time.process_time() - t0) / (block / 4096) * 1e6)
    finally:
        os.close(fd)
        os.unlink(path)
    return costs


def fsync_limit(directory: str, op_bytes: int, ops: int) -> Measure:
    """A writer that waits for its own fsync: `os.pwrite(op_bytes)` then `os.fdatasync`, `ops`
    times in sequence, into a file written with zeros and synced first (not timed)."""
    path = os.path.join(directory, "limit-fsync.bin")
    size = op_bytes * ops
    fd = _fresh_fd(path)
    try:
        zeros = bytes(MiB)
        for off in range(0, size, MiB):
            os.pwrite(fd, zeros[:min(MiB, size - off)], off)
        os.fsync(fd)
        data = os.urandom(op_bytes)
        lat = []
        t0 = time.perf_counter()
        for i in range(ops):
            os.pwrite(fd, data, i * op_bytes)
            t1 = time.perf_counter()
            os.fdatasync(fd)
            lat.append(time.perf_counter() - t1)
        seconds = time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    return Measure(ops, size, seconds, lat)


# ---- memory limits over written segments -----------------------------------------------

class SegmentView:
    """Read-only mappings of CommitLog segment files and where each record starts in them.

    The record walk (TOTALSIZE and MAGIC only, stopping at a blank or an empty slot) happens
    once, untimed; the limits then time only the copies.
    """

    def __init__(self, paths: list[str]):
        self.maps: list[mmap.mmap] = []
        self.positions: list[array] = []
        self.sizes: list[array] = []
        self.data_end: list[int] = []
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                mm = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ)
            finally:
                os.close(fd)
            pos, sizes = array("q"), array("q")
            p, limit = 0, len(mm)
            while p + 8 <= limit:
                total, magic = _SIZE_MAGIC.unpack_from(mm, p)
                if magic not in (MAGIC_V1, MAGIC_V2) or total <= 0 or p + total > limit:
                    break
                pos.append(p)
                sizes.append(total)
                p += total
            self.maps.append(mm)
            self.positions.append(pos)
            self.sizes.append(sizes)
            self.data_end.append(p)

    @property
    def records(self) -> int:
        return sum(len(p) for p in self.positions)

    @property
    def nbytes(self) -> int:
        return sum(self.data_end)

    def close(self) -> None:
        for mm in self.maps:
            mm.close()
        self.maps = []


def slice_copy_limit(view: SegmentView) -> Measure:
    """Every record sliced out of its segment's mmap into a new `bytes` object."""
    t0 = time.perf_counter()
    n = nbytes = 0
    for mm, pos, sizes in zip(view.maps, view.positions, view.sizes):
        for p, size in zip(pos, sizes):
            mm[p:p + size]
        n += len(pos)
        nbytes += sum(sizes)
    return Measure(n, nbytes, time.perf_counter() - t0)


def bulk_copy_limit(view: SegmentView, chunk: int = 64 * MiB) -> Measure:
    """The same bytes copied from the mappings into one reused buffer, 64 MiB at a time."""
    dst = bytearray(chunk)
    dst_mv = memoryview(dst)
    dst_mv[:] = bytes(chunk)                  # fault the target in before timing
    t0 = time.perf_counter()
    nbytes = 0
    for mm, end in zip(view.maps, view.data_end):
        src = memoryview(mm)
        try:
            for off in range(0, end, chunk):
                n = min(chunk, end - off)
                dst_mv[:n] = src[off:off + n]
                nbytes += n
        finally:
            src.release()
    seconds = time.perf_counter() - t0
    dst_mv.release()
    return Measure(0, nbytes, seconds)


# ---- CPU floors: bare Python loops over RocketMQ-shaped records -------------------------

class PopulatedMapping:
    """A file of `size` bytes, fallocated, mapped shared and prefaulted for writing."""

    def __init__(self, directory: str, size: int):
        self.path = os.path.join(directory, "limit-cpu.bin")
        fd = _fresh_fd(self.path)
        try:
            os.posix_fallocate(fd, 0, size)
            self.mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        try:
            self.mm.madvise(MADV_POPULATE_WRITE)
        except (OSError, ValueError, AttributeError):
            for off in range(0, size, mmap.PAGESIZE):
                self.mm[off] = 0
        self.size = size

    def close(self) -> None:
        self.mm.close()
        os.unlink(self.path)


def cpu_append_ref(target: PopulatedMapping, body_size: int, count: int) -> Measure:
    """Per record: CRC of the body, `pack_into` of the 88-byte header, body copied behind it."""
    bodies = [os.urandom(body_size) for _ in range(64)]
    rec = RECORD_HEADER.size + body_size
    mm, pack_into, crc32 = target.mm, RECORD_HEADER.pack_into, body_crc32
    wrap = target.size - target.size % rec
    pos = phys = 0
    t0 = time.perf_counter()
    for i in range(count):
        body = bodies[i & 63]
        pack_into(mm, pos, rec, MAGIC_V1, crc32(body) & 0x7FFFFFFF, i & 3, 0, i, phys, 0,
                  1_700_000_000_000, 0x7F0000012A9F, 1_700_000_000_001, 0x7F0000012A9F, 0, 0,
                  body_size)
        end = pos + 88 + body_size
        mm[pos + 88:end] = body
        phys += rec
        pos = end if end + rec <= wrap else 0
    return Measure(count, count * rec, time.perf_counter() - t0)


def cpu_scan_ref(target: PopulatedMapping, body_size: int, count: int) -> Measure:
    """Walk records laid down by `cpu_append_ref`: unpack the header, CRC the body, advance."""
    rec = RECORD_HEADER.size + body_size
    wrap = target.size - target.size % rec
    mv = memoryview(target.mm)
    unpack_from, crc32 = RECORD_HEADER.unpack_from, body_crc32
    bad = pos = 0
    t0 = time.perf_counter()
    try:
        for _ in range(count):
            h = unpack_from(mv, pos)
            end = pos + 88 + h[14]
            if crc32(mv[pos + 88:end]) & 0x7FFFFFFF != h[2]:
                bad += 1
            pos = end if end + rec <= wrap else 0
        seconds = time.perf_counter() - t0
    finally:
        mv.release()
    if bad:
        raise RuntimeError(f"cpu_scan_ref: {bad} records failed their CRC")
    return Measure(count, count * rec, seconds)


def cpu_refs(directory: str, body_sizes, count: int, reps: int = 3,
             mapping_bytes: int = 256 * MiB) -> dict:
    """{body_size: {"append": Measure, "scan": Measure}}, each the best of `reps` runs."""
    target = PopulatedMapping(directory, mapping_bytes)
    out = {}
    try:
        for size in body_sizes:
            n = count if size >= 1024 else count * 2
            cpu_append_ref(target, size, n)                     # lay records down for the scan
            app = best_of([cpu_append_ref(target, size, n) for _ in range(reps)])
            scan = best_of([cpu_scan_ref(target, size, n) for _ in range(reps)])
            out[size] = {"append": app, "scan": scan}
    finally:
        target.close()
    return out


def merge_best(a: dict, b: dict) -> dict:
    """Two `cpu_refs` results (e.g. from the start and the end of a run) -> the best of each."""
    return {size: {kind: best_of([a[size][kind], b[size][kind]]) for kind in a[size]} for size in a}


def median_by(runs: list, rate) -> dict:
    """The run of median `rate` (an odd number of runs)."""
    return sorted(runs, key=rate)[len(runs) // 2]


# The result table lives in _table; re-exported so that callers keep using `L.<name>`.
from _table import (  # noqa: E402,F401
    Row, fmt_mb, fmt_ratio, fmt_rate, print_aligned, print_table, spread, write_json,
)
