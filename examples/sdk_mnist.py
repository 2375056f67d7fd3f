#!/usr/bin/env python3
"""A driver script in the cloud SDK's style, run on heft: a PyTorch estimator of 2 instances x
2 processes trains examples/pytorch_ddp.py (an ordinary torchrun-style DDP script) on
Fashion-MNIST, then a Bayesian tuner searches its learning rate and momentum. Written for the
SDK, it changes its imports only (the `was:` comments); the processes on each host come from
the SDK's `mpi` distribution dict. docs/porting.md walks through it.

    .venv/bin/python examples/sdk_mnist.py           # about 3 minutes
    .venv/bin/python examples/sdk_mnist.py --quick   # a smoke run

Jobs go to $HEFT_HOME (default ~/.heft): `heft jobs`, `heft tunings`, `heft describe NAME`.
"""
import argparse
import os

import heft.estimator as sagemaker                            # was: import sagemaker
from heft.estimator.pytorch import PyTorch                    # was: from sagemaker.pytorch import PyTorch
from heft.estimator.tuner import (ContinuousParameter,        # was: from sagemaker.tuner import ...
                                  HyperparameterTuner)

HERE = os.path.dirname(os.path.abspath(__file__))
METRICS = [{"Name": "train:loss", "Regex": r"\bloss=([0-9.eE+-]+)"},
           {"Name": "test:acc", "Regex": r"test_acc=([0-9.eE+-]+)"}]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a few steps and 2 trials")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = ap.parse_args()
    limit, trials = (640, 2) if args.quick else (6400, 4)

    session = sagemaker.Session()
    role = sagemaker.get_execution_role()          # accepted, unused: heft runs as you
    inputs = {"train": "file://" + args.data}      # s3:// is refused: heft reads local files

    estimator = PyTorch(
        entry_point="pytorch_ddp.py", source_dir=HERE, role=role,
        framework_version="1.13", py_version="py3",
        instance_count=2, instance_type="ml.c5.2xlarge",   # recorded; the workers run here
        distribution={"mpi": {"enabled": True, "processes_per_host": 2}},
        hyperparameters={"epochs": 1, "batch_size": 64, "lr": 0.05, "momentum": 0.9,
                         "limit": limit, "log_every": 20},
        metric_definitions=METRICS, environment={"OMP_NUM_THREADS": "1"},
        max_run=1800, base_job_name="sdk-mnist", sagemaker_session=session)
    estimator.fit(inputs)

    job = estimator.latest_training_job.describe()
    final = {m["MetricName"]: m["Value"] for m in job["FinalMetricDataList"]}
    print(f"training job {job['TrainingJobName']}: {job['TrainingJobStatus']}, "
          f"billable {job['BillableTimeInSeconds']:.1f} s, test:acc {final.get('test:acc')}")
    print("  " + " -> ".join(t["Status"] for t in job["SecondaryStatusTransitions"]))
    print(f"  model: {estimator.model_data}")

    # Tuning: trials of one instance x 2 processes, 2 at a time.
    trial_estimator = PyTorch(
        entry_point="pytorch_ddp.py", source_dir=HERE, role=role, framework_version="1.13",
        py_version="py3", instance_count=1, instance_type="ml.c5.2xlarge",
        distribution={"mpi": {"enabled": True, "processes_per_host": 2}},
        hyperparameters={"epochs": 1, "batch_size": 64, "limit": limit, "log_every": 20},
        metric_definitions=METRICS, environment={"OMP_NUM_THREADS": "1"},
        max_run=1800, sagemaker_session=session)
    tuner = HyperparameterTuner(
        trial_estimator, objective_metric_name="test:acc", objective_type="Maximize",
        hyperparameter_ranges={"lr": ContinuousParameter(0.005, 0.2, "Logarithmic"),
                               "momentum": ContinuousParameter(0.5, 0.95)},
        strategy="Bayesian", max_jobs=trials, max_parallel_jobs=2, random_seed=1,
        base_tuning_job_name="sdk-mnist-tune")
    tuner.fit(inputs)
    best = tuner.best_training_job()
    print(f"tuning job {tuner.latest_tuning_job}: best training job {best}")
    frame = tuner.analytics().dataframe()
    rows = frame.to_dict("records") if hasattr(frame, "to_dict") else frame  # pandas or not
    for row in sorted(rows, key=lambda r: -(r["FinalObjectiveValue"] or 0.0)):
        print(f"  {row['TrainingJobName']}  {row['TrainingJobStatus']}  "
              f"test:acc={row['FinalObjectiveValue']}  lr={row['lr']:.4g} "
              f"momentum={row['momentum']:.3f}")


if __name__ == "__main__":
    main()
