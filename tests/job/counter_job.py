# A stand-in for a training job that checkpoints, for the supervisor's tests: each rank
# counts steps 1..--steps, folding each into a value, and saves {step, value} to
# $SM_CHECKPOINT_DIR/rank-R.json atomically after every step (and on SIGTERM, then exits 0,
# as a trainer does when its instance is reclaimed). A restarted rank resumes from its file,
# so any number of interruptions ends with the value of an uninterrupted run.
import argparse
import json
import os
import signal
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--sleep", type=float, default=0.05)
args, _ = parser.parse_known_args()

rank = int(os.environ["RANK"])
path = os.path.join(os.environ["SM_CHECKPOINT_DIR"], "rank-%d.json" % rank)
state = {"step": 0, "value": 1}
if os.path.exists(path):
    with open(path) as f:
        state = json.load(f)
    print("resumed step=%d restart=%s" % (state["step"], os.environ["TORCHELASTIC_RESTART_COUNT"]),
          flush=True)


def save():
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


stopping = False


def on_sigterm(signum, frame):
    global stopping
    stopping = True


signal.signal(signal.SIGTERM, on_sigterm)
while state["step"] < args.steps:
    if stopping:
        save()
        print("checkpointed step=%d on SIGTERM" % state["step"], flush=True)
        sys.exit(0)
    time.sleep(args.sleep)
    state["step"] += 1
    state["value"] = (state["value"] * 31 + state["step"]) % 1000003
    save()
    print("step=%d value=%d" % (state["step"], state["value"]), flush=True)
print("final: step=%d value=%d" % (state["step"], state["value"]), flush=True)
