"""`HyperparameterTuner` (sagemaker.tuner): a tuning job over an estimator, run by
`heft tune` on a tuning spec written from the arguments (docs/tuning.md). Each trial is a heft
training job of the estimator's spec with the trial's hyperparameters.

Maps: objective_metric_name/objective_type -> objective; hyperparameter_ranges ->
hyperparameter_ranges; strategy (Bayesian, Random, Grid, Hyperband) and strategy_config's
Hyperband resources -> hyperband; max_jobs, max_parallel_jobs, random_seed, early_stopping_type
(Off, Auto: the median rule), warm_start_config -> warm_start; metric_definitions are added
to the estimator's. Refused naming them: max_runtime_in_seconds, completion_criteria_config,
autotune, hyperparameters_to_keep_static, estimator_name, tags (_refused.TUNER).
"""
import enum
import json
import os
import time

from . import _cli, _home, _refused
from ._training_job import TUNING_FIELD_TO_ARGUMENT, refusal
from .analytics import HyperparameterTuningJobAnalytics
from . import _checks as checks
from .estimator import Estimator, name_from_base
from .exceptions import UnexpectedStatusException
from .parameter import CategoricalParameter, ContinuousParameter, IntegerParameter

STRATEGIES = ("Bayesian", "Random", "Grid", "Hyperband")
_ENDED = ("Completed", "Failed", "Stopped")


class WarmStartTypes(enum.Enum):
    IDENTICAL_DATA_AND_ALGORITHM = "IdenticalDataAndAlgorithm"
    TRANSFER_LEARNING = "TransferLearning"


class WarmStartConfig:
    """WarmStartConfig(warm_start_type, parents): the parent tuning jobs whose trials heft
    tune observes before its first suggestion."""

    def __init__(self, warm_start_type, parents=None):
        value = getattr(warm_start_type, "value", warm_start_type)
        if value not in [t.value for t in WarmStartTypes]:
            raise ValueError(f"WarmStartConfig: warm_start_type: expected IdenticalDataAndAlgorithm "
                             f"or TransferLearning, found {warm_start_type!r}")
        self.type = value
        self.parents = sorted(set(parents or []))
        if not self.parents:
            raise ValueError("WarmStartConfig: parents: expected at least one tuning job name")


class HyperbandStrategyConfig:
    def __init__(self, max_resource=None, min_resource=None):
        self.max_resource, self.min_resource = max_resource, min_resource


class StrategyConfig:
    def __init__(self, hyperband_strategy_config=None):
        self.hyperband_strategy_config = hyperband_strategy_config


