"""meshstore.safetensors: Hugging Face's safetensors.torch API on meshstore's
reader and writer, checked against the independent reference writer
(tests/persistence/safetensors_ref.py) and the shared malformed files
(tests/persistence/malformed.json)."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import meshstore
import meshstore.safetensors as st

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "persistence"))
import safetensors_ref as ref  # noqa: E402

TORCH_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}
SHAPES = [(3, 5), (7,), (), (0, 4), (2, 3, 1)]


def filled(dtype, shape, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 100).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, shape, generator=g, dtype=torch.int64).to(dtype)


def raw_bytes(t):
    """A tensor's elements as bytes, in order (numpy arrays too)."""
    if isinstance(t, np.ndarray):
        return np.ascontiguousarray(t).tobytes()
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def reference_tensor(name, dtype, shape):
    """The reference bytes of tensor `name` as a torch tensor, or a numpy
    array for the unsigned types torch 1.13 lacks."""
    raw = bytearray(ref.reference_bytes(name, dtype, shape))
    if dtype in ("U16", "U32", "U64"):
        return np.frombuffer(raw, dtype=ref.DTYPES[dtype][0]).reshape(shape).copy()
    torch_dtype = {v: k for k, v in TORCH_DTYPES.items()}[dtype]
    if not raw:
        return torch.empty(shape, dtype=torch_dtype)
    if dtype == "BOOL":
        return torch.frombuffer(raw, dtype=torch.uint8).view(torch.bool).reshape(shape).clone()
    return torch.frombuffer(raw, dtype=torch_dtype).reshape(shape).clone()


def test_every_torch_dtype_round_trips_with_odd_shapes_and_metadata(tmp_path):
    tensors = {}
    for i, dtype in enumerate(TORCH_DTYPES):
        for j, shape in enumerate(SHAPES):
            tensors[f"{dtype}.{j}"] = filled(dtype, shape, i * 10 + j)
    path = tmp_path / "all.safetensors"
    st.save_file(tensors, path, metadata={"format": "pt", "note": "über"})
    back = st.load_file(path)
    assert list(back) == sorted(tensors)
    for name, t in tensors.items():
        assert back[name].dtype == t.dtype, name
        assert back[name].shape == t.shape, name
        assert torch.equal(back[name], t), name
    with st.safe_open(path, framework="pt") as f:
        assert f.metadata() == {"format": "pt", "note": "über"}
        for name, t in tensors.items():
            assert f.get_slice(name).get_dtype() == TORCH_DTYPES[t.dtype]
            assert f.get_slice(name).get_shape() == list(t.shape)
    # save() makes the same bytes, and load() reads them back.
    image = st.save(tensors, metadata={"format": "pt", "note": "über"})
    assert image == path.read_bytes()
    again = st.load(image)
    assert all(torch.equal(again[n], t) for n, t in tensors.items())


def test_files_match_the_reference_writer_byte_for_byte(tmp_path):
    # Every dtype a torch or numpy tensor can hold (float8 cannot be made in
    # torch 1.13 or numpy: read below).
    subset = {n: spec for n, spec in ref.REFERENCE.items() if not spec[0].startswith("F8")}
    ref.write(str(tmp_path / "ref.safetensors"), subset)
    tensors = {n: reference_tensor(n, *spec) for n, spec in subset.items()}
    st.save_file(tensors, tmp_path / "ours.safetensors", metadata=ref.METADATA)
    expected = (tmp_path / "ref.safetensors").read_bytes()
    assert (tmp_path / "ours.safetensors").read_bytes() == expected
    assert st.save(tensors, metadata=ref.METADATA) == expected


