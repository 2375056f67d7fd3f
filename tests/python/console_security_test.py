# ctest-labels: multiproc
"""The web console under attack, as a hostile local user or web page would try it, against
real `heft console` processes over a fresh HEFT_HOME holding one job and one tuning whose
specs carry an environment value (a planted API key):
- every /api/ read and stop without the token gets 401 (a wrong token, a wrong cookie too);
  the token as `Authorization: Bearer` or the cookie from POST /api/login (HttpOnly,
  SameSite=Strict) gets 200;
- a Host that is not the console's gets 403 (DNS rebinding); --allow-host adds one; a POST
  from another Origin gets 403;
- `--token VALUE` exits 2 saying why; the generated token is not in /proc/PID/cmdline and the
  URL file is mode 0600; --token-file must be 0600; HEFT_CONSOLE_TOKEN works;
- the planted value is in no API response (its name is);
- a 100 MiB body is refused (413) after only its headers were sent; 200 headers get 400;
- 16 connections that send half a request and stall do not keep a normal request from being
  served within 2 s, and the server cuts them off; one that trickles a byte every 0.5 s is
  cut off by the request deadline (10 s);
- every response carries the security headers; /api/tunings/%2e%2e and variants get 404 (a
  tuning record is planted where %2e%2e led);
- --no-auth only on loopback, read-only; a non-loopback address prints the plain-HTTP warning;
- --tls-cert/--tls-key serve HTTPS (Secure cookie)."""
import http.client
import json
import os
import re
import select
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import tempfile
import time
import unittest

import support

SECRET = "s3cr3t-4242-planted-value"
TOKEN_RE = re.compile(r"(https?)://(?:127\.0\.0\.1|localhost):(\d+)/(?:\?token=([0-9a-f]+))?")


def read(path):
    with open(path) as f:
        return f.read()


