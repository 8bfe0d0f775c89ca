"""meshstore.safetensors: Hugging Face's ``safetensors.torch``, on meshstore's
strict reader and writer.

    import meshstore.safetensors as st     # instead of: import safetensors.torch as st

    st.save_file({"w": torch.randn(4, 4)}, "model.safetensors", metadata={"format": "pt"})
    tensors = st.load_file("model.safetensors")       # over the file's pages, no copy
    with st.safe_open("model.safetensors", framework="pt") as f:
        rows = f.get_slice("w")[0:2]                   # reads only those rows

The same names and semantics as Hugging Face's module (``save_file``,
``load_file``, ``save``, ``load``, ``safe_open``, ``save_model``,
``load_model``), with what docs/persistence.md's table lists on top:
non-contiguous tensors are saved (packed as they are written), a read-only
zero-copy view of a file (``framework="np"``), ``remove_shared``, and errors
that name the file and the fault.

Which calls copy:

- ``load_file`` and ``safe_open(...).get_tensor`` share the file's pages: the
  tensors view a private copy-on-write mapping of it. Nothing is read until
  used; a write to a tensor copies that page for this process only, and never
  reaches the file. Tensors of one ``safe_open`` (or one ``load_file``) share
  that mapping: a tensor fetched twice is the same memory.
- ``safe_open(..., framework="np")`` gives read-only numpy arrays over the
  file's shared pages: zero-copy, and a write raises instead of copying.
- ``get_slice(name)[...]`` copies the selected elements, reading only the
  pages that hold them.
- ``load(bytes)`` copies each tensor once out of the bytes; ``save`` builds the
  file's bytes in memory.
- ``device="cuda"`` copies each tensor to the GPU as it is fetched.

Types torch 1.13 lacks (U16, U32, U64; F8_E4M3 and F8_E5M2 are one byte) come
as their raw bytes: a uint8 tensor, with one more trailing dimension of the
element size where that is over one byte. With ``framework="np"``, BF16 and
F8 come as raw bytes the same way (numpy lacks them).
"""

import os
import sys
from collections.abc import Mapping

from . import _native
from ._errors import NotFoundError
from ._tensors import export

__all__ = [
    "load", "load_file", "load_model", "remove_shared", "safe_open", "save", "save_file",
    "save_model",
]

# The safetensors dtype of each torch dtype safetensors can hold, by name.
_SAFETENSORS_NAMES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL",
}

# Safetensors dtypes a framework has no type for: fetched as raw bytes
# (the one place this rule is kept; the native calls are told it).
_TORCH_LACKS = frozenset({"U16", "U32", "U64"})
_NUMPY_LACKS = frozenset({"BF16", "F8_E4M3", "F8_E5M2"})


class FileNotFound(NotFoundError, FileNotFoundError):
    """The file does not exist: a meshstore.NotFoundError that is also the
    FileNotFoundError Hugging Face's module raises."""


def save_file(tensors, filename, metadata=None):
    """Writes ``tensors`` (a dict of name to tensor, any strides, host or GPU
    memory) and ``metadata`` (a dict of str to str) as one safetensors file.
    The bytes go to a temporary name next to ``filename`` and are renamed
    into place once flushed: a failure leaves no torn file under the name.
    Tensors that share memory are refused (see ``remove_shared``)."""
    path = os.fspath(filename)
    what = f"save_file '{path}'"
    items = _items(tensors, what)
    _native.safetensors_write(path, items, _metadata(metadata, what))


def save(tensors, metadata=None):
    """The bytes ``save_file`` would write, as a ``bytes`` object."""
    items = _items(tensors, "save")
    return _native.safetensors_serialize(items, _metadata(metadata, "save"))


def load_file(filename, device="cpu"):
    """Every tensor of the file, by name (sorted, as Hugging Face's), over a
    copy-on-write mapping of it (no copy; on a GPU ``device``, copied there)."""
    with safe_open(filename, framework="pt", device=device) as f:
        return {name: f.get_tensor(name) for name in f.keys()}


def load(data):
    """Every tensor of a file image (``bytes``, or any buffer), by name: each
    a copy, so ``data`` may go at once."""
    _torch("load")
    tensors, _ = _native.safetensors_load(data, _TORCH_LACKS)
    return {name: t.torch() for name, t in sorted(tensors, key=lambda e: e[0])}


