# ctest-labels: multiproc
"""heft-train's layout trials (auto_layout_trials, src/heft/train/layout_trials.h) on 2 real
ranks under `heft run -n 2`: the trials ran (rank 0's `layout trial i/K` lines, K >= 2), the
fastest of them ran off (`layout runoff` lines) and the runoff's fastest won, every rank printed
the same choice, the final `layout:` line names the winning trial and its calibrated prediction
(the prediction x the runoff's median measured / predicted), and the run
trained exactly as a run given that layout explicitly (the same step losses: the trials left
torch's generator and the data where they were). Also: auto_layout_trials 0 runs none, a bad
value is an error naming the hyperparameter, and a job whose spec sets the key records the
winning trial (layout:trial, layout:trials) and `heft describe` shows it."""
import os
import re
import subprocess
import tempfile
import unittest

import support

TRAIN = os.path.join(support.BINARY_DIR, "heft-train")
GPT = ["--model", "gpt", "--n_layer", "2", "--n_embd", "64", "--n_head", "4", "--block_size", "16",
       "--batch_size", "8", "--max_steps", "4", "--log_every", "1", "--eval", "false", "--seed", "3",
       "--lr", "0.01", "--warmup_steps", "0"]
# The trials' window, widened: the model's second layout is often 1.3x the first (activation
# checkpointing's recompute), and on a loaded machine the measured collective costs move the
# rest past 1.3x: then no trial runs and the test would see none.
WITHIN = "10"
CHOSE = re.compile(r"^\[rank (\d+)\] layout trials: chose d(\d+) s(\d+) t(\d+) p(\d+) m(\d+) v(\d+)( ckpt)? "
                   r"\(trial (\d+) of (\d+),")


def train(*args):
    p = subprocess.run([support.HEFT, "run", "-n", "2", "--", TRAIN] + GPT + list(args), capture_output=True,
                       text=True, timeout=300, env=support.clean_env(HEFT_LAYOUT_TRIAL_WITHIN=WITHIN))
    return p.returncode, p.stdout + p.stderr


def losses(out):
    """The step losses the reporting rank printed (rank 0, or a pipeline's last stage)."""
    by_rank = {}
    for rank, loss in re.findall(r"^\[rank (\d+)\] step=\d+ epoch=\d+ loss=([0-9.]+)", out, re.M):
        by_rank.setdefault(int(rank), []).append(float(loss))
    return by_rank[min(by_rank)] if by_rank else []


def explicit_args(layout, ckpt):
    d, s, t, p, m, v = layout
    a = ["--sharded_data_parallel_degree", str(s), "--tensor_parallel_degree", str(t), "--partitions", str(p)]
    a += ["--microbatches", str(m), "--virtual_stages", str(v)] if p > 1 else ["--gradient_accumulation", str(m)]
    return a + (["--activation_checkpointing", "true"] if ckpt else [])


