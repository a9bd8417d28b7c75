"""spindle embed: decoder models' embeddings against llama.cpp's embedding
path (tests/goldens/embeddings.json, from scripts/goldens/embed.py on the
same GGUF files), batch invariance, normalisation and refusals."""
import json

import numpy as np
import pytest

# Measured minimum cosines are 0.9995 (SmolLM2) and 0.9997 (Gemma 3) for
# mean and cls; Gemma 3's last-token state alone differs more (0.997): a
# single row of a 4-bit model after 18 layers, without averaging.
BOUNDS = {("gemma3-270m", "last"): 0.995}


def embed(run_spindle, model, lines, *args):
    r = run_spindle("embed", "-m", model, "-t", 2, *args, input="".join(s + "\n" for s in lines))
    assert r.returncode == 0, r.stderr
    vecs = [json.loads(l) for l in r.stdout.splitlines()]
    assert len(vecs) == len(lines)
    return np.array(vecs, dtype=np.float64)


@pytest.fixture(scope="module")
def models(smollm2_path, gemma3_path):
    return {"smollm2-135m": smollm2_path, "gemma3-270m": gemma3_path}


@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
@pytest.mark.parametrize("pooling", ["mean", "cls", "last"])
def test_matches_llama_cpp(run_spindle, goldens, models, name, pooling):
    g = goldens("embeddings")
    rows = g["models"][name]["poolings"][pooling]
    for s, row in zip(g["sentences"], rows):  # the same input tokens
        r = run_spindle("tokenize", "-m", models[name], s)
        assert r.returncode == 0, r.stderr
        assert [int(t) for t in r.stdout.split()] == row["tokens"]
    got = embed(run_spindle, models[name], g["sentences"], "--pooling", pooling)
    ref = np.array([r["vector"] for r in rows])
    assert got.shape == ref.shape
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    cos = np.sum(got * ref, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() >= BOUNDS.get((name, pooling), 0.999), cos


def test_default_pooling_is_mean(run_spindle, goldens, smollm2_path):
    s = goldens("embeddings")["sentences"]
    assert np.array_equal(embed(run_spindle, smollm2_path, s), embed(run_spindle, smollm2_path, s, "--pooling", "mean"))


@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_batch_invariant(run_spindle, goldens, models, name):
    """A vector does not depend on what it is batched with: all sentences in
    one pass, reversed, or one pass each (--batch smaller than two inputs)."""
    s = goldens("embeddings")["sentences"]
    together = embed(run_spindle, models[name], s)
    reversed_ = embed(run_spindle, models[name], s[::-1])[::-1]
    alone = embed(run_spindle, models[name], s, "--batch", 20)
    assert np.array_equal(together, reversed_)
    assert np.array_equal(together, alone)


def test_no_normalize(run_spindle, goldens, smollm2_path):
    s = goldens("embeddings")["sentences"]
    unit = embed(run_spindle, smollm2_path, s)
    raw = embed(run_spindle, smollm2_path, s, "--no-normalize")
    norms = np.linalg.norm(raw, axis=1)
    assert np.all(np.abs(norms - 1.0) > 0.1), norms
    assert np.allclose(raw / norms[:, None], unit, atol=1e-6)


def test_file_input(run_spindle, goldens, smollm2_path, tmp_path):
    s = goldens("embeddings")["sentences"]
    f = tmp_path / "in.txt"
    f.write_text("\n".join(s) + "\n")
    r = run_spindle("embed", "-m", smollm2_path, "-t", 2, "--file", f)
    assert r.returncode == 0, r.stderr
    assert np.array_equal(np.array([json.loads(l) for l in r.stdout.splitlines()]), embed(run_spindle, smollm2_path, s))


@pytest.mark.parametrize("args,stdin,msg", [
    (["--pooling", "max"], "x\n", "unknown pooling 'max'"),
    (["--batch", "4"], "a sentence with many more than four tokens\n", "an input takes 1 to 4"),
    (["--file", "/nonexistent/in.txt"], "", "cannot open"),
])
def test_refusals(run_spindle, smollm2_path, args, stdin, msg):
    r = run_spindle("embed", "-m", smollm2_path, *args, input=stdin)
    assert r.returncode == 2
    assert msg in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
