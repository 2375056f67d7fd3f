# ctest-labels: unit
"""The layout of the Python package python/heft, enforced (the twin of tests/layering_test.cc),
read with `ast` only: nothing is imported, so it needs neither torch nor a build.

1. No import circle among the modules under python/heft. Every import counts, at module level
   and inside functions (an import moved into a function to dodge a circle is still one),
   relative ones resolved; `from P import X` is an import of P.X when that is a module, else of
   P; importing P.Q.M also runs the __init__ of every package on the way that is not the
   importer's own (importing P.Q.M from P.R runs P.Q's). A circle is printed with the file and
   line of each import in it.
2. The rooms of heft.torch.parallel, one per parallel dimension as in src/heft/parallel/: a
   module in parallel/<room>/ imports, within heft, only
     its own room;
     heft.torch (BACKEND, the extension _c10d), heft.torch.profile, heft.torch.parallel.mesh
     heft.torch.parallel.checkpoint_dir, heft.torch.parallel.deferred and
     heft.torch.parallel.memory (BELOW_ROOMS);
     the rooms below it:
       room       may also use
       sharded    -
       tensor     -
       pipeline   sharded (a chunk's ShardedDataParallel, its checkpoint's shards),
                  tensor (a stage's tensor plan)
       layout     sharded, tensor (which degrees a plan splits), pipeline (the profile)
   mesh.py, checkpoint_dir.py, deferred.py (deferred_init's record and replay, which the
   sharded, pipeline and tensor rooms materialize from) and memory.py (the machines' memory
   and the training state's bytes, which the sharded and layout rooms' pre-flights use)
   import only heft.torch, its
   extension and profile; heft.torch
   itself (__init__), heft.torch.profile and heft.torch.distributed import no room (distributed
   reaches the public heft.torch.parallel, whose __init__ gathers the rooms' public names).
3. python/heft/torch/parallel/ holds only __init__.py, mesh.py, checkpoint_dir.py, deferred.py,
   memory.py
   and the rooms'
   folders: a module elsewhere in it would escape rule 2.
4. No package's __init__ binds the name of one of its own submodules to anything but that
   submodule: importing the submodule (from anywhere) sets the package's attribute of that
   name, which replaces the other object under the __init__'s code (torch's checkpoint imported
   as _checkpoint in parallel/sharded/__init__.py became the module sharded/_checkpoint.py).
5. One sharding engine: the modules of parallel/sharded/ call no torch.distributed collective
   (all_reduce, all_gather*, reduce_scatter*, broadcast, send, recv, ...): sharding's
   collectives are the C++ engine's (src/heft/parallel/sharded/flat_engine.h, bound as
   _c10d.parallel.sharded), heft-train's too. The one exception, SHARDED_COORDINATION: the
   checkpoint's barrier and the broadcast of its step, until the one checkpoint format moves
   the writer into C++.
6. One model measurement: the modules of parallel/layout/ read no clock or heap counter of their
   own (time.process_time, time.perf_counter, time.thread_time, heap_in_use, getrusage):
   timing a user's layers, the heap their forwards keep and the optimizer's step is
   src/heft/parallel/layout/model_measure.h's (bound as _c10d.parallel.layout.measure_layers),
   heft-train's too. time.monotonic (how long a probe took, for the report) is not a measurement.
7. A room uses another room's names, never its private ones: a `from X import name` in
   parallel/<room>/ where X is in another room names nothing that starts with an underscore (a
   helper another room needs is that room's on purpose: give it a public name). The private
   modules (`_plan`, `_checkpoint`) are how a room is laid out, and may be named.
"""
import ast
import os
import unittest

import support

PYTHON_DIR = os.path.join(support.SOURCE_DIR, "python")
PARALLEL = "heft.torch.parallel"
ROOMS = {"sharded": (), "tensor": (), "pipeline": ("sharded", "tensor"),
         "layout": ("sharded", "tensor", "pipeline")}
EXTENSION = "heft.torch._c10d"
BELOW_PARALLEL = ("heft.torch", EXTENSION, "heft.torch.profile")
BELOW_ROOMS = BELOW_PARALLEL + (PARALLEL + ".mesh", PARALLEL + ".checkpoint_dir",
                                PARALLEL + ".deferred", PARALLEL + ".memory")
TOP = ("heft.torch", "heft.torch.profile", "heft.torch.distributed")
COLLECTIVES = {"all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object",
               "reduce_scatter", "reduce_scatter_tensor", "broadcast", "broadcast_object_list",
               "all_to_all", "all_to_all_single", "send", "recv", "isend", "irecv", "barrier",
               "reduce", "gather", "scatter", "batch_isend_irecv", "monitored_barrier"}
