#!/usr/bin/env bash
# Re-runs the recorded runs of README.md and docs/*.md and rewrites what they printed.
#
# A recorded run is a fenced block that shows `$ COMMAND` lines and their output, right after
# a marker line:
#
#   <!-- recorded: date="2026-11-25 13:40 UTC" machine="..." cmd="build/heft train x.yaml" -->
#
# date, machine and cmd are required (tests/python/docs_test.py checks them; cmd is the
# block's first `$` command). Optional fields:
#   keep="REGEX"    only output lines matching this (Python) regex are kept; each run of
#                   dropped lines becomes one `...` line
#   exit=N[,N...]   the exit code each `$` command must end with (default 0); a block whose
#                   command ends otherwise is left as it was and the script fails
#   timeout=S       seconds a command may run (default 1800)
#   manual="WHY"    not re-run by this script (an interactive Ctrl-C, a cluster): say why
#
# Each selected block's `$` commands run in order from the source root, under bash, with
# build/ first on PATH (so `heft ...` is build/heft) and a fresh empty HEFT_HOME (job names
# never clash with earlier runs; paths under it are written back as ~/.heft). stdout and
# stderr are recorded together, in the order written. `$ echo $?` prints the previous exit
# code. The marker's date and machine (CPU from /proc/cpuinfo, cores, memcpy GB/s at 1 MiB
# from build/memory_bandwidth_bench) are rewritten with the output.
#
#   bench/refresh_docs.sh --list              every recorded block: index, file:line, command
#   bench/refresh_docs.sh [SELECTOR...]       re-run them (all but manual ones when none given)
#   bench/refresh_docs.sh --dry-run SELECTOR  print the rewritten block instead of writing it
# A SELECTOR is an index from --list, FILE:LINE (the marker's line), FILE, or a regex searched
# in the command. Long: the main job and the GPT take minutes each on 2 cores. Prose that
# quotes a block's figures is not rewritten: read `git diff` after a refresh and mend it.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x build/heft ]] || { echo "$0: build/heft is not built: run ./setup.sh first" >&2; exit 1; }
exec .venv/bin/python - "$@" <<'PY'
import datetime, glob, os, re, shlex, shutil, signal, subprocess, sys, tempfile

MARKER = re.compile(r"^<!--\s*recorded:(.*)-->\s*$")
FENCE = re.compile(r"^\s*```")


def docs():
    return ["README.md"] + sorted(glob.glob("docs/*.md"))


def parse_fields(text):
    fields = {}
    for item in shlex.split(text):
        key, _, value = item.partition("=")
        fields[key] = value
    return fields


def quote(value):
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def find_blocks():
    """Recorded blocks: dicts with file, marker line index, fence start/end indexes, fields."""
    found = []
    for path in docs():
        lines = open(path, encoding="utf-8").read().split("\n")
        for i, line in enumerate(lines):
            m = MARKER.match(line.strip())
            if not m:
                continue
            if i + 1 >= len(lines) or not FENCE.match(lines[i + 1]):
                sys.exit(f"{path}:{i + 1}: a recorded marker must be followed by a ``` block")
            end = i + 2
            while end < len(lines) and not FENCE.match(lines[end]):
                end += 1
            found.append({"file": path, "marker": i, "marker_text": line, "end": end,
                          "fields": parse_fields(m[1]), "body": lines[i + 2:end]})
    return found


def commands(body):
    """The block's `$` commands (a line ending in a backslash or inside open quotes goes on)."""
    out, n = [], 0
    while n < len(body):
        if not body[n].startswith("$ "):
            n += 1
            continue
        text = body[n][2:]
        while n + 1 < len(body):
            stripped = text.rstrip()
            if stripped.endswith("\\"):
                text = stripped + "\n" + body[n + 1]
            else:
                try:
                    shlex.split(text, comments=True)
                    break
                except ValueError:
                    text += "\n" + body[n + 1]
            n += 1
        out.append(text)
        n += 1
    return out


def machine():
    info = open("/proc/cpuinfo").read()
    def field(name):
        m = re.search(r"^" + name + r"\s*:\s*(.*)$", info, re.M)
        return m[1].strip() if m else "?"
    text = (f"{field('model name')} (family {field('cpu family')} model {field('model')}), "
            f"{os.cpu_count()} cores")
    bench = "build/memory_bandwidth_bench"
    if os.access(bench, os.X_OK):
        r = subprocess.run([bench, "--benchmark_filter=BM_Memcpy/1048576$",
                            "--benchmark_min_time=0.1", "--benchmark_format=csv"],
                           capture_output=True, text=True)
        m = re.search(r'^"?BM_Memcpy/1048576"?,(?:[^,]*,){4}([0-9.e+]+)', r.stdout, re.M)
        text += f", memcpy {float(m[1]) / 1e9:.1f} GB/s at 1 MiB" if m else ", memcpy not measured"
    else:
        text += ", memcpy not measured (build/memory_bandwidth_bench not built)"
    return text