def test_the_reference_file_loads_bit_exact_with_raw_bytes_for_missing_types(tmp_path):
    path = str(tmp_path / "ref.safetensors")
    ref.write(path)
    back = st.load_file(path)
    assert set(back) == set(ref.REFERENCE)
    for name, (dtype, shape) in ref.REFERENCE.items():
        t = back[name]
        size = ref.DTYPES[dtype][1]
        if dtype in ("U16", "U32", "U64"):  # torch 1.13 lacks them: raw bytes
            assert t.dtype == torch.uint8 and list(t.shape) == shape + [size], name
        elif dtype.startswith("F8"):  # one byte each: uint8, same shape
            assert t.dtype == torch.uint8 and list(t.shape) == shape, name
        else:
            assert TORCH_DTYPES[t.dtype] == dtype and list(t.shape) == shape, name
        assert raw_bytes(t) == ref.reference_bytes(name, dtype, shape), name
    with st.safe_open(path, framework="np") as f:
        for name, (dtype, shape) in ref.REFERENCE.items():
            a = f.get_tensor(name)
            assert not a.flags.writeable, name
            size = ref.DTYPES[dtype][1]
            if dtype == "BF16":  # numpy lacks it: raw bytes
                assert a.dtype == np.uint8 and list(a.shape) == shape + [size], name
            else:
                assert a.dtype == ref.DTYPES[dtype][0] and list(a.shape) == shape, name
            assert raw_bytes(a) == ref.reference_bytes(name, dtype, shape), name
    image = st.load(open(path, "rb").read())  # the same raw-bytes rule as load_file
    assert image.keys() == back.keys()
    for name, t in image.items():
        assert t.dtype == back[name].dtype and t.shape == back[name].shape, name
        assert raw_bytes(t) == raw_bytes(back[name]), name


def test_non_contiguous_tensors_are_saved_as_their_elements(tmp_path):
    def base():
        return torch.arange(60, dtype=torch.float32).reshape(6, 10)
    tensors = {
        "transposed": base().t(),
        "every_other_row": base()[::2],
        "column": base()[:, 3],
        "expanded": torch.tensor([1.0, 2.0]).expand(3, 2),
        "bool_strided": (base() > 20)[:, ::3],
    }
    st.save_file(tensors, tmp_path / "strided.safetensors")
    back = st.load_file(tmp_path / "strided.safetensors")
    for name, t in tensors.items():
        assert back[name].is_contiguous()
        assert torch.equal(back[name], t), name


def test_shared_tensors_are_refused_and_remove_shared_keeps_one_name(tmp_path):
    w = torch.randn(4, 3)
    with pytest.raises(ValueError, match=r"share memory.*\['emb', 'head'\].*remove_shared"):
        st.save_file({"emb": w, "head": w}, tmp_path / "tied.safetensors")
    with pytest.raises(ValueError, match=r"share memory.*\['all', 'part'\]"):
        st.save({"all": w, "part": w[1:]})
    assert not os.listdir(tmp_path)  # nothing written, not even a temporary
    # Views of one storage that do not overlap are separate tensors.
    st.save_file({"top": w[:2], "bottom": w[2:]}, tmp_path / "halves.safetensors")
    assert torch.equal(st.load_file(tmp_path / "halves.safetensors")["bottom"], w[2:])

    other = torch.zeros(2)
    kept, removed = st.remove_shared({"emb": w, "other": other, "head": w})
    assert list(kept) == ["emb", "other"] and removed == {"head": "emb"}
    with pytest.raises(ValueError, match=r"\['all', 'part'\] overlap in memory without being"):
        st.remove_shared({"all": w, "part": w[1:]})


class TiedLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(11, 4)
        self.norm = torch.nn.LayerNorm(4)
        self.head = torch.nn.Linear(4, 11, bias=False)
        self.head.weight = self.embed.weight  # tied
        self.register_buffer("scale", torch.tensor(2.0))


def test_save_model_and_load_model_keep_tied_weights_tied(tmp_path):
    torch.manual_seed(0)
    model = TiedLM()
    path = tmp_path / "model.safetensors"
    st.save_model(model, path, metadata={"format": "pt"})
    with st.safe_open(path, framework="pt") as f:
        assert "head.weight" not in f.keys() and "embed.weight" in f.keys()
        assert f.metadata() == {"format": "pt", "head.weight": "embed.weight"}
    fresh = TiedLM()
    missing, unexpected = st.load_model(fresh, path)
    assert missing == [] and unexpected == []
    assert torch.equal(fresh.embed.weight, model.embed.weight)
    assert fresh.head.weight.data_ptr() == fresh.embed.weight.data_ptr()
    assert torch.equal(fresh.scale, model.scale)

    st.save_file({"embed.weight": model.embed.weight.detach(), "extra": torch.ones(1)},
                 tmp_path / "partial.safetensors")
    with pytest.raises(RuntimeError, match=r"missing key\(s\): 'scale', 'norm.weight', "
                                           r"'norm.bias'; unexpected key\(s\): 'extra'"):
        st.load_model(TiedLM(), tmp_path / "partial.safetensors")
    missing, unexpected = st.load_model(TiedLM(), tmp_path / "partial.safetensors", strict=False)
    assert missing == ["scale", "norm.weight", "norm.bias"] and unexpected == ["extra"]


