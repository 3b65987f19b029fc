#include "remote/hub.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"

static int is_hex(const char *s, size_t n) {
  if (strlen(s) != n) return 0;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
  return 1;
}

int df_hub_is_commit(const char *s) { return s && is_hex(s, 40); }

static int name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '.' || c == '_' || c == '-';
}

int df_hub_repo_valid(const char *repo) {
  if (!repo) return 0;
  const char *slash = strchr(repo, '/');
  if (!slash || slash == repo || !slash[1] || strchr(slash + 1, '/')) return 0;
  if (strstr(repo, "..")) return 0;
  for (const char *p = repo; *p; p++)
    if (*p != '/' && !name_char(*p)) return 0;
  return strlen(repo) < 200;
}

int df_hub_name_valid(const char *name) {
  size_t n = name ? strlen(name) : 0;
  if (!n || n > 255 || name[0] == '/' || name[n - 1] == '/') return 0;
  for (const char *p = name; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == '\\' || *p == 0x7f) return 0;
  /* no "." or ".." components, no empty ones */
  const char *c = name;
  while (*c) {
    const char *e = strchr(c, '/');
    size_t k = e ? (size_t)(e - c) : strlen(c);
    if (k == 0 || (k == 1 && c[0] == '.') || (k == 2 && c[0] == '.' && c[1] == '.')) return 0;
    c += k;
    if (*c == '/') c++;
  }
  return 1;
}

void df_hub_info_free(df_hub_info *i) {
  if (!i) return;
  for (int k = 0; k < i->nfiles; k++) free(i->files[k].name);
  free(i->files);
  memset(i, 0, sizeof *i);
}

const df_hub_file *df_hub_info_find(const df_hub_info *i, const char *name) {
  for (int k = 0; k < i->nfiles; k++)
    if (!strcmp(i->files[k].name, name)) return &i->files[k];
  return NULL;
}

static int get_size(const json_t *o, const char *key, uint64_t *out) {
  const json_t *v = json_object_get(o, key);
  if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
  *out = (uint64_t)json_integer_value(v);
  return 0;
}

int df_hub_info_parse(const char *json, size_t len, const char *label, df_hub_info *out,
                      df_err *e) {
  memset(out, 0, sizeof *out);
  json_error_t je;
  json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
  if (!root) return df_err_set(e, "%s: not JSON: %s (line %d)", label, je.text, je.line);
  int rc = -1;
  const json_t *sha = json_object_get(root, "sha");
  const json_t *sib = json_object_get(root, "siblings");
  if (!json_is_object(root)) {
    df_err_set(e, "%s: not a JSON object", label);
    goto done;
  }
  if (!json_is_string(sha) || !df_hub_is_commit(json_string_value(sha))) {
    df_err_set(e, "%s: field 'sha' is not a 40-digit commit sha", label);
    goto done;
  }
  memcpy(out->commit, json_string_value(sha), 41);
  if (!json_is_array(sib)) {
    df_err_set(e, "%s: no 'siblings' array", label);
    goto done;
  }
  size_t n = json_array_size(sib);
  if (n > 100000) {
    df_err_set(e, "%s: %zu siblings, more than any model repository has", label, n);
    goto done;
  }
  out->files = df_xcalloc(n ? n : 1, sizeof *out->files);
  for (size_t k = 0; k < n; k++) {
    const json_t *s = json_array_get(sib, k);
    const json_t *nm = json_object_get(s, "rfilename");
    if (!json_is_object(s) || !json_is_string(nm) || !df_hub_name_valid(json_string_value(nm))) {
      df_err_set(e, "%s: siblings[%zu]: 'rfilename' missing or not a safe relative path", label,
                 k);
      goto done;
    }
    const char *name = json_string_value(nm);
    if (df_hub_info_find(out, name)) {
      df_err_set(e, "%s: siblings[%zu]: '%s' listed twice", label, k, name);
      goto done;
    }
    df_hub_file *f = &out->files[out->nfiles];
    if (get_size(s, "size", &f->size)) {
      df_err_set(e,
                 "%s: siblings[%zu] ('%s'): no 'size' (the model info must be asked for with "
                 "?blobs=true)",
                 label, k, name);
      goto done;
    }
    const json_t *blob = json_object_get(s, "blobId");
    if (blob) {
      if (!json_is_string(blob) || !is_hex(json_string_value(blob), 40)) {
        df_err_set(e, "%s: siblings[%zu] ('%s'): 'blobId' is not 40 hex digits", label, k, name);
        goto done;
      }
      memcpy(f->blob_id, json_string_value(blob), 41);
    }
    const json_t *lfs = json_object_get(s, "lfs");
    if (lfs && !json_is_null(lfs)) {
      const json_t *h = json_object_get(lfs, "sha256");
      uint64_t lsz;
      if (!json_is_object(lfs) || !json_is_string(h) || !is_hex(json_string_value(h), 64) ||
          get_size(lfs, "size", &lsz)) {
        df_err_set(e, "%s: siblings[%zu] ('%s'): 'lfs' needs 'sha256' (64 hex) and 'size'", label,
                   k, name);
        goto done;
      }
      if (lsz != f->size) {
        df_err_set(e, "%s: siblings[%zu] ('%s'): lfs.size %llu differs from size %llu", label, k,
                   name, (unsigned long long)lsz, (unsigned long long)f->size);
        goto done;
      }
      f->lfs = 1;
      memcpy(f->sha256, json_string_value(h), 65);
    } else if (!f->blob_id[0]) {
      df_err_set(e, "%s: siblings[%zu] ('%s'): neither 'lfs.sha256' nor 'blobId': cannot verify it",
                 label, k, name);
      goto done;
    }
    f->name = df_xstrdup(name);
    out->nfiles++;
  }
  rc = 0;
done:
  json_decref(root);
  if (rc) df_hub_info_free(out);
  return rc;
}

