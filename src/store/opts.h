/* Options of the expert store: the one declaration every layer above uses
 * (the engine embeds it, the CLI parses into it). Zero is the default for
 * every enum; the string names of each enum live here too (opts.c), so the
 * CLI parser, the store's messages and its stats JSON spell them one way. */
#ifndef DF_STORE_OPTS_H
#define DF_STORE_OPTS_H

#include "base/err.h"
#include "remote/sverify.h"
#include "store/io.h"

typedef enum {
  DF_STORE_IO_URING = 0, /* io_uring, registered buffers (falls back to pread) */
  DF_STORE_IO_PREAD = 1, /* qd pread threads per drive */
  DF_STORE_IO_COUNT
} df_store_io;

typedef enum {
  DF_PREFETCH_AUTO = 0, /* both predictors, each switched off per layer when its recall is low */
  DF_PREFETCH_OFF = 1,
  DF_PREFETCH_GATE = 2, /* gate-ahead: layer L+1's router applied to layer L's input */
  DF_PREFETCH_PREV = 3, /* the experts the same layer wanted at the previous position */
  DF_PREFETCH_COUNT
} df_store_prefetch;

typedef enum {
  DF_SPLIT_AUTO = 0,   /* records >= 1 MiB when both copies' drives are about equally free */
  DF_SPLIT_OFF = 1,    /* never */
  DF_SPLIT_ALWAYS = 2, /* whenever two readable copies exist (tests) */
  DF_SPLIT_COUNT
} df_store_split;

typedef struct df_store_opts {
  const char *model_dir;    /* where the default pack and heat file live (the engine fills it) */
  const char *manifest;     /* explicit pack manifest; NULL = the one recorded in model_dir */
  int no_pack;              /* read the shards even if a pack exists */
  long cache_mb;            /* expert RAM cache; -1 default (a quarter of RAM), 0 = only in flight */
  df_store_io io;
  df_store_prefetch prefetch;
  df_store_split split_reads; /* a record with two readable copies may be read half from each */
  const char *emulate_drives; /* "BW[,LATENCY]" per drive; NULL = real drives (parsed once,
                              * by df_store_open: df_store_iocfg_of has the value) */
  const char *trace_path;   /* per-read trace (JSON lines); NULL = none */
  long pin_mb;              /* keep the hottest experts (by the heat file) resident; 0 = none */
  int queue_depth;          /* reads in flight per drive, experts and spine; <= 0 = default (8) */
  const char *heat_path;    /* NULL = <model_dir>/deltafin.heat; "" = no heat file */
  int fetch_ahead;          /* stream installs: predictors may fetch over the network; 0 = never */
  df_stream_verify stream_verify; /* stream installs: override the installed policy; 0 = as installed */
} df_store_opts;

/* The I/O options resolved once, at df_store_open (for a store without
 * routed experts too): the one typed form every reader of a drive uses
 * (the experts' scheduler, the spine stream, the bench's replay of their
 * reads), so nothing re-parses a spelling. */
typedef struct df_store_iocfg {
  df_store_io io;        /* as asked (the engine may still fall back to pread: df_store_io_used) */
  int queue_depth;       /* reads in flight per drive (the default applied) */
  df_io_emu emu;         /* bw 0 = real drives */
  const char *emu_spec;  /* its spelling, for messages and traces; NULL = real drives */
  const char *trace_path; /* NULL = no trace */
} df_store_iocfg;
#define DF_STORE_DEFAULT_QD 8
/* Fills c from o (strings point into o); -1 with a message naming the
 * option when a value is out of range or does not parse. */
int df_store_iocfg_resolve(const df_store_opts *o, df_store_iocfg *c, df_err *e);

/* The expert cache budget o asks for, in MiB: cache_mb, or the store's
 * default (df_store_default_cache_mb, a quarter of RAM) when it is < 0. The
 * one place the default is applied: the engine resolves it once, plans
 * with it and hands the result to the store. */
long df_store_cache_mb_of(const df_store_opts *o);

/* Names ("uring", "auto", "always"...); NULL for a value out of range. */
const char *df_store_io_name(df_store_io v);
const char *df_store_prefetch_name(df_store_prefetch v);
const char *df_store_split_name(df_store_split v);
/* Name -> value; 0 on success, -1 when the name is not one of them. */
int df_store_io_parse(const char *name, df_store_io *out);
int df_store_prefetch_parse(const char *name, df_store_prefetch *out);
int df_store_split_parse(const char *name, df_store_split *out);

#endif
