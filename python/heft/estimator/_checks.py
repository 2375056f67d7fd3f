"""Checks of the SDK's arguments that heft maps: each error is a ValueError naming the
argument, what was expected and what was found."""
import re

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


# heft's job name (src/heft/job/spec/spec.cc is_job_name): what `heft train` accepts and what
# every file the SDK keeps is named after, so it is checked before any of them is written.
MAX_JOB_NAME = 63
_JOB_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?")
_SHOWN = 80  # characters of a refused name shown in the message


def _found(value):
    if isinstance(value, str) and len(value) > _SHOWN:
        return f"{value[:_SHOWN]!r}... ({len(value)} characters)"
    return repr(value)


def job_name(owner, name, value, max_length=MAX_JOB_NAME, why=""):
    """`value` when it is a job name: 1 to max_length letters, digits and '-', not starting or
    ending with '-' (so no '/', '.', whitespace or NUL); else a ValueError naming the argument
    `name`, in heft train's words. `why` follows the limit in the message."""
    if not (isinstance(value, str) and 0 < len(value) <= max_length
            and _JOB_NAME.fullmatch(value)):
        raise ValueError(f"{owner}: {name}: expected letters, digits and '-' (not first or "
                         f"last), at most {max_length} characters{why}, found {_found(value)}")
    return value
