# ctest-labels: multiproc
"""heft.torch.parallel.tensor_parallel (issue 28 item 2) on 4 real ranks, one spawn: the
meshes tensor 2 (x data 2) and tensor 4. For each case, 20 AdamW steps on the same global
batch as one process running the unsplit model: every step's loss within relative 1e-5 on
every rank; after them full_state_dict (the slices joined by C++ join_slices) has the
one-process model's keys and shapes and values within 1e-5 (the norm of the difference
over the tensor's, per tensor), and loads into a fresh plain model. Cases: the GPT of tp_models.py
(examples/gpt_sharded.py's layout: fused qkv, tied embedding/head) with Megatron's plan
(vocab embedding and head, vocab_parallel_cross_entropy) at T = 2 and 4, and with its head
colwise and gathered (plain F.cross_entropy) at T = 2; an MLP-mixer at T = 2 and 4. The C++
counters per step equal Megatron's count: 2 forward and 2 backward all-reduces per block,
plus 1 forward for the vocab embedding, 2 for the vocab cross-entropy, 1 backward for the
head's input (an all-gather instead of the cross-entropy's 2 for a gathered head), so the
heft layers ran. Each rank holds only its slice (shapes, heads / T, the tie kept); separate q, k, v colwise layers before a rowwise o divide
`num_heads` and give the full attention's output and input gradient (1e-6). Bad plans
raise ValueError naming the pattern, and leave the model as it was. This file is also the
worker (HEFT_TP_WORKER=1): rank 0 prints one `result ` JSON line."""
import json
import os
import sys
import unittest

import support

STEPS, LR, RTOL = 20, 3e-3, 1e-5
# (name, model, plan name, tensor degree, per-block counts added to the fixed ones)
CASES = [("gpt vocab T2", "gpt", "gpt", 2), ("gpt vocab T4", "gpt", "gpt", 4),
         ("gpt gathered head T2", "gpt", "gpt_gathered", 2),
         ("mixer T2", "mixer", "mixer", 2), ("mixer T4", "mixer", "mixer", 4)]
# Collectives per step beyond 2 forward + 2 backward all-reduces per block (2 blocks each):
# (forward all-reduces, backward all-reduces, all-gathers).
EXTRA = {"gpt": (1 + 2, 1, 0), "gpt_gathered": (1, 1, 1), "mixer": (0, 1, 1)}


def plans():
    import tp_models as M
    gathered = dict(M.GPT_PLAN, head="colwise")
    return {"gpt": M.GPT_PLAN, "gpt_gathered": gathered, "mixer": M.MIXER_PLAN}


def run_case(model_name, plan_name, mesh):
    import torch
    import tp_models as M
    from heft.torch import _c10d
    from heft.torch.parallel import tensor_parallel, vocab_parallel_cross_entropy
    from heft.torch.parallel.tensor import full_state_dict
    ref = M.make(model_name)
    tp = tensor_parallel(M.make(model_name), plans()[plan_name], mesh)
    opts = [torch.optim.AdamW(m.parameters(), lr=LR) for m in (ref, tp)]
    worst, counts = 0.0, None
    for step in range(STEPS):
        x, y = M.batch(model_name, step)
        losses = []
        for model, opt in zip((ref, tp), opts):
            if model is tp:
                _c10d.parallel.tensor.reset_counters()
            opt.zero_grad()
            out = model(x)
            if model is tp and plan_name == "gpt":
                loss = vocab_parallel_cross_entropy(out, y, mesh)
            else:
                loss = M.plain_loss(model_name, out, y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        c = _c10d.parallel.tensor.counters()
        got = [c["forward_allreduces"], c["backward_allreduces"], c["allgathers"]]
        counts = got if counts in (None, got) else ["differs", step, got]
        worst = max(worst, abs(losses[1] - losses[0]) / abs(losses[0]))
    full, plain = full_state_dict(tp), ref.state_dict()
    keys = sorted(full) == sorted(plain) and all(full[k].shape == plain[k].shape for k in plain)
    # Per tensor, the norm of the difference over the tensor's norm (one entry whose gradient
    # is near zero can move by Adam's full step on rounding noise alone).
    state = max((float((full[k] - plain[k]).norm() / plain[k].norm().clamp(min=1e-12)), k)
                for k in plain) if keys else (None, None)
    fresh = M.make(model_name, seed=5)
    fresh.load_state_dict(full)
    x, _ = M.batch(model_name, 0)
    with torch.no_grad():
        loaded = float((fresh(x) - ref(x)).abs().max() / ref(x).abs().max())
    return {"loss": worst, "state": state[0], "state_key": state[1], "keys": keys, "loaded": loaded, "counts": counts,
            "steps": STEPS}


def slices(mesh, t):
    """What one rank holds after the GPT plan (with a q/k/v bias, cut in 3 parts): shapes,
    heads, the tie; and whether full_state_dict gives the model's state back exactly."""
    import torch
    import tp_models as M
    from heft.torch.parallel import tensor_parallel
    from heft.torch.parallel.tensor import full_state_dict
    g = tensor_parallel(M.make("gpt", qkv_bias=True), plans()["gpt"], mesh)
    plain, full = M.make("gpt", qkv_bias=True).state_dict(), full_state_dict(g)
    a = g.blocks[0].attn
    # Separate q, k, v colwise before o rowwise: the heads divided, the same output and
    # input gradient as the full module.
    full_att = M.make("split_attention")
    att = tensor_parallel(M.make("split_attention"), M.SPLIT_ATTENTION_PLAN, mesh)
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(3), requires_grad=True)
    y_full = full_att(x)
    (y_full * y_full).sum().backward()
    dx_full, x.grad = x.grad, None
    y = att(x)
    (y * y).sum().backward()
    rank0 = full_state_dict(g, rank0_only=True)
    return {"split_heads": att.num_heads,
            "split_rel": float(torch.max((y - y_full).abs().max() / y_full.abs().max(),
                                         (x.grad - dx_full).abs().max() / dx_full.abs().max())),
            "rank0_only": (rank0 is None) == (mesh.coordinate("tensor") != 0),
            "round_trip": sorted(plain) == sorted(full) and
            all(torch.equal(plain[k], full[k]) for k in plain),
            "qkv_bias": a.qkv.bias.tolist() == torch.cat(
                [b.chunk(t)[mesh.coordinate("tensor")] for b in plain["blocks.0.attn.qkv.bias"]
                 .chunk(3)]).tolist(), "tok": list(g.tok.weight.shape), "qkv": list(a.qkv.weight.shape),
            "proj": list(a.proj.weight.shape), "mlp0": list(g.blocks[0].mlp[0].weight.shape),
            "heads": a.heads, "tied": g.head.weight is g.tok.weight,
            "parameters": sum(p.numel() for p in g.parameters())}


