# ctest-labels: multiproc
"""examples/gpt_3d.py under `heft run -n 4` (tensor 2 x pipeline 2, interleaved, 8 micro-
batches; a small GPT, 6 steps): rank 0 prints the automatic plan and the schedule with its
bubble beside the theory, every rank ends with the same loss, and it equals one process
(`heft run -n 1 ... --tensor 1 --pipeline 1`) within relative 1e-5; saved to
--checkpoint_dir after 4 steps and resumed at another layout (tensor 1 x pipeline 2 on 2
ranks) to 6 steps, it ends with the uninterrupted run's loss (relative 1e-5).
examples/gpt-3d-python.yaml names the script, 2 hosts x 2 workers, tensor 2 x pipeline 2."""
import os
import re
import tempfile
import unittest

import support

EXAMPLE = os.path.join(support.SOURCE_DIR, "examples", "gpt_3d.py")
SMALL = ["--n_layer", "2", "--n_embd", "32", "--n_head", "4", "--block_size", "32",
         "--batch_size", "16", "--log_every", "3"]
FINAL = re.compile(r"\[rank (\d+)\] final: rank=\d+ step=(\d+) loss=(\S+) .*mesh=(\S+)")


def run(ranks, *extra):
    r = support.heft_run(["-n", str(ranks), "--", support.PYTHON, "-u", EXAMPLE] + SMALL +
                         list(extra), timeout=240)
    return r, FINAL.findall(r.stdout)


class Example(unittest.TestCase):
    def final(self, ranks, *extra):
        r, found = run(ranks, *extra)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(len(found), ranks, r.stdout)
        losses = {float(f[2]) for f in found}
        self.assertEqual(len(losses), 1, r.stdout)  # the same loss on every rank
        print(found[0])
        return r.stdout, int(found[0][1]), losses.pop()

    def test_tensor_2_x_pipeline_2_equals_one_process_and_resumes(self):
        out, step, loss = self.final(4, "--steps", "6")
        self.assertEqual(step, 6)
        self.assertIn("[rank 0] Pipeline: partition (auto", out)
        self.assertIn("pipeline interleaved: 2 stages x 8 micro-batches", out)
        self.assertRegex(out, r"bubble 0\.\d+ \(theory")
        self.assertIn("mesh=tensor2xpipeline2xdata1", out)
        _, _, one = self.final(1, "--steps", "6", "--tensor", "1", "--pipeline", "1")
        self.assertLessEqual(abs(loss - one) / one, 1e-5)
        with tempfile.TemporaryDirectory() as d:
            self.final(4, "--steps", "4", "--checkpoint_dir", d)
            _, step, resumed = self.final(2, "--steps", "6", "--checkpoint_dir", d,
                                          "--tensor", "1", "--pipeline", "2")
            self.assertEqual(step, 6)
            self.assertLessEqual(abs(resumed - loss) / loss, 1e-5)
        with open(os.path.join(support.SOURCE_DIR, "examples", "gpt-3d-python.yaml")) as f:
            spec = f.read()
        for needle in ("examples/gpt_3d.py", "tensor: 2", "pipeline: 2", "microbatches: 8",
                       "schedule: interleaved", "instance_count: 2, processes_per_host: 2"):
            self.assertIn(needle, spec)


if __name__ == "__main__":
    support.main_guard()
    unittest.main(verbosity=2)
