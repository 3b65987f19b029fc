/* Small shared helpers: allocation that aborts on OOM, whole-file reads,
 * atomic writes (temporary name, fsync, rename), monotonic time. */
#ifndef DF_BASE_UTIL_H
#define DF_BASE_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"

void *df_xmalloc(size_t n);
void *df_xcalloc(size_t n, size_t sz);
void *df_xrealloc(void *p, size_t n);
char *df_xstrdup(const char *s);
/* The alignment of every O_DIRECT buffer, offset and length: the pack's
 * record alignment (its manifest's "align") and the store's read unit. */
#define DF_IO_ALIGN 4096u
/* Rounds n up to a multiple of DF_IO_ALIGN. */
#define DF_IO_ROUND_UP(n) (((n) + DF_IO_ALIGN - 1) / DF_IO_ALIGN * DF_IO_ALIGN)

/* Opens path with O_DIRECT (page cache bypassed), or without it where the
 * filesystem refuses it (EINVAL, e.g. tmpfs): *direct is then cleared
 * (direct may be NULL). writable: O_RDWR | O_CREAT (0644), else O_RDONLY. */
int df_open_direct(const char *path, int writable, int *direct);
/* pwrite/pread of exactly n bytes (EINTR retried): 0 / bytes read (short
 * only at end of file), -1 with errno on error. */
int df_pwrite_all(int fd, const void *buf, size_t n, uint64_t off);
int64_t df_pread_all(int fd, void *buf, size_t n, uint64_t off);

/* Aligned allocation (for O_DIRECT buffers and SIMD); free with free(). */
void *df_xaligned(size_t align, size_t n);

/* Reads a whole file; *out is NUL-terminated (not counted in *len). */
int df_file_read(const char *path, char **out, size_t *len, df_err *e);
/* The same for an open stream (standard input); label names it in errors. */
int df_stream_read(FILE *f, const char *label, char **out, size_t *len, df_err *e);
/* Writes data to path via path.tmp.<pid> + fsync + rename: never a partial file. */
int df_file_write_atomic(const char *path, const void *data, size_t len, df_err *e);
int df_file_exists(const char *path);
int df_mkdir_p(const char *path, df_err *e);
/* Creates only the last folder of path (what names it in messages: "pack: drive"):
 * a mistyped or unmounted drive path (/mnt/nvmme0/df) must fail rather than
 * fill whatever file system holds its parent's parent. */
int df_mkdir_last(const char *path, const char *what, df_err *e);
/* Joins dir + "/" + name into a fresh string. */
char *df_path_join(const char *dir, const char *name);

double df_now(void); /* monotonic seconds */

/* Strict UTF-8 validation (no overlongs, no surrogates, max U+10FFFF). */
int df_utf8_valid(const char *s, size_t len);

/* The index of the largest of x[0..n), ties to the lower index (greedy decoding's
 * rule everywhere: sampler, drafts, benches). */
int df_argmax(const float *x, int n);

#endif
