"""meshstore.safetensors in place of safetensors.torch (docs/persistence.md)."""
import os, tempfile, torch
import meshstore.safetensors as st          # instead of: import safetensors.torch as st

weights = {"w": torch.randn(4, 4), "b": torch.zeros(4), "mask": torch.rand(3) > 0.5}
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "model.safetensors")
    st.save_file(weights, path, metadata={"format": "pt"})
    tensors = st.load_file(path)                               # over the file's pages
    with st.safe_open(path, framework="pt", device="cpu") as f:
        rows = f.get_slice("w")[1:3]                           # reads only those rows
        same = f.metadata() == {"format": "pt"} and torch.equal(rows, weights["w"][1:3])
    same = same and all(torch.equal(tensors[k], v) for k, v in weights.items())
same = same and st.load(st.save(weights)).keys() == tensors.keys()
print("safetensors_quickstart:", sorted(tensors), same)
