"""A tiny training job for the tuning tests (tests/tune/tune_cli_test.cc): takes the
hyperparameters --x (real), --layers (integer) and --optimizer (sgd, adam) and prints
`loss=L` with L = (x - 0.3)^2 + 0.1 (layers - 3)^2 + (0 if adam else 0.5), minimal (0.0) at
x = 0.3, layers = 3, adam. With --fail_above X it exits 1 when x > X (a failing trial); --sleep S runs S seconds first; --steps N reports N falling values (the last the loss).
With --diverge_above X a trial with x > X diverges: its N values rise (each above the one
before), and with --nan_above Y, one with x > Y reports nan last."""
import argparse
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--x", type=float, required=True)
ap.add_argument("--layers", type=int, default=3)
ap.add_argument("--optimizer", default="adam")
ap.add_argument("--fail_above", type=float, default=10.0)
ap.add_argument("--sleep", type=float, default=0.0, help="seconds to run before printing")
ap.add_argument("--steps", type=int, default=1, help="report the loss this many times")
ap.add_argument("--step_sleep", type=float, default=0.0, help="seconds between reports")
ap.add_argument("--diverge_above", type=float, default=10.0, help="x above this diverges")
ap.add_argument("--nan_above", type=float, default=10.0, help="x above this ends in nan")
a = ap.parse_args()
if a.x > a.fail_above:
    print(f"x={a.x} is above {a.fail_above}: failing on purpose", file=sys.stderr)
    sys.exit(1)
time.sleep(a.sleep)
loss = (a.x - 0.3) ** 2 + 0.1 * (a.layers - 3) ** 2 + (0.0 if a.optimizer == "adam" else 0.5)
# A training curve: the loss falls towards its final value, 1/step above it at each step.
for step in range(1, a.steps + 1):
    if step > 1:
        time.sleep(a.step_sleep)
    value = loss + (a.steps - step) / a.steps
    if a.x > a.diverge_above:
        value = loss + step  # rising
        if a.x > a.nan_above and step == a.steps:
            value = float("nan")
    print(f"step={step} loss={value:.6f}", flush=True)
