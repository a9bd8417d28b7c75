"""End-to-end tests of `spindle serve` on SmolLM2-135M: the OpenAI client,
streaming, usage, equality with `spindle run`, batching determinism, the
prefix cache, and every class of client mistake.  Failure handling
(disconnects, timeouts, 429, 401, shutdown) is in test_server_failures.py."""
import concurrent.futures
import json

import httpx
import openai
import pytest

from server_util import Server, assert_openai_error, sse_events


@pytest.fixture(scope="module")
def server(spindle_bin, smollm2_path):
    s = Server(spindle_bin, smollm2_path, "--parallel", "16", "--ctx", "1024", "--queue", "64")
    yield s
    rc = s.stop()
    assert rc == 0, s.log_text()[-2000:]


def run_json(run_spindle, *args):
    r = run_spindle("run", *args, "--json")
    assert r.returncode == 0, r.stderr
    return r.json()


# ---- plain routes ---------------------------------------------------------

def test_health_models_metrics(server):
    r = httpx.get(server.url + "/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    models = server.openai().models.list()
    assert [m.id for m in models.data] == [server.model_id]
    m = server.metrics()
    for name in ("spindle_requests_running", "spindle_requests_queued", "spindle_kv_blocks_used",
                 "spindle_kv_blocks_free", "spindle_prefix_cache_hits_total",
                 "spindle_generated_tokens_total", "spindle_prompt_tokens_total",
                 'spindle_time_to_first_token_seconds_bucket{le="+Inf"}',
                 'spindle_time_per_output_token_seconds_bucket{le="+Inf"}'):
        assert name in m, name
    assert m["spindle_kv_blocks_free"] > 0


def test_tokenize_detokenize_roundtrip(server):
    r = server.post("/tokenize", {"content": "Hello world, spindle!"})
    assert r.status_code == 200, r.text
    toks = r.json()["tokens"]
    assert len(toks) >= 4 and all(isinstance(t, int) for t in toks)
    r = server.post("/detokenize", {"tokens": toks})
    assert r.status_code == 200, r.text
    assert r.json()["content"] == "Hello world, spindle!"


# ---- completions and chat through the official client ---------------------

PROMPT = "The three most useful kitchen tools are"
SAMPLING = dict(temperature=0.8, top_p=0.95, seed=1234)
SAMPLING_EXTRA = {"top_k": 40, "min_p": 0.05}
RUN_SAMPLING = ["--temp", "0.8", "--top-p", "0.95", "--top-k", "40", "--min-p", "0.05",
                "--seed", "1234"]


def test_completion_seeded_equals_run(server, run_spindle, smollm2_path):
    ref = run_json(run_spindle, "-m", smollm2_path, "-p", PROMPT, "-n", "32", *RUN_SAMPLING)
    client = server.openai()
    c = client.completions.create(model=server.model_id, prompt=PROMPT, max_tokens=32,
                                  extra_body=SAMPLING_EXTRA, **SAMPLING)
    assert c.choices[0].text == ref["text"]
    assert c.choices[0].finish_reason in ("stop", "length")
    assert c.usage.prompt_tokens == ref["usage"]["prompt_tokens"]
    assert c.usage.completion_tokens == ref["usage"]["completion_tokens"]
    assert c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens
    assert c.usage.prompt_tokens_details.cached_tokens >= 0

    # The same request streamed: same text, usage only in the extra last chunk.
    chunks = list(client.completions.create(model=server.model_id, prompt=PROMPT, max_tokens=32,
                                            stream=True, stream_options={"include_usage": True},
                                            extra_body=SAMPLING_EXTRA, **SAMPLING))
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert text == ref["text"]
    assert all(ch.usage is None for ch in chunks[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == c.usage.completion_tokens
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
    assert finishes[-1] == c.choices[0].finish_reason and all(f is None for f in finishes[:-1])


def test_chat_greedy_equals_run_and_stream(server, run_spindle, smollm2_path):
    question = "What is the capital of France? Answer in one sentence."
    ref = run_json(run_spindle, "-m", smollm2_path, "--chat", "-p", question, "-n", "40",
                   "--temp", "0")
    client = server.openai()
    msgs = [{"role": "user", "content": question}]
    c = client.chat.completions.create(model=server.model_id, messages=msgs, max_tokens=40,
                                       temperature=0)
    assert c.choices[0].message.role == "assistant"
    assert c.choices[0].message.content == ref["text"]
    assert c.usage.prompt_tokens == ref["usage"]["prompt_tokens"]
    assert c.object == "chat.completion"

    stream = client.chat.completions.create(model=server.model_id, messages=msgs, max_tokens=40,
                                            temperature=0, stream=True)
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == ref["text"]
    assert chunks[-1].choices[0].finish_reason == c.choices[0].finish_reason
    # Without include_usage no chunk carries usage.
    assert all(getattr(ch, "usage", None) is None for ch in chunks)


def test_raw_sse_format(server):
    body = {"model": server.model_id, "prompt": PROMPT, "max_tokens": 5, "temperature": 0,
            "stream": True}
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=120) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [ln for ln in r.iter_lines()]
    data = [ln for ln in lines if ln]
    assert all(ln.startswith("data: ") for ln in data), data
    assert data[-1] == "data: [DONE]"
    for ln in data[:-1]:
        obj = json.loads(ln[6:])
        assert obj["object"] == "text_completion" and "usage" not in obj


def test_n_choices_logprobs_and_stop(server):
    client = server.openai()
    c = client.completions.create(model=server.model_id, prompt=PROMPT, max_tokens=8, n=3,
                                  seed=7, temperature=1.0, logprobs=3)
    assert sorted(ch.index for ch in c.choices) == [0, 1, 2]
    for ch in c.choices:
        lp = ch.logprobs
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) > 0
        assert all(v <= 0 for v in lp.token_logprobs)
        assert all(1 <= len(t) <= 3 for t in lp.top_logprobs)
    assert c.usage.completion_tokens == sum(len(ch.logprobs.tokens) for ch in c.choices)

    chat = client.chat.completions.create(model=server.model_id, max_tokens=6, temperature=0,
                                          messages=[{"role": "user", "content": "Count to five."}],
                                          logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert len(content) == chat.usage.completion_tokens
    assert all(len(e.top_logprobs) == 2 and e.logprob <= 0 for e in content)
    # Greedy: the chosen token is the most likely one.
    assert all(e.top_logprobs[0].logprob == pytest.approx(e.logprob, abs=1e-5) for e in content)

    # A stop string ends the text before it, with finish_reason "stop".
    full = client.completions.create(model=server.model_id, prompt=PROMPT, max_tokens=24,
                                     temperature=0).choices[0].text
    words = full.split()
    assert len(words) >= 3, full
    stop = words[2]
    cut = client.completions.create(model=server.model_id, prompt=PROMPT, max_tokens=24,
                                    temperature=0, stop=[stop])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].text == full[:full.index(stop)]


# ---- batching determinism and the prefix cache ----------------------------

PROMPTS = [
    "Once upon a time in a small village,", "The recipe for pancakes needs", "In computer science, a hash table",
    "The weather today is", "My favourite book is", "To learn to play the guitar,",
    "The history of Rome begins", "A good night's sleep", "Photosynthesis is the process",
    "The best way to save money is", "Dogs are loyal because", "Mount Everest is",
    "The internet was invented", "Coffee contains", "A haiku about autumn:", "The ocean covers",
]


def greedy_body(server, prompt, stream):
    return {"model": server.model_id, "prompt": prompt, "max_tokens": 24, "temperature": 0,
            "stream": stream}


def stream_text(server, prompt):
    text, finish = "", None
    with httpx.stream("POST", server.url + "/v1/completions", json=greedy_body(server, prompt, True),
                      timeout=600) as r:
        assert r.status_code == 200, r.read()
        for ev in sse_events(r):
            if ev == "[DONE]":
                break
            for ch in ev["choices"]:
                text += ch["text"]
                finish = ch["finish_reason"] or finish
    assert finish in ("stop", "length")
    return text


def test_16_concurrent_streams_equal_alone(server):
    alone = []
    for p in PROMPTS:
        r = server.post("/v1/completions", greedy_body(server, p, False))
        assert r.status_code == 200, r.text
        alone.append(r.json()["choices"][0]["text"])
    assert len(set(alone)) > 1
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as ex:
        batched = list(ex.map(lambda p: stream_text(server, p), PROMPTS))
    for p, a, b in zip(PROMPTS, alone, batched):
        assert a == b, (p, a, b)


def test_shared_system_prompt_hits_prefix_cache(server):
    system = ("You are a meticulous assistant for a hardware store. " * 12 +
              "Always answer in one short sentence.")
    msgs = [{"role": "system", "content": system},
            {"role": "user", "content": "Where are the hammers?"}]
    client = server.openai()
    hits_before = server.metrics()["spindle_prefix_cache_hits_total"]
    first = client.chat.completions.create(model=server.model_id, messages=msgs, max_tokens=16,
                                           temperature=0)
    second = client.chat.completions.create(model=server.model_id, messages=msgs, max_tokens=16,
                                            temperature=0)
    assert first.usage.prompt_tokens > 100
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens > 64
    assert second.usage.prompt_tokens_details.cached_tokens < second.usage.prompt_tokens
    assert second.choices[0].message.content == first.choices[0].message.content
    assert server.metrics()["spindle_prefix_cache_hits_total"] > hits_before


# ---- client mistakes: 4xx with OpenAI's error body, never a 5xx ----------

def bad_requests(model_id):
    long_prompt = "hello " * 3000
    ok = {"model": model_id, "prompt": "hi", "max_tokens": 2}
    chat_ok = {"model": model_id, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    return [
        ("bad json", "/v1/completions", b'{"prompt": "hi",', 400, None),
        ("not an object", "/v1/completions", b'["hi"]', 400, None),
        ("empty body", "/v1/completions", b"", 400, None),
        ("wrong type temperature", "/v1/completions", dict(ok, temperature="hot"), 400, "temperature"),
        ("wrong type stream", "/v1/completions", dict(ok, stream="yes"), 400, "stream"),
        ("temperature out of range", "/v1/completions", dict(ok, temperature=2.5), 400, "temperature"),
        ("top_p out of range", "/v1/completions", dict(ok, top_p=1.5), 400, "top_p"),
        ("negative max_tokens", "/v1/completions", dict(ok, max_tokens=-1), 400, "max_tokens"),
        ("max_tokens over the cap", "/v1/completions", dict(ok, max_tokens=10 ** 6), 400, "max_tokens"),
        ("huge integer", "/v1/completions", b'{"prompt":"hi","max_tokens":123456789012345678901234567890}', 400, None),
        ("n over the cap", "/v1/completions", dict(ok, n=1000), 400, "n"),
        ("too many stop strings", "/v1/completions", dict(ok, stop=["a", "b", "c", "d", "e"]), 400, "stop"),
        ("stop of wrong type", "/v1/completions", dict(ok, stop=[1]), 400, "stop"),
        ("unknown model", "/v1/completions", dict(ok, model="gpt-17"), 404, "model"),
        ("missing prompt", "/v1/completions", {"model": model_id}, 400, "prompt"),
        ("prompt too long", "/v1/completions", dict(ok, prompt=long_prompt), 400, "prompt"),
        ("token id out of range", "/v1/completions", dict(ok, prompt=[1, 2, 10 ** 9]), 400, "prompt"),
        ("logit_bias bad key", "/v1/completions", dict(ok, logit_bias={"abc": 1}), 400, "logit_bias"),
        ("logit_bias out of range", "/v1/completions", dict(ok, logit_bias={"5": 500}), 400, "logit_bias"),
        ("logprobs out of range", "/v1/completions", dict(ok, logprobs=99), 400, "logprobs"),
        ("stream_options without stream", "/v1/completions", dict(ok, stream_options={"include_usage": True}), 400, "stream_options"),
        ("negative timeout", "/v1/completions", dict(ok, timeout=-1), 400, "timeout"),
        ("missing messages", "/v1/chat/completions", {"model": model_id}, 400, "messages"),
        ("empty messages", "/v1/chat/completions", dict(chat_ok, messages=[]), 400, "messages"),
        ("bad role", "/v1/chat/completions", dict(chat_ok, messages=[{"role": "wizard", "content": "x"}]), 400, "messages[0].role"),
        ("content of wrong type", "/v1/chat/completions", dict(chat_ok, messages=[{"role": "user", "content": 5}]), 400, "messages[0].content"),
        ("image part", "/v1/chat/completions", dict(chat_ok, messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]), 400, "messages[0].content"),
        ("top_logprobs without logprobs", "/v1/chat/completions", dict(chat_ok, top_logprobs=3), 400, "top_logprobs"),
        ("chat prompt too long", "/v1/chat/completions", dict(chat_ok, messages=[{"role": "user", "content": long_prompt}]), 400, "messages"),
        ("tokenize without content", "/tokenize", {"text": "x"}, 400, "content"),
        ("detokenize bad ids", "/detokenize", {"tokens": [-5]}, 400, "tokens"),
        ("body over the cap", "/v1/completions", b'{"prompt": "' + b"a" * (5 << 20) + b'"}', 413, None),
    ]


@pytest.mark.parametrize("case", range(len(bad_requests("m"))),
                         ids=[c[0] for c in bad_requests("m")])
def test_bad_request_gets_4xx(server, case):
    name, path, body, status, param = bad_requests(server.model_id)[case]
    if isinstance(body, bytes):
        r = server.post(path, None, raw=body, headers={"Content-Type": "application/json"})
    else:
        r = server.post(path, body)
    assert_openai_error(r, status, param)
    assert httpx.get(server.url + "/health").status_code == 200


def test_unknown_route_and_method(server):
    assert_openai_error(server.get("/v1/nothing"), 404)
    assert_openai_error(server.get("/v1/completions"), 405)


def test_openai_client_raises_on_4xx(server):
    client = server.openai()
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=server.model_id, prompt="x", temperature=9)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="x")