class ConsoleSecurity(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="heft-console-sec-")
        cls.home = os.path.join(cls.dir, "home")
        cls.env = support.clean_env(HEFT_HOME=cls.home)
        cls.env.pop("HEFT_CONSOLE_TOKEN", None)
        cls.procs = []
        job = ("entry_point: [/bin/sh, -c, 'echo loss=0.5']\n"
               f"environment: {{SECRET_API_KEY: {SECRET}}}\n"
               "metric_definitions: [{name: loss, regex: 'loss=([0-9.]+)'}]\n")
        cls.write("job.yaml", "name: envjob\n" + job)
        cls.write("tune.yaml", "name: envtune\nobjective: {metric: loss, type: Minimize}\n"
                  "strategy: Grid\nmax_jobs: 1\nmax_parallel_jobs: 1\n"
                  "hyperparameter_ranges:\n  categorical: [{name: opt, values: [sgd]}]\n"
                  "training_job:\n" + "".join("  " + l + "\n" for l in job.splitlines()))
        for cmd in (["train", "job.yaml"], ["tune", "tune.yaml"]):
            r = subprocess.run([support.HEFT] + cmd, cwd=cls.dir, env=cls.env,
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stdout + r.stderr
        # A tuning record one level above the tunings folder, where /api/tunings/%2e%2e led.
        shutil.copy(os.path.join(cls.home, "tunings", "envtune", "tuning.json"),
                    os.path.join(cls.home, "tuning.json"))
        cls.proc, out = cls.start_console([])
        cls.scheme, cls.port, cls.token = cls.parse_url(out)

    @classmethod
    def tearDownClass(cls):
        for p in cls.procs:
            if p.poll() is None:
                p.terminate()
            p.wait(timeout=20)
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def write(cls, name, text, mode=0o600):
        path = os.path.join(cls.dir, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)
        return path

    @classmethod
    def start_console(cls, args, env=None):
        """Starts `heft console --port 0 ARGS`; (process, first output line with a URL)."""
        out = os.path.join(cls.dir, f"console-{len(cls.procs)}.out")
        with open(out, "w") as f:
            p = subprocess.Popen([support.HEFT, "console", "--port", "0"] + args,
                                 env=env or cls.env, stdout=f, stderr=subprocess.STDOUT)
        cls.procs.append(p)
        deadline = time.time() + 30
        while time.time() < deadline:
            text = read(out)
            if TOKEN_RE.search(text) or p.poll() is not None:
                return p, text
            time.sleep(0.05)
        raise AssertionError("heft console did not start: " + read(out))

    @staticmethod
    def parse_url(text):
        m = TOKEN_RE.search(text)
        assert m, text
        return m.group(1), int(m.group(2)), m.group(3)

    def request(self, method, path, headers=None, body=None, port=None, host=None, tls=False):
        """(status, headers as a dict with lower-case names, body text)."""
        port = port or self.port
        if tls:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            c = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=ctx)
        else:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            c.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            c.putheader("Host", host if host is not None else f"127.0.0.1:{port}")
            for k, v in (headers or {}).items():
                c.putheader(k, v)
            if body is not None or method == "POST":
                c.putheader("Content-Length", str(len(body or b"")))
            c.endheaders(body)
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
        finally:
            c.close()

    def auth(self, token=None):
        return {"Authorization": "Bearer " + (token or self.token)}

    READS = ["/api/jobs", "/api/jobs/envjob", "/api/jobs/envjob/metrics",
             "/api/jobs/envjob/logs?rank=0&offset=0", "/api/jobs/envjob/diagnosis",
             "/api/tunings/envtune", "/api/jobs/envtune-001"]

    def test_reads_and_stops_need_the_token(self):
        for path in self.READS:
            for headers in ({}, self.auth("0" * 64), {"Cookie": f"heft_console_{self.port}=" + "0" * 64},
                            {"Cookie": f"heft_console_{self.port}=" + self.token}):
                status, h, body = self.request("GET", path, headers)
                self.assertEqual(status, 401, (path, headers, body))
                self.assertEqual(h.get("www-authenticate"), "Bearer")
            status, _, body = self.request("GET", path, self.auth())
            self.assertEqual(status, 200, (path, body))
        status, _, _ = self.request("POST", "/api/jobs/envjob/stop")
        self.assertEqual(status, 401)
        status, _, body = self.request("POST", "/api/jobs/envjob/stop", self.auth())
        self.assertEqual((status, json.loads(body)["stop"]), (200, "already ended"))
        # The page shell loads without the token (it holds no data).
        self.assertEqual(self.request("GET", "/")[0], 200)

    def test_login_gives_an_httponly_strict_cookie(self):
        status, _, _ = self.request("POST", "/api/login", self.auth("f" * 64))
        self.assertEqual(status, 401)
        status, h, _ = self.request("POST", "/api/login", self.auth())
        self.assertEqual(status, 200)
        cookie = h["set-cookie"]
        self.assertIn("HttpOnly", cookie)
        self.assertIn("SameSite=Strict", cookie)
        self.assertNotIn(self.token, cookie)  # a session secret, not the token
        pair = cookie.split(";")[0]
        self.assertTrue(pair.startswith(f"heft_console_{self.port}="), cookie)
        status, _, body = self.request("GET", "/api/jobs", {"Cookie": "other=1; " + pair})
        self.assertEqual(status, 200, body)

    def test_host_and_origin_are_checked(self):
        for host in ("evil.example", "evil.example:%d" % self.port, "127.0.0.1.evil.example", ""):
            for path in ("/", "/api/jobs"):
                status, _, body = self.request("GET", path, self.auth(), host=host)
                self.assertEqual(status, 403, (host, path, body))
        for host in ("localhost:%d" % self.port, "[::1]:%d" % self.port, "LOCALHOST"):
            self.assertEqual(self.request("GET", "/api/jobs", self.auth(), host=host)[0], 200, host)
        evil = {"Origin": "http://evil.example", **self.auth()}
        self.assertEqual(self.request("POST", "/api/jobs/envjob/stop", evil)[0], 403)
        self.assertEqual(self.request("POST", "/api/login", evil)[0], 403)
        other_port = {"Origin": "http://127.0.0.1:1", **self.auth()}
        self.assertEqual(self.request("POST", "/api/jobs/envjob/stop", other_port)[0], 403)
        same = {"Origin": f"http://127.0.0.1:{self.port}", **self.auth()}
        self.assertEqual(self.request("POST", "/api/jobs/envjob/stop", same)[0], 200)
        # --allow-host adds a name.
        p, out = self.start_console(["--allow-host", "console.example"])
        _, port, token = self.parse_url(out)
        self.assertEqual(self.request("GET", "/api/jobs", self.auth(token), port=port,
                                      host="console.example:%d" % port)[0], 200)
        self.assertEqual(self.request("GET", "/api/jobs", self.auth(token), port=port,
                                      host="evil.example")[0], 403)
        p.terminate()

    def test_token_on_the_command_line_is_refused(self):
        r = subprocess.run([support.HEFT, "console", "--port", "0", "--token", "a" * 32],
                           env=self.env, capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        for why in ("--token is refused", "ps", "--token-file", "HEFT_CONSOLE_TOKEN"):
            self.assertIn(why, r.stderr)

    def test_the_token_is_in_no_argv_and_no_readable_file(self):
        with open(f"/proc/{self.proc.pid}/cmdline", "rb") as f:
            cmdline = f.read().decode()
        self.assertNotIn(self.token, cmdline)
        url_file = os.path.join(self.home, "console", f"{self.port}.url")
        self.assertEqual(stat.S_IMODE(os.stat(url_file).st_mode), 0o600)
        self.assertIn(self.token, read(url_file))
        # A token file others can read is refused; one only its owner reads is used.
        token = "t" * 40
        loose = self.write("loose.token", token + "\n", 0o644)
        r = subprocess.run([support.HEFT, "console", "--port", "0", "--token-file", loose],
                           env=self.env, capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("chmod 600", r.stderr)
        tight = self.write("tight.token", token + "\n", 0o600)
        for args, env in ((["--token-file", tight], None),
                          ([], dict(self.env, HEFT_CONSOLE_TOKEN=token))):
            p, out = self.start_console(args, env)
            _, port, printed = self.parse_url(out)
            self.assertIsNone(printed, out)  # a token the user chose is never printed
            with open(f"/proc/{p.pid}/cmdline", "rb") as f:
                self.assertNotIn(token, f.read().decode())
            self.assertEqual(self.request("GET", "/api/jobs", port=port)[0], 401)
            self.assertEqual(self.request("GET", "/api/jobs", self.auth(token), port=port)[0], 200)
            p.terminate()

    def test_environment_values_are_never_served(self):
        job = json.loads(self.request("GET", "/api/jobs/envjob", self.auth())[2])
        self.assertEqual(job["spec"]["environment"], ["SECRET_API_KEY"])
        for path in self.READS + ["/api/jobs/envjob/logs?rank=0"]:
            status, _, body = self.request("GET", path, self.auth())
            self.assertEqual(status, 200, path)
            self.assertNotIn(SECRET, body, path)

    def raw(self, data, read_timeout=5.0):
        """Sends `data` on a new connection; the reply (whatever came before the close)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=read_timeout) as s:
            s.sendall(data)
            reply = b""
            try:
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    reply += chunk
            except (socket.timeout, ConnectionResetError):
                pass
            return reply.decode(errors="replace")

    def test_a_100_mib_body_is_refused_before_it_is_read(self):
        head = (f"POST /api/jobs/envjob/stop HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
                f"Authorization: Bearer {self.token}\r\nContent-Length: {100 << 20}\r\n\r\n")
        start = time.monotonic()
        reply = self.raw(head.encode() + b"x" * 4096)  # the rest of the 100 MiB never comes
        self.assertTrue(reply.startswith("HTTP/1.1 413"), reply)
        self.assertLess(time.monotonic() - start, 2.0)
        # Without the token too: the size is refused before anything else is looked at.
        reply = self.raw(head.replace(f"Authorization: Bearer {self.token}\r\n", "").encode())
        self.assertTrue(reply.startswith("HTTP/1.1 413"), reply)
        chunked = head.replace(f"Content-Length: {100 << 20}", "Transfer-Encoding: chunked")
        self.assertTrue(self.raw(chunked.encode() + b"10000\r\n").startswith("HTTP/1.1 411"))
        many = (f"GET /api/jobs HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
                f"Authorization: Bearer {self.token}\r\n"
                + "".join(f"X-H{i}: {i}\r\n" for i in range(200)) + "\r\n")
        self.assertTrue(self.raw(many.encode()).startswith("HTTP/1.1 400"))

    def test_slow_connections_do_not_stall_the_console(self):
        half = f"GET /api/jobs HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nX-Slow: ".encode()
        slow = []
        try:
            for _ in range(16):
                s = socket.create_connection(("127.0.0.1", self.port), timeout=30)
                s.sendall(half)
                slow.append(s)
            time.sleep(0.5)
            start = time.monotonic()
            status, _, _ = self.request("GET", "/api/jobs", self.auth())
            took = time.monotonic() - start
            self.assertEqual(status, 200)
            self.assertLess(took, 2.0)
            # The server cuts the stalled ones off (its request deadline, 10 s): a 400 or
            # nothing, then the end of the connection.
            start = time.monotonic()
            for s in slow:
                reply = b""
                while True:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    reply += chunk
                self.assertTrue(reply == b"" or reply.startswith(b"HTTP/1.1 400"), reply)
            self.assertLess(time.monotonic() - start, 20)
            print(f"a request beside 16 stalled connections: {took * 1000:.0f} ms")
        finally:
            for s in slow:
                s.close()

    def test_a_trickling_client_is_cut_off(self):
        """One header byte every 0.5 s never waits 5 s on a read: only the request deadline
        (10 s from the connection being taken) ends it."""
        start = time.monotonic()
        ended = None
        with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
            s.sendall(f"GET /api/jobs HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nX-Slow: ".encode())
            while time.monotonic() - start < 25:
                try:
                    s.sendall(b"a")
                    readable, _, _ = select.select([s], [], [], 0.5)
                    if readable:
                        s.recv(4096)  # the 400 or the end: either way, cut off
                        ended = time.monotonic() - start
                        break
                except OSError:
                    ended = time.monotonic() - start
                    break
        self.assertIsNotNone(ended, "a client trickling its headers was never cut off")
        self.assertGreater(ended, 8)
        self.assertLess(ended, 15)

    def test_security_headers_on_every_response(self):
        for path, headers, expected in (("/", {}, 200), ("/app.js", {}, 200), ("/api/jobs", {}, 401),
                                        ("/api/jobs", self.auth(), 200),
                                        ("/api/jobs/nope", self.auth(), 404)):
            status, h, _ = self.request("GET", path, headers)
            self.assertEqual(status, expected, path)
            csp = h.get("content-security-policy", "")
            self.assertIn("frame-ancestors 'none'", csp, path)
            self.assertIn("script-src 'self'", csp, path)
            self.assertNotIn("unsafe-inline", csp)
            self.assertEqual(h.get("x-content-type-options"), "nosniff", path)
            self.assertEqual(h.get("x-frame-options"), "DENY", path)
            self.assertEqual(h.get("referrer-policy"), "no-referrer", path)

    def test_traversal_gets_404(self):
        for path in ("/api/tunings/%2e%2e", "/api/tunings/..", "/api/tunings/%2E%2E",
                     "/api/tunings/%2e%2e%2f%2e%2e", "/api/tunings/..%2fjobs",
                     "/api/tunings/%252e%252e", "/api/tunings/.", "/api/tunings/.hidden",
                     "/api/jobs/%2e%2e", "/api/jobs/..%2fenvjob/logs?rank=0",
                     "/api/jobs/%2e%2e/metrics", "/api/tunings/envtune%2f..%2f..",
                     "/api/jobs/%2e%2e/stop"):
            method = "POST" if path.endswith("/stop") else "GET"
            status, _, body = self.request(method, path, self.auth())
            self.assertEqual(status, 404, (path, body))
        self.assertEqual(self.request("GET", "/api/tunings/envtune", self.auth())[0], 200)

    def test_no_auth_is_loopback_only_and_read_only(self):
        r = subprocess.run([support.HEFT, "console", "--port", "0", "--no-auth", "--host", "0.0.0.0"],
                           env=self.env, capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("--no-auth is for a loopback address only", r.stderr)
        p, out = self.start_console(["--no-auth"])
        self.assertIn("WITHOUT A TOKEN", out)
        self.assertIn("read-only", out)
        _, port, token = self.parse_url(out)
        self.assertIsNone(token)
        self.assertEqual(self.request("GET", "/api/jobs", port=port)[0], 200)
        self.assertEqual(self.request("GET", "/api/jobs", port=port, host="evil.example")[0], 403)
        status, _, body = self.request("POST", "/api/jobs/envjob/stop", port=port)
        self.assertEqual(status, 403)
        self.assertIn("read-only", body)
        p.terminate()

    def test_beyond_loopback_warns_of_plain_http(self):
        p, out = self.start_console(["--host", "0.0.0.0"])
        time.sleep(0.3)
        out = read(os.path.join(self.dir, f"console-{len(self.procs) - 1}.out"))
        self.assertIn("warning: serving plain HTTP on 0.0.0.0", out)
        p.terminate()

    def test_https_with_tls_cert_and_key(self):
        if not shutil.which("openssl"):
            self.skipTest("no openssl command to make a certificate")
        cert, key = os.path.join(self.dir, "cert.pem"), os.path.join(self.dir, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=localhost", "-keyout", key, "-out", cert],
                       check=True, capture_output=True, timeout=60)
        p, out = self.start_console(["--tls-cert", cert, "--tls-key", key])
        scheme, port, token = self.parse_url(out)
        self.assertEqual(scheme, "https")
        self.assertEqual(self.request("GET", "/api/jobs", port=port, tls=True)[0], 401)
        status, h, _ = self.request("POST", "/api/login", self.auth(token), port=port, tls=True)
        self.assertEqual(status, 200)
        self.assertIn("Secure", h["set-cookie"])
        status, h, body = self.request("GET", "/api/jobs/envjob", self.auth(token), port=port, tls=True)
        self.assertEqual(status, 200)
        self.assertNotIn(SECRET, body)
        self.assertEqual(h.get("x-frame-options"), "DENY")
        p.terminate()


if __name__ == "__main__":
    support.main_guard()
    unittest.main()
