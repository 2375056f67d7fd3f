"""heft.estimator: the cloud SDK's estimator and tuner (SageMaker Python SDK v2 names and
signatures) over `heft train` and `heft tune` and heft's job database. No cloud calls.

A driver script written for the SDK changes its imports:

    import heft.estimator as sagemaker                  # was: import sagemaker
    from heft.estimator.pytorch import PyTorch          # was: from sagemaker.pytorch import PyTorch
    from heft.estimator.tuner import HyperparameterTuner, ContinuousParameter

What maps, what is refused and why: docs/porting.md. The `heft` executable is found beside
the package in a build tree, in an installed prefix, on PATH, or at $HEFT_BIN.
"""
from . import (analytics, estimator, exceptions, inputs, parameter, pytorch, session,
               tuner)  # the SDK's module names: sagemaker.pytorch, sagemaker.tuner, ...
from .analytics import HyperparameterTuningJobAnalytics, TrainingJobAnalytics
from .estimator import Estimator
from .exceptions import UnexpectedStatusException
from .inputs import TrainingInput
from .parameter import CategoricalParameter, ContinuousParameter, IntegerParameter
from .pytorch import PyTorch
from .session import LocalSession, Session, get_execution_role
from .tuner import (HyperbandStrategyConfig, HyperparameterTuner, StrategyConfig,
                    WarmStartConfig, WarmStartTypes)

__all__ = ["Estimator", "PyTorch", "HyperparameterTuner", "ContinuousParameter",
           "IntegerParameter", "CategoricalParameter", "WarmStartConfig", "WarmStartTypes",
           "StrategyConfig", "HyperbandStrategyConfig", "Session", "LocalSession",
           "get_execution_role", "TrainingInput", "HyperparameterTuningJobAnalytics",
           "TrainingJobAnalytics", "UnexpectedStatusException", "analytics", "estimator",
           "exceptions", "inputs", "parameter", "pytorch", "session", "tuner"]
