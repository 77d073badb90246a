"""What benchmarks/embedded.py prints at the end: the limits measured in the run (every
sample), the result table with its ratios, and the SQLite peer table."""
from __future__ import annotations

import _limits as L
from _limits import MiB, size_name
from _sqlite_peer import print_peers


def print_report(bench) -> None:
    """The limits measured, the result table and the SQLite peer table of an EmbeddedBench."""
    print()
    print("limits measured in this run (MB/s, median [min-max]):")
    writes = bench.samples["write"]
    print(f"  write  os.write 1 MiB chunks + fdatasync, fallocated file: {L.spread(writes)}"
          f" over {len(writes)} runs (each row uses the better of its two)")
    growth = bench.samples["page_growth_us_per_page"]
    print(f"  growth os.write 1 MiB chunks into one new {L.GROWTH_BYTES // MiB} MiB file, µs of CPU "
          f"per 4 KiB page, {L.GROWTH_BLOCK // MiB} MiB at a time: "
          f"{', '.join(f'{c:.1f}' for c in growth)} (a store keeps its "
          f"pages cached, so it pays the later blocks' price; see benchmarks/README.md)")
    for s in bench.samples["slice_copy"]:
        print(f"  slice  mmap record -> bytes, {size_name(s['body'])} records (best of 3): "
              f"{L.fmt_rate(s['records_per_s'])} records/s = {s['mb_per_s']:,.0f} MB/s")
    print(f"  bulk   64 MiB memcpy out of the segments (best of 3 per store): "
          f"{L.spread([s['mb_per_s'] for s in bench.samples['bulk_copy']])}")
    by_size: dict[int, list[float]] = {}
    for f in bench.samples["fsync"]:
        by_size.setdefault(f["op_bytes"], []).append(f["ops_per_s"])
    for op_bytes, rates in by_size.items():
        print(f"  fsync  pwrite {op_bytes:,} B + fdatasync, per second: "
              + ", ".join(f"{r:,.0f}" for r in rates))
    for size, m in bench.cpu.items():
        print(f"  CPU floor {size_name(size)} (best of start and end): append (88 B header "
              f"pack_into + crc32 + body copy into a populated mmap) "
              f"{L.fmt_rate(m['append'].ops_per_s)} records/s; "
              f"scan (unpack + crc32) {L.fmt_rate(m['scan'].ops_per_s)} records/s")
    print()
    L.print_table(bench.rows)
    print()
    print("ratio = our MB/s / the limit's MB/s; vs floor = our msgs/s / the CPU floor's records/s "
          "(append floor for puts, scan floor for decoded gets and recovery, slice-copy "
          "records/s for raw gets); a SYNC row's target is against its fdatasync limit.")
    print()
    print_peers(bench.peer_rows)
    for note in bench.notes:
        print(f"  {note}")
