# ctest-labels: cuda
"""Backend heft on CUDA tensors: two ranks sharing GPU 0 run every collective on CUDA tensors
with the CPU's results, and torch's DDP on the GPU over heft equals DDP over Gloo bit for bit
(tests/python/workers/cuda_backend_worker.py checks). Skipped (exit 77) where torch sees no
GPU, naming why."""
import sys
import unittest

import torch

import support


class CudaBackend(unittest.TestCase):
    def test_two_ranks_share_the_gpu(self):
        r = support.heft_run(["-n", "2", "--", support.PYTHON, "-u",
                              support.worker("cuda_backend_worker.py")])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("cuda_backend_worker: checked=", r.stdout)
        print(r.stdout.strip())


if __name__ == "__main__":
    support.main_guard()
    if not torch.cuda.is_available():
        print(f"skipped: torch {torch.__version__} sees no GPU (torch.cuda.is_available() is "
              f"False; CUDA {torch.version.cuda} build)", flush=True)
        sys.exit(77)
    unittest.main(verbosity=2)