/* ---- URLs ---- */

static void append_enc(char **buf, size_t *len, size_t *cap, const char *s, int keep_slash) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (*len + 4 >= *cap) {
      *cap = *cap * 2 + 16;
      *buf = df_xrealloc(*buf, *cap);
    }
    if (name_char((char)c) || c == '~' || (keep_slash && c == '/')) {
      (*buf)[(*len)++] = (char)c;
    } else {
      *len += (size_t)snprintf(*buf + *len, 4, "%%%02X", c);
    }
  }
  (*buf)[*len] = 0;
}

static char *build(const char *endpoint, const char *repo, const char *mid, const char *rev,
                   const char *file, const char *tail) {
  size_t cap = 256, len = 0;
  char *b = df_xmalloc(cap);
  b[0] = 0;
  const char *parts[2] = {endpoint, "/"};
  for (int i = 0; i < 2; i++) {
    size_t k = strlen(parts[i]);
    while (len + k + 1 >= cap) cap *= 2, b = df_xrealloc(b, cap);
    memcpy(b + len, parts[i], k + 1);
    len += k;
  }
  if (mid && (!strcmp(mid, "api") || !strcmp(mid, "tree"))) {
    append_enc(&b, &len, &cap, "api/models/", 1);
    append_enc(&b, &len, &cap, repo, 1);
    append_enc(&b, &len, &cap, !strcmp(mid, "api") ? "/revision/" : "/tree/", 1);
    append_enc(&b, &len, &cap, rev, 0);
  } else {
    append_enc(&b, &len, &cap, repo, 1);
    append_enc(&b, &len, &cap, "/resolve/", 1);
    append_enc(&b, &len, &cap, rev, 0);
    append_enc(&b, &len, &cap, "/", 1);
    append_enc(&b, &len, &cap, file, 1);
  }
  if (tail) {
    size_t k = strlen(tail);
    b = df_xrealloc(b, len + k + 1);
    memcpy(b + len, tail, k + 1);
  }
  return b;
}

char *df_hub_info_url(const char *endpoint, const char *repo, const char *rev) {
  return build(endpoint, repo, "api", rev, NULL, "?blobs=true");
}

char *df_hub_tree_url(const char *endpoint, const char *repo, const char *commit) {
  return build(endpoint, repo, "tree", commit, NULL, "?recursive=true");
}

int df_hub_info_has_sizes(const char *json, size_t len) {
  json_error_t je;
  json_t *o = json_loadb(json, len, 0, &je);
  const json_t *sib = o ? json_object_get(o, "siblings") : NULL;
  int ok = json_is_array(sib);
  size_t i;
  const json_t *v;
  json_array_foreach(sib, i, v) if (!json_is_integer(json_object_get(v, "size"))) ok = 0;
  json_decref(o);
  return ok;
}

/* The tree's entries: {type, path, size, oid (git blob id; of the pointer
 * for an LFS file), lfs: {oid (sha256), size}}. */
