# ctest-labels: multiproc
"""examples/fsdp2_gpt.py, a plain torch 2 FSDP2 script (fully_shard per block and the root,
a MixedPrecisionPolicy, a DCP checkpoint it resumes from), runs on Gloo and on heft by its
--backend flag, and with the model-parallel library v2's two lines (--tsm 2: tsm.init and
tsm.transform, tensor 2 x FSDP2 over data 2) on 4 ranks: the same final loss on the same global
batch (fp32: 1e-6 relative; the tensor split sums in another order: 1e-5); a run stopped after
its step-6 checkpoint resumes from it and ends with the uninterrupted run's loss."""
import os
import re
import shutil
import tempfile
import unittest

import support

EXAMPLE = os.path.join(support.SOURCE_DIR, "examples", "fsdp2_gpt.py")
STEPS = ["--steps", "12", "--log_every", "6"]
FINAL = re.compile(r"final: step=(\d+) loss=(\S+)")


def run(ranks, *args):
    r = support.heft_run(["-n", str(ranks), "--", support.PYTHON, "-u", EXAMPLE, *STEPS, *args],
                         timeout=300)
    m = FINAL.search(r.stdout)
    return r, (float(m[2]) if m else None)


class Fsdp2Example(unittest.TestCase):
    def ran(self, r, loss):
        self.assertEqual(r.returncode, 0, (r.stdout + r.stderr)[-4000:])
        self.assertIsNotNone(loss, r.stdout[-2000:])
        return loss

    def test_gloo_heft_and_the_tsm_lines_give_one_loss(self):
        gloo = self.ran(*run(2, "--backend", "gloo"))
        heft = self.ran(*run(2, "--backend", "heft"))
        tsm = self.ran(*run(4, "--backend", "heft", "--tsm", "2"))
        print(f"final loss: gloo {gloo!r}, heft {heft!r}, heft + tsm (tensor 2) {tsm!r}")
        self.assertLessEqual(abs(heft - gloo) / gloo, 1e-6)
        self.assertLessEqual(abs(tsm - gloo) / gloo, 1e-5)

    def test_bf16_policy_and_resume_from_dcp(self):
        folder = tempfile.mkdtemp(prefix="fsdp2-example-")
        try:
            args = ["--backend", "heft", "--mixed_precision", "bf16", "--checkpoint_dir",
                    folder, "--checkpoint_every", "6"]
            whole = self.ran(*run(2, *args))
            self.assertEqual(sorted(os.listdir(folder)), ["step-12", "step-6"])
            shutil.rmtree(os.path.join(folder, "step-12"))
            r, resumed = run(2, *args)
            self.ran(r, resumed)
            self.assertIn("resumed: step=6", r.stdout)
            print(f"bf16 policy: uninterrupted {whole!r}, resumed from step 6 {resumed!r}")
            self.assertEqual(resumed, whole)
        finally:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    support.main_guard()
    unittest.main(verbosity=2)
