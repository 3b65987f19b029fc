/* Drive I/O engine of the expert store: per drive either one io_uring
 * (O_DIRECT, registered buffers, up to `qd` reads in flight) or `qd` pread
 * threads. The engine owns no queue: each drive thread asks the store for
 * its next read (take) and reports completions (done), so all scheduling
 * policy lives in one place (store.c). Optional per-drive emulation holds
 * each completion back until a drive of the given bandwidth and latency
 * would have finished it. An emulated drive is process-wide: drive i of
 * every open engine is one drive with one timeline (the expert store and the
 * spine stream share drive 0's bandwidth). */
#ifndef DF_STORE_IO_H
#define DF_STORE_IO_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

typedef struct df_io df_io;

typedef struct df_io_req {
  int fd;
  uint64_t off;   /* aligned */
  uint32_t len;   /* aligned */
  uint8_t *buf;   /* aligned */
  int buf_index;  /* registered buffer table slot, -1 = plain */
  /* results */
  int64_t got;    /* bytes read (stops at EOF) */
  int err;        /* errno of a failed read, 0 = ok */
  double t_start, t_done;
  /* an emulated drive: when it moved this read's bytes (its one timeline,
   * before the latency); both 0 on real drives */
  double t_xfer0, t_xfer1;
  uint32_t done_part; /* internal: bytes done so far */
  int tag;        /* the caller's (the store: which kind of read); never touched by the engine */
} df_io_req;

typedef struct df_io_ops {
  /* Next read for `drive`, or NULL. Called from the drive's thread. */
  df_io_req *(*take)(void *ctx, int drive);
  /* A read finished (ok or not). */
  void (*done)(void *ctx, int drive, df_io_req *r);
  void *ctx;
} df_io_ops;

typedef enum { DF_IO_URING = 0, DF_IO_PREAD = 1 } df_io_kind;

typedef struct df_io_emu {
  double bw;      /* bytes/s per drive; 0 = no emulation */
  double latency; /* seconds per read */
} df_io_emu;

int df_io_open(df_io **out, df_io_kind kind, int ndrives, int qd, const df_io_emu *emu,
               const df_io_ops *ops, df_err *e);
/* New work may be available for drive (-1 = all). Safe under the caller's locks. */
void df_io_kick(df_io *io, int drive);
/* Registers [base, base+len) as a fixed buffer in every ring; returns its
 * index, or -1 (then reads of it use plain O_DIRECT reads). */
int df_io_register(df_io *io, void *base, size_t len);
/* Stops the threads once take() returns NULL and nothing is in flight. */
void df_io_close(df_io *io);
int df_io_registered(const df_io *io); /* 1 if fixed buffers are in use */

/* Parses "BW[,LATENCY]" such as "800MB/s,0.2ms" (units B, KB, MB, GB, KiB,
 * MiB, GiB, per s; latency s, ms, us). */
int df_io_parse_emu(const char *s, df_io_emu *out, df_err *e);
/* Parses a byte rate such as "2GB/s" or "500MiB/s". */
int df_io_parse_rate(const char *s, double *out);

#endif
