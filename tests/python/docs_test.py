# ctest-labels: unit
"""The docs match what is built. Parsed from README.md and docs/*.md (code blocks and inline
code):
- every `heft SUBCOMMAND ...` names a subcommand of build/heft, and each of its options is in
  that subcommand's --help; every `heft-train --name` is in build/heft-train --help;
- every hyperparameter of heft-train --help has a row in docs/training.md's table, and every
  `--set hyperparameters.NAME=...` on a heft-train spec names one of them;
- every metric a built-in job records (the trainer's metric definitions in
  src/heft/job/spec/spec.cc, the profiler's series in src/heft/profile/job_profiler.cc) is named in
  docs/;
- every link between the docs leads to a file and a heading that exist;
- every recorded run (a block with a `$ command` line and the output it printed) follows a
  `<!-- recorded: date=... machine=... cmd=... -->` marker whose cmd is the block's command,
  so that bench/refresh_docs.sh can re-run it (and the script lists them all and re-runs a
  fast one).
KNOWN lists the problems a doc still has, each with who fixes it; an entry that no longer
matches a problem fails the test, so the list only shrinks.
"""
import glob
import os
import re
import subprocess
import unittest

import support
from markdown_commands import (SHELL_LANGS, blocks, commands_in, commands_of, dollar_commands,
                               heading_anchor, hyperparameter_sets, parse_marker)

SOURCE = support.SOURCE_DIR
HEFT = support.HEFT
HEFT_TRAIN = os.path.join(support.BINARY_DIR, "heft-train")

# (file, problem text as reported below) -> who fixes it. Only docs this test's owner does not
# edit appear here.
NO_MARKER = ": no <!-- recorded: ... --> marker before the block"
KNOWN = {
}


def docs():
    """README.md and docs/*.md, as (path relative to the source tree, text)."""
    paths = [os.path.join(SOURCE, "README.md")]
    paths += sorted(glob.glob(os.path.join(SOURCE, "docs", "*.md")))
    out = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            out.append((os.path.relpath(p, SOURCE), f.read()))
    return out


