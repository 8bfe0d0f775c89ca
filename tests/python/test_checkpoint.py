"""meshstore.checkpoint.load_into: modules filled from safetensors checkpoints,
on the meta device at 1x memory, or in place."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import meshstore
import meshstore.checkpoint as ckpt
import meshstore.safetensors as st


class TiedLM(torch.nn.Module):
    """Embedding and head tied, a norm, a buffer, a non-persistent buffer."""

    def __init__(self, device=None, vocab=50, dim=8):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim, device=device)
        self.norm = torch.nn.LayerNorm(dim, device=device)
        self.proj = torch.nn.Linear(dim, dim, device=device, dtype=torch.bfloat16)
        self.head = torch.nn.Linear(dim, vocab, bias=False, device=device)
        self.head.weight = self.embed.weight
        self.register_buffer("steps", torch.tensor(7, device=device))
        self.register_buffer("cache", torch.zeros(3, device=device), persistent=False)
        self.proj.bias.requires_grad_(False)


def saved_model(tmp_path, seed=0):
    torch.manual_seed(seed)
    model = TiedLM()
    path = tmp_path / "model.safetensors"
    st.save_model(model, path)
    return model, path


def test_a_meta_module_gets_tensors_over_the_mapped_checkpoint(tmp_path):
    model, path = saved_model(tmp_path)
    meta = TiedLM(device="meta")
    result = ckpt.load_into(meta, path)
    assert result == ckpt.LoadResult([], []) and result.missing_keys == []
    for name, t in model.state_dict().items():
        got = meta.state_dict()[name]
        assert not got.is_meta and got.dtype == t.dtype and torch.equal(got, t), name
    assert meta.head.weight is meta.embed.weight  # still tied: one Parameter
    assert isinstance(meta.proj.weight, torch.nn.Parameter)
    assert meta.proj.weight.requires_grad and not meta.proj.bias.requires_grad
    assert meta.cache.is_meta  # not in the state dict: left alone, as load_state_dict does
    before = path.read_bytes()
    with torch.no_grad():
        meta.norm.weight.add_(1)  # copy-on-write: the file is unchanged
    assert path.read_bytes() == before
    out = meta.proj(torch.ones(2, 8, dtype=torch.bfloat16))  # usable as a module
    assert out.shape == (2, 8)


def test_a_sharded_directory_loads_the_same(tmp_path):
    model, _ = saved_model(tmp_path)
    state = model.state_dict()
    del state["head.weight"]
    names = list(state)
    shards = {"model-00001-of-00002.safetensors": names[:2],
              "model-00002-of-00002.safetensors": names[2:]}
    ckdir = tmp_path / "sharded"
    ckdir.mkdir()
    weight_map = {}
    for file, part in shards.items():
        st.save_file({n: state[n] for n in part}, ckdir / file)
        weight_map.update({n: file for n in part})
    (ckdir / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    meta = TiedLM(device="meta")
    assert ckpt.load_into(meta, ckdir) == ([], [])
    assert torch.equal(meta.head.weight, model.embed.weight)
    assert meta.head.weight is meta.embed.weight


def test_assign_false_copies_in_place_and_keeps_ties(tmp_path):
    model, path = saved_model(tmp_path)
    other = TiedLM()
    ptrs = {n: t.data_ptr() for n, t in other.state_dict().items()}
    assert ckpt.load_into(other, path, assign=False) == ([], [])
    for name, t in model.state_dict().items():
        assert torch.equal(other.state_dict()[name], t), name
        assert other.state_dict()[name].data_ptr() == ptrs[name], name  # in place
    assert other.head.weight is other.embed.weight
    with pytest.raises(ValueError, match="'embed.weight' is on the meta device.*assign=True"):
        ckpt.load_into(TiedLM(device="meta"), path, assign=False)


def test_names_behave_as_load_state_dict_and_nothing_is_written_on_error(tmp_path):
    model, _ = saved_model(tmp_path)
    partial = tmp_path / "partial.safetensors"
    st.save_file({"embed.weight": model.embed.weight.detach(), "extra": torch.ones(1)}, partial)
    target = TiedLM()
    before = {n: t.clone() for n, t in target.state_dict().items()}
    with pytest.raises(RuntimeError, match=r"missing key\(s\): 'steps', 'norm.weight', "
                                           r"'norm.bias', 'proj.weight', 'proj.bias'; "
                                           r"unexpected key\(s\): 'extra'"):
        ckpt.load_into(target, partial)
    assert all(torch.equal(target.state_dict()[n], t) for n, t in before.items())
    result = ckpt.load_into(target, partial, strict=False, assign=False)
    assert result.missing_keys == ["steps", "norm.weight", "norm.bias", "proj.weight",
                                   "proj.bias"]
    assert result.unexpected_keys == ["extra"]
    assert torch.equal(target.embed.weight, model.embed.weight)
    assert torch.equal(target.norm.weight, before["norm.weight"])


def test_a_dtype_or_shape_mismatch_is_refused_naming_each(tmp_path):
    model, path = saved_model(tmp_path)
    wrong = TiedLM(dim=4)
    wrong.proj = torch.nn.Linear(4, 4)  # float32, not the file's bfloat16
    before = {n: t.clone() for n, t in wrong.state_dict().items()}
    with pytest.raises(ValueError) as e:
        ckpt.load_into(wrong, path)
    text = str(e.value)
    assert "'embed.weight': the checkpoint holds F32 [50, 8], the module F32 [50, 4]" in text
    assert "'proj.weight': the checkpoint holds BF16 [8, 8], the module F32 [4, 4]" in text
    assert all(torch.equal(wrong.state_dict()[n], t) for n, t in before.items())


def test_bad_arguments_are_named(tmp_path):
    _, path = saved_model(tmp_path)
    with pytest.raises(TypeError, match="expected a torch.nn.Module, got dict"):
        ckpt.load_into({}, path)
    with pytest.raises(FileNotFoundError, match="none.safetensors"):
        ckpt.load_into(TiedLM(), tmp_path / "none.safetensors")
    (tmp_path / "bad.safetensors").write_bytes(b"\x02\0\0\0\0\0\0\0[]")
    with pytest.raises(meshstore.InvalidArgumentError, match="bad.safetensors"):
        ckpt.load_into(TiedLM(), tmp_path / "bad.safetensors")


def test_a_meta_load_holds_the_weights_once(tmp_path):
    # 128 MiB of weights: a child process builds the model on the meta
    # device, loads it and reads every weight; its resident memory grows by
    # about the weights' bytes (the file's pages), not twice that.
    layers, dim = 8, 2048
    torch.manual_seed(0)
    path = tmp_path / "big.safetensors"
    st.save_file({f"{i}.weight": torch.randn(dim, dim) for i in range(layers)}, path)
    weights = layers * dim * dim * 4 >> 20
    probe = textwrap.dedent(f"""
        import torch, meshstore.checkpoint as ckpt
        def status(field):
            with open("/proc/self/status") as f:
                return next(int(l.split()[1]) for l in f if l.startswith(field)) // 1024
        model = torch.nn.Sequential(*[torch.nn.Linear({dim}, {dim}, bias=False, device="meta")
                                      for _ in range({layers})])
        before = status("VmRSS:")
        ckpt.load_into(model, {str(path)!r})
        total = sum(float(p.sum()) for p in model.parameters())  # touch every weight
        print(status("VmRSS:") - before, status("VmHWM:") - before)
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    rss, peak = (int(x) for x in out.stdout.split())
    assert weights * 0.9 <= rss <= weights * 1.05 + 16, (rss, weights)
    assert peak <= weights * 1.05 + 16, (peak, weights)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_gpu_device_gets_the_weights_there(tmp_path):
    model, path = saved_model(tmp_path)
    meta = TiedLM(device="meta")
    ckpt.load_into(meta, path, device="cuda")
    assert meta.embed.weight.is_cuda and meta.head.weight is meta.embed.weight
    assert torch.equal(meta.norm.weight.cpu(), model.norm.weight)
    on_gpu = TiedLM(device="cuda")
    ckpt.load_into(on_gpu, path, assign=False)
    assert torch.equal(on_gpu.proj.weight.cpu(), model.proj.weight)


