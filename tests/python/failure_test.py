# ctest-labels: multiproc
"""The backend without a launcher: torch's init methods (env://, tcp://, file://), a rank
killed in the middle of an all_reduce (the others raise a RuntimeError naming it within the
timeout), bad input (each a RuntimeError naming the problem, never a crash or a hang), and
no reachable store (tests/python/workers/failure_worker.py does the checking per rank)."""
import os
import subprocess
import tempfile
import unittest

import support

WORKER = support.worker("failure_worker.py")


class Failures(unittest.TestCase):
    def ranks(self, world, case, url, timeout=120):
        results = support.run_ranks(world, [support.PYTHON, "-u", WORKER, case, url], timeout)
        return results

    def test_init_methods(self):
        with tempfile.TemporaryDirectory() as d:
            for url in ("env://", f"tcp://127.0.0.1:{support.free_port()}",
                        f"file://{os.path.join(d, 'rendezvous')}"):
                with self.subTest(url=url):
                    results = self.ranks(3, "init", url)
                    for rc, out, _ in results:
                        self.assertEqual(rc, 0, support.describe(results))
                        self.assertIn("sum=3", out)

    def test_peer_killed_in_all_reduce(self):
        results = self.ranks(3, "peer_lost", f"tcp://127.0.0.1:{support.free_port()}", timeout=90)
        self.assertEqual(results[2][0], -9, support.describe(results))
        for rc, out, _ in results[:2]:
            self.assertEqual(rc, 0, support.describe(results))
            self.assertIn("raised after=", out)
            self.assertIn("rank 2", out)
        print(support.describe(results[:2]))

    def test_bad_input(self):
        results = self.ranks(2, "bad_input", f"tcp://127.0.0.1:{support.free_port()}", timeout=120)
        for rc, out, _ in results:
            self.assertEqual(rc, 0, support.describe(results))
            self.assertIn("bad_input ok", out)
        print(results[0][1])

    def test_group_alive_at_exit(self):
        # A script that ends without destroy_process_group(): the module's exit hook stops
        # every live group's threads before Python finalizes (a thread taking the GIL during
        # finalization aborted the process: "terminate called without an active exception").
        for attempt in range(3):
            results = self.ranks(2, "exit", f"tcp://127.0.0.1:{support.free_port()}")
            for rc, out, err in results:
                self.assertEqual(rc, 0, support.describe(results))
                self.assertIn("shut down=2 again=0", out)
                self.assertIn("exit ok", out)
                self.assertNotIn("terminate called", err)

    def test_no_reachable_store(self):
        port = support.free_port()  # nothing listens there
        code = ("import datetime, heft.torch.distributed as d\n"
                "d.init_process_group(timeout=3)\n")
        env = support.clean_env(PYTHONPATH=os.path.join(support.BINARY_DIR, "python"),
                                HEFT_STORE=f"127.0.0.1:{port}", HEFT_TOKEN="x" * 32,
                                RANK="0", WORLD_SIZE="2")
        r = subprocess.run([support.PYTHON, "-c", code], env=env, capture_output=True, text=True,
                           timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(f"127.0.0.1:{port}", r.stderr)
        self.assertNotIn("Segmentation", r.stderr)
        print(r.stderr.strip().splitlines()[-1])
        # Outside heft run, with neither HEFT_STORE nor an init method: a message saying so.
        env.pop("HEFT_STORE")
        r = subprocess.run([support.PYTHON, "-c", code], env=env, capture_output=True, text=True,
                           timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("HEFT_STORE", r.stderr)


if __name__ == "__main__":
    support.main_guard()
    unittest.main(verbosity=2)
