#!/usr/bin/python3
"""Builds the nano models' training corpus from Debian's python3.11-doc and perl-doc.

The package ships the reStructuredText sources of the Python 3.11
documentation (html/_sources/**.rst.txt, PSF License v2; code examples also
0BSD). This script turns them into plain English text: directive and label
lines dropped, roles and inline markup reduced to their text, heading
underlines removed, indentation of literal blocks kept.

  corpus.py --deb python3.11-doc_*.deb --perl-deb perl-doc_*.deb --out DIR
  corpus.py --out DIR          (runs `apt-get download python3.11-doc perl-doc` first)

perl-doc (GPL-1+ or Artistic) adds the Perl manual pages (pod, rendered with
pod2text), with the same held-out rule; the evaluation text stays Python's.

Writes DIR/train.txt, DIR/heldout.txt and DIR/eval.txt (the first ~64 KB of
the held-out text, cut at a paragraph end: what the repository commits). A document goes to the held-out part
when its index in sorted path order is 7 mod 25 (about 4%), so no sentence of
the held-out text is trained on. DIR/manifest.json records the package, its
version, the sha256 of the .deb and of both outputs.
"""
import argparse
import glob
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

SECTIONS = ["tutorial", "reference", "howto", "faq", "library", "using", "extending", "c-api", "whatsnew",
            "glossary.rst.txt"]
MAX_TRAIN = 12_000_000  # characters
EVAL_CHARS = 65536

ROLE = re.compile(r":[a-zA-Z0-9:_+-]+:`([^`]*)`")
REF_TARGET = re.compile(r"^(.*?)\s*<[^<>]*>$", re.S)
LINK = re.compile(r"`([^`<]*?)\s*<[^`>]*>`_+")
LINK2 = re.compile(r"`([^`]+)`_+")
LIT = re.compile(r"``([^`]+)``")
EMPH = re.compile(r"(\*\*|\*)(\S[^*]*?\S|\S)\1")
UNDER = re.compile(r"^([=\-~^\"'`#*+.:_])\1{2,}\s*$")
DIRECTIVE = re.compile(r"^\s*\.\.\s+(\S+::|_[^:]*:|\|[^|]*\|)")
OPTION = re.compile(r"^\s+:[a-zA-Z-]+:")
COMMENT = re.compile(r"^\s*\.\.(\s|$)")

KEEP_BODY = {"note::", "warning::", "seealso::", "tip::", "important::", "versionadded::",
             "versionchanged::", "deprecated::", "impl-detail::", "attention::", "caution::",
             "function::", "method::", "class::", "attribute::", "data::", "exception::",
             "decorator::", "describe::", "cmdoption::", "option::", "envvar::", "opcode::",
             "productionlist::", "code-block::", "sourcecode::", "doctest::", "testcode::"}


def role_text(m):
    t = m.group(1)
    r = REF_TARGET.match(t)
    if r and r.group(1):
        t = r.group(1)
    return t.lstrip("!~")


def inline(s):
    s = ROLE.sub(role_text, s)
    s = LINK.sub(lambda m: m.group(1), s)
    s = LINK2.sub(lambda m: m.group(1), s)
    s = LIT.sub(lambda m: m.group(1), s)
    s = EMPH.sub(lambda m: m.group(2), s)
    s = s.replace("\\ ", "").replace("::", ":")
    return s


