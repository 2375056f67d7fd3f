"""One training job as the SDK sees it (`estimator.latest_training_job`): started by
`heft train` on a spec file, read back from the job database, and, once it has ended, its
model and checkpoints copied where the estimator's output_path and checkpoint_s3_uri say.

Beside each job the SDK keeps, under $HEFT_HOME/sdk/: <job>.yaml (the spec it wrote) and
<job>.json (what the spec has no field for: instance_type, role, output_path, ...), private
files written through _home (mode 0600, never outside the home).
"""
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time

from . import _checks, _cli, _home
from ._uri import file_uri, local_path
from .exceptions import HeftCommandError, UnexpectedStatusException

ENDED = ("Completed", "Failed", "Stopped")
# heft train exit codes (docs/jobs.md)
_EXIT_BAD_SPEC = 2

# A spec field heft names in a refusal -> the SDK argument it came from.
_FIELD_TO_ARGUMENT = [
    ("hyperparameters", "hyperparameters"), ("environment", "environment"),
    ("distribution", "distribution"), ("metric_definitions", "metric_definitions"),
    ("inputs", "inputs"), ("cluster.instance_count", "instance_count"),
    ("cluster.processes_per_host", "processes_per_host"), ("cluster", "instance_count"),
    ("stopping.max_runtime_s", "max_run"), ("spot.max_wait_s", "max_wait"),
    ("spot", "use_spot_instances"), ("retry", "max_retry_attempts"), ("name", "job_name"),
    ("base_name", "base_job_name"), ("entry_point", "entry_point"), ("profiler", "disable_profiler"),
]


# The same for heft tune's tuning spec.
TUNING_FIELD_TO_ARGUMENT = [
    ("objective.metric", "objective_metric_name"), ("objective.type", "objective_type"),
    ("objective", "objective_metric_name"), ("strategy", "strategy"), ("max_jobs", "max_jobs"),
    ("max_parallel_jobs", "max_parallel_jobs"), ("random_seed", "random_seed"),
    ("early_stopping", "early_stopping_type"), ("warm_start", "warm_start_config"),
    ("hyperband", "strategy_config"), ("hyperparameter_ranges", "hyperparameter_ranges"),
    ("training_job", "estimator"), ("name", "job_name"),
]


def argument_of(line, table=None):
    """The SDK argument a heft refusal line names (by its spec field), or None."""
    m = re.search(r"(?:^|: )([a-z_]+(?:[.\[][^:\s]*)?): ", line)
    if not m:
        return None
    field = m.group(1)
    for prefix, argument in table or _FIELD_TO_ARGUMENT:
        if field == prefix or field.startswith(prefix + ".") or field.startswith(prefix + "["):
            return argument
    return None


def refusal(owner, stderr, spec_path, table=None):
    """A ValueError for heft's exit 2: each of heft's lines with the SDK argument it is about."""
    lines = [l for l in stderr.splitlines() if l.strip()]
    shown = []
    for l in lines:
        argument = argument_of(l, table)
        shown.append(f"  {argument}: {l}" if argument else f"  {l}")
    return ValueError(f"{owner}: heft refused the job (spec {spec_path}):\n" + "\n".join(shown))


def _time(t):
    return None if t is None else datetime.datetime.fromtimestamp(t, datetime.timezone.utc)


