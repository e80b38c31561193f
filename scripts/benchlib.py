"""Helpers the mount benchmarks' Python sides share (bench_delivery.py,
bench_epoch.py, bench_scale.py, bench_augment.py, bench_archive_index.py):
the load average, the mount's stats file, unmounting, medians."""
import json
import os
import statistics
import subprocess
import time


def med(xs):
    """The median of xs."""
    return statistics.median(xs)


def cell(xs, fmt="{:.2f}"):
    """A table cell: the median of xs, then its min-max in parentheses."""
    return f"{fmt.format(med(xs))} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def loadavg():
    """The 1-minute load average (the machine's cores are shared)."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def read_stats(mnt):
    """The mount's stats file (MOUNT/.featurefs/stats), parsed."""
    with open(os.path.join(mnt, ".featurefs", "stats")) as f:
        return json.load(f)


def unmount(mnt, pid):
    """umount mnt and wait (at most 30 s) for the serving process pid to exit."""
    subprocess.run(["umount", mnt], check=False)
    for _ in range(300):
        if pid is None:
            break
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