class safe_open:  # noqa: N801 (Hugging Face's name)
    """A safetensors file, opened lazily, as a context manager.

    ``framework="pt"`` gives torch tensors over a copy-on-write mapping (see
    the module's doc), on ``device``; ``framework="np"`` read-only numpy
    arrays over the file's pages (``device`` must be "cpu").
    """

    def __init__(self, filename, framework, device="cpu"):
        path = os.fspath(filename)
        kinds = {"pt": "pt", "torch": "pt", "np": "np", "numpy": "np"}
        if framework not in kinds:
            raise ValueError(
                f"safe_open '{path}': framework {framework!r} is not supported: 'pt' (torch "
                "tensors over a copy-on-write mapping) or 'np' (read-only numpy arrays)")
        self._framework = kinds[framework]
        self._device = _device(device, self._framework, path)
        self._file = _open(_native.SafetensorsFile, path, self._framework == "pt")
        self._path = path
        self._entries = {e[0]: e for e in self._file.entries()}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        # Tensors already fetched keep the mapping alive.
        self._file = None
        return False

    def keys(self):
        """The tensors' names, sorted."""
        return sorted(self._entries)

    def offset_keys(self):
        """The tensors' names in the order their bytes lie in the file."""
        return list(self._entries)

    def metadata(self):
        """The file's ``__metadata__`` (a dict of str), or None without any."""
        return self._open("metadata").metadata()

    def get_tensor(self, name):
        """Tensor ``name``: over the mapping (see the class), or copied to the
        GPU device. A name the file lacks raises meshstore.NotFoundError (a
        KeyError)."""
        view = self._view(name, "get_tensor")
        if self._framework == "pt" and self._device is not None:
            return view.to(self._device)
        return view

    def get_slice(self, name):
        """Tensor ``name``, to be indexed: ``get_shape()``, ``get_dtype()``
        and ``[...]`` with ints, slices and ``...``, which reads only the
        selected elements' pages and answers a copy of them."""
        self._open("get_slice")
        if name not in self._entries:
            self._file.tensor(name)  # raises, naming the file and the tensor
        return _Slice(self, name)

    def _open(self, call):
        if self._file is None:
            raise ValueError(f"{call} '{self._path}': the file is closed (its `with` block ended)")
        return self._file

    def _view(self, name, call):
        f = self._open(call)
        entry = self._entries.get(name)
        lacks = _TORCH_LACKS if self._framework == "pt" else _NUMPY_LACKS
        t = f.tensor(name, entry is not None and entry[1] in lacks)
        if self._framework == "pt":
            return t.torch()
        import numpy
        a = numpy.asarray(t)
        a.flags.writeable = False  # an empty one too (numpy makes its own)
        return a


class _Slice:
    """A tensor of an open file, fetched only in the parts indexed."""

    def __init__(self, opened, name):
        self._opened = opened
        self._name = name

    def get_shape(self):
        return list(self._opened._entries[self._name][2])

    def get_dtype(self):
        """The safetensors dtype name, such as "F32" or "BF16"."""
        return self._opened._entries[self._name][1]

    def __getitem__(self, index):
        view = self._opened._view(self._name, "get_slice")
        try:
            part = view[index]
        except (IndexError, TypeError, ValueError) as e:
            raise type(e)(f"get_slice '{self._name}' of '{self._opened._path}'[{index!r}]: "
                          f"{e}") from None
        if self._opened._framework == "np":
            import numpy
            return numpy.array(part)  # a writable copy
        if self._opened._device is not None:
            return part.to(self._opened._device)
        return part.clone()


def remove_shared(tensors):
    """(kept, removed): ``tensors`` with one name kept for each group of names
    that are the same tensor (tied weights, such as an embedding and an LM
    head), the first in ``tensors``' order; ``removed`` maps each name left
    out to the name kept for it. Tensors that overlap without being the same
    view are refused (save a ``.clone()`` of them)."""
    kept = dict(tensors)
    removed = {}
    for group in _shared_groups(tensors):
        first = tensors[group[0]]
        same = all(_same_view(first, tensors[n]) for n in group[1:])
        if not same:
            raise ValueError(
                f"remove_shared: tensors {group} overlap in memory without being the same "
                "tensor; save a .clone() of each instead")
        for name in group[1:]:
            del kept[name]
            removed[name] = group[0]
    return kept, removed


def save_model(model, filename, metadata=None, force_contiguous=False):
    """Saves ``model.state_dict()`` with tied tensors once (``remove_shared``),
    recording each name left out in the metadata as {removed: kept}, as
    Hugging Face's ``save_model`` does. ``force_contiguous`` is accepted for
    compatibility: every tensor is saved packed anyway."""
    del force_contiguous
    kept, removed = remove_shared(model.state_dict())
    meta = dict(_metadata(metadata, f"save_model '{os.fspath(filename)}'"))
    for name, to in removed.items():
        meta.setdefault(name, to)
    save_file(kept, filename, meta)


def load_model(model, filename, strict=True, device="cpu"):
    """Loads a file into ``model`` (copying into its tensors, as
    ``load_state_dict`` does): (missing, unexpected) names. A name missing
    from the file but tied to one it holds is not missing. With ``strict``,
    any missing or unexpected name raises RuntimeError naming them."""
    state = load_file(filename, device=device)
    tied = set()
    for group in _shared_groups(model.state_dict()):
        if any(n in state for n in group):
            tied.update(n for n in group if n not in state)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [n for n in missing if n not in tied]
    if strict:
        _refuse_names(f"load_model '{os.fspath(filename)}'", model, missing, unexpected)
    return missing, unexpected


