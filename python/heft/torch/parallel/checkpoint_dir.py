"""heft's multi-writer checkpoint directory for heft.torch.parallel.save_checkpoint
(sharded/_checkpoint.py) and Pipeline.save_checkpoint (pipeline/_checkpoint.py): a thin layer
over the C++ CheckpointDirectory (src/heft/parallel/checkpoint_dir.h, bound in
python/heft/torch/csrc/checkpoint_binding.cc), so Python and heft-train write and check the format
with one implementation. Only the reading of a verified file's bytes happens here."""
import json
import os
import sys

from heft.torch._c10d import checkpoint as _cc


def save_part(directory, step, part, files):
    """Writes part `part` of checkpoint `step` (files: name -> bytes; not visible until
    commit). Raises ValueError for a bad file name, OSError when writing fails."""
    _cc.save_part(os.fspath(directory), int(step), int(part), files)


def commit(directory, step, parts, meta, keep):
    """Makes checkpoint `step` of `parts` parts visible atomically with `meta` (a dict);
    keeps the `keep` newest. Raises OSError naming a missing part (nothing is committed)."""
    _cc.commit(os.fspath(directory), int(step), int(parts), json.dumps(meta), int(keep))


def steps(directory):
    """The steps of directory's ckpt-* directories, newest first (none verified)."""
    return _cc.steps(os.fspath(directory))


class Part:
    """One part of a verified checkpoint (every file's size and CRC-32 already checked by
    the C++ reader); its files are read one at a time, so a reader never holds every part's
    bytes at once."""

    def __init__(self, paths):
        self._paths = paths

    def __contains__(self, name):
        return name in self._paths

    def read(self, name):
        with open(self._paths[name], "rb") as f:
            return f.read()


def load_latest(directory, who=""):
    """(step, meta, [Part K]) of the newest valid multi-writer checkpoint; each skipped one
    is reported on stderr, one line each. None valid: FileNotFoundError naming the directory,
    prefixed by `who: ` when given."""
    found, warnings = _cc.locate_latest(os.fspath(directory))
    for line in warnings.splitlines():
        print(line, file=sys.stderr)
    if found is None:
        raise FileNotFoundError(f"{who + ': ' if who else ''}dir={directory!r} holds no valid "
                                "heft multi-writer checkpoint")
    step, meta_json, parts = found
    return step, json.loads(meta_json), [Part(p) for p in parts]
