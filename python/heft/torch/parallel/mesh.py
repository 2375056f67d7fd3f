"""heft.torch.parallel.DeviceMesh: the world's ranks laid out on the data, pipeline and tensor
dimensions (data itself sharded x replicate), one torch.distributed process group per group
of each dimension, on the heft backend. The layout is heft-train's: the C++ MeshLayout
(src/heft/parallel/mesh_layout.h) through the extension (_c10d.mesh), never recomputed here.
See docs/parallel.md."""
import torch
import torch.distributed as dist

from heft.torch import BACKEND, _c10d

# The Python names, in the order every rank makes their groups, and the C++ names
# (parallel::name(Dim)) the binding reports them under.
NAMES = ("data", "pipeline", "tensor", "sharded", "replicate")
_CXX = {"data": "data", "pipeline": "pipeline", "tensor": "tensor", "sharded": "shard",
        "replicate": "replicate"}
_ORDERS = ("DPT", "DTP", "PDT", "PTD", "TDP", "TPD")


def _world():
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("DeviceMesh: no process group is initialized: call "
                           "heft.torch.distributed.init_process_group() first")
    if str(dist.get_backend()).lower() != BACKEND:
        raise RuntimeError(f"DeviceMesh: the default process group uses backend "
                           f"{dist.get_backend()!r}, expected {BACKEND!r}")
    return dist.get_world_size(), dist.get_rank()


def _degree(argument, value):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"DeviceMesh: {argument}={value!r}: expected a positive integer")
    if value < 1:
        raise ValueError(f"DeviceMesh: {argument}={value!r}: expected a positive integer")
    return value


def _shape(world, data, pipeline, tensor, sharded, placement):
    """(data, pipeline, tensor, shard, placement) for the binding, or the error naming the
    argument. Depends only on the arguments and the world size, so every rank that passed
    the same arguments raises the same error, before any group is made."""
    pipeline, tensor = _degree("pipeline", pipeline), _degree("tensor", tensor)
    if data is None:
        if world % (pipeline * tensor):
            raise ValueError(f"DeviceMesh: pipeline x tensor = {pipeline} x {tensor} = "
                             f"{pipeline * tensor} does not divide the world of {world} ranks "
                             "(data=None takes the ranks that are left)")
        data = world // (pipeline * tensor)
    data = _degree("data", data)
    if data * pipeline * tensor != world:
        raise ValueError(f"DeviceMesh: data x pipeline x tensor = {data} x {pipeline} x "
                         f"{tensor} = {data * pipeline * tensor}, but the world has {world} "
                         "ranks")
    shard = data if sharded is None else _degree("sharded", sharded)
    if data % shard:
        raise ValueError(f"DeviceMesh: sharded={sharded} does not divide data={data} (the "
                         "sharded groups split the data dimension)")
    if not isinstance(placement, str):
        raise TypeError(f"DeviceMesh: placement={placement!r}: expected a string")
    if _c10d.mesh.placement_order(placement) is None:
        raise ValueError(f"DeviceMesh: placement={placement!r}: expected 'cluster', 'spread' "
                         "or an order of the letters D, P and T, slowest first (such as 'TDP')")
    return data, pipeline, tensor, shard, placement


def _agree(shape, world):
    """Every rank must ask for the same mesh (new_group is collective and ordered): one
    all-gather of the shapes; a disagreement raises the same ValueError on every rank."""
    data, pipeline, tensor, shard, placement = shape
    mine = torch.tensor([data, pipeline, tensor, shard,
                         _ORDERS.index(_c10d.mesh.placement_order(placement))])
    every = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(every, mine)
    if any(not torch.equal(other, mine) for other in every):
        said = "; ".join(f"rank {r}: data {t[0]} x pipeline {t[1]} x tensor {t[2]}, sharded "
                         f"{t[3]}, placement {_ORDERS[t[4]]}"
                         for r, t in enumerate(x.tolist() for x in every))
        raise ValueError(f"DeviceMesh: the ranks asked for different meshes ({said}); every "
                         "rank must pass the same arguments")


