# ctest-labels: multiproc
"""heft.torch.parallel on models nobody on this team wrote: torchvision's (Debian's
python3-torchvision 0.14). One spawn of 2 real ranks on the heft backend; every case trains a
few steps on the same global batch as one process running the unwrapped model and must equal
it within a stated tolerance (the largest difference is printed):

- ShardedDataParallel over resnet18(num_classes=10), 2 ranks x 2 images of 3x32x32, 3 SGD
  (momentum) steps: with its BatchNorm in eval mode (batch statistics differ by construction
  under data parallelism: each rank normalises by its own images, as under torch's DDP), and
  with GroupNorm (norm_layer=, per sample) in train mode, and in bf16 (its output at the
  start one process's in bf16, the BatchNorms in fp32; losses within 5e-2 of fp32's), and
  built under deferred_init (exactly one process's initial state); and over torchvision's
  VisionTransformer with units=[nn.Linear] (an nn.MultiheadAttention's out_proj, whose
  weight the attention reads without calling it, must not become a unit). The full
  state_dict (parameters and the BatchNorm buffers), a checkpoint's load_full_state_dict and
  a load_checkpoint into a fresh wrapper equal the one-process model;
- Pipeline over resnet18 as an nn.Sequential of its children (conv1 .. fc, a Flatten before
  fc), 2 stages, partition="auto" (profiles a layer that is an in-place ReLU) and
  partition=[2] (stage 1 begins with that ReLU, on the received activation), 4 micro-batches;
  and over torchvision's VisionTransformer cut into a sequence (patches, class token and
  positions, the encoder blocks, the norm, the class token's row, the head);
- tensor_parallel at tensor 2 over torchvision's VisionTransformer: its MLPBlocks' nn.Linear
  pairs colwise/rowwise with the nn.MultiheadAttention whole, and with the attention split
  by heads too ("heads": in_proj's q, k, v rows of the rank's heads, out_proj rowwise); the
  counters show heft's layers ran; "heads" on torch's nn.MultiheadAttention in its other
  forms (sequence first, cross-attention, masks, per-head weights) gives the unsplit
  module's outputs, weights and input gradients (absolute 1e-5). Planning the attention or
  its out_proj as an nn.Linear is refused with a message naming the module and 'heads';
- on 4 ranks, pipeline 2 x tensor 2 over the ViT as a sequence with that plan by layer
  index: losses, evaluate and the checkpoint's full state equal one process; and tensor 2 x
  sharded 2 (tensor_parallel, then ShardedDataParallel over the mesh with small units): the
  losses equal one process's, and no unit is made of the split attention's out_proj.

Skipped (exit 77) without python3-torchvision. This file is also the worker
(HEFT_TV_WORKER=1; rank 0 prints `case ` JSON lines)."""
import json
import os
import sys
import tempfile
import unittest

import support
from torchvision_cases import VIT


def worker():
    import torch.distributed as dist
    import heft.torch  # noqa: F401  (registers the backend)
    import torch.nn as nn
    from heft.torch.parallel import DeviceMesh
    from torchvision_cases import (VIT_MLP_PLAN, VIT_PLAN, attention_forms, deferred_case,
                                   pipeline_case, pipeline_tensor_case, resnet,
                                   resnet_sequence, sharded_case, tensor_case,
                                   tensor_sharded_case, vit, vit_sequence)
    dist.init_process_group("heft", init_method="env://")
    if dist.get_world_size() == 4:
        for row in (pipeline_tensor_case(DeviceMesh(pipeline=2, tensor=2)),
                    tensor_sharded_case(DeviceMesh(tensor=2, sharded=2))):
            if dist.get_rank() == 0:
                print("case " + json.dumps(row), flush=True)
        dist.destroy_process_group()
        return
    stages, tensors = DeviceMesh(pipeline=2), DeviceMesh(tensor=2)
    cases = [lambda: sharded_case("resnet18 batch", lambda: resnet("batch")),
             lambda: sharded_case("resnet18 group", lambda: resnet("group")),
             lambda: sharded_case("vit linear units", vit, units=[nn.Linear]),
             lambda: sharded_case("resnet18 batch bf16", lambda: resnet("batch"), mixed="bf16"),
             deferred_case,
             lambda: pipeline_case("resnet18", resnet_sequence, "auto", stages),
             lambda: pipeline_case("resnet18", resnet_sequence, [2], stages),
             lambda: pipeline_case("vit", lambda: vit_sequence()[0], "auto", stages),
             lambda: tensor_case(tensors, "MLPs", VIT_MLP_PLAN),
             lambda: tensor_case(tensors, "MLPs and heads", VIT_PLAN),
             lambda: attention_forms(tensors)]
    only = os.environ.get("HEFT_TV_ONLY")  # e.g. "2,3": those cases alone (while debugging)
    for i, case in enumerate(cases):
        if only and str(i) not in only.split(","):
            continue
        row = case()
        if dist.get_rank() == 0:
            print("case " + json.dumps(row), flush=True)
    dist.destroy_process_group()