# -- helpers ---------------------------------------------------------------------


def _refuse_names(what, module, missing, unexpected):
    """Raises RuntimeError naming `missing` and `unexpected` keys, if any
    (load_state_dict's strict check)."""
    if not missing and not unexpected:
        return
    parts = []
    if missing:
        parts.append("missing key(s): " + ", ".join(repr(n) for n in missing))
    if unexpected:
        parts.append("unexpected key(s): " + ", ".join(repr(n) for n in unexpected))
    raise RuntimeError(f"{what} into {type(module).__name__}: " + "; ".join(parts))


def _torch(call):
    try:
        import torch
    except ImportError as e:
        raise ImportError(f"{call}: meshstore.safetensors makes torch tensors; torch is "
                          "not importable") from e
    return torch


def _device(device, framework, path):
    if framework == "np":
        if device not in ("cpu", None):
            raise ValueError(f"safe_open '{path}': framework 'np' reads into host memory; "
                             f"device {device!r} is not 'cpu'")
        return None
    torch = _torch(f"safe_open '{path}'")
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"safe_open '{path}': device {device!r} is not a torch device: "
                         f"{e}") from None
    return None if d.type == "cpu" else d


def _metadata(metadata, what):
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise TypeError(f"{what}: metadata must be a dict of str to str, got "
                        f"{type(metadata).__name__}")
    for k, v in metadata.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"{what}: metadata entry {k!r}: keys and values must be str, got "
                            f"{type(k).__name__} -> {type(v).__name__}")
    return dict(metadata)


def _items(tensors, what):
    """[(name, source, as_bool)] for the native writer, checked."""
    if not isinstance(tensors, Mapping):
        raise TypeError(f"{what}: expected a dict of name to tensor, got "
                        f"{type(tensors).__name__}")
    torch = sys.modules.get("torch")
    for name, t in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"{what}: tensor names must be str, got {name!r}")
        if torch is not None and isinstance(t, torch.Tensor):
            if t.layout != torch.strided:
                raise ValueError(f"{what}: tensor '{name}' is {t.layout}, not dense; save "
                                 "t.to_dense() (it may be much larger)")
            if _safetensors_name(t.dtype) is None:
                raise ValueError(
                    f"{what}: tensor '{name}' is {t.dtype}, which safetensors has no dtype "
                    "for (it holds bool, u/int8-64, float16/32/64, bfloat16 and float8)")
    groups = _shared_groups(tensors)
    if groups:
        raise ValueError(
            f"{what}: some tensors share memory, which a file cannot express (each name "
            f"would be saved as its own copy and loaded back untied): {groups}. Keep one name "
            "each with meshstore.safetensors.remove_shared(tensors), or save a module with "
            "save_model(model, filename)")
    np = sys.modules.get("numpy")
    items = []
    for name, t in tensors.items():
        if np is not None and isinstance(t, np.ndarray) and not t.flags.writeable:
            # numpy exports no read-only array through DLPack (0.6 has no
            # read-only flag); a save only reads it, so torch's view of the
            # same bytes goes instead.
            t = _read_only_numpy(t)
        items.append((name, *export(t, what, name=name)))
    return items


def _read_only_numpy(a):
    import warnings
    torch = _torch("save_file")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "The given NumPy array is not writable"
        try:
            return torch.from_numpy(a)
        except TypeError:  # a dtype torch 1.13 lacks (uint16, ...): a copy
            return a.copy()


def _safetensors_name(dtype):
    """The safetensors dtype of torch dtype `dtype` ("F32"), or None."""
    return _SAFETENSORS_NAMES.get(str(dtype).replace("torch.", ""))


def _open(kind, path, writable):
    """kind.open(path, writable) (a native file or checkpoint), a missing
    file raised as FileNotFound."""
    try:
        return kind.open(path, writable)
    except NotFoundError as e:
        raise FileNotFound(e.message, e.code, e.code_name) from None


def _shared_groups(tensors):
    """Names whose torch tensors overlap in memory, in groups of two or more,
    each in ``tensors``' order (empty tensors share nothing)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    spans = []
    order = {}
    for i, (name, t) in enumerate(tensors.items()):
        order[name] = i
        if not isinstance(t, torch.Tensor) or t.layout != torch.strided or t.numel() == 0:
            continue
        last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
        start = t.data_ptr()
        spans.append((str(t.device), start, start + (last + 1) * t.element_size(), name))
    spans.sort()
    groups, current, end, device = [], [], 0, None
    for dev, start, stop, name in spans:
        if current and dev == device and start < end:
            current.append(name)
            end = max(end, stop)
            continue
        if len(current) > 1:
            groups.append(current)
        current, end, device = [name], stop, dev
    if len(current) > 1:
        groups.append(current)
    return [sorted(g, key=order.get) for g in groups]


def _same_view(a, b):
    return (a.data_ptr() == b.data_ptr() and a.dtype == b.dtype and a.shape == b.shape
            and a.stride() == b.stride() and a.device == b.device)
