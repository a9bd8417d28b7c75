"""The chat page served by `spindle serve` at /, in a real browser: headless
Chromium (Debian's chromium and chromium-driver) driven by selenium.  The
server runs with --api-key: the page itself is served without it, asks for
it, and the API refuses requests without it.  A screenshot of each state is
saved under build/webui/ (the README shows one of them).  The model picker
runs on a --models-dir server of two models, without a key."""
import json
import os
import time

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from conftest import ROOT
from server_util import Server, wait_for

KEY = "page-test-key"
SHOTS = os.path.join(ROOT, "build", "webui")


@pytest.fixture(scope="module")
def server(spindle_bin, smollm2_path):
    s = Server(spindle_bin, smollm2_path, "--parallel", "2", "--ctx", "2048", api_key=KEY)
    yield s
    assert s.stop() == 0, s.log_text()[-2000:]


@pytest.fixture(scope="module")
def browser(server):
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1280,900"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    d.set_script_timeout(30)
    os.makedirs(SHOTS, exist_ok=True)
    d.get(server.url + "/")
    yield d
    d.quit()


def js(d, code):
    return d.execute_script(code)


def shot(d, name):
    d.save_screenshot(os.path.join(SHOTS, name + ".png"))


def last_answer(d):
    return js(d, "const m = document.querySelectorAll('.msg.assistant .content');"
                 "return m.length ? m[m.length - 1].textContent : null")


def busy(d):
    return js(d, "return !document.getElementById('stop').classList.contains('hidden')")


def set_field(d, name, value):
    d.find_element(By.ID, "settings-btn").click()
    el = d.find_element(By.ID, "set-" + name)
    el.clear()
    el.send_keys(str(value))
    d.find_element(By.ID, "settings-close").click()


def send(d, text):
    box = d.find_element(By.ID, "input")
    box.send_keys(text)
    d.find_element(By.ID, "send").click()


