# ctest-labels: multiproc
# ctest-resource-lock: netns
"""Estimators that reach a cluster (docs/porting.md, "Where the workers run"), with real jobs:
- the estimator's instance_type is what the workers see (SM_CURRENT_INSTANCE_TYPE,
  resourceconfig.json, SM_TRAINING_ENV);
- Session(cluster=...) and Estimator(cluster=...) give the job spec's cluster fields (the
  estimator's over the session's), instance_count takes that many of the hosts, and a bad
  cluster is refused naming the key;
- an estimator job over 2 network-namespace hosts (tests/support/netns_hosts.sh) through mpirun
  with the distribution's custom_mpi_options (its rsh agent): every rank on its host, one
  all_reduce across them, the model written to /opt/ml/model in the job's model folder;
- the same job through Slurm (tests/support/slurm_cluster.sh --netns: one slurmd per namespace
  host; heft train submits a batch job) from Session(cluster={"launcher": "slurm", ...}).
  Both skipped, saying why, where namespaces or Slurm cannot start."""
import glob
import json
import os
import subprocess
import sys
import tempfile
import unittest

import support

sys.path.append(os.path.join(support.BINARY_DIR, "python"))
os.environ.setdefault("HEFT_BIN", support.HEFT)

import heft.estimator as sagemaker  # noqa: E402

WORKER = support.worker("cluster_worker.py")
HOSTS = os.path.join(support.SOURCE_DIR, "tests", "support", "netns_hosts.sh")
RSH = os.path.join(support.SOURCE_DIR, "tests", "support", "netns_rsh.sh")
SLURM = os.path.join(support.SOURCE_DIR, "tests", "support", "slurm_cluster.sh")


def seen(home, job):
    out = {}
    for path in glob.glob(os.path.join(home, "jobs", job, "output", "data", "seen-*.json")):
        with open(path) as f:
            s = json.load(f)
        out[s["rank"]] = s
    return out


