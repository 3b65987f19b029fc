#include "setup/install.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <dirent.h>
#include <fnmatch.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "format/safetensors.h"
#include "model/k3.h"
#include "remote/download.h"
#include "remote/http.h"
#include "remote/hub.h"
#include "remote/sverify.h"
#include "setup/recsums.h"
#include "setup/stream.h"
#include "store/pack.h"

/* The CLI's name for it (the formatter lives with the downloads, below the
 * store, which log sizes too). */
const char *df_setup_fmt_size(uint64_t bytes, char out[24]) { return df_dl_fmt_size(bytes, out); }

/* ---- which files an install needs ---- */

static int ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

/* Root-level files only: the weights, config, tokenizer and its code.
 * Figures, docs and sub-folders are not needed to run the model. */
static int wanted(const char *name) {
  if (strchr(name, '/')) return 0;
  static const char *skip[] = {".md", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".pdf", ".gitattributes"};
  for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
    if (ends_with(name, skip[i])) return 0;
  return 1;
}

static int is_shard(const char *name) { return ends_with(name, ".safetensors"); }

static int glob_any(const char *const *g, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!fnmatch(g[i], name, 0)) return 1;
  return 0;
}

/* NULL when the install takes the file, else why not: --exclude wins, then
 * --include (which replaces the default set), then the default set. */
static const char *skip_reason(const df_setup_opts *o, const char *name) {
  if (glob_any(o->exclude, o->nexclude, name)) return "--exclude";
  if (o->ninclude) return glob_any(o->include, o->ninclude, name) ? NULL : "not in --include";
  if (strchr(name, '/')) return "in a sub-folder";
  return wanted(name) ? NULL : "not needed to run (docs, images)";
}

/* ---- state ---- */

typedef struct state {
  char *root;
  char repo[256], revision[256], commit[41];
  df_hub_info info;
  char *info_json;
  size_t info_len;
  char verify[16]; /* --stream-verify as recorded ("" = auto) */
} state;

static int write_state(state *s, const char *endpoint, int stream, df_err *e) {
  json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "format", "deltafin-setup/1", "repo", s->repo,
                        "revision", s->revision, "commit", s->commit, "endpoint", endpoint,
                        "mode", stream ? "stream" : "full");
  if (s->verify[0]) json_object_set_new(o, "stream_verify", json_string(s->verify));
  char *txt = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS);
  json_decref(o);
  char *p = df_path_join(s->root, DF_SETUP_STATE);
  size_t n = strlen(txt);
  txt = df_xrealloc(txt, n + 2);
  txt[n] = '\n';
  int rc = df_file_write_atomic(p, txt, n + 1, e);
  free(txt);
  free(p);
  return rc;
}

/* A JSON file that may not be there yet: 1 and *out, 0 when absent, -1 when
 * it is not JSON (what to do appended to the message). */
static int json_if_present(const char *path, json_t **out, const char *todo, df_err *e) {
  *out = NULL;
  if (!df_file_exists(path)) return 0;
  json_error_t je;
  *out = json_load_file(path, 0, &je);
  if (!*out) return df_err_set(e, "%s: not JSON (%s)%s", path, je.text, todo);
  return 1;
}

/* Reads the recorded state when it is for the same repo and revision (so a
 * branch is resolved once, when the install starts). 1 = loaded, 0 = none,
 * -1 = error (another model is being installed here). */
static int load_state(state *s, const char *repo, const char *revision, df_err *e) {
  char *p = df_path_join(s->root, DF_SETUP_STATE);
  json_t *o;
  int got = json_if_present(p, &o, "; remove it to start the install again", e);
  if (got <= 0) {
    free(p);
    return got;
  }
  const char *r = json_string_value(json_object_get(o, "repo"));
  const char *v = json_string_value(json_object_get(o, "revision"));
  const char *c = json_string_value(json_object_get(o, "commit"));
  int rc = -1;
  if (!r || !v || !df_hub_is_commit(c)) {
    df_err_set(e, "%s: fields repo, revision and commit are required; remove it to start again", p);
  } else if (strcmp(r, repo)) {
    df_err_set(e, "%s: this folder holds an install of %s, not %s; use another --model-root", p, r,
               repo);
  } else if (strcmp(v, revision) && strcmp(c, revision)) {
    df_err_set(e,
               "%s: this folder holds %s at revision %s (commit %s), not %s; use another "
               "--model-root, or remove the folder to install the new revision",
               p, r, v, c, revision);
  } else {
    snprintf(s->commit, sizeof s->commit, "%s", c);
    const char *sv = json_string_value(json_object_get(o, "stream_verify"));
    df_stream_verify pv;
    if (sv && !df_sverify_parse(sv, &pv)) snprintf(s->verify, sizeof s->verify, "%s", sv);
    rc = 1;
  }
  json_decref(o);
  free(p);
  if (rc != 1) return rc;
  char *ip = df_path_join(s->root, DF_SETUP_INFO);
  rc = df_file_read(ip, &s->info_json, &s->info_len, e);
  if (!rc) rc = df_hub_info_parse(s->info_json, s->info_len, ip, &s->info, e);
  if (!rc && strcmp(s->info.commit, s->commit))
    rc = df_err_set(e, "%s: commit %s differs from %s's %s; remove both to start again", ip,
                    s->info.commit, DF_SETUP_STATE, s->commit);
  free(ip);
  return rc ? -1 : 1;
}

/* ---- verified-file journal: a cache of hashing work, never trusted for
 * a file whose size, mtime or inode changed ---- */

typedef struct vstamp {
  uint64_t size, ino;
  long long mt_s, mt_ns;
} vstamp;

static int stamp_of(const char *path, vstamp *v) {
  struct stat st;
  if (stat(path, &st)) return -1;
  v->size = (uint64_t)st.st_size;
  v->ino = (uint64_t)st.st_ino;
  v->mt_s = (long long)st.st_mtim.tv_sec;
  v->mt_ns = (long long)st.st_mtim.tv_nsec;
  return 0;
}