def clean(text):
    out = []
    skip_indent = None  # drop the indented block of a comment / markup directive
    for line in text.splitlines():
        ind = len(line) - len(line.lstrip(" "))
        if skip_indent is not None:
            if line.strip() == "" or ind > skip_indent:
                continue
            skip_indent = None
        m = DIRECTIVE.match(line)
        if m:
            name = m.group(1)
            if name in KEEP_BODY:
                rest = line.split("::", 1)[1].strip()
                if name.endswith("::") and name[:-2] in ("function", "method", "class", "attribute", "data",
                                                          "exception", "decorator", "describe"):
                    if rest:
                        out.append(" " * ind + rest)
                continue
            skip_indent = ind
            continue
        if COMMENT.match(line):
            skip_indent = ind
            continue
        if OPTION.match(line) and out and out[-1].strip() == "":
            continue
        if UNDER.match(line):
            continue
        out.append(inline(line.rstrip()))
    s = "\n".join(out)
    s = re.sub(r"\n{3,}", "\n\n", s)
    return s.strip() + "\n"


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deb")
    ap.add_argument("--perl-deb")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        deb, pdeb = a.deb, a.perl_deb
        if not deb or not pdeb:
            subprocess.run(["apt-get", "download", "python3.11-doc", "perl-doc"], cwd=tmp, check=True)
            deb = deb or glob.glob(os.path.join(tmp, "python3.11-doc_*.deb"))[0]
            pdeb = pdeb or glob.glob(os.path.join(tmp, "perl-doc_*.deb"))[0]
        ver = subprocess.run(["dpkg-deb", "-f", deb, "Version"], capture_output=True, text=True,
                             check=True).stdout.strip()
        subprocess.run(["dpkg", "-x", deb, os.path.join(tmp, "x")], check=True)
        root = os.path.join(tmp, "x/usr/share/doc/python3.11/html/_sources")
        paths = []
        for s in SECTIONS:
            p = os.path.join(root, s)
            if os.path.isdir(p):
                paths += glob.glob(os.path.join(p, "**/*.rst.txt"), recursive=True)
            elif os.path.exists(p):
                paths.append(p)
        paths = sorted(os.path.relpath(p, root) for p in paths)
        train, held, ntrain = [], [], 0
        for i, rel in enumerate(paths):
            with open(os.path.join(root, rel), encoding="utf-8") as f:
                doc = clean(f.read())
            if i % 25 == 7:
                held.append(doc)
            elif ntrain < MAX_TRAIN:
                train.append(doc)
                ntrain += len(doc)
        res = {"package": "python3.11-doc", "version": ver, "deb_sha256": sha(deb),
               "licence": "PSF License Version 2 (documentation); code examples also Zero-Clause BSD",
               "sections": SECTIONS, "documents": len(paths), "heldout_rule": "index % 25 == 7"}
        pver = subprocess.run(["dpkg-deb", "-f", pdeb, "Version"], capture_output=True, text=True,
                              check=True).stdout.strip()
        subprocess.run(["dpkg", "-x", pdeb, os.path.join(tmp, "p")], check=True)
        pods = sorted(glob.glob(os.path.join(tmp, "p/usr/share/perl/*/pod/*.pod")))
        nperl = 0
        for i, pod in enumerate(pods):
            if i % 25 == 7:
                continue  # held out (unused: the evaluation text is Python's)
            txt = subprocess.run(["pod2text", pod], capture_output=True, text=True, errors="replace").stdout
            txt = re.sub(r"\n{3,}", "\n\n", txt).strip() + "\n"
            train.append(txt)
            nperl += len(txt)
        res["also"] = {"package": "perl-doc", "version": pver, "deb_sha256": sha(pdeb),
                       "licence": "GPL-1+ or Artistic", "files": "usr/share/perl/*/pod/*.pod via pod2text",
                       "documents": len(pods), "train_chars": nperl}
    joined = "\n".join(held)
    cut = joined.rfind("\n\n", 0, EVAL_CHARS)
    ev = [joined[:cut + 1]]
    for name, docs in (("train.txt", train), ("heldout.txt", held), ("eval.txt", ev)):
        p = os.path.join(a.out, name)
        with open(p + ".tmp", "w", encoding="utf-8") as f:
            f.write("\n".join(docs))
        os.replace(p + ".tmp", p)
        res[name] = {"chars": sum(len(d) for d in docs) + max(0, len(docs) - 1), "documents": len(docs),
                     "sha256": sha(p)}
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    sys.exit(main())
