"""Reading README.md and docs/*.md for tests/python/docs_test.py: fenced blocks, the `$ `
commands they show, the heft and heft-train commands in a line or an inline code span (with
their options and `--set hyperparameters.NAME`), the `<!-- recorded: ... -->` markers of
recorded runs (bench/refresh_docs.sh writes them) and GitHub's heading anchors. Pure text
work: nothing here runs a program."""
import re
import shlex

SHELL_LANGS = {"", "console", "sh", "bash", "shell"}
END_OF_COMMAND = {"|", "||", "&&", ";", "&", ">", ">>", "2>&1", "<", "<<"}
RECORDED = re.compile(r"^<!--\s*recorded:(.*)-->\s*$")


def blocks(text):
    """Fenced code blocks: (language, first line number of the body, body lines, the line
    before the fence). Inline text outside the blocks is returned with the blocks' lines
    blanked, so offsets keep their line numbers."""
    lines = text.split("\n")
    found, prose, i = [], [], 0
    while i < len(lines):
        m = re.match(r"^\s*```\s*([A-Za-z0-9_+-]*)", lines[i])
        if not m:
            prose.append(lines[i])
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        found.append((m[1].lower(), start + 2, lines[i + 1:j], lines[start - 1] if start else ""))
        prose.extend([""] * (j + 1 - i))
        i = j + 1
    return found, "\n".join(prose)


def join_continuations(lines):
    """Shell lines with a trailing backslash joined to the next; (index, joined text)."""
    out, buf, first = [], "", None
    for n, line in enumerate(lines):
        if first is None:
            first = n
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        out.append((first, buf + line))
        buf, first = "", None
    if buf:
        out.append((first, buf))
    return out


def dollar_commands(body):
    """The `$ ` lines of a block (with their continuations and quoted line breaks), as
    (index in body, command text)."""
    cmds, n = [], 0
    while n < len(body):
        if not body[n].startswith("$ "):
            n += 1
            continue
        start, text = n, body[n][2:]
        while (text.rstrip().endswith("\\") or unbalanced(text)) and n + 1 < len(body):
            if text.rstrip().endswith("\\"):
                text = text.rstrip()[:-1]
            text += "\n" + body[n + 1]
            n += 1
        cmds.append((start, text))
        n += 1
    return cmds


def unbalanced(text):
    try:
        shlex.split(text, comments=True)
        return False
    except ValueError:
        return True


def tokens(text):
    try:
        return shlex.split(text, comments=True)
    except ValueError:
        return text.split()


def is_heft(tok):
    return tok == "heft" or tok.endswith("/bin/heft") or tok == "build/heft"


def is_heft_train(tok):
    return tok == "heft-train" or tok.endswith("/heft-train")


def commands_in(text):
    """Every heft or heft-train command in a command line or an inline code span:
    (program, subcommand or None, [options])."""
    toks = [t.strip("[]") for t in tokens(text)]
    found = []
    for i, t in enumerate(toks):
        if is_heft(t) and i + 1 < len(toks) and re.fullmatch(r"[a-z][a-z0-9-]*", toks[i + 1]):
            found.append(("heft", toks[i + 1], options(toks[i + 2:])))
        elif is_heft_train(t):
            found.append(("heft-train", None, options(toks[i + 1:])))
    return found


def hyperparameter_sets(text):
    """For each `heft train SPEC ... --set hyperparameters.NAME=V` in the text: (SPEC or None,
    [NAME...])."""
    toks = tokens(text)
    found = []
    for i, t in enumerate(toks):
        if not (is_heft(t) and toks[i + 1:i + 2] == ["train"]):
            continue
        spec, names, j = None, [], i + 2
        while j < len(toks) and toks[j] not in END_OF_COMMAND and toks[j] != "--":
            if toks[j] in ("--set", "--name") and j + 1 < len(toks):
                m = re.match(r"hyperparameters\.([A-Za-z0-9_-]+)=", toks[j + 1])
                if toks[j] == "--set" and m:
                    names.append(m[1])
                j += 2
                continue
            if spec is None and not toks[j].startswith("-"):
                spec = toks[j]
            j += 1
        found.append((spec, names))
    return found


def options(rest):
    """The options in the tokens after a program (and its subcommand), up to the end of the
    command or `--` (what follows `--` is another command, found on its own)."""
    opts = []
    for t in rest:
        if t in END_OF_COMMAND or t == "--" or t.startswith("#"):
            break
        if re.match(r"^--?[A-Za-z]", t) and not re.search(r"\s", t):
            opts.append(t.split("=", 1)[0])
    return opts


def commands_of(path, text):
    """(path, line, shown text, program, subcommand, options) for every command the doc
    shows: `$ ` lines of shell blocks (every line of a shell block without `$ ` lines) and
    inline code spans. A recorded block whose marker says it exits non-zero shows a bad
    command on purpose (an error message): its commands are left out."""
    found, prose = blocks(text)
    out = []
    for lang, first, body, before in found:
        marker = parse_marker(before) or {}
        if lang not in SHELL_LANGS or marker.get("exit", "0") != "0":
            continue
        if any(l.startswith("$ ") for l in body):
            lines = dollar_commands(body)
        else:
            lines = join_continuations(body)
        for n, line in lines:
            for c in commands_in(line):
                out.append((path, first + n, line.strip(), *c))
    for m in re.finditer(r"`([^`]+)`", prose):
        span = m[1].replace("\n", " ")
        line = prose.count("\n", 0, m.start()) + 1
        for c in commands_in(span):
            out.append((path, line, span, *c))
    return out


def heading_anchor(heading):
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces to -."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return "".join(c for c in text if c.isalnum() or c in "-_ ").replace(" ", "-")


def parse_marker(line):
    """The fields of a `<!-- recorded: ... -->` line, or None."""
    m = RECORDED.match(line.strip())
    if not m:
        return None
    fields = {}
    for item in shlex.split(m[1]):
        key, _, value = item.partition("=")
        fields[key] = value
    return fields
