"""The ISA levels end to end: every level this CPU runs (SP_ISA=level), on
both real models.

Every level that repacks weights into 16-row tiles computes the packed
oracle's exact arithmetic (src/quant/packed.c), and its attention, norm and
activation kernels the scalar row's (src/kernels/kernels_isa.h), so their logits
must be identical, bit for bit, to each other's; `spindle info` and
`spindle bench --json` must name the level asked for.  The scalar level
(file-layout dots, summed in another order) must agree with them within the
goldens' tolerance (test_goldens.py's LOGIT_TOL).
"""
import re

import pytest

LEVELS = ["scalar", "avx2", "avxvnni", "avx512", "neon", "dotprod", "i8mm"]
PROMPT = "The history of timekeeping is a story of"
LOGIT_TOL = 1.5


def _runnable(run_spindle, model):
    """Levels this CPU runs: `spindle info` names the level in use, which is
    the one asked for when the CPU runs it (else a parent level)."""
    out = []
    for level in LEVELS:
        r = run_spindle("info", "-m", model, env={"SP_ISA": level})
        assert r.returncode == 0, r.stderr
        m = re.search(r"^kernels: +ISA level (\w+):", r.stdout, re.M)
        assert m, "no ISA level in spindle info: %s" % r.stdout[-500:]
        if m.group(1) == level:
            out.append(level)
    return out


@pytest.mark.parametrize("fixture", ["smollm2_path", "gemma3_path"])
def test_levels_agree(fixture, request, run_spindle):
    model = request.getfixturevalue(fixture)
    levels = _runnable(run_spindle, model)
    assert "scalar" in levels and len(levels) >= 2, "runs only %s" % levels
    tops = {}
    for level in levels:
        r = run_spindle("logits", "-m", model, "-p", PROMPT, "--top", 40, env={"SP_ISA": level})
        assert r.returncode == 0, r.stderr
        tops[level] = r.json()["top"]
    packed = [lv for lv in levels if lv != "scalar"]
    for level in packed[1:]:
        assert tops[level] == tops[packed[0]], "%s and %s logits differ" % (level, packed[0])
    ref = dict((int(t), v) for t, v in tops[packed[0]][:10])
    scalar = dict((int(t), v) for t, v in tops["scalar"])
    worst = max(abs(scalar[t] - v) for t, v in ref.items() if t in scalar)
    assert all(t in scalar for t in ref), "scalar's top-40 misses a top-10 token of %s" % packed[0]
    assert worst <= LOGIT_TOL, "scalar vs %s: logit difference %.3f" % (packed[0], worst)
    print("%s: %s identical; scalar within %.4f" % (fixture, " ".join(packed), worst))


def test_bench_names_the_paths(run_spindle, smollm2_path):
    r = run_spindle("bench", "-m", smollm2_path, "-p", 8, "-n", 2, "-r", 1, "--json", env={"SP_ISA": "scalar"})
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert doc["isa"] == "scalar"
    assert doc["isa_paths"] == {"quant": "scalar", "packed": None, "attention": "scalar", "ops": "scalar"}
