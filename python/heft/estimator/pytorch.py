"""`PyTorch` (sagemaker.pytorch.PyTorch): an Estimator of a PyTorch training script.

`framework_version` and `py_version` are checked against this machine's torch and Python
(a warning names both on a mismatch: heft runs the local ones, it has no framework images).
Everything else is Estimator's (estimator.py, docs/porting.md)."""
import sys
import warnings

from .estimator import Estimator


def _local_torch_version():
    try:
        from importlib import metadata
        return metadata.version("torch")
    except Exception:  # Debian's python3-torch may have no dist-info
        pass
    try:
        import torch
        return torch.__version__
    except ImportError:
        return None


def _major_minor(version):
    parts = str(version).split("+")[0].split(".")
    return tuple(parts[:2])


def check_framework_version(owner, framework_version):
    local = _local_torch_version()
    if local is None:
        warnings.warn(f"{owner}: framework_version={framework_version}: torch is not installed "
                      f"for {sys.executable}; heft runs the script with it anyway")
    elif _major_minor(local) != _major_minor(framework_version):
        warnings.warn(f"{owner}: framework_version={framework_version} but this machine has "
                      f"torch {local}; heft runs the script with torch {local}")


def check_py_version(owner, py_version):
    local = f"py{sys.version_info.major}{sys.version_info.minor}"
    if py_version not in (f"py{sys.version_info.major}", local):
        warnings.warn(f"{owner}: py_version={py_version} but heft runs the script with "
                      f"{sys.executable} ({local})")


class PyTorch(Estimator):
    """PyTorch(entry_point, framework_version=None, py_version=None, source_dir=None,
    hyperparameters=None, distribution=None, ..., instance_count=1, instance_type="local")."""

    _default_base = "pytorch-training"

    def __init__(self, entry_point, framework_version=None, py_version=None, source_dir=None,
                 hyperparameters=None, image_uri=None, distribution=None, **kwargs):
        owner = type(self).__name__
        self.framework_version, self.py_version = framework_version, py_version
        if framework_version is not None:
            check_framework_version(owner, framework_version)
        if py_version is not None:
            check_py_version(owner, py_version)
        if image_uri is not None:
            kwargs["image_uri"] = image_uri  # refused: PyTorch runs a script
            if image_uri == "heft-train":
                raise ValueError(f"{owner}: image_uri='heft-train' is for Estimator; PyTorch "
                                 "runs entry_point")
        super().__init__(entry_point=entry_point, source_dir=source_dir,
                         hyperparameters=hyperparameters, distribution=distribution, **kwargs)


__all__ = ["PyTorch"]