static int verified_has(const char *root, const char *name, const char *path) {
  vstamp now;
  if (stamp_of(path, &now)) return 0;
  char *p = df_path_join(root, DF_SETUP_VERIFIED), *buf = NULL;
  size_t len = 0;
  df_err e;
  int found = 0;
  if (!df_file_read(p, &buf, &len, &e)) {
    char want[600];
    int n = snprintf(want, sizeof want, "%s\t%llu\t%lld.%09lld\t%llu\n", name,
                     (unsigned long long)now.size, now.mt_s, now.mt_ns, (unsigned long long)now.ino);
    for (char *line = buf; line && *line;) {
      char *nl = strchr(line, '\n');
      if (!nl) break;
      if ((size_t)(nl + 1 - line) == (size_t)n && !memcmp(line, want, (size_t)n)) found = 1;
      line = nl + 1;
    }
    free(buf);
  }
  free(p);
  return found;
}

static int verified_add(const char *root, const char *name, const char *path, df_err *e) {
  vstamp v;
  if (stamp_of(path, &v)) return df_err_errno(e, "%s", path);
  char *p = df_path_join(root, DF_SETUP_VERIFIED);
  int fd = open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    df_err_errno(e, "%s", p);
    free(p);
    return -1;
  }
  char line[600];
  int n = snprintf(line, sizeof line, "%s\t%llu\t%lld.%09lld\t%llu\n", name,
                   (unsigned long long)v.size, v.mt_s, v.mt_ns, (unsigned long long)v.ino);
  int rc = 0;
  if (write(fd, line, (size_t)n) != n || fdatasync(fd)) rc = df_err_errno(e, "appending to %s", p);
  close(fd);
  free(p);
  return rc;
}

/* ---- local reuse ---- */

static int copy_in(const char *src, const char *dest, df_err *e) {
  size_t n = strlen(dest) + 16;
  char *tmp = df_xmalloc(n);
  snprintf(tmp, n, "%s.copy.tmp", dest);
  unlink(tmp);
  /* A hard link costs nothing and the bytes are verified; the hub cache's
   * snapshot entries are symlinks to blobs, so follow them. */
  if (linkat(AT_FDCWD, src, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) == 0) {
    int rc = rename(tmp, dest) ? df_err_errno(e, "renaming %s", tmp) : 0;
    free(tmp);
    return rc;
  }
  int in = open(src, O_RDONLY | O_CLOEXEC), out = -1, rc = 0;
  if (in < 0) rc = df_err_errno(e, "%s", src);
  else if ((out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
    rc = df_err_errno(e, "%s", tmp);
  char *buf = df_xmalloc(4u << 20);
  while (!rc) {
    ssize_t r = read(in, buf, 4u << 20);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) rc = df_err_errno(e, "reading %s", src);
    if (r <= 0) break;
    if (write(out, buf, (size_t)r) != r) rc = df_err_errno(e, "writing %s", tmp);
  }
  free(buf);
  if (!rc && fsync(out)) rc = df_err_errno(e, "syncing %s", tmp);
  if (in >= 0) close(in);
  if (out >= 0) close(out);
  if (!rc && rename(tmp, dest)) rc = df_err_errno(e, "renaming %s", tmp);
  if (rc) unlink(tmp);
  free(tmp);
  return rc;
}

/* Looks for a verified copy of f in the local folder or the hub cache: its
 * snapshot of this commit, else its blob store, where a file is named by its
 * content (LFS sha256 or git blob id) whatever commit brought it, so a new
 * commit with the same files finds them all. */
static int try_reuse(const df_setup_opts *o, const state *s, const df_hub_file *f, const char *dest,
                     int *reused, df_err *e) {
  *reused = 0;
  char *cands[3] = {NULL, NULL, NULL};
  if (o->from_dir) cands[0] = df_path_join(o->from_dir, f->name);
  char *snap = df_hub_cache_snapshot(s->repo, s->commit);
  cands[1] = df_path_join(snap, f->name);
  free(snap);
  cands[2] = df_hub_cache_blob(s->repo, f);
  int rc = 0;
  for (int i = 0; i < 3 && !*reused; i++) {
    struct stat st;
    if (!cands[i] || stat(cands[i], &st) || (uint64_t)st.st_size != f->size) continue;
    df_err ve;
    if (df_hub_verify_file(cands[i], f, &ve)) {
      df_log_warn("not reusing %s: %s", cands[i], ve.msg);
      continue;
    }
    if (copy_in(cands[i], dest, e)) {
      rc = -1;
      break;
    }
    df_log_info("reused %s (verified)", cands[i]);
    *reused = 1;
  }
  for (int i = 0; i < 3; i++) free(cands[i]);
  return rc;
}

/* ---- writing into the hub cache (--hf-cache) ---- */

/* path -> dest by a temporary name and a rename: a hard link when they
 * share a filesystem (no second copy of a shard), else a copy. */
static int place_file(const char *src, const char *dest, df_err *e) {
  char *dir = df_xstrdup(dest);
  *strrchr(dir, '/') = 0;
  int rc = df_mkdir_p(dir, e);
  free(dir);
  return rc ? -1 : copy_in(src, dest, e);
}

/* A relative symlink at `at` to `target` (both under the repo folder), by a
 * temporary name and a rename. */
static int place_link(const char *target, const char *at, df_err *e) {
  char *dir = df_xstrdup(at);
  *strrchr(dir, '/') = 0;
  int rc = df_mkdir_p(dir, e);
  free(dir);
  if (rc) return -1;
  size_t n = strlen(at) + 16;
  char *tmp = df_xmalloc(n);
  snprintf(tmp, n, "%s.link.tmp", at);
  unlink(tmp);
  if (symlink(target, tmp) || rename(tmp, at)) {
    rc = df_err_errno(e, "linking %s", at);
    unlink(tmp);
  }
  free(tmp);
  return rc;
}

/* Puts a verified file where the hub's tools look for it: blobs/{etag}
 * (the LFS sha256 or git blob id), snapshots/{commit}/{name} linking to it,
 * and refs/{revision} naming the commit when the revision is a branch or a
 * tag; hf download, transformers and huggingface.js then reuse it. */
static int to_hub_cache(const state *s, const df_hub_file *f, const char *path, df_err *e) {
  char *blob = df_hub_cache_blob(s->repo, f);
  if (!blob) return 0;
  struct stat st;
  int rc = 0;
  if (stat(blob, &st) || (uint64_t)st.st_size != f->size) rc = place_file(path, blob, e);
  char *snap = df_hub_cache_snapshot(s->repo, s->commit), *at = df_path_join(snap, f->name);
  /* ../../blobs/{etag}, one more ../ per folder of the name */
  size_t cap = strlen(f->name) * 2 + 160, len = 0;
  char *target = df_xmalloc(cap);
  target[0] = 0;
  for (const char *p = f->name; (p = strchr(p, '/')); p++) len += (size_t)snprintf(target + len, cap - len, "../");
  snprintf(target + len, cap - len, "../../blobs/%s", strrchr(blob, '/') + 1);
  char cur[4096];
  ssize_t cn = readlink(at, cur, sizeof cur - 1);
  if (cn >= 0) cur[cn] = 0;
  if (!rc && (cn < 0 || strcmp(cur, target))) rc = place_link(target, at, e);
  free(target);
  free(at);
  free(snap);
  free(blob);
  return rc;
}

static int hub_cache_write(const df_setup_opts *o, const state *s, df_err *e) {
  int n = 0;
  for (int i = 0; i < s->info.nfiles; i++) {
    const df_hub_file *f = &s->info.files[i];
    if (skip_reason(o, f->name)) continue;
    char *p = df_path_join(s->root, f->name), *rj = df_dl_journal_path(p, 1);
    struct stat st;
    /* complete files only (a header-only or stream shard has a journal) */
    int ok = !df_file_exists(rj) && !stat(p, &st) && (uint64_t)st.st_size == f->size;
    int rc = ok ? to_hub_cache(s, f, p, e) : 0;
    free(p);
    free(rj);
    if (rc) return -1;
    n += ok;
  }
  if (strcmp(s->revision, s->commit)) {
    char *ref = df_hub_cache_ref(s->repo, s->revision);
    if (ref) {
      char *dir = df_xstrdup(ref);
      *strrchr(dir, '/') = 0;
      int rc = df_mkdir_p(dir, e) || df_file_write_atomic(ref, s->commit, strlen(s->commit), e);
      free(dir);
      free(ref);
      if (rc) return -1;
    }
  }
  char *repo = df_hub_cache_repo(s->repo);
  df_log_info("hub cache: %d files of %s@%s in %s", n, s->repo, s->commit, repo);
  free(repo);
  return 0;
}

/* ---- disk space ---- */

static int space_check(const char *dir, uint64_t need, const char *what, df_err *e) {
  struct statvfs v;
  if (statvfs(dir, &v)) return df_err_errno(e, "statvfs %s", dir);
  uint64_t avail = (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
  uint64_t margin = need / 50 + (64u << 20); /* filesystems misbehave when full */
  char a[24], n[24], m[24];
  if (avail < need + margin)
    return df_err_set(e,
                      "%s: %s free, %s needs %s (plus a %s margin); free space or "
                      "choose another folder (--no-space-check skips this check)",
                      dir, df_dl_fmt_size(avail, a), what, df_dl_fmt_size(need, n),
                      df_dl_fmt_size(margin, m));
  return 0;
}

/* ---- vision-only shards ---- */


/* vis[i] = 1 when the index maps only vision tensors to shard i. */
static int mark_vision_only(const char *root, const df_dl_item *sh, int n, int *vis, df_err *e) {
  char *ip = df_path_join(root, "model.safetensors.index.json");
  json_t *o;
  int got = json_if_present(ip, &o, "", e);
  free(ip);
  if (got <= 0) return got;
  const json_t *wm = json_object_get(o, "weight_map");
  int *any = df_xcalloc((size_t)(n ? n : 1), sizeof *any), *other = df_xcalloc((size_t)(n ? n : 1), sizeof *other);
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)wm, k, v) {
    const char *file = json_string_value(v);
    if (!file) continue;
    for (int i = 0; i < n; i++)
      if (!strcmp(file, sh[i].file->name)) {
        any[i] = 1;
        if (!df_st_is_vision_name(k)) other[i] = 1;
      }
  }
  for (int i = 0; i < n; i++) vis[i] = any[i] && !other[i];
  free(any);
  free(other);
  json_decref(o);
  return 0;
}

