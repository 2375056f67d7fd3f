"""A training script that uses the managed container's paths themselves, not the SM_*
variables: its hyperparameters from /opt/ml/input/config/hyperparameters.json, its data from
/opt/ml/input/data/train, its checkpoints to /opt/ml/checkpoints, its model to
/opt/ml/model/model.pt, what it saw to /opt/ml/output/data/seen-<RANK>.json
(sm_contract_test.py's /opt/ml case). It waits for the other job's workers (--peer_flag) so
that two jobs run at once."""
import json
import os
import sys
import time


def main():
    rank = int(os.environ["RANK"])
    flag = sys.argv[sys.argv.index("--peer_flag") + 1] if "--peer_flag" in sys.argv else ""
    with open("/opt/ml/input/config/hyperparameters.json") as f:
        hps = json.load(f)
    tag = json.loads(hps["job_tag"])
    with open(f"/opt/ml/checkpoints/x-{tag}-{rank}", "w") as f:
        f.write(tag)
    if rank == 0:
        with open("/opt/ml/model/model.pt", "w") as f:
            f.write(hps["job_tag"])
    if flag:  # both jobs' workers are writing now
        open(flag + "-" + tag, "w").close()
        for _ in range(500):
            if len([p for p in os.listdir(os.path.dirname(flag)) if p.startswith("flag-")]) >= 2:
                break
            time.sleep(0.02)
    seen = {"model": sorted(os.listdir("/opt/ml/model")),
            "checkpoints": sorted(os.listdir("/opt/ml/checkpoints")),
            "train": sorted(os.listdir("/opt/ml/input/data/train")),
            "ml": sorted(os.listdir("/opt/ml")), "opt": sorted(os.listdir("/opt"))}
    try:
        open("/opt/heft-stray", "w").close()
        seen["opt_writable"] = True
    except OSError:
        seen["opt_writable"] = False
    with open(f"/opt/ml/output/data/seen-{rank}.json", "w") as f:
        json.dump(seen, f)


if __name__ == "__main__":
    main()
