/* How a stream install proves the expert records it fetches before they are
 * used (`--stream-verify`; recorded by `setup --stream`, run/serve may
 * override it):
 *   record   each record's sha256 is checked against the install's record
 *            sums (recsums.h) before it is written; needs record sums;
 *   shard    a record of a shard that is not complete is not used until the
 *            whole shard is fetched and checked against the hub's sha256;
 *   arrival  only the checksum of the bytes as they arrived (detects local
 *            damage, not a server or proxy that served wrong bytes).
 * Default (auto): record when the install holds record sums, else arrival. */
#ifndef DF_REMOTE_SVERIFY_H
#define DF_REMOTE_SVERIFY_H

typedef enum {
  DF_SVERIFY_AUTO = 0,
  DF_SVERIFY_RECORD = 1,
  DF_SVERIFY_SHARD = 2,
  DF_SVERIFY_ARRIVAL = 3,
  DF_SVERIFY_COUNT
} df_stream_verify;

/* "auto", "record", "shard", "arrival"; NULL out of range. */
const char *df_sverify_name(df_stream_verify v);
/* 0 and *out, or -1 for another name ("auto" is not accepted: leave it unset). */
int df_sverify_parse(const char *name, df_stream_verify *out);

/* The loud warning an arrival-only stream install prints (setup, run, serve). */
void df_sverify_warn_arrival(const char *dir);

#endif
