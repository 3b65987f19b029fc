#!/usr/bin/env python3
"""Fails when a C function in the given folders is longer than the limit.

The contract caps CLI functions at about 150 lines so parsing, validation and
output stay apart. A function is found the way the tree is formatted
(clang-format, K&R braces): a line at column 0 that is not a comment,
preprocessor line or declaration ending in ';' and that opens a '{' starts a
body, which ends at the matching '}' back at brace depth 0. Strings, character
literals and comments are skipped when counting braces.

usage: check_fn_len.py [--max N] DIR_OR_FILE...
"""
import os
import re
import sys


def strip_code(text):
    """The text with comments, strings and char literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path):
    """(name, first line, length in lines) of each function body in path."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = strip_code(f.read()).split("\n")
    found = []
    depth = 0
    start = None
    name = None
    header = []
    for no, line in enumerate(lines, 1):
        if depth == 0 and start is None:
            s = line.strip()
            if not s or s.startswith("#"):
                header = []
                continue
            header.append(line)
            if "{" in line:
                sig = " ".join(header)
                m = re.search(r"([A-Za-z_]\w*)\s*\([^;]*\)\s*\{", sig)
                if m and not re.match(r"\s*(struct|enum|union|typedef)\b", sig) and "=" not in sig.split("(")[0]:
                    start = no - len(header) + 1
                    name = m.group(1)
            elif s.endswith(";") or s.endswith("}"):
                header = []
        for ch in line:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
        if depth == 0 and start is not None and "}" in line:
            found.append((name, start, no - start + 1))
            start = None
            header = []
        elif depth == 0 and start is None and "{" not in line and line.strip().endswith(";"):
            header = []
    return found


def main(argv):
    limit = 150
    args = argv[1:]
    if len(args) >= 2 and args[0] == "--max":
        limit = int(args[1])
        args = args[2:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    files = []
    for a in args:
        if os.path.isdir(a):
            for root, _, names in os.walk(a):
                files += [os.path.join(root, x) for x in sorted(names) if x.endswith(".c")]
        else:
            files.append(a)
    bad = 0
    for p in sorted(files):
        for name, line, length in functions(p):
            if length > limit:
                print(f"{p}:{line}: {name}() is {length} lines (limit {limit}): split parsing, "
                      "validation and output")
                bad += 1
    if bad:
        return 1
    print(f"{len(files)} files, every function at most {limit} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
