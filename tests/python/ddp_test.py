# ctest-labels: multiproc
"""torch's DistributedDataParallel over heft ends 20 steps with the parameters of DDP over
Gloo, also with a Python comm hook through Work.get_future() and with torch's
bf16_compress_hook (tests/python/workers/ddp_worker.py does the checking)."""
import unittest

import support


class DDP(unittest.TestCase):
    def check(self, hosts, per_host):
        r = support.heft_run(["--hosts", str(hosts), "-n", str(per_host), "--",
                              support.PYTHON, "-u", support.worker("ddp_worker.py")])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("max_diff_plain=", r.stdout)
        print(r.stdout.strip())

    def test_two_ranks(self):
        self.check(1, 2)

    def test_three_ranks(self):
        self.check(1, 3)


if __name__ == "__main__":
    support.main_guard()
    unittest.main(verbosity=2)