def bad_plans(mesh):
    """(words expected, message) for plans that cannot be honoured at T = 2."""
    import torch.nn as nn
    import tp_models as M
    from heft.torch.parallel import tensor_parallel
    qkv = "blocks.*.attn.qkv"
    cases = [
        (M.GPT, {"blocks.*.attn.qkvx": "colwise"}, "'blocks.*.attn.qkvx' matches no module"),
        (lambda: nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 5)),
         {"0": "colwise", "2": "rowwise", "2*": "colwise"}, "patterns '2' (rowwise) and '2*'"),
        (lambda: nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 4)),
         {"0": "colwise", "2": "rowwise"},
         "plan pattern '2': '2' input features (5) is not divisible by tensor_parallel_degree 2"),
        (lambda: nn.Sequential(nn.Linear(4, 6), nn.Linear(6, 3)), {"1": "colwise"},
         "plan pattern '1': '1' output features (3) is not divisible by tensor_parallel_degree 2"),
        (M.GPT, {"blocks.*.attn.proj": "rowwise"},
         "plan pattern 'blocks.*.attn.proj': rowwise 'blocks.0.attn.proj' has no colwise input"),
        (M.GPT, {"blocks.*.ln1": "colwise"},
         "plan pattern 'blocks.*.ln1' matches 'blocks.0.ln1' (LayerNorm): 'colwise' applies"),
        (M.GPT, {"blocks.*": "rowwise"}, "matches 'blocks.0' (Block): 'rowwise' applies to nn.Linear"),
        (M.GPT, {"pos": "colwise"}, "matches 'pos' (Embedding): 'colwise' applies to nn.Linear"),
        (lambda: M.GPT(n_head=3, d=24), {qkv: "colwise", "blocks.*.attn.proj": "rowwise"},
         "plan pattern 'blocks.*.attn.qkv': blocks.0.attn.heads (3) is not divisible by "
         "tensor_parallel_degree 2"),
        (lambda: nn.Sequential(nn.Linear(4, 12), nn.Linear(4, 4)), {"0": "colwise", "1": "rowwise"},
         "plan pattern '0': '0' gives 3 x 4 features, a fused q/k/v projection, but no enclosing"),
        (M.GPT, {"blocks.*.mlp.0": "colwise", "blocks.*.attn.proj": "rowwise"},
         "rowwise 'blocks.0.attn.proj' has no colwise input (follows 'blocks.0.attn.qkv'"),
        (M.GPT, {"head": "vocab"}, "plan pattern 'head': 'head''s parameter is tied to 'tok.weight'"),
        (M.GPT, {"head": "columns"}, "plan pattern 'head': 'columns': expected"),
        (lambda: nn.Sequential(nn.Linear(4, 8), nn.Linear(6, 4)), {"0": "colwise", "1": "rowwise"},
         "plan pattern '1': rowwise '1' takes 6 input features but the colwise '0' before it "
         "gives 8"),
        (lambda: nn.Sequential(nn.Embedding(8, 4, padding_idx=0)), {"0": "vocab"},
         "plan pattern '0': '0' uses padding_idx, max_norm, scale_grad_by_freq or sparse"),
    ]
    out = []
    for make, plan, words in cases:
        model = make()
        try:
            tensor_parallel(model, plan, mesh)
            out.append([words, None, None])
        except ValueError as e:
            untouched = all(type(m) in (nn.Linear, nn.Embedding) for m in model.modules()
                            if "Linear" in type(m).__name__ or "Embedding" in type(m).__name__)
            out.append([words, str(e), untouched])
    try:
        tensor_parallel(M.GPT(), plans()["gpt"], "tensor")
        out.append(["mesh must be", None, None])
    except TypeError as e:
        out.append(["mesh must be a heft.torch.parallel.DeviceMesh, got str", str(e), True])
    return out


