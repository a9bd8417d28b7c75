#!/usr/bin/env python3
"""bench/schemas: real-world JSON Schemas through spindle and llguidance, side by side.

    build/venv/bin/pip install llguidance==1.9.1      # once (not part of make test)
    make build/schema_judge
    build/venv/bin/python bench/schemas/run.py DIR [--per-set N] [--out results.jsonl]

DIR is a checkout (or `git archive`) of github.com/guidance-ai/jsonschemabench
(its maskbench/data is read: one file per schema, with valid and invalid
instances) or that data folder itself.  The repository states no license:
nothing of it is committed here; point the bench at a copy outside the tree.

For each schema both engines compile it, then every instance (serialized as
MaskBench does: json.dumps(data), ", " and ": " separators) is tokenized with
the model's tokenizer (spindle's, SmolLM2-135M by default) and walked token
by token: before each token the mask is computed (timed) and the token must
be in it; the instance is accepted when every token was allowed and the whole
text is a sentence.  The same token ids go to both engines.  spindle's masks
are timed in wall and CPU time (the judge thread's: steadier on a loaded
machine), and each instance is replayed on another fresh copy of the grammar:
the first pass pays each state's first visit (its token walks, shared by
copies), the replay shows the steady cost of a fresh copy's masks.

spindle runs in build/schema_judge (the public API, one process for the whole
run, restarted after a crash or a hang); its grammar is compiled with flexible
whitespace (the instances have spaces) and a compile is cancelled after
--compile-timeout seconds.  spindle is judged twice: by its grammar alone,
and as it answers a request (the grammar and then the validator on the
finished text, sp_grammar_check_text: an invalid output the grammar let
through is caught there and retried).  llguidance is llguidance's LLMatcher
(its JSON Schema compiler, default options: flexible whitespace) with an
LLTokenizer made from the same GGUF's token bytes (read through spindle,
control tokens marked with a 0xFF prefix as llguidance.llamacpp does, and
text tokenized by spindle's tokenizer, llama.cpp's algorithm).

A schema is fully correct when it compiles and every instance is judged
right; as in MaskBench, a schema without instances counts when it compiles.
"""
import argparse
import json
import os
import random
import re
import select
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def set_of(name):
    """The set a MaskBench file belongs to: 'Github_easy---o123.json' ->
    Github_easy, 'BFCL_simple_12.json' -> BFCL_simple."""
    if "---" in name:
        return name.split("---", 1)[0]
    return re.sub(r"_\d+\.json$", "", name)


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


class Judge:
    """schema_judge, restarted after a crash or a timeout."""

    def __init__(self, exe, model):
        self.exe, self.model = exe, model
        self.p = None
        self.buf = b""
        self.start()

    def start(self):
        self.p = subprocess.Popen([self.exe, self.model], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL)
        self.buf = b""

    def kill(self):
        if self.p:
            self.p.kill()
            self.p.wait()
        self.start()

    def line(self, timeout):
        """One reply line; None on timeout ('timeout') or exit ('crash')."""
        end = time.monotonic() + timeout
        fd = self.p.stdout.fileno()
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0:
                return "timeout"
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return "crash"
            self.buf += chunk
        ln, self.buf = self.buf.split(b"\n", 1)
        return ln.decode("utf-8", "replace")

    def send(self, head, body=b""):
        try:
            self.p.stdin.write(head.encode() + b"\n" + body)
            self.p.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def vocab(self):
        self.send("V")
        n, eos = map(int, self.line(60).split()[1:3])
        toks, special = [], []
        for i in range(n):
            sp, hx = self.line(60).split(" ", 1)
            b = b"" if hx == "-" else bytes.fromhex(hx)
            if sp == "1":
                special.append(i)
                b = b"\xff" + b
            toks.append(b)
        return toks, special, eos

    def compile(self, text, kind, timeout):
        body = text.encode()
        if not self.send(f"S {kind} {len(body)} {int(timeout * 1000)}", body):
            self.kill()
            return "crash", 0.0, "judge exited"
        ln = self.line(timeout + 30)
        if ln in ("timeout", "crash"):
            self.kill()
            return ln, 0.0, 0.0, ln
        _, ok, us, cpu_us, msg = ln.split(" ", 4)
        return ("ok" if ok == "1" else "refused"), float(us), float(cpu_us), msg

    def tokenize(self, b):
        if not self.send(f"T {len(b)}", b):
            raise RuntimeError("schema_judge exited")
        ln = self.line(60)
        if ln in ("timeout", "crash"):
            self.kill()
            raise RuntimeError("schema_judge: " + ln)
        t = ln.split(" ", 1)[1]
        return [] if t == "-" else [int(x) for x in t.split(",")]

    def instance(self, text, timeout):
        body = text.encode()
        if not self.send(f"I {len(body)}", body):
            self.kill()
            return "crash", None
        ln = self.line(timeout)
        if ln in ("timeout", "crash"):
            self.kill()
            return ln, None
        _, g, c, toks, us, cpu, rus, rcpu, why = ln.split(" ", 8)
        toks = [] if toks == "-" else [int(t) for t in toks.split(",")]
        fl = lambda v: [] if v == "-" else [float(u) for u in v.split(",")]
        return "ok", {"grammar": g == "1", "check": c == "1", "tokens": toks, "mask_us": fl(us),
                      "mask_cpu_us": fl(cpu), "replay_us": fl(rus), "replay_cpu_us": fl(rcpu), "why": why}


