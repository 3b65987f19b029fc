/* Stream install: the local model folder holds every shard as a sparse file
 * of its true size, with a present-ranges journal (<shard>.ranges) beside
 * it. `setup --stream` fills each shard's header and every tensor that is
 * not a routed expert (nor a vision tensor); the routed experts are fetched
 * when the router first needs them (remote/fetcher.h). A shard whose ranges all
 * arrive is verified against the hub's sha256 and its journal removed. */
#ifndef DF_SETUP_STREAM_H
#define DF_SETUP_STREAM_H

#include <stdint.h>

#include "base/err.h"
#include "remote/download.h"
#include "remote/hub.h"
#include "setup/install.h"

typedef struct df_stream_plan df_stream_plan;

/* shards: download items of the shards (in place); fetches their headers
 * (resumably) and works out the ranges the spine needs. */
int df_stream_plan_build(df_stream_plan **out, const char *root, const df_hub_info *info,
                         const df_dl_item *shards, int nshards, const df_dl_opts *dl,
                         df_setup_report *rep, df_err *e);
uint64_t df_stream_plan_missing(const df_stream_plan *p);
uint64_t df_stream_plan_local_bytes(const df_stream_plan *p);
int df_stream_plan_fetch(df_stream_plan *p, const df_dl_opts *dl, df_setup_report *rep, df_err *e);
void df_stream_plan_free(df_stream_plan *p);

/* 1 when a tensor of this name is a routed expert's (fetched on demand). */
int df_stream_is_expert_tensor(const char *name);

#endif
