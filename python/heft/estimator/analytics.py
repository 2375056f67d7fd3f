"""Analytics (sagemaker.analytics): a tuning job's trials, and a training job's metric series,
as a pandas DataFrame when pandas is installed, else a list of dicts (one per row)."""
import datetime
import json

from . import _cli


def _frame(rows, columns):
    try:
        import pandas
    except ImportError:
        return [{c: r.get(c) for c in columns} for r in rows]
    return pandas.DataFrame(rows, columns=columns)


def _time(t):
    return None if t is None else datetime.datetime.fromtimestamp(t, datetime.timezone.utc)


class HyperparameterTuningJobAnalytics:
    """One row per trial: its tuned hyperparameters (numbers for continuous and integer
    ranges), TrainingJobName, TrainingJobStatus (the trial's: Completed, Failed, Stopped or
    Diverged), FinalObjectiveValue, TrainingStartTime, TrainingEndTime,
    TrainingElapsedTimeSeconds."""

    def __init__(self, hyperparameter_tuning_job_name, sagemaker_session=None, ranges=None):
        from .session import Session
        self.name = hyperparameter_tuning_job_name
        self._session = sagemaker_session or Session()
        self._ranges = ranges or {}
        self._rows = None

    def description(self):
        return _cli.describe(self.name, self._session.heft_home)

    def training_job_summaries(self):
        return self.description()["trials"]

    def dataframe(self, force_refresh=False):
        if self._rows is None or force_refresh:
            self._rows = self._fetch()
        names = sorted({k for r in self._rows for k in r["_hps"]})
        columns = names + ["TrainingJobName", "TrainingJobStatus", "FinalObjectiveValue",
                           "TrainingStartTime", "TrainingEndTime", "TrainingElapsedTimeSeconds"]
        rows = [{**r["_hps"], **{k: v for k, v in r.items() if k != "_hps"}} for r in self._rows]
        return _frame(rows, columns)

    def _fetch(self):
        home = self._session.heft_home
        jobs = {j["name"]: j for j in _cli.run_json(["jobs", "--tuning", self.name], home)}
        rows = []
        for t in self.description()["trials"]:
            hps = {}
            for k, v in t.get("hyperparameters", {}).items():
                r = self._ranges.get(k)
                try:
                    hps[k] = r.cast(v) if r is not None else v
                except ValueError:
                    hps[k] = v
            j = jobs.get(t["name"], {})
            rows.append({"_hps": hps, "TrainingJobName": t["name"],
                         "TrainingJobStatus": t["status"],
                         "FinalObjectiveValue": t.get("objective"),
                         "TrainingStartTime": _time(j.get("created_at")),
                         "TrainingEndTime": _time(j.get("end_time")),
                         "TrainingElapsedTimeSeconds": j.get("training_seconds")})
        return rows


class TrainingJobAnalytics:
    """A training job's metric points (`heft metrics JOB --format json`): columns timestamp
    (seconds since the job was created), metric_name, value; rank and step are heft's."""

    def __init__(self, training_job_name, metric_names=None, sagemaker_session=None):
        from .session import Session
        self.name = training_job_name
        self._metric_names = metric_names
        self._session = sagemaker_session or Session()

    def dataframe(self, force_refresh=False):
        home = self._session.heft_home
        created = _cli.describe(self.name, home)["created_at"]
        points = json.loads(_cli.run(["metrics", self.name, "--format", "json"], home).stdout)
        rows = [{"timestamp": p["timestamp"] - created, "metric_name": p["name"],
                 "value": p["value"], "rank": p.get("rank"), "step": p.get("step")}
                for p in points
                if self._metric_names is None or p["name"] in self._metric_names]
        return _frame(rows, ["timestamp", "metric_name", "value", "rank", "step"])
