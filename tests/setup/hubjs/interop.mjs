// The hub's JavaScript client on a hub cache, for tests/e2e/test_setup_hubjs.sh.
//   node interop.mjs scan CACHE          -> JSON: every cached repo, its revisions
//                                           (commit, refs) and files (path, size)
//   node interop.mjs get CACHE REPO REV HUB PATH...
//                                        -> downloadFileToCacheDir for each path
//                                           (reads the cache first; fetches from
//                                           HUB what is not there); prints the
//                                           pointer paths, one a line
import { relative } from "node:path";
import { scanCacheDir, downloadFileToCacheDir } from "@huggingface/hub";

const [cmd, cache, ...rest] = process.argv.slice(2);
if (cmd === "scan") {
  const info = await scanCacheDir(cache);
  if (info.warnings.length) {
    console.error(info.warnings.map(String).join("\n"));
    process.exit(2);
  }
  const repos = info.repos.map((r) => ({
    id: r.id.name,
    type: r.id.type,
    revisions: r.revisions.map((v) => ({
      commit: v.commitOid,
      refs: [...v.refs].sort(),
      files: v.files.map((f) => ({ path: relative(v.path, f.path), size: f.blob.size })).sort((a, b) => (a.path < b.path ? -1 : 1)),
    })),
  }));
  console.log(JSON.stringify(repos));
} else if (cmd === "get") {
  const [repo, revision, hubUrl, ...paths] = rest;
  console.debug = () => {}; // the client's "Downloading ..." chatter
  for (const path of paths) {
    console.log(await downloadFileToCacheDir({ repo, path, revision, hubUrl, cacheDir: cache }));
  }
} else {
  console.error("usage: interop.mjs scan CACHE | get CACHE REPO REV HUB PATH...");
  process.exit(2);
}