class Llg:
    def __init__(self, toks, special, eos, tokenize):
        import llguidance

        class Vocab:
            """What llguidance.TokenizerWrapper reads; text is tokenized by
            spindle (llguidance tokenizes forced text itself and allows only
            that tokenization there, so it must be the model's)."""
            eos_token_id, bos_token_id, tokens, special_token_ids = eos, None, toks, special

            def __call__(self, s):
                return tokenize(s if isinstance(s, bytes) else s.encode())

        self.llg = llguidance
        self.tok = llguidance.LLTokenizer(llguidance.TokenizerWrapper(Vocab()))
        self.m0 = None

    def compile(self, text):
        t0 = time.monotonic()
        try:
            g = self.llg.LLMatcher.grammar_from_json_schema(text)
            m = self.llg.LLMatcher(self.tok, g, log_level=0)
        except Exception as e:  # a schema llguidance's front end refuses
            return "refused", (time.monotonic() - t0) * 1e6, repr(e)
        us = (time.monotonic() - t0) * 1e6
        if m.is_error():
            return "refused", us, m.get_error()
        self.m0 = m
        return "ok", us, ""

    def instance(self, tokens):
        m = self.m0.deep_copy()
        us = []
        ok = True
        for t in tokens:
            a = time.monotonic()
            mask = m.compute_bitmask()
            us.append((time.monotonic() - a) * 1e6)
            if not (mask[t >> 3] >> (t & 7)) & 1:
                ok = False
                break
            m.consume_token(t)
        return {"grammar": ok and m.is_accepting(), "mask_us": us}


def failure_point(vocab, tokens, walked):
    """The text up to the token a grammar refused, for the failure report."""
    b = b"".join(vocab[t] for t in tokens[:walked])
    return b.decode("utf-8", "replace")


