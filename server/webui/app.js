// spindle's chat page: streams /v1/chat/completions, keeps conversations in
// localStorage, and shows each generated token's decoding stages (the
// `explain` request extension, docs/server-api.md).  Markdown: marked; the HTML it
// makes from model output goes through DOMPurify before it reaches the page.
"use strict";

const $ = (id) => document.getElementById(id);
const SETTINGS = ["temperature", "top_k", "top_p", "min_p", "repeat_penalty", "max_tokens", "seed"];
const STORE = { convs: "spindle.conversations", current: "spindle.current",
                settings: "spindle.settings", key: "spindle.apiKey", model: "spindle.model" };

const state = {
  models: [],           // GET /v1/models' entries
  model: null,          // the one requests name
  convs: [],            // [{id, title, messages: [{role, content, explain?, stats?}]}]
  current: null,        // id of the conversation shown
  controller: null,     // AbortController of the answer being streamed
};

// ---- storage ----

function load(key, fallback) {
  try { const v = localStorage.getItem(key); return v === null ? fallback : JSON.parse(v); }
  catch (e) { return fallback; }
}

function saveConvs() {
  // Token explanations are large: they live in memory only, for answers
  // generated since the page was opened.
  const slim = state.convs.map((c) => ({ id: c.id, title: c.title,
    messages: c.messages.map((m) => ({ role: m.role, content: m.content, stats: m.stats })) }));
  localStorage.setItem(STORE.convs, JSON.stringify(slim));
  localStorage.setItem(STORE.current, JSON.stringify(state.current));
}

function apiKey() { return localStorage.getItem(STORE.key) || ""; }

function headers() {
  const h = { "Content-Type": "application/json" };
  if (apiKey()) h.Authorization = "Bearer " + apiKey();
  return h;
}

// ---- server ----

// The models the server serves: with more than one (--models-dir, or the
// model store's), a selector picks the one requests name, remembered in
// localStorage; with one, its name.
async function fetchModel() {
  const r = await fetch("/v1/models", { headers: headers() });
  if (r.status === 401) { askKey(apiKey() ? "That key was refused." : ""); return; }
  if (r.status === 503) { setTimeout(fetchModel, 1000); return; }
  const body = await r.json();
  state.models = body.data || [];
  const pick = $("model-pick");
  pick.textContent = "";
  for (const m of state.models) {
    const o = document.createElement("option");
    o.value = o.textContent = m.id;
    pick.appendChild(o);
  }
  // a one-model server lists its --alias names too (entries without a
  // router status): one model, no choice
  const many = state.models.length > 1 && state.models.some((m) => m.status);
  pick.classList.toggle("hidden", !many);
  $("model-name").classList.toggle("hidden", many);
  const want = state.model ? state.model.id : load(STORE.model, null);
  useModel(state.models.find((m) => m.id === want) || state.models[0] || null);
}

function useModel(m) {
  state.model = m;
  $("model-name").textContent = m ? m.id : "none";
  if (m) $("model-pick").value = m.id;
  // a model of a --models-dir server tells its context once it is loaded
  $("ctx-size").textContent = m && m.context_length ? m.context_length : "…";
  const d = (m && m.sampling_defaults) || {};
  for (const k of SETTINGS) $("set-" + k).placeholder = d[k] !== undefined ? d[k] : (k === "seed" ? "random" : "");
}

function pickModel() {
  const m = state.models.find((x) => x.id === $("model-pick").value);
  if (!m) return;
  localStorage.setItem(STORE.model, JSON.stringify(m.id));
  useModel(m);
}

function askKey(msg) {
  $("apikey-error").textContent = msg;
  $("apikey-dialog").classList.remove("hidden");
  $("apikey-input").focus();
}

// ---- conversations ----

function conv() { return state.convs.find((c) => c.id === state.current); }

function newConv() {
  const c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6),
              title: "New chat", messages: [] };
  state.convs.unshift(c);
  state.current = c.id;
  saveConvs();
  render();
  $("input").focus();
}

function renderList() {
  const ul = $("conv-list");
  ul.textContent = "";
  for (const c of state.convs) {
    const li = document.createElement("li");
    li.className = c.id === state.current ? "active" : "";
    const span = document.createElement("span");
    span.textContent = c.title;
    li.appendChild(span);
    const del = document.createElement("button");
    del.textContent = "×";
    del.title = "Delete";
    del.onclick = (ev) => {
      ev.stopPropagation();
      state.convs = state.convs.filter((x) => x.id !== c.id);
      if (state.current === c.id) state.current = state.convs.length ? state.convs[0].id : null;
      if (!state.current) newConv(); else { saveConvs(); render(); }
    };
    li.appendChild(del);
    li.onclick = () => { if (!state.controller) { state.current = c.id; saveConvs(); render(); } };
    ul.appendChild(li);
  }
}

function markdown(text) {
  return DOMPurify.sanitize(marked.parse(text || ""));
}

