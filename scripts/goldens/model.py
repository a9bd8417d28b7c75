#!/usr/bin/env python3
"""scripts/goldens/model.py MODEL_NAME MODEL_PATH OUT.json

Generates the model goldens that tests/py/test_goldens.py compares spindle
against, using the reference implementation llama-cpp-python (run it with
the python printed by scripts/ref-venv).

MODEL_NAME is smollm2-135m or gemma3-270m (it selects the chat-template
markers and the extra long prompt). For each prompt in PROMPTS it records:

  tokens           llm.tokenize(text.encode(), add_bos=True, special=special)
  top10            [[id, logit], ...] of the next token after the whole prompt,
                   by descending logit (ties: lower id first)
  logsumexp        log(sum(exp(logits))) over the full vocabulary, same row
  greedy           up to 64 tokens from our own greedy loop: eval, numpy
                   argmax over the raw logits of the last position (ties:
                   lowest id), append; an end-of-generation token is recorded
                   and ends the loop (stopped_at_eog = true)
  greedy_logprobs  log-softmax of the raw logits at each greedy token
  greedy_top5      the 5 most likely tokens' [id, logprob] at each step

The context is reset between prompts. Values are rounded to 6 decimals,
far below any tolerance a test may use. Output: one JSON object
{"model", "model_file", "model_sha256", "llama_cpp_version", "settings",
 "n_vocab", "prompts": [...]}, written atomically.
"""
import hashlib
import json
import os
import sys

import numpy as np

GREEDY_TOKENS = 64

LLAMA_SETTINGS = dict(n_ctx=4096, n_batch=1024, n_threads=2, logits_all=True, verbose=False, seed=0)

# Distinct paragraphs for the long prompts, so the model cannot just copy.
PARAGRAPHS = [
    "The history of timekeeping is a story of steadily shrinking errors. Early sundials "
    "divided daylight into unequal hours that stretched in summer and shrank in winter. "
    "Water clocks worked at night but drifted as their vessels clogged with mineral "
    "deposits. Mechanical clocks with verge escapements appeared in European towers in the "
    "thirteenth century, yet they could lose a quarter of an hour each day. The pendulum, "
    "applied to clocks by Christiaan Huygens in 1656, cut that error to seconds.",
    "Navigation at sea created a pressing need for better clocks. A ship's longitude can be "
    "found by comparing local noon with the time at a reference port, but only if the "
    "reference time is carried accurately for months. John Harrison, a carpenter from "
    "Lincolnshire, spent decades building marine chronometers, and his fourth design, "
    "tested on a voyage to Jamaica in 1761, lost barely five seconds in eighty-one days.",
    "In the twentieth century quartz crystals replaced pendulums. A thin slice of quartz "
    "vibrates at a precise frequency when driven by an electric field, typically 32,768 "
    "times per second in a wristwatch, a power of two that simple counters can divide "
    "down to one pulse per second. Atomic clocks went further: since 1967 the second has "
    "been defined by 9,192,631,770 oscillations of radiation from caesium-133 atoms.",
    "Modern systems depend on this precision in ways most people never notice. Satellite "
    "positioning works because each satellite broadcasts the time from an onboard atomic "
    "clock, and a receiver computes its distance from the delays. An error of a single "
    "microsecond would misplace a position by about three hundred metres. Financial "
    "exchanges timestamp trades to the microsecond, and power grids synchronise generators "
    "across whole continents.",
    "Even so, the Earth itself is an unreliable clock. Tides slowly brake its rotation, "
    "earthquakes and melting ice shift its mass, and the length of a day wanders by a few "
    "milliseconds from year to year. To keep civil time aligned with the sun, leap seconds "
    "have occasionally been inserted into Coordinated Universal Time, a practice that has "
    "caused software failures and that international bodies have agreed to abandon.",
    "Researchers are now building optical clocks that tick hundreds of thousands of times "
    "faster than caesium standards. Trapped strontium or ytterbium atoms, probed by "
    "ultra-stable lasers, keep time so well that they would drift by less than a second "
    "over the age of the universe. They are sensitive enough to detect the change in the "
    "flow of time when a clock is raised by a couple of centimetres, as general relativity "
    "predicts, which may turn them into instruments for mapping gravity itself.",
    "Questions for discussion: Why did early mechanical clocks need frequent correction? "
    "How does a receiver turn timing signals into a position? What would be gained, and "
    "what lost, by letting civil time drift away from the sun? Write short answers, "
    "giving one concrete example for each, and then summarise the main idea of the text "
    "in a single sentence.",
]

CHAT_QUESTION = "What is the capital of France? Answer in one sentence."

CHAT_TEXT = {
    # SmolLM2's template (tokenizer.chat_template) renders this default system
    # message when none is given.
    "smollm2-135m": (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
        "<|im_end|>\n<|im_start|>user\n" + CHAT_QUESTION + "<|im_end|>\n<|im_start|>assistant\n"
    ),
    # Gemma's template starts with <bos>, which add_bos=True supplies.
    "gemma3-270m": (
        "<start_of_turn>user\n" + CHAT_QUESTION + "<end_of_turn>\n<start_of_turn>model\n"
    ),
}


