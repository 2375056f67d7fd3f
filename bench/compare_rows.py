#!/usr/bin/env python3
"""Merge nccl-tests-style rows (`bytes time_us algbw busbw`) of several implementations into
one markdown table: per size the median time over the files of each implementation, its
busbw (from that median), and the first implementation's ratio to each other one.

usage: compare_rows.py NAME FILE... [-- NAME FILE...]...
"""
import statistics
import sys


def read_rows(path):
    rows = {}
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        parts = line.split()
        # time_us, busbw, and heft's path (its last column) when there is one
        path = parts[-1] if len(parts) > 4 and not parts[-1] in ("ok", "WRONG") else ""
        rows[int(parts[0])] = (float(parts[1]), float(parts[3]), path)
    return rows


def main(argv):
    groups, cur = [], None
    for a in argv:
        if a == "--":
            cur = None
        elif cur is None:
            cur = (a, [])
            groups.append(cur)
        else:
            cur[1].append(a)
    impls = []
    for name, files in groups:
        per_size = {}
        for f in files:
            for size, (t, bus, path) in read_rows(f).items():
                per_size.setdefault(size, []).append((t, bus, path))
        med = {}
        for size, vals in per_size.items():
            t = statistics.median(v[0] for v in vals)
            # busbw scales with 1/time: take it at the median time
            ref = vals[0]
            paths = sorted(set(v[2] for v in vals if v[2]))
            med[size] = (t, ref[1] * ref[0] / t if t > 0 else 0.0, "+".join(paths))
        impls.append((name, med))
    sizes = sorted(set().union(*[set(m) for _, m in impls]))
    head = "| bytes | " + " | ".join(f"{n} time_us | {n} busbw" for n, _ in impls)
    head += "".join(f" | {impls[0][0]}/{n}" for n, _ in impls[1:]) + f" | {impls[0][0]} path |"
    print(head)
    print("|" + " ---: |" * (1 + 2 * len(impls) + len(impls) - 1) + " --- |")
    for s in sizes:
        cells = [str(s)]
        for _, m in impls:
            t, b = m.get(s, (float("nan"), float("nan"), ""))[:2]
            cells += [f"{t:.1f}", f"{b:.3f}"]
        base = impls[0][1].get(s)
        for _, m in impls[1:]:
            o = m.get(s)
            # ratio of bandwidths = inverse ratio of times
            cells.append(f"{o[0] / base[0]:.2f}x" if base and o and base[0] > 0 else "n/a")
        cells.append(base[2] if base else "")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