function messageNode(m, i) {
  const div = document.createElement("div");
  div.className = "msg " + m.role;
  const role = document.createElement("div");
  role.className = "role";
  role.textContent = m.role === "user" ? "you" : "assistant";
  const actions = document.createElement("span");
  actions.className = "actions";
  const button = (label, cls, fn) => {
    const b = document.createElement("button");
    b.textContent = label;
    b.className = cls;
    b.onclick = fn;
    actions.appendChild(b);
  };
  button("Copy", "copy", () => copyText(m.content));
  if (m.role === "assistant") {
    if (m.explain && m.explain.length) button("Tokens", "show-tokens", () => toggleTokens(div, m));
    if (i === conv().messages.length - 1) button("Regenerate", "regenerate", regenerate);
  }
  role.appendChild(actions);
  div.appendChild(role);
  const content = document.createElement("div");
  content.className = "content";
  content.innerHTML = markdown(m.content);
  div.appendChild(content);
  if (m.stats) {
    const s = document.createElement("div");
    s.className = "stats";
    s.textContent = m.stats;
    div.appendChild(s);
  }
  return div;
}

function render() {
  renderList();
  const box = $("messages");
  box.textContent = "";
  const c = conv();
  if (!c) return;
  c.messages.forEach((m, i) => box.appendChild(messageNode(m, i)));
  box.scrollTop = box.scrollHeight;
}

function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).catch(() => {});
    return;
  }
  const ta = document.createElement("textarea");
  ta.value = text;
  document.body.appendChild(ta);
  ta.select();
  document.execCommand("copy");
  ta.remove();
}

// ---- the token view ----

function toggleTokens(div, m) {
  let t = div.querySelector(".tokens");
  if (t) { t.remove(); div.querySelector(".content").classList.remove("hidden"); return; }
  t = document.createElement("div");
  t.className = "tokens";
  m.explain.forEach((x, i) => {
    const s = document.createElement("span");
    s.className = "token";
    s.textContent = x.token.text;
    s.onclick = () => {
      div.querySelectorAll(".token.sel").forEach((e) => e.classList.remove("sel"));
      s.classList.add("sel");
      showExplain(x, i);
    };
    t.appendChild(s);
  });
  div.querySelector(".content").classList.add("hidden");
  div.appendChild(t);
}

function fmtP(p) { return (100 * p).toFixed(2) + "%"; }

function showExplain(x, i) {
  const v = $("token-view");
  v.textContent = "";
  const title = document.createElement("div");
  title.innerHTML = "<b>Token " + (i + 1) + "</b>: ";
  const code = document.createElement("code");
  code.textContent = JSON.stringify(x.token.text) + " (id " + x.token.id + ")";
  title.appendChild(code);
  v.appendChild(title);
  const table = document.createElement("table");
  const head = document.createElement("tr");
  const cols = ["token", "id", "model"].concat(x.stages.map((s) =>
    s.name + (s.param === null ? "" : " " + Number(s.param.toPrecision(4)))));
  cols.push("removed by");
  for (const c of cols) { const th = document.createElement("th"); th.textContent = c; head.appendChild(th); }
  table.appendChild(head);
  for (const c of x.candidates) {
    const tr = document.createElement("tr");
    if (c.id === x.token.id) tr.className = "chosen";
    const cell = (text, cls) => {
      const td = document.createElement("td");
      td.textContent = text;
      if (cls) td.className = cls;
      tr.appendChild(td);
    };
    cell(JSON.stringify(c.text), "t");
    cell(c.id);
    cell(fmtP(c.raw));
    let gone = false;
    c.p.forEach((p) => {
      cell(p !== null ? fmtP(p) : gone ? "" : "removed", p === null ? "gone" : "");
      gone = gone || p === null;
    });
    cell(c.removed_by || (c.id === x.token.id ? "chosen" : "–"), c.removed_by ? "gone" : "");
    table.appendChild(tr);
  }
  const kept = document.createElement("tr");
  [["kept", "t"], ["", ""], [x.n_vocab, ""]].concat(x.stages.map((s) => [s.kept, ""]))
    .concat([["", ""]]).forEach(([t, cls]) => {
      const td = document.createElement("td"); td.textContent = t; td.className = cls; kept.appendChild(td);
    });
  table.appendChild(kept);
  v.appendChild(table);
  const legend = document.createElement("div");
  legend.className = "legend";
  legend.textContent = "Each column is the candidate's probability after that decoding stage, " +
    "among the tokens still in the running (model: the raw softmax; penalties: after logit bias " +
    "and repeat/presence/frequency penalties). \"removed\" marks the stage that dropped it. " +
    "Shown: the 8 most likely tokens before and after penalties; the chosen one in green.";
  v.appendChild(legend);
  const close = document.createElement("button");
  close.id = "token-view-close";
  close.textContent = "Close";
  close.onclick = () => v.classList.add("hidden");
  v.appendChild(close);
  v.classList.remove("hidden");
}

// ---- sending ----

