# ctest-labels: multiproc
"""No rank builds the whole model under Pipeline or tensor_parallel: a model built under
heft.torch.parallel.deferred_init (tests/python/workers/deferred_worker.py under
`heft run -n 4`) is replayed on each rank keeping only what the rank holds.
- Pipeline, 2 stages x data 2: partitioned by its parameter bytes (nothing to profile), each
  rank keeps its stage's layers, the other layers' parameters stay empty;
- tensor_parallel, tensor 2 x data 2 (a transformer: vocab embedding, attention by heads,
  colwise/rowwise MLP): each rank keeps its slices of the planned layers, the rest whole.
In both: the values equal one process's built after the same seed exactly (the tensor case
through full_state_dict), the replay's peak stays under the whole model's bytes, torch's
generator ends where one process's does, and 3 training steps give one process's losses on
the whole batch (1e-5)."""
import json
import re
import unittest

import support

TOLERANCE = 1e-5


def rows_of(case):
    r = support.heft_run(["-n", "4", "--", support.PYTHON, "-u",
                          support.worker("deferred_worker.py"), case], timeout=300)
    out = r.stdout + r.stderr
    rows = [json.loads(m) for m in re.findall(r"^(?:\[rank \d+\] )?ROW (.*)$", r.stdout, re.M)]
    return r.returncode, out, rows


class Deferred(unittest.TestCase):
    def check_rows(self, returncode, out, rows):
        self.assertEqual(returncode, 0, out[-5000:])
        self.assertEqual(sorted(row["rank"] for row in rows), [0, 1, 2, 3], out[-3000:])
        for row in rows:
            with self.subTest(rank=row["rank"]):
                print(f"rank {row['rank']}: holds {row['held']} of {row['whole']} parameter "
                      f"bytes, replay peak {row['peak']}; losses {row['losses']} one process "
                      f"{row['reference']}")
                self.assertTrue(row["equal"], row)
                self.assertTrue(row["rng"], row)
                self.assertLess(row["held"], 0.75 * row["whole"])
                self.assertLess(row["peak"], row["whole"])  # never the whole model at once
                worst = max(abs(a - b) / abs(b) for a, b in zip(row["losses"],
                                                                row["reference"]))
                self.assertLessEqual(worst, TOLERANCE, row)

    def test_tensor_parallel_materializes_its_slices_only(self):
        returncode, out, rows = rows_of("tensor")
        self.check_rows(returncode, out, rows)
        for row in rows:
            self.assertEqual(row["metas"], 0)

    def test_pipeline_materializes_its_stage_only(self):
        returncode, out, rows = rows_of("pipeline")
        self.check_rows(returncode, out, rows)
        print(rows[0]["plan"])
        for row in rows:
            self.assertGreater(row["empty"], 0)  # the other stage's parameters
        self.assertIn("deferred_init: by parameter bytes", rows[0]["plan"])


if __name__ == "__main__":
    support.main_guard()
    unittest.main(verbosity=2)
