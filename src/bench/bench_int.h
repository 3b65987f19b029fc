/* Internal to the bench component: result records, and the storage ceiling
 * (bench_ceiling.c). */
#ifndef DF_BENCH_BENCH_INT_H
#define DF_BENCH_BENCH_INT_H

#include <stdint.h>

#include "base/err.h"
#include "format/config.h"
#include "store/store.h"

typedef struct df_bench_stat {
  double median, min, max;
} df_bench_stat;

typedef struct df_bench_phase {
  df_bench_stat s_per_token, tokens_per_s, expert_bytes_per_token, read_gbps, io_wait_frac,
      compute_s_per_token, cache_hit_rate, amplification;
  /* the bytes of the experts the batches needed (read_gbps / amplification
   * per repeat): what the phase got out of the drives, mispredicted
   * prefetches not counted */
  df_bench_stat useful_gbps;
} df_bench_phase;

typedef struct df_bench_ceiling_res {
  double gbps, bytes, seconds;
  int reads, registered;
} df_bench_ceiling_res;

typedef struct df_bench_fio_res {
  int ran;
  double gbps;
  char engine[16], file[512], pattern[64], why[256];
  unsigned bs;
  int iodepth;
} df_bench_fio_res;

typedef struct df_bench_result {
  df_bench_phase prefill, decode;
  int prompt_tokens, new_tokens, repeat;
  double decode_bytes, record_bytes;
  char kernels[32], io[16], source[600];
  int threads, queue_depth, ndrives, o_direct;
  int have_ceiling;
  df_bench_ceiling_res ceiling;
  df_bench_fio_res fio;
  char *drives_json;
  /* --device cuda: the GPU's counters at the end (engine.h's df_engine_device_json), NULL on the CPU */
  char *device_json;
  char device[16];
  /* the repeats' compute by part (stats' prefill_compute and decode_compute
   * less the warm-up's): where a warm pass spends its time */
  char *compute_json;
  /* the spine stream (issue 11): bytes it read in the decode phases, their
   * time, and its own ceiling (its reads replayed, same engine and drive) */
  double spine_decode_bytes, spine_decode_wait, decode_seconds;
  /* --draft: speculation over the decode phases (gen stats summed over repeats) */
  long spec_verify, spec_drafted, spec_accepted, spec_passes, spec_tokens;
  /* blocks of k drafts (spec_block_len[k-1]) and drafts kept at position j */
  long spec_block_len[16], spec_acc_at[16];
  char draft[16]; /* the source that ran (--draft auto: the one it chose) */
  int draft_max, draft_auto;
  int spine_units, spine_qd, have_spine_ceiling;
  char spine_source[16]; /* "pack", "shards", "shards+int8" */
  int spine_drives;
  df_bench_ceiling_res spine_ceiling;
} df_bench_result;

/* Expert reads to replay: which file (and drive) and where. */
typedef struct df_bench_read {
  int file;
  uint64_t read_off; /* the aligned span the store reads for the record */
  uint32_t read_len;
  uint32_t bytes;    /* what the read delivers that counts (the record; a spine chunk: all of it) */
} df_bench_read;

typedef struct df_bench_reads {
  int nfiles;
  char **files;   /* paths */
  int *drive;     /* drive of each file */
  int ndrives;
  uint64_t len;   /* record bytes (the largest, when they differ) */
  df_bench_read *r;
  int n;
} df_bench_reads;

/* The records of the store's read log entries log[0..n), located by the
 * store (df_store_locate): the file and drive each was read from. */
int df_bench_reads_from_store(df_bench_reads *rd, const df_store *s, const df_store_read *log,
                              size_t n, df_err *e);
void df_bench_reads_free(df_bench_reads *rd);

typedef struct df_bench_ceiling_opts {
  const char *io;      /* "uring" | "pread" as the store used */
  int qd;              /* per drive, as the store used */
  df_io_emu emu;       /* the drive emulation the store ran with (bw 0 = none) */
  double max_bytes;    /* replay the reads (cycling) until this many bytes */
} df_bench_ceiling_opts;

/* Replays the reads through the store's I/O engine (store/io.h) with O_DIRECT
 * buffers of the store's size and alignment, no compute. */
int df_bench_ceiling(const df_bench_reads *rd, const df_bench_ceiling_opts *o,
                     df_bench_ceiling_res *out, df_err *e);

/* fio on the first read's file, sequential reads of the record size at the
 * same queue depth (O_DIRECT); fills why when fio is absent or fails. */
void df_bench_fio(const df_bench_reads *rd, int qd, double max_bytes, int emulated,
                  df_bench_fio_res *out);

#endif