class TrainingJob:
    """`estimator.latest_training_job`: .name, .describe(), .wait(), .logs(), .stop()."""

    def __init__(self, session, name, record, running=None, spec_path=None, owner="Estimator"):
        self.sagemaker_session = session
        self.name = self.job_name = name
        self.record = record
        self._running = running
        self._spec_path = spec_path
        self._owner = owner
        self._described = None

    @classmethod
    def start(cls, session, spec, record, cwd, show, owner, detach=False):
        home = session.heft_home
        name = _checks.job_name(owner, "job_name", spec.get("name"))
        sdk = _home.sdk_dir(home)
        spec_path = _home.write_private(home, os.path.join(sdk, name + ".yaml"),
                                        _home.dump_spec(spec))
        _home.write_private(home, os.path.join(sdk, name + ".json"),
                            json.dumps(record, indent=2))
        running = _cli.Running(["train", spec_path], home, cwd, show,
                               os.path.join(sdk, name + ".out") if detach else None)
        job = cls(session, name, record, running, spec_path, owner)
        # Return once heft has recorded the job (or refused the spec).
        while not _cli.job_exists(name, home):
            rc = running.poll()
            if rc is not None:
                running.wait()
                if rc == _EXIT_BAD_SPEC or not _cli.job_exists(name, home):
                    raise refusal(owner, running.stderr_text(), spec_path)
                break
            time.sleep(0.05)
        return job

    @classmethod
    def attached(cls, session, name):
        home = session.heft_home
        d = _cli.describe(name, home)  # raises HeftCommandError for a missing job
        if "transitions" not in d:
            raise ValueError(f"attach: {name} is a tuning job, not a training job")
        path = os.path.join(home, "sdk", d["name"] + ".json")
        record = {}
        if os.path.isfile(path):
            with open(path) as f:
                record = json.load(f)
        return cls(session, d["name"], record)

    # -- the record --------------------------------------------------------------------------

    def _describe_raw(self):
        self._described = _cli.describe(self.name, self.sagemaker_session.heft_home)
        return self._described

    def spec(self):
        return (self._described or self._describe_raw())["spec"]

    def describe(self):
        """DescribeTrainingJob's fields that heft has, from the job database (docs/porting.md):
        TrainingJobName, TrainingJobStatus, SecondaryStatus, FailureReason,
        SecondaryStatusTransitions, BillableTimeInSeconds, TrainingTimeInSeconds,
        FinalMetricDataList, CheckpointConfig, ModelArtifacts, ... and heft's own record under
        'Heft'."""
        d = self._describe_raw()
        return describe_fields(d, self.record)

    def status(self):
        return self._describe_raw()["status"]

    # -- waiting, logs, stopping -------------------------------------------------------------

    def wait(self, logs=True):
        """Blocks until the job ends; copies its model and checkpoints where the estimator
        asked; a Failed job raises UnexpectedStatusException."""
        if self._running is not None:
            running, self._running = self._running, None
            if logs and running._log_path:  # fit(wait=False): its output went to a file
                self.logs()
            rc = running.wait()
            if rc == _EXIT_BAD_SPEC and not _cli.job_exists(self.name,
                                                            self.sagemaker_session.heft_home):
                raise refusal(self._owner, running.stderr_text(), self._spec_path)
        else:
            if logs:
                self.logs()
            while self.status() not in ENDED:
                time.sleep(0.2)
        d = self._describe_raw()
        deliver(self, d)
        if d["status"] == "Failed":
            raise UnexpectedStatusException(
                f"Error for Training job {self.name}: Failed. Reason: {d['failure_reason']}",
                allowed_statuses=["Completed", "Stopped"], actual_status="Failed")
        return d["status"]

    def logs(self):
        """Prints every rank's log (`heft logs JOB --follow`), until the job has ended."""
        with subprocess.Popen([_cli.heft_binary(), "logs", self.name, "--follow"],
                              env=_cli.environment(self.sagemaker_session.heft_home),
                              stdout=subprocess.PIPE, text=True, errors="replace") as proc:
            for line in proc.stdout:
                sys.stdout.write(line)
        sys.stdout.flush()

    def stop(self):
        """`heft stop JOB --wait`: the workers get SIGTERM; the job ends Stopped."""
        _cli.run(["stop", self.name, "--wait"], self.sagemaker_session.heft_home, timeout=600)

    def __repr__(self):
        return f"TrainingJob({self.name!r})"