def run(args):
    data = args.dir
    if os.path.isdir(os.path.join(data, "maskbench", "data")):
        data = os.path.join(data, "maskbench", "data")
    files = sorted(f for f in os.listdir(data) if f.endswith(".json"))
    by_set = {}
    for f in files:
        by_set.setdefault(set_of(f), []).append(f)
    if args.sets:
        keep = args.sets.split(",")
        by_set = {k: v for k, v in by_set.items() if k in keep}
    if args.files:
        with open(args.files) as fh:
            keep = set(fh.read().split())
        by_set = {k: [f for f in v if f in keep] for k, v in by_set.items()}
        by_set = {k: v for k, v in by_set.items() if v}
    rng = random.Random(args.seed)
    for k in by_set:
        if args.per_set and len(by_set[k]) > args.per_set:
            by_set[k] = sorted(rng.sample(by_set[k], args.per_set))
    exe = os.path.join(ROOT, "build", "schema_judge")
    model = args.model or subprocess.check_output([os.path.join(ROOT, "scripts", "fetch-model"), "smollm2-135m"],
                                                  text=True).strip()
    judge = Judge(exe, model)
    vocab, special, eos = judge.vocab()
    llg = Llg(vocab, special, eos, judge.tokenize) if "llguidance" in args.engines else None
    out = open(args.out, "w") if args.out else None
    kind = "f" if args.whitespace == "flexible" else "c"
    seps = (", ", ": ") if args.whitespace == "flexible" else (",", ":")
    t_start = time.monotonic()
    results = []
    for s in sorted(by_set):
        for f in by_set[s]:
            with open(os.path.join(data, f), encoding="utf-8") as fh:
                d = json.load(fh)
            text = json.dumps(d["schema"], ensure_ascii=False)
            tests = [] if args.compile_only else \
                [(t["valid"], json.dumps(t["data"], ensure_ascii=False, separators=seps)) for t in d["tests"]]
            r = {"file": f, "set": s, "tests": len(tests)}
            st, us, cpu_us, msg = judge.compile(text, kind, args.compile_timeout)
            r["sp"] = {"status": st, "compile_us": us, "compile_cpu_us": cpu_us, "msg": msg, "inst": []}
            toks_of = []
            for valid, inst in tests:
                ist, res = judge.instance(inst, args.instance_timeout)
                if ist != "ok":
                    # the tokens for llguidance come from a fresh judge (no grammar)
                    r["sp"]["inst"].append({"valid": valid, "status": ist})
                    _, res2 = judge.instance(inst, args.instance_timeout)
                    toks_of.append(res2["tokens"] if res2 else [])
                    if st == "ok":
                        r["sp"]["status"] = ist  # the grammar is gone with the process
                        st = ist
                    continue
                toks_of.append(res["tokens"])
                e = {"valid": valid, "status": "ok", "grammar": res["grammar"], "check": res["check"],
                     "mask_us": res["mask_us"] if st == "ok" else []}
                if st == "ok":
                    for k in ("mask_cpu_us", "replay_us", "replay_cpu_us"):
                        e[k] = res[k]
                if st == "ok" and valid and not res["grammar"]:
                    e["at"] = failure_point(vocab, res["tokens"], len(res["mask_us"]))[-80:]
                if st == "ok" and (valid != res["check"]):
                    e["why"] = res["why"][:300]
                r["sp"]["inst"].append(e)
            if llg:
                st, us, msg = llg.compile(text)
                r["llg"] = {"status": st, "compile_us": us, "msg": msg[:300], "inst": []}
                if st == "ok":
                    for (valid, _), toks in zip(tests, toks_of):
                        res = llg.instance(toks)
                        r["llg"]["inst"].append({"valid": valid, "status": "ok", "grammar": res["grammar"],
                                                 "mask_us": res["mask_us"]})
            results.append(r)
            if out:
                slim = json.loads(json.dumps(r))
                for k in ("sp", "llg"):
                    for e in slim.get(k, {}).get("inst", []):
                        for t in ("mask_us", "mask_cpu_us", "replay_us", "replay_cpu_us"):
                            e.pop(t, None)
                out.write(json.dumps(slim) + "\n")
                out.flush()
        print(f"# {s}: {len(by_set[s])} schemas, {time.monotonic() - t_start:.0f} s so far", file=sys.stderr)
    report(results, args)


def score(r, eng, mode):
    """(status, wrong_accept, wrong_reject) of one schema for one engine;
    mode 'grammar' or 'checked' (grammar, then spindle's validator)."""
    e = r.get(eng)
    if e is None:
        return None
    if e["status"] in ("timeout", "crash"):
        return "crash", 0, 0
    if e["status"] != "ok":
        return "refused", 0, 0
    wa = wr = 0
    for i in e["inst"]:
        if i["status"] != "ok":
            return "crash", 0, 0
        acc = i["grammar"] and (i["check"] if mode == "checked" else True)
        if acc and not i["valid"]:
            wa += 1
        if not acc and i["valid"]:
            wr += 1
    return "ok", wa, wr


