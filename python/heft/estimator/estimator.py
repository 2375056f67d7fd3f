"""`Estimator` (sagemaker.estimator.Estimator): a training job from the cloud SDK's
arguments, run by `heft train` on a job spec written from them.

What maps, to which spec field (docs/jobs.md), and what is refused: docs/porting.md. In short:
entry_point/source_dir -> entry_point (the script, run with this Python, in source_dir);
instance_count -> cluster.instance_count; processes_per_host (heft's addition: the cloud
derives it from the instance type's accelerators) or distribution's mpi.processes_per_host ->
cluster.processes_per_host; hyperparameters, environment, metric_definitions ({Name, Regex});
distribution verbatim; max_run -> stopping.max_runtime_s; use_spot_instances/max_wait ->
spot; max_retry_attempts -> retry.max_attempts; disable_profiler -> profiler.enabled;
inputs -> inputs (local folders, file:// URIs); model_uri -> a `model` channel; output_path and
checkpoint_s3_uri -> folders the model and the checkpoints are copied to when the job ends;
instance_type -> cluster.instance_type (what the workers are told they run on); the session's
and the estimator's `cluster` (heft's addition) -> the spec's launcher, hosts and engine
options. role is recorded; the rest of the SDK's arguments are refused naming them
when given a value that asks for something heft does not do (_refused.py).
"""
import datetime
import os
import sys
import time

from . import _cli, _refused
from . import _checks as checks
from ._training_job import TrainingJob, delivered_model
from ._uri import local_path
from .exceptions import HeftCommandError
from .inputs import TrainingInput
from .session import Session, check_cluster

BUILTIN_TRAINER = "heft-train"
# What the SDK adds to the hyperparameters itself (_spec_hyperparameters).
_FRAMEWORK_PARAMETERS = ("sagemaker_program", "sagemaker_submit_directory",
                         "sagemaker_container_log_level")