class DeviceMesh:
    """The world's ranks on a mesh of data x pipeline x tensor, with a process group (backend
    heft) for this rank's group along each dimension. Collective over the default group:
    every rank constructs it with the same arguments, in the same order relative to its other
    collectives and new_group calls.

    data       ranks holding replicas of the same model part; None: what is left,
               world // (pipeline * tensor)
    pipeline   pipeline stages (ranks each holding a consecutive part of the layers)
    tensor     ranks splitting each layer
    sharded    ranks of the data dimension sharding parameters among themselves, the rest
               of data (``replicate`` = data // sharded) holding replicas of the shards.
               None: all of data, one sharded group per data group and no replicas, as in
               heft-train when sharded_data_parallel_degree is unset or 1, and as
               ShardedDataParallel(sharded_degree=None). 1: no sharding, replicas only.
    placement  which dimension varies fastest over consecutive ranks: "cluster" (= "DPT":
               tensor groups on neighbouring ranks, so on one host), "spread" (= "TPD") or
               any order of the letters D, P, T, slowest first (heft-train's
               placement_strategy)

    Names for group/ranks/size/coordinate: "data", "pipeline", "tensor", "sharded",
    "replicate". Bad arguments raise ValueError (TypeError for a wrong type) naming the
    argument, on every rank, before any group is made.
    """

    def __init__(self, data=None, pipeline=1, tensor=1, sharded=None, placement="cluster"):
        world, rank = _world()
        shape = _shape(world, data, pipeline, tensor, sharded, placement)
        layout = _c10d.mesh.layout(world, rank, *shape)
        _agree(shape, world)
        self.world, self.rank, self.order = world, rank, layout["order"]
        # Whether the user asked for sharding (sharded=...): DeviceMesh(data=2) and
        # DeviceMesh(data=2, sharded=2) have the same groups, but the strategies wrap a
        # stage with DDP for the first and ShardedDataParallel for the second.
        self.sharded_given = sharded is not None
        self._describe = layout["describe"]
        self._sizes = {n: layout["sizes"][_CXX[n]] for n in NAMES}
        self._coords = {n: layout["coordinates"][_CXX[n]] for n in NAMES}
        self._all = {n: [list(g) for g in layout["groups"][_CXX[n]]] for n in NAMES}
        self._ranks, self._groups = {}, {}
        made = {}  # members -> process group: a partition two dimensions share is made once
        for n in NAMES:  # the same order on every rank: new_group is collective
            for members in self._all[n]:
                key = tuple(members)
                if key not in made:
                    made[key] = (dist.group.WORLD if len(members) == world
                                 else dist.new_group(members))
                if rank in members:
                    self._ranks[n], self._groups[n] = list(members), made[key]

    def _name(self, method, name):
        if name not in NAMES:
            raise ValueError(f"DeviceMesh.{method}: name={name!r}: expected one of "
                             + ", ".join(repr(n) for n in NAMES))
        return name

    def group(self, name):
        """This rank's process group along `name` (its rank in it is coordinate(name)); the
        default group itself where the group is the whole world."""
        return self._groups[self._name("group", name)]

    def ranks(self, name):
        """The world ranks of this rank's group along `name`, ascending (= by coordinate)."""
        return list(self._ranks[self._name("ranks", name)])

    def groups(self, name):
        """Every group along `name` as lists of world ranks, ordered by their smallest rank."""
        return [list(g) for g in self._all[self._name("groups", name)]]

    def size(self, name):
        """The degree of `name` (the size of each of its groups)."""
        return self._sizes[self._name("size", name)]

    def coordinate(self, name):
        """This rank's index along `name`, from 0."""
        return self._coords[self._name("coordinate", name)]

    @property
    def coords(self):
        """This rank's coordinates: {name: index} for every name."""
        return dict(self._coords)

    def describe(self):
        """The layout, one line per dimension with its groups (heft-train's log text; the
        sharded dimension is called shard there)."""
        return self._describe

    def __repr__(self):
        s = self._sizes
        return (f"DeviceMesh(data={s['data']}, pipeline={s['pipeline']}, tensor={s['tensor']}, "
                f"sharded={s['sharded']}, placement={self.order!r}; rank {self.rank} at "
                f"{self._coords})")
