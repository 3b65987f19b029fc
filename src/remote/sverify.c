#include "remote/sverify.h"

#include <string.h>

#include "base/log.h"

static const char *names[DF_SVERIFY_COUNT] = {"auto", "record", "shard", "arrival"};

const char *df_sverify_name(df_stream_verify v) {
  return (unsigned)v < DF_SVERIFY_COUNT ? names[v] : NULL;
}

int df_sverify_parse(const char *name, df_stream_verify *out) {
  for (int i = DF_SVERIFY_RECORD; i < DF_SVERIFY_COUNT; i++)
    if (name && !strcmp(name, names[i])) {
      *out = (df_stream_verify)i;
      return 0;
    }
  return -1;
}

void df_sverify_warn_arrival(const char *dir) {
  df_log_warn(
      "%s: UNVERIFIED EXPERTS AND SPINE (--stream-verify arrival): this stream install checks each "
      "fetched expert only against the checksum of the bytes as they arrived, and (without record "
      "sums) the shard headers and spine tensors setup fetched only when their whole shard is "
      "local, so a server or proxy that serves a wrong byte gives WRONG TOKENS until that shard is "
      "local and checked against the hub's sha256. For the guarantee, add record sums (deltafin record-sums --model "
      "FULL_INSTALL --out F, then deltafin setup --stream ... --record-sums F) or use "
      "--stream-verify shard (fetches an expert's whole shard and checks it before using it)",
      dir);
}
