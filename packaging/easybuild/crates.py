#!/usr/bin/env python3
"""The `crates` and crate checksums of the easyconfig, from Cargo.lock.

EasyBuild's Cargo easyblock builds offline: it downloads every crate listed in `crates` and
vendors it; the checksum of a crate's download is the sha256 Cargo.lock records for it.

    packaging/easybuild/crates.py            # print the block to paste into the .eb
    packaging/easybuild/crates.py --check    # exit 1 if the .eb's lists differ from Cargo.lock
"""

import ast
import pathlib
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
EASYCONFIG = pathlib.Path(__file__).resolve().parent / "agent-sandbox-0.1.0-GCCcore-14.3.0.eb"
CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"


def from_lock():
    """(name, version) and {filename: sha256} of every crates.io package in Cargo.lock."""
    lock = tomllib.loads((ROOT / "Cargo.lock").read_text())
    crates, sums = [], {}
    for p in lock["package"]:
        source = p.get("source")
        if source is None:
            continue  # a member of the workspace: part of the main source
        if source != CRATES_IO:
            sys.exit(f"crates.py: {p['name']} {p['version']} comes from {source}: only crates.io crates are handled")
        crates.append((p["name"], p["version"]))
        sums[f"{p['name']}-{p['version']}.tar.gz"] = p["checksum"]
    return sorted(crates), sums


def block():
    crates, sums = from_lock()
    lines = ["crates = ["]
    lines += [f"    {c!r}," for c in crates]
    lines += ["]", "checksums = [", "    None,  # the main source's sha256: made per commit (git archive), see the top"]
    # In the order of `crates`: EasyBuild pairs sources and checksums by position.
    names = [f"{n}-{v}.tar.gz" for n, v in crates]
    lines += [f"    {{{name!r}: {sums[name]!r}}}," for name in names]
    lines += ["]"]
    return "\n".join(lines) + "\n"


def check():
    """The .eb's `crates` and `checksums` as Cargo.lock has them."""
    tree = ast.parse(EASYCONFIG.read_text(), str(EASYCONFIG))
    values = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass  # a value with templates or expressions: not ours to compare
    crates, sums = from_lock()
    problems = []
    if sorted(values.get("crates", [])) != crates:
        have = set(values.get("crates", []))
        problems.append(f"crates: missing {sorted(set(crates) - have)}, extra {sorted(have - set(crates))}")
    want = [{f"{n}-{v}.tar.gz": sums[f"{n}-{v}.tar.gz"]} for n, v in crates]
    have = values.get("checksums", [])[1:]
    if have != want:
        wrong = [next(iter(w)) for i, w in enumerate(want) if i >= len(have) or have[i] != w]
        problems.append(f"checksums differ for {wrong[:10]}{' ...' if len(wrong) > 10 else ''}")
    if problems:
        print(f"{EASYCONFIG.name} is not in step with Cargo.lock: " + "; ".join(problems), file=sys.stderr)
        print("fix: packaging/easybuild/crates.py, and paste its output over the two lists", file=sys.stderr)
        return 1
    print(f"{EASYCONFIG.name}: {len(crates)} crates, as in Cargo.lock")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        sys.exit(check())
    elif sys.argv[1:]:
        sys.exit(__doc__)
    sys.stdout.write(block())