int df_hub_info_from_tree(const char *info, size_t ilen, const char *tree, size_t tlen,
                          const char *label, char **out, size_t *olen, df_err *e) {
  json_error_t je;
  json_t *io = json_loadb(info, ilen, 0, &je), *to = NULL;
  if (!io || !json_is_string(json_object_get(io, "sha"))) {
    json_decref(io);
    return df_err_set(e, "%s: the model info has no 'sha'", label);
  }
  to = json_loadb(tree, tlen, 0, &je);
  if (!json_is_array(to)) {
    json_decref(io);
    json_decref(to);
    return df_err_set(e, "%s: not a JSON array of tree entries", label);
  }
  json_t *sib = json_array();
  size_t i;
  json_t *v;
  int rc = 0;
  json_array_foreach(to, i, v) {
    const char *type = json_string_value(json_object_get(v, "type"));
    if (type && strcmp(type, "file")) continue; /* folders */
    const json_t *path = json_object_get(v, "path"), *size = json_object_get(v, "size");
    const json_t *oid = json_object_get(v, "oid"), *lfs = json_object_get(v, "lfs");
    if (!json_is_string(path) || !json_is_integer(size)) {
      rc = df_err_set(e, "%s: entry %zu: needs 'path' and an integer 'size'", label, i);
      break;
    }
    json_t *f = json_pack("{s:O,s:O}", "rfilename", path, "size", size);
    if (json_is_object(lfs)) {
      json_object_set_new(f, "lfs", json_pack("{s:O,s:O}", "sha256", json_object_get(lfs, "oid"),
                                              "size", json_object_get(lfs, "size")
                                                  ? json_object_get(lfs, "size") : size));
    } else if (json_is_string(oid)) {
      json_object_set(f, "blobId", (json_t *)oid);
    }
    json_array_append_new(sib, f);
  }
  if (!rc) {
    json_object_set_new(io, "siblings", sib);
    *out = json_dumps(io, JSON_INDENT(1));
    *olen = strlen(*out);
  } else {
    json_decref(sib);
  }
  json_decref(io);
  json_decref(to);
  return rc;
}

char *df_hub_file_url(const char *endpoint, const char *repo, const char *commit,
                      const char *file) {
  return build(endpoint, repo, NULL, commit, file, NULL);
}

char *df_hub_endpoint(const char *override) {
  const char *v = override && *override ? override : getenv("HF_ENDPOINT");
  if (!v || !*v) v = DF_HUB_DEFAULT_ENDPOINT;
  char *s = df_xstrdup(v);
  size_t n = strlen(s);
  while (n && s[n - 1] == '/') s[--n] = 0;
  return s;
}

/* ---- the hub's environment (as huggingface_hub reads it) ---- */

int df_hub_env_bool(const char *name) {
  const char *v = getenv(name);
  if (!v) return 0;
  static const char *yes[] = {"1", "ON", "YES", "TRUE"};
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
    if (!strcasecmp(v, yes[i])) return 1;
  return 0;
}

int df_hub_offline(void) { return df_hub_env_bool("HF_HUB_OFFLINE"); }

char *df_hub_home(void) {
  const char *home = getenv("HF_HOME");
  if (home && *home) return df_xstrdup(home);
  const char *xdg = getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return df_path_join(xdg, "huggingface");
  const char *h = getenv("HOME");
  return df_path_join(h && *h ? h : "/", ".cache/huggingface");
}

