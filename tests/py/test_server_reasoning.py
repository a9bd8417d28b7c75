"""Reasoning output: SmolLM2 copied with a Qwen3/DeepSeek-R1-style chat
template that thinks between <think> and </think> (the generation prompt
opens the block unless enable_thinking is false or think_open is false).
The thinking is separated from the answer in every API: reasoning_content
in Chat Completions (streamed as its own delta), thinking blocks in
Anthropic's Messages, `thinking` in Ollama's, reasoning items in Responses;
chat_template_kwargs / reasoning_effort (and each API's switch) reach the
template.  A grammar (spindle's extension, accepted on every route) makes
the output known: "I reason.</think>Paris." from inside the block."""
import anthropic
import httpx
import ollama
import pytest

from server_util import Server, gguf_with_chat_template

TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if loop.first and reasoning_effort is defined %}"
    "{{- '<|im_start|>system\\nReasoning: ' + reasoning_effort + '<|im_end|>\\n' }}{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- elif think_open is not defined or think_open %}{{- '<think>\\n' }}{%- endif %}"
    "{%- endif %}")
INSIDE = 'root ::= "I reason.</think>\\n\\nParis."'   # from inside the block the prompt opened
OPENS = 'root ::= "<think>I reason.</think>Paris."'    # a model that opens the block itself
Q = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def server(spindle_bin, smollm2_path, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("think") / "SmolLM2-think.gguf")
    gguf_with_chat_template(smollm2_path, path, TEMPLATE)
    s = Server(spindle_bin, path, "--parallel", "2", "--ctx", "512")
    yield s
    assert s.stop() == 0, s.log_text()[-2000:]


def chat(server, **kw):
    kw.setdefault("messages", Q)
    kw.setdefault("max_tokens", 24)
    kw.setdefault("temperature", 0)
    r = server.post("/v1/chat/completions", kw, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_chat_completions_reasoning_content(server):
    r = chat(server, grammar=INSIDE)
    msg = r["choices"][0]["message"]
    assert msg["reasoning_content"] == "I reason." and msg["content"] == "Paris."
    # streamed: the reasoning as its own deltas, first
    chunks = list(server.openai().chat.completions.create(model=server.model_id, messages=Q, max_tokens=24,
                                                          temperature=0, stream=True,
                                                          extra_body={"grammar": INSIDE}))
    kinds = [("r" if getattr(c.choices[0].delta, "reasoning_content", None) else "c")
             for c in chunks if c.choices and (c.choices[0].delta.content or
                                                getattr(c.choices[0].delta, "reasoning_content", None))]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    thought = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices)
    assert thought == "I reason." and text == "Paris."
    assert kinds == sorted(kinds, reverse=True) and "r" in kinds  # all reasoning before any content
    # a model that opens the block itself (the prompt did not)
    r = chat(server, grammar=OPENS, chat_template_kwargs={"think_open": False})
    msg = r["choices"][0]["message"]
    assert msg["reasoning_content"] == "I reason." and msg["content"] == "Paris."
    # reasoning_format none: the thinking stays in the answer
    r = chat(server, grammar=INSIDE, reasoning_format="none")
    assert r["choices"][0]["message"]["content"] == "I reason.</think>\n\nParis."
    assert "reasoning_content" not in r["choices"][0]["message"]