def name_from_base(base, max_length=63):
    """`base-YYYY-MM-DD-HH-MM-SS-mmm` (UTC), the SDK's job names, cut to max_length: a job
    name whenever `base` is one (base is cut and its trailing '-' dropped)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    stamp = now.strftime("%Y-%m-%d-%H-%M-%S-") + f"{now.microsecond // 1000:03d}"
    return f"{base[:max_length - len(stamp) - 1].rstrip('-')}-{stamp}"


class Estimator:
    """Estimator(image_uri=None, role=None, instance_count=1, instance_type="local", *,
    entry_point=None, ...): the cloud SDK's positional order (image, role, count, type).

    Also Estimator(image_uri="heft-train", hyperparameters={...}): heft's built-in trainer,
    as a built-in algorithm is used through the cloud SDK's Estimator."""

    _default_base = "heft-training"

    def __init__(self, image_uri=None, role=None, instance_count=1, instance_type="local", *,
                 entry_point=None, source_dir=None, hyperparameters=None, distribution=None,
                 metric_definitions=None, environment=None, checkpoint_s3_uri=None,
                 use_spot_instances=False, max_run=None, max_wait=None, base_job_name=None,
                 output_path=None, sagemaker_session=None, max_retry_attempts=None,
                 model_uri=None, model_channel_name="model", disable_profiler=False,
                 container_log_level=None, processes_per_host=None, cluster=None, **kwargs):
        owner = type(self).__name__
        self.builtin = image_uri == BUILTIN_TRAINER
        if not self.builtin:
            kwargs["image_uri"] = image_uri
        _refused.check(owner, _refused.ESTIMATOR, kwargs)
        if sagemaker_session is not None and not isinstance(sagemaker_session, Session):
            raise ValueError(f"{owner}: sagemaker_session: expected a heft.estimator.Session, "
                             f"found {type(sagemaker_session).__name__}")
        self.sagemaker_session = sagemaker_session or Session()
        self.role = role  # accepted, unused: heft runs as the calling user
        self.instance_count = checks.check_int(owner, "instance_count", instance_count, 1, 1024)
        if not isinstance(instance_type, str) or not (
                instance_type in ("local", "local_cpu") or instance_type.startswith("ml.")):
            raise ValueError(f"{owner}: instance_type: expected 'local', 'local_cpu' or an ml.* "
                             f"name, found {instance_type!r} (local_gpu: heft's workers use "
                             "CPUs)")
        # What the job says it runs on (SM_CURRENT_INSTANCE_TYPE); the workers run where the
        # launcher puts them: the session's and this estimator's `cluster` (heft's addition).
        self.instance_type = instance_type
        self.cluster = check_cluster(owner, cluster)
        self.entry_point, self.source_dir = entry_point, source_dir
        self._command, self._cwd = self._entry_command(owner, entry_point, source_dir)
        self._hyperparameters = checks.hyperparameters(owner, hyperparameters)
        if distribution is not None and not isinstance(distribution, dict):
            raise ValueError(f"{owner}: distribution: expected a dict, found "
                             f"{type(distribution).__name__}")
        self.distribution = distribution or {}
        self.processes_per_host = checks.processes_per_host(owner, processes_per_host,
                                                             self.distribution)
        self.metric_definitions = list(metric_definitions or [])
        self._metrics = checks.metric_definitions(owner, metric_definitions)
        if environment is not None and not isinstance(environment, dict):
            raise ValueError(f"{owner}: environment: expected a dict, found "
                             f"{type(environment).__name__}")
        self.environment = dict(environment or {})
        self._set_locations(owner, checkpoint_s3_uri, output_path, model_uri, model_channel_name)
        self._set_limits(owner, use_spot_instances, max_run, max_wait, max_retry_attempts)
        self.disable_profiler = bool(disable_profiler)
        self.container_log_level = None if container_log_level is None else checks.check_int(
            owner, "container_log_level", container_log_level, 0, 50)
        # Checked here and again by fit(): every name made from it is a job name.
        self.base_job_name = None if base_job_name is None else checks.job_name(
            owner, "base_job_name", base_job_name)
        self.latest_training_job = None
        self._current_job_name = None

    def _set_locations(self, owner, checkpoint_s3_uri, output_path, model_uri,
                       model_channel_name):
        for what, uri in (("checkpoint_s3_uri", checkpoint_s3_uri),
                          ("output_path", output_path), ("model_uri", model_uri)):
            if uri is not None:
                local_path(f"{owner}: {what}", uri)  # s3:// refused naming the argument
        self.checkpoint_s3_uri, self.output_path = checkpoint_s3_uri, output_path
        self.model_uri, self.model_channel_name = model_uri, model_channel_name

    def _set_limits(self, owner, use_spot_instances, max_run, max_wait, max_retry_attempts):
        self.use_spot_instances = bool(use_spot_instances)
        self.max_run = None if max_run is None else checks.check_seconds(owner, "max_run",
                                                                         max_run)
        if max_wait is not None:
            checks.check_seconds(owner, "max_wait", max_wait)
            if not self.use_spot_instances:
                raise ValueError(f"{owner}: max_wait is only for spot training: give "
                                 "use_spot_instances=True")
            if max_wait < (max_run or 86400):
                raise ValueError(f"{owner}: max_wait ({max_wait}) must be at least max_run "
                                 f"({max_run or 86400})")
        self.max_wait = max_wait
        self.max_retry_attempts = None if max_retry_attempts is None else checks.check_int(
            owner, "max_retry_attempts", max_retry_attempts, 1, 30)

    # -- the job spec ------------------------------------------------------------------------

    def _entry_command(self, owner, entry_point, source_dir):
        if source_dir is not None:
            source_dir = local_path(f"{owner}: source_dir", source_dir)
            if not os.path.isdir(source_dir):
                raise ValueError(f"{owner}: source_dir: {source_dir} is not a folder (heft runs "
                                 "local code in place; a .tar.gz is not unpacked)")
        if self.builtin:
            if entry_point is not None:
                raise ValueError(f"{owner}: entry_point: not with image_uri='heft-train' (the "
                                 "built-in trainer is the entry point)")
            return [BUILTIN_TRAINER], source_dir or os.getcwd()
        if not isinstance(entry_point, str) or not entry_point:
            raise ValueError(f"{owner}: entry_point: expected the training script's path, found "
                             f"{entry_point!r}")
        path = os.path.join(source_dir, entry_point) if source_dir else entry_point
        path = os.path.abspath(path)
        if not os.path.isfile(path):
            raise ValueError(f"{owner}: entry_point: {path} does not exist")
        cwd = source_dir or os.path.dirname(path)
        if path.endswith(".py"):
            return [sys.executable, "-u", path], cwd
        if path.endswith(".sh"):
            return ["/bin/sh", path], cwd
        if os.access(path, os.X_OK):
            return [path], cwd
        raise ValueError(f"{owner}: entry_point: {path}: expected a .py or .sh script or an "
                         "executable file")

    def hyperparameters(self):
        return dict(self._hyperparameters)

    def set_hyperparameters(self, **kwargs):
        self._hyperparameters.update(checks.hyperparameters(type(self).__name__, kwargs))

    def _inputs(self, inputs):
        owner = f"{type(self).__name__}.fit"
        channels = {}
        if inputs is None:
            pass
        elif isinstance(inputs, (str, os.PathLike, TrainingInput)):
            channels["training"] = inputs
        elif isinstance(inputs, dict):
            channels.update(inputs)
        else:
            raise ValueError(f"{owner}: inputs: expected a path, a file:// URI, a TrainingInput "
                             f"or a dict of channels, found {type(inputs).__name__}")
        if self.model_uri is not None:
            if self.model_channel_name in channels:
                raise ValueError(f"{owner}: inputs: channel '{self.model_channel_name}' is "
                                 "model_uri's (model_channel_name)")
            channels[self.model_channel_name] = self.model_uri
        out = {}
        for name, value in channels.items():
            what = f"{owner}: inputs['{name}']"
            if isinstance(value, TrainingInput):
                value = value.local_uri(what)
            path = local_path(what, value)
            if not os.path.isdir(path):
                hint = (f"; give the folder that holds it, file://{os.path.dirname(path)}"
                        if os.path.isfile(path) else "")
                raise ValueError(f"{what}: {path} is not a folder (a channel is a folder of "
                                 f"files, as the cloud's /opt/ml/input/data/<channel>){hint}")
            out[name] = path
        return out

    def job_spec(self, inputs=None, job_name=None):
        """The heft job spec (a dict) that fit() writes: docs/jobs.md's fields."""
        spec = {}
        if job_name is not None:
            spec["name"] = job_name
        spec["entry_point"] = list(self._command) if not self.builtin else BUILTIN_TRAINER
        spec["hyperparameters"] = self._spec_hyperparameters()
        spec["inputs"] = self._inputs(inputs)
        spec["cluster"] = self._spec_cluster()
        if self.distribution:
            spec["distribution"] = self.distribution
        if self._metrics:
            spec["metric_definitions"] = list(self._metrics)
        if self.max_run is not None:
            spec["stopping"] = {"max_runtime_s": self.max_run}
        if self.use_spot_instances:
            spec["spot"] = {"enabled": True}
            if self.max_wait is not None:
                spec["spot"]["max_wait_s"] = self.max_wait
        if self.max_retry_attempts is not None:
            spec["retry"] = {"max_attempts": self.max_retry_attempts}
        if self.environment:
            spec["environment"] = dict(self.environment)
        if self.disable_profiler:
            spec["profiler"] = {"enabled": False}
        return spec

    def _spec_cluster(self):
        """The spec's cluster: the session's fields, this estimator's over them, the counts and
        the instance type. With mpirun's `hosts`, instance_count of them are taken (the service
        starts instance_count machines); fewer is refused naming both."""
        cluster = dict(self.sagemaker_session.cluster)
        cluster.update(self.cluster)
        hosts = cluster.get("hosts")
        if hosts is not None:
            if len(hosts) < self.instance_count:
                raise ValueError(f"{type(self).__name__}: instance_count={self.instance_count} "
                                 f"but cluster['hosts'] names {len(hosts)} host(s): "
                                 f"{', '.join(hosts)}")
            cluster["hosts"] = hosts[:self.instance_count]
        cluster["instance_count"] = self.instance_count
        if self.processes_per_host is not None:
            cluster["processes_per_host"] = self.processes_per_host
        cluster["instance_type"] = self.instance_type
        return cluster

    def _spec_hyperparameters(self):
        """The user's hyperparameters and the framework parameters the SDK adds (heft's spec
        keeps them out of the script's arguments): sagemaker_program and
        sagemaker_submit_directory (SM_USER_ENTRY_POINT, SM_MODULE_DIR: the entry point as
        given and source_dir) and container_log_level's sagemaker_container_log_level
        (SM_LOG_LEVEL)."""
        hps = dict(self._hyperparameters)
        if not self.builtin:
            hps.setdefault("sagemaker_program", self.entry_point)
            hps.setdefault("sagemaker_submit_directory", self._cwd)
        if self.container_log_level is not None:
            hps["sagemaker_container_log_level"] = self.container_log_level
        return hps

    def _record(self):
        """What heft's spec has no field for, kept beside the job for attach()."""
        return {"class": type(self).__name__, "instance_type": self.instance_type,
                "role": self.role, "output_path": self.output_path,
                "checkpoint_s3_uri": self.checkpoint_s3_uri, "entry_point": self.entry_point,
                "source_dir": self.source_dir, "base_job_name": self.base_job_name,
                "framework_version": getattr(self, "framework_version", None),
                "py_version": getattr(self, "py_version", None), "cwd": self._cwd,
                "model_channel_name": self.model_channel_name}

    def _base_name(self):
        if self.base_job_name:
            return self.base_job_name
        if self.builtin:
            return BUILTIN_TRAINER
        return self._default_base

    # -- running -----------------------------------------------------------------------------

    def fit(self, inputs=None, wait=True, logs=True, job_name=None, **kwargs):
        """Runs the job with `heft train`. `inputs`: a path, file:// URI, TrainingInput or a dict
        of channel -> one of those (s3:// refused). `wait`: block until it ends (a Failed job
        raises UnexpectedStatusException); else return once it is recorded. `logs`: True/"All"
        shows the workers' lines as they come; False/"None" shows nothing. `job_name`, or the
        base_job_name it is made from, is a job name (letters, digits and '-', at most 63),
        checked before anything is written."""
        owner = f"{type(self).__name__}.fit"
        _refused.check(owner, _refused.FIT, kwargs)
        show = checks.show_logs(owner, logs)
        home = self.sagemaker_session.heft_home
        if job_name is not None:
            checks.job_name(owner, "job_name", job_name)
        else:
            base = checks.job_name(owner, "base_job_name", self._base_name())
            job_name = name_from_base(base)
            while _cli.job_exists(job_name, home):
                time.sleep(0.002)
                job_name = name_from_base(base)
        spec = self.job_spec(inputs, job_name)
        job = TrainingJob.start(self.sagemaker_session, spec, self._record(), self._cwd,
                                show and wait, owner, detach=not wait)
        self.latest_training_job = job
        self._current_job_name = job.name
        if wait:
            job.wait(logs=show)
        return None

    def logs(self):
        """Prints the latest job's worker logs (`heft logs JOB --follow`: until it ends)."""
        self._require_job("logs").logs()

    def _require_job(self, what):
        if self.latest_training_job is None:
            raise ValueError(f"{type(self).__name__}.{what}: no training job yet: call fit() "
                             "first (or Estimator.attach(job_name))")
        return self.latest_training_job

    def deploy(self, *args, **kwargs):
        """Refused: heft trains and serves no endpoints."""
        raise ValueError(f"{type(self).__name__}.deploy: heft trains models and serves no "
                         "endpoints; load the files under model_data yourself")

    @property
    def model_data(self):
        """The file:// URI of the folder the latest job's model landed in: the job's model
        folder, or <output_path>/<job>/model when output_path was given. None before a job
        has completed."""
        job = self._require_job("model_data")
        return delivered_model(job)

    @property
    def _current_job(self):
        return self.latest_training_job

    @classmethod
    def attach(cls, training_job_name, sagemaker_session=None, model_channel_name="model"):
        """An estimator for an existing job (from the job database and what fit() kept):
        blocks until the job ends, without showing its logs, as the cloud SDK's attach."""
        session = sagemaker_session or Session()
        job = TrainingJob.attached(session, training_job_name)
        est = cls._from_job(job, session)
        est.latest_training_job = job
        est._current_job_name = job.name
        job.wait(logs=False)
        return est

    @classmethod
    def _from_job(cls, job, session):
        spec, rec = job.spec(), job.record
        est = cls.__new__(cls)
        Estimator._restore(est, spec, rec, session)
        return est

    def _restore(self, spec, rec, session):
        self.sagemaker_session = session
        self.builtin = spec["entry_point"] in (BUILTIN_TRAINER, [BUILTIN_TRAINER])
        self._command = spec["entry_point"] if isinstance(spec["entry_point"], list) else [
            spec["entry_point"]]
        self._cwd = rec.get("cwd") or os.getcwd()
        self.entry_point, self.source_dir = rec.get("entry_point"), rec.get("source_dir")
        self.role, self.instance_type = rec.get("role"), rec.get("instance_type", "local")
        self.instance_count = spec["cluster"]["instance_count"]
        self.processes_per_host = spec["cluster"].get("processes_per_host")
        hps = dict(spec.get("hyperparameters", {}))
        self.container_log_level = hps.get("sagemaker_container_log_level")
        self._hyperparameters = {k: v for k, v in hps.items() if k not in _FRAMEWORK_PARAMETERS}
        self.distribution = spec.get("distribution") or {}
        self._metrics = list(spec.get("metric_definitions", []))
        self.metric_definitions = [{"Name": m["name"], "Regex": m["regex"]} for m in self._metrics]
        self.environment = dict(spec.get("environment", {}))
        self.checkpoint_s3_uri = rec.get("checkpoint_s3_uri")
        self.output_path = rec.get("output_path")
        spot = spec.get("spot", {})
        self.use_spot_instances = bool(spot.get("enabled"))
        self.max_wait = spot.get("max_wait_s") or None if self.use_spot_instances else None
        self.max_run = spec.get("stopping", {}).get("max_runtime_s")
        self.max_retry_attempts = spec.get("retry", {}).get("max_attempts")
        self.model_uri, self.model_channel_name = None, rec.get("model_channel_name", "model")
        self.disable_profiler = not spec.get("profiler", {}).get("enabled", True)
        self.base_job_name = rec.get("base_job_name")
        self.framework_version = rec.get("framework_version")
        self.py_version = rec.get("py_version")


__all__ = ["Estimator", "name_from_base", "HeftCommandError"]
