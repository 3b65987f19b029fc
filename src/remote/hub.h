/* The Hugging Face Hub protocol as the hub's own tools use it.
 *
 * - Endpoint: HF_ENDPOINT, default https://huggingface.co.
 * - Model info: GET {endpoint}/api/models/{repo}/revision/{rev}?blobs=true
 *   gives "sha" (the commit the revision resolves to) and "siblings": one
 *   {rfilename, size, blobId, lfs?: {sha256, size, pointerSize}} per file.
 *   LFS files are checked by sha256; plain git files by their blob id
 *   (sha1 of "blob <size>\0" + content).
 * - Files: GET {endpoint}/{repo}/resolve/{commit}/{file}, usually a redirect
 *   (to a CDN for LFS files) carrying X-Repo-Commit, X-Linked-Etag and
 *   X-Linked-Size.
 * - Local cache: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub;
 *   models--{owner}--{name}/snapshots/{commit}/{file}. */
#ifndef DF_REMOTE_HUB_H
#define DF_REMOTE_HUB_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define DF_HUB_DEFAULT_ENDPOINT "https://huggingface.co"

typedef struct df_hub_file {
  char *name;          /* rfilename (relative, validated) */
  uint64_t size;
  int lfs;             /* 1: sha256 is the LFS oid */
  char sha256[65];     /* hex, LFS files */
  char blob_id[41];    /* hex git blob sha1, "" when absent */
} df_hub_file;

typedef struct df_hub_info {
  char commit[41];
  df_hub_file *files;
  int nfiles;
} df_hub_info;

/* Parses a model-info document (strict; label names it in errors). */
int df_hub_info_parse(const char *json, size_t len, const char *label, df_hub_info *out,
                      df_err *e);
void df_hub_info_free(df_hub_info *i);
const df_hub_file *df_hub_info_find(const df_hub_info *i, const char *name);

/* 1 if s is 40 lowercase hex digits (a commit sha). */
int df_hub_is_commit(const char *s);
/* A repo id "owner/name": one slash, [A-Za-z0-9._-], no "..". */
int df_hub_repo_valid(const char *repo);
/* A relative file name that is safe to create under a folder. */
int df_hub_name_valid(const char *name);

/* URLs (fresh strings). The revision and file are percent-encoded. */
char *df_hub_info_url(const char *endpoint, const char *repo, const char *rev);
/* Mirrors that ignore ?blobs=true give siblings without sizes or checksums:
 * GET {endpoint}/api/models/{repo}/tree/{commit}?recursive=true lists them.
 * df_hub_info_from_tree rebuilds the model-info document (its sha and
 * everything else kept, siblings from the tree; fresh *out). */
char *df_hub_tree_url(const char *endpoint, const char *repo, const char *commit);
int df_hub_info_has_sizes(const char *json, size_t len);
int df_hub_info_from_tree(const char *info, size_t ilen, const char *tree, size_t tlen,
                          const char *label, char **out, size_t *olen, df_err *e);
char *df_hub_file_url(const char *endpoint, const char *repo, const char *commit,
                      const char *file);
/* HF_ENDPOINT or the default, without a trailing slash (fresh string). */
char *df_hub_endpoint(const char *override);
/* The hub's environment, read as huggingface_hub reads it:
 * - a boolean variable is true when it is 1, ON, YES or TRUE (any case);
 * - HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface;
 * - the cache: HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub;
 * - HF_HUB_OFFLINE: no request at all. */
int df_hub_env_bool(const char *name);
int df_hub_offline(void);
char *df_hub_home(void);
char *df_hub_cache_dir(void);
/* Paths in the cache (fresh strings; may not exist): models--{owner}--{name},
 * snapshots/{commit}, blobs/{etag} (the LFS sha256, else the git blob id;
 * NULL without either) and refs/{rev} (NULL for a revision that is no safe name). */
char *df_hub_cache_repo(const char *repo);
char *df_hub_cache_snapshot(const char *repo, const char *commit);
char *df_hub_cache_blob(const char *repo, const df_hub_file *f);
char *df_hub_cache_ref(const char *repo, const char *rev);

/* The token the hub tools would use: HF_TOKEN, else the token file
 * ($HF_TOKEN_PATH, $HF_HOME/token, ~/.cache/huggingface/token); NULL if none.
 * Caller frees (and should clear it). */
char *df_hub_token(void);

/* Checksums as the hub records them (hex into out). */
int df_hub_sha256_file(const char *path, char out[65], df_err *e);
int df_hub_git_blob_id_file(const char *path, char out[41], df_err *e);
/* Verifies a local file against its sibling entry (size, then sha256 or blob id). */
int df_hub_verify_file(const char *path, const df_hub_file *f, df_err *e);

#endif
