#!/usr/bin/env python3
"""Lay a model folder out the way the Hugging Face Hub serves it, for nginx.

Writes, under OUT:
  www/api/<commit>.json      the model-info document (?blobs=true shape: sha,
                             siblings with rfilename, size, blobId, lfs.sha256)
  www/cdn/<sha256>           LFS files (*.safetensors, *.model), by content hash
  www/raw/<commit>/<file>    plain git files (json, py, ...)
  nginx.conf                 a server on 127.0.0.1:PORT answering
    GET /api/models/<repo>/revision/<commit or branch>  -> the info document
    GET /api/models/<repo>/tree/<commit or branch>      -> the tree (path, size,
        oid = git blob id (of the LFS pointer for LFS files), lfs.oid = sha256)
    --no-blob-sizes: the info document's siblings have rfilename only (a
        mirror that ignores ?blobs=true); --no-tree: no tree endpoint
    git files carry ETag: "<git blob id>" as the hub sends it (nginx's own ETag
        off); --no-etag: no ETag at all (a mirror whose files cannot be
        verified from a HEAD)
    GET /<repo>/resolve/<commit or branch>/<lfs file>   -> 302 to /cdn/<sha256>
        (X-Repo-Commit, X-Linked-Etag, X-Linked-Size, as the hub sends)
    GET /<repo>/resolve/<commit or branch>/<git file>   -> the file (X-Repo-Commit)
    /cdn/ and /raw/ are static files: nginx's own Range support (206, Content-Range).
The checksums are computed here with hashlib, independently of deltafin.
"""
import argparse
import hashlib
import json
import os
import shutil


def is_lfs(name):
    return name.endswith(".safetensors") or name.endswith(".model")


def git_blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--branch", default="main")
    ap.add_argument("--out", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--no-blob-sizes", action="store_true")
    ap.add_argument("--no-tree", action="store_true")
    ap.add_argument("--no-etag", action="store_true")
    a = ap.parse_args()
    out = os.path.abspath(a.out)
    www = os.path.join(out, "www")
    for d in ("api", "cdn", "raw/" + a.commit):
        os.makedirs(os.path.join(www, d), exist_ok=True)
    for d in ("logs", "tmp"):
        os.makedirs(os.path.join(out, d), exist_ok=True)
    siblings = []
    tree = []
    locs = []
    for name in sorted(os.listdir(a.model)):
        path = os.path.join(a.model, name)
        if not os.path.isfile(path):
            continue
        data = open(path, "rb").read()
        s = {"rfilename": name, "size": len(data), "blobId": git_blob_id(data)}
        t = {"type": "file", "path": name, "size": len(data), "oid": git_blob_id(data)}
        if is_lfs(name):
            sha = hashlib.sha256(data).hexdigest()
            s["lfs"] = {"sha256": sha, "size": len(data), "pointerSize": 134}
            pointer = b"version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (
                sha.encode(), len(data))
            t["oid"] = git_blob_id(pointer)
            t["lfs"] = {"oid": sha, "size": len(data), "pointerSize": len(pointer)}
            shutil.copyfile(path, os.path.join(www, "cdn", sha))
            for rev in (a.commit, a.branch):
                locs.append(
                    "    location = /%s/resolve/%s/%s {\n"
                    "      add_header X-Repo-Commit %s always;\n"
                    "      add_header X-Linked-Etag '\"%s\"' always;\n"
                    "      add_header X-Linked-Size %d always;\n"
                    "      return 302 /cdn/%s;\n    }\n" % (a.repo, rev, name, a.commit, sha, len(data), sha))
        else:
            shutil.copyfile(path, os.path.join(www, "raw", a.commit, name))
            for rev in (a.commit, a.branch):
                locs.append(
                    "    location = /%s/resolve/%s/%s {\n"
                    "      add_header X-Repo-Commit %s always;\n"
                    "      etag off;\n%s"
                    "      try_files /raw/%s/%s =404;\n    }\n" % (
                        a.repo, rev, name, a.commit,
                        "" if a.no_etag else "      add_header ETag '\"%s\"' always;\n" % git_blob_id(data),
                        a.commit, name))
        tree.append(t)
        siblings.append({"rfilename": name} if a.no_blob_sizes else s)
    info = {"_id": "x", "id": a.repo, "modelId": a.repo, "sha": a.commit, "private": False,
            "gated": False, "siblings": siblings}
    with open(os.path.join(www, "api", a.commit + ".json"), "w") as f:
        json.dump(info, f, indent=1)
    with open(os.path.join(www, "api", a.commit + ".tree.json"), "w") as f:
        json.dump(tree, f, indent=1)
    for rev in (a.commit, a.branch) if not a.no_tree else ():
        locs.append("    location = /api/models/%s/tree/%s {\n"
                    "      default_type application/json;\n"
                    "      try_files /api/%s.tree.json =404;\n    }\n" % (a.repo, rev, a.commit))
    for rev in (a.commit, a.branch):
        locs.append("    location = /api/models/%s/revision/%s {\n"
                    "      default_type application/json;\n"
                    "      try_files /api/%s.json =404;\n    }\n" % (a.repo, rev, a.commit))
    user = "user root;\n" if os.geteuid() == 0 else ""
    tmp = os.path.join(out, "tmp")
    conf = f"""{user}daemon off;
worker_processes 2;
pid {out}/nginx.pid;
error_log {out}/logs/error.log warn;
events {{ worker_connections 256; }}
http {{
  log_format hub '$request_method $uri $status $body_bytes_sent "$http_range"';
  access_log {out}/logs/access.log hub;
  client_body_temp_path {tmp}/body;
  proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  default_type application/octet-stream;
  sendfile on;
  absolute_redirect off;
  server {{
    listen 127.0.0.1:{a.port};
    root {www};
    location / {{ return 404; }}
    location /cdn/ {{ }}
{"".join(locs)}  }}
}}
"""
    with open(os.path.join(out, "nginx.conf"), "w") as f:
        f.write(conf)


if __name__ == "__main__":
    main()
