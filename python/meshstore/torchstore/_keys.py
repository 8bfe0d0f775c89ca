"""torchstore's key space on meshstore's.

torchstore accepts any str as a key, the empty one included, and its
``keys(prefix)`` matches whole '.'-separated components: ``keys("")`` is the
keys whose first component is empty ("" and ".x"), ``keys()`` every key.
meshstore refuses the empty key and also splits on '/'. This module maps one
onto the other:

- a torchstore key is stored under itself, except "" and keys starting with
  ESCAPE or HIDDEN, which are stored with ESCAPE in front. The map keeps
  prefixes (a state dict's "K#packed" and "K/name" decode to torchstore's
  "K#packed" and "K/name"), and decoding a stored key drops one ESCAPE;
- keys starting with HIDDEN are this module's own bookkeeping (which ranks
  joined an SPMD store) and never listed.
"""

ESCAPE = "\x01"
HIDDEN = "\x02"


def encode(key):
    """The meshstore key that stores torchstore's `key`."""
    if key == "" or key[0] in (ESCAPE, HIDDEN):
        return ESCAPE + key
    return key


def decode(stored):
    """torchstore's key for a stored key; None for the module's own keys."""
    if stored.startswith(HIDDEN):
        return None
    if stored.startswith(ESCAPE):
        return stored[1:]
    return stored


def hidden(name):
    """A bookkeeping key of this module, never listed by keys()."""
    return HIDDEN + name


def matches(key, prefix):
    """torchstore's rule: `prefix` is `key`'s first whole components."""
    return key == prefix or key.startswith(prefix + ".")


def listed(stored_keys, prefix):
    """torchstore's keys(prefix) out of meshstore's keys, sorted."""
    out = set()
    for stored in stored_keys:
        key = decode(stored)
        if key is not None and (prefix is None or matches(key, prefix)):
            out.add(key)
    return sorted(out)


def search_prefix(prefix):
    """The meshstore prefix whose keys hold every match of torchstore's
    `prefix` (meshstore's components split on '.' and '/', a superset);
    "" (every key) when escaping would hide some."""
    if prefix is None or prefix == "" or prefix[0] in (ESCAPE, HIDDEN):
        return ""
    return prefix
