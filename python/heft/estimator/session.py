"""`Session`: the cloud SDK's session, standing in for the bucket and the job service with
heft's home ($HEFT_HOME, default ~/.heft): `upload_data` copies into heft's data folder,
`$HEFT_HOME/data/<bucket>/<key_prefix>/`, and returns a `file://` URI that any estimator's
`inputs` takes. No cloud call is made; the cloud clients the SDK's Session accepts are refused
by name (heft has nothing to hand them to)."""
import os
import shutil

from . import _cli, _home
from ._uri import local_path

DEFAULT_BUCKET = "default"
# The job spec's cluster fields a session or an estimator may choose (docs/jobs.md): where the
# workers run. instance_count and processes_per_host are the estimator's own arguments.
CLUSTER_KEYS = {"launcher": str, "hosts": list, "hostfile": str, "custom_mpi_options": str,
                "srun_options": str, "sbatch_options": str, "store_address": str}


def check_cluster(owner, cluster):
    """A copy of `cluster` (a dict of CLUSTER_KEYS), or ValueError naming the key and what
    was expected. The spec checks the values themselves when the job starts."""
    if cluster is None:
        return {}
    if not isinstance(cluster, dict):
        raise ValueError(f"{owner}: cluster: expected a dict of the job spec's cluster fields "
                         f"({', '.join(sorted(CLUSTER_KEYS))}), found {type(cluster).__name__}")
    out = {}
    for key, value in cluster.items():
        if key not in CLUSTER_KEYS:
            hint = (" (the estimator's own argument)" if key in ("instance_count",
                                                                "processes_per_host",
                                                                "instance_type") else "")
            raise ValueError(f"{owner}: cluster: unknown key {key!r}{hint}; expected one of "
                             f"{', '.join(sorted(CLUSTER_KEYS))}")
        kind = CLUSTER_KEYS[key]
        if kind is list:
            if not isinstance(value, (list, tuple)) or not all(isinstance(h, str) and h
                                                              for h in value):
                raise ValueError(f"{owner}: cluster['{key}']: expected a list of host names, "
                                 f"found {value!r}")
            value = list(value)
        elif not isinstance(value, str) or not value:
            raise ValueError(f"{owner}: cluster['{key}']: expected a non-empty string, found "
                             f"{value!r}")
        out[key] = value
    return out


_CLIENT_ARGUMENTS = ("boto_session", "sagemaker_client", "sagemaker_runtime_client",
                     "sagemaker_featurestore_runtime_client", "sagemaker_metrics_client",
                     "sagemaker_config", "settings")


def _check_component(what, value):
    if not value or value in (".", "..") or "\x00" in value:
        raise ValueError(f"Session: {what}: expected a non-empty folder name, found {value!r}")
    for part in value.strip("/").split("/"):
        if part in ("", ".", ".."):
            raise ValueError(f"Session: {what}: expected a relative path without '.' or '..' "
                             f"parts, found {value!r}")


class Session:
    """Session(default_bucket=None, default_bucket_prefix=None, heft_home=None, cluster=None).

    `heft_home` (heft's addition) is the job database and data folder to use; default
    $HEFT_HOME, else ~/.heft. Every estimator and tuner given this session runs its jobs
    there. `cluster` (heft's addition) says where their workers run, as the job spec's
    cluster fields: {"launcher": "mpirun", "hosts": [...], "custom_mpi_options": ...},
    {"launcher": "slurm", "srun_options": ...}; default the local launcher (docs/porting.md,
    "Where the workers run"). An estimator's own `cluster` is laid over it."""

    def __init__(self, default_bucket=None, default_bucket_prefix=None, heft_home=None,
                 cluster=None, **clients):
        for name, value in clients.items():
            if name not in _CLIENT_ARGUMENTS:
                raise TypeError(f"Session() got an unexpected keyword argument '{name}'")
            if value is not None:
                raise ValueError(f"Session: {name}: heft makes no cloud calls and has no use "
                                 "for a client; leave it out")
        if default_bucket is not None:
            _check_component("default_bucket", default_bucket)
        if default_bucket_prefix is not None:
            _check_component("default_bucket_prefix", default_bucket_prefix)
        self._bucket = default_bucket or DEFAULT_BUCKET
        self.default_bucket_prefix = default_bucket_prefix
        # heft's own answer ($HEFT_HOME, else ~/.heft: src/heft/job/paths.h), so the
        # variable is read in one place.
        home = heft_home or _cli.run(["home"], None).stdout.strip()
        self.heft_home = os.path.abspath(home)
        self.cluster = check_cluster("Session", cluster)
        self.local_mode = True

    def default_bucket(self):
        """The bucket name: a folder of heft's data folder ($HEFT_HOME/data/default)."""
        return self._bucket

    def data_folder(self, bucket=None):
        return os.path.join(self.heft_home, "data", bucket or self._bucket)

    def upload_data(self, path, bucket=None, key_prefix="data", callback=None, extra_args=None):
        """Copies the file or folder `path` to `$HEFT_HOME/data/<bucket>/<key_prefix>/` and
        returns its `file://` URI: for a folder, the prefix's (its files keep their relative
        paths under it); for a file, the file's. A later upload of the same names replaces
        them, as an upload to a bucket does."""
        if extra_args is not None:
            raise ValueError("Session.upload_data: extra_args: heft copies plain files; it has "
                             "no object metadata or encryption to set")
        if callback is not None:
            raise ValueError("Session.upload_data: callback: heft copies in one call; there is "
                             "no progress to report")
        if bucket is not None:
            _check_component("bucket", bucket)
        _check_component("key_prefix", key_prefix)
        if not os.path.exists(path):
            raise FileNotFoundError(f"Session.upload_data: path: {path} does not exist")
        prefix = key_prefix.strip("/")
        if self.default_bucket_prefix and bucket is None:
            prefix = self.default_bucket_prefix.strip("/") + "/" + prefix
        # Inside heft's home (private, 0700), even when a link was planted on the way.
        target = os.path.join(self.data_folder(bucket), prefix)
        _home.folder(self.heft_home, os.path.relpath(target, self.heft_home))
        if os.path.isdir(path):
            shutil.copytree(path, target, dirs_exist_ok=True)
            return "file://" + target
        dest = os.path.join(target, os.path.basename(path))
        shutil.copy2(path, dest)
        return "file://" + dest

    def download_data(self, path, bucket=None, key_prefix="", extra_args=None):
        """Copies `$HEFT_HOME/data/<bucket>/<key_prefix>` into the folder `path`; returns the
        paths written."""
        if extra_args is not None:
            raise ValueError("Session.download_data: extra_args: not used by heft")
        source = os.path.join(self.data_folder(bucket), key_prefix.strip("/"))
        if not os.path.exists(source):
            raise FileNotFoundError(f"Session.download_data: {source} does not exist")
        os.makedirs(path, exist_ok=True)
        if os.path.isfile(source):
            dest = os.path.join(path, os.path.basename(source))
            shutil.copy2(source, dest)
            return [dest]
        shutil.copytree(source, path, dirs_exist_ok=True)
        return [os.path.join(root, f) for root, _, files in os.walk(path) for f in files]

    def resolve(self, what, uri):
        """A local path for an input/output URI (file://, a path), refusing s3:// naming
        `what`."""
        return local_path(what, uri)


LocalSession = Session


def get_execution_role(sagemaker_session=None):
    """The SDK's role lookup: heft runs as the calling user, so any role string is accepted and
    unused; this returns a placeholder for scripts that pass it on."""
    return "heft-local-user"
