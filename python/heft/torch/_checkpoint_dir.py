"""heft's multi-writer checkpoint directory, as src/heft/parallel/checkpoint.h lays it out
(version 2: D/.tmp-ckpt-S/part-K/{files, part.json}, committed by one rank writing
manifest.json and renaming to D/ckpt-S), for heft.torch.parallel.save_checkpoint.

The Python extension links only heft_comm, not checkpoint.cc (heft_parallel), so this file
writes and checks the same format itself; heft-train's readers (load_latest_any) read what
it writes and the other way round. Replace it by a binding of CheckpointDirectory once the
extension links checkpoint.cc (docs/sharded.md, "Left out")."""
import json
import os
import shutil
import zlib

_PREFIX, _TMP, _MANIFEST, _PART = "ckpt-", ".tmp-ckpt-", "manifest.json", "part.json"


def step_name(step):
    return f"{step:012d}"


def part_name(part):
    return f"part-{part:05d}"


def _write(path, data):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _entry(name, data):
    return {"name": name, "size": len(data), "crc32": zlib.crc32(data) & 0xFFFFFFFF}


def save_part(directory, step, part, files):
    """Writes part `part` of checkpoint `step` (not visible until commit)."""
    tmp = os.path.join(directory, _TMP + step_name(step))
    d = os.path.join(tmp, part_name(part))
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    entries = []
    for name, data in sorted(files.items()):
        if not name or "/" in name or name == _PART or name.startswith("."):
            raise ValueError(f"checkpoint file name: expected a plain name, found {name!r}")
        _write(os.path.join(d, name), data)
        entries.append(_entry(name, data))
    text = json.dumps({"part": part, "step": step, "files": entries}, indent=2) + "\n"
    _write(os.path.join(d, _PART), text.encode())
    _fsync_dir(d)
    _fsync_dir(tmp)


def commit(directory, step, parts, meta, keep):
    """Makes checkpoint `step` of `parts` parts visible atomically; keeps the `keep` newest."""
    tmp = os.path.join(directory, _TMP + step_name(step))
    for k in range(parts):
        if not os.path.exists(os.path.join(tmp, part_name(k), _PART)):
            raise OSError(f"checkpoint step {step}: {os.path.join(tmp, part_name(k))} is "
                          "missing: not committed (the previous checkpoint stays the newest)")
    manifest = {"format": "heft-checkpoint", "version": 2, "step": step, "meta": meta,
                "parts": parts}
    _write(os.path.join(tmp, _MANIFEST), (json.dumps(manifest, indent=2) + "\n").encode())
    _fsync_dir(tmp)
    final = os.path.join(directory, _PREFIX + step_name(step))
    shutil.rmtree(final, ignore_errors=True)
    os.rename(tmp, final)
    _fsync_dir(directory)
    for step_of, path in checkpoints(directory)[keep:]:
        shutil.rmtree(path, ignore_errors=True)
    for name in os.listdir(directory):
        if name.startswith(_TMP) and name[len(_TMP):].isdigit() and int(name[len(_TMP):]) <= step:
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


def checkpoints(directory):
    """[(step, path)] of ckpt-* directories, newest first."""
    if not os.path.isdir(directory):
        return []
    out = []
    for name in os.listdir(directory):
        digits = name[len(_PREFIX):]
        if name.startswith(_PREFIX) and len(digits) == 12 and digits.isdigit():
            out.append((int(digits), os.path.join(directory, name)))
    return sorted(out, reverse=True)


class Part:
    """One committed part: its files checked (size and CRC-32, streamed) and read one at a
    time, so a reader never holds every part's bytes at once."""

    def __init__(self, d, entries):
        self.dir, self.names = d, []
        for e in entries:
            path, crc, size = os.path.join(d, e["name"]), 0, 0
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    crc, size = zlib.crc32(chunk, crc), size + len(chunk)
            if size != e["size"] or (crc & 0xFFFFFFFF) != e["crc32"]:
                raise ValueError(f"{path} does not match its size or crc32 in part.json")
            self.names.append(e["name"])

    def __contains__(self, name):
        return name in self.names

    def read(self, name):
        with open(os.path.join(self.dir, name), "rb") as f:
            return f.read()


def load_latest(directory, warn):
    """(step, meta, [Part K]) of the newest valid multi-writer checkpoint, or None; each
    skipped one is reported through warn(text)."""
    for step, path in checkpoints(directory):
        try:
            with open(os.path.join(path, _MANIFEST)) as f:
                m = json.load(f)
            if m.get("format") != "heft-checkpoint" or m.get("version") != 2 or \
                    m.get("step") != step:
                raise ValueError("manifest.json is not a committed multi-writer checkpoint")
            parts = []
            for k in range(int(m["parts"])):
                d = os.path.join(path, part_name(k))
                with open(os.path.join(d, _PART)) as f:
                    parts.append(Part(d, json.load(f)["files"]))
            return step, m.get("meta", {}), parts
        except (OSError, ValueError, KeyError) as e:
            warn(f"heft checkpoint: warning: skipping {path}: {e}")
    return None
