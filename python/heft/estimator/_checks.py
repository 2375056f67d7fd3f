"""Checks of the SDK's arguments that heft maps: each error is a ValueError naming the
argument, what was expected and what was found."""

_SCALAR = (str, int, float, bool)


def check_int(owner, name, value, low, high):
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{owner}: {name}: expected an integer from {low} to {high}, "
                         f"found {value!r}")
    return value


def check_seconds(owner, name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{owner}: {name}: expected a number of seconds > 0, found {value!r}")
    return value


def hyperparameters(owner, hps):
    if hps is None:
        return {}
    if not isinstance(hps, dict):
        raise ValueError(f"{owner}: hyperparameters: expected a dict, found {type(hps).__name__}")
    out = {}
    for k, v in hps.items():
        if not isinstance(k, str):
            raise ValueError(f"{owner}: hyperparameters: expected string names, found {k!r}")
        if not isinstance(v, _SCALAR):
            raise ValueError(f"{owner}: hyperparameters.{k}: expected a number, string or "
                             f"boolean (heft passes them as --{k} VALUE and typed in SM_HPS), "
                             f"found {type(v).__name__}; encode it yourself (json.dumps)")
        out[k] = v
    return out


def metric_definitions(owner, defs, what="metric_definitions"):
    out = []
    for i, d in enumerate(defs or []):
        if not isinstance(d, dict) or set(d) != {"Name", "Regex"}:
            raise ValueError(f"{owner}: {what}[{i}]: expected {{'Name': ..., 'Regex': ...}}, "
                             f"found {d!r}")
        out.append({"name": d["Name"], "regex": d["Regex"]})
    return out


def processes_per_host(owner, given, distribution):
    mpi = distribution.get("mpi") if isinstance(distribution, dict) else None
    from_mpi = mpi.get("processes_per_host") if isinstance(mpi, dict) else None
    if given is not None and from_mpi is not None and given != from_mpi:
        raise ValueError(f"{owner}: processes_per_host={given} and distribution's "
                         f"mpi.processes_per_host={from_mpi} disagree; give one")
    value = given if given is not None else from_mpi
    return None if value is None else check_int(owner, "processes_per_host", value, 1, 1024)


def show_logs(owner, logs):
    if logs in (True, "All", "Training"):
        return True
    if logs in (False, None, "None"):
        return False
    raise ValueError(f"{owner}: logs={logs!r}: expected True, False, 'All' or 'None' (heft "
                     "has no rule jobs, so 'Rules' has nothing to show)")
