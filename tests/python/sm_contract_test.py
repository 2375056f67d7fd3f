# ctest-labels: multiproc
"""The cloud SDK's distribution dicts and the training toolkit's script contract, with real
`heft train` jobs (docs/jobs.md, "The cloud SDK's distribution dicts" and "The training
toolkit's contract"):

- a script written for the toolkit (workers/sm_contract_worker.py) sees in SM_TRAINING_ENV,
  SM_RESOURCE_CONFIG, SM_INPUT_DATA_CONFIG, the three files under SM_INPUT_CONFIG_DIR and its
  arguments what the toolkit would give it: the hosts, its host, the hyperparameters typed as
  given, the channels;
- every SDK distribution dict starts the job it should: the workers' environment (world,
  processes per host, the toolkit's framework parameters, HEFT_DISTRIBUTION, SM_HP_MP_PARAMETERS)
  and, with heft-train, the strategy that ran;
- every refused key exits 2 naming it, before anything starts;
- a script that uses /opt/ml's paths themselves (workers/opt_ml_worker.py) runs as written:
  two jobs at once, each finding its files in its own job folder afterwards, neither seeing
  the other's, the machine's /opt unchanged."""
import json
import os
import re
import subprocess
import tempfile
import unittest

import support

WORKER = support.worker("sm_contract_worker.py")
OPT_ML_WORKER = support.worker("opt_ml_worker.py")
HPS = "{epochs: 2, lr: 0.05, model: cnn, amp: true, b: 8, tag: '7'}"
TYPED = {"epochs": 2, "lr": 0.05, "model": "cnn", "amp": True, "b": 8, "tag": "7"}
# A tiny GPT: a heft-train job of 2 steps takes seconds.
GPT = ("{model: gpt, n_layer: 2, n_head: 2, n_embd: 32, block_size: 16, batch_size: 8, "
       "max_steps: 2, log_every: 1}")


def toolkit_decode(value):
    """How the toolkit reads a value of hyperparameters.json."""
    try:
        return json.loads(value)
    except ValueError:
        return value


class Job:
    def __init__(self, test, home, name, distribution, cluster, entry=None, hps=HPS, inputs=""):
        self.home, self.name = home, name
        entry = entry or "[%s, -u, %s]" % (support.PYTHON, WORKER)
        spec = os.path.join(home, name + ".yaml")
        with open(spec, "w") as f:
            f.write("name: %s\nentry_point: %s\nhyperparameters: %s\ncluster: %s\n"
                    "distribution: %s\n%s" % (name, entry, hps, cluster, distribution, inputs))
        self.run = subprocess.run([support.HEFT, "train", spec], capture_output=True, text=True,
                                  timeout=300, env=support.clean_env(HEFT_HOME=home))
        test.assertEqual(self.run.returncode, 0, self.run.stdout + self.run.stderr)

    def seen(self, rank):
        path = os.path.join(self.home, "jobs", self.name, "output", "data", "seen-%d.json" % rank)
        with open(path) as f:
            return json.load(f)