def malformed_cases():
    with open(os.path.join(HERE, "..", "persistence", "malformed.json"), encoding="utf-8") as f:
        doc = json.load(f)
    for c in doc["headers"]:
        header = bytes.fromhex(c["header_hex"]) if "header_hex" in c else c["header"].encode()
        image = len(header).to_bytes(8, "little") + header + b"\0" * c["data_bytes"]
        yield pytest.param(image, c["error"], id=c["name"])
    for c in doc["images"]:
        yield pytest.param(bytes.fromhex(c["image_hex"]), c["error"], id=c["name"])


@pytest.mark.parametrize("image,fault", list(malformed_cases()))
def test_every_malformed_file_is_refused_naming_the_file_and_the_fault(tmp_path, image, fault):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(image)
    for call in (lambda: st.load_file(path), lambda: st.safe_open(path, framework="np")):
        with pytest.raises(meshstore.InvalidArgumentError) as e:
            call()
        assert f"safetensors file '{path}'" in str(e.value) and fault in str(e.value)
        assert isinstance(e.value, ValueError)
    with pytest.raises(meshstore.InvalidArgumentError, match="'<bytes>'"):
        st.load(image)


def test_a_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="none.safetensors"):
        st.load_file(tmp_path / "none.safetensors")
    with pytest.raises(meshstore.NotFoundError):
        st.safe_open(tmp_path / "none.safetensors", framework="pt")


def test_safe_open_reads_names_metadata_tensors_and_slices(tmp_path):
    w = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    b = torch.arange(5, dtype=torch.bfloat16)
    path = tmp_path / "m.safetensors"
    st.save_file({"z.w": w, "a.b": b}, path)
    with st.safe_open(path, framework="pt", device="cpu") as f:
        assert f.keys() == ["a.b", "z.w"]
        assert f.offset_keys() == ["z.w", "a.b"]  # F32 laid out before BF16
        assert f.metadata() is None
        assert torch.equal(f.get_tensor("z.w"), w)
        s = f.get_slice("z.w")
        assert s.get_shape() == [4, 6] and s.get_dtype() == "F32"
        assert f.get_slice("a.b").get_dtype() == "BF16"
        for index in [1, -1, slice(1, 3), (slice(None), slice(2, 5)), (Ellipsis, 0),
                      (slice(0, 4, 2), 3), (2, slice(None))]:
            part = s[index]
            assert torch.equal(part, w[index]), index
        part = s[0:2]
        part.fill_(-1)  # a copy: the file's tensor is unchanged
        assert torch.equal(f.get_tensor("z.w"), w)
        with pytest.raises(IndexError, match=r"get_slice 'z.w' of '.*m.safetensors'\[9\]"):
            s[9]
        with pytest.raises(ValueError, match=r"get_slice 'z.w'.*step"):
            s[::-1]
        with pytest.raises(meshstore.NotFoundError, match="has no tensor 'nope'"):
            f.get_tensor("nope")
        with pytest.raises(KeyError):
            f.get_slice("nope")
    with pytest.raises(ValueError, match="the file is closed"):
        f.get_tensor("z.w")
    with pytest.raises(ValueError, match="framework 'tf' is not supported"):
        st.safe_open(path, framework="tf")
    with pytest.raises(ValueError, match="device 'cuda' is not 'cpu'"):
        st.safe_open(path, framework="np", device="cuda")
    with pytest.raises(ValueError, match="not a torch device"):
        st.safe_open(path, framework="pt", device="gpu0")


