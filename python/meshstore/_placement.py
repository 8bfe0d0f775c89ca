"""How a tensor is laid out over a mesh of ranks, with DTensor's names:
``Shard(dim)`` cuts tensor dimension ``dim`` into one piece per rank along a
mesh dimension (torch.chunk's pieces), ``Replicate()`` gives every rank along
it the same. A placement is a tuple with one of them per mesh dimension."""


class Shard:
    """Tensor dimension ``dim`` split along this mesh dimension."""

    __slots__ = ("dim",)

    def __init__(self, dim):
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 0:
            raise ValueError(f"Shard: dim must be a non-negative int, got {dim!r}")
        self.dim = dim

    def __eq__(self, other):
        return isinstance(other, Shard) and other.dim == self.dim

    def __hash__(self):
        return hash(("shard", self.dim))

    def __repr__(self):
        return f"Shard({self.dim})"


class Replicate:
    """Every rank along this mesh dimension holds the same."""

    __slots__ = ()

    def __eq__(self, other):
        return isinstance(other, Replicate)

    def __hash__(self):
        return hash("replicate")

    def __repr__(self):
        return "Replicate()"


def dims_of(placement, mesh_shape, what):
    """A placement as the native layer takes it: [(kind, dim)], one per mesh
    dimension, checked."""
    if isinstance(placement, (Shard, Replicate)):
        placement = (placement,)
    if not isinstance(placement, (tuple, list)) or len(placement) != len(mesh_shape):
        raise ValueError(f"{what}: a placement is a tuple of Shard(dim) / Replicate(), one per "
                         f"mesh dimension ({len(mesh_shape)}), got {placement!r}")
    out = []
    for p in placement:
        if isinstance(p, Shard):
            out.append(("shard", p.dim))
        elif isinstance(p, Replicate):
            out.append(("replicate", 0))
        else:
            raise ValueError(f"{what}: {p!r} is not Shard(dim) or Replicate()")
    return out
