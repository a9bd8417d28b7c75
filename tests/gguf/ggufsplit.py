"""Splits a GGUF file into parts laid out as llama.cpp's gguf-split
(--split-max-tensors N) writes them: NAME-00001-of-0000K.gguf ...

Part i (0-based) holds tensors [i*N, (i+1)*N) of the source, in order, at
offsets padded to 32 bytes; the first part holds every key of the source
and each part ends its keys with split.no (uint16), split.tensors.count
(int32, all parts' tensors) and split.count (uint16), in that order (the
order gguf-split leaves them in: setting split.count last moves it last).

read_layout(data) returns the source's pieces: version, the raw bytes of
each key/value entry, and each tensor's info and data bytes.
"""
import struct

from ggufgen import T_I32, T_U16, s_str, s_val

# ggml type id -> (block size, bytes per block)
TYPE_SIZE = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
             10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 30: (1, 2)}
FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
ALIGN = 32


def _pad(n, a=ALIGN):
    return (n + a - 1) // a * a


def read_layout(b):
    assert b[:4] == b"GGUF"
    version, n_t, n_kv = struct.unpack_from("<IQQ", b, 4)
    pos = 24

    def skip_str(p):
        (n,) = struct.unpack_from("<Q", b, p)
        return p + 8 + n

    def skip_val(p, vt):
        if vt == 8:
            return skip_str(p)
        if vt == 9:
            et, n = struct.unpack_from("<IQ", b, p)
            p += 12
            if et == 8:
                for _ in range(n):
                    p = skip_str(p)
                return p
            return p + n * FIXED[et]
        return p + FIXED[vt]

    kvs, alignment = [], ALIGN
    for _ in range(n_kv):
        start = pos
        (klen,) = struct.unpack_from("<Q", b, pos)
        key = b[pos + 8:pos + 8 + klen].decode()
        pos += 8 + klen
        (vt,) = struct.unpack_from("<I", b, pos)
        pos = skip_val(pos + 4, vt)
        if key == "general.alignment":
            (alignment,) = struct.unpack_from("<I", b, pos - 4)
        kvs.append((key, b[start:pos]))
    infos = []
    for _ in range(n_t):
        (nlen,) = struct.unpack_from("<Q", b, pos)
        name = b[pos + 8:pos + 8 + nlen]
        pos += 8 + nlen
        (nd,) = struct.unpack_from("<I", b, pos)
        dims = struct.unpack_from("<%dQ" % nd, b, pos + 4)
        pos += 4 + 8 * nd
        ty, off = struct.unpack_from("<IQ", b, pos)
        pos += 12
        infos.append((name, dims, ty, off))
    data_start = _pad(pos, alignment)
    tensors = []
    for name, dims, ty, off in infos:
        n = 1
        for d in dims:
            n *= d
        bs, bb = TYPE_SIZE[ty]
        size = n // bs * bb
        tensors.append({"name": name, "dims": dims, "type": ty,
                        "data": b[data_start + off:data_start + off + size]})
    return version, kvs, tensors


def _part(kv_raw, tensors, no, count, n_total):
    kv = list(kv_raw) + [s_str("split.no") + struct.pack("<I", T_U16) + s_val(T_U16, no),
                         s_str("split.tensors.count") + struct.pack("<I", T_I32) + s_val(T_I32, n_total),
                         s_str("split.count") + struct.pack("<I", T_U16) + s_val(T_U16, count)]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)) + b"".join(kv)
    infos, off = b"", 0
    for t in tensors:
        infos += s_str(t["name"]) + struct.pack("<I", len(t["dims"]))
        infos += b"".join(struct.pack("<Q", d) for d in t["dims"]) + struct.pack("<IQ", t["type"], off)
        off += _pad(len(t["data"]))
    meta = head + infos
    out = bytearray(meta + b"\0" * (_pad(len(meta)) - len(meta)))
    for t in tensors:
        out += t["data"] + b"\0" * (_pad(len(t["data"])) - len(t["data"]))
    return bytes(out)


def plan(src_path, n_parts):
    """The parts gguf-split would write, as dicts (kv: raw entries, tensors,
    no, count, n_total) that write_part() turns into bytes; a test may
    change one before writing it."""
    with open(src_path, "rb") as f:
        _, kvs, tensors = read_layout(f.read())
    assert all(not k.startswith("split.") for k, _ in kvs)
    per = -(-len(tensors) // n_parts)
    groups = [tensors[i:i + per] for i in range(0, len(tensors), per)]
    assert len(groups) == n_parts
    return [{"kv": [raw for _, raw in kvs] if i == 0 else [], "tensors": g, "no": i, "count": n_parts,
             "n_total": len(tensors)} for i, g in enumerate(groups)]


def part_name(prefix, i, n):
    return "%s-%05d-of-%05d.gguf" % (prefix, i + 1, n)


def write_part(path, part):
    with open(path, "wb") as f:
        f.write(_part(part["kv"], part["tensors"], part["no"], part["count"], part["n_total"]))


def split(src_path, prefix, n_parts):
    """Writes PREFIX-0000i-of-0000K.gguf (K = n_parts) and returns their paths."""
    paths = []
    for i, part in enumerate(plan(src_path, n_parts)):
        paths.append(part_name(prefix, i, n_parts))
        write_part(paths[-1], part)
    return paths