def test_loaded_tensors_share_the_file_copy_on_write(tmp_path):
    w = torch.arange(1024, dtype=torch.int32)
    path = tmp_path / "w.safetensors"
    st.save_file({"w": w}, path)
    before = path.read_bytes()
    t = st.load_file(path)["w"]
    t.add_(1)  # private to this mapping
    assert torch.equal(t, w + 1)
    assert path.read_bytes() == before
    assert torch.equal(st.load_file(path)["w"], w)
    with st.safe_open(path, framework="np") as f:
        a = f.get_tensor("w")
        with pytest.raises(ValueError, match="read-only"):
            a[0] = 5
        assert f.get_slice("w")[:3].flags.writeable  # slices are copies
        st.save_file({"w": a, "u": np.arange(3, dtype=np.uint16)[::-1].copy()},
                     tmp_path / "again.safetensors")  # read-only arrays save too
    assert torch.equal(st.load_file(tmp_path / "again.safetensors")["w"], w)
    with st.safe_open(tmp_path / "again.safetensors", framework="np") as f:
        u = f.get_tensor("u")
        assert not u.flags.writeable and u.tolist() == [2, 1, 0]
        st.save_file({"u": u}, tmp_path / "third.safetensors")
    assert st.load_file(tmp_path / "third.safetensors")["u"].tolist() == [[2, 0], [1, 0], [0, 0]]


def test_loads_and_slices_read_only_the_pages_they_touch(tmp_path):
    # A 256 MiB tensor in a sparse file: loading it maps it, and a slice of
    # two rows reads those rows' pages only (a copy of the whole tensor would
    # add 256 MiB to the process's resident memory).
    path = tmp_path / "big.safetensors"
    rows, cols = 65536, 1024
    header = json.dumps({"big": {"dtype": "F32", "shape": [rows, cols],
                                 "data_offsets": [0, rows * cols * 4]}}).encode()
    header += b" " * ((8 - (8 + len(header)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        f.truncate(8 + len(header) + rows * cols * 4)
    probe = textwrap.dedent(f"""
        import torch, meshstore.safetensors as st
        def rss():
            with open("/proc/self/status") as f:
                return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) // 1024
        before = rss()
        t = st.load_file({str(path)!r})["big"]
        loaded = rss()
        with st.safe_open({str(path)!r}, framework="pt") as f:
            part = f.get_slice("big")[100:102]
            sliced = rss()
        assert part.shape == (2, {cols}) and not part.any()
        print(loaded - before, sliced - before)
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    loaded, sliced = (int(x) for x in out.stdout.split())
    assert loaded < 32 and sliced < 32, out.stdout  # MiB


def test_bad_input_is_refused_before_anything_is_written(tmp_path):
    path = tmp_path / "x.safetensors"
    with pytest.raises(TypeError, match="expected a dict of name to tensor"):
        st.save_file([torch.ones(1)], path)
    with pytest.raises(TypeError, match="tensor names must be str"):
        st.save_file({1: torch.ones(1)}, path)
    with pytest.raises(TypeError, match="metadata entry 'k'.*str -> int"):
        st.save_file({"a": torch.ones(1)}, path, metadata={"k": 1})
    with pytest.raises(ValueError, match=r"tensor 'c' is torch.complex64, which safetensors"):
        st.save_file({"a": torch.ones(1), "c": torch.ones(2, dtype=torch.complex64)}, path)
    with pytest.raises(ValueError, match="tensor 's' is torch.sparse_coo"):
        st.save_file({"s": torch.eye(2).to_sparse()}, path)
    with pytest.raises(meshstore.InvalidArgumentError, match="tensor name '' is reserved"):
        st.save_file({"": torch.ones(1)}, path)
    with pytest.raises(meshstore.InvalidArgumentError,
                       match="tensor name '__metadata__' is reserved"):
        st.save({"__metadata__": torch.ones(1)})
    with pytest.raises(meshstore.Error, match="no-such-dir"):
        st.save_file({"a": torch.ones(1)}, tmp_path / "no-such-dir" / "x.safetensors")
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_gpu_tensors_save_and_load_on_a_device(tmp_path):
    w = torch.randn(64, 32, device="cuda")
    st.save_file({"w": w, "t": w.t()}, tmp_path / "g.safetensors")
    back = st.load_file(tmp_path / "g.safetensors", device="cuda:0")
    assert back["w"].is_cuda and torch.equal(back["w"], w) and torch.equal(back["t"], w.t())
    with st.safe_open(tmp_path / "g.safetensors", framework="pt", device=0) as f:
        assert f.get_slice("w")[1:3].is_cuda