# -- sharded saves ---------------------------------------------------------------

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchrun import command as torchrun_command  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sharded_worker.py")
FINAL = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
         "model.safetensors.index.json"]


def torchrun(nproc, *args):
    cmd, ports = torchrun_command(nproc, WORKER, *args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240,
                          env={**os.environ, **ports, "OMP_NUM_THREADS": "1"})


@pytest.mark.parametrize("savers,loaders", [(2, 3), (3, 2)])
def test_a_sharded_save_reads_back_on_another_world_in_another_layout(tmp_path, savers,
                                                                      loaders):
    out = torchrun(savers, "save", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("sharded_worker: ok") == savers, out.stdout + out.stderr
    assert sorted(os.listdir(tmp_path)) == FINAL
    # The files are whole tensors: any reader takes them as they are.
    with st.safe_open(tmp_path / FINAL[0], framework="pt") as f:
        assert f.keys() == ["embed", "norm", "step"] and f.metadata() == {"format": "pt"}
    out = torchrun(loaders, "load", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("sharded_worker: ok") == loaders, out.stdout + out.stderr


def test_a_rank_killed_mid_save_leaves_nothing_a_reader_accepts(tmp_path):
    out = torchrun(2, "kill", str(tmp_path))
    assert out.returncode != 0, out.stdout + out.stderr
    left = os.listdir(tmp_path)
    assert not [n for n in left if n in FINAL or n == "model.safetensors"], left
    assert all(".tmp." in n for n in left), left
    with pytest.raises(meshstore.Error):
        ckpt.load_sharded(tmp_path, {}, {})
    # A later save puts the files in place and clears the dead one's.
    out = torchrun(2, "save", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(os.listdir(tmp_path)) == FINAL


def test_one_rank_saves_and_loads_boxes_without_torch_distributed(tmp_path, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    w = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    result = ckpt.save_sharded(tmp_path, {"w": w.t(), "b": torch.ones(3)},
                               {"w": (meshstore.Shard(0),), "b": meshstore.Replicate()},
                               max_shard_bytes="16B")
    assert result == ckpt.SaveResult(2, 108, 2)
    assert sorted(os.listdir(tmp_path)) == FINAL
    assert torch.equal(st.load_file(tmp_path / FINAL[0])["w"], w.t())
    back = ckpt.load_sharded(tmp_path, {"w": torch.zeros(6, 4)}, {"w": (meshstore.Shard(1),)})
    assert torch.equal(back["w"], w.t())


def test_sharded_save_arguments_are_checked_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    w = {"w": torch.ones(4)}
    S = meshstore.Shard
    with pytest.raises(ValueError, match="'w' has no placement"):
        ckpt.save_sharded(tmp_path, w, {})
    with pytest.raises(ValueError, match="one per mesh dimension"):
        ckpt.save_sharded(tmp_path, w, {"w": (S(0), S(0))})
    with pytest.raises(ValueError, match=r"mesh_shape \(2,\) has 2 ranks, the world 1"):
        ckpt.save_sharded(tmp_path, w, {"w": (S(0),)}, mesh_shape=(2,))
    with pytest.raises(ValueError, match=r"fqn_to_index\['w'\] must be a file number"):
        ckpt.save_sharded(tmp_path, w, {"w": (S(0),)}, fqn_to_index={"w": 0})
    with pytest.raises(ValueError, match="max_shard_bytes must be"):
        ckpt.save_sharded(tmp_path, w, {"w": (S(0),)}, max_shard_bytes=-1)
    with pytest.raises(meshstore.InvalidArgumentError, match="not in file_of"):
        ckpt.save_sharded(tmp_path, {"w": torch.ones(4), "v": torch.ones(1)},
                          {"w": (S(0),), "v": (S(0),)}, fqn_to_index={"w": 1})
    with pytest.raises(meshstore.InvalidArgumentError, match="shards dimension 1 of a tensor"):
        ckpt.save_sharded(tmp_path, w, {"w": (S(1),)})
    with pytest.raises(ValueError, match="Shard: dim must be"):
        S(-1)
    assert os.listdir(tmp_path) == []
    st.save_file({"w": torch.ones(4)}, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=r"rank 0's box of \[4\] is \[4\], the tensor given is"):
        ckpt.load_sharded(tmp_path, {"w": torch.zeros(2)}, {"w": (S(0),)})
    with pytest.raises(KeyError, match="no tensor 'v'"):
        ckpt.load_sharded(tmp_path, {"v": torch.zeros(2)}, {"v": (S(0),)})
