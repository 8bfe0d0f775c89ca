#!/usr/bin/python3
"""An independent safetensors reader and writer (standard library + numpy).

Used by tests/persistence to check that files meshstore writes follow the
format, and that files written by another implementation load in
meshstore. It shares no code with meshstore: it reads the format from its
description (8-byte little-endian header length, JSON header, raw bytes).

  safetensors_ref.py write FILE     write the reference tensors to FILE
  safetensors_ref.py check FILE     read FILE, check it holds exactly the
                                    reference tensors, bit for bit
Exit 0 and "ok" on success; 1 with the reason otherwise.

The reference tensors: every dtype (bf16 and fp8 kept as raw bits), a 0-dim
tensor, an empty one and non-ASCII names. Byte j of tensor t holds
(j * 7 + len(t.encode())) % 251, so both sides can compute any tensor.
"""

import json
import struct
import sys

import numpy as np

# dtype name -> (numpy dtype of the raw elements, element size)
DTYPES = {
    "BOOL": (np.bool_, 1),
    "U8": (np.uint8, 1),
    "I8": (np.int8, 1),
    "U16": (np.uint16, 2),
    "I16": (np.int16, 2),
    "U32": (np.uint32, 4),
    "I32": (np.int32, 4),
    "U64": (np.uint64, 8),
    "I64": (np.int64, 8),
    "F16": (np.float16, 2),
    "BF16": (np.uint16, 2),  # raw bits: numpy has no bfloat16
    "F32": (np.float32, 4),
    "F64": (np.float64, 8),
    "F8_E4M3": (np.uint8, 1),  # raw bits
    "F8_E5M2": (np.uint8, 1),  # raw bits
}

# name -> (dtype, shape)
REFERENCE = {
    "bool.mask": ("BOOL", [3, 5]),
    "u8": ("U8", [17]),
    "i8": ("I8", [2, 3]),
    "u16": ("U16", [4, 4]),
    "i16": ("I16", [7]),
    "u32": ("U32", [3, 2]),
    "i32": ("I32", [5]),
    "u64": ("U64", [2, 2]),
    "i64": ("I64", [3]),
    "model.layers.0.f16": ("F16", [8, 3]),
    "model.layers.0.bf16": ("BF16", [6, 5]),
    "f32": ("F32", [4, 2, 3]),
    "f64": ("F64", [5]),
    "f8.e4m3": ("F8_E4M3", [9]),
    "f8.e5m2": ("F8_E5M2", [3, 3]),
    "scalar": ("F32", []),
    "empty": ("F32", [0, 4]),
    "gewichte.größe": ("BF16", [2, 2]),
    "重み": ("I32", [2]),
}
METADATA = {"format": "pt", "note": "über"}


def reference_bytes(name, dtype, shape):
    n = DTYPES[dtype][1]
    for d in shape:
        n *= d
    k = len(name.encode("utf-8"))
    raw = bytes((j * 7 + k) % 251 for j in range(n))
    if dtype == "BOOL":  # only 0 and 1 are booleans
        raw = bytes(b & 1 for b in raw)
    return raw


def write(path, reference=None, metadata=None):
    """Writes `reference` ({name: (dtype, shape)}, REFERENCE by default) with
    the reference bytes, and `metadata` (METADATA by default)."""
    reference = REFERENCE if reference is None else reference
    header = {"__metadata__": METADATA if metadata is None else metadata}
    data = b""
    # Largest element first, so every tensor is aligned to its element size.
    for name, (dtype, shape) in sorted(reference.items(), key=lambda kv: -DTYPES[kv[1][0]][1]):
        raw = reference_bytes(name, dtype, shape)
        arr = np.frombuffer(raw, dtype=DTYPES[dtype][0]).reshape(shape)
        blob = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    # Compact, as Hugging Face's writer: meshstore's files match these bytes.
    text = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.write(data)


def fail(why):
    print("safetensors_ref: " + why)
    sys.exit(1)


def check(path):
    with open(path, "rb") as f:
        image = f.read()
    if len(image) < 8:
        fail("shorter than 8 bytes")
    (n,) = struct.unpack("<Q", image[:8])
    if n > len(image) - 8:
        fail("header length %d past the end" % n)
    if (8 + n) % 8 != 0:
        fail("the data does not start at a multiple of 8 (header %d bytes)" % n)
    header = json.loads(image[8:8 + n].decode("utf-8"))
    data = image[8 + n:]
    metadata = header.pop("__metadata__", {})
    if metadata != METADATA:
        fail("metadata %r, expected %r" % (metadata, METADATA))
    if set(header) != set(REFERENCE):
        fail("names %r, expected %r" % (sorted(header), sorted(REFERENCE)))
    spans = []
    for name, entry in header.items():
        dtype, shape = REFERENCE[name]
        if entry["dtype"] != dtype or entry["shape"] != shape:
            fail("%s: %s %r, expected %s %r" % (name, entry["dtype"], entry["shape"], dtype, shape))
        begin, end = entry["data_offsets"]
        spans.append((begin, end, name))
        np_dtype, size = DTYPES[dtype]
        if begin % size != 0:
            fail("%s: starts at %d, not aligned to its element size %d" % (name, begin, size))
        arr = np.frombuffer(data[begin:end], dtype=np_dtype)
        count = 1
        for d in shape:
            count *= d
        if arr.size != count:
            fail("%s: %d elements, expected %d" % (name, arr.size, count))
        arr = arr.reshape(shape)
        if arr.tobytes() != reference_bytes(name, dtype, shape):
            fail("%s: the bytes differ" % name)
    spans.sort()
    at = 0
    for begin, end, name in spans:
        if begin != at:
            fail("%s starts at %d, expected %d" % (name, begin, at))
        at = end
    if at != len(data):
        fail("%d data bytes, the tensors cover %d" % (len(data), at))


def read(path):
    """{name: (dtype, shape, raw bytes)} and the metadata of one file, read
    by the format's description (header, then offsets into the data)."""
    with open(path, "rb") as f:
        image = f.read()
    (n,) = struct.unpack("<Q", image[:8])
    header = json.loads(image[8:8 + n].decode("utf-8"))
    data = image[8 + n:]
    metadata = header.pop("__metadata__", {})
    out = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        out[name] = (entry["dtype"], entry["shape"], data[begin:end])
    return out, metadata


def read_checkpoint(path):
    """read() of a file, or of every file of a directory with
    model.safetensors.index.json (each tensor where the index says)."""
    import os
    index = os.path.join(path, "model.safetensors.index.json")
    if not os.path.isdir(path):
        return read(path)[0]
    if not os.path.exists(index):
        return read(os.path.join(path, "model.safetensors"))[0]
    with open(index, encoding="utf-8") as f:
        weight_map = json.load(f)["weight_map"]
    out = {}
    for file in sorted(set(weight_map.values())):
        tensors, _ = read(os.path.join(path, file))
        for name, t in tensors.items():
            if weight_map.get(name) != file:
                fail("%s: in %s, the index says %s" % (name, file, weight_map.get(name)))
            out[name] = t
    if set(out) != set(weight_map):
        fail("the index names %d tensors, the files hold %d" % (len(weight_map), len(out)))
    return out


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "check"):
        print(__doc__)
        sys.exit(2)
    if sys.argv[1] == "write":
        write(sys.argv[2])
    else:
        check(sys.argv[2])
    print("ok")


if __name__ == "__main__":
    main()