function requestBody(messages) {
  const s = load(STORE.settings, {});
  const body = { model: state.model ? state.model.id : undefined, messages: [], stream: true,
                 stream_options: { include_usage: true } };
  if (s.system) body.messages.push({ role: "system", content: s.system });
  for (const m of messages) body.messages.push({ role: m.role, content: m.content });
  for (const k of SETTINGS) {
    if (s[k] === undefined || s[k] === "") continue;
    const v = Number(s[k]);
    if (!Number.isNaN(v)) body[k] = v;
  }
  if ($("explain-on").checked) body.explain = true;
  return body;
}

function setBusy(busy) {
  $("model-pick").disabled = busy;
  $("send").classList.toggle("hidden", busy);
  $("stop").classList.toggle("hidden", !busy);
  $("input").disabled = busy;
}

async function answer() {
  const c = conv();
  const reply = { role: "assistant", content: "", explain: [] };
  const body = requestBody(c.messages);
  c.messages.push(reply);
  render();
  const node = $("messages").lastElementChild;
  const content = node.querySelector(".content");
  setBusy(true);
  state.controller = new AbortController();
  const t0 = performance.now();
  let tFirst = 0, tLast = 0, usage = null, finish = null, pending = false;
  const paint = () => {
    pending = false;
    content.innerHTML = markdown(reply.content);
    $("messages").scrollTop = $("messages").scrollHeight;
  };
  try {
    const r = await fetch("/v1/chat/completions", { method: "POST", headers: headers(),
      body: JSON.stringify(body), signal: state.controller.signal });
    if (r.status === 401) { askKey("The server refused the key."); throw new Error("unauthorized"); }
    if (!r.ok) {
      const e = await r.json().catch(() => ({}));
      throw new Error((e.error && e.error.message) || ("HTTP " + r.status));
    }
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const line = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") continue;
        const ev = JSON.parse(data);
        if (ev.usage) usage = ev.usage;
        for (const ch of ev.choices || []) {
          if (ch.explain) {
            reply.explain.push(ch.explain);
            tLast = performance.now();
            if (!tFirst) tFirst = tLast;
          }
          if (ch.delta && ch.delta.content) {
            reply.content += ch.delta.content;
            if (!tFirst) tFirst = performance.now();
            tLast = performance.now();
          }
          if (ch.finish_reason) finish = ch.finish_reason;
        }
        if (!pending) { pending = true; requestAnimationFrame(paint); }
      }
    }
  } catch (e) {
    if (e.name === "AbortError") finish = "stopped";
    else if (e.message !== "unauthorized") finish = "error: " + e.message;
  }
  state.controller = null;
  const n = usage ? usage.completion_tokens : reply.explain.length;
  const rate = n > 1 && tLast > tFirst ? (n - 1) / ((tLast - tFirst) / 1000) : 0;
  reply.stats = n + " tokens, " + rate.toFixed(1) + " tokens/s, first token after " +
    ((tFirst ? tFirst - t0 : 0) / 1000).toFixed(2) + " s" + (finish ? " (" + finish + ")" : "");
  $("tps").textContent = rate.toFixed(1) + " tokens/s";
  if (!reply.explain.length) delete reply.explain;
  setBusy(false);
  saveConvs();
  render();
  $("input").focus();
  if (state.models.length > 1) fetchModel(); // the answering model's context, now it is loaded
}

function send() {
  const text = $("input").value.trim();
  if (!text || state.controller) return;
  const c = conv();
  if (!c.messages.length) c.title = text.slice(0, 40);
  c.messages.push({ role: "user", content: text });
  $("input").value = "";
  answer();
}

function regenerate() {
  const c = conv();
  if (state.controller || !c.messages.length) return;
  if (c.messages[c.messages.length - 1].role === "assistant") c.messages.pop();
  answer();
}

// ---- settings and wiring ----

function loadSettings() {
  const s = load(STORE.settings, {});
  $("set-system").value = s.system || "";
  for (const k of SETTINGS) $("set-" + k).value = s[k] === undefined ? "" : s[k];
}

function storeSettings() {
  const s = { system: $("set-system").value };
  for (const k of SETTINGS) s[k] = $("set-" + k).value;
  localStorage.setItem(STORE.settings, JSON.stringify(s));
}

function init() {
  state.convs = load(STORE.convs, []);
  state.current = load(STORE.current, null);
  if (!conv()) newConv(); else render();
  loadSettings();
  $("settings").addEventListener("input", storeSettings);
  $("settings-btn").onclick = () => $("settings").classList.toggle("hidden");
  $("settings-close").onclick = () => $("settings").classList.add("hidden");
  $("new-chat").onclick = () => { if (!state.controller) newConv(); };
  $("model-pick").onchange = pickModel;
  $("send").onclick = send;
  $("stop").onclick = () => { if (state.controller) state.controller.abort(); };
  $("input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); send(); }
  });
  $("apikey-save").onclick = () => {
    localStorage.setItem(STORE.key, $("apikey-input").value);
    $("apikey-dialog").classList.add("hidden");
    fetchModel();
  };
  fetchModel();
}

init();