/* Every shard the index maps a tensor to must be in the model info: a
 * snapshot in the hub cache may hold only some files (the model info is
 * rebuilt from it offline), and an install without one of them is no model. */
static int index_complete(const df_setup_opts *o, const state *s, int offline, df_err *e) {
  char *ip = df_path_join(s->root, "model.safetensors.index.json");
  json_t *ix;
  int got = json_if_present(ip, &ix, "", e);
  free(ip);
  if (got <= 0) return got;
  const char *k;
  json_t *v;
  int rc = 0;
  json_object_foreach(json_object_get(ix, "weight_map"), k, v) {
    const char *file = json_string_value(v);
    const char *why = file ? skip_reason(o, file) : NULL;
    if (file && why) {
      rc = df_err_set(e,
                      "%s is left out (%s), but model.safetensors.index.json maps tensors to it: "
                      "the model cannot run without it",
                      file, why);
      break;
    }
    if (!file || df_hub_info_find(&s->info, file)) continue;
    rc = df_err_set(e, "%s (named by model.safetensors.index.json) is not in %s: %s", file,
                    offline ? "the hub cache's snapshot" : "the model info",
                    offline ? "offline (HF_HUB_OFFLINE or --offline), nothing may be downloaded; "
                              "run setup without offline to fetch it"
                            : "the repository is incomplete at this revision");
    break;
  }
  json_decref(ix);
  return rc;
}

/* ---- the install ---- */

static int is_hex_n(const char *v, size_t n) {
  if (strlen(v) != n) return 0;
  for (; *v; v++)
    if (!strchr("0123456789abcdef", *v)) return 0;
  return 1;
}

/* A mirror with neither ?blobs=true sizes nor a tree: one HEAD per file,
 * as the hub's tools ask for a file's metadata: X-Linked-Etag (the sha256)
 * and X-Linked-Size for an LFS file, else the ETag (the git blob id) and
 * the length. A file that gives neither cannot be verified: refused. */
