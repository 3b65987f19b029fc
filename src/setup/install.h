/* `deltafin setup`: install a model from a Hugging Face endpoint.
 *
 * The model root records what it is installing (deltafin-setup.json: repo,
 * revision as asked, the commit it resolved to, once; and the model-info
 * document, deltafin-setup.info.json, which lists every file with its size
 * and checksum), and which files it has verified (deltafin-setup.verified:
 * name, size, mtime, inode), so a rerun after a kill at any point continues
 * where it stopped and never hashes a verified file twice.
 *
 * Full: every file is fetched (shards that hold only vision tensors, which a
 * text-only engine never reads, get their header only unless with_vision) (or reused from a local folder or the hub's
 * cache) and verified; then the spine is converted (optional) and the
 * experts packed onto the drives (optional); each step is resumable.
 * Stream: config, tokenizer, index, each shard's header and the spine
 * tensors are fetched into sparse shards at their true offsets; experts are
 * fetched on demand by the stream fetcher (remote/fetcher.h). */
#ifndef DF_SETUP_INSTALL_H
#define DF_SETUP_INSTALL_H

#include <stdint.h>

#include "base/err.h"
#include "remote/root.h" /* the files named here */

typedef struct df_setup_opts {
  const char *repo;
  const char *revision;    /* commit sha or branch/tag */
  const char *endpoint;    /* NULL: HF_ENDPOINT or the public hub */
  const char *model_root;
  const char *from_dir;    /* a local folder with (some of) the files, or NULL */
  int ndrives;
  const char *const *drives;
  double replicas_hot;
  double pack_max_rate;    /* bytes/s written by the pack step at most; 0 = no limit */
  const char *spine;       /* NULL or "int8" */
  int stream;
  int connections;
  uint64_t chunk;
  int retries;
  double backoff_s;
  long stall_s;
  int threads;             /* spine conversion */
  int progress;
  int no_space_check;
  int with_vision;         /* --full: also download shards that hold only vision tensors */
  const char *record_sums; /* --stream: record sums to store (a file or an http(s) URL), or NULL */
  const char *stream_verify; /* --stream: record, shard or arrival to record; NULL = keep/auto */
  double max_wait_s;       /* total patience for rate limits; <= 0: DF_HTTP_DEFAULT_MAX_WAIT_S */
  int offline;             /* no request at all (also HF_HUB_OFFLINE) */
  int dry_run;             /* list what would be downloaded, reused, skipped; write nothing */
  const char *const *include; /* globs (fnmatch): only matching files (instead of the default set) */
  int ninclude;
  const char *const *exclude; /* globs: files left out */
  int nexclude;
  int hf_cache;            /* also place every complete file in the hub cache's layout */
} df_setup_opts;

typedef struct df_setup_report {
  uint64_t bytes_net, bytes_reused, bytes_present;
  int files_total, files_downloaded, files_reused;
  uint64_t requests, retries;
  uint64_t rate_limited;   /* answers that said to wait */
  double rate_wait_s;      /* time spent waiting on them (the union of the waits) */
  double seconds;
} df_setup_report;

int df_setup_run(const df_setup_opts *o, df_setup_report *rep, df_err *e);

/* df_dl_fmt_size (remote/download.h) under the name the CLI calls. */
const char *df_setup_fmt_size(uint64_t bytes, char out[24]);

#endif
