#!/usr/bin/python3
"""Loads a tessera_export folder from Python and compares it with the job's dump.

    export_check.py EXPORT_DIR DUMP_DIR

Always: reads every tensor with the standard library alone (the file formats'
specs: safetensors' length-prefixed JSON header, npy's header dict parsed with
ast.literal_eval as numpy does) and checks the dense parameters and some
stored rows against the dump (common/param_file.h), bit for bit.
When /usr/bin/python3 has them: numpy.load (npy exports),
safetensors.numpy.load_file, and safetensors.torch.load_file into an
nn.ModuleList model; each missing one is reported as SKIP, never installed.
Exit 0: every part that ran passed.
"""
import ast
import json
import os
import struct
import sys

FMT = {"float32": "f", "int64": "q"}


def read_params(path):
    """common/param_file.h: name -> (rows, cols, raw bytes) of float32/int64 arrays."""
    data = open(path, "rb").read()
    assert data[:8] == b"TSPARAM1", path
    (count,) = struct.unpack_from("<I", data, 8)
    pos, out = 12, {}
    for _ in range(count):
        (n,) = struct.unpack_from("<I", data, pos)
        name = data[pos + 4:pos + 4 + n].decode()
        pos += 4 + n
        dtype, rows, cols = struct.unpack_from("<BQQ", data, pos)
        pos += 17
        size = rows * cols * (4 if dtype == 0 else 8 if dtype == 1 else 1)
        out[name] = (rows, cols, data[pos:pos + size])
        pos += size
    return out


def load_stdlib(out, desc):
    """name -> (shape, raw little-endian bytes), from the specs alone."""
    files, tensors = {}, {}
    for t in desc["tensors"]:
        f = files.setdefault(t["file"], open(os.path.join(out, t["file"]), "rb").read())
        if desc["format"] == "npy":
            assert f[:6] == b"\x93NUMPY", t["file"]
            major = f[6]
            (hlen,) = struct.unpack_from("<H" if major == 1 else "<I", f, 8)
            start = (10 if major == 1 else 12) + hlen
            assert start % 64 == 0, t["file"]
            header = ast.literal_eval(f[start - hlen:start].decode("latin1"))
            assert list(header["shape"]) == t["shape"] and not header["fortran_order"], t["name"]
            assert header["descr"] == ("<f4" if t["dtype"] == "float32" else "<i8"), t["name"]
            raw = f[start:]
        else:
            (n,) = struct.unpack_from("<Q", f, 0)
            assert (8 + n) % 8 == 0, t["file"]
            h = json.loads(f[8:8 + n])
            entry = h[t["name"]]
            assert entry["shape"] == t["shape"], t["name"]
            b, e = entry["data_offsets"]
            raw = f[8 + n + b:8 + n + e]
        count = 1
        for d in t["shape"]:
            count *= d
        assert len(raw) == count * (4 if t["dtype"] == "float32" else 8), t["name"]
        tensors[t["name"]] = (t["shape"], raw)
    return tensors


def main():
    out, dump = sys.argv[1], sys.argv[2]
    desc = json.load(open(os.path.join(out, "model.json")))
    tensors = load_stdlib(out, desc)
    failures = []

    dense = read_params(os.path.join(dump, "dense.params"))
    for name, (_, _, raw) in dense.items():
        if tensors[name][1] != raw:
            failures.append("dense " + name + " differs from the dump")
    # A few stored rows of each dumped shard: its columns of the weight.
    rows_checked = 0
    dims = {t["name"]: t["embedding_dim"] for t in desc["tables"]}
    for f in sorted(os.listdir(dump)):
        if not f.startswith("shard"):
            continue
        p = read_params(os.path.join(dump, f))
        meta = json.loads(p["meta"][2])
        ids = struct.unpack("<%dq" % p["ids"][0], p["ids"][2])
        width, c0, nc = meta["row_width"], meta["col_offset"], meta["num_cols"]
        table = meta["table"]
        weight = tensors["tables.%s.weight" % table][1]
        order = ids
        if desc["materialized_only"]:
            stored = tensors["tables.%s.ids" % table][1]
            order = struct.unpack("<%dq" % (len(stored) // 8), stored)
        for i, r in list(enumerate(ids))[:5]:
            want = p["rows"][2][i * width * 4:(i * width + nc) * 4]
            at = order.index(r) if desc["materialized_only"] else r
            got = weight[(at * dims[table] + c0) * 4:(at * dims[table] + c0 + nc) * 4]
            if got != want:
                failures.append("%s row %d differs from the dump" % (table, r))
            rows_checked += 1
    print("stdlib reader: %d tensors, %d dense arrays and %d rows compared" % (len(tensors), len(dense), rows_checked))

    try:
        import numpy as np
    except ImportError:
        np = None
        print("SKIP: numpy is not installed for /usr/bin/python3: numpy.load / safetensors.numpy not checked")
    if np is not None:
        arrays = {}
        if desc["format"] == "npy":
            for t in desc["tensors"]:
                arrays[t["name"]] = np.load(os.path.join(out, t["file"]))
        else:
            try:
                from safetensors.numpy import load_file
                for f in sorted({t["file"] for t in desc["tensors"]}):
                    arrays.update(load_file(os.path.join(out, f)))
            except ImportError:
                print("SKIP: safetensors is not installed for /usr/bin/python3: safetensors.numpy not checked")
        for name, a in arrays.items():
            shape, raw = tensors[name]
            if list(a.shape) != shape or a.astype(a.dtype.newbyteorder("<")).tobytes() != raw:
                failures.append("numpy's " + name + " differs")
        if arrays:
            print("numpy: %d tensors loaded and equal" % len(arrays))

    if desc["format"] == "safetensors":
        try:
            import torch
            from safetensors.torch import load_file as torch_load
        except ImportError:
            torch = None
            print("SKIP: torch or safetensors is not installed for /usr/bin/python3: safetensors.torch not checked")
        if torch is not None:
            sd = torch_load(os.path.join(out, "model.safetensors"))
            layers = desc["dense"]["layers"]
            model = torch.nn.Module()
            model.bottom = torch.nn.ModuleList(
                torch.nn.Linear(l["in"], l["out"]) for l in layers if l["name"].startswith("bottom."))
            model.top = torch.nn.ModuleList(
                torch.nn.Linear(l["in"], l["out"]) for l in layers if l["name"].startswith("top."))
            model.load_state_dict({k: v for k, v in sd.items() if not k.startswith("tables.")})
            print("torch: dense model loaded into nn.ModuleList bottom/top")

    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