static int info_from_heads(df_http *h, const char *endpoint, const char *repo, const char *info,
                           size_t ilen, char **out, size_t *olen, df_err *e) {
  json_error_t je;
  json_t *io = json_loadb(info, ilen, 0, &je);
  const char *sha = json_string_value(json_object_get(io, "sha"));
  json_t *sib = json_object_get(io, "siblings"), *ns = json_array();
  size_t i;
  json_t *v;
  int rc = 0;
  json_array_foreach(sib, i, v) {
    const char *name = json_string_value(json_object_get(v, "rfilename"));
    if (!name || !df_hub_name_valid(name)) {
      rc = df_err_set(e, "the model info's siblings[%zu] has no usable 'rfilename'", i);
      break;
    }
    char *url = df_hub_file_url(endpoint, repo, sha, name);
    df_http_meta m;
    rc = df_http_head(h, url, &m, e);
    json_t *f = NULL;
    if (rc) {
      df_err_prefix(e, "%s: ", name);
    } else if (is_hex_n(m.linked_etag, 64) && m.linked_size >= 0) {
      f = json_pack("{s:s,s:I,s:{s:s,s:I}}", "rfilename", name, "size", (json_int_t)m.linked_size,
                    "lfs", "sha256", m.linked_etag, "size", (json_int_t)m.linked_size);
    } else if (is_hex_n(m.etag, 40) && m.content_length >= 0) {
      f = json_pack("{s:s,s:I,s:s}", "rfilename", name, "size", (json_int_t)m.content_length,
                    "blobId", m.etag);
    } else {
      rc = df_err_set(e,
                      "%s: HEAD %s gives neither X-Linked-Etag/X-Linked-Size (an LFS file's sha256) "
                      "nor an ETag that is a git blob id: it cannot be verified",
                      name, url);
    }
    free(url);
    if (rc) break;
    json_array_append_new(ns, f);
  }
  if (!rc) {
    json_object_set_new(io, "siblings", ns);
    *out = json_dumps(io, JSON_INDENT(1));
    *olen = strlen(*out);
  } else {
    json_decref(ns);
  }
  json_decref(io);
  return rc;
}

static int fetch_info(const df_setup_opts *o, state *s, const char *endpoint, df_http_gate *gate,
                      df_err *e) {
  char *tok = df_hub_token();
  df_http_cfg hc = {.token = tok, .retries = o->retries, .backoff_s = o->backoff_s,
                    .stall_s = o->stall_s, .what = o->repo, .gate = gate};
  df_http *h = df_http_new(&hc);
  if (tok) {
    memset(tok, 0, strlen(tok));
    free(tok);
  }
  char *url = df_hub_info_url(endpoint, o->repo, o->revision);
  df_http_meta m;
  int rc = df_http_get(h, url, 64u << 20, &s->info_json, &s->info_len, &m, e);
  if (!rc && !df_hub_info_has_sizes(s->info_json, s->info_len)) {
    /* a mirror that ignores ?blobs=true: sizes and checksums from the tree */
    json_error_t je;
    json_t *io = json_loadb(s->info_json, s->info_len, 0, &je);
    const char *sha = json_string_value(json_object_get(io, "sha"));
    char *turl = df_hub_is_commit(sha) ? df_hub_tree_url(endpoint, o->repo, sha) : NULL, *tree = NULL,
         *merged = NULL;
    size_t tlen = 0, mlen = 0;
    if (!turl) rc = df_err_set(e, "%s: no sizes in the model info, and no commit 'sha' to ask the tree of", url);
    else if (df_http_get(h, turl, 64u << 20, &tree, &tlen, &m, e)) {
      if (m.status == 404 || m.status == 405 || m.status == 501) {
        df_log_info("the endpoint gives no sizes with ?blobs=true and has no tree API: one HEAD per file");
        rc = info_from_heads(h, endpoint, o->repo, s->info_json, s->info_len, &merged, &mlen, e);
        if (rc) df_err_prefix(e, "the model info (%s) gives no file sizes and the tree API answers %ld: ",
                              url, m.status);
        else {
          free(s->info_json);
          s->info_json = merged;
          s->info_len = mlen;
        }
      } else {
        rc = df_err_prefix(e, "the model info (%s) gives no file sizes (a mirror without ?blobs=true), "
                              "and its tree could not be read: ", url);
      }
    } else if (!(rc = df_hub_info_from_tree(s->info_json, s->info_len, tree, tlen, turl, &merged, &mlen, e))) {
      df_log_info("the endpoint gives no sizes with ?blobs=true: sizes and checksums from its tree API");
      free(s->info_json);
      s->info_json = merged;
      s->info_len = mlen;
    }
    json_decref(io);
    free(turl);
    free(tree);
  }
  df_http_free(h);
  if (!rc) rc = df_hub_info_parse(s->info_json, s->info_len, url, &s->info, e);
  if (!rc && df_hub_is_commit(o->revision) && strcmp(s->info.commit, o->revision))
    rc = df_err_set(e, "%s: the endpoint answered commit %s for revision %s", url, s->info.commit,
                    o->revision);
  free(url);
  if (rc) return -1;
  snprintf(s->commit, sizeof s->commit, "%s", s->info.commit);
  if (strcmp(s->commit, o->revision))
    df_log_info("revision %s is commit %s (recorded; reruns use it)", o->revision, s->commit);
  if (o->dry_run) return 0;
  char *ip = df_path_join(s->root, DF_SETUP_INFO);
  rc = df_file_write_atomic(ip, s->info_json, s->info_len, e);
  free(ip);
  return rc;
}

/* Offline, without an earlier install: the model info is rebuilt from the
 * hub cache. The revision is a commit or a ref the cache recorded
 * (refs/{rev}); each top-level snapshot entry links to blobs/{etag}, and the
 * etag is the file's LFS sha256 (64 hex) or git blob id (40 hex), so every
 * file is still verified against the checksum the hub gave for it. */