SHARDED_COORDINATION = {("_checkpoint.py", "barrier"), ("_checkpoint.py", "broadcast")}
PARALLEL_FILES = {"__init__.py", "mesh.py", "checkpoint_dir.py", "deferred.py", "memory.py"}
MEASURING = {"process_time", "perf_counter", "thread_time", "heap_in_use", "getrusage"}


def private_names_across_rooms(name, path, package):
    """[(line, imported name, its room)] of the underscore-named names module `name` (in a room)
    imports with `from X import ...` from a module of another room."""
    own = room_of(name)
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            other = room_of(from_base(name, package, node) or "")
            if other is not None and other != own:
                found += [(node.lineno, a.name, other) for a in node.names if a.name.startswith("_")]
    return found


def modules():
    """{module name: (path, is a package)} of every .py file under python/heft."""
    found = {}
    for folder, dirs, files in os.walk(os.path.join(PYTHON_DIR, "heft")):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                parts = os.path.relpath(path, PYTHON_DIR)[:-len(".py")].split(os.sep)
                package = parts[-1] == "__init__"
                found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def from_base(name, package, node):
    """The module a `from X import ...` in module `name` reads, a relative X resolved."""
    if not node.level:
        return node.module
    parts = name.split(".")
    parts = parts[:len(parts) - node.level + (1 if package else 0)]
    return ".".join(parts + ([node.module] if node.module else []))


