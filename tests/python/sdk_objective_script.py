"""A training script for the tuner tests (tests/python/estimator_test.py): no torch, so a trial
takes a fraction of a second. It prints score=<value> for hyperparameters --x (float), --n
(int) and --opt (a or b); the best is near x=0.3, opt=b, n=5. --fail makes it exit 3 with a
failure reason in SM_OUTPUT_DIR/failure, as a training toolkit script reports one."""
import argparse
import os
import sys

p = argparse.ArgumentParser()
# A one-letter hyperparameter comes as -x VALUE, as the training toolkit passes it.
p.add_argument("-x", "--x", type=float, default=0.5)
p.add_argument("-n", "--n", type=int, default=1)
p.add_argument("--opt", default="a")
p.add_argument("--fail", default="")
args, _ = p.parse_known_args()
if args.fail:
    with open(os.path.join(os.environ["SM_OUTPUT_DIR"], "failure"), "w") as f:
        f.write(f"bad input: {args.fail}\n")
    sys.exit(3)
score = -(args.x - 0.3) ** 2 + (0.1 if args.opt == "b" else 0.0) + 0.01 * args.n
print(f"score={score:.6f}", flush=True)