static int offline_info(const df_setup_opts *o, state *s, df_err *e) {
  char commit[41] = "";
  if (df_hub_is_commit(o->revision)) snprintf(commit, sizeof commit, "%s", o->revision);
  else {
    char *rp = df_hub_cache_ref(o->repo, o->revision), *buf = NULL;
    size_t len = 0;
    df_err re;
    if (rp && !df_file_read(rp, &buf, &len, &re)) {
      while (len && (buf[len - 1] == '\n' || buf[len - 1] == ' ')) buf[--len] = 0;
      if (df_hub_is_commit(buf)) snprintf(commit, sizeof commit, "%s", buf);
    }
    free(buf);
    if (!commit[0]) {
      df_err_set(e,
                 "offline (HF_HUB_OFFLINE or --offline): %s has no earlier install and the hub "
                 "cache has no commit for revision '%s' of %s (%s); run setup once online, or "
                 "give --revision a commit that is in the cache",
                 s->root, o->revision, o->repo, rp ? rp : "not a ref name");
      free(rp);
      return -1;
    }
    free(rp);
  }
  char *snap = df_hub_cache_snapshot(o->repo, commit);
  DIR *d = opendir(snap);
  if (!d) {
    df_err_errno(e,
                 "offline (HF_HUB_OFFLINE or --offline): %s has no earlier install and the hub "
                 "cache has no snapshot of %s@%s (%s)",
                 s->root, o->repo, commit, snap);
    free(snap);
    return -1;
  }
  json_t *sib = json_array();
  int rc = 0;
  struct dirent *de;
  while (!rc && (de = readdir(d))) {
    if (de->d_name[0] == '.' || !df_hub_name_valid(de->d_name)) continue;
    char *p = df_path_join(snap, de->d_name), target[4096];
    struct stat st;
    ssize_t n = readlink(p, target, sizeof target - 1);
    if (stat(p, &st) || !S_ISREG(st.st_mode)) {
      free(p);
      continue;
    }
    if (n < 0) {
      rc = df_err_set(e, "%s: not a link to the cache's blobs: cannot tell its checksum offline", p);
      free(p);
      break;
    }
    target[n] = 0;
    const char *etag = strrchr(target, '/');
    etag = etag ? etag + 1 : target;
    size_t el = strlen(etag);
    int hex = el == 40 || el == 64;
    for (size_t k = 0; hex && k < el; k++) hex = strchr("0123456789abcdef", etag[k]) != NULL;
    if (!hex) {
      rc = df_err_set(e, "%s: links to '%s', not a blob named by its checksum", p, target);
      free(p);
      break;
    }
    json_t *f = json_pack("{s:s,s:I}", "rfilename", de->d_name, "size", (json_int_t)st.st_size);
    if (el == 64) json_object_set_new(f, "lfs", json_pack("{s:s,s:I}", "sha256", etag, "size",
                                                          (json_int_t)st.st_size));
    else json_object_set_new(f, "blobId", json_string(etag));
    json_array_append_new(sib, f);
    free(p);
  }
  closedir(d);
  if (!rc && !json_array_size(sib))
    rc = df_err_set(e, "offline: the hub cache's snapshot %s holds no files", snap);
  free(snap);
  if (rc) {
    json_decref(sib);
    return -1;
  }
  json_t *doc = json_pack("{s:s,s:s,s:o}", "id", o->repo, "sha", commit, "siblings", sib);
  s->info_json = json_dumps(doc, JSON_INDENT(1) | JSON_SORT_KEYS);
  json_decref(doc);
  s->info_len = strlen(s->info_json);
  if (df_hub_info_parse(s->info_json, s->info_len, "the hub cache's snapshot", &s->info, e))
    return -1;
  snprintf(s->commit, sizeof s->commit, "%s", commit);
  df_log_info("offline: %s@%s from the hub cache (%d files)", o->repo, commit, s->info.nfiles);
  if (o->dry_run) return 0;
  char *ip = df_path_join(s->root, DF_SETUP_INFO);
  rc = df_file_write_atomic(ip, s->info_json, s->info_len, e);
  free(ip);
  return rc;
}

/* ---- stream verification (remote/sverify.h, remote/recsums.h) ---- */

static int have_sums(const state *s) {
  char *p = df_path_join(s->root, DF_RECSUMS_FILE);
  int r = df_file_exists(p);
  free(p);
  return r;
}

/* Before anything is fetched: the policy to record (an explicit one wins,
 * else the recorded one stays) and the record sums, loaded and checked
 * against the pinned revision's model info. */
static int verify_options(const df_setup_opts *o, state *s, const char *endpoint,
                          df_recsums **sums, char **buf, size_t *len, df_err *e) {
  df_stream_verify want;
  if (o->stream_verify) {
    if (df_sverify_parse(o->stream_verify, &want))
      return df_err_set(e, "--stream-verify: '%s' is not record, shard or arrival", o->stream_verify);
    snprintf(s->verify, sizeof s->verify, "%s", o->stream_verify);
  }
  if (o->record_sums) {
    /* the token goes only to the endpoint it is for, never to another host */
    size_t el = strlen(endpoint);
    int ours = !strncmp(o->record_sums, endpoint, el) && o->record_sums[el] == '/';
    char *tok = ours ? df_hub_token() : NULL;
    df_http_cfg hc = {.token = tok, .retries = o->retries, .backoff_s = o->backoff_s,
                      .stall_s = o->stall_s, .what = o->record_sums};
    int rc = df_recsums_load(o->record_sums, &hc, &s->info, sums, buf, len, e);
    if (tok) {
      memset(tok, 0, strlen(tok));
      free(tok);
    }
    if (rc) return -1;
  }
  if (!strcmp(s->verify, "record") && !*sums && !have_sums(s))
    return df_err_set(e, "--stream-verify record needs record sums: add --record-sums FILE|URL "
                      "(deltafin record-sums --model DIR --out FILE makes them from a verified "
                      "full install of %s@%s)", s->repo, s->commit);
  return 0;
}

/* With record sums (given now, or stored), the header and spine tensors just
 * fetched are checked against their spans: a wrong byte there is caught now,
 * not when the shard completes. */
static int check_spine(const state *s, const df_recsums *given, int fetched, const char *endpoint,
                       df_err *e) {
  if (!fetched) return 0;
  df_recsums *rs = (df_recsums *)given;
  char *buf = NULL;
  size_t len = 0;
  if (!rs && have_sums(s)) {
    char *p = df_path_join(s->root, DF_RECSUMS_FILE);
    df_http_cfg none = {0};
    int rc = df_recsums_load(p, &none, &s->info, &rs, &buf, &len, e);
    free(p);
    if (rc) return -1;
  }
  int checked = 0, rc = rs ? df_recsums_check_spans(s->root, rs, endpoint, &checked, e) : 0;
  if (!rc && checked) df_log_info("headers and spine checked against the record sums (%d spans)", checked);
  if (rs != given) df_recsums_free(rs);
  free(buf);
  return rc;
}