def test_template_variables_reach_the_template(server):
    base = chat(server, max_tokens=1)["usage"]["prompt_tokens"]
    off = chat(server, max_tokens=1, chat_template_kwargs={"enable_thinking": False})["usage"]["prompt_tokens"]
    low = chat(server, max_tokens=1, reasoning_effort="low")["usage"]["prompt_tokens"]
    ids = server.post("/tokenize", {"content": "<think>\n\n</think>\n\n", "add_special": False}).json()["tokens"]
    opened = server.post("/tokenize", {"content": "<think>\n", "add_special": False}).json()["tokens"]
    assert off == base - len(opened) + len(ids)
    assert low > base
    # without thinking the output is all answer
    r = chat(server, max_tokens=8, chat_template_kwargs={"enable_thinking": False})
    assert r["choices"][0]["message"]["content"] and "reasoning_content" not in r["choices"][0]["message"]
    for bad, param in (({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs"),
                       ({"chat_template_kwargs": [1]}, "chat_template_kwargs"),
                       ({"reasoning_effort": "extreme"}, "reasoning_effort"),
                       ({"reasoning_format": "sideways"}, "reasoning_format")):
        r = server.post("/v1/chat/completions", dict(messages=Q, max_tokens=1, **bad), timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_anthropic_thinking_blocks(server):
    c = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)
    extra = {"temperature": 0, "grammar": INSIDE}
    m = c.messages.create(model=server.model_id, max_tokens=24, messages=Q, extra_body=extra)
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert m.content[0].thinking == "I reason." and m.content[1].text == "Paris."
    with c.messages.stream(model=server.model_id, max_tokens=24, messages=Q, extra_body=extra) as s:
        events = [e.type for e in s]
        final = s.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == "I reason." and final.content[1].text == "Paris."
    assert events.count("content_block_stop") == 2
    # thinking disabled reaches the template: a longer prompt, no thinking block
    on = c.messages.count_tokens(model=server.model_id, messages=Q, thinking={"type": "enabled", "budget_tokens": 1024})
    off = c.messages.count_tokens(model=server.model_id, messages=Q, thinking={"type": "disabled"})
    assert off.input_tokens > on.input_tokens
    m = c.messages.create(model=server.model_id, max_tokens=8, messages=Q, thinking={"type": "disabled"},
                          extra_body={"temperature": 0})
    assert [b.type for b in m.content] == ["text"]


def test_anthropic_thinking_budget(server):
    """thinking.budget_tokens bounds the block: after that many tokens the close tag is forced and the
    answer follows.  Unbounded, SmolLM2 puts its whole answer in the block (it never writes the close
    tag) and ends there."""
    c = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)
    greedy = {"temperature": 0}

    def blocks(m):
        return [(b.type, b.thinking if b.type == "thinking" else b.text) for b in m.content]

    first5 = c.messages.create(model=server.model_id, max_tokens=5, messages=Q, extra_body=greedy)
    assert first5.content[0].type == "thinking" and first5.stop_reason == "max_tokens"
    assert not "".join(b.text for b in first5.content if b.type == "text")
    full = c.messages.create(model=server.model_id, max_tokens=24, messages=Q, extra_body=greedy)
    assert full.content[0].thinking.startswith(first5.content[0].thinking)
    assert len(full.content[0].thinking) > len(first5.content[0].thinking)
    assert not "".join(b.text for b in full.content if b.type == "text")
    roomy = c.messages.create(model=server.model_id, max_tokens=24, messages=Q, extra_body=greedy,
                              thinking={"type": "enabled", "budget_tokens": 23})
    assert blocks(roomy) == blocks(full)  # a budget the thinking does not reach changes nothing
    think = {"type": "enabled", "budget_tokens": 5}
    m = c.messages.create(model=server.model_id, max_tokens=24, messages=Q, thinking=think, extra_body=greedy)
    assert [b.type for b in m.content] == ["thinking", "text"], m.content
    assert m.content[0].thinking == first5.content[0].thinking and m.content[1].text
    close = server.post("/tokenize", {"content": "</think>", "add_special": False}).json()["tokens"]
    answer = server.post("/tokenize", {"content": m.content[1].text, "add_special": False}).json()["tokens"]
    assert m.usage.output_tokens >= 5 + len(close) + 1 and len(answer) <= m.usage.output_tokens - 5 - len(close)
    with c.messages.stream(model=server.model_id, max_tokens=24, messages=Q, thinking=think,
                           extra_body=greedy) as s:
        final = s.get_final_message()
    assert blocks(final) == blocks(m)
    for bad in ({"type": "disabled", "budget_tokens": 5}, {"type": "enabled", "budget_tokens": 0},
                {"type": "enabled", "budget_tokens": 24}, {"type": "enabled", "budget_tokens": "5"}):
        with pytest.raises(anthropic.BadRequestError) as e:
            c.messages.create(model=server.model_id, max_tokens=24, messages=Q, thinking=bad)
        assert e.value.body["error"]["type"] == "invalid_request_error"
        assert "thinking.budget_tokens" in e.value.body["error"]["message"]


def test_ollama_thinking(server):
    c = ollama.Client(host=server.url)
    r = c.chat(model=server.model_id, messages=Q, options={"temperature": 0, "num_predict": 8}, stream=False)
    assert r.message.thinking and r.message.content == ""  # the block never closed in 8 tokens
    parts = list(c.chat(model=server.model_id, messages=Q, options={"temperature": 0, "num_predict": 8}, stream=True))
    assert "".join(p.message.thinking or "" for p in parts) == r.message.thinking
    off = c.chat(model=server.model_id, messages=Q, think=False, options={"temperature": 0, "num_predict": 8},
                 stream=False)
    assert not off.message.thinking and off.message.content
    assert off.prompt_eval_count > r.prompt_eval_count
    g = c.generate(model=server.model_id, prompt=Q[0]["content"], options={"temperature": 0, "num_predict": 8},
                   stream=False)
    assert g.thinking == r.message.thinking and g.response == ""


def test_responses_reasoning_items(server):
    c = server.openai()
    r = c.responses.create(model=server.model_id, input=Q[0]["content"], max_output_tokens=24, temperature=0,
                           extra_body={"grammar": INSIDE})
    assert [o.type for o in r.output] == ["reasoning", "message"]
    assert r.output[0].content[0].text == "I reason." and r.output_text == "Paris."
    with c.responses.stream(model=server.model_id, input=Q[0]["content"], max_output_tokens=24, temperature=0,
                            extra_body={"grammar": INSIDE}) as s:
        thought = "".join(e.delta for e in s if e.type == "response.reasoning_text.delta")
        final = s.get_final_response()
    assert thought == "I reason." and final.output_text == "Paris."
    assert [o.type for o in final.output] == ["reasoning", "message"]
    low = c.responses.create(model=server.model_id, input=Q[0]["content"], max_output_tokens=1, temperature=0,
                             reasoning={"effort": "low"})
    base = c.responses.create(model=server.model_id, input=Q[0]["content"], max_output_tokens=1, temperature=0)
    assert low.usage.input_tokens > base.usage.input_tokens and low.reasoning.effort == "low"


def test_chat_page_model_still_serves(server):
    # the page's route and models list work on a thinking model
    assert httpx.get(server.url + "/", timeout=10).status_code == 200
    assert server.get("/v1/models").json()["data"][0]["id"] == server.model_id
