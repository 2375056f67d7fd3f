# ctest-labels: multiproc
"""heft.torch.sagemaker (`import heft.torch.sagemaker as tsm`): the model-parallel library v2's
two lines on heft's strategies. Every configuration key has a test here: honoured keys by their
effect on 4 real ranks (tests/python/workers/tsm_worker.py under `heft run -n 4`, one run for
all cases), refused keys by their message, in this process (a key is refused before any group
is joined).

On 4 ranks, torchvision's VisionTransformer (vit_b_16's layout, tiny) under tsm.init +
tsm.transform + FSDP2 (fully_shard per encoder layer and the root over tsm.state.dp_mesh),
3 SGD steps with momentum on a global batch of 8 images: every step's data-averaged loss
within TOLERANCE (relative, fp32) of one process training the unsplit model on the whole batch,
at tensor 2 x data 2 (sharded 2), tensor 1 x data 4 (2 replicas x 2 shards) and tensor 2 x
data 2 (replicas only) with activation checkpointing."""
import json
import os
import re
import shutil
import tempfile
import unittest

import support

TOLERANCE = 1e-5
LAYERS = 2  # encoder layers of the worker's ViT
CONFIG = {"tensor_parallel_degree": 2, "hybrid_shard_degree": 2, "random_seed": 7}