def test_page_served_without_key_api_needs_it(server):
    r = httpx.get(server.url + "/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "<script src=\"app.js\">" in r.text
    for path in ("/app.js", "/marked.js", "/purify.js"):
        r = httpx.get(server.url + path)
        assert r.status_code == 200 and "javascript" in r.headers["content-type"], path
        assert len(r.content) > 1000, path
    assert httpx.get(server.url + "/v1/models").status_code == 401
    assert httpx.post(server.url + "/v1/chat/completions",
                      json={"messages": [{"role": "user", "content": "hi"}]}).status_code == 401
    # a wrong method on the page's route is an API request like any other:
    # authenticated first (401 without the key), then refused (405)
    assert httpx.post(server.url + "/", json={}).status_code == 401
    assert httpx.post(server.url + "/", json={},
                      headers={"Authorization": "Bearer " + KEY}).status_code == 405


def test_key_then_streamed_answer(browser, server):
    d = browser
    wait_for(lambda: d.find_element(By.ID, "apikey-dialog").is_displayed(), 30, "the key dialog")
    shot(d, "1-api-key")
    d.find_element(By.ID, "apikey-input").send_keys(KEY)
    d.find_element(By.ID, "apikey-save").click()
    wait_for(lambda: d.find_element(By.ID, "model-name").text == server.model_id, 30, "model name")
    assert d.find_element(By.ID, "ctx-size").text == "2048"
    # the server's sampling defaults show as the settings' placeholders
    assert d.find_element(By.ID, "set-temperature").get_attribute("placeholder") == "0.8"
    assert d.find_element(By.ID, "set-top_k").get_attribute("placeholder") == "40"

    send(d, "Write a short Python function that adds two numbers, with a code block.")
    lengths = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        text = last_answer(d)
        if text:
            lengths.append(len(text))
        if text and not busy(d):
            break
        time.sleep(0.02)
    assert not busy(d), "the answer did not finish"
    # streamed: the text grew while the request ran
    assert len(set(lengths)) >= 3, lengths
    stats = d.find_elements(By.CSS_SELECTOR, ".msg.assistant .stats")[-1].text
    assert "tokens/s" in stats, stats
    assert d.find_element(By.ID, "tps").text.endswith("tokens/s")
    shot(d, "2-answer")
    logs = [e for e in d.get_log("browser") if e["level"] == "SEVERE" and "401" not in e["message"]]
    assert not logs, logs


def test_markdown_rendered(browser):
    # the model's Markdown becomes HTML; raw HTML in an answer would be sanitised
    html = js(browser, "const m = document.querySelectorAll('.msg.assistant .content');"
                       "return m[m.length - 1].innerHTML")
    assert "<p>" in html or "<pre>" in html or "<li>" in html, html[:500]
    assert "<script" not in html


def test_token_view_shows_stages(browser):
    d = browser
    d.find_elements(By.CSS_SELECTOR, ".msg.assistant .show-tokens")[-1].click()
    tokens = d.find_elements(By.CSS_SELECTOR, ".msg.assistant .token")
    assert len(tokens) > 3
    # the tokens put together are the answer's text
    answer = js(d, "const c = JSON.parse(localStorage.getItem('spindle.conversations'));"
                   "const m = c[0].messages; return m[m.length - 1].content")
    joined = js(d, "return Array.from(document.querySelectorAll('.msg.assistant .token'))"
                   ".map((t) => t.textContent).join('')")
    assert joined == answer
    tokens[0].click()
    view = d.find_element(By.ID, "token-view")
    wait_for(view.is_displayed, 10, "the token view")
    heads = [th.text.replace("\n", " ") for th in view.find_elements(By.TAG_NAME, "th")]
    for stage in ("penalties", "top-k 40", "temperature 0.8", "top-p 0.95", "min-p 0.05", "removed by"):
        assert stage in heads, heads
    rows = view.find_elements(By.CSS_SELECTOR, "tr.chosen")
    assert len(rows) == 1
    removed = [td.text for td in view.find_elements(By.CSS_SELECTOR, "td.gone")]
    assert any(t in ("top-k", "top-p", "min-p") for t in removed), removed
    shot(d, "3-token-view")
    d.find_element(By.ID, "token-view-close").click()


def test_stop_cancels_on_the_server(browser, server):
    d = browser
    set_field(d, "max_tokens", 1500)
    set_field(d, "temperature", 0)   # greedy: SmolLM2 runs on to max_tokens on this one
    before = server.metrics()
    send(d, "Tell me a very long story about a dragon, a knight and a wizard, in many chapters.")
    wait_for(lambda: (last_answer(d) or "") and busy(d), 60, "the answer to start")
    d.find_element(By.ID, "stop").click()
    wait_for(lambda: not busy(d), 30, "the page to stop")
    stats = d.find_elements(By.CSS_SELECTOR, ".msg.assistant .stats")[-1].text
    assert "(stopped)" in stats, stats
    shot(d, "4-stopped")
    # the server saw the client go and freed the sequence
    wait_for(lambda: server.metrics()["spindle_requests_running"] == 0, 30, "no running request")
    m = server.metrics()
    assert m["spindle_kv_blocks_used"] <= before["spindle_kv_blocks_used"] + 1, (m, before)
    lines = wait_for(lambda: [ln for ln in server.log_text().splitlines()
                              if "path=/v1/chat/completions" in ln and "status=499" in ln],
                     30, "the request logged as 499 (client gone)")
    n_out = int(lines[-1].split("completion_tokens=")[1].split()[0])
    assert 0 < n_out < 1500
    set_field(d, "max_tokens", "")
    set_field(d, "temperature", "")


def test_conversations_kept_and_regenerate(browser):
    d = browser
    first = json.loads(js(d, "return localStorage.getItem('spindle.conversations')"))
    assert len(first) == 1 and len(first[0]["messages"]) == 4
    d.find_element(By.ID, "new-chat").click()
    send(d, "Say hello.")
    wait_for(lambda: last_answer(d) and not busy(d), 120, "the second conversation's answer")
    old = last_answer(d)
    d.find_elements(By.CSS_SELECTOR, ".msg.assistant .regenerate")[-1].click()
    wait_for(lambda: not busy(d) and len(d.find_elements(By.CSS_SELECTOR, ".msg")) == 2, 120,
             "the regenerated answer")
    assert last_answer(d) is not None and old is not None
    d.refresh()
    wait_for(lambda: len(d.find_elements(By.CSS_SELECTOR, "#conv-list li")) == 2, 30,
             "two conversations after a reload")
    assert len(d.find_elements(By.CSS_SELECTOR, ".msg")) == 2
    d.find_elements(By.CSS_SELECTOR, "#conv-list li span")[1].click()
    wait_for(lambda: len(d.find_elements(By.CSS_SELECTOR, ".msg")) == 4, 10, "the first conversation")
    shot(d, "5-conversations")


def test_model_picker_with_two_models(tmp_path, spindle_bin, smollm2_path, gemma3_path):
    """A --models-dir server of two models: the page offers both, the picked
    one answers (its greedy answer, not the other's) and stays picked after
    a reload; a one-model server shows its name instead (above)."""
    d = tmp_path / "models"
    d.mkdir()
    os.symlink(smollm2_path, d / "smollm2.gguf")
    os.symlink(gemma3_path, d / "gemma3.gguf")
    s = Server(spindle_bin, None, "--models-dir", str(d), "--ctx", "512", "--models-max", "2")
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1280,900"):
        opts.add_argument(a)
    b = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        b.get(s.url + "/")
        pick = wait_for(lambda: (lambda e: e if e.is_displayed() else None)(b.find_element(By.ID, "model-pick")),
                        30, "the model selector")
        assert not b.find_element(By.ID, "model-name").is_displayed()
        ids = [o.get_attribute("value") for o in pick.find_elements(By.TAG_NAME, "option")]
        assert sorted(ids) == ["gemma3", "smollm2"]
        first = pick.get_attribute("value")
        other = ids[1] if first == ids[0] else ids[0]
        Select(pick).select_by_value(other)
        assert js(b, "return localStorage.getItem('spindle.model')") == json.dumps(other)
        set_field(b, "temperature", 0)
        set_field(b, "max_tokens", 12)
        send(b, "Say hello.")
        wait_for(lambda: last_answer(b) and not busy(b), 120, "the answer")
        got = js(b, "const c = JSON.parse(localStorage.getItem('spindle.conversations'));"
                    "const m = c[0].messages; return m[m.length - 1].content")
        want = {}
        for model in ids:
            r = s.post("/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": "Say hello."}],
                                                "temperature": 0, "max_tokens": 12})
            assert r.status_code == 200, r.text
            want[model] = r.json()["choices"][0]["message"]["content"]
        assert want[other] != want[first]  # so an answer from the wrong model shows
        assert got == want[other], (got, want)
        shot(b, "6-model-picker")
        b.refresh()
        pick = wait_for(lambda: (lambda e: e if e.is_displayed() else None)(b.find_element(By.ID, "model-pick")),
                        30, "the model selector after a reload")
        assert pick.get_attribute("value") == other
    finally:
        b.quit()
        assert s.stop() == 0, s.log_text()[-2000:]
