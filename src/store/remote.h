/* Internal to the store: its remote source's part of df_store (a stream
 * install: records fetched on demand, source.h). Set at open; net_wait is
 * added to under the store's mutex. */
#ifndef DF_STORE_REMOTE_H
#define DF_STORE_REMOTE_H

#include "base/err.h"

struct df_src_remote;
typedef struct df_store df_store;

typedef struct df_store_remote {
  struct df_src_remote *src; /* NULL = every record is local */
  int stream_verify;         /* --stream-verify override (df_stream_verify) */
  double wait;               /* time df_store_begin waited on network fetches */
  int fetch_ahead;           /* --fetch-ahead on: predictions of records not local go to the network */
} df_store_remote;

/* store.c: a stream install's records that are not local, fetched */
int df_store_fetch_remote(df_store *s, const int *keys, int n, df_err *e);

#endif