class Ranks(unittest.TestCase):
    """One `heft run -n 4` of the worker; each test reads its case."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tsm-test-")
        env = support.clean_env(SM_HP_MP_PARAMETERS=json.dumps(CONFIG))
        r = support.heft_run(["-n", "4", "--", support.PYTHON, "-u",
                              support.worker("tsm_worker.py"), cls.tmp], timeout=240, env=env)
        cls.output = r.stdout + r.stderr
        cls.returncode = r.returncode
        cls.cases = {}
        for line in re.findall(r"^(?:\[rank 0\] )?CASE (.*)$", r.stdout, re.M):
            row = json.loads(line)
            cls.cases[row["case"]] = row

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def case(self, name):
        self.assertEqual(self.returncode, 0, self.output)
        self.assertIn(name, self.cases, self.output)
        return self.cases[name]

    def equivalent(self, row, what):
        print(f"{what}: losses {row['losses']}\n  one process {row['reference']}\n  largest "
              f"relative difference {row['worst']:.2e} (tolerance {TOLERANCE:g})")
        self.assertEqual(len(row["losses"]), 3)
        self.assertLessEqual(row["worst"], TOLERANCE, row)
        self.assertLess(row["losses"][-1], row["losses"][0])  # it trained

    def test_env_config_tensor_2_by_data_2_matches_one_process(self):
        row = self.case("env")
        self.equivalent(row, "tensor 2 x data 2 (SM_HP_MP_PARAMETERS)")
        self.assertFalse(row["before"])           # tsm.init made the process group itself
        self.assertEqual(row["backend"], "heft")
        # tensor_parallel_degree: heads and MLP split over 2 ranks, Megatron's count
        self.assertEqual(row["split"], {"heads": 2, "in_proj": [48, 32], "type": "HeadsAttention"})
        self.assertEqual(row["counts"], [[2 * LAYERS, 2 * LAYERS]] * 3)
        # hybrid_shard_degree 2 = the data world: mlp.0 (64 x 32) / tensor 2 / shard 2
        self.assertEqual(row["held"], [16, 32])
        for r, lay in enumerate(row["layouts"]):  # tensor groups {0,1} {2,3}; data {0,2} {1,3}
            self.assertEqual(lay["rank"], r)
            self.assertEqual(lay["world"], 4)
            self.assertEqual(lay["local_rank"], r)
            self.assertEqual(lay["tp"], [r % 2, 2, 2])
            self.assertEqual(lay["dp"], [r // 2, 2])
            self.assertEqual(lay["hybrid"], 2)
            self.assertEqual(lay["tp_ranks"], [r - r % 2, r - r % 2 + 1])
            self.assertEqual(lay["dp_ranks"], [r % 2, r % 2 + 2])
            self.assertEqual(lay["rep_ranks"], [0, 1, 2, 3])  # no replicas: one of the world
            self.assertEqual(lay["dp_mesh"], [[2], ["shard"], [r % 2, r % 2 + 2]])

    def test_random_seed_every_rank_builds_the_seeded_model(self):
        self.assertTrue(self.case("env")["seeded"])  # == torch.manual_seed(7); VisionTransformer

    def test_different_weights_are_refused_naming_random_seed(self):
        row = self.case("errors")
        for r in row["everyone"]:
            self.assertIn("the ranks built different weights ('conv_proj.weight'", r["different"])
            self.assertIn("random_seed", r["different"])
            self.assertTrue(r["rank0"])  # load_state_dict_from_rank0: rank 0's weights everywhere

    def test_json_file_hybrid_sharding_2_replicas_of_2_shards(self):
        row = self.case("file")
        self.equivalent(row, "tensor 1 x data 4, hybrid_shard_degree 2 (JSON file)")
        self.assertTrue(row["unchanged"])  # tensor_parallel_degree 1: transform leaves it be
        self.assertEqual(row["counts"], [[0, 0]] * 3)
        self.assertEqual(row["held"], [32, 32])  # 64 rows / shard 2
        for r, lay in enumerate(row["layouts"]):
            self.assertEqual(lay["dp"], [r, 4])
            self.assertEqual(lay["hybrid"], 2)
            self.assertEqual(lay["rep_ranks"], [0, 1] if r < 2 else [2, 3])
            self.assertEqual(lay["dp_mesh"], [[2, 2], ["replicate", "shard"], [0, 1, 2, 3]])

    def test_delayed_parameter_initialization_replays_only_this_ranks_slices(self):
        row = self.case("delayed")
        self.equivalent(row, "tensor 2 x data 2, the ViT under deferred_init")
        print(f"delayed_parameter_initialization: {row['held_bytes']} of {row['whole_bytes']} "
              f"parameter bytes held after transform, replay peak {row['peak']}")
        self.assertTrue(row["exact"])  # one process's values, through full_state_dict
        self.assertEqual(row["metas"], 0)
        self.assertLess(row["held_bytes"], 0.75 * row["whole_bytes"])
        self.assertLess(row["peak"], row["whole_bytes"])
        self.assertIn("set delayed_parameter_initialization: true", row["undeclared"])

    def test_activation_checkpointing_recomputes_blocks_with_replicas_only(self):
        row = self.case("checkpointing")
        self.equivalent(row, "tensor 2 x data 2, hybrid_shard_degree 1, activation_checkpointing")
        self.assertEqual(row["wrapped"], [f"encoder.layers.encoder_layer_{i}"
                                          for i in range(LAYERS)])
        # Recomputed in backward: each block's attention all-reduce runs again (the MLP's last
        # one is not needed for the gradient, so torch's checkpoint stops before it).
        self.assertEqual(row["counts"], [[3 * LAYERS, 2 * LAYERS]] * 3)
        saved, plain = row["saved_bytes"], self.case("env")["saved_bytes"]
        print(f"activation_checkpointing: {saved} bytes saved for backward a step, {plain} "
              "without")
        self.assertLess(saved, plain / 2)
        self.assertEqual(row["held"], [32, 32])  # hybrid_shard_degree 1: no sharding
        for r, lay in enumerate(row["layouts"]):
            self.assertEqual(lay["hybrid"], 1)
            self.assertEqual(lay["rep_ranks"], [r - r % 2, r - r % 2 + 1])
            self.assertEqual(lay["dp_mesh"], [[2, 1], ["replicate", "shard"],
                                              [r % 2, r % 2 + 2]])

    def test_degrees_that_do_not_fit_the_world_are_refused_by_name(self):
        row = self.case("errors")
        self.assertEqual(row["tp3"], "tsm.init: tensor_parallel_degree=3 does not divide the "
                                     "world of 4 ranks")
        self.assertIn("hybrid_shard_degree=3 does not divide the data-parallel world of 2 ranks "
                      "(world 4 / tensor_parallel_degree 2)", row["hybrid3"])
        self.assertIn("device='cuda' needs a GPU", row["gpu"])


class Refused(unittest.TestCase):
    """Keys heft refuses: a ValueError naming the key and why, before any group is joined."""

    def setUp(self):
        import heft.torch.sagemaker as tsm
        self.tsm = tsm

    def refused(self, config, *expected):
        with self.assertRaises(ValueError) as cm:
            self.tsm.init(config)
        for text in expected:
            self.assertIn(text, str(cm.exception))
        return str(cm.exception)

    def test_gpu_only_keys_say_they_need_a_gpu(self):
        for key, value in (("sm_activation_offloading", True), ("sm_activation_offloading", False),
                           ("activation_loading_horizon", 2), ("fsdp_cache_flush_warnings", True)):
            self.refused({key: value}, f"{key} is not supported: needs a GPU")

    def test_parallelism_heft_lacks_is_refused_above_1(self):
        self.refused({"context_parallel_degree": 2}, "context_parallel_degree=2 is not "
                     "supported: heft has no context parallelism")
        self.refused({"expert_parallel_degree": 4}, "expert_parallel_degree=4 is not "
                     "supported: heft has no expert parallelism")

    def test_values_meaning_what_heft_does_are_accepted(self):
        from heft.torch.sagemaker import _config
        values = _config.read({"context_parallel_degree": 1, "expert_parallel_degree": 1,
                               "allow_empty_shards": False})
        self.assertEqual(values, {"tensor_parallel_degree": 1, "hybrid_shard_degree": 0,
                                  "random_seed": None, "activation_checkpointing": False,
                                  "delayed_parameter_initialization": False})

    def test_allow_empty_shards_true_is_refused(self):
        self.refused({"allow_empty_shards": True}, "allow_empty_shards=True is not supported",
                     "divisible by tensor_parallel_degree")

    def test_delayed_parameter_initialization_takes_a_boolean(self):
        self.refused({"delayed_parameter_initialization": "yes"},
                     "delayed_parameter_initialization='yes': expected true or false")

    def test_unknown_key_names_the_nearest(self):
        self.refused({"tensor_paralel_degree": 2}, "unknown key 'tensor_paralel_degree'; did "
                     "you mean 'tensor_parallel_degree'?")
        self.refused({"hybrid_shard": 2}, "did you mean 'hybrid_shard_degree'?")

    def test_v1_key_points_to_heft_train(self):
        self.refused({"partitions": 2}, "'partitions' is a key of the model-parallel library v1",
                     "heft-train", "heft.torch.smp")

    def test_bad_values_name_the_key(self):
        self.refused({"tensor_parallel_degree": 0}, "tensor_parallel_degree=0: expected an "
                     "integer >= 1")
        self.refused({"random_seed": "7"}, "random_seed='7'")
        self.refused({"activation_checkpointing": "yes"}, "activation_checkpointing='yes'")

    def test_sources_file_and_environment(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "smp.json")
            with open(path, "w") as f:
                json.dump({"fsdp_cache_flush_warnings": False}, f)
            self.refused(path, f"config file {path!r}: fsdp_cache_flush_warnings")
            self.refused(os.path.join(tmp, "missing.json"), "cannot be read")
            with open(path, "w") as f:
                f.write("[1, 2]")
            self.refused(path, "holds a JSON list")
        old = os.environ.get("SM_HP_MP_PARAMETERS")
        try:
            os.environ["SM_HP_MP_PARAMETERS"] = '{"sm_activation_offloading": true}'
            self.refused(None, "SM_HP_MP_PARAMETERS: sm_activation_offloading")
            os.environ["SM_HP_MP_PARAMETERS"] = "{not json"
            self.refused(None, "SM_HP_MP_PARAMETERS is not JSON")
        finally:
            if old is None:
                os.environ.pop("SM_HP_MP_PARAMETERS", None)
            else:
                os.environ["SM_HP_MP_PARAMETERS"] = old

    def test_state_before_init_says_so(self):
        with self.assertRaises(RuntimeError) as cm:
            self.tsm.state.tp_rank
        self.assertIn("call tsm.init() first", str(cm.exception))
        with self.assertRaises(RuntimeError):
            self.tsm.transform(object())


if __name__ == "__main__":
    support.main_guard()
    unittest.main(verbosity=2)
