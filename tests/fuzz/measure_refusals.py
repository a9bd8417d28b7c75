"""Measures (does not assert) how fast and in how little memory `spindle info`
refuses each malformed GGUF variant of tests/gguf/variants.py.
    build/venv/bin/python tests/fuzz/measure_refusals.py [SPINDLE]   (default build/spindle)
Prints a Markdown table: variant, exit status, wall milliseconds, peak RSS
(GNU time's %M), and a summary line.  The pass/fail
checks on the same files live in tests/py/test_gguf.py."""
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "gguf"))
import variants  # noqa: E402


TIME = "/usr/bin/time"  # GNU time (Debian package `time`)


def run(argv, tmp):
    """(exit status, wall seconds, peak RSS KiB, stderr).  The peak RSS is
    GNU time's %M (ru_maxrss of spindle, forked from the small `time`
    process): a child forked from this Python process would also count
    Python's own pages."""
    out = os.path.join(tmp, "time.out")
    t0 = time.monotonic()
    p = subprocess.run([TIME, "-f", "%M", "-o", out] + argv, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
    secs = time.monotonic() - t0
    with open(out) as f:
        rss = int(f.read().split()[-1])
    return p.returncode, secs, rss, p.stderr.decode("utf-8", "replace")


def main():
    spindle = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "spindle"))
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name, expect, mutate, post in variants.variant_list():
            path = os.path.join(d, name + ".gguf")
            data = variants.build_variant(mutate, post)
            with open(path, "wb") as f:
                f.write(data)
            rc, secs, rss, err = run([spindle, "info", "-m", path], d)
            rows.append((name, len(data), rc, secs, rss, len(err.strip().splitlines())))
    print("| variant | bytes | exit | ms | peak RSS KiB | stderr lines |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, n, rc, secs, rss, lines in rows:
        print("| %s | %d | %d | %.1f | %d | %d |" % (name, n, rc, secs * 1000, rss, lines))
    ms = sorted(r[3] * 1000 for r in rows)
    rss = sorted(r[4] for r in rows)
    refused = sum(1 for r in rows if r[2] == 2 and r[5] == 1)
    print()
    print("%s: %d/%d refused with exit 2 and one line; wall ms median %.1f max %.1f; "
          "peak RSS KiB median %d max %d" % (os.path.relpath(spindle, ROOT), refused, len(rows),
                                             ms[len(ms) // 2], ms[-1], rss[len(rss) // 2], rss[-1]))


if __name__ == "__main__":
    main()