class LayoutTrials(unittest.TestCase):
    def test_trials_pick_one_layout_everywhere_and_train_as_that_layout_given(self):
        rc, out = train("--auto_layout", "true", "--memory_limit_gb", "4", "--auto_layout_trials", "3")
        self.assertEqual(rc, 0, out)
        trials = re.findall(r"^\[rank 0\] layout trial (\d+)/(\d+): (d\d+ s\d+ t\d+ p\d+ m\d+ v\d+(?: ckpt)?) "
                            r"predicted ([0-9.]+) ms measured ([0-9.]+) ms x[0-9.]+ \(rounds [0-9. ]+ ms\)$", out, re.M)
        runoff = re.findall(r"^\[rank 0\] layout runoff (\d+)/(\d+): (d\d+ s\d+ t\d+ p\d+ m\d+ v\d+(?: ckpt)?) "
                            r"\(trial (\d+)\) predicted ([0-9.]+) ms measured ([0-9.]+) ms x([0-9.]+)$", out, re.M)
        self.assertGreaterEqual(len(trials), 2, out)
        self.assertEqual([int(t[0]) for t in trials], list(range(1, len(trials) + 1)), out)
        self.assertTrue(all(int(t[1]) == len(trials) for t in trials), out)
        self.assertEqual(len({t[2] for t in trials}), len(trials), out)  # distinct layouts
        chosen = [m for m in map(CHOSE.match, out.splitlines()) if m]
        self.assertEqual(sorted(int(m.group(1)) for m in chosen), [0, 1], out)  # every rank said
        self.assertEqual(len({m.groups()[1:] for m in chosen}), 1, out)         # the same choice
        c = chosen[0]
        layout = tuple(int(c.group(i)) for i in range(2, 8))
        trial, of = int(c.group(9)), int(c.group(10))
        self.assertEqual(of, len(trials), out)
        measured = [float(t[4]) for t in trials]
        # The runoff: the fastest trial first, at most 3 by their figures and the prediction's
        # first, each named by its trial; the chosen is the runoff's fastest.
        self.assertTrue(1 <= len(runoff) <= 4, out)
        self.assertIn(1, [int(r[3]) for r in runoff], out)
        self.assertEqual(measured[int(runoff[0][3]) - 1], min(measured), out)
        self.assertTrue(all(trials[int(r[3]) - 1][2] == r[2] for r in runoff), out)
        ran_off = {int(r[3]): float(r[5]) for r in runoff}
        self.assertIn(trial, ran_off, out)
        self.assertEqual(ran_off[trial], min(ran_off.values()), out)  # the runoff's fastest
        self.assertEqual(trials[trial - 1][2], "d%d s%d t%d p%d m%d v%d" % layout + (" ckpt" if c.group(8) else ""))
        scale = re.search(r"^\[rank 0\] layout trials: calibration x([0-9.]+) \(measured / predicted, median of "
                          r"the runoff's (\d+)\); trials [0-9.]+ s, runoff [0-9.]+ s$", out, re.M)
        self.assertIsNotNone(scale, out)
        self.assertEqual(int(scale.group(2)), len(runoff), out)
        ratios = sorted(float(r[6]) for r in runoff)
        median = (ratios[(len(ratios) - 1) // 2] + ratios[len(ratios) // 2]) / 2
        self.assertAlmostEqual(float(scale.group(1)), median, delta=0.011, msg=out)  # printed to 0.01
        final = re.search(r"^\[rank 0\] layout: data=(\d+) sharded=(\d+) tensor=(\d+) pipeline=(\d+) "
                          r"microbatches=(\d+) virtual_stages=(\d+) .*predicted_step_s=([0-9.]+) .*"
                          r"calibrated_step_s=([0-9.]+) .* trial=(\d+) trials=(\d+)$", out, re.M)
        self.assertIsNotNone(final, out)
        self.assertEqual(tuple(int(final.group(i)) for i in range(1, 7)), layout, out)
        self.assertEqual((int(final.group(9)), int(final.group(10))), (trial, of), out)
        calibrated = float(final.group(7)) * float(scale.group(1))
        self.assertAlmostEqual(float(final.group(8)), calibrated, delta=0.01 * calibrated + 1e-4, msg=out)
        auto = losses(out)
        self.assertEqual(len(auto), 4, out)
        rc, given = train(*explicit_args(layout, bool(c.group(8))))
        self.assertEqual(rc, 0, given)
        # The same layout, ranks and threads: the same arithmetic; the printed 4 decimals agree.
        worst = max(abs(a - b) for a, b in zip(auto, losses(given)))
        self.assertEqual(auto, losses(given), f"largest difference {worst}\n{out}\n{given}")

    def test_zero_runs_none_and_a_bad_value_names_the_hyperparameter(self):
        rc, out = train("--auto_layout", "true", "--memory_limit_gb", "4", "--auto_layout_trials", "0")
        self.assertEqual(rc, 0, out)
        self.assertIn("[rank 0] layout trials: none (auto_layout_trials 0)", out)
        self.assertNotIn("layout trial 1/", out)
        self.assertRegex(out, r"layout: .* trial=0 trials=0")
        self.assertNotIn("calibrated_step_s", out)  # no trials, nothing to calibrate with
        rc, out = train("--auto_layout", "true", "--auto_layout_trials", "17")
        self.assertEqual(rc, 2, out)
        self.assertIn("hyperparameters.auto_layout_trials: expected an integer from 0 to 16, found 17", out)
        rc, out = train("--auto_layout_trials", "2")
        self.assertEqual(rc, 2, out)
        self.assertIn("hyperparameters.auto_layout_trials: applies with auto_layout true only", out)

    def test_a_job_spec_sets_the_trials_and_describe_shows_the_winner(self):
        with tempfile.TemporaryDirectory() as tmp:
            spec = os.path.join(tmp, "spec.yaml")
            with open(spec, "w") as f:
                f.write("name: trials-gpt\nentry_point: heft-train\n"
                        "hyperparameters: {model: gpt, n_layer: 2, n_head: 4, n_embd: 64, block_size: 16, "
                        "batch_size: 8, max_steps: 3, eval: false}\n"
                        "cluster: {instance_count: 1, processes_per_host: 2}\n"
                        "distribution:\n  modelparallel: {enabled: true, parameters: "
                        "{auto_layout: true, memory_limit_gb: 4, auto_layout_trials: 2}}\n"
                        f"environment: {{HEFT_LAYOUT_TRIAL_WITHIN: '{WITHIN}'}}\n")
            env = support.clean_env(HEFT_HOME=os.path.join(tmp, "home"))
            heft = lambda *a: subprocess.run([support.HEFT] + list(a), capture_output=True, text=True,
                                             timeout=300, env=env)
            t = heft("train", spec)
            self.assertEqual(t.returncode, 0, t.stdout + t.stderr)
            log = heft("logs", "trials-gpt", "--rank", "0").stdout
            self.assertIn("layout trial 2/2: ", log)
            d = heft("describe", "trials-gpt")
            self.assertEqual(d.returncode, 0, d.stdout + d.stderr)
            self.assertRegex(d.stdout, r"Layout: data \d x sharded \d x tensor \d x pipeline \d, .* measured "
                                       r"[0-9.]+ s/step, calibrated [0-9.]+ s/step \(auto_layout, trial [12] of 2\)")
            bad = spec.replace("spec.yaml", "bad.yaml")
            with open(spec) as f:
                text = f.read()
            with open(bad, "w") as f:
                f.write(text.replace("auto_layout_trials: 2", "auto_layout_trials: -1"))
            b = heft("train", bad)
            self.assertEqual(b.returncode, 2, b.stdout + b.stderr)
            self.assertIn("distribution.modelparallel.parameters.auto_layout_trials: expected an integer from 0 to 16, "
                          "found -1", b.stdout + b.stderr)


if __name__ == "__main__":
    support.main_guard()
    unittest.main()
