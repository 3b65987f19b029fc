/* Names of the store's option enums (see opts.h). */
#include "store/opts.h"

#include <string.h>

#include "base/err.h"
#include "store/store.h"

static const char *const io_names[DF_STORE_IO_COUNT] = {"uring", "pread"};
static const char *const pf_names[DF_PREFETCH_COUNT] = {"auto", "off", "gate", "prev"};
static const char *const split_names[DF_SPLIT_COUNT] = {"auto", "off", "always"};

static const char *name_of(const char *const *names, int n, int v) {
  return v >= 0 && v < n ? names[v] : NULL;
}

static int parse(const char *const *names, int n, const char *s, int *out) {
  for (int i = 0; s && i < n; i++)
    if (!strcmp(s, names[i])) {
      *out = i;
      return 0;
    }
  return -1;
}

const char *df_store_io_name(df_store_io v) { return name_of(io_names, DF_STORE_IO_COUNT, (int)v); }
const char *df_store_prefetch_name(df_store_prefetch v) {
  return name_of(pf_names, DF_PREFETCH_COUNT, (int)v);
}
const char *df_store_split_name(df_store_split v) {
  return name_of(split_names, DF_SPLIT_COUNT, (int)v);
}

int df_store_io_parse(const char *name, df_store_io *out) {
  int v;
  if (parse(io_names, DF_STORE_IO_COUNT, name, &v)) return -1;
  *out = (df_store_io)v;
  return 0;
}
int df_store_prefetch_parse(const char *name, df_store_prefetch *out) {
  int v;
  if (parse(pf_names, DF_PREFETCH_COUNT, name, &v)) return -1;
  *out = (df_store_prefetch)v;
  return 0;
}
int df_store_split_parse(const char *name, df_store_split *out) {
  int v;
  if (parse(split_names, DF_SPLIT_COUNT, name, &v)) return -1;
  *out = (df_store_split)v;
  return 0;
}

long df_store_cache_mb_of(const df_store_opts *o) {
  return o->cache_mb < 0 ? df_store_default_cache_mb() : o->cache_mb;
}

int df_store_iocfg_resolve(const df_store_opts *o, df_store_iocfg *c, df_err *e) {
  memset(c, 0, sizeof *c);
  if (!df_store_io_name(o->io))
    return df_err_set(e, "store options out of range (--io %d)", (int)o->io);
  c->io = o->io;
  c->queue_depth = o->queue_depth > 0 ? o->queue_depth : DF_STORE_DEFAULT_QD;
  if (o->emulate_drives && *o->emulate_drives) {
    if (df_io_parse_emu(o->emulate_drives, &c->emu, e)) return -1;
    c->emu_spec = o->emulate_drives;
  }
  c->trace_path = o->trace_path && *o->trace_path ? o->trace_path : NULL;
  return 0;
}
