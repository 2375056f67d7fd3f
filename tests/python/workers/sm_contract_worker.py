"""A training script written for the cloud training toolkit, unchanged: it reads its
hyperparameters from the command line (argparse, as the toolkit passes them), and its world
from SM_TRAINING_ENV, SM_RESOURCE_CONFIG, SM_INPUT_DATA_CONFIG and the files under
SM_INPUT_CONFIG_DIR. It writes what it saw to SM_OUTPUT_DATA_DIR/seen-<RANK>.json for
sm_contract_test.py to compare with what the toolkit would give."""
import argparse
import json
import os


def read_json(name):
    with open(os.path.join(os.environ["SM_INPUT_CONFIG_DIR"], name)) as f:
        return json.load(f)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--lr", type=float)
    parser.add_argument("--model", type=str)
    parser.add_argument("--amp", type=lambda s: {"True": True, "False": False}[s])
    parser.add_argument("--b", type=int)
    parser.add_argument("--tag", type=str)
    args, unknown = parser.parse_known_args()
    env = os.environ
    seen = {
        "args": vars(args),
        "unknown_args": unknown,
        "training_env": json.loads(env["SM_TRAINING_ENV"]),
        "resource_config": json.loads(env["SM_RESOURCE_CONFIG"]),
        "input_data_config": json.loads(env["SM_INPUT_DATA_CONFIG"]),
        "hyperparameters_file": read_json("hyperparameters.json"),
        "resourceconfig_file": read_json("resourceconfig.json"),
        "inputdataconfig_file": read_json("inputdataconfig.json"),
        "channel_files": {c: sorted(os.listdir(d)) for c, d in
                          json.loads(env["SM_TRAINING_ENV"])["channel_input_dirs"].items()},
        "env": {k: v for k, v in env.items()
                if k.startswith(("SM_", "HEFT_DISTRIBUTION", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                 "RANK", "GROUP_RANK"))},
    }
    out = os.path.join(env["SM_OUTPUT_DATA_DIR"], "seen-%s.json" % env["RANK"])
    with open(out, "w") as f:
        json.dump(seen, f)


if __name__ == "__main__":
    main()