/* Record sums are only added while no fetcher has the install open (see
 * DF_SETUP_FETCH_LOCK); the lock stays held (*fd) until setup ends. */
static int lock_out_fetchers(const state *s, int *fd, df_err *e) {
  char *p = df_path_join(s->root, DF_SETUP_FETCH_LOCK);
  *fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  free(p);
  if (*fd < 0) return df_err_errno(e, "%s/%s", s->root, DF_SETUP_FETCH_LOCK);
  if (flock(*fd, LOCK_EX | LOCK_NB) == 0) return 0;
  return df_err_set(e,
                    "%s: a deltafin run, serve or warm is fetching into this stream install; record "
                    "sums can only be added while none is (it would keep using experts it fetched "
                    "unchecked): stop it and run this setup again",
                    s->root);
}

static int store_sums(const state *s, const char *buf, size_t len, df_err *e) {
  char *p = df_path_join(s->root, DF_RECSUMS_FILE);
  int rc = df_file_write_atomic(p, buf, len, e);
  free(p);
  return rc;
}

static void warn_if_arrival(const state *s) {
  if (!strcmp(s->verify, "arrival") || (!s->verify[0] && !have_sums(s)))
    df_sverify_warn_arrival(s->root);
  else
    df_log_info("stream verify: %s", s->verify[0] ? s->verify : "record (record sums present)");
}

/* --dry-run: one line per file of the model info, on stdout, and totals;
 * nothing is written or hashed (a size that matches is "present" or
 * "reuse": setup verifies it before it trusts it). */
static int dry_run(const df_setup_opts *o, const state *s, df_err *e) {
  (void)e;
  uint64_t sum[4] = {0};
  int cnt[4] = {0};
  static const char *act[4] = {"download", "reuse", "present", "skip"};
  printf("%s@%s: %d files in the model info\n", s->repo, s->commit, s->info.nfiles);
  for (int i = 0; i < s->info.nfiles; i++) {
    const df_hub_file *f = &s->info.files[i];
    const char *why = skip_reason(o, f->name);
    char *dest = df_path_join(s->root, f->name), *from = NULL, *rj = df_dl_journal_path(dest, 1),
         *pj = df_dl_journal_path(dest, 0);
    struct stat st;
    int a = 0;
    uint64_t part = 0;
    if (why) a = 3;
    else if (!df_file_exists(rj) && !stat(dest, &st) && (uint64_t)st.st_size == f->size) a = 2;
    else if (df_file_exists(rj) || df_file_exists(pj)) {
      df_dl_item it = {.file = f, .dest = dest, .in_place = df_file_exists(rj)};
      df_err me;
      uint64_t miss = f->size;
      if (!df_dl_missing(&it, &miss, &me)) part = f->size - miss;
    } else {
      char *c[3] = {o->from_dir ? df_path_join(o->from_dir, f->name) : NULL, NULL,
                    df_hub_cache_blob(s->repo, f)};
      char *snap = df_hub_cache_snapshot(s->repo, s->commit);
      c[1] = df_path_join(snap, f->name);
      free(snap);
      for (int k = 0; k < 3 && !from; k++)
        if (c[k] && !stat(c[k], &st) && (uint64_t)st.st_size == f->size) from = df_xstrdup(c[k]);
      for (int k = 0; k < 3; k++) free(c[k]);
      if (from) a = 1;
    }
    char z[24];
    uint64_t n = a == 0 ? f->size - part : f->size;
    sum[a] += n;
    cnt[a]++;
    printf("%-8s %10s  %s", act[a], df_dl_fmt_size(n, z), f->name);
    if (why) printf("  (%s)", why);
    if (from) printf("  (from %s)", from);
    if (part) printf("  (%s of it already here)", df_dl_fmt_size(part, z));
    printf("\n");
    free(from);
    free(dest);
    free(rj);
    free(pj);
  }
  static const char *tot[4] = {"to download", "to reuse", "already present", "skipped"};
  for (int a = 0; a < 4; a++) {
    char z[24];
    printf("%s%d %s (%s)", a ? ", " : "total: ", cnt[a], tot[a], df_dl_fmt_size(sum[a], z));
  }
  printf("\n%s", o->stream ? "(--stream fetches only the headers and the spine of the shards)\n" : "");
  return 0;
}

static int setup_run(const df_setup_opts *o, df_setup_report *rep, df_err *e);

/* No --revision: what the folder's install recorded, else main (as the
 * hub's tools default). Fresh string. */
static char *default_revision(const char *root) {
  char *p = df_path_join(root, DF_SETUP_STATE);
  json_error_t je;
  json_t *o = df_file_exists(p) ? json_load_file(p, 0, &je) : NULL;
  const char *v = json_string_value(json_object_get(o, "revision"));
  char *r = df_xstrdup(v && *v ? v : "main");
  json_decref(o);
  free(p);
  return r;
}

int df_setup_run(const df_setup_opts *o_in, df_setup_report *rep, df_err *e) {
  df_setup_opts oo = *o_in;
  const df_setup_opts *o = &oo;
  char *rev_owned = NULL;
  if (!oo.revision && oo.model_root) oo.revision = rev_owned = default_revision(oo.model_root);
  int rc0 = setup_run(o, rep, e);
  free(rev_owned);
  return rc0;
}