def help_text(argv):
    r = subprocess.run(argv + ["--help"], capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


def option_names(help_out):
    """The options a CLI11 --help lists (`-n,--nproc-per-host`, `--name TEXT`, ...)."""
    return set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", help_out))


def heft_train_options(help_out):
    """heft-train's options: the lines of its --help that start with one (`  --lr 0.01 ...`,
    `--print-mesh: ...`), not the usage line's placeholders."""
    return set(re.findall(r"^\s*(--[A-Za-z][\w-]*)", help_out, re.M)) | {"--help", "-h"}


def builtin_metric_names():
    """The metrics a built-in job records: the trainer's metric definitions and the profiler's
    series (a name built with a number reads as coreN)."""
    with open(os.path.join(SOURCE, "src/heft/job/spec/spec.cc"), encoding="utf-8") as f:
        spec = f.read()
    body = re.search(r"builtin_metric_definitions\(\) \{(.*?)\n\}", spec, re.S)
    assert body, "builtin_metric_definitions() not found in src/heft/job/spec/spec.cc"
    names = set(re.findall(r'\{"([a-z_]+:[a-z_]+)",', body[1]))
    with open(os.path.join(SOURCE, "src/heft/profile/job_profiler.cc"), encoding="utf-8") as f:
        profiler = f.read()
    names |= set(re.findall(r'add\("([a-z_]+:[a-z_]+)"', profiler))
    built = r'"([a-z_]+:[a-z_]+)" \+ std::to_string\([^)]*\) \+ "([a-z_]+)"'
    for prefix, suffix in re.findall(built, profiler):
        names.add(prefix + "N" + suffix)
    return names


class Docs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        for binary in (HEFT, HEFT_TRAIN):
            if not os.access(binary, os.X_OK):
                raise AssertionError(binary + " is not built")  # ctest builds it first
        cls.docs = docs()
        cls.commands = [c for path, text in cls.docs for c in commands_of(path, text)]

    def check(self, kind, problems):
        """problems: (file, line, text starting with `kind: `). Fails on problems not in KNOWN
        (keyed by file and text, not the line, which moves) and on KNOWN entries of this kind
        that are no longer problems."""
        keys = {(f, t) for f, _, t in problems}
        new = sorted({(f, n, t) for f, n, t in problems if (f, t) not in KNOWN})
        fixed = [k for k in KNOWN if k[1].startswith(kind + ":") and k not in keys]
        msg = "".join(f"\n  {f}:{n}: {t}" for f, n, t in new)
        msg += "".join(f"\n  no longer a problem, drop it from KNOWN: {f}: {t}" for f, t in fixed)
        if new or fixed:
            self.fail(msg)

    def test_parser_finds_the_commands(self):
        # The parser itself: the README's main job and a heft-train option inside `heft run`.
        shown = {(c[0], c[3], c[4]) for c in self.commands}
        self.assertIn(("README.md", "heft", "train"), shown)
        self.assertIn(("README.md", "heft", "run"), shown)
        train_opts = {o for c in self.commands if c[3] == "heft-train" for o in c[5]}
        self.assertIn("--warmup_steps", train_opts)
        self.assertEqual(commands_in("heft run: --hosts must be at least 1"), [])
        self.assertEqual(commands_in("heft run -n 2 -- build/heft-train --lr=0.1"),
                         [("heft", "run", ["-n"]), ("heft-train", None, ["--lr"])])

    def test_heft_commands_and_options_exist(self):
        # `heft SUB --help` succeeds for every subcommand, the hidden ones (mpi-worker, ...)
        # included, and exits 2 naming an unknown one.
        self.assertNotEqual(help_text([HEFT, "no-such-command"])[0], 0)
        helps, problems = {}, []
        for path, line, shown, prog, sub, opts in self.commands:
            if prog != "heft":
                continue
            if sub not in helps:
                code, out = help_text([HEFT, sub])
                helps[sub] = option_names(out) if code == 0 else None
            if helps[sub] is None:
                problems.append((path, line, f"heft: `{shown}`: no subcommand '{sub}'"))
                continue
            for o in opts:
                if o not in helps[sub] and o not in ("-h", "--help"):
                    problems.append((path, line,
                                     f"heft: `{shown}`: `heft {sub} --help` has no {o}"))
        self.check("heft", problems)

    def test_heft_train_options_exist(self):
        code, out = help_text([HEFT_TRAIN])
        self.assertEqual(code, 0, out)
        known = heft_train_options(out)
        self.assertIn("--lr", known)
        self.assertIn("--print-mesh", known)
        problems = []
        for path, line, shown, prog, _, opts in self.commands:
            if prog != "heft-train":
                continue
            for o in opts:
                if o not in known:
                    problems.append((path, line,
                                     f"heft-train: `{shown}`: `heft-train --help` has no {o}"))
        self.check("heft-train", problems)

    def test_hyperparameters_set_on_heft_train_jobs_exist(self):
        # `--set hyperparameters.NAME=...` on a spec of the repository whose entry point is
        # heft-train: NAME is one of heft-train's (another entry point has its own names).
        known = {o[2:] for o in heft_train_options(help_text([HEFT_TRAIN])[1])
                 if o.startswith("--")}
        problems, checked = [], 0
        for path, line, shown, prog, sub, _ in self.commands:
            if prog != "heft" or sub != "train":
                continue
            for spec, names in hyperparameter_sets(shown):
                spec_path = os.path.join(SOURCE, spec or "")
                if not spec or not os.path.isfile(spec_path):
                    continue
                with open(spec_path, encoding="utf-8") as f:
                    if not re.search(r"^entry_point:\s*heft-train\s*$", f.read(), re.M):
                        continue
                for n in names:
                    checked += 1
                    if n not in known:
                        problems.append((path, line,
                                         f"set: `{shown}`: heft-train has no hyperparameter {n}"))
        self.assertGreater(checked, 0)  # the docs set some (tuning.md, clusters.md ...)
        self.check("set", problems)

    def test_every_hyperparameter_is_in_the_training_table(self):
        out = help_text([HEFT_TRAIN])[1]
        names = {o[2:] for o in heft_train_options(out) if o.startswith("--")}
        names -= {"help", "print-mesh", "print-schedule", "print-plan"}
        self.assertIn("lr", names)
        text = dict(self.docs)["docs/training.md"]
        rows = set(re.findall(r"^\| `([a-z0-9_]+)`", text, re.M))
        rows |= {n for cell in re.findall(r"^\| (`[a-z0-9_]+`(?:, `[a-z0-9_]+`)+) \|", text, re.M)
                 for n in re.findall(r"`([a-z0-9_]+)`", cell)}
        problems = [("docs/training.md", 0, f"hyperparameter: --{n} has no row in the table")
                    for n in sorted(names - rows)]
        self.check("hyperparameter", problems)

    def test_links_between_docs_resolve(self):
        # [text](path#anchor) outside code: the file exists, the anchor is one of its headings.
        heading = re.compile(r"^#+\s+(.*)$", re.M)
        anchors = {path: {heading_anchor(h) for h in heading.findall(blocks(text)[1])}
                   for path, text in self.docs}
        problems, anchored = [], 0
        for path, text in self.docs:
            prose = blocks(text)[1]
            for m in re.finditer(r"\]\(([^)\s]+)\)", prose):
                if re.match(r"[a-z]+:", m[1]):
                    continue  # http:, mailto:
                target, _, anchor = m[1].partition("#")
                if target:
                    target = os.path.normpath(os.path.join(os.path.dirname(path), target))
                else:
                    target = path
                line = prose.count("\n", 0, m.start()) + 1
                if not os.path.exists(os.path.join(SOURCE, target)):
                    problems.append((path, line, f"link: ({m[1]}): no file {target}"))
                elif anchor and target in anchors:
                    anchored += 1
                    if anchor not in anchors[target]:
                        problems.append((path, line,
                                         f"link: ({m[1]}): no heading #{anchor} in {target}"))
        self.assertGreater(anchored, 3)
        self.check("link", problems)

    def test_builtin_metrics_are_documented(self):
        names = builtin_metric_names()
        self.assertIn("train:loss", names)        # the parser found the definitions
        self.assertIn("step:total_ms", names)     # and the profiler's series
        text = "\n".join(t for _, t in self.docs)
        problems = [("docs/", 0, f"metric: {n} is named nowhere in README.md or docs/")
                    for n in sorted(names) if n not in text]
        self.check("metric", problems)

    def test_refresh_docs_finds_and_reruns_the_marked_blocks(self):
        script = os.path.join(SOURCE, "bench", "refresh_docs.sh")
        markers = sum(1 for _, text in self.docs for line in text.split("\n") if parse_marker(line))
        self.assertGreater(markers, 5)
        r = subprocess.run([script, "--list"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(r.stdout.strip().split("\n")), markers, r.stdout)
        # A fast block, re-run without writing: run.md's missing command (exit 127).
        r = subprocess.run([script, "--dry-run", "pyhton3"], capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.split("\n")
        marker = parse_marker(lines[0])
        self.assertIsNotNone(marker, r.stdout)
        self.assertRegex(marker["date"], r"^\d{4}-\d\d-\d\d \d\d:\d\d UTC$")
        self.assertRegex(marker["machine"], r"\d+ cores")
        self.assertEqual(marker["exit"], "127")
        self.assertIn("$ heft run -n 2 -- pyhton3 train.py", lines)
        self.assertIn("heft run: cannot execute 'pyhton3': No such file or directory", lines)
        self.assertEqual(lines[lines.index("$ echo $?") + 1], "127")

    def test_recorded_runs_carry_date_machine_command(self):
        problems = []
        for path, text in self.docs:
            found, _ = blocks(text)
            for lang, first, body, before in found:
                if lang not in SHELL_LANGS:
                    continue
                cmds = dollar_commands(body)
                outputs = [l for l in body if l.strip() and not l.startswith("$ ")]
                if not cmds or not outputs:
                    continue  # commands alone, or output alone: not a recorded run
                shown = cmds[0][1].strip()
                where = f"recorded: `{shown.splitlines()[0]}`"
                marker = parse_marker(before)
                if marker is None:
                    problems.append((path, first, where + NO_MARKER))
                    continue
                for key in ("date", "machine", "cmd"):
                    if not marker.get(key):
                        problems.append((path, first, f"{where}: the marker has no {key}"))
                if not re.fullmatch(r"\d+(,\d+)*", marker.get("exit", "0")):
                    problems.append((path, first, f"{where}: exit is not N or N,N,..."))
                try:
                    re.compile(marker.get("keep", ""))
                except re.error as e:
                    problems.append((path, first, f"{where}: keep is not a regex: {e}"))
                date = marker.get("date", "")
                if date and not re.fullmatch(r"\d{4}-\d\d-\d\d( \d\d:\d\d UTC)?", date):
                    problems.append((path, first,
                                     f"{where}: date '{date}' is not YYYY-MM-DD[ HH:MM UTC]"))
                if marker.get("cmd") and " ".join(marker["cmd"].split()) != " ".join(shown.split()):
                    problems.append((path, first,
                                     f"{where}: the marker's cmd is `{marker['cmd']}`"))
        self.check("recorded", problems)


if __name__ == "__main__":
    unittest.main(verbosity=2)
