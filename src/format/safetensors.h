/* safetensors: mmap'd reader (one file or a sharded checkpoint with
 * model.safetensors.index.json) with strict validation, and a streaming
 * writer that writes to a temporary name and renames when complete.
 *
 * Layout: 8-byte little-endian header length N, N bytes of UTF-8 JSON
 * {name: {dtype, shape, data_offsets:[begin,end]}, "__metadata__": {...}},
 * then data; a tensor's file offset is 8 + N + begin. */
#ifndef DF_FORMAT_SAFETENSORS_H
#define DF_FORMAT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define DF_ST_MAX_HEADER (100u * 1000u * 1000u) /* 100 MB, as upstream */
#define DF_ST_MAX_DIMS 8

typedef enum df_dtype {
  DF_DT_BF16,
  DF_DT_F16,
  DF_DT_F32,
  DF_DT_F64,
  DF_DT_U8,
  DF_DT_I8,
  DF_DT_I32,
  DF_DT_I64,
  DF_DT_COUNT
} df_dtype;

size_t df_dtype_size(df_dtype t);
const char *df_dtype_name(df_dtype t);            /* "BF16", "F32", ... */
int df_dtype_parse(const char *name, df_dtype *out); /* 0 ok, -1 unknown */

typedef struct df_tensor {
  char *name;
  df_dtype dtype;
  int ndim;
  int64_t shape[DF_ST_MAX_DIMS];
  uint64_t nelem;
  uint64_t offset; /* absolute offset in its file */
  uint64_t nbytes;
  int file;          /* index of the shard in the set (0 for a single file) */
  const void *data;  /* points into the mmap */
} df_tensor;

/* ---- one file ---- */
typedef struct df_st_file {
  char *path;
  int fd;
  const uint8_t *map;
  uint64_t size;
  df_tensor *tensors; /* sorted by name */
  int ntensors;
  char *metadata_json; /* the __metadata__ object serialised, or NULL */
} df_st_file;

/* Parses and validates a header held in memory (used by the reader and the
 * fuzzer). buf = the whole file prefix (at least 8 + N bytes), file_size = the
 * real file size, label names the file in errors. Fills out->tensors (data
 * pointers set to buf + offset if buf covers them, else NULL). */
int df_st_parse(df_st_file *out, const uint8_t *buf, size_t buflen, uint64_t file_size,
                const char *label, df_err *e);
/* mmaps the file read-only (MAP_SHARED) and keeps f->fd open for readers
 * that bypass the mapping. */
int df_st_open(df_st_file *f, const char *path, df_err *e);
/* Also safe on what a failed df_st_parse / df_st_open left behind. */
void df_st_close(df_st_file *f);
const df_tensor *df_st_file_find(const df_st_file *f, const char *name);

/* ---- a checkpoint directory (sharded with index, or model.safetensors) ---- */
#define DF_ST_INDEX "model.safetensors.index.json"
#define DF_ST_SINGLE "model.safetensors"

typedef struct df_st_set {
  char *dir;
  df_st_file *files;
  int nfiles;
  const df_tensor **all; /* every tensor of every file, sorted by name */
  int ntensors;
  char **skipped; /* index shards absent from dir that hold only vision tensors */
  int nskipped;
  char *index_metadata_json; /* the index's "metadata" object serialised, or NULL */
} df_st_set;

/* Opens dir/model.safetensors.index.json (weight_map: name -> shard) and every
 * shard it names, or dir/model.safetensors when there is no index. Checks that
 * each index entry is in the shard it names and that names are unique across
 * shards. A shard the index names that is absent from dir and holds only
 * vision tensors (vision_tower.*, mm_projector.*: the release keeps them in
 * shards of their own) is not needed by a text-only engine: it is listed in
 * skipped, its tensors are simply not in the set. Any other missing shard is
 * an error naming it and one text tensor it holds. */
/* 1 for a tensor of the vision tower (vision_tower.*, mm_projector.*): the
 * release keeps them in shards of their own, and a text-only engine never
 * reads them. */
int df_st_is_vision_name(const char *name);
int df_st_set_open(df_st_set *s, const char *dir, df_err *e);
void df_st_set_close(df_st_set *s);
const df_tensor *df_st_set_find(const df_st_set *s, const char *name);
const char *df_st_set_file_path(const df_st_set *s, int file);

/* ---- writer ----
 * Two phases so multi-GB files never sit in memory: declare every tensor,
 * then write their data in declaration order. Data is aligned as declared
 * (offsets are laid out consecutively after padding the header to 8 bytes,
 * or to `align` bytes when set with df_st_writer_set_align). */
typedef struct df_st_writer df_st_writer;

df_st_writer *df_st_writer_new(const char *path);
/* Optional: align every tensor's data_offsets to a multiple of align (must be
 * a multiple of 8; use 1 to pack tightly). Default 1 (tight). */
void df_st_writer_set_align(df_st_writer *w, uint64_t align);
void df_st_writer_set_metadata(df_st_writer *w, const char *key, const char *value);
int df_st_writer_declare(df_st_writer *w, const char *name, df_dtype dt, int ndim,
                         const int64_t *shape, df_err *e);
/* Writes the header to path.tmp; after this only df_st_writer_write. */
int df_st_writer_begin(df_st_writer *w, df_err *e);
/* Appends bytes of the current tensor(s), in declaration order; a tensor may
 * be written in several calls. */
int df_st_writer_write(df_st_writer *w, const void *data, size_t n, df_err *e);
/* Checks every declared byte was written, fsyncs, renames to path. */
int df_st_writer_finish(df_st_writer *w, df_err *e);
/* Abandons the write and removes the temporary file (also on error). */
void df_st_writer_free(df_st_writer *w);

/* Positional writing, for producers that fill one file from several threads
 * (make-model): after begin, instead of df_st_writer_write, any thread may
 * write any byte range of the tensor declared `tensor`-th (0-based), and a
 * whole tensor may be left unwritten as a hole (it reads as zeros and takes
 * no disk where the file system has sparse files; what may read it is the
 * caller's to say, see make-model --spine int8). df_st_writer_finish then
 * requires the bytes written plus the holes to equal the declared bytes,
 * gives the file its full length (trailing holes included), fsyncs and
 * renames as usual. A writer is written either this way or sequentially. */
int df_st_writer_pwrite(df_st_writer *w, int tensor, uint64_t off, const void *data, size_t n,
                        df_err *e);
int df_st_writer_hole(df_st_writer *w, int tensor, df_err *e);
/* After begin: the size the finished file will have. */
uint64_t df_st_writer_file_size(const df_st_writer *w);

#endif
