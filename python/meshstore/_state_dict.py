"""State dicts between Python and the store.

A state dict is a dict of tensors and values, possibly nested in dicts (str
or int keys), lists and tuples: an optimizer's state dict, whose "state" is
keyed by parameter index. It is flattened with torch's names: keys joined by
'.', list items by their index ("state.0.exp_avg"), as
torch.distributed.checkpoint flattens. A flat dict (model.state_dict(), its
keys already dotted) is stored as it is. When the state dict is nested, or
holds values that had to be pickled, one more entry, STRUCTURE, records each
name's path (int keys stay ints), the tuples and the empty dicts and lists,
so that a get rebuilds exactly what was put.
"""

import json
import pickle
from collections.abc import Mapping

import cloudpickle

from ._tensors import export, is_tensor

STRUCTURE = "__meshstore_structure__"
_INT64 = (-(1 << 63), (1 << 63) - 1)


def dumps(obj):
    """`obj` pickled: by pickle, or by cloudpickle where pickle cannot (a
    class or function defined inside a function, a lambda). pickle.loads
    reads both."""
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, AttributeError, TypeError):
        return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


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
    return (name, "b", dumps(x), False), True


_CONTAINERS = (Mapping, list, tuple)


def _map_key(k, path):
    """`k` when it can name a dict entry (str, or int as an optimizer's
    state has); TypeError naming where it is otherwise."""
    if isinstance(k, str) or (isinstance(k, int) and not isinstance(k, bool)):
        return k
    where = ".".join(str(c) for c, _ in path) or "the top level"
    raise TypeError(f"state dict keys must be str or int, got {type(k).__name__} {k!r} "
                    f"at {where}")


def _walk(node, prefix, path, out, shapes=None):
    """Appends (name, path, leaf) for every leaf under the container `node`,
    depth first; `prefix` is the name so far ("" at the root). `shapes`,
    when given, collects (path, kind, leaves before it) of the containers a
    rebuild of the leaves alone would get wrong: tuples, and empty dicts and
    lists."""
    items = node.items() if isinstance(node, Mapping) else enumerate(node)
    is_index = not isinstance(node, Mapping)
    for k, v in items:
        if not is_index:
            k = _map_key(k, path)
        name = f"{prefix}.{k}" if prefix else str(k)
        here = path + [(k, is_index)]
        if isinstance(v, _CONTAINERS):
            if shapes is not None:
                if isinstance(v, tuple):
                    shapes.append((here, "tuple", len(out)))
                elif not v:
                    shapes.append((here, "dict" if isinstance(v, Mapping) else "list", len(out)))
            _walk(v, name, here, out, shapes)
        else:
            out.append((name, here, v))


class Flat:
    """A flattened state dict: the native entries, and where each came from."""

    def __init__(self, entries, paths, structured):
        self.entries = entries        # [(name, kind, payload, as_bool)]
        self.paths = paths            # name -> [(component, is_index)]
        self.structured = structured  # True when STRUCTURE is among the entries


def flatten(sd, what, for_write=False):
    if not isinstance(sd, Mapping):
        raise TypeError(f"{what}: a state dict is a dict, got {type(sd).__name__}")
    entries, paths, pickled, shapes = [], {}, [], []
    nested = any(isinstance(v, _CONTAINERS) or not isinstance(k, str) for k, v in sd.items())
    if nested:
        leaves = []
        _walk(sd, "", [], leaves, shapes)
    else:  # the common case: a flat dict (model.state_dict())
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
        if shapes:
            doc["shapes"] = [[[[c, i] for c, i in p], kind, at] for p, kind, at in shapes]
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


_EMPTY = {"dict": dict, "list": list}


def _empties_at(shapes, at, last):
    """The empty containers that stood before leaf `at` (all the rest when
    `last`)."""
    return [(path, kind) for path, kind, where in shapes
            if kind in _EMPTY and (where == at or (last and where > at))]


def _tuples(root, shapes):
    """Turns the lists at the tuples' paths into tuples, innermost first."""
    for path, kind, _ in sorted(shapes, key=lambda s: -len(s[0])):
        if kind != "tuple":
            continue
        parent, last = root, path[-1][0]
        try:
            for c, _ in path[:-1]:
                parent = parent[c]
            items = parent[last]
        except (KeyError, IndexError):  # a tuple with no leaves under it
            _set_path(root, path, ())
            continue
        parent[last] = tuple(items) if items is not None else ()


def unflatten(pairs):
    """The state dict from the store's (name, value) pairs: nested again when
    it was put nested, else flat, in the stored order."""
    values = dict(pairs)
    doc = values.pop(STRUCTURE, None)
    if doc is None:
        return values
    doc = json.loads(doc)
    pickled = set(doc.get("pickled", ()))
    shapes = [([(c, bool(i)) for c, i in p], kind, at) for p, kind, at in doc.get("shapes", ())]
    root = {}
    paths = doc["paths"]
    # In the order the names were put (the store's may differ), each empty
    # container where it stood among them; then any name the structure
    # does not know.
    names = [n for n in paths if n in values] + [n for n in values if n not in paths]
    for at, name in enumerate(names + [None]):
        for path, kind in _empties_at(shapes, at, name is None):
            _set_path(root, path, _EMPTY[kind]())
        if name is None:
            break
        value = values[name]
        if name in pickled:
            value = pickle.loads(value)
        _set_path(root, [(c, bool(i)) for c, i in paths.get(name, [[name, False]])], value)
    _tuples(root, shapes)
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


__all__ = ["STRUCTURE", "Flat", "dumps", "flatten", "leaves", "set_leaf", "unflatten",
           "write_values_back"]