char *df_hub_cache_dir(void) {
  /* HUGGINGFACE_HUB_CACHE is the older name the hub's tools still honour */
  const char *names[] = {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"};
  for (int i = 0; i < 2; i++) {
    const char *v = getenv(names[i]);
    if (v && *v) return df_xstrdup(v);
  }
  char *home = df_hub_home(), *c = df_path_join(home, "hub");
  free(home);
  return c;
}

char *df_hub_cache_repo(const char *repo) {
  size_t n = strlen(repo) + 16;
  char *folder = df_xmalloc(n);
  snprintf(folder, n, "models--%s", repo);
  for (char *p = folder + 8; *p; p++)
    if (*p == '/') {
      memmove(p + 2, p + 1, strlen(p + 1) + 1); /* "/" -> "--" (room reserved above) */
      p[0] = '-';
      p[1] = '-';
      p++;
    }
  char *base = df_hub_cache_dir(), *a = df_path_join(base, folder);
  free(base);
  free(folder);
  return a;
}

static char *repo_sub(const char *repo, const char *sub, const char *leaf) {
  char *a = df_hub_cache_repo(repo), *b = df_path_join(a, sub), *c = df_path_join(b, leaf);
  free(a);
  free(b);
  return c;
}

char *df_hub_cache_snapshot(const char *repo, const char *commit) {
  return repo_sub(repo, "snapshots", commit);
}

char *df_hub_cache_blob(const char *repo, const df_hub_file *f) {
  const char *etag = f->lfs ? f->sha256 : f->blob_id;
  if (!*etag) return NULL;
  return repo_sub(repo, "blobs", etag);
}

char *df_hub_cache_ref(const char *repo, const char *rev) {
  if (!df_hub_name_valid(rev)) return NULL;
  return repo_sub(repo, "refs", rev);
}

/* ---- checksums ---- */

static int digest_file(const char *path, const EVP_MD *md, const char *prefix, size_t plen,
                       unsigned char *out, unsigned *olen, df_err *e) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return df_err_errno(e, "%s", path);
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, md, NULL);
  if (plen) EVP_DigestUpdate(ctx, prefix, plen);
  size_t cap = 4u << 20;
  unsigned char *buf = df_xmalloc(cap);
  int rc = 0;
  for (;;) {
    ssize_t r = read(fd, buf, cap);
    if (r < 0) {
      if (errno == EINTR) continue;
      rc = df_err_errno(e, "reading %s", path);
      break;
    }
    if (r == 0) break;
    EVP_DigestUpdate(ctx, buf, (size_t)r);
  }
  EVP_DigestFinal_ex(ctx, out, olen);
  EVP_MD_CTX_free(ctx);
  free(buf);
  close(fd);
  return rc;
}

static void to_hex(const unsigned char *d, unsigned n, char *out) {
  for (unsigned i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

int df_hub_sha256_file(const char *path, char out[65], df_err *e) {
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  if (digest_file(path, EVP_sha256(), NULL, 0, d, &n, e)) return -1;
  to_hex(d, n, out);
  return 0;
}

int df_hub_git_blob_id_file(const char *path, char out[41], df_err *e) {
  struct stat st;
  if (stat(path, &st)) return df_err_errno(e, "%s", path);
  char prefix[48];
  int plen = snprintf(prefix, sizeof prefix, "blob %llu", (unsigned long long)st.st_size);
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  if (digest_file(path, EVP_sha1(), prefix, (size_t)plen + 1, d, &n, e)) return -1;
  to_hex(d, n, out);
  return 0;
}

int df_hub_verify_file(const char *path, const df_hub_file *f, df_err *e) {
  struct stat st;
  if (stat(path, &st)) return df_err_errno(e, "%s", path);
  if ((uint64_t)st.st_size != f->size)
    return df_err_set(e, "%s: %llu bytes, the hub says %llu", path,
                      (unsigned long long)st.st_size, (unsigned long long)f->size);
  if (f->lfs) {
    char h[65];
    if (df_hub_sha256_file(path, h, e)) return -1;
    if (strcmp(h, f->sha256))
      return df_err_set(e, "%s: sha256 %s, the hub says %s: the bytes are not the published file",
                        path, h, f->sha256);
    return 0;
  }
  char h[41];
  if (df_hub_git_blob_id_file(path, h, e)) return -1;
  if (strcmp(h, f->blob_id))
    return df_err_set(e, "%s: git blob id %s, the hub says %s: the bytes are not the published file",
                      path, h, f->blob_id);
  return 0;
}

char *df_hub_token(void) {
  /* As huggingface_hub: with implicit tokens disabled, reads send none. */
  if (df_hub_env_bool("HF_HUB_DISABLE_IMPLICIT_TOKEN")) return NULL;
  const char *envs[] = {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"};
  for (int i = 0; i < 2; i++) {
    const char *t = getenv(envs[i]);
    if (t && *t) return df_xstrdup(t);
  }
  char *path = NULL;
  const char *tp = getenv("HF_TOKEN_PATH");
  if (tp && *tp) path = df_xstrdup(tp);
  else {
    char *home = df_hub_home();
    path = df_path_join(home, "token");
    free(home);
  }
  char *buf = NULL;
  size_t len = 0;
  df_err e;
  int rc = df_file_read(path, &buf, &len, &e);
  free(path);
  if (rc) return NULL;
  while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' ')) buf[--len] = 0;
  if (!len) {
    free(buf);
    return NULL;
  }
  return buf;
}