def row(rs, eng, mode):
    n = len(rs)
    ok = ref = crash = wa = wr = 0
    comp, cpu, masks, mcpu, steady = [], [], [], [], []
    for r in rs:
        st, a, b = score(r, eng, mode)
        ref += st == "refused"
        crash += st == "crash"
        wa += a
        wr += b
        ok += st == "ok" and a == 0 and b == 0
        e = r[eng]
        if e["status"] == "ok":
            comp.append(e["compile_us"] / 1e3)
            if "compile_cpu_us" in e:
                cpu.append(e["compile_cpu_us"] / 1e3)
            for i in e["inst"]:
                masks.extend(i.get("mask_us", []))
                mcpu.extend(i.get("mask_cpu_us", []))
                steady.extend(i.get("replay_cpu_us", []))
    f = lambda v, d: "-" if v is None else f"{v:.{d}f}"
    return (f"{100.0 * ok / n:.1f}", ref, wa, wr, crash, f"{f(pct(comp, .5), 2)} / {f(pct(comp, .99), 1)}",
            f"{f(pct(cpu, .5), 2)} / {f(pct(cpu, .99), 1)}", f"{f(pct(masks, .5), 1)} / {f(pct(masks, .99), 0)}",
            f"{f(pct(mcpu, .5), 1)} / {f(pct(mcpu, .99), 0)}", f"{f(pct(steady, .5), 1)} / {f(pct(steady, .99), 0)}")


def report(results, args):
    sets = sorted({r["set"] for r in results})
    print("| set | schemas | engine | fully correct % | refused | wrong-accept | wrong-reject | crash/timeout "
          "| compile p50 / p99 ms | compile CPU p50 / p99 ms | mask p50 / p99 µs | mask CPU p50 / p99 µs "
          "| replay mask CPU p50 / p99 µs |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    engines = [("sp", "checked", "spindle"), ("sp", "grammar", "spindle grammar alone")]
    if "llguidance" in args.engines:
        engines.append(("llg", "grammar", "llguidance"))
    for s in sets + ["all"]:
        rs = [r for r in results if s == "all" or r["set"] == s]
        for eng, mode, name in engines:
            c = row(rs, eng, mode)
            print(f"| {s if name == 'spindle' else ''} | {len(rs) if name == 'spindle' else ''} | {name} | "
                  + " | ".join(str(x) for x in c) + " |")
    failures(results)


def failures(results):
    """spindle's failure classes: refusals by message (paths and names cut),
    wrong verdicts by the validator's reason or the grammar's stop."""
    norm = lambda m: re.sub(r"'[^']*'|\"[^\"]*\"|\$[.\w\[\]/~-]*|\d+", "_", m)[:110]
    classes = {}
    for r in results:
        e = r["sp"]
        if e["status"] == "refused":
            classes.setdefault("refused: " + norm(e["msg"]), []).append(r["file"])
        elif e["status"] != "ok":
            classes.setdefault(e["status"], []).append(r["file"])
        else:
            for i in e["inst"]:
                if i["status"] != "ok":
                    continue
                if i["valid"] and not i["grammar"]:
                    classes.setdefault("grammar wrong-reject", []).append(r["file"])
                if i["valid"] and not i["check"]:
                    classes.setdefault("check wrong-reject: " + norm(i.get("why", "")), []).append(r["file"])
                if not i["valid"] and i["grammar"] and i["check"]:
                    classes.setdefault("wrong-accept", []).append(r["file"])
    print("\nspindle failure classes (instances or schemas; first files):", file=sys.stderr)
    for k, v in sorted(classes.items(), key=lambda kv: -len(kv[1]))[:25]:
        print(f"{len(v):5d}  {k}  [{', '.join(sorted(set(v))[:3])}]", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="jsonschemabench checkout or its maskbench/data")
    ap.add_argument("--model", help="GGUF whose vocabulary is used (default: scripts/fetch-model smollm2-135m)")
    ap.add_argument("--per-set", type=int, default=0, help="sample at most N schemas per set (0: all)")
    ap.add_argument("--sets", help="comma-separated sets to run (default: all)")
    ap.add_argument("--files", help="a file listing the schema files to run (names, whitespace-separated)")
    ap.add_argument("--seed", type=int, default=1, help="sampling seed")
    ap.add_argument("--compile-timeout", type=float, default=10.0, help="seconds per spindle compile")
    ap.add_argument("--instance-timeout", type=float, default=30.0, help="seconds per spindle instance")
    ap.add_argument("--whitespace", choices=("flexible", "compact"), default="flexible",
                    help="flexible: MaskBench's serialization, spindle's flexible grammar; compact: no spaces")
    ap.add_argument("--engines", default="spindle,llguidance")
    ap.add_argument("--compile-only", action="store_true",
                    help="compile each schema, judge no instance: the compile times of the whole corpus in "
                         "minutes (the correctness columns then count compiled schemas only)")
    ap.add_argument("--out", help="per-schema results, one JSON line each")
    run(ap.parse_args())


if __name__ == "__main__":
    main()