class HyperparameterTuner:
    def __init__(self, estimator, objective_metric_name, hyperparameter_ranges,
                 metric_definitions=None, strategy="Bayesian", objective_type="Maximize",
                 max_jobs=None, max_parallel_jobs=1, base_tuning_job_name=None,
                 warm_start_config=None, strategy_config=None, early_stopping_type="Off",
                 random_seed=None, **kwargs):
        owner = "HyperparameterTuner"
        _refused.check(owner, _refused.TUNER, kwargs)
        if not isinstance(estimator, Estimator):
            raise ValueError(f"{owner}: estimator: expected a heft.estimator Estimator or "
                             f"PyTorch, found {type(estimator).__name__}")
        self.estimator = estimator
        self.sagemaker_session = estimator.sagemaker_session
        if not isinstance(objective_metric_name, str) or not objective_metric_name:
            raise ValueError(f"{owner}: objective_metric_name: expected a metric name, found "
                             f"{objective_metric_name!r}")
        self.objective_metric_name = objective_metric_name
        if not isinstance(hyperparameter_ranges, dict) or not hyperparameter_ranges:
            raise ValueError(f"{owner}: hyperparameter_ranges: expected a non-empty dict of name "
                             "-> ContinuousParameter, IntegerParameter or CategoricalParameter")
        for name, r in hyperparameter_ranges.items():
            if not isinstance(r, (ContinuousParameter, IntegerParameter, CategoricalParameter)):
                raise ValueError(f"{owner}: hyperparameter_ranges['{name}']: expected a "
                                 "ContinuousParameter, IntegerParameter or CategoricalParameter, "
                                 f"found {type(r).__name__}")
        self._hyperparameter_ranges = dict(hyperparameter_ranges)
        self.metric_definitions = list(metric_definitions or [])
        self._metrics = checks.metric_definitions(owner, metric_definitions)
        if strategy not in STRATEGIES:
            raise ValueError(f"{owner}: strategy: expected one of {', '.join(STRATEGIES)}, found "
                             f"{strategy!r}")
        self.strategy = strategy
        objective = str(objective_type).capitalize()
        if objective not in ("Maximize", "Minimize"):
            raise ValueError(f"{owner}: objective_type: expected Maximize or Minimize, found "
                             f"{objective_type!r}")
        self.objective_type = objective
        self.max_jobs, self.max_parallel_jobs = max_jobs, max_parallel_jobs
        if early_stopping_type not in ("Off", "Auto"):
            raise ValueError(f"{owner}: early_stopping_type: expected Off or Auto, found "
                             f"{early_stopping_type!r}")
        self.early_stopping_type = early_stopping_type
        if warm_start_config is not None and not isinstance(warm_start_config, WarmStartConfig):
            raise ValueError(f"{owner}: warm_start_config: expected a WarmStartConfig, found "
                             f"{type(warm_start_config).__name__}")
        if warm_start_config is not None and \
                warm_start_config.type == WarmStartTypes.TRANSFER_LEARNING.value:
            raise ValueError(f"{owner}: warm_start_config: TransferLearning is not supported by "
                             "heft: its warm start reuses parents' trials as observations of the "
                             "same problem (IdenticalDataAndAlgorithm)")
        self.warm_start_config = warm_start_config
        self.strategy_config = strategy_config
        if strategy_config is not None and (
                not isinstance(strategy_config, StrategyConfig) or strategy != "Hyperband"):
            raise ValueError(f"{owner}: strategy_config: expected a StrategyConfig with a "
                             "HyperbandStrategyConfig, with strategy='Hyperband'")
        self.random_seed = random_seed
        # A tuning's name is a job name with room for its trials' -NNN (fit() checks that).
        self.base_tuning_job_name = None if base_tuning_job_name is None else checks.job_name(
            owner, "base_tuning_job_name", base_tuning_job_name)
        self.latest_tuning_job = None
        self._current_job_name = None
        self._running = None

    @classmethod
    def attach(cls, tuning_job_name, sagemaker_session=None, estimator_cls=None):
        """A tuner bound to an existing tuning job that heft.estimator started (its spec and
        record under $HEFT_HOME/sdk/); best_training_job(), analytics(), describe() and wait()
        read the job database. A tuning started by `heft tune` directly is refused."""
        from .session import Session
        session = sagemaker_session or Session()
        home = session.heft_home
        d = _cli.describe(tuning_job_name, home)  # HeftCommandError when there is none
        if "trials" not in d:
            raise ValueError(f"HyperparameterTuner.attach: {tuning_job_name} is a training "
                             "job; use Estimator.attach")
        path = os.path.join(home, "sdk", d["name"] + ".tuning.yaml")
        if not os.path.isfile(path):
            raise ValueError(f"HyperparameterTuner.attach: {d['name']} was not started by "
                             f"heft.estimator (no {path}); heft describe {d['name']} shows it")
        with open(path) as f:
            spec = json.load(f)
        record = {}
        if os.path.isfile(path[:-len(".yaml")] + ".json"):
            with open(path[:-len(".yaml")] + ".json") as f:
                record = json.load(f)
        est_cls = estimator_cls or Estimator
        estimator = est_cls.__new__(est_cls)
        Estimator._restore(estimator, spec["training_job"], record, session)
        estimator.latest_training_job = None
        estimator._current_job_name = None
        ranges = {}
        for r in spec["hyperparameter_ranges"].get("continuous", []):
            ranges[r["name"]] = ContinuousParameter(r["min"], r["max"], r.get("scaling", "Auto"))
        for r in spec["hyperparameter_ranges"].get("integer", []):
            ranges[r["name"]] = IntegerParameter(r["min"], r["max"], r.get("scaling", "Auto"))
        for r in spec["hyperparameter_ranges"].get("categorical", []):
            ranges[r["name"]] = CategoricalParameter(r["values"])
        tuner = cls(estimator, spec["objective"]["metric"], ranges, strategy=spec["strategy"],
                    objective_type=spec["objective"]["type"], max_jobs=spec.get("max_jobs"),
                    max_parallel_jobs=spec["max_parallel_jobs"],
                    early_stopping_type=spec.get("early_stopping", "Off"),
                    random_seed=spec.get("random_seed"))
        tuner._current_job_name = tuner.latest_tuning_job = d["name"]
        return tuner

    def hyperparameter_ranges(self):
        return {k: r.tuning_range(k) for k, r in self._hyperparameter_ranges.items()}

    def tuning_spec(self, inputs=None, name=None):
        """The heft tuning spec (a dict) fit() writes: docs/tuning.md's fields."""
        ranges = {"continuous": [], "integer": [], "categorical": []}
        for name_, r in self._hyperparameter_ranges.items():
            ranges[r.kind].append(r.tuning_range(name_))
        training = self.estimator.job_spec(inputs)
        metrics = list(training.get("metric_definitions", []))
        for m in self._metrics:
            if m not in metrics:
                metrics.append(m)
        if metrics:
            training["metric_definitions"] = metrics
        spec = {"name": name, "objective": {"metric": self.objective_metric_name,
                                            "type": self.objective_type},
                "strategy": self.strategy, "max_parallel_jobs": self.max_parallel_jobs,
                "early_stopping": self.early_stopping_type,
                "hyperparameter_ranges": {k: v for k, v in ranges.items() if v},
                "training_job": training}
        if self.max_jobs is not None:
            spec["max_jobs"] = self.max_jobs
        elif self.strategy == "Grid":
            spec["max_jobs"] = _grid_size(self._hyperparameter_ranges)
        else:
            spec["max_jobs"] = 1  # the cloud SDK's default
        if self.random_seed is not None:
            spec["random_seed"] = self.random_seed
        if self.warm_start_config is not None:
            spec["warm_start"] = {"parents": self.warm_start_config.parents,
                                  "type": self.warm_start_config.type}
        hb = self.strategy_config.hyperband_strategy_config if self.strategy_config else None
        if hb is not None:
            spec["hyperband"] = {k: v for k, v in (("min_resource", hb.min_resource),
                                                   ("max_resource", hb.max_resource)) if v}
        return spec

    def fit(self, inputs=None, job_name=None, include_cls_metadata=False, estimator_kwargs=None,
            wait=True, **kwargs):
        """Runs `heft tune`; with `wait`, until it ends (showing its live table). `job_name`,
        or the name made from base_tuning_job_name, is a job name short enough for its trials'
        names (<name>-001, ...), checked before anything is written."""
        owner = "HyperparameterTuner.fit"
        if kwargs:
            raise TypeError(f"{owner}() got an unexpected keyword argument '{next(iter(kwargs))}'")
        _refused.check(owner, _refused.TUNER_FIT, {"include_cls_metadata": include_cls_metadata,
                                                   "estimator_kwargs": estimator_kwargs})
        home = self.sagemaker_session.heft_home
        spec = self.tuning_spec(inputs)
        # Trials are named <name>-001 ... <name>-<max_jobs>: each must be a job name too.
        digits = max(3, len(str(spec["max_jobs"]))) if _is_int(spec["max_jobs"]) else 3
        limit, why = checks.MAX_JOB_NAME - 1 - digits, f" (trials add -{'N' * digits})"
        if job_name is not None:
            name = checks.job_name(owner, "job_name", job_name, limit, why)
        else:
            base = self.base_tuning_job_name or self.estimator._base_name()
            argument = "base_tuning_job_name" if self.base_tuning_job_name else "base_job_name"
            name = name_from_base(checks.job_name(owner, argument, base), max_length=limit)
        spec["name"] = name
        sdk = _home.sdk_dir(home)
        path = _home.write_private(home, os.path.join(sdk, name + ".tuning.yaml"),
                                   _home.dump_spec(spec))
        _home.write_private(home, os.path.join(sdk, name + ".tuning.json"),
                            json.dumps(self.estimator._record(), indent=2))
        self._running = _cli.Running(["tune", path], home, self.estimator._cwd, wait,
                                     None if wait else os.path.join(sdk, name + ".tuning.out"))
        self._current_job_name = self.latest_tuning_job = name
        self._spec_path = path
        while not self._recorded():
            rc = self._running.poll()
            if rc is not None:
                self._running.wait()
                if rc == 2 or not self._recorded():
                    raise refusal(owner, self._running.stderr_text(), path, TUNING_FIELD_TO_ARGUMENT)
                break
            time.sleep(0.05)
        if wait:
            self.wait()

    def _recorded(self):
        return os.path.isfile(os.path.join(self.sagemaker_session.heft_home, "tunings",
                                           self._current_job_name, "tuning.json"))

    def _require(self, what):
        if self._current_job_name is None:
            raise ValueError(f"HyperparameterTuner.{what}: no tuning job yet: call fit() first")
        return self._current_job_name

    def wait(self):
        """Blocks until the tuning job ends; a Failed one raises UnexpectedStatusException."""
        name = self._require("wait")
        if self._running is not None:
            self._running.wait()
            self._running = None
        d = self._describe_raw()
        while d["status"] not in _ENDED:
            time.sleep(0.2)
            d = self._describe_raw()
        if d["status"] == "Failed":
            raise UnexpectedStatusException(
                f"Error for HyperParameterTuning job {name}: Failed. Reason: no trial produced "
                "an objective (heft describe " + name + ")",
                allowed_statuses=["Completed", "Stopped"], actual_status="Failed")

    def _describe_raw(self):
        return _cli.describe(self._require("describe"), self.sagemaker_session.heft_home)

    def describe(self):
        """DescribeHyperParameterTuningJob's fields that heft has."""
        d = self._describe_raw()
        out = {"HyperParameterTuningJobName": d["name"],
               "HyperParameterTuningJobStatus": d["status"],
               "HyperParameterTuningJobConfig": {
                   "Strategy": d["strategy"],
                   "HyperParameterTuningJobObjective": {"Type": d["objective"]["type"],
                                                        "MetricName": d["objective"]["metric"]},
                   "ResourceLimits": {"MaxNumberOfTrainingJobs": d["max_jobs"],
                                      "MaxParallelTrainingJobs": d["max_parallel_jobs"]}},
               "TrainingJobStatusCounters": dict(d.get("trial_counts", {})),
               "Heft": d}
        best = d.get("best_trial")
        if best:
            out["BestTrainingJob"] = {
                "TrainingJobName": best["name"], "TunedHyperParameters": best["hyperparameters"],
                "FinalHyperParameterTuningJobObjectiveMetric": {
                    "MetricName": d["objective"]["metric"], "Value": best["objective"]}}
        return out

    def best_training_job(self):
        """The name of the best trial (heft's best_trial: diverged trials never are)."""
        name = self._require("best_training_job")
        best = self._describe_raw().get("best_trial")
        if not best:
            raise Exception(f"Best training job not available for tuning job: {name}")
        return best["name"]

    def best_estimator(self, best_training_job=None):
        return type(self.estimator).attach(best_training_job or self.best_training_job(),
                                           sagemaker_session=self.sagemaker_session)

    def analytics(self):
        return HyperparameterTuningJobAnalytics(self._require("analytics"),
                                                self.sagemaker_session,
                                                self._hyperparameter_ranges)

    def deploy(self, *args, **kwargs):
        """Refused: heft trains and serves no endpoints."""
        raise ValueError("HyperparameterTuner.deploy: heft trains models and serves no "
                         "endpoints; best_estimator().model_data has the best model's files")

    def stop_tuning_job(self):
        _cli.run(["stop", self._require("stop_tuning_job"), "--wait"],
                 self.sagemaker_session.heft_home, timeout=600)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _grid_size(ranges):
    size = 1
    for r in ranges.values():
        if isinstance(r, CategoricalParameter):
            size *= len(r.values)
        elif isinstance(r, IntegerParameter):
            size *= int(r.max_value) - int(r.min_value) + 1
    return min(size, 10000)


__all__ = ["HyperparameterTuner", "WarmStartConfig", "WarmStartTypes", "StrategyConfig",
           "HyperbandStrategyConfig", "ContinuousParameter", "IntegerParameter",
           "CategoricalParameter"]
