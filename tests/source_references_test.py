#!/usr/bin/env python3
"""Every path the repository's code and documents name resolves to something in the repository: a tracked file or
folder (or files, for a pattern with *), relative to the repository's root or to the naming file's folder, a program
built from a tracked source of that name, or a file the build generates from a tracked `.in` template. Scanned:
tracked sources, scripts, CMake files and documents, outside docs/results/ and tests/data/ (measurement rows and
test inputs quote what they quote) and this file. A path counts as one when it starts with one of the repository's
top-level folders (src/, include/, tests/, bench/, docs/, scripts/, lab/, python/, examples/, cmake/, .ci/); a bare
file name of the project's own kinds (.cpp, .cu, .cuh, .py: system headers are .h) must be the name of some tracked
file, or of a tracked `.in` template.

  python3 tests/source_references_test.py REPO_ROOT      exit 0 pass, 1 fail (the unresolved paths listed),
                                                           77 not a git checkout
"""
import fnmatch
import os
import re
import subprocess
import sys

TOP = r"(?:src|include|tests|bench|docs|scripts|lab|python|examples|cmake|\.ci)"
REFERENCE = re.compile(r"(?<![\w./*$-])(" + TOP + r"/[\w./*-]*[\w/*])")
BARE_NAME = re.compile(r"(?<![\w./*$-])([\w-]+\.(?:cuh|cpp|cu|py))\b")
SCANNED = re.compile(r"\.(h|hpp|cuh|cu|cpp|c|inc|py|md|sh|txt|cmake|in|json|toml)$|(^|/)run$")
SKIPPED = ("docs/results/", "tests/data/", "tests/source_references_test.py")  # the last: its table quotes paths
# Paths that name something outside the repository on purpose, with why.
ELSEWHERE = {
    ("scripts/setup.sh", "include/cudnn_frontend.h"): "a file inside the pinned cudnn-frontend wheel",
}


def main() -> int:
    root = sys.argv[1]
    listed = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True)
    if listed.returncode != 0:
        print(f"source references: {root} is not a git checkout (no file list): skipped")
        return 77
    files = listed.stdout.split()
    tracked = set(files)
    names = {os.path.basename(f) for f in files}
    folders = {"/".join(f.split("/")[:i]) for f in files for i in range(1, f.count("/") + 1)}

    def exists(path: str) -> bool:
        path = path.rstrip("/")
        if path in tracked or path in folders:
            return True
        if "*" in path:
            return bool(fnmatch.filter(files, path) or fnmatch.filter(files, path + "*"))
        # A program built from a source of its name, or a file generated from a template.
        return any(path + ext in tracked for ext in (".cpp", ".cu", ".c", ".in"))

    unresolved = []
    for name in files:
        if name.startswith(SKIPPED) or not SCANNED.search(name):
            continue
        with open(os.path.join(root, name), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for match in REFERENCE.finditer(text):
            ref = match.group(1).rstrip(".")
            if (name, ref) in ELSEWHERE:
                continue
            here = os.path.normpath(os.path.join(os.path.dirname(name), ref))
            if not exists(ref) and not exists(here):
                line = text.count("\n", 0, match.start()) + 1
                unresolved.append(f"{name}:{line}: {ref}")
        for match in BARE_NAME.finditer(text):
            bare = match.group(1)
            if bare not in names and bare + ".in" not in names:
                line = text.count("\n", 0, match.start()) + 1
                unresolved.append(f"{name}:{line}: {bare}")
    for u in unresolved:
        print("unresolved:", u)
    print(f"source references: {len(unresolved)} unresolved")
    return 1 if unresolved else 0


if __name__ == "__main__":
    sys.exit(main())
