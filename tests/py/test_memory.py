"""Memory you can predict: `spindle info --ctx N --parallel P` gives the peak
resident memory of `spindle run` and `spindle serve` with the same settings
within 10 %; the server reports its memory in /metrics; --mlock runs."""
import concurrent.futures
import re

import pytest

from server_util import Server


def _info(run_spindle, model, *args):
    r = run_spindle("info", "-m", model, "-t", "2", *args)
    assert r.returncode == 0, r.stderr
    mib = {}
    for part in ("weights", "KV cache", "scratch", "runtime", "peak", "peak serve"):
        m = re.search(r"^  %s +([0-9.]+) MiB" % part, r.stdout, re.M)
        assert m, r.stdout
        mib[part] = float(m.group(1))
    return mib


def _run_peak(r):
    m = re.search(r"peak memory: ([0-9.]+) MiB", r.stderr)
    assert m, r.stderr
    return float(m.group(1))


@pytest.mark.parametrize("model,ctx", [("smollm2", 4096), ("gemma3", 2048)])
def test_info_predicts_run(run_spindle, smollm2_path, gemma3_path, model, ctx):
    path = smollm2_path if model == "smollm2" else gemma3_path
    want = _info(run_spindle, path, "--ctx", ctx)
    assert want["KV cache"] > 10 and want["weights"] > 50
    r = run_spindle("run", "-m", path, "-p", "Once upon a time", "-n", "16", "--ctx", ctx, "-t", "2")
    assert r.returncode == 0, r.stderr
    got = _run_peak(r)
    assert abs(got / want["peak"] - 1) < 0.10, (got, want)


def test_info_kv_grows_with_context(run_spindle, smollm2_path):
    a = _info(run_spindle, smollm2_path, "--ctx", "1024")
    b = _info(run_spindle, smollm2_path, "--ctx", "4096")
    # 30 layers x 3 KV heads x 64 x 2 (K, V) x 2 bytes = 23,040 bytes a position (+ spare blocks)
    assert 3 * 1024 * 23040 / 2**20 * 0.98 < b["KV cache"] - a["KV cache"] < 3 * 1024 * 23040 / 2**20 * 1.05


def test_info_predicts_serve_and_metrics(run_spindle, spindle_bin, smollm2_path):
    want = _info(run_spindle, smollm2_path, "--ctx", "2048", "--parallel", "2")
    srv = Server(spindle_bin, smollm2_path, "--ctx", "2048", "--parallel", "2", "-t", "2")
    try:
        body = {"model": srv.model_id, "prompt": "The history of clocks", "max_tokens": 24, "temperature": 0}
        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            for r in ex.map(lambda _: srv.post("/v1/completions", body), range(2)):
                assert r.status_code == 200, r.text
        with open("/proc/%d/status" % srv.proc.pid) as f:
            hwm = int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1)) / 1024
        assert abs(hwm / want["peak serve"] - 1) < 0.10, (hwm, want)
        m = srv.metrics()
        assert abs(m["spindle_memory_kv_bytes"] / 2**20 - want["KV cache"]) < 0.1
        assert abs(m["spindle_memory_weights_bytes"] / 2**20 - want["weights"]) < 0.1
        assert m["spindle_memory_scratch_bytes"] > 0
        assert abs(m["spindle_memory_resident_bytes"] / 2**20 / want["peak serve"] - 1) < 0.10
    finally:
        srv.stop()


def test_mlock(run_spindle, smollm2_path):
    # CI runs as root, which may lock any amount (CAP_IPC_LOCK)
    r = run_spindle("run", "-m", smollm2_path, "-p", "Hi", "-n", "2", "--ctx", "512", "--mlock")
    assert r.returncode == 0, r.stderr
    assert "peak memory" in r.stderr


def test_info_refuses_unknown_cache_type(run_spindle, smollm2_path):
    r = run_spindle("info", "-m", smollm2_path, "--cache-type-k", "q4_9")
    assert r.returncode == 2 and "q4_9" in r.stderr and len(r.stderr.strip().splitlines()) == 1