class TorchvisionModels(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with tempfile.TemporaryDirectory() as directory:
            cls.results = support.run_ranks(
                2, [support.PYTHON, "-u", os.path.abspath(__file__)], timeout=240,
                env_of_rank=lambda r: {"HEFT_TV_WORKER": "1", "HEFT_TV_DIR": directory})
        cls.text = support.describe(cls.results)
        cls.cases = {}
        for line in cls.results[0][1].splitlines():
            if line.startswith("case "):
                row = json.loads(line[5:])
                print(json.dumps(row))
                cls.cases[row["case"]] = row

    @classmethod
    def four_ranks(cls):
        """The 4-rank cases, a spawn of their own (once): {case: row}."""
        if not hasattr(cls, "four"):
            with tempfile.TemporaryDirectory() as directory:
                results = support.run_ranks(
                    4, [support.PYTHON, "-u", os.path.abspath(__file__)], timeout=240,
                    env_of_rank=lambda r: {"HEFT_TV_WORKER": "1", "HEFT_TV_DIR": directory})
            cls.four = (results, support.describe(results), {})
            for line in results[0][1].splitlines():
                if line.startswith("case "):
                    row = json.loads(line[5:])
                    print(json.dumps(row))
                    cls.four[2][row["case"]] = row
        return cls.four

    def four_row(self, name):
        results, text, rows = self.four_ranks()
        for rc, _, _ in results:
            self.assertEqual(rc, 0, text)
        self.assertIn(name, rows, text)
        return rows[name]

    def test_pipeline_2_x_tensor_2_vision_transformer(self):
        """Each stage's encoder blocks split by 'heads' and colwise/rowwise MLPs, the
        activations between stages 1/T per tensor rank."""
        row = self.four_row("pipeline 2 x tensor 2 vit (MLPs and heads)")
        for r in row["ranks"]:
            self.assertLessEqual(r["loss"], row["tolerance"], r)
            self.assertLessEqual(r["evaluate"], row["tolerance"], r)
            self.assertTrue(r["keys"], r)
            self.assertLessEqual(r["state"][0], row["tolerance"], r)
            self.assertEqual(r["heads"], [[VIT["num_heads"] // 2, VIT["num_heads"]]], r)

    def test_tensor_2_x_sharded_2_vision_transformer(self):
        """HeadsAttention reads its out_proj's parameters without calling it: no unit of it,
        even with units small enough to take every other module."""
        row = self.four_row("tensor 2 x sharded 2 vit (MLPs and heads)")
        for r in row["ranks"]:
            self.assertLessEqual(r["loss"], row["tolerance"], r)
            self.assertFalse([u for u in r["units"] if u.endswith("out_proj")], r)
            self.assertIn("encoder.layers.encoder_layer_0.self_attention", r["units"], r)

    def row(self, name):
        for rc, _, _ in self.results:
            self.assertEqual(rc, 0, self.text)
        self.assertIn(name, self.cases, self.text)
        return self.cases[name]

    def check_equal(self, row, state=True):
        tol = row["tolerance"]
        self.assertLessEqual(row["loss"], tol, row)
        self.assertTrue(all(row["keys"]), row)
        for what in ("state",) * state + ("checkpoint", "loaded"):
            if what in row:  # (the checkpoint's against the model's own full state)
                self.assertLessEqual(row[what][0], tol, (what, row))

    def test_sharded_resnet18_batchnorm_eval(self):
        row = self.row("sharded resnet18 batch")
        self.check_equal(row)
        self.assertEqual(row["buffers"], 3 * 20, row)  # 20 BatchNorms' buffers saved
        self.assertGreater(row["units"], 2, row)

    def test_sharded_resnet18_batchnorm_bf16(self):
        """mixed_precision="bf16": the BatchNorms compute with fp32 weights beside their fp32
        statistics (torch 1.13 refuses bf16 weights with fp32 statistics)."""
        row = self.row("sharded resnet18 batch bf16")
        # The bf16 computation is one process's in bf16: the same output at the start; then
        # bf16's rounding, amplified by 3 steps at lr 0.05, leaves the losses within 5e-2
        # of fp32's (the parameters differ by more: bf16 rounding, not checked).
        self.assertLessEqual(row["first"], 1e-3, row)
        self.check_equal(row, state=False)

    def test_sharded_deferred_init(self):
        row = self.row("sharded deferred_init")
        self.assertEqual(len(row["models"]), 3, row)
        for name, (meta, keys, (diff, key)) in row["models"].items():
            self.assertTrue(meta and keys, (name, row))
            self.assertEqual(diff, 0.0, (name, key, row))  # exactly one process's values

    def test_sharded_resnet18_groupnorm_train(self):
        self.check_equal(self.row("sharded resnet18 group"))

    def test_sharded_vision_transformer_linear_units(self):
        row = self.row("sharded vit linear units")
        self.check_equal(row)
        # Every nn.Linear but the attentions' out_proj (nn.MultiheadAttention uses its
        # weight without calling it): 2 per MLP and the head, and the root.
        self.assertEqual(row["units"], 2 * VIT["num_layers"] + 1 + 1, row)

    def check_pipeline(self, name):
        row = self.row(name)
        for r in row["ranks"]:
            self.assertLessEqual(r["loss"], row["tolerance"], r)
            self.assertLessEqual(r["params"], row["tolerance"], r)
            self.assertLessEqual(r["evaluate"], row["tolerance"], r)
            self.assertEqual(r["held"][0], r["held"][1], r)
        return row

    def test_pipeline_resnet18_auto(self):
        row = self.check_pipeline("pipeline resnet18 partition=auto")
        self.assertIn("Pipeline: partition (auto: profiled on rank 0", self.results[0][1])
        self.assertEqual(row["ranks"][0]["layers"][0][0], 0, row)

    def test_pipeline_resnet18_stage_begins_with_inplace_relu(self):
        row = self.check_pipeline("pipeline resnet18 partition=[2]")
        self.assertEqual(row["ranks"][1]["layers"], [[2, 11]], row)

    def test_pipeline_vision_transformer_auto(self):
        self.check_pipeline("pipeline vit partition=auto")

    def test_tensor_parallel_vision_transformer_mlps(self):
        row = self.row("tensor_parallel vit T2 (MLPs)")
        self.check_equal(row)
        d = VIT["hidden_dim"]
        self.assertEqual(row["held"]["mlp.0"], [VIT["mlp_dim"] // 2, d], row)
        self.assertEqual(row["held"]["in_proj"], [3 * d, d], row)  # the attention whole
        # heft's layers ran: per step one forward all-reduce per MLP (its rowwise layer) and
        # one backward all-reduce (its colwise layer's input gradient).
        for counts in row["counts"]:
            self.assertEqual(counts, [row["layers"], row["layers"]], row)
        self.assertEqual(sorted(row["refused"]), ["attention", "heads on a Linear", "out_proj"])
        for what, message in row["refused"].items():
            self.assertIsNotNone(message, (what, row))
            self.assertIn("self_attention" if what != "heads on a Linear" else "mlp.0",
                          message, (what, row))
            self.assertIn("nn.MultiheadAttention", message, (what, row))
            if what != "heads on a Linear":  # says what to do instead
                self.assertIn("'heads'", message, (what, row))

    def test_tensor_parallel_vision_transformer_mlps_and_attention_heads(self):
        row = self.row("tensor_parallel vit T2 (MLPs and heads)")
        self.check_equal(row)
        d, heads = VIT["hidden_dim"], VIT["num_heads"]
        held = row["held"]
        self.assertEqual(held["type"], "HeadsAttention", row)
        self.assertEqual(held["heads"], heads // 2, row)
        self.assertEqual(held["in_proj"], [3 * d // 2, d], row)  # its heads' q, k, v rows
        self.assertEqual(held["out_proj"], [d, d // 2], row)     # their columns
        # Per step and block: the MLP's and the attention's out_proj all-reduce forward, their
        # inputs' gradients backward.
        for counts in row["counts"]:
            self.assertEqual(counts, [2 * row["layers"], 2 * row["layers"]], row)

    def test_tensor_parallel_multihead_attention_forms(self):
        row = self.row("tensor_parallel MultiheadAttention forms")
        self.assertEqual(row["type"], "HeadsAttention", row)
        self.assertLessEqual(row["largest"], row["tolerance"], row)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if os.environ.get("HEFT_TV_WORKER"):
        worker()
        sys.exit(0)
    support.main_guard()
    try:
        import torchvision  # noqa: F401
    except ImportError:
        print("SKIPPED: Debian's python3-torchvision is not installed (setup.sh installs it)")
        sys.exit(77)
    unittest.main(verbosity=2)