class Cluster(unittest.TestCase):
    def test_instance_type_reaches_the_workers(self):
        with tempfile.TemporaryDirectory() as home:
            est = sagemaker.Estimator(entry_point=WORKER, instance_count=2, processes_per_host=1,
                                      instance_type="ml.c5.2xlarge",
                                      sagemaker_session=sagemaker.Session(heft_home=home))
            est.fit(job_name="itype", logs=False)
            s = seen(home, "itype")
            self.assertEqual(sorted(s), [0, 1])
            for r in s.values():
                self.assertEqual(r["sum"], 3.0)
                for key in ("instance_type", "resource_instance_type",
                            "training_env_instance_type"):
                    self.assertEqual(r[key], "ml.c5.2xlarge", r)

    def test_the_session_and_the_estimator_give_the_spec_its_cluster(self):
        with tempfile.TemporaryDirectory() as home:
            session = sagemaker.Session(heft_home=home, cluster={
                "launcher": "mpirun", "hosts": ["n1", "n2", "n3"], "store_address": "10.0.0.1"})
            est = sagemaker.Estimator(entry_point=WORKER, instance_count=2,
                                      sagemaker_session=session)
            self.assertEqual(est.job_spec()["cluster"],
                             {"launcher": "mpirun", "hosts": ["n1", "n2"],
                              "store_address": "10.0.0.1", "instance_count": 2,
                              "instance_type": "local"})
            est = sagemaker.Estimator(entry_point=WORKER, instance_count=1,
                                      sagemaker_session=session,
                                      cluster={"launcher": "slurm", "srun_options": "-p x"})
            self.assertEqual(est.job_spec()["cluster"]["launcher"], "slurm")
            self.assertEqual(est.job_spec()["cluster"]["srun_options"], "-p x")
            with self.assertRaisesRegex(ValueError, "instance_count=4 but cluster\\['hosts'\\] "
                                                    "names 3 host"):
                sagemaker.Estimator(entry_point=WORKER, instance_count=4,
                                    sagemaker_session=session).job_spec()
            with self.assertRaisesRegex(ValueError, "cluster: unknown key 'nodes'"):
                sagemaker.Session(heft_home=home, cluster={"nodes": 2})
            with self.assertRaisesRegex(ValueError, "cluster\\['hosts'\\]: expected a list"):
                sagemaker.Estimator(entry_point=WORKER, cluster={"hosts": "n1,n2"})
            with self.assertRaisesRegex(ValueError, "instance_count.*the estimator's own"):
                sagemaker.Estimator(entry_point=WORKER, cluster={"instance_count": 2})

    def test_an_estimator_job_over_two_namespace_hosts_through_mpirun(self):
        check = subprocess.run([HOSTS, "check"], capture_output=True, text=True)
        if check.returncode != 0:
            self.skipTest("no namespace hosts here: " + (check.stdout + check.stderr).strip())
        prefix = "hpy%d" % (os.getpid() % 100000)
        up = subprocess.run([HOSTS, "up", "2", "--net", "79", "--prefix", prefix],
                            capture_output=True, text=True)
        self.assertEqual(up.returncode, 0, up.stdout + up.stderr)
        old = os.environ.get("NETNS_PREFIX")
        os.environ["NETNS_PREFIX"] = prefix  # the rsh agent's, in heft train's environment
        try:
            with tempfile.TemporaryDirectory() as home:
                session = sagemaker.Session(heft_home=home, cluster={
                    "launcher": "mpirun", "hosts": ["10.79.0.11", "10.79.0.12"]})
                est = sagemaker.Estimator(
                    entry_point=WORKER, instance_count=2, instance_type="ml.m5.xlarge",
                    sagemaker_session=session,
                    distribution={"mpi": {"enabled": True, "processes_per_host": 2,
                                          "custom_mpi_options":
                                              "--mca plm_rsh_agent %s --mca oob_tcp_if_include "
                                              "10.79.0.0/24" % RSH}})
                est.fit(job_name="mpi-hosts", logs=False)
                self.check_job(home, "mpi-hosts", est)
                for rank, r in seen(home, "mpi-hosts").items():
                    self.assertEqual(r["uts"], "h%d" % (rank // 2 + 1), r)
                    self.assertEqual(r["host"], "10.79.0.%d" % (11 + rank // 2), r)
        finally:
            if old is None:
                os.environ.pop("NETNS_PREFIX", None)
            else:
                os.environ["NETNS_PREFIX"] = old
            subprocess.run("pkill -9 -f 'oob_tcp_if_include 10.79.0.0/2[4]'", shell=True)
            subprocess.run([HOSTS, "down", "--prefix", prefix], capture_output=True)

    def check_job(self, home, job, est):
        s = seen(home, job)
        self.assertEqual(sorted(s), [0, 1, 2, 3])
        for r in s.values():
            self.assertEqual((r["world"], r["sum"]), (4, 10.0), r)
            self.assertEqual(r["instance_type"], "ml.m5.xlarge")
        self.assertEqual(len({r["host"] for r in s.values()}), 2, s)  # two hosts
        with open(os.path.join(home, "jobs", job, "model", "model.pt")) as f:
            self.assertEqual(f.read(), "model of 4 ranks\n")
        self.assertEqual(est.latest_training_job.describe()["TrainingJobStatus"], "Completed")

    def test_an_estimator_job_through_slurm(self):
        for check in ([SLURM, "check"], [HOSTS, "check"]):
            c = subprocess.run(check, capture_output=True, text=True)
            if c.returncode != 0:
                self.skipTest((c.stdout + c.stderr).strip())
        cluster = tempfile.mkdtemp(prefix="heft-slurm-est-")
        up = subprocess.run([SLURM, "up", cluster, "2", "--netns"], capture_output=True, text=True)
        old = os.environ.get("SLURM_CONF")
        try:
            self.assertEqual(up.returncode, 0, up.stdout + up.stderr)
            conf = [w.split("=", 1)[1] for w in up.stdout.split() if w.startswith("SLURM_CONF=")]
            self.assertTrue(conf, up.stdout)
            os.environ["SLURM_CONF"] = conf[0].strip("'\"")
            with tempfile.TemporaryDirectory() as home:
                session = sagemaker.Session(heft_home=home, cluster={
                    "launcher": "slurm", "store_address": "10.76.0.1"})
                est = sagemaker.Estimator(entry_point=WORKER, instance_count=2,
                                          processes_per_host=2, instance_type="ml.m5.xlarge",
                                          sagemaker_session=session)
                est.fit(job_name="slurm-hosts", logs=False)
                self.check_job(home, "slurm-hosts", est)
        finally:
            if old is None:
                os.environ.pop("SLURM_CONF", None)
            else:
                os.environ["SLURM_CONF"] = old
            subprocess.run([SLURM, "down", cluster], capture_output=True)


if __name__ == "__main__":
    support.main_guard()
    unittest.main(verbosity=2)