def imports(name, path, package, known):
    """[(imported module name, line, in a function)] of every import in the file, within heft.
    A name that is no file under python/heft (the extension heft.torch._c10d) stays as named."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    in_function = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            in_function.update(id(n) for n in ast.walk(node) if n is not node)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = from_base(name, package, node)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        found += [(t, node.lineno, id(node) in in_function) for t in targets
                  if t == "heft" or t.startswith("heft.")]
    return found


def edges(known):
    """{importer: {imported: (file, line, in a function)}} between the modules under
    python/heft, with the packages an import runs on the way (rule 1)."""
    graph = {}
    for name, (path, package) in known.items():
        out = graph.setdefault(name, {})
        own = {name.rsplit(".", k)[0] for k in range(name.count(".") + 1)}
        for target, line, in_function in imports(name, path, package, known):
            runs = [target] + [target.rsplit(".", k)[0] for k in range(1, target.count(".") + 1)]
            for i, m in enumerate(runs):
                if m in known and m != name and (i == 0 or m not in own):
                    out.setdefault(m, (os.path.relpath(path, support.SOURCE_DIR), line,
                                       in_function))
    return graph


def circles(graph):
    """[(circle [m0, m1, ..., m0], its group)] for each group of modules that import each other
    (a strongly connected component, Tarjan's), one circle through each; [] when none."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def connect(m):
        index[m] = low[m] = len(index)
        stack.append(m)
        on_stack.add(m)
        for n in graph.get(m, ()):
            if n not in index:
                connect(n)
                low[m] = min(low[m], low[n])
            elif n in on_stack:
                low[m] = min(low[m], index[n])
        if low[m] == index[m]:
            group = set()
            while m not in group:
                top = stack.pop()
                on_stack.discard(top)
                group.add(top)
            if len(group) > 1:
                groups.append(group)

    for m in sorted(graph):
        if m not in index:
            connect(m)
    return sorted((_circle_in(graph, g), sorted(g)) for g in groups)


def _circle_in(graph, group):
    """The shortest circle through the smallest module of `group` (breadth first)."""
    first = min(group)
    came_from, frontier = {first: None}, [first]
    while frontier:
        following = []
        for m in frontier:
            for n in sorted(graph[m]):
                if n == first:
                    path = [m]
                    while came_from[path[-1]] is not None:
                        path.append(came_from[path[-1]])
                    return path[::-1] + [first]
                if n in group and n not in came_from:
                    came_from[n] = m
                    following.append(n)
        frontier = following
    raise AssertionError(f"no circle in the group {sorted(group)}")


def shadowed(name, path, known):
    """[(line, bound name)] where a package's __init__ binds, at module level, the name of one
    of its submodules to something else than that submodule."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    children = {m[len(name) + 1:] for m in known if m.startswith(name + ".")
                and "." not in m[len(name) + 1:]}
    found = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            base = from_base(name, True, node)
            bound = [(a.asname or a.name, f"{base}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Import):
            bound = [(a.asname or a.name.split(".")[0], a.name if a.asname else
                      a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound = [(node.name, None)]
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound = [(n.id, None) for t in targets for n in ast.walk(t)
                     if isinstance(n, ast.Name)]
        else:
            continue
        found += [(node.lineno, b) for b, what in bound
                  if b in children and what != f"{name}.{b}"]
    return found


def room_of(name):
    """The room of a module in heft.torch.parallel.<room>, else None."""
    parts = name.split(".")
    return parts[3] if within(name, PARALLEL) and len(parts) > 3 and parts[3] in ROOMS else None


def within(name, prefix):
    return name == prefix or name.startswith(prefix + ".")


def collective_calls(path):
    """[(line, collective)] of the torch.distributed collectives the file calls: through a
    name bound to torch.distributed, through torch.distributed.X, or imported from it."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    aliases, direct = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update(a.asname for a in node.names if a.name == "torch.distributed" and a.asname)
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                if node.module == "torch" and a.name == "distributed":
                    aliases.add(a.asname or a.name)
                elif node.module == "torch.distributed" and a.name in COLLECTIVES:
                    direct[a.asname or a.name] = a.name
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id in direct:
            found.append((node.lineno, direct[f.id]))
        elif isinstance(f, ast.Attribute) and f.attr in COLLECTIVES:
            base = ast.unparse(f.value)
            if base in aliases or base == "torch.distributed":
                found.append((node.lineno, f.attr))
    return found


def measuring_calls(path):
    """[(line, name)] of the calls in the file to a function named in MEASURING (however it is
    reached: time.process_time(), _layout.heap_in_use(), a bare perf_counter())."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if name in MEASURING:
                found.append((node.lineno, name))
    return found


class Layering(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.known = modules()
        cls.graph = edges(cls.known)

    def test_the_package_was_read(self):
        self.assertGreater(len(self.known), 30, PYTHON_DIR)
        for room in ROOMS:
            self.assertTrue(f"{PARALLEL}.{room}" in self.known, f"room {room} has no __init__.py")

    def test_no_import_circle(self):
        report = []
        for found, group in circles(self.graph):
            report.append("an import circle under python/heft: " + " -> ".join(found))
            if len(group) + 1 > len(found):
                report.append(f"  (one of the circles among {', '.join(group)})")
            for a, b in zip(found, found[1:]):
                path, line, in_function = self.graph[a][b]
                where = "inside a function" if in_function else "at module level"
                report.append(f"  {a} imports {b}  ({path}:{line}, {where})")
        if report:
            self.fail("\n" + "\n".join(report) + "\nmove what the modules of a circle share "
                      "into a module below them (an import inside a function is still one)")

    def test_each_room_imports_only_its_own_the_common_and_the_rooms_below(self):
        broken = []
        for name, (path, package) in sorted(self.known.items()):
            room = room_of(name)
            if room is not None:
                allowed = BELOW_ROOMS + (f"{PARALLEL}.{room}",) + tuple(
                    f"{PARALLEL}.{r}" for r in ROOMS[room])
                why = (f"room {room} may use its own, {', '.join(BELOW_ROOMS)} and the rooms "
                       f"{', '.join(ROOMS[room]) or '(none)'}")
            elif name in (PARALLEL + ".mesh", PARALLEL + ".checkpoint_dir", PARALLEL + ".deferred"):
                allowed, why = BELOW_PARALLEL, "mesh, checkpoint_dir, deferred and memory sit below every room"
            elif name in TOP:
                allowed, why = None, f"{name} sits below heft.torch.parallel's rooms"
            else:
                continue
            for target, line, _ in imports(name, path, package, self.known):
                if allowed is None:
                    bad = room_of(target) is not None
                else:
                    bad = not any(target == a if a in BELOW_ROOMS else within(target, a)
                                  for a in allowed)
                if bad:
                    broken.append(f"{os.path.relpath(path, support.SOURCE_DIR)}:{line}: "
                                  f"{name} imports {target} ({why})")
        if broken:
            self.fail("\n" + "\n".join(broken))

    def test_no_package_binds_a_submodule_name_to_something_else(self):
        broken = []
        for name, (path, package) in sorted(self.known.items()):
            if package:
                broken += [f"{os.path.relpath(path, support.SOURCE_DIR)}:{line}: {bound!r} is "
                           f"also the submodule {name}.{bound}, whose import replaces it"
                           for line, bound in shadowed(name, path, self.known)]
        if broken:
            self.fail("\n" + "\n".join(broken) + "\nrename one of them")

    def test_parallel_holds_only_the_common_modules_and_the_rooms(self):
        root = os.path.join(PYTHON_DIR, *PARALLEL.split("."))
        stray = []
        for entry in sorted(os.listdir(root)):
            path = os.path.join(root, entry)
            if os.path.isdir(path):
                if entry not in ROOMS and entry != "__pycache__":
                    stray.append(f"{entry}/ (a folder that is no room: {', '.join(ROOMS)})")
            elif entry not in PARALLEL_FILES:
                stray.append(f"{entry} (only {', '.join(sorted(PARALLEL_FILES))} sit beside "
                             "the rooms; put it in the room of its dimension)")
        if stray:
            self.fail(f"\n{root}: " + f"\n{root}: ".join(stray))

    def test_sharded_issues_no_collective_of_its_own(self):
        room = os.path.join(PYTHON_DIR, *PARALLEL.split("."), "sharded")
        broken, checked = [], 0
        for entry in sorted(os.listdir(room)):
            if not entry.endswith(".py"):
                continue
            checked += 1
            for line, name in collective_calls(os.path.join(room, entry)):
                if (entry, name) not in SHARDED_COORDINATION:
                    broken.append(f"{os.path.relpath(os.path.join(room, entry), support.SOURCE_DIR)}"
                                  f":{line}: torch.distributed.{name}")
        self.assertGreater(checked, 4, room)
        if broken:
            self.fail("\n" + "\n".join(broken) + "\nsharding's collectives are the C++ engine's "
                      "(_c10d.parallel.sharded.Engine): a second data path in Python is refused")

    def test_layout_measures_nothing_of_its_own(self):
        room = os.path.join(PYTHON_DIR, *PARALLEL.split("."), "layout")
        broken, checked = [], 0
        for entry in sorted(os.listdir(room)):
            if entry.endswith(".py"):
                checked += 1
                broken += [f"{os.path.relpath(os.path.join(room, entry), support.SOURCE_DIR)}:{line}: {name}()"
                           for line, name in measuring_calls(os.path.join(room, entry))]
        self.assertGreater(checked, 1, room)
        if broken:
            self.fail("\n" + "\n".join(broken) + "\nthe model measurement is model_measure.h's "
                      "(_c10d.parallel.layout.measure_layers): a second one in Python is refused")

    def test_no_room_takes_another_rooms_private_names(self):
        broken, checked = [], 0
        for name, (path, package) in sorted(self.known.items()):
            if room_of(name) is None:
                continue
            checked += 1
            broken += [f"{os.path.relpath(path, support.SOURCE_DIR)}:{line}: {bound} is room "
                       f"{other}'s own" for line, bound, other in private_names_across_rooms(name, path, package)]
        self.assertGreater(checked, 10)
        if broken:
            self.fail("\n" + "\n".join(broken) + "\ngive a helper another room needs a public name")

    def test_the_private_name_finder_finds_one(self):
        name = f"{PARALLEL}.pipeline._checkpoint"
        import tempfile
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write("from ..sharded._checkpoint import _copy_into, load_part\n"
                    "from ._plan import _own\nfrom heft.torch.parallel.tensor._plan import _x\n")
        try:
            self.assertEqual(private_names_across_rooms(name, f.name, False),
                             [(1, "_copy_into", "sharded"), (3, "_x", "tensor")])
        finally:
            os.unlink(f.name)

    def test_the_measuring_finder_finds_each_spelling(self):
        import tempfile
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write("import time\nfrom time import perf_counter\nt = time.process_time()\n"
                    "u = perf_counter()\nh = _layout.heap_in_use()\nm = time.monotonic()\n")
        try:
            self.assertEqual(sorted(measuring_calls(f.name)),
                             [(3, "process_time"), (4, "perf_counter"), (5, "heap_in_use")])
        finally:
            os.unlink(f.name)

    def test_the_collective_finder_finds_each_spelling(self):
        import tempfile
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write("import torch\nimport torch.distributed as dist\n"
                    "from torch.distributed import all_reduce as ar\n"
                    "dist.all_gather_into_tensor(a, b)\ntorch.distributed.barrier()\nar(t)\n"
                    "engine.reduce(0, g)\n")
        try:
            self.assertEqual(sorted(collective_calls(f.name)),
                             [(4, "all_gather_into_tensor"), (5, "barrier"), (6, "all_reduce")])
        finally:
            os.unlink(f.name)


if __name__ == "__main__":
    unittest.main(verbosity=2)
