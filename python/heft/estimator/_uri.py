"""Locations the SDK takes as URIs: a local path or a `file://` URI; an `s3://` URI is
refused naming the argument (heft reads and writes this machine's files; copy the data here
with the cloud's tools, or Session.upload_data a local copy)."""
import os
import urllib.parse


def local_path(what, uri):
    """The absolute local path `uri` names; ValueError naming `what` for s3:// and other
    schemes, TypeError for a non-string."""
    if not isinstance(uri, (str, os.PathLike)):
        raise TypeError(f"{what}: expected a local path or a file:// URI, found "
                        f"{type(uri).__name__}")
    text = os.fspath(uri)
    if text.startswith("s3://"):
        raise ValueError(f"{what}: {text}: s3:// URIs are not supported: heft runs on this "
                         "machine's files and makes no cloud calls; copy the data here (aws s3 "
                         "sync ...) and give a local path or a file:// URI "
                         "(Session().upload_data(path) returns one)")
    if text.startswith("file://"):
        parsed = urllib.parse.urlparse(text)
        if parsed.netloc not in ("", "localhost"):
            raise ValueError(f"{what}: {text}: expected file:///absolute/path (a file:// URI "
                             f"of this machine), found host {parsed.netloc!r}")
        return os.path.abspath(urllib.parse.unquote(parsed.path))
    scheme = urllib.parse.urlparse(text).scheme
    if scheme and len(scheme) > 1:  # a one-letter scheme would be a Windows drive
        raise ValueError(f"{what}: {text}: expected a local path or a file:// URI, found a "
                         f"{scheme}:// URI")
    return os.path.abspath(os.path.expanduser(text))


def file_uri(path):
    return "file://" + os.path.abspath(path)