def run_command(cmd, env, timeout):
    """(exit code, stdout and stderr together), or None past the timeout. The command runs in
    a session of its own, so a timeout stops everything it started (a job's workers too)."""
    p = subprocess.Popen(["bash", "-c", cmd], env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         errors="replace", start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out
    except subprocess.TimeoutExpired:
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, None)):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            try:
                p.communicate(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                pass
        return None


def run_block(block, machine_text):
    """Runs the block's commands; ((marker line, body lines), None) or (None, error)."""
    f = dict(block["fields"])
    exits = [int(x) for x in f.get("exit", "0").split(",")]
    keep = re.compile(f["keep"]) if f.get("keep") else None
    timeout = float(f.get("timeout", "1800"))
    home = tempfile.mkdtemp(prefix="heft-refresh-")
    env = dict(os.environ, HEFT_HOME=home, PATH=os.path.abspath("build") + ":" + os.environ["PATH"])
    out, last, n = [], None, 0
    try:
        for cmd in commands(block["body"]):
            out.append("$ " + cmd)
            if cmd.strip() == "echo $?":
                out.append(str(last))
                continue
            print(f"  $ {cmd}", file=sys.stderr, flush=True)
            result = run_command(cmd, env, timeout)
            if result is None:
                return None, f"`{cmd}` ran past {timeout:.0f} s; stopped"
            code, text = result
            expected = exits[min(n, len(exits) - 1)]
            n += 1
            if code != expected:
                return None, f"`{cmd}` exited {code}, expected {expected}:\n{text[-3000:]}"
            last = code
            text = text.replace(home, "~/.heft").rstrip("\n")
            dropped = False
            for line in text.split("\n") if text else []:
                if keep is None or keep.search(line):
                    out.append(line)
                    dropped = False
                elif not dropped:
                    out.append("...")
                    dropped = True
    finally:
        shutil.rmtree(home, ignore_errors=True)
    f["date"] = datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC")
    f["machine"] = machine_text
    marker = "<!-- recorded: " + " ".join(f"{k}={quote(v)}" for k, v in f.items()) + " -->"
    return (marker, out), None


def selected(blocks, selectors):
    if not selectors:
        return [b for b in blocks if "manual" not in b["fields"]]
    out = []
    for i, b in enumerate(blocks, 1):
        cmd = (commands(b["body"]) or [""])[0]
        for s in selectors:
            if (s == str(i) or s == f"{b['file']}:{b['marker'] + 1}" or s == b["file"]
                    or (not s.isdigit() and re.search(s, cmd))):
                out.append(b)
                break
    return out


def main(argv):
    dry = "--dry-run" in argv
    argv = [a for a in argv if a != "--dry-run"]
    blocks = find_blocks()
    if argv[:1] == ["--list"]:
        for i, b in enumerate(blocks, 1):
            f = b["fields"]
            tag = f"  [manual: {f['manual']}]" if "manual" in f else ""
            where = f"{b['file']}:{b['marker'] + 1}"
            print(f"{i:3} {where}  {f.get('cmd', '?')}  ({f.get('date', '?')}){tag}")
        return 0
    if any(a.startswith("-") for a in argv):
        print("usage: bench/refresh_docs.sh [--list] [--dry-run] [SELECTOR...]", file=sys.stderr)
        return 2
    todo = selected(blocks, argv)
    if not todo:
        print("refresh_docs: no recorded block matches", file=sys.stderr)
        return 2
    machine_text = machine()
    failed = 0
    for b in todo:
        print(f"{b['file']}:{b['marker'] + 1}: {b['fields'].get('cmd')}", file=sys.stderr,
              flush=True)
        if "manual" in b["fields"]:
            print(f"  skipped, re-run it by hand: {b['fields']['manual']}", file=sys.stderr)
            continue
        result, error = run_block(b, machine_text)
        if error:
            print(f"refresh_docs: {b['file']}:{b['marker'] + 1}: {error}", file=sys.stderr)
            failed += 1
            continue
        marker, body = result
        if dry:
            print("\n".join([marker, "```console"] + body + ["```"]))
            continue
        # Found again by its marker: the file may have been edited while the command ran.
        lines = open(b["file"], encoding="utf-8").read().split("\n")
        at = [i for i, line in enumerate(lines) if line == b["marker_text"]]
        if len(at) != 1:
            print(f"refresh_docs: {b['file']}: the marker of `{b['fields'].get('cmd')}` is gone "
                  "or not unique any more; not rewritten", file=sys.stderr)
            failed += 1
            continue
        end = at[0] + 2
        while end < len(lines) and not FENCE.match(lines[end]):
            end += 1
        lines[at[0]] = marker
        lines[at[0] + 2:end] = body
        open(b["file"], "w", encoding="utf-8").write("\n".join(lines))
    return 1 if failed else 0


sys.exit(main(sys.argv[1:]))
PY
