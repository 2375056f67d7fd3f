"""The files the SDK keeps in heft's home: $HEFT_HOME/sdk/ holds each job's spec (<job>.yaml,
with the job's environment), its record (<job>.json), its output when fit(wait=False)
(<job>.out) and its delivery marker (<job>.delivered), and the same for each tuning
(<tuning>.tuning.yaml, ...).

Every path is resolved (links followed) before it is written and refused unless it lies inside
the home. A file is created private (mode 0600) under a temporary name in its folder and
renamed onto its name, so it is never readable by others, not even for a moment, and a link
planted at the name is replaced, never followed. Folders the SDK creates are 0700.

Not here: what the user names as a destination (output_path, checkpoint_s3_uri,
download_data's path), which the SDK copies to where it is told.
"""
import contextlib
import json
import os
import tempfile


def dump_spec(spec):
    """A job's or tuning's spec as the text of its <job>.yaml / <tuning>.tuning.yaml (JSON is
    YAML; strings stay quoted, so "0.1" stays a string; what JSON cannot hold, as str())."""
    return json.dumps(spec, indent=2, default=str) + "\n"


def sdk_dir(home):
    """$HEFT_HOME/sdk: folder(home, "sdk")."""
    return folder(home, "sdk")


def folder(home, relative):
    """The folder `relative` (a path inside `home`), resolved, created with the home when
    missing (0700; os.makedirs leaves folders between them to the umask). ValueError when it
    resolves outside the home (a link planted on the way), checked before and after creating."""
    path = os.path.join(home, relative)
    _refuse_outside(home, path, os.path.realpath(path))
    os.makedirs(home, mode=0o700, exist_ok=True)
    os.makedirs(path, mode=0o700, exist_ok=True)
    real = os.path.realpath(path)
    _refuse_outside(home, path, real)
    return real


def inside(home, path):
    """`path` with its folder resolved (os.path.realpath), when that lies inside the resolved
    `home` and its last part is a plain name; else ValueError. The last part is not resolved:
    a link there is what a rename replaces."""
    base = os.path.basename(path)
    real = os.path.join(os.path.realpath(os.path.dirname(path) or "."), base)
    if base in ("", ".", "..") or "\0" in path:
        raise ValueError(f"heft.estimator: {path!r}: expected a file name at its end")
    _refuse_outside(home, path, real)
    return real


def _refuse_outside(home, path, real):
    real_home = os.path.realpath(home)
    if os.path.commonpath([real_home, real]) != real_home or real == real_home:
        raise ValueError(f"heft.estimator: {path!r} resolves to {real!r}, outside heft's home "
                         f"{real_home}; the SDK writes its files only there")


def _temporary(final):
    # mkstemp: O_CREAT | O_EXCL | O_NOFOLLOW, mode 0600, in the target's own folder (so the
    # rename stays on one file system and is atomic).
    return tempfile.mkstemp(dir=os.path.dirname(final),
                            prefix="." + os.path.basename(final) + ".", suffix=".tmp")


def write_private(home, path, text):
    """Writes `text` to `path` inside `home` (mode 0600, renamed into place); the resolved
    path. ValueError for a path outside the home; OSError as the file system gives it (no
    temporary file is left)."""
    final = inside(home, path)
    fd, tmp = _temporary(final)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return final


def open_private(home, path):
    """A new empty file at `path` inside `home` (mode 0600, renamed into place, replacing what
    was there), open for writing: the caller closes it. Errors as write_private."""
    final = inside(home, path)
    fd, tmp = _temporary(final)
    try:
        os.replace(tmp, final)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return os.fdopen(fd, "w")