def describe_fields(d, record):
    spec = d["spec"]
    model_dir = os.path.join(d["job_dir"], "model")
    desc = {
        "TrainingJobName": d["name"],
        "TrainingJobStatus": d["status"],
        "SecondaryStatus": d["secondary_status"],
        "HyperParameters": {k: str(v) for k, v in spec.get("hyperparameters", {}).items()},
        "AlgorithmSpecification": {
            "TrainingInputMode": "File",
            "MetricDefinitions": [{"Name": m["name"], "Regex": m["regex"]}
                                  for m in spec.get("metric_definitions", [])],
            "EnableSageMakerMetricsTimeSeries": True},
        "InputDataConfig": [{"ChannelName": c, "DataSource": {"FileUri": file_uri(p)}}
                            for c, p in sorted(spec.get("inputs", {}).items())],
        "OutputDataConfig": {"S3OutputPath": record.get("output_path") or
                             file_uri(os.path.join(d["job_dir"], "output"))},
        "ResourceConfig": {"InstanceType": record.get("instance_type", "local"),
                           "InstanceCount": d["instance_count"],
                           "ProcessesPerHost": spec["cluster"].get("processes_per_host", 1)},
        "StoppingCondition": {"MaxRuntimeInSeconds": spec["stopping"]["max_runtime_s"]},
        "EnableManagedSpotTraining": bool(spec.get("spot", {}).get("enabled")),
        "RetryStrategy": {"MaximumRetryAttempts": spec.get("retry", {}).get("max_attempts", 1)},
        "Environment": dict(spec.get("environment", {})),
        "CreationTime": _time(d["created_at"]),
        "TrainingStartTime": _time(d.get("training_start")),
        "TrainingEndTime": _time(d.get("end_time")),
        "TrainingTimeInSeconds": d["training_seconds"],
        "BillableTimeInSeconds": d["billable_seconds"],
        "SecondaryStatusTransitions": [_transition(t) for t in d["transitions"]],
        "FinalMetricDataList": [{"MetricName": m["name"], "Value": m["value"],
                                 "Timestamp": _time(m["timestamp"])}
                                for m in d.get("final_metrics", [])],
        "CheckpointConfig": {"S3Uri": record.get("checkpoint_s3_uri") or
                             file_uri(os.path.join(d["job_dir"], "checkpoints")),
                             "LocalPath": os.path.join(d["job_dir"], "checkpoints")},
        "Heft": {"job_dir": d["job_dir"], "attempts": d["attempts"],
                 "interruptions": d["interruptions"], "world_size": d["world_size"],
                 "running_seconds": d["running_seconds"], "exit_code": d.get("exit_code"),
                 "spec": spec},
    }
    if spec.get("spot", {}).get("enabled"):
        desc["StoppingCondition"]["MaxWaitTimeInSeconds"] = spec["spot"].get("max_wait_s")
    if d.get("failure_reason"):
        desc["FailureReason"] = d["failure_reason"]
    if d["status"] == "Completed":
        desc["ModelArtifacts"] = {"S3ModelArtifacts": _model_uri(d, record) or
                                  file_uri(model_dir)}
    if record.get("role"):
        desc["RoleArn"] = record["role"]
    return desc


def _transition(t):
    out = {"Status": t["status"], "StartTime": _time(t["start_time"]),
           "StatusMessage": t["message"]}
    if t.get("end_time") is not None:
        out["EndTime"] = _time(t["end_time"])
    return out


def _model_uri(d, record):
    if record.get("output_path"):
        return file_uri(os.path.join(local_path("output_path", record["output_path"]),
                                     d["name"], "model"))
    return None


def _copy_tree(source, target):
    if os.path.isdir(source):
        shutil.copytree(source, target, dirs_exist_ok=True)


def deliver(job, d):
    """Once the job has ended: its model (and output data) to <output_path>/<job>/ and its
    checkpoints to checkpoint_s3_uri, once (a marker in $HEFT_HOME/sdk/ says it was done)."""
    rec = job.record
    if d["status"] not in ENDED or not (rec.get("output_path") or rec.get("checkpoint_s3_uri")):
        return
    home = job.sagemaker_session.heft_home
    marker = os.path.join(_home.sdk_dir(home), d["name"] + ".delivered")
    if os.path.exists(marker):
        return
    if rec.get("output_path") and d["status"] == "Completed":
        base = os.path.join(local_path("output_path", rec["output_path"]), d["name"])
        _copy_tree(os.path.join(d["job_dir"], "model"), os.path.join(base, "model"))
        _copy_tree(os.path.join(d["job_dir"], "output", "data"), os.path.join(base, "output"))
    if rec.get("checkpoint_s3_uri"):
        _copy_tree(os.path.join(d["job_dir"], "checkpoints"),
                   local_path("checkpoint_s3_uri", rec["checkpoint_s3_uri"]))
    _home.write_private(home, marker, d["status"] + "\n")


def delivered_model(job):
    d = job._describe_raw()
    if d["status"] != "Completed":
        return None
    deliver(job, d)
    return _model_uri(d, job.record) or file_uri(os.path.join(d["job_dir"], "model"))


__all__ = ["TrainingJob", "describe_fields", "HeftCommandError"]
