#!/usr/bin/env python3
"""The include-layer check: no folder of src/ includes a header of a higher layer.

The layers are the numbered list under "## Layers" in README.md, bottom first;
each item names its folders in backticks before a colon ("9. `qwen3`, `dspark`:
..."). A file may include headers of its own folder, of a peer folder on the
same layer, and of any lower layer. Peers may not include each other in a
circle, so the folder graph stays acyclic. A folder of src/ that is on no layer
is an error too: a new folder has to be placed before it can be merged.

Usage: check_layers.py [ROOT]   (ROOT holds README.md and src/; default: the
repository this script is in). Exit 0 when clean, 1 naming every violation
as FILE:LINE, 2 when the README's list cannot be read. Standard library only.
"""

import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
ITEM = re.compile(r"^\s*(\d+)\.\s+(.*)$")
NAME = re.compile(r"`([A-Za-z0-9_]+)`")
SOURCES = (".c", ".h", ".cu", ".cuh", ".inc")


def read_layers(readme):
    """{folder: layer number} from README.md's "## Layers" list."""
    layers, inside, expect = {}, False, 1
    with open(readme, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.startswith("## "):
                if inside:
                    break
                inside = line.strip() == "## Layers"
                continue
            m = ITEM.match(line) if inside else None
            if not m:
                continue
            num = int(m.group(1))
            if num != expect:
                raise ValueError("%s:%d: layer %d where %d was expected" % (readme, n, num, expect))
            names = NAME.findall(m.group(2).split(":", 1)[0])
            if not names:
                raise ValueError("%s:%d: layer %d names no `folder`" % (readme, n, num))
            for name in names:
                if name in layers:
                    raise ValueError("%s:%d: %s is on two layers" % (readme, n, name))
                layers[name] = num
            expect += 1
    if not layers:
        raise ValueError("%s: no \"## Layers\" list" % readme)
    return layers


def folder_of(src, path):
    """The top folder of src/ that path lies in, or None outside src/."""
    rel = os.path.relpath(os.path.realpath(path), os.path.realpath(src))
    if rel.startswith(".."):
        return None
    parts = rel.split(os.sep)
    return parts[0] if len(parts) > 1 else ""


def target_of(src, including, name):
    """Where `#include "name"` in file `including` resolves, as the compiler
    would look (beside the file, then src/ on the include path). A header
    that exists in neither is taken as src/-relative when it has a folder,
    else as a neighbour: the build, not this check, reports it missing."""
    for base in (os.path.dirname(including), src):
        p = os.path.join(base, name)
        if os.path.isfile(p):
            return folder_of(src, p)
    if "/" in name:
        return name.split("/", 1)[0]
    return folder_of(src, including)


def find_cycle(edges):
    """One cycle of the folder graph as a list of folders, or None."""
    state = {}

    def visit(a, stack):
        state[a] = 1
        stack.append(a)
        for b in sorted(edges.get(a, ())):
            if state.get(b) == 1:
                return stack[stack.index(b):] + [b]
            if not state.get(b):
                c = visit(b, stack)
                if c:
                    return c
        stack.pop()
        state[a] = 2
        return None

    for a in sorted(edges):
        if not state.get(a):
            c = visit(a, [])
            if c:
                return c
    return None


def check(root):
    src = os.path.join(root, "src")
    try:
        layers = read_layers(os.path.join(root, "README.md"))
    except (OSError, ValueError) as err:
        print("layers: %s" % err, file=sys.stderr)
        return 2
    errors, edges, nfiles, nincludes = [], {}, 0, 0
    where = {}  # (from, to) -> the first FILE:LINE, for the cycle message
    unplaced, seen = set(), set()
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames.sort()
        for fn in sorted(filenames):
            if not fn.endswith(SOURCES):
                continue
            path = os.path.join(dirpath, fn)
            shown = os.path.relpath(path, root)
            own = folder_of(src, path)
            nfiles += 1
            seen.add(own)
            if own == "":
                errors.append("%s: a file directly in src/ is on no layer (put it in a folder)" % shown)
                continue
            if own not in layers:
                unplaced.add(own)
            with open(path, encoding="utf-8", errors="replace") as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    nincludes += 1
                    inc = m.group(1)
                    to = target_of(src, path, inc)
                    if to is None or to == own or own not in layers:
                        continue
                    if to not in layers:
                        unplaced.add(to)
                        continue
                    if layers[to] > layers[own]:
                        errors.append(
                            "%s:%d: %s (layer %d) includes \"%s\" of %s (layer %d), a higher layer"
                            % (shown, n, own, layers[own], inc, to, layers[to]))
                    edges.setdefault(own, set()).add(to)
                    where.setdefault((own, to), "%s:%d" % (shown, n))
    for u in sorted(unplaced):
        errors.append("src/%s/: on no layer of README.md's \"## Layers\" list (add it there)" % u)
    cycle = find_cycle(edges)
    if cycle:
        steps = ", ".join("%s -> %s (%s)" % (a, b, where[(a, b)]) for a, b in zip(cycle, cycle[1:]))
        errors.append("folders include each other in a circle: %s" % steps)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print("layers: %d violation%s (README.md, \"## Layers\")"
              % (len(errors), "" if len(errors) == 1 else "s"), file=sys.stderr)
        return 1
    print("layers: %d files, %d includes, %d folders on %d layers: every include goes down or sideways"
          % (nfiles, nincludes, len(seen), max(layers.values())))
    return 0


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    sys.exit(check(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..")))