def prompts_for(model_name):
    """(name, text, special) triples; at least 8, varied as the tests need."""
    p = [
        ("plain_english", "The quick brown fox jumps over the lazy dog. Once upon a time, in a small "
                          "village by the sea, there lived an old fisherman who", False),
        ("code_python", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"
                        "    if n < 2:\n        return n\n", False),
        ("chat", CHAT_TEXT[model_name], True),
        ("non_english", "Français : Le chat dort sur la table.\nDeutsch: Die Katze schläft auf dem "
                        "Tisch.\n日本語：猫はテーブルの上で寝ています。\nРусский:", False),
        ("numbers_json", '{"id": 12345, "price": 19.99, "tags": ["alpha", "beta"], '
                         '"values": [3.14159, -2.5e10, 0, 42], "created": "2024-03-15T08:30:00Z", '
                         '"next_id":', False),
        ("single_word", "Hello", False),
        ("whitespace_symbols", "  Tabs\tand\n\nnewlines   and emoji 🙂🚀 — dashes… and «quotes» "
                               "$x^2 + y^2 = z^2$ ->", False),
        ("list_counting", "Count from one to twenty: one, two, three, four,", False),
        ("long_300", "\n\n".join(PARAGRAPHS[:4]) + "\n\nIn summary,", False),
    ]
    if model_name == "gemma3-270m":
        # Longer than Gemma 3's 512-token sliding window, so the local-attention
        # layers must actually drop old positions.
        p.append(("long_600", "\n\n".join(PARAGRAPHS + PARAGRAPHS[:3]) + "\n\nAnswers:\n1.", False))
    return p


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def log_softmax(logits):
    x = logits.astype(np.float64)
    m = x.max()
    lse = m + np.log(np.exp(x - m).sum())
    return x - lse, float(lse)


def top_k(values, k):
    """Indices of the k largest values, descending, ties broken by lower id."""
    order = np.lexsort((np.arange(values.shape[0]), -values.astype(np.float64)))
    return order[:k]


def r6(x):
    return round(float(x), 6)


def main(argv):
    if len(argv) != 4:
        print("usage: model.py MODEL_NAME MODEL_PATH OUT.json", file=sys.stderr)
        return 2
    model_name, model_path, out_path = argv[1:]
    if model_name not in CHAT_TEXT:
        print("model.py: unknown model name %r" % model_name, file=sys.stderr)
        return 2

    import llama_cpp
    from llama_cpp import Llama

    llm = Llama(model_path=model_path, **LLAMA_SETTINGS)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n_vocab = llm.n_vocab()

    def is_eog(tok):
        return bool(llama_cpp.llama_vocab_is_eog(vocab, int(tok)))

    out_prompts = []
    for name, text, special in prompts_for(model_name):
        llm.reset()
        tokens = llm.tokenize(text.encode("utf-8"), add_bos=True, special=special)
        if name == "long_300" and len(tokens) <= 300:
            raise SystemExit("model.py: long_300 has only %d tokens" % len(tokens))
        if name == "long_600" and len(tokens) <= 600:
            raise SystemExit("model.py: long_600 has only %d tokens" % len(tokens))
        llm.eval(tokens)
        row = np.array(llm.scores[llm.n_tokens - 1, :n_vocab], dtype=np.float32)
        lp, lse = log_softmax(row)
        top10 = [[int(i), r6(row[i])] for i in top_k(row, 10)]

        greedy, greedy_lp, greedy_top5 = [], [], []
        stopped = False
        for _ in range(GREEDY_TOKENS):
            tok = int(np.argmax(row))
            greedy.append(tok)
            greedy_lp.append(r6(lp[tok]))
            greedy_top5.append([[int(i), r6(lp[i])] for i in top_k(lp, 5)])
            if is_eog(tok):
                stopped = True
                break
            if len(greedy) == GREEDY_TOKENS:
                break
            llm.eval([tok])
            row = np.array(llm.scores[llm.n_tokens - 1, :n_vocab], dtype=np.float32)
            lp, _ = log_softmax(row)

        out_prompts.append({
            "name": name,
            "text": text,
            "special": special,
            "tokens": [int(t) for t in tokens],
            "top10": top10,
            "logsumexp": r6(lse),
            "greedy": greedy,
            "greedy_logprobs": greedy_lp,
            "greedy_top5": greedy_top5,
            "stopped_at_eog": stopped,
        })
        cont = llm.detokenize(greedy).decode("utf-8", errors="replace")
        print("%-20s %4d tokens, top1 %d, greedy %2d%s: %r" % (
            name, len(tokens), top10[0][0], len(greedy), " (eog)" if stopped else "",
            cont[:60]), file=sys.stderr)

    doc = {
        "model": model_name,
        "model_file": os.path.basename(model_path),
        "model_sha256": sha256_file(model_path),
        "llama_cpp_version": llama_cpp.__version__,
        "settings": {k: v for k, v in LLAMA_SETTINGS.items() if k != "verbose"},
        "n_vocab": int(n_vocab),
        "prompts": out_prompts,
    }
    tmp = out_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    os.replace(tmp, out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
