"""POST /v1/embeddings: the official openai client's embeddings.create on the
BERT encoder and a decoder model, the same vectors as `spindle embed`, input
forms, base64, dimensions, truncation, usage and OpenAI-shaped 400s."""
import base64
import json

import numpy as np
import pytest

from server_util import Server, assert_openai_error

SENTENCES = ["The cat sat on the mat.", "A dog is running through a field of tall grass.",
             "Solar panels convert sunlight directly into electricity."]


@pytest.fixture(scope="module")
def server(spindle_bin, embed_path):
    s = Server(spindle_bin, embed_path, "--ctx", "64", "--parallel", "4", "--queue", "8")
    yield s
    assert s.stop() == 0, s.log_text()[-2000:]


def cli_vectors(run_spindle, model, lines, *args):
    r = run_spindle("embed", "-m", model, *args, input="".join(l + "\n" for l in lines))
    assert r.returncode == 0, r.stderr
    return np.array([json.loads(l) for l in r.stdout.splitlines()])


def test_openai_client(server, run_spindle, embed_path):
    client = server.openai()
    res = client.embeddings.create(model=server.model_id, input=SENTENCES)
    assert [d.index for d in res.data] == [0, 1, 2]
    got = np.array([d.embedding for d in res.data])
    assert got.shape == (3, 384)
    # the same batched forward pass as the CLI (a vector does not depend on its batch)
    assert np.allclose(got, cli_vectors(run_spindle, embed_path, SENTENCES, "--ctx", 64), atol=1e-6)
    toks = [len(run_spindle("tokenize", "-m", embed_path, s).stdout.split()) for s in SENTENCES]
    assert res.usage.prompt_tokens == res.usage.total_tokens == sum(toks)
    one = client.embeddings.create(model=server.model_id, input=SENTENCES[1])
    assert np.array_equal(np.array(one.data[0].embedding), got[1])
    # the client asks for base64 unless told otherwise: check the raw form too
    b64 = server.post("/v1/embeddings", {"input": SENTENCES, "encoding_format": "base64"}).json()
    dec = np.array([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in b64["data"]])
    assert np.array_equal(dec, got.astype(np.float32))


def test_token_inputs(server, run_spindle, embed_path):
    ids = [[int(t) for t in run_spindle("tokenize", "-m", embed_path, s).stdout.split()] for s in SENTENCES]
    texts = server.post("/v1/embeddings", {"input": SENTENCES}).json()
    many = server.post("/v1/embeddings", {"input": ids}).json()
    one = server.post("/v1/embeddings", {"input": ids[2], "dimensions": 384, "encoding_format": "float"}).json()
    assert [d["embedding"] for d in many["data"]] == [d["embedding"] for d in texts["data"]]
    assert one["data"][0]["embedding"] == texts["data"][2]["embedding"]
    assert one["usage"] == {"prompt_tokens": len(ids[2]), "total_tokens": len(ids[2])}
    assert one["object"] == "list" and one["model"] == server.model_id
    assert one["data"][0]["object"] == "embedding"


def test_truncate(server):
    long = " ".join(["word"] * 100)  # 102 tokens; the context is 64
    r = server.post("/v1/embeddings", {"input": long})
    err = assert_openai_error(r, 400, "input")
    assert err["code"] == "context_length_exceeded"
    cut = server.post("/v1/embeddings", {"input": [long, "word"], "truncate": True})
    assert cut.status_code == 200, cut.text
    assert cut.json()["usage"]["prompt_tokens"] == 64 + 3


@pytest.mark.parametrize("body,param,code", [
    ({"input": []}, "input", "invalid_value"),
    ({}, "input", "missing_required_parameter"),
    ({"input": 5}, "input", "invalid_type"),
    ({"input": ["a", 5]}, "input", "invalid_type"),
    ({"input": [[101, "x"]]}, "input", "invalid_type"),
    ({"input": [[101, 99999999]]}, "input", "invalid_value"),
    ({"input": [[]]}, "input", "invalid_value"),
    ({"input": ["x"] * 257}, "input", "invalid_value"),
    ({"input": "x", "encoding_format": "int8"}, "encoding_format", "invalid_value"),
    ({"input": "x", "dimensions": 128}, "dimensions", "unsupported_value"),
    ({"input": "x", "dimensions": "384"}, "dimensions", "invalid_type"),
    ({"input": "x", "truncate": "yes"}, "truncate", "invalid_type"),
    ({"input": "x", "pooling": "cls"}, None, "unknown_parameter"),
])
def test_bad_inputs(server, body, param, code):
    err = assert_openai_error(server.post("/v1/embeddings", body), 400, param)
    assert err["code"] == code, err


def test_openai_client_errors(server):
    import openai
    client = server.openai()
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model=server.model_id, input=[])
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="other-model", input="x")


def test_generation_refused(server):
    r = server.post("/v1/completions", {"prompt": "hello", "max_tokens": 2})
    err = assert_openai_error(r, 400)
    assert "embeddings only" in err["message"]


def test_decoder_model(spindle_bin, smollm2_path, run_spindle):
    """A decoder model serves embeddings too (its default pooling, mean)."""
    s = Server(spindle_bin, smollm2_path, "--ctx", "256")
    try:
        res = s.openai().embeddings.create(model=s.model_id, input=SENTENCES, encoding_format="float")
        got = np.array([d.embedding for d in res.data])
        assert np.allclose(got, cli_vectors(run_spindle, smollm2_path, SENTENCES, "--ctx", 256), atol=1e-6)
    finally:
        assert s.stop() == 0, s.log_text()[-2000:]
