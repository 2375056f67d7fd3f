# ctest-labels: multiproc
"""`cmake --install` into a fresh prefix gives the heft and heft-train binaries, headers,
libraries, a CMake package and the Python package; a small out-of-tree C++ program
(tests/python/install_consumer) builds against it with find_package(heft) and runs under the
installed `heft run`, and the installed `heft run` hands workers the installed Python package.
Builds the consumer with heft::comm only (a LibTorch translation unit would cost a minute);
heft::torch is checked to exist."""
import os
import shutil
import subprocess
import tempfile
import unittest

import support


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r


class Install(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="heft-install-")
        cls.prefix = os.path.join(cls.tmp, "prefix")
        run(["cmake", "--install", support.BINARY_DIR, "--prefix", cls.prefix])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_layout(self):
        for path in ["bin/heft", "bin/heft-train", "include/heft/comm/communicator.h",
                     "include/heft/parallel/data/distributed_data_parallel.h",
                     "lib/libheft_comm.a", "lib/libheft_parallel.a",
                     "lib/cmake/heft/heftConfig.cmake", "lib/cmake/heft/heftConfigVersion.cmake",
                     "lib/python3.11/dist-packages/heft/__init__.py",
                     "lib/python3.11/dist-packages/heft/torch/distributed.py"]:
            self.assertTrue(os.path.exists(os.path.join(self.prefix, path)), path)

    def test_out_of_tree_program_under_installed_heft_run(self):
        src = os.path.join(support.SOURCE_DIR, "tests", "python", "install_consumer")
        build = os.path.join(self.tmp, "consumer")
        import torch  # the consumer finds LibTorch where this interpreter's torch has it
        prefixes = f"{self.prefix};{torch.utils.cmake_prefix_path}"
        run(["cmake", "-S", src, "-B", build, "-G", "Ninja", f"-DCMAKE_PREFIX_PATH={prefixes}",
             "-DCMAKE_BUILD_TYPE=Release"])
        run(["cmake", "--build", build])
        heft = os.path.join(self.prefix, "bin", "heft")
        r = run([heft, "run", "-n", "2", "--", os.path.join(build, "sum_of_ranks")],
                env=support.clean_env())
        self.assertIn("rank 0 of 2: sum=1", r.stdout)
        self.assertIn("rank 1 of 2: sum=1", r.stdout)

    def test_installed_heft_run_gives_workers_the_installed_python_package(self):
        heft = os.path.join(self.prefix, "bin", "heft")
        code = "import heft.torch, os; print('package', os.path.dirname(heft.torch.__file__))"
        r = run([heft, "run", "--", support.PYTHON, "-c", code], env=support.clean_env())
        want = os.path.join(self.prefix, "lib", "python3.11", "dist-packages", "heft", "torch")
        line = [l for l in r.stdout.splitlines() if "package " in l][0]
        got = line.split("package ", 1)[1].strip()
        self.assertEqual(os.path.realpath(got), os.path.realpath(want), r.stdout)


if __name__ == "__main__":
    support.main_guard()
    unittest.main(verbosity=2)
