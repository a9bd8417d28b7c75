#!/usr/bin/env python3
"""scripts/goldens/quantize.py SPINDLE OUT_DIR [MODEL.gguf ...]

Generates tests/goldens/quantize-*.json, the references that
tests/py/test_quantize.py holds `spindle quantize` to, with the reference
implementation llama-cpp-python (run it with the python printed by
scripts/ref-venv): for each input model and each file type, llama.cpp's
llama_model_quantize writes the file and we record every tensor's type and
the sha256 of its data, and the sha256 of the whole file (without an
importance matrix; with one, llama-quantize adds keys the library call does
not).

Inputs:
  tiny     tests/gguf/quantmodel.py's small F32 model (built here and by
           the test, byte for byte the same); also written with FFN-down
           rows of 360 (quantize-odd.json: the fallbacks to F16)
  MODEL    each further argument: a model file that SPINDLE first converts
           to F16 with `spindle quantize --allow-requantize MODEL F16`
           (the test does the same); the F16 file is then the input of both
           quantizers.  The golden also records the sha256 of that F16
           file and whether llama.cpp's own conversion to F16 gives the
           same bytes.

With --imatrix, the tiny model is also quantized with an importance
matrix (tests/gguf/quantmodel.py's tiny_imatrix) for the types that use it.
Output files are written atomically.
"""
import ctypes
import hashlib
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "gguf"))
import quantmodel  # noqa: E402

import llama_cpp  # noqa: E402

# name -> llama.cpp file type id (the presets of src/quantize/plan.c)
FTYPES = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 8, "Q5_1": 9, "Q8_0": 7, "Q2_K": 10, "Q3_K_S": 11, "Q3_K_M": 12,
          "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18, "F16": 1,
          "BF16": 32, "F32": 0}
IMATRIX_TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_S", "Q6_K"]


def sha(b):
    return hashlib.sha256(b).hexdigest()


def summarize(path):
    _, tensors = quantmodel.read_gguf(path)
    return {name: [quantmodel.TYPE_NAME[t["type"]], sha(t["data"])[:20]] for name, t in sorted(tensors.items())}


def llama_quantize(src, dst, ftype, imatrix=None):
    p = llama_cpp.llama_model_quantize_default_params()
    p.nthread = 2
    p.ftype = ftype
    p.allow_requantize = True
    keep = []
    if imatrix:
        arr = (llama_cpp.llama_model_imatrix_data * (len(imatrix) + 1))()
        for i, (name, w) in enumerate(sorted(imatrix.items())):
            buf = (ctypes.c_float * len(w))(*w)
            keep.append(buf)
            arr[i].name = name.encode()
            arr[i].data = ctypes.cast(buf, ctypes.POINTER(ctypes.c_float))
            arr[i].size = len(w)
        arr[len(imatrix)].name = None
        p.imatrix = ctypes.cast(arr, ctypes.POINTER(llama_cpp.llama_model_imatrix_data))
        keep.append(arr)
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p))
    if rc != 0:
        raise SystemExit("llama_model_quantize %s -> %d failed" % (src, ftype))


def golden(src, types, imatrix=None, files=None):
    """{type: tensor summary}; with `files`, also files[type] = the whole
    file's sha256."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in types:
            dst = os.path.join(tmp, name + ".gguf")
            llama_quantize(src, dst, FTYPES[name], imatrix)
            out[name] = summarize(dst)
            if files is not None:
                files[name] = sha(open(dst, "rb").read())
            os.unlink(dst)
            print("  %s" % name, file=sys.stderr)
    return out


ODD_TYPES = ["Q4_0", "Q5_1", "Q8_0", "Q4_K_M"]


def odd_golden(tmp, common):
    """The tiny model with FFN-down rows of 360 (quantmodel.ODD_FF): the
    32-element types' fallback to F16."""
    odd = os.path.join(tmp, "odd.gguf")
    with open(odd, "wb") as f:
        f.write(quantmodel.tiny_f32_model(quantmodel.ODD_FF))
    print("odd", file=sys.stderr)
    files = {}
    return dict(common, input="tests/gguf/quantmodel.py tiny_f32_model(ODD_FF)",
                input_sha256=sha(open(odd, "rb").read()), types=golden(odd, ODD_TYPES, files=files), files=files)


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def main():
    args = [a for a in sys.argv[1:] if a != "--imatrix"]
    if len(args) < 2:
        raise SystemExit(__doc__)
    spindle, out_dir, models = args[0], args[1], args[2:]
    common = {"llama_cpp_version": llama_cpp.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        tiny = os.path.join(tmp, "tiny.gguf")
        with open(tiny, "wb") as f:
            f.write(quantmodel.tiny_f32_model())
        print("tiny", file=sys.stderr)
        files = {}
        g = dict(common, input="tests/gguf/quantmodel.py tiny_f32_model()", input_sha256=sha(open(tiny, "rb").read()),
                 types=golden(tiny, list(FTYPES), files=files), files=files)
        if "--imatrix" in sys.argv:
            g["imatrix_types"] = golden(tiny, IMATRIX_TYPES, quantmodel.tiny_imatrix())
        write_json(os.path.join(out_dir, "quantize-tiny.json"), g)
        write_json(os.path.join(out_dir, "quantize-odd.json"), odd_golden(tmp, common))
        for model in models:
            base = os.path.basename(model)
            f16 = os.path.join(tmp, "f16.gguf")
            subprocess.run([spindle, "quantize", "--allow-requantize", model, f16, "F16"], check=True,
                           stdout=subprocess.DEVNULL)
            ref16 = os.path.join(tmp, "ref16.gguf")
            llama_quantize(model, ref16, FTYPES["F16"])
            same = summarize(ref16) == summarize(f16)
            print(base, "F16 from llama.cpp identical:", same, file=sys.stderr)
            types = ["Q4_0", "Q8_0", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "BF16"]
            files = {}
            g = dict(common, input="spindle quantize --allow-requantize %s F16" % base,
                     input_sha256=sha(open(f16, "rb").read()), llama_cpp_f16_identical=same,
                     types=golden(f16, types, files=files), files=files)
            stem = base.split(".")[0].split("-")[0].lower()
            write_json(os.path.join(out_dir, "quantize-%s.json" % stem), g)


if __name__ == "__main__":
    main()
