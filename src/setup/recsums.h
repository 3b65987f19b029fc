/* Record sums above the store: checking them against a checkpoint's layout,
 * building them from a model folder, and their place in a stream install.
 * The document itself (parse, look up, verify a record) is remote/recsums.h,
 * below the store, because the fetcher checks every record it fetches. */
#ifndef DF_SETUP_RECSUMS_H
#define DF_SETUP_RECSUMS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "format/safetensors.h"
#include "remote/hub.h"
#include "remote/recsums.h"

/* Every routed-expert record of the model in `set` (config c) must be listed
 * at its shard, offset and length. */
struct df_config;
int df_recsums_check_set(const df_recsums *r, const df_st_set *set, const struct df_config *c,
                         const char *label, df_err *e);

/* Hashes every shard of the model folder `dir` and writes the document to
 * `out` (temp name, then rename). Shards must be complete (no present-ranges
 * journal beside one that holds records); when dir holds a setup's model info
 * (deltafin-setup.info.json), each shard must match its sha256 there.
 * threads <= 0: one per core. */
typedef struct df_recsums_report {
  int shards, records;
  uint64_t bytes;
  double seconds;
} df_recsums_report;
int df_recsums_build(const char *dir, const char *out, int threads, df_recsums_report *rep,
                     df_err *e);

/* ---- in a stream install (recsums_install.c) ---- */
struct df_http_cfg;
/* Reads record sums from a file or fetches them from an http(s) URL (200
 * required, at most DF_RECSUMS_MAX_BYTES), parses them and checks them
 * against the model info. *buf holds the document's bytes (caller frees). */
int df_recsums_load(const char *src, const struct df_http_cfg *hc, const df_hub_info *info,
                    df_recsums **out, char **buf, size_t *len, df_err *e);
/* Checks them against the install's layout (headers local), checks every
 * record already fetched against them (one that fails is dropped from its
 * shard's journal, so it is fetched again, and verified) and stores them at
 * root (DF_RECSUMS_FILE, temp name then rename; removed when they fail). */
int df_recsums_install(const char *root, const df_recsums *rs, const char *buf, size_t len,
                       const char *label, df_err *e);
/* Checks the spans (header and spine tensors) of every partial shard of the
 * stream install at root that are local. A shard with a span that fails is
 * removed (nothing wrong stays behind) and the error names it, the span and
 * what to do. *checked: spans checked. */
int df_recsums_check_spans(const char *root, const df_recsums *rs, const char *endpoint,
                           int *checked, df_err *e);

#endif