static int setup_run(const df_setup_opts *o, df_setup_report *rep, df_err *e) {
  memset(rep, 0, sizeof *rep);
  double t0 = df_now();
  if (!df_hub_repo_valid(o->repo))
    return df_err_set(e, "--repo '%s' is not a repository id like owner/name", o->repo ? o->repo : "");
  if (!o->revision || !*o->revision) return df_err_set(e, "--revision is required (a commit sha or branch)");
  if (!o->model_root) return df_err_set(e, "--model-root DIR is required");
  int lfd = -1;
  if (!o->dry_run) { /* a dry run writes nothing, not even the folder */
    if (df_mkdir_p(o->model_root, e)) return -1;
    /* One setup per model root at a time (held until this process exits). */
    char *lp = df_path_join(o->model_root, ".deltafin-setup.lock");
    lfd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    free(lp);
    if (lfd < 0) return df_err_errno(e, "%s/.deltafin-setup.lock", o->model_root);
  }
  if (lfd >= 0 && flock(lfd, LOCK_EX | LOCK_NB)) {
    close(lfd);
    return df_err_set(e, "%s: another deltafin setup is working on this folder; wait for it",
                      o->model_root);
  }
  state s = {0};
  s.root = df_xstrdup(o->model_root);
  snprintf(s.repo, sizeof s.repo, "%s", o->repo);
  snprintf(s.revision, sizeof s.revision, "%s", o->revision);
  char *endpoint = df_hub_endpoint(o->endpoint);
  df_dl_item *items = NULL;
  char **dests = NULL, **urls = NULL;
  df_stream_plan *plan = NULL;
  df_recsums *sums = NULL;
  char *sums_buf = NULL;
  size_t sums_len = 0;
  int rc = -1, nitems = 0, flfd = -1;
  int offline = o->offline || df_hub_offline();
  /* one patience for every request of this setup */
  df_http_gate *gate = df_http_gate_new(o->max_wait_s);
  int ls = load_state(&s, o->repo, o->revision, e);
  if (ls < 0) goto out;
  if (ls == 0 && (offline ? offline_info(o, &s, e) : fetch_info(o, &s, endpoint, gate, e))) goto out;
  if (o->dry_run) {
    rc = dry_run(o, &s, e);
    goto out;
  }
  if (offline && o->record_sums && strstr(o->record_sums, "://")) {
    df_err_set(e, "offline (HF_HUB_OFFLINE or --offline): --record-sums %s is a URL; give a file",
               o->record_sums);
    goto out;
  }
  if (o->stream && verify_options(o, &s, endpoint, &sums, &sums_buf, &sums_len, e)) goto out;
  /* stored before anything is fetched: a rerun after a failure (or a kill)
   * checks what it fetches against them too */
  if (sums && (lock_out_fetchers(&s, &flfd, e) || store_sums(&s, sums_buf, sums_len, e))) goto out;
  if (write_state(&s, endpoint, o->stream, e)) goto out;

  int nf = s.info.nfiles;
  items = df_xcalloc((size_t)nf + 1, sizeof *items);
  dests = df_xcalloc((size_t)nf + 1, sizeof *dests);
  urls = df_xcalloc((size_t)nf + 1, sizeof *urls);
  uint64_t need = 0;
  /* Small files first (config, tokenizer, index): a stream install needs the
   * index before it can plan the shards. */
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < nf; i++) {
      const df_hub_file *f = &s.info.files[i];
      if (skip_reason(o, f->name) || is_shard(f->name) != pass) continue;
      rep->files_total++;
      char *dest = df_path_join(s.root, f->name);
      if (strchr(f->name, '/')) { /* a sub-folder file (--include) */
        char *dir = df_xstrdup(dest);
        *strrchr(dir, '/') = 0;
        int mk = df_mkdir_p(dir, e);
        free(dir);
        if (mk) goto out_dest;
      }
      char *rj = df_dl_journal_path(dest, 1);
      int partial_inplace = df_file_exists(rj);
      free(rj);
      if (!partial_inplace && df_file_exists(dest)) {
        /* a kill between a download's rename and its journal's removal */
        char *pj = df_dl_journal_path(dest, 0);
        unlink(pj);
        free(pj);
        if (verified_has(s.root, f->name, dest)) {
          rep->bytes_present += f->size;
          free(dest);
          continue;
        }
        df_err ve;
        if (df_hub_verify_file(dest, f, &ve) == 0) {
          if (verified_add(s.root, f->name, dest, e)) goto out_dest;
          rep->bytes_present += f->size;
          free(dest);
          continue;
        }
        df_log_warn("replacing %s: %s", dest, ve.msg);
        unlink(dest);
      }
      if (!partial_inplace) {
        int reused;
        if (try_reuse(o, &s, f, dest, &reused, e)) goto out_dest;
        if (reused) {
          if (verified_add(s.root, f->name, dest, e)) goto out_dest;
          rep->files_reused++;
          rep->bytes_reused += f->size;
          free(dest);
          continue;
        }
      }
      df_dl_item *it = &items[nitems];
      it->file = f;
      it->dest = dests[nitems] = dest;
      it->url = urls[nitems] = df_hub_file_url(endpoint, s.repo, s.commit, f->name);
      /* A shard a stream install started stays in place: what it fetched is
       * kept, only the gaps are downloaded. */
      it->in_place = partial_inplace || (o->stream && is_shard(f->name));
      uint64_t miss;
      if (df_dl_missing(it, &miss, e)) goto out;
      need += miss;
      nitems++;
      continue;
    out_dest:
      free(dest);
      goto out;
    }

  char *tok = df_hub_token();
  df_dl_opts dl = {.http = {.token = tok, .retries = o->retries, .backoff_s = o->backoff_s,
                            .stall_s = o->stall_s, .what = s.repo, .gate = gate},
                   .connections = o->connections, .chunk = o->chunk, .progress = o->progress,
                   .step = "download", .offline = offline};
  df_dl_stats ds = {0};
  if (o->stream) {
    /* Small files completely; shards: headers, then the spine ranges. */
    int nsmall = 0;
    while (nsmall < nitems && !is_shard(items[nsmall].file->name)) nsmall++;
    if (!o->no_space_check) {
      uint64_t small = 0;
      for (int i = 0; i < nsmall; i++) small += items[i].file->size;
      if (space_check(s.root, small, "the small files", e)) goto out_tok;
    }
    if (nsmall && df_dl_run(items, nsmall, &dl, &ds, e)) goto out_tok;
    rep->bytes_net += ds.bytes_net;
    rep->requests += ds.requests;
    rep->retries += ds.retries;
    rep->files_downloaded += ds.files_completed;
    for (int i = 0; i < nsmall; i++)
      if (verified_add(s.root, items[i].file->name, items[i].dest, e)) goto out_tok;
    if (index_complete(o, &s, offline, e)) goto out_tok;
    if (df_stream_plan_build(&plan, s.root, &s.info, items + nsmall, nitems - nsmall, &dl, rep, e))
      goto out_tok;
    if (!o->no_space_check &&
        space_check(s.root, df_stream_plan_missing(plan), "the spine of a stream install", e))
      goto out_tok;
    if (df_stream_plan_fetch(plan, &dl, rep, e)) goto out_tok;
    if (check_spine(&s, sums, sums || df_stream_plan_missing(plan) > 0, endpoint, e)) goto out_tok;
    if (sums && df_recsums_install(s.root, sums, sums_buf, sums_len, o->record_sums, e)) goto out_tok;
    df_log_info("stream install ready: %.1f MB of spine and headers local; experts are fetched "
                "when first needed",
                (double)df_stream_plan_local_bytes(plan) / 1e6);
    warn_if_arrival(&s);
  } else {
    int nsteps = 1 + (o->spine != NULL) + (o->ndrives > 0), step = 1;
    char z1[24], z2[24];
    df_log_info("step %d/%d: download (%s missing of %s)", step++, nsteps, df_dl_fmt_size(need, z1),
                df_dl_fmt_size(need + rep->bytes_present + rep->bytes_reused, z2));
    /* Before anything is fetched (counting vision-only shards too: their
     * header-only treatment is decided from the index, fetched below). */
    if (!o->no_space_check) {
      uint64_t spine = o->spine ? need / 4 : 0; /* the int8 copy: half the bf16 spine, a fraction of it all */
      if (space_check(s.root, need + spine, "the download", e)) goto out_tok;
    }
    /* Small files first: the index says which shards hold only vision tensors. */
    int nsmall = 0;
    while (nsmall < nitems && !is_shard(items[nsmall].file->name)) nsmall++;
    if (nsmall && df_dl_run(items, nsmall, &dl, &ds, e)) goto out_tok;
    rep->bytes_net += ds.bytes_net;
    rep->requests += ds.requests;
    rep->retries += ds.retries;
    rep->files_downloaded += ds.files_completed;
    for (int i = 0; i < nsmall; i++)
      if (verified_add(s.root, items[i].file->name, items[i].dest, e)) goto out_tok;
    if (index_complete(o, &s, offline, e)) goto out_tok;
    int nsh = nitems - nsmall;
    int *vis = df_xcalloc((size_t)(nsh ? nsh : 1), sizeof *vis);
    if (!o->with_vision && nsh && mark_vision_only(s.root, items + nsmall, nsh, vis, e)) {
      free(vis);
      goto out_tok;
    }
    /* text shards to the front, vision-only ones (header only) behind */
    df_dl_item *text = df_xcalloc((size_t)(nsh ? nsh : 1), sizeof *text);
    df_dl_item *visi = df_xcalloc((size_t)(nsh ? nsh : 1), sizeof *visi);
    int nt = 0, nv = 0;
    uint64_t vis_bytes = 0;
    for (int i = 0; i < nsh; i++) {
      if (vis[i]) {
        visi[nv] = items[nsmall + i];
        visi[nv++].in_place = 1;
        vis_bytes += items[nsmall + i].file->size;
      } else {
        text[nt++] = items[nsmall + i];
      }
    }
    free(vis);
    int ok = 1;
    if (ok && nt && df_dl_run(text, nt, &dl, &ds, e)) ok = 0;
    if (ok) {
      rep->bytes_net += ds.bytes_net;
      rep->requests += ds.requests;
      rep->retries += ds.retries;
      rep->files_downloaded += ds.files_completed;
    }
    for (int i = 0; ok && i < nt; i++)
      if (verified_add(s.root, text[i].file->name, text[i].dest, e)) ok = 0;
    if (ok && nv) {
      if (df_stream_plan_build(&plan, s.root, &s.info, visi, nv, &dl, rep, e) ||
          df_stream_plan_fetch(plan, &dl, rep, e))
        ok = 0;
      else
      {
        char z[24];
        df_log_info("%d shard%s holding only vision tensors (%s) kept as header only; "
                    "--with-vision downloads %s",
                    nv, nv == 1 ? "" : "s", df_dl_fmt_size(vis_bytes, z), nv == 1 ? "it" : "them");
      }
    }
    free(text);
    free(visi);
    if (!ok) goto out_tok;
    if (o->spine && !strcmp(o->spine, "int8")) {
      df_log_info("step %d/%d: convert the spine to row-int8", step++, nsteps);
      if (df_k3_convert_spine(s.root, o->threads, 0, e)) goto out_tok;
    }
    if (o->ndrives > 0) {
      if (!o->no_space_check) {
        uint64_t experts = 0;
        for (int i = 0; i < s.info.nfiles; i++)
          if (is_shard(s.info.files[i].name)) experts += s.info.files[i].size;
        uint64_t per = (uint64_t)((double)experts * (1.0 + o->replicas_hot / 100.0) / o->ndrives);
        for (int d = 0; d < o->ndrives; d++) {
          if (df_mkdir_last(o->drives[d], "setup: drive", e)) goto out_tok;
          if (space_check(o->drives[d], per, "its share of the expert pack", e)) goto out_tok;
        }
      }
      df_pack_opts po = {.model_dir = s.root, .ndrives = o->ndrives, .drives = o->drives,
                         .replicas_hot = o->replicas_hot, .progress = o->progress,
                         .max_rate = o->pack_max_rate};
      df_log_info("step %d/%d: pack the experts onto %d drive%s", step++, nsteps, o->ndrives,
                  o->ndrives == 1 ? "" : "s");
      if (df_pack(&po, e)) goto out_tok;
    }
  }
  if (o->hf_cache && hub_cache_write(o, &s, e)) goto out_tok;
  rc = 0;
out_tok:
  if (tok) {
    memset(tok, 0, strlen(tok));
    free(tok);
  }
out:
  rep->seconds = df_now() - t0;
  rep->rate_limited = df_http_gate_answers(gate);
  rep->rate_wait_s = df_http_gate_waited(gate);
  df_stream_plan_free(plan);
  df_recsums_free(sums);
  free(sums_buf);
  for (int i = 0; i < nitems; i++) {
    free(dests[i]);
    free(urls[i]);
  }
  free(items);
  free(dests);
  free(urls);
  free(endpoint);
  df_http_gate_free(gate);
  df_hub_info_free(&s.info);
  free(s.info_json);
  free(s.root);
  if (flfd >= 0) close(flfd);
  if (lfd >= 0) close(lfd);
  return rc;
}
