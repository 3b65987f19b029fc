#!/usr/bin/env python3
"""Lay a model folder out as the Hugging Face hub cache holds a download
(the layout huggingface_hub documents in its cache guide), independently of
deltafin:

  CACHE/models--{owner}--{name}/blobs/{etag}     the bytes; etag = the LFS
                                                 sha256 (*.safetensors,
                                                 *.model) or the git blob id
  CACHE/models--{owner}--{name}/snapshots/{commit}/{file} -> ../../blobs/{etag}
  CACHE/models--{owner}--{name}/refs/{ref}       the commit (with --ref)

--skip NAME leaves a file out (a cache with a missing file).
"""
import argparse
import hashlib
import os
import shutil


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--ref")
    ap.add_argument("--skip", action="append", default=[])
    a = ap.parse_args()
    root = os.path.join(a.cache, "models--" + a.repo.replace("/", "--"))
    blobs = os.path.join(root, "blobs")
    snap = os.path.join(root, "snapshots", a.commit)
    os.makedirs(blobs, exist_ok=True)
    os.makedirs(snap, exist_ok=True)
    for name in sorted(os.listdir(a.model)):
        path = os.path.join(a.model, name)
        if not os.path.isfile(path) or name in a.skip or name.endswith(".heat"):
            continue
        data = open(path, "rb").read()
        if name.endswith(".safetensors") or name.endswith(".model"):
            etag = hashlib.sha256(data).hexdigest()
        else:
            etag = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        if not os.path.exists(os.path.join(blobs, etag)):
            shutil.copyfile(path, os.path.join(blobs, etag))
        link = os.path.join(snap, name)
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(os.path.join("..", "..", "blobs", etag), link)
    if a.ref:
        os.makedirs(os.path.join(root, "refs"), exist_ok=True)
        with open(os.path.join(root, "refs", a.ref), "w") as f:
            f.write(a.commit)


if __name__ == "__main__":
    main()
