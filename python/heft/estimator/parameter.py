"""Hyperparameter ranges (sagemaker.parameter): ContinuousParameter, IntegerParameter,
CategoricalParameter, as heft tune's `hyperparameter_ranges` (docs/tuning.md)."""
import math

SCALING_TYPES = ("Auto", "Linear", "Logarithmic", "ReverseLogarithmic")


class ParameterRange:
    __all_types__ = ("Continuous", "Categorical", "Integer")

    def __init__(self, min_value, max_value, scaling_type="Auto"):
        kind = type(self).__name__
        for what, v in (("min_value", min_value), ("max_value", max_value)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"{kind}: {what}: expected a finite number, found {v!r}")
        if scaling_type not in SCALING_TYPES:
            raise ValueError(f"{kind}: scaling_type: expected one of {', '.join(SCALING_TYPES)}, "
                             f"found {scaling_type!r}")
        self.min_value, self.max_value, self.scaling_type = min_value, max_value, scaling_type

    def tuning_range(self, name):
        return {"name": name, "min": self.min_value, "max": self.max_value,
                "scaling": self.scaling_type}

    def cast(self, text):
        return float(text)


class ContinuousParameter(ParameterRange):
    kind = "continuous"


class IntegerParameter(ParameterRange):
    kind = "integer"

    def __init__(self, min_value, max_value, scaling_type="Auto"):
        super().__init__(min_value, max_value, scaling_type)
        if scaling_type == "ReverseLogarithmic":
            raise ValueError("IntegerParameter: scaling_type: ReverseLogarithmic is for "
                             "continuous ranges only (as the cloud service says)")

    def cast(self, text):
        return int(float(text))


class CategoricalParameter:
    """CategoricalParameter(values): a list of values (or one value), tried as strings."""
    kind = "categorical"

    def __init__(self, values):
        if isinstance(values, (list, tuple)):
            self.values = [v if isinstance(v, str) else _text(v) for v in values]
        else:
            self.values = [values if isinstance(values, str) else _text(values)]

    def tuning_range(self, name):
        return {"name": name, "values": list(self.values)}

    def cast(self, text):
        return text


def _text(v):
    import json
    return json.dumps(v)


__all__ = ["ParameterRange", "ContinuousParameter", "IntegerParameter", "CategoricalParameter"]
