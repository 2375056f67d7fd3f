# ctest-labels: multiproc
"""No rank builds the whole model under Pipeline: a model built under
heft.torch.parallel.deferred_init (tests/python/workers/pipeline_deferred_worker.py, 2 stages x
data 2 under `heft run -n 4`) is partitioned by its parameter bytes (nothing to profile), each
rank replays the constructor keeping only its stage's layers: their values equal one process's
built after the same seed exactly, the other layers' parameters stay empty, the replay's peak
stays under the whole model's bytes, torch's generator ends where one process's does, and 3
training steps give one process's losses on the whole batch (1e-5)."""
import json
import re
import unittest

import support

TOLERANCE = 1e-5


class PipelineDeferred(unittest.TestCase):
    def test_each_rank_materializes_its_stage_only(self):
        r = support.heft_run(["-n", "4", "--", support.PYTHON, "-u",
                              support.worker("pipeline_deferred_worker.py")], timeout=300)
        out = r.stdout + r.stderr
        self.assertEqual(r.returncode, 0, out[-5000:])
        rows = [json.loads(m) for m in re.findall(r"^(?:\[rank \d+\] )?ROW (.*)$", r.stdout,
                                                  re.M)]
        self.assertEqual(sorted(row["rank"] for row in rows), [0, 1, 2, 3], out[-3000:])
        print(rows[0]["plan"])
        for row in rows:
            with self.subTest(rank=row["rank"]):
                print(f"rank {row['rank']} (stage {row['stage']}): holds {row['held']} of "
                      f"{row['whole']} parameter bytes, replay peak {row['peak']}; losses "
                      f"{row['losses']} one process {row['reference']}")
                self.assertTrue(row["equal"], row)
                self.assertTrue(row["rng"], row)
                self.assertGreater(row["empty"], 0)  # the other stage's parameters
                self.assertLess(row["held"], 0.75 * row["whole"])
                self.assertLess(row["peak"], row["whole"])  # never the whole model at once
                worst = max(abs(a - b) / abs(b) for a, b in zip(row["losses"],
                                                                row["reference"]))
                self.assertLessEqual(worst, TOLERANCE, row)
        self.assertIn("deferred_init: by parameter bytes", rows[0]["plan"])


if __name__ == "__main__":
    support.main_guard()
    unittest.main(verbosity=2)
