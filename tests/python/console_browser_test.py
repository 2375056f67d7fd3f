# ctest-labels: multiproc
"""The web console in Debian's Chromium (headless, driven by selenium): while a job runs it
opens the console, sees the job InProgress in the jobs table, opens the job's page and finds
the loss plot drawn with data points (Chart.js has the points, and the canvas has drawn
pixels: not an empty canvas); the screenshot is kept in build/test-artifacts/console.png.
The browser logs in as a user does, by opening the URL heft console printed: the token
leaves the address bar, the session cookie is HttpOnly and SameSite=Strict, and the page
breaks no rule of its Content-Security-Policy. Without the token the API answers 401 and
the page asks for it. A finished grid tuning's page shows every trial in its table, one
objective point per trial in its plot, and the best trial. A job whose rank 1 alone reports
opens its log pane on rank 1, and dates show as ISO 8601. Skipped (exit 77) where Chromium,
chromedriver or selenium are missing."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import support

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WORKER = os.path.join(support.BINARY_DIR, "test-workers", "step_worker")
ARTIFACTS = os.path.join(support.BINARY_DIR, "test-artifacts")

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # pragma: no cover
    webdriver = None


def skip_reason():
    if webdriver is None:
        return "python3-selenium is not installed"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.path.exists(path):
            return f"{path} is missing (setup.sh installs chromium and chromium-driver)"
    return ""


class Console(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="heft-console-")
        self.env = support.clean_env(HEFT_HOME=os.path.join(self.dir, "home"))
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def start(self, args, out):
        with open(out, "w") as f:
            p = subprocess.Popen([support.HEFT] + args, env=self.env, stdout=f,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def console(self):
        """Starts heft console; sets self.token and returns its base URL."""
        out = os.path.join(self.dir, "console.out")
        self.start(["console", "--port", "0"], out)
        deadline = time.time() + 20
        while time.time() < deadline:
            with open(out) as f:
                m = re.search(r"http://127\.0\.0\.1:(\d+)/\?token=([0-9a-f]+)", f.read())
            if m:
                self.token = m.group(2)
                return f"http://127.0.0.1:{m.group(1)}"
            time.sleep(0.1)
        with open(out) as f:
            self.fail("heft console did not start: " + f.read())

    def api(self, url):
        req = urllib.request.Request(url, headers={"Authorization": "Bearer " + self.token})
        with urllib.request.urlopen(req) as r:
            return json.load(r)

    def log_in(self, driver, url, wait):
        """Opens the page as heft console's URL does; checks the token left the address."""
        driver.get(url + "/?token=" + self.token)
        wait.until(lambda d: "token=" not in d.current_url)
        wait.until(lambda d: d.get_cookie("heft_console_" + url.rsplit(":", 1)[1]))
        cookie = driver.get_cookie("heft_console_" + url.rsplit(":", 1)[1])
        self.assertTrue(cookie["httpOnly"])
        self.assertEqual(cookie["sameSite"], "Strict")
        self.assertNotIn(self.token, cookie["value"])
        self.assertIsNone(driver.execute_script("return document.cookie.match(/heft_console/);"))

    def assert_no_csp_violation(self, driver):
        logs = driver.get_log("browser")
        bad = [e["message"] for e in logs if "Content Security Policy" in e["message"]]
        self.assertEqual(bad, [])

    def browser(self):
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                  "--window-size=1400,1000"):
            options.add_argument(a)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)

    def test_tuning_page_in_the_browser(self):
        spec = os.path.join(self.dir, "tune.yaml")
        job = os.path.join(support.SOURCE_DIR, "tests", "tune", "quadratic_job.py")
        with open(spec, "w") as f:
            f.write("name: grid\nobjective: {metric: loss, type: Minimize}\nstrategy: Grid\n"
                    "max_jobs: 100\nmax_parallel_jobs: 2\n"
                    "hyperparameter_ranges:\n  integer: [{name: layers, min: 2, max: 4}]\n"
                    "  categorical: [{name: optimizer, values: [sgd, adam]}]\n"
                    f"training_job:\n  entry_point: [{sys.executable}, {job}]\n"
                    "  hyperparameters: {x: 0.3}\n"
                    "  metric_definitions: [{name: loss, regex: 'loss=([0-9.eE+-]+)'}]\n")
        tune = subprocess.run([support.HEFT, "tune", spec], env=self.env, capture_output=True,
                              text=True, timeout=300)
        self.assertEqual(tune.returncode, 0, tune.stdout + tune.stderr)
        url = self.console()
        api = self.api(url + "/api/tunings/grid")
        self.assertEqual(len(api["trials"]), 6)
        best = api["best_trial"]
        self.assertEqual(best["objective"], 0.0)  # layers 3, adam: the minimum
        driver = self.browser()
        try:
            wait = WebDriverWait(driver, 30)
            self.log_in(driver, url, wait)
            wait.until(lambda d: d.find_element(By.LINK_TEXT, "grid")).click()
            trial_rows = "//div[@id='trials']//tr[td]"
            rows = wait.until(lambda d: len(d.find_elements(By.XPATH, trial_rows)) == 6
                              and d.find_elements(By.XPATH, trial_rows))
            self.assertEqual(len(rows), 6)
            self.assertTrue(all("Completed" in r.text for r in rows), [r.text for r in rows])
            points = wait.until(lambda d: d.execute_script(
                "const c = document.getElementById('chart-tuning-objective');"
                "const ch = c && Chart.getChart(c);"
                "return ch && ch.data.datasets.length && ch.data.datasets[0].data.length;"))
            self.assertEqual(points, 6)
            summary = driver.find_element(By.ID, "tsummary").text
            self.assertIn(best["name"], summary)
            self.assertIn("Minimize loss", summary)
            os.makedirs(ARTIFACTS, exist_ok=True)
            driver.save_screenshot(os.path.join(ARTIFACTS, "console-tuning.png"))
            # A trial links to its job's page.
            rows[0].find_element(By.TAG_NAME, "a").click()
            wait.until(lambda d: "#/job/" in d.current_url)
            wait.until(lambda d: d.find_element(By.ID, "chart-loss"))
            self.assert_no_csp_violation(driver)
        finally:
            driver.quit()

    def test_running_job_in_the_browser(self):
        spec = os.path.join(self.dir, "spec.yaml")
        with open(spec, "w") as f:
            f.write("name: console-job\n"
                    f"entry_point: [{WORKER}, --steps, 600, --phase-ms, 20]\n"
                    "cluster: {processes_per_host: 2}\n"
                    "metric_definitions: [{name: 'train:loss', regex: 'loss=([0-9.]+)'}]\n")
        job = self.start(["train", spec], os.path.join(self.dir, "job.out"))
        url = self.console()
        # The API first: the job is there and has loss points.
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                metrics = self.api(url + "/api/jobs/console-job/metrics")
                if len(metrics.get("train:loss", {}).get("0", [])) >= 5:
                    break
            except urllib.error.HTTPError:
                pass
            time.sleep(0.5)
        else:
            self.fail("no loss points reached the console: " + open(os.path.join(self.dir, "job.out")).read())
        # Nothing without the token: reads and stops get 401.
        for path, data in (("/api/jobs", None), ("/api/jobs/console-job/stop", b"")):
            req = urllib.request.Request(url + path, data=data)
            with self.assertRaises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(req)
            self.assertEqual(e.exception.code, 401, path)

        driver = self.browser()
        try:
            wait = WebDriverWait(driver, 30)
            # Without the token the page asks for it; the token typed in logs it in.
            driver.get(url + "/")
            wait.until(lambda d: d.find_element(By.ID, "token"))
            driver.find_element(By.ID, "token").send_keys("0" * 64)
            driver.find_element(By.ID, "login").click()
            wait.until(lambda d: "refused" in d.find_element(By.ID, "main").text)
            self.log_in(driver, url, wait)
            link = wait.until(lambda d: d.find_element(By.LINK_TEXT, "console-job"))
            row = link.find_element(By.XPATH, "./ancestor::tr")
            self.assertIn("InProgress", row.text)
            self.assertRegex(row.text, r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")  # ISO 8601
            self.assertIsNone(job.poll(), "the job ended before the browser saw it running")
            link.click()
            points = wait.until(lambda d: d.execute_script(
                "const c = document.getElementById('chart-train_loss');"
                "const ch = c && Chart.getChart(c);"
                "return ch && ch.data.datasets.length && ch.data.datasets[0].data.length;"))
            self.assertGreaterEqual(points, 5)
            drawn = driver.execute_script(
                "const c = document.getElementById('chart-train_loss');"
                "const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
                "let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n;")
            self.assertGreater(drawn, 500, "the loss canvas is empty")
            # It updates while the job runs: more points a few seconds later.
            time.sleep(4.5)
            later = driver.execute_script(
                "return Chart.getChart(document.getElementById('chart-train_loss')).data.datasets[0].data.length;")
            self.assertGreater(later, points)
            log = wait.until(lambda d: d.find_element(By.ID, "log").text)
            self.assertIn("step=", log)
            os.makedirs(ARTIFACTS, exist_ok=True)
            shot = os.path.join(ARTIFACTS, "console.png")
            driver.save_screenshot(shot)
            self.assertGreater(os.path.getsize(shot), 10000)
            self.assert_no_csp_violation(driver)
            print(f"screenshot: {shot}; {later} loss points, {drawn} drawn pixels")
        finally:
            driver.quit()

    def test_log_pane_opens_on_the_reporting_rank(self):
        spec = os.path.join(self.dir, "rank1.yaml")
        with open(spec, "w") as f:
            f.write("name: rank-one\n"
                    "entry_point: [/bin/sh, -c, 'if [ \"$RANK\" = 1 ]; then echo loss=0.25 from-rank-1; "
                    "else echo quiet-rank-$RANK; fi']\n"
                    "cluster: {processes_per_host: 2}\n"
                    "metric_definitions: [{name: loss, regex: 'loss=([0-9.]+)'}]\n")
        r = subprocess.run([support.HEFT, "train", spec], env=self.env, capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        url = self.console()
        self.assertEqual(self.api(url + "/api/jobs/rank-one")["log_rank"], 1)
        driver = self.browser()
        try:
            wait = WebDriverWait(driver, 30)
            self.log_in(driver, url, wait)
            wait.until(lambda d: d.find_element(By.LINK_TEXT, "rank-one")).click()
            wait.until(lambda d: "from-rank-1" in d.find_element(By.ID, "log").text)
            self.assertNotIn("quiet-rank", driver.find_element(By.ID, "log").text)
            active = driver.find_element(By.CSS_SELECTOR, "#logbar button.active").text
            self.assertEqual(active, "rank 1")
        finally:
            driver.quit()


if __name__ == "__main__":
    support.main_guard()
    reason = skip_reason()
    if reason:
        print("SKIPPED:", reason)
        sys.exit(77)
    unittest.main()