def worker():
    import torch.distributed as dist
    import heft.torch  # noqa: F401  (registers the backend)
    from heft.torch.parallel import DeviceMesh
    dist.init_process_group("heft", init_method="env://")
    rank = dist.get_rank()
    meshes = {2: DeviceMesh(tensor=2), 4: DeviceMesh(tensor=4)}
    mine = {"cases": {label: run_case(model, plan, meshes[t]) for label, model, plan, t in CASES},
            "slices": {t: slices(meshes[t], t) for t in (2, 4)}}
    if meshes[2].coordinate("tensor") == 0 and meshes[2].coordinate("data") == 0:
        mine["bad"] = bad_plans(meshes[2])
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    if rank == 0:
        print("result " + json.dumps(every), flush=True)
    dist.destroy_process_group()


class TensorParallel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        results = support.run_ranks(4, [support.PYTHON, "-u", os.path.abspath(__file__)],
                                    timeout=240, env_of_rank=lambda r: {"HEFT_TP_WORKER": "1"})
        text = support.describe(results)
        for rc, _, _ in results:
            if rc != 0:
                raise AssertionError(text)
        lines = [l for l in results[0][1].splitlines() if l.startswith("result ")]
        if len(lines) != 1:
            raise AssertionError(text)
        cls.ranks = json.loads(lines[0][7:])

    def test_equal_to_one_process_for_20_adamw_steps(self):
        for rank, got in enumerate(self.ranks):
            for label, _, _, _ in CASES:
                c = got["cases"][label]
                print(f"rank {rank} {label}: loss rel {c['loss']:.2e}, state rel {c['state']} "
                      f"({c['state_key']}), "
                      f"loaded {c['loaded']:.2e}")
                with self.subTest(rank=rank, case=label):
                    self.assertEqual(c["steps"], STEPS)
                    self.assertLessEqual(c["loss"], RTOL)
                    self.assertTrue(c["keys"], "full_state_dict: keys or shapes differ")
                    self.assertLessEqual(c["state"], RTOL)
                    self.assertLessEqual(c["loaded"], RTOL)

    def test_counters_are_megatron_count_per_block(self):
        for rank, got in enumerate(self.ranks):
            for label, _, plan, _ in CASES:
                fwd, bwd, gathers = EXTRA[plan]
                with self.subTest(rank=rank, case=label):
                    self.assertEqual(got["cases"][label]["counts"],
                                     [2 * 2 + fwd, 2 * 2 + bwd, gathers])

    def test_each_rank_holds_its_slice(self):
        d, vocab = 32, 64
        full = sum(p.numel() for p in __import__("tp_models").GPT().parameters())
        for got in self.ranks:
            for t in (2, 4):
                s = got["slices"][str(t)]
                self.assertEqual(s["tok"], [vocab // t, d])
                self.assertEqual(s["qkv"], [3 * d // t, d])
                self.assertEqual(s["proj"], [d, d // t])
                self.assertEqual(s["mlp0"], [4 * d // t, d])
                self.assertEqual(s["heads"], 4 // t)
                self.assertTrue(s["tied"])
                self.assertTrue(s["round_trip"])
                self.assertTrue(s["qkv_bias"])
                self.assertTrue(s["rank0_only"])
                self.assertEqual(s["split_heads"], 4 // t)
                self.assertLessEqual(s["split_rel"], 1e-6)
                self.assertLess(s["parameters"], full)

    def test_bad_plans_name_the_pattern(self):
        bad = self.ranks[0]["bad"]
        self.assertEqual(len(bad), 16)
        for words, message, untouched in bad:
            with self.subTest(words=words):
                self.assertIsNotNone(message, f"accepted: {words}")
                self.assertIn(words, message)
                self.assertTrue(untouched, "a refused plan changed the model")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if os.environ.get("HEFT_TP_WORKER"):
        worker()
    else:
        unittest.main(verbosity=2)
