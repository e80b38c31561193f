"""Helpers the mount benchmarks' Python sides share (bench_delivery.py,
bench_epoch.py): the load average, the mount's stats file, unmounting."""
import json
import os
import subprocess
import time


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
