"""spindle embed: decoder models' and the BERT encoder's embeddings against
llama.cpp's embedding path (tests/goldens/embeddings.json, from
scripts/goldens/embed.py on the same GGUF files) and against
sentence-transformers (tests/goldens/embeddings-st.json, from
scripts/goldens/embed_st.py on the weights the GGUF was converted from),
batch invariance, normalisation and refusals."""
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
def models(smollm2_path, gemma3_path, embed_path):
    return {"smollm2-135m": smollm2_path, "gemma3-270m": gemma3_path, "minilm": embed_path}


def check_tokens(run_spindle, model, inputs, rows):
    for s, row in zip(inputs, rows):  # the same input tokens as the reference
        r = run_spindle("tokenize", "-m", model, s)
        assert r.returncode == 0, r.stderr
        assert [int(t) for t in r.stdout.split()] == row["tokens"], s


def cosines(got, ref):
    ref = np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    return np.sum(got * ref, axis=1) / np.linalg.norm(ref, axis=1)


@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
@pytest.mark.parametrize("pooling", ["mean", "cls", "last"])
def test_matches_llama_cpp(run_spindle, goldens, models, name, pooling):
    g = goldens("embeddings")["models"][name]
    rows = g["poolings"][pooling]
    check_tokens(run_spindle, models[name], g["inputs"], rows)
    cos = cosines(embed(run_spindle, models[name], g["inputs"], "--pooling", pooling), [r["vector"] for r in rows])
    assert cos.min() >= BOUNDS.get((name, pooling), 0.999), cos


def test_bert_matches_llama_cpp(run_spindle, goldens, embed_path):
    """all-MiniLM-L6-v2 (F16) with its own pooling (mean, from the file) on
    67 inputs: the same tokens and vectors as llama.cpp on the same GGUF."""
    g = goldens("embeddings")["models"]["minilm"]
    assert list(g["poolings"]) == ["mean"]
    check_tokens(run_spindle, embed_path, g["inputs"], g["poolings"]["mean"])
    cos = cosines(embed(run_spindle, embed_path, g["inputs"]), [r["vector"] for r in g["poolings"]["mean"]])
    assert cos.min() >= 0.9999, cos.min()


def test_default_pooling_is_mean(run_spindle, goldens, smollm2_path):
    s = goldens("embeddings")["models"]["smollm2-135m"]["inputs"]
    assert np.array_equal(embed(run_spindle, smollm2_path, s), embed(run_spindle, smollm2_path, s, "--pooling", "mean"))


@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m", "minilm"])
def test_batch_invariant(run_spindle, goldens, models, name):
    """A vector does not depend on what it is batched with: all sentences in
    one pass, reversed, or one pass each (--batch smaller than two inputs)."""
    s = goldens("embeddings")["models"]["smollm2-135m"]["inputs"]
    together = embed(run_spindle, models[name], s)
    reversed_ = embed(run_spindle, models[name], s[::-1])[::-1]
    alone = embed(run_spindle, models[name], s, "--batch", 20)
    assert np.array_equal(together, reversed_)
    assert np.array_equal(together, alone)


def test_no_normalize(run_spindle, goldens, smollm2_path):
    s = goldens("embeddings")["models"]["smollm2-135m"]["inputs"]
    unit = embed(run_spindle, smollm2_path, s)
    raw = embed(run_spindle, smollm2_path, s, "--no-normalize")
    norms = np.linalg.norm(raw, axis=1)
    assert np.all(np.abs(norms - 1.0) > 0.1), norms
    assert np.allclose(raw / norms[:, None], unit, atol=1e-6)


def test_file_input(run_spindle, goldens, smollm2_path, tmp_path):
    s = goldens("embeddings")["models"]["smollm2-135m"]["inputs"]
    f = tmp_path / "in.txt"
    f.write_text("\n".join(s) + "\n")
    r = run_spindle("embed", "-m", smollm2_path, "-t", 2, "--file", f)
    assert r.returncode == 0, r.stderr
    assert np.array_equal(np.array([json.loads(l) for l in r.stdout.splitlines()]), embed(run_spindle, smollm2_path, s))


def test_bert_generates_nothing(run_spindle, embed_path):
    r = run_spindle("run", "-m", embed_path, "-p", "hello", "-n", 4)
    assert r.returncode == 2
    assert "a bert model computes embeddings only" in r.stderr, r.stderr


@pytest.mark.parametrize("args,stdin,msg", [
    (["--pooling", "max"], "x\n", "unknown pooling 'max'"),
    (["--batch", "4"], "a sentence with many more than four tokens\n", "an input takes 1 to 4"),
    (["--file", "/nonexistent/in.txt"], "", "cannot open"),
])
def test_refusals(run_spindle, smollm2_path, args, stdin, msg):
    r = run_spindle("embed", "-m", smollm2_path, *args, input=stdin)
    assert r.returncode == 2
    assert msg in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_bert_matches_sentence_transformers(run_spindle, goldens, embed_path):
    """all-MiniLM-L6-v2 against its own implementation, sentence-transformers
    on the safetensors the GGUF was converted from: cosine >= 0.999 on 56
    sentences, 3 queries and 8 documents, and each query ranks the documents
    in the same order."""
    g = goldens("embeddings-st")
    got = embed(run_spindle, embed_path, g["inputs"])
    cos = cosines(got, g["vectors"])
    assert len(cos) >= 50 and cos.min() >= 0.999, cos.min()
    nq = len(g["rankings"])
    n_doc = len(g["rankings"][0])
    queries, docs = got[-nq - n_doc:-n_doc], got[-n_doc:]
    for q, want in zip(queries, g["rankings"]):
        assert list(np.argsort(-(docs @ q), kind="stable")) == want


def test_bench_embed(run_spindle, embed_path, tmp_path):
    """spindle bench --embed runs (its speed is bench/embed's business)."""
    f = tmp_path / "s.txt"
    f.write_text("The cat sat on the mat.\nA dog slept.\nSolar panels convert sunlight.\n")
    r = run_spindle("bench", "-m", embed_path, "--embed", f, "-B", 2, "-r", 1, "-t", 2, "--json")
    assert r.returncode == 0, r.stderr
    d = r.json()
    assert d["sentences"] == 3 and d["batch"] == 2 and d["sentences_per_s"] > 0
