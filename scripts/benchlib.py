"""What the benchmarks' Python sides (scripts/bench_*.py) share, written
once: medians and table cells, the load average, a process's CPU and
memory from /proc, the machine's CPU, dropping caches, mounting and
unmounting featurefs, its stats file, an S3 client, timing `ls -l`. The
header of a bench file (commit, machine, command, load) is the harness's
(scripts/bench.sh), never a script's."""
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def med(xs):
    """The median of xs."""
    return statistics.median(xs)


def cell(xs, fmt="{:.2f}"):
    """A table cell: the median of xs, then its min-max in parentheses."""
    return f"{fmt.format(med(xs))} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def span(xs, unit=""):
    """min-max of xs."""
    return f"{min(xs):.2f}-{max(xs):.2f}{unit}"


def loadavg():
    """The 1-minute load average (the machine's cores are shared)."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def loadavg3():
    """The 1, 5 and 15-minute load averages, as /proc/loadavg says them."""
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def proc_cpu(pid):
    """CPU seconds (utime + stime) of process pid, all its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # fields 14 and 15 of stat(5)


def proc_status(pid, key):
    """A /proc/PID/status memory field (VmRSS, VmHWM) in bytes, 0 if absent."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def proc_read_bytes(pid):
    """Bytes process pid caused to be read from storage (/proc/PID/io
    read_bytes): what the page cache did not hold."""
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return 0


def self_cpu():
    """CPU seconds (user + system) of this process and of its reaped children."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime


def machine_cpu():
    """(busy, total) CPU seconds of the whole machine so far (/proc/stat's
    cpu line: busy is everything but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    total = sum(v[:8])
    return (total - v[3] - v[4]) / TICK, total / TICK


def drop_caches():
    """Write back and drop the page cache, dentries and inodes (root)."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def drop_pages(root):
    """fdatasync and POSIX_FADV_DONTNEED every file under root: its pages
    leave the page cache. Returns how many files."""
    n = 0
    for d, _, fs in os.walk(root):
        for f in fs:
            try:
                fd = os.open(os.path.join(d, f), os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                n += 1
            finally:
                os.close(fd)
    return n


def files_under(root, suffix=".npy"):
    """The sorted paths of the files under root whose names end in suffix."""
    out = []
    for d, _, fs in os.walk(root):
        out += [os.path.join(d, f) for f in fs if f.endswith(suffix)]
    return sorted(out)


def mount(cmd, mnt=None):
    """Run `featurefs mount ...` (cmd, which daemonizes) and return the
    serving process's pid from its output; with mnt, also wait (at most
    180 s) until mnt is a mount point. Exits with the mount's error."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"featurefs mount failed ({r.returncode}): {r.stderr}")
    m = re.search(r"\(pid (\d+),", r.stdout + r.stderr)
    if not m:
        sys.exit(f"featurefs mount: no pid in its output: {r.stdout}{r.stderr}")
    if mnt:
        deadline = time.monotonic() + 180
        while not os.path.ismount(mnt):
            if time.monotonic() > deadline:
                sys.exit(f"{mnt} not mounted after 180s")
            time.sleep(0.1)
    return int(m.group(1))


def s3_client(endpoint, attempts=3):
    """A boto3 S3 client of the benchmark's MinIO."""
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        config=Config(retries={"max_attempts": attempts}, max_pool_connections=16))


def ls_l(path):
    """(seconds, entries) of one `ls -l path` (LC_ALL=C); exits if ls fails."""
    t0 = time.perf_counter()
    r = subprocess.run(["ls", "-l", path], capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"})
    if r.returncode != 0:
        sys.exit(f"ls -l {path}: {r.stderr}")
    return time.perf_counter() - t0, len(r.stdout.splitlines()) - 1


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
