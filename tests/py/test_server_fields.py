"""The field policy of `spindle serve` (docs/server-api.md, "Field policy"):
llama-server's extensions that map onto what spindle does are honoured
(typical_p, n_probs, repeat_last_n) or accepted as labels (cache_prompt,
n_keep, mirostat 0), OpenAI's labels are accepted (service_tier,
prompt_cache_key, safety_identifier), completions' `echo` and batches of
prompts work as OpenAI's do, and a field that would change the answer and
is not implemented is refused with a 400 naming it.  The model answers to
its file name and each --alias (GET /v1/models/{name})."""
import openai
import pytest

from server_util import Server, assert_openai_error, sse_events


@pytest.fixture(scope="module")
def server(spindle_bin, smollm2_path):
    s = Server(spindle_bin, smollm2_path, "--parallel", "4", "--ctx", "512", "--alias", "smol",
               "--alias", "gpt-4o-mini")
    yield s
    assert s.stop() == 0, s.log_text()[-2000:]


def complete(server, **body):
    body.setdefault("max_tokens", 6)
    body.setdefault("temperature", 0)
    r = server.post("/v1/completions", body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def chat(server, **body):
    body.setdefault("max_tokens", 4)
    body.setdefault("temperature", 0)
    body.setdefault("messages", [{"role": "user", "content": "Say hi."}])
    return server.post("/v1/chat/completions", body, timeout=120)


def test_typical_p_runs_in_the_chain(server):
    r = complete(server, prompt="The weather today is", max_tokens=2, temperature=1.0, seed=5,
                 typical_p=0.5, explain=True)
    stages = [s for s in r["choices"][0]["explain"][0]["stages"] if s["name"] == "typical-p"]
    assert stages and stages[0]["param"] == pytest.approx(0.5), r["choices"][0]["explain"][0]["stages"]
    plain = complete(server, prompt="The weather today is", max_tokens=2, temperature=1.0, seed=5,
                     explain=True)
    assert all(s["name"] != "typical-p" for s in plain["choices"][0]["explain"][0]["stages"])


def test_n_probs_maps_to_logprobs(server):
    r = complete(server, prompt="Hello", max_tokens=3, n_probs=3)
    lp = r["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == 3 and all(len(t) == 3 for t in lp["top_logprobs"]), lp
    c = chat(server, n_probs=2)
    assert c.status_code == 200, c.text
    content = c.json()["choices"][0]["logprobs"]["content"]
    assert content and all(len(t["top_logprobs"]) == 2 for t in content), content
    # the same as OpenAI's own fields
    same = chat(server, logprobs=True, top_logprobs=2).json()["choices"][0]["logprobs"]["content"]
    assert [t["token"] for t in same] == [t["token"] for t in content]
    assert_openai_error(server.post("/v1/completions", {"prompt": "x", "logprobs": 1, "n_probs": 2}), 400,
                        "n_probs")
    assert_openai_error(chat(server, logprobs=False, n_probs=2), 400, "n_probs")


def test_repeat_last_n_is_the_penalty_window(server):
    prompt = "one one one one one one one one"
    plain = complete(server, prompt=prompt, max_tokens=12)["choices"][0]["text"]
    off = complete(server, prompt=prompt, max_tokens=12, repeat_penalty=3.0, repeat_last_n=0)
    assert off["choices"][0]["text"] == plain  # window 0: penalties off
    on = complete(server, prompt=prompt, max_tokens=12, repeat_penalty=3.0, repeat_last_n=64)
    assert on["choices"][0]["text"] != plain
    assert_openai_error(server.post("/v1/completions", {"prompt": "x", "repeat_last_n": -2}), 400,
                        "repeat_last_n")


def test_labels_are_accepted(server):
    base = complete(server, prompt="Hello", max_tokens=4)["choices"][0]["text"]
    r = complete(server, prompt="Hello", max_tokens=4, cache_prompt=False, n_keep=-1, mirostat=0,
                 mirostat_tau=5.0, mirostat_eta=0.1, service_tier="auto", prompt_cache_key="k1",
                 safety_identifier="u1", user="u", metadata={"a": "b"}, store=False)
    assert r["choices"][0]["text"] == base
    assert chat(server, service_tier="default", prompt_cache_key="k", n_keep=8,
                cache_prompt=True).status_code == 200
    assert_openai_error(chat(server, service_tier=3), 400, "service_tier")
    assert_openai_error(chat(server, cache_prompt="yes"), 400, "cache_prompt")


def test_unimplemented_fields_are_refused_by_name(server):
    err = assert_openai_error(server.post("/v1/completions", {"prompt": "x", "mirostat": 2}), 400, "mirostat")
    assert "mirostat" in err["message"]
    for field, value in (("verbosity", "low"), ("prediction", {"type": "content", "content": "x"}),
                         ("web_search_options", {})):
        err = assert_openai_error(chat(server, **{field: value}), 400, field)
        assert err["code"] == "unsupported_parameter", err
    err = assert_openai_error(chat(server, tfs_z=0.9), 400, "tfs_z")
    assert err["code"] == "unknown_parameter", err
    # suffix (insertion) is not implemented
    assert_openai_error(server.post("/v1/completions", {"prompt": "x", "suffix": "y"}), 400, "suffix")


def test_echo(server):
    client = server.openai()
    plain = client.completions.create(model=server.model_id, prompt="The sky is", max_tokens=5,
                                      temperature=0).choices[0].text
    c = client.completions.create(model=server.model_id, prompt="The sky is", max_tokens=5,
                                  temperature=0, echo=True)
    assert c.choices[0].text == "The sky is" + plain
    chunks = list(client.completions.create(model=server.model_id, prompt="The sky is", max_tokens=5,
                                            temperature=0, echo=True, stream=True))
    assert "".join(ch.choices[0].text for ch in chunks) == "The sky is" + plain
    assert chunks[0].choices[0].text.startswith("The sky is")
    # token ids are echoed as their text
    ids = server.post("/tokenize", {"content": "The sky is", "add_special": False}).json()["tokens"]
    c = client.completions.create(model=server.model_id, prompt=ids, max_tokens=5, temperature=0,
                                  echo=True)
    assert c.choices[0].text == "The sky is" + plain
    assert_openai_error(server.post("/v1/completions", {"prompt": "x", "echo": True, "logprobs": 1}), 400,
                        "echo")


def test_batch_of_prompts(server):
    client = server.openai()
    prompts = ["The sky is", "Two plus two is", "My favourite food is"]
    alone = [client.completions.create(model=server.model_id, prompt=p, max_tokens=6, temperature=0)
             for p in prompts]
    c = client.completions.create(model=server.model_id, prompt=prompts, max_tokens=6, temperature=0,
                                  n=2)
    assert [ch.index for ch in c.choices] == list(range(6))
    for i, a in enumerate(alone):
        for k in range(2):
            assert c.choices[2 * i + k].text == a.choices[0].text, (i, k)
    assert c.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    assert c.usage.completion_tokens == 2 * sum(a.usage.completion_tokens for a in alone)
    # streamed: every chunk names its choice by index
    texts = {}
    for ch in client.completions.create(model=server.model_id, prompt=prompts, max_tokens=6, temperature=0,
                                        stream=True, echo=True):
        for choice in ch.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
    assert texts == {i: prompts[i] + alone[i].choices[0].text for i in range(3)}
    # token-id prompts in a batch
    ids = [server.post("/tokenize", {"content": p}).json()["tokens"] for p in prompts[:2]]
    c = client.completions.create(model=server.model_id, prompt=ids, max_tokens=6, temperature=0)
    assert [ch.text for ch in c.choices] == [a.choices[0].text for a in alone[:2]]
    r = server.post("/v1/completions", {"prompt": ["a"] * 17, "max_tokens": 1})
    assert_openai_error(r, 400, "prompt")
    r = server.post("/v1/completions", {"prompt": ["a", 5], "max_tokens": 1})
    assert_openai_error(r, 400, "prompt")
    # one prompt of the batch too long for the context: the whole request is refused
    r = server.post("/v1/completions", {"prompt": ["a", "word " * 600], "max_tokens": 1})
    assert_openai_error(r, 400, "prompt")


def test_batch_raw_stream_indexes(server):
    body = {"prompt": ["Hi", "Yo"], "max_tokens": 2, "temperature": 0, "stream": True}
    import httpx
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=120) as r:
        assert r.status_code == 200
        events = list(sse_events(r))
    assert events[-1] == "[DONE]"
    finished = sorted(e["choices"][0]["index"] for e in events[:-1] if e["choices"][0]["finish_reason"])
    assert finished == [0, 1]


# ---- the model's names: its file name and --alias ---------------------------

def test_aliases_and_model_route(server):
    client = server.openai()
    names = [m.id for m in client.models.list().data]
    assert names == [server.model_id, "smol", "gpt-4o-mini"]
    for name in names:
        m = client.models.retrieve(name)
        assert m.id == name and m.object == "model"
        assert m.model_extra["context_length"] == 512
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-17")
    err = assert_openai_error(server.get("/v1/models/gpt-17"), 404, "model")
    assert err["code"] == "model_not_found" and "gpt-17" in err["message"]
    # a request naming an alias is answered under that name; the answer is the model's
    ref = client.completions.create(model=server.model_id, prompt="Hi", max_tokens=4, temperature=0)
    c = client.completions.create(model="smol", prompt="Hi", max_tokens=4, temperature=0)
    assert c.model == "smol" and c.choices[0].text == ref.choices[0].text
    assert ref.model == server.model_id
    c = client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "Hi"}],
                                       max_tokens=2, temperature=0)
    assert c.model == "gpt-4o-mini"
    e = client.embeddings.create(model="smol", input="hello")
    assert e.model == server.model_id and len(e.data[0].embedding) > 0
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="smol2", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="smol2", input="hello")


@pytest.mark.parametrize("alias", ["", "a b", "x" * 129])
def test_bad_alias_exits_2(run_spindle, smollm2_path, alias):
    r = run_spindle("serve", "-m", smollm2_path, "--port", "0", "--alias", alias)
    assert r.returncode == 2 and "--alias" in r.stderr, r.stderr