class SdkContract(unittest.TestCase):
    def test_a_toolkit_script_sees_what_the_toolkit_gives(self):
        with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as train, \
                tempfile.TemporaryDirectory() as test:
            open(os.path.join(train, "part-0.csv"), "w").close()
            job = Job(self, home, "contract", "{pytorchddp: {enabled: true}}",
                      "{instance_count: 2, processes_per_host: 2}",
                      inputs="inputs: {train: %s, test: %s}\n" % (train, test))
            for rank in range(4):
                s = job.seen(rank)
                t = s["training_env"]
                host = "algo-%d" % (rank // 2 + 1)
                self.assertEqual(t["hosts"], ["algo-1", "algo-2"])
                self.assertEqual(t["current_host"], host)
                self.assertEqual(t["is_master"], rank < 2)
                self.assertEqual(t["hyperparameters"], TYPED)
                self.assertEqual(t["channel_input_dirs"], {"train": train, "test": test})
                self.assertEqual(s["channel_files"], {"train": ["part-0.csv"], "test": []})
                self.assertEqual(t["additional_framework_parameters"],
                                 {"sagemaker_pytorch_ddp_enabled": True})
                self.assertEqual(t["job_name"], "contract")
                self.assertEqual(t["user_entry_point"], "sm_contract_worker.py")
                self.assertEqual(t["module_dir"], os.path.dirname(WORKER))
                self.assertEqual(t["num_gpus"], 0)
                # The resource config: the variable, the file and SM_TRAINING_ENV's agree.
                self.assertEqual(s["resource_config"]["current_host"], host)
                self.assertEqual(s["resource_config"]["hosts"], ["algo-1", "algo-2"])
                self.assertEqual(s["resourceconfig_file"], s["resource_config"])
                self.assertEqual(t["resource_config"], s["resource_config"])
                self.assertEqual(s["env"]["SM_NETWORK_INTERFACE_NAME"],
                                 s["resource_config"]["network_interface_name"])
                # The channels' config and the hyperparameters file, as the toolkit reads them.
                self.assertEqual(s["input_data_config"], s["inputdataconfig_file"])
                self.assertEqual(sorted(s["input_data_config"]), ["test", "train"])
                self.assertEqual(s["input_data_config"]["train"]["TrainingInputMode"], "File")
                # The toolkit splits sagemaker_* off as framework parameters.
                decoded = {k: toolkit_decode(v) for k, v in s["hyperparameters_file"].items()}
                self.assertEqual({k: v for k, v in decoded.items()
                                  if not k.startswith("sagemaker_")}, TYPED)
                self.assertEqual({k: v for k, v in decoded.items() if k.startswith("sagemaker_")},
                                 t["additional_framework_parameters"])
                # The arguments, as argparse reads them.
                self.assertEqual(s["args"], TYPED)
                self.assertEqual(s["unknown_args"], [])
                self.assertEqual(json.loads(s["env"]["SM_USER_ARGS"]),
                                 ["--amp", "True", "--b", "8", "--epochs", "2", "--lr", "0.05",
                                  "--model", "cnn", "--tag", "7"])
                self.assertEqual(s["env"]["SM_LOG_LEVEL"], "20")
                self.assertTrue(os.path.isdir(s["env"]["SM_OUTPUT_INTERMEDIATE_DIR"]))
                self.assertEqual(s["env"]["SM_MODULE_DIR"], os.path.dirname(WORKER))

    def test_a_script_using_opt_ml_paths_runs_as_written_two_jobs_at_once(self):
        if not os.path.isdir("/opt"):
            self.skipTest("this machine has no /opt")
        opt_before = sorted(os.listdir("/opt"))
        with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as train, \
                tempfile.TemporaryDirectory() as flags:
            open(os.path.join(train, "part-0.csv"), "w").close()
            procs = {}
            for tag in ("a", "b"):
                spec = os.path.join(home, tag + ".yaml")
                with open(spec, "w") as f:
                    f.write("name: optml-%s\nentry_point: [%s, -u, %s]\n"
                            "hyperparameters: {job_tag: %s, peer_flag: %s}\n"
                            "cluster: {instance_count: 1, processes_per_host: 2}\n"
                            "inputs: {train: %s}\n"
                            % (tag, support.PYTHON, OPT_ML_WORKER, tag,
                               os.path.join(flags, "flag"), train))
                procs[tag] = subprocess.Popen([support.HEFT, "train", spec], text=True,
                                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                              env=support.clean_env(HEFT_HOME=home))
            for tag, p in procs.items():
                out, _ = p.communicate(timeout=300)
                self.assertEqual(p.returncode, 0, out)
            for tag in ("a", "b"):
                root = os.path.join(home, "jobs", "optml-" + tag)
                with open(os.path.join(root, "model", "model.pt")) as f:
                    self.assertEqual(f.read(), '"%s"' % tag)  # hyperparameters.json: JSON strings
                self.assertEqual(sorted(os.listdir(os.path.join(root, "checkpoints"))),
                                 ["x-%s-0" % tag, "x-%s-1" % tag])
                for rank in (0, 1):
                    with open(os.path.join(root, "output", "data", "seen-%d.json" % rank)) as f:
                        s = json.load(f)
                    # Its own job's files only (rank 0's model and its partner's checkpoint
                    # may or may not be there yet), none of the other job's.
                    self.assertIn("x-%s-%d" % (tag, rank), s["checkpoints"])
                    self.assertTrue(all(c.startswith("x-%s-" % tag) for c in s["checkpoints"]), s)
                    self.assertLessEqual(set(s["model"]), {"model.pt"})
                    self.assertEqual(s["train"], ["part-0.csv"])
                    self.assertEqual(s["ml"], ["checkpoints", "input", "local_checkpoints",
                                               "model", "output"])
                    self.assertEqual(s["opt"], sorted(opt_before + ["ml"]))
                    self.assertFalse(s["opt_writable"])
            self.assertEqual(sorted(os.listdir(flags)), ["flag-a", "flag-b"])  # at once
        self.assertEqual(sorted(os.listdir("/opt")), opt_before)

    def test_every_sdk_dict_starts_its_job(self):
        cases = [
            ("smddp", "{smdistributed: {dataparallel: {enabled: true}}}", 1,
             {"sagemaker_distributed_dataparallel_enabled": True,
              "sagemaker_distributed_dataparallel_custom_mpi_options": ""},
             {"dataparallel": {"enabled": True}}),
            ("smp", "{smdistributed: {modelparallel: {enabled: true, parameters: "
                    "{pipeline_parallel_degree: 2, ddp: true}}}, mpi: {enabled: true, "
                    "processes_per_host: 2}}", 2,
             {"sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 2,
              "sagemaker_mpi_custom_mpi_options": ""}, None),
            ("torchdist", "{torch_distributed: {enabled: true}}", 1,
             {"sagemaker_torch_distributed_enabled": True}, {"dataparallel": {"enabled": True}}),
            ("pytorchddp", "{pytorchddp: {enabled: true}}", 1,
             {"sagemaker_pytorch_ddp_enabled": True}, {"dataparallel": {"enabled": True}}),
            ("mpi", "{mpi: {enabled: true, processes_per_host: 2}}", 2,
             {"sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 2,
              "sagemaker_mpi_custom_mpi_options": ""}, {}),
        ]
        with tempfile.TemporaryDirectory() as home:
            for name, distribution, ppn, framework, heft_form in cases:
                with self.subTest(name):
                    job = Job(self, home, name, distribution, "{instance_count: 2}")
                    for rank in range(2 * ppn):
                        s = job.seen(rank)
                        self.assertEqual(s["env"]["WORLD_SIZE"], str(2 * ppn))
                        self.assertEqual(s["env"]["LOCAL_WORLD_SIZE"], str(ppn))
                        t = s["training_env"]
                        self.assertEqual(t["additional_framework_parameters"], framework)
                        self.assertEqual(t["distribution_hosts"], ["algo-1", "algo-2"])
                        self.assertEqual(t["is_modelparallel_enabled"], name == "smp")
                        d = json.loads(s["env"]["HEFT_DISTRIBUTION"])
                        if heft_form is not None:
                            self.assertEqual(d, heft_form)
                        else:
                            self.assertEqual(d["modelparallel"]["parameters"]["partitions"], 2)
                            self.assertEqual(json.loads(s["env"]["SM_HP_MP_PARAMETERS"]),
                                             {"pipeline_parallel_degree": 2, "ddp": True})

    def test_each_dict_runs_its_strategy_in_heft_train(self):
        cases = [
            ("pytorchddp", "{pytorchddp: {enabled: true}}", None),
            ("smp", "{smdistributed: {modelparallel: {enabled: true, parameters: "
                    "{pipeline_parallel_degree: 2, microbatches: 2, ddp: true}}}, "
                    "mpi: {enabled: true, processes_per_host: 2}}",
             r"strategy: pipeline \(2 stages, interleaved, 2 micro-batches"),
            ("smp-v2", "{torch_distributed: {enabled: true}, smdistributed: {modelparallel: "
                       "{enabled: true, parameters: {hybrid_shard_degree: 2}}}}",
             r"strategy: sharded_data_parallel \(shard 2"),
        ]
        with tempfile.TemporaryDirectory() as home:
            for name, distribution, strategy in cases:
                with self.subTest(name):
                    job = Job(self, home, name, distribution,
                              "{instance_count: 1, processes_per_host: 2}"
                              if name != "smp" else "{instance_count: 1}",
                              entry="heft-train", hps=GPT)
                    params = re.findall(r"memory: rank=\d params_bytes=(\d+)", job.run.stdout)
                    self.assertEqual(len(params), 2, job.run.stdout)
                    if strategy is None:  # data parallel: a whole replica on each rank
                        self.assertNotIn("strategy:", job.run.stdout)
                        self.assertEqual(params[0], params[1])
                        replica = int(params[0])
                        print(name + ": data parallel, params_bytes=%s on both ranks" % params[0])
                        continue
                    self.assertRegex(job.run.stdout, strategy)
                    if name == "smp-v2":  # sharded over 2: half the replica on each rank
                        self.assertLess(int(params[0]), replica)
                    print(name + ": " + re.search(r"strategy: .*", job.run.stdout)[0])

    def test_every_refused_key_exits_2_naming_it(self):
        smp = ("{smdistributed: {modelparallel: {enabled: true, parameters: {%s: 2}}}, "
               "mpi: {enabled: true, processes_per_host: 2}}")
        refused = ["context_parallel_degree", "expert_parallel_degree", "ddp_port",
                   "ddp_dist_backend", "horovod", "contiguous", "fp16", "fp16_params",
                   "shard_optimizer_state", "prescaled_batch", "skip_tracing",
                   "deterministic_server", "offload_activations", "sm_activation_offloading",
                   "activation_loading_horizon",
                   "sdp_reduce_bucket_size", "sdp_param_persistence_threshold",
                   "sdp_max_live_parameters", "sdp_hierarchical_allgather",
                   "sdp_gradient_clipping", "fsdp_cache_flush_warnings", "allow_empty_shards"]
        cases = [(smp % key, "parameters." + key) for key in refused] + [
            ("{smdistributed: {dataparallel: {enabled: true, custom_mpi_options: -v}}}",
             "distribution.smdistributed.dataparallel.custom_mpi_options"),
            ("{mpi: {enabled: true, custom_mpi_options: -v}}", "distribution.mpi.custom_mpi_options"),
            ("{modelparallel: {enabled: true, parameters: {partitions: 2, ddp: false}}, "
             "mpi: {enabled: true, processes_per_host: 4}}", "parameters.ddp"),
            ("{modelparallel: {enabled: false, parameters: {partitions: 2}}}",
             "distribution.modelparallel.parameters"),
            ("{pytorchdp: {enabled: true}}", "distribution.pytorchdp"),
        ]
        with tempfile.TemporaryDirectory() as home:
            spec = os.path.join(home, "s.yaml")
            for distribution, field in cases:
                with self.subTest(field):
                    with open(spec, "w") as f:
                        f.write("name: refused\nentry_point: [%s, %s]\ndistribution: %s\n"
                                % (support.PYTHON, WORKER, distribution))
                    r = subprocess.run([support.HEFT, "train", spec], capture_output=True,
                                       text=True, timeout=60, env=support.clean_env(HEFT_HOME=home))
                    self.assertEqual(r.returncode, 2, r.stderr)
                    self.assertIn(field + ":", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(home, "jobs", "refused")))
            # random_seed and delayed_parameter_initialization are the script's
            # (heft.torch.sagemaker's tsm.init reads them from SM_HP_MP_PARAMETERS): accepted
            # for a script, refused by name for heft-train.
            for key, why in (("random_seed", "use heft-train's seed hyperparameter"),
                             ("delayed_parameter_initialization",
                              "heft-train builds each rank's model in full")):
                for entry, code in (("[%s, %s]" % (support.PYTHON, WORKER), 0),
                                    ("heft-train", 2)):
                    with self.subTest(key=key, entry=entry):
                        with open(spec, "w") as f:
                            f.write("name: seeded\nentry_point: %s\ndistribution: %s\n"
                                    % (entry, smp % key))
                        r = subprocess.run([support.HEFT, "train", spec, "--print-spec"],
                                           capture_output=True, text=True, timeout=60,
                                           env=support.clean_env(HEFT_HOME=home))
                        self.assertEqual(r.returncode, code, r.stderr)
                        if code:
                            self.assertIn(f"parameters.{key}: not supported by heft-train: "
                                          + why, r.stderr)

    def test_print_spec_shows_the_normalized_spec(self):
        with tempfile.TemporaryDirectory() as home:
            spec = os.path.join(home, "s.yaml")
            with open(spec, "w") as f:
                f.write("name: shown\nentry_point: heft-train\ncluster: {instance_count: 2}\n"
                        "distribution: {smdistributed: {modelparallel: {enabled: true, "
                        "parameters: {pipeline_parallel_degree: 2, ddp: true}}}, "
                        "mpi: {enabled: true, processes_per_host: 2}}\n")
            r = subprocess.run([support.HEFT, "train", spec, "--print-spec"], capture_output=True,
                               text=True, timeout=60, env=support.clean_env(HEFT_HOME=home))
            self.assertEqual(r.returncode, 0, r.stderr)
            shown = json.loads(r.stdout)
            self.assertEqual(shown["cluster"]["processes_per_host"], 2)
            self.assertEqual(set(shown["distribution"]), {"modelparallel"})
            self.assertEqual(shown["distribution"]["modelparallel"]["parameters"]["partitions"], 2)
            self.assertTrue(shown["distribution"]["modelparallel"]["parameters"]["ddp"])
            self.assertFalse(os.path.exists(os.path.join(home, "heft.db")))  # nothing recorded


if __name__ == "__main__":
    support.main_guard()
    unittest.main(verbosity=2)
