"""What an `fdatasync` costs by how the file grows: issue 15.1's question, whether a
preallocated segment (so that `fdatasync` need not journal a size change) pays.

    python3 benches/python/fdatasync_layout.py [DIR] [--records N] [--rounds R]

In DIR (default: the current folder; use the file system the audit log lives on), for each
record size of an allowed call's audit records (about 800 bytes a record, four a call:
3,100 bytes), writes N records one `write` each, each followed by an `fdatasync`, and
prints the median and 90th percentile of the `fdatasync` in microseconds, for four layouts:

- `append`: `O_APPEND`, the file grows by every write (what the audit log does today; the
  sync commits the journal for the new size);
- `keep-size`: as `append`, into blocks reserved past the end with
  `fallocate(FALLOC_FL_KEEP_SIZE)` (the size still changes);
- `fallocate`: writes in place over `posix_fallocate`d blocks (unwritten extents: the first
  write to each still changes the extent tree);
- `zero-filled`: writes in place over blocks written with zeros and synced beforehand
  (nothing but data changes: what a preallocated segment would do).

Rounds alternate the layouts, so a change in the disk's speed falls on all of them. Standard
library only.
"""

import ctypes
import os
import statistics
import sys
import time

FALLOC_FL_KEEP_SIZE = 1
LAYOUTS = ("append", "keep-size", "fallocate", "zero-filled")


def one(folder: str, layout: str, size: int, records: int) -> list[float]:
    path = os.path.join(folder, f".fdatasync-layout-{os.getpid()}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    if layout in ("append", "keep-size"):
        flags |= os.O_APPEND
    fd = os.open(path, flags, 0o600)
    try:
        total = size * records + 4096
        if layout == "keep-size":
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.fallocate(fd, FALLOC_FL_KEEP_SIZE, ctypes.c_long(0), ctypes.c_long(total)):
                raise OSError(ctypes.get_errno(), "fallocate(FALLOC_FL_KEEP_SIZE)")
        elif layout == "fallocate":
            os.posix_fallocate(fd, 0, total)
        elif layout == "zero-filled":
            os.write(fd, b"\0" * total)
            os.lseek(fd, 0, os.SEEK_SET)
        os.fsync(fd)
        line = b"x" * (size - 1) + b"\n"
        times = []
        for _ in range(records):
            os.write(fd, line)
            start = time.perf_counter_ns()
            os.fdatasync(fd)
            times.append((time.perf_counter_ns() - start) / 1000)
        return times
    finally:
        os.close(fd)
        os.unlink(path)


def main() -> None:
    args = sys.argv[1:]
    folder = "."
    records, rounds = 400, 3
    while args:
        arg = args.pop(0)
        if arg == "--records":
            records = int(args.pop(0))
        elif arg == "--rounds":
            rounds = int(args.pop(0))
        else:
            folder = arg
    print(f"fdatasync µs (median / p90) in {os.path.abspath(folder)}, {records} records a round")
    print(f"{'bytes':>6}  " + "  ".join(f"{name:>17}" for name in LAYOUTS))
    for size in (800, 3100, 12400):
        samples = {name: [] for name in LAYOUTS}
        for _ in range(rounds):
            for name in LAYOUTS:
                samples[name].extend(one(folder, name, size, records))
        cells = []
        for name in LAYOUTS:
            times = sorted(samples[name])
            p90 = times[int(len(times) * 0.9)]
            cells.append(f"{statistics.median(times):8.0f} / {p90:6.0f}")
        print(f"{size:>6}  " + "  ".join(f"{cell:>17}" for cell in cells))


if __name__ == "__main__":
    main()
