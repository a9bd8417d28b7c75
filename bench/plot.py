#!/usr/bin/env python3
"""bench/plot.py: sweeps `spindle bench` and plots tokens/s

  * against prompt length (prefill of one p-token prompt in one batch), and
  * against the number of concurrent sequences B (aggregate decode rate),

for one or more models, into one PNG.  The sweep results are also written as
JSON next to the PNG so a table can be rebuilt without rerunning.

usage: build/plot-venv/bin/python bench/plot.py [-m MODEL ...] [-t 2] [-r 3]
           [--prompts 64,128,256,512,1024] [--batches 1,2,4,8,16]
           [-o docs/performance.png] [--from-json FILE]
Needs matplotlib (install it into a venv of its own, e.g. build/plot-venv).
Each point is the median of -r repetitions of `spindle bench -r 1`.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPINDLE = os.path.join(ROOT, "build", "spindle")


def bench(model, threads, reps, extra):
    """Median prefill and decode tokens/s of `reps` single-repetition runs."""
    pp, tg = [], []
    for _ in range(reps):
        out = subprocess.run([SPINDLE, "bench", "-m", model, "-t", str(threads), "-r", "1", "--json"] + extra,
                             check=True, capture_output=True, text=True).stdout
        d = json.loads(out)
        pp.append(d["prefill_tokens_per_s"])
        tg.append(d["decode_tokens_per_s"])
    return statistics.median(pp), statistics.median(tg)


def sweep(args, model):
    res = {"model": os.path.basename(model), "threads": args.t, "prefill": [], "batch": []}
    for p in args.prompts:
        pp, _ = bench(model, args.t, args.r, ["-p", str(p), "-n", "4"])
        res["prefill"].append([p, pp])
        print("%s prefill p=%d: %.1f tokens/s" % (res["model"], p, pp), file=sys.stderr, flush=True)
    for b in args.batches:
        _, tg = bench(model, args.t, args.r, ["-p", "16", "-n", str(args.n), "-B", str(b)])
        res["batch"].append([b, tg])
        print("%s decode B=%d: %.1f tokens/s aggregate" % (res["model"], b, tg), file=sys.stderr, flush=True)
    return res


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for r in results:
        x, y = zip(*r["prefill"])
        a1.plot(x, y, marker="o", label=r["model"])
        x, y = zip(*r["batch"])
        a2.plot(x, y, marker="o", label=r["model"])
    a1.set_xscale("log", base=2)
    a1.set_xlabel("prompt length (tokens, one batch)")
    a1.set_ylabel("prefill tokens/s")
    a1.set_title("Prefill vs prompt length (%d threads)" % results[0]["threads"])
    a2.set_xscale("log", base=2)
    a2.set_xlabel("concurrent sequences B")
    a2.set_ylabel("aggregate decode tokens/s")
    a2.set_title("Batched decode vs sequences (%d threads)" % results[0]["threads"])
    for a in (a1, a2):
        a.grid(True, alpha=0.3)
        a.legend()
        a.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", action="append")
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("-n", type=int, default=32, help="decode tokens per sequence in the B sweep")
    ap.add_argument("--prompts", default="64,128,256,512,1024")
    ap.add_argument("--batches", default="1,2,4,8,16")
    ap.add_argument("-o", "--out", default=os.path.join(ROOT, "docs", "performance.png"))
    ap.add_argument("--from-json", help="plot saved results instead of running the sweep")
    args = ap.parse_args()
    args.prompts = [int(x) for x in args.prompts.split(",")]
    args.batches = [int(x) for x in args.batches.split(",")]
    if args.from_json:
        with open(args.from_json) as f:
            results = json.load(f)
    else:
        models = args.model or [subprocess.run([os.path.join(ROOT, "scripts", "fetch-model"), name], check=True,
                                               capture_output=True, text=True).stdout.strip()
                                for name in ("smollm2-135m", "gemma3-270m")]
        results = [sweep(args, m) for m in models]
        with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
            json.dump(results, f, indent=1)
    plot(results, args.out)
    print(args.out)


if __name__ == "__main__":
    sys.exit(main())
