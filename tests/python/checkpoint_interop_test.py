# ctest-labels: multiproc
"""Checkpoints move between torch 2's FSDP2 and heft's ShardedDataParallel mid-project, both
ways and across world sizes (tests/python/workers/interop_worker.py, three `heft run`s): FSDP2
on 4 ranks saves a torch.distributed.checkpoint folder (model and AdamW state) after step 3 and
trains on to step 9 (the uninterrupted run); heft's ShardedDataParallel on 2 ranks, built from
another seed, loads that folder (read_dcp, load_torch_state_dicts) and trains steps 3-5, saving
heft's checkpoint; FSDP2 on 1 rank, from a third seed, loads heft's checkpoint (torch_state_dicts
and torch's set_state_dict) and trains steps 6-8. Every loss within TOLERANCE (relative) of the
uninterrupted run's: the first loss of a phase shows the parameters crossed over, the next two
the optimizer's moments and step counts (AdamW restarted from empty state takes a step of
about lr per element, not the resumed one)."""
import json
import re
import shutil
import tempfile
import unittest

import support

TOLERANCE = 1e-5


def losses(r):
    m = re.search(r"^(?:\[rank 0\] )?LOSSES (.*)$", r.stdout, re.M)
    return json.loads(m[1]) if m else None


class Interop(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="interop-test-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def phase(self, ranks, name):
        r = support.heft_run(["-n", str(ranks), "--", support.PYTHON, "-u",
                              support.worker("interop_worker.py"), name, self.tmp],
                             timeout=300, env=support.clean_env(OMP_NUM_THREADS="1"))
        out = r.stdout + r.stderr
        self.assertEqual(r.returncode, 0, out[-5000:])
        found = losses(r)
        self.assertIsNotNone(found, out[-5000:])
        return found

    def close(self, got, want, what):
        worst = max(abs(a - b) / abs(b) for a, b in zip(got, want))
        print(f"{what}: {got}\n  uninterrupted {want}\n  largest relative difference "
              f"{worst:.2e} (tolerance {TOLERANCE:g})")
        self.assertEqual(len(got), len(want))
        self.assertLessEqual(worst, TOLERANCE)

    def test_fsdp2_at_4_to_heft_at_2_to_fsdp2_at_1(self):
        whole = self.phase(4, "fsdp2-4")
        self.assertEqual(len(whole), 9)
        heft = self.phase(2, "heft-2")
        self.close(heft, whole[3:6], "heft ShardedDataParallel, 2 ranks, from FSDP2's DCP")
        back = self.phase(1, "fsdp2-1")
        self.close(back, whole[6:9], "FSDP2, 1 rank, from heft's checkpoint")


if __name__ == "__main__":
    support.main_guard()
    unittest.main(verbosity=2)
