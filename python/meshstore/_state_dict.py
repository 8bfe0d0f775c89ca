"""State dicts between Python and the store.

A state dict is a dict of tensors and values, possibly nested in dicts and
lists (an optimizer's state). It is flattened with torch's names: keys joined
by '.', list items by their index ("state.0.exp_avg"), as
torch.distributed.checkpoint flattens. A flat dict (model.state_dict(), its
keys already dotted) is stored as it is. When the state dict is nested, or
holds values that had to be pickled, one more entry, STRUCTURE, records each
name's path, so that a get rebuilds exactly the dicts and lists that were put.
"""

import json
import pickle
from collections.abc import Mapping

from ._tensors import export, is_tensor

STRUCTURE = "__meshstore_structure__"
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _leaf_entry(name, x, what, for_write):
    """(native entry, pickled?) of one leaf."""
    if is_tensor(x):
        src, as_bool = export(x, what, for_write, name)
        return (name, "t", src, as_bool), False
    if isinstance(x, bool):
        return (name, "?", x, False), False
    if isinstance(x, int) and _INT64[0] <= x <= _INT64[1]:
        return (name, "i", x, False), False
    if isinstance(x, float):
        return (name, "f", x, False), False
    if isinstance(x, str):
        return (name, "s", x, False), False
    if isinstance(x, (bytes, bytearray, memoryview)):
        return (name, "b", bytes(x), False), False
    return (name, "b", pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL), False), True


_CONTAINERS = (Mapping, list, tuple)


def _walk(node, prefix, path, out):
    """Appends (name, path, leaf) for every leaf under the container `node`,
    depth first; `prefix` is the name so far ("" at the root)."""
    items = node.items() if isinstance(node, Mapping) else enumerate(node)
    is_index = not isinstance(node, Mapping)
    for k, v in items:
        if not is_index and not isinstance(k, str):
            where = ".".join(str(c) for c, _ in path) or "the top level"
            raise TypeError(f"state dict keys must be str, got {type(k).__name__} {k!r} "
                            f"at {where}")
        name = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, _CONTAINERS):
            _walk(v, name, path + [(k, is_index)], out)
        else:
            out.append((name, path + [(k, is_index)], v))


class Flat:
    """A flattened state dict: the native entries, and where each came from."""

    def __init__(self, entries, paths, structured):
        self.entries = entries        # [(name, kind, payload, as_bool)]
        self.paths = paths            # name -> [(component, is_index)]
        self.structured = structured  # True when STRUCTURE is among the entries


def flatten(sd, what, for_write=False):
    if not isinstance(sd, Mapping):
        raise TypeError(f"{what}: a state dict is a dict, got {type(sd).__name__}")
    entries, paths, pickled = [], {}, []
    nested = any(isinstance(v, _CONTAINERS) for v in sd.values())
    if nested:
        leaves = []
        _walk(sd, "", [], leaves)
    else:  # the common case: a flat dict (model.state_dict())
        for k in sd:
            if not isinstance(k, str):
                raise TypeError(f"state dict keys must be str, got {type(k).__name__} {k!r} "
                                "at the top level")
        leaves = [(k, None, v) for k, v in sd.items()]
    for name, path, leaf in leaves:
        if name in paths:
            raise ValueError(f"{what}: two entries flatten to the same name '{name}'")
        if name == STRUCTURE:
            raise ValueError(f"{what}: '{STRUCTURE}' is reserved")
        paths[name] = path if path is not None else [(name, False)]
        entry, was_pickled = _leaf_entry(name, leaf, what, for_write)
        if was_pickled:
            pickled.append(name)
        entries.append(entry)
    structured = nested or bool(pickled)
    if structured:
        doc = {"version": 1, "paths": {n: [[c, i] for c, i in p] for n, p in paths.items()},
               "pickled": pickled}
        entries.append((STRUCTURE, "s", json.dumps(doc, separators=(",", ":")), False))
    return Flat(entries, paths, structured)


def _set_path(root, path, value):
    node = root
    for (c, _), (nxt, nxt_is_index) in zip(path, path[1:]):
        child = node.get(c) if isinstance(node, dict) else (node[c] if c < len(node) else None)
        if child is None:
            child = [] if nxt_is_index else {}
            if isinstance(node, dict):
                node[c] = child
            else:
                node.extend([None] * (c + 1 - len(node)))
                node[c] = child
        node = child
    last = path[-1][0]
    if isinstance(node, dict):
        node[last] = value
    else:
        node.extend([None] * (last + 1 - len(node)))
        node[last] = value


def unflatten(pairs):
    """The state dict from the store's (name, value) pairs: nested again when
    it was put nested, else flat, in the stored order."""
    values = dict(pairs)
    doc = values.pop(STRUCTURE, None)
    if doc is None:
        return values
    doc = json.loads(doc)
    pickled = set(doc.get("pickled", ()))
    root = {}
    for name, value in values.items():
        if name in pickled:
            value = pickle.loads(value)
        path = [(c, bool(i)) for c, i in doc["paths"].get(name, [[name, False]])]
        _set_path(root, path, value)
    return root


def leaves(sd):
    """{torch-style name: (path, leaf)} of a state dict."""
    out = []
    _walk(sd, "", [], out)
    return {name: (path, leaf) for name, path, leaf in out}


def set_leaf(sd, path, value):
    """Replaces the leaf at `path` (kept when its container is a tuple)."""
    node = sd
    for c, _ in path[:-1]:
        node = node[c]
    if not isinstance(node, tuple):
        node[path[-1][0]] = value


def write_values_back(sd, flat, values):
    """Puts the values read by a get_state_dict_into into the caller's dict
    (its tensors were filled in place)."""
    doc_pickled = set()
    for name, value in values:
        if name == STRUCTURE:
            doc_pickled = set(json.loads(value).get("pickled", ()))
    for name, value in values:
        if name == STRUCTURE:
            continue
        if name in doc_pickled:
            value = pickle.loads(value)
        path = flat.paths.get(name)
        if path is not None:
            set_leaf(sd, path, value)


__all__ = ["STRUCTURE", "Flat", "flatten", "leaves", "set_leaf", "unflatten",
           "write_values_back"]
