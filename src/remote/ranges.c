#include "remote/ranges.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/util.h"

#define LINE_LEN 62 /* "R " + 16 + " " + 16 + " " + 16 + " " + 8 + "\n" */

int df_ranges_format(char *line, const df_range *r) {
  int n = snprintf(line, 80, "R %016llx %016llx %016llx ", (unsigned long long)r->begin,
                   (unsigned long long)r->end, (unsigned long long)r->hash);
  uint32_t c = XXH32(line, (size_t)n, 0);
  n += snprintf(line + n, 80 - (size_t)n, "%08x\n", c);
  return n;
}

static int hexval(const char *s, int n, uint64_t *out) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) {
    char c = s[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return -1;
    v = v << 4 | (uint64_t)d;
  }
  *out = v;
  return 0;
}

static int parse_line(const char *l, df_range *r) {
  uint64_t crc;
  if (l[0] != 'R' || l[1] != ' ' || l[18] != ' ' || l[35] != ' ' || l[52] != ' ' ||
      l[LINE_LEN - 1] != '\n')
    return -1;
  if (hexval(l + 2, 16, &r->begin) || hexval(l + 19, 16, &r->end) || hexval(l + 36, 16, &r->hash) ||
      hexval(l + 53, 8, &crc))
    return -1;
  if (XXH32(l, 53, 0) != (uint32_t)crc) return -1;
  if (r->end <= r->begin) return -1;
  return 0;
}

static int cmp_range(const void *a, const void *b) {
  const df_range *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

int df_ranges_parse(const char *buf, size_t len, const char *label, df_range **out, int *n,
                    size_t *valid_len, df_err *e) {
  size_t lines = len / LINE_LEN;
  df_range *v = df_xmalloc((lines + 1) * sizeof *v);
  int k = 0;
  size_t pos = 0;
  while (pos < len) {
    int last = len - pos <= LINE_LEN;
    if (len - pos < LINE_LEN || parse_line(buf + pos, &v[k])) {
      if (last) break; /* a torn append: the range was never recorded */
      free(v);
      return df_err_set(e,
                        "%s: line %zu is damaged (not a range record); delete the file and the "
                        "partial data beside it to start that file again",
                        label, pos / LINE_LEN + 1);
    }
    k++;
    pos += LINE_LEN;
  }
  qsort(v, (size_t)k, sizeof *v, cmp_range);
  *out = v;
  *n = k;
  if (valid_len) *valid_len = pos;
  return 0;
}

struct df_ranges {
  char *path;
  int fd;
  uint64_t seen; /* journal bytes reflected in v (others' appends after it: df_ranges_refresh) */
  pthread_mutex_t mu;
  df_range *v;
  int n, cap;
};

int df_ranges_open(df_ranges **out, const char *path, df_err *e) {
  /* O_APPEND: another process (run and warm on one install) may append to
   * the same journal; each batch lands whole, after what is there. */
  int fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return df_err_errno(e, "%s", path);
  char *buf = NULL;
  size_t len = 0;
  if (df_file_read(path, &buf, &len, e)) {
    close(fd);
    return -1;
  }
  df_range *v;
  int n;
  size_t good;
  if (df_ranges_parse(buf, len, path, &v, &n, &good, e)) {
    free(buf);
    close(fd);
    return -1;
  }
  free(buf);
  if (good != len && ftruncate(fd, (off_t)good)) {
    free(v);
    close(fd);
    return df_err_errno(e, "truncating the torn tail of %s", path);
  }
  if (lseek(fd, 0, SEEK_END) < 0) {
    free(v);
    close(fd);
    return df_err_errno(e, "%s", path);
  }
  df_ranges *r = df_xcalloc(1, sizeof *r);
  r->path = df_xstrdup(path);
  r->fd = fd;
  r->seen = good;
  pthread_mutex_init(&r->mu, NULL);
  r->v = v;
  r->n = r->cap = n;
  *out = r;
  return 0;
}

void df_ranges_close(df_ranges *r) {
  if (!r) return;
  close(r->fd);
  pthread_mutex_destroy(&r->mu);
  free(r->v);
  free(r->path);
  free(r);
}

/* The index of the entry equal to [begin, end), or -1 (the caller holds mu). */
static int find_exact(const df_ranges *r, uint64_t begin, uint64_t end) {
  int lo = 0, hi = r->n;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (r->v[mid].begin < begin) lo = mid + 1;
    else hi = mid;
  }
  for (int i = lo; i < r->n && r->v[i].begin == begin; i++)
    if (r->v[i].end == end) return i;
  return -1;
}

/* Inserts x in begin order (the caller holds mu). */
static void insert_sorted(df_ranges *r, const df_range *x) {
  if (r->n + 1 > r->cap) {
    r->cap = r->cap ? r->cap * 2 : 64;
    r->v = df_xrealloc(r->v, (size_t)r->cap * sizeof *r->v);
  }
  int i = r->n;
  while (i > 0 && cmp_range(&r->v[i - 1], x) > 0) {
    r->v[i] = r->v[i - 1];
    i--;
  }
  r->v[i] = *x;
  r->n++;
}

int df_ranges_add_many(df_ranges *r, const df_range *v, int n, df_err *e) {
  if (n <= 0) return 0;
  char *buf = df_xmalloc((size_t)n * LINE_LEN + 1);
  size_t len = 0;
  for (int k = 0; k < n; k++) len += (size_t)df_ranges_format(buf + len, &v[k]);
  pthread_mutex_lock(&r->mu);
  size_t done = 0;
  while (done < len) {
    ssize_t w = write(r->fd, buf + done, len - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    done += (size_t)w;
  }
  free(buf);
  if (done != len || fdatasync(r->fd)) {
    pthread_mutex_unlock(&r->mu);
    return df_err_errno(e, "appending to %s", r->path);
  }
  /* O_APPEND leaves the offset after our lines: when nothing else was
   * appended since `seen`, they are all of it (else refresh reads them) */
  off_t end = lseek(r->fd, 0, SEEK_CUR);
  if (end >= 0 && (uint64_t)end == r->seen + len) r->seen = (uint64_t)end;
  if (r->n + n > r->cap) {
    while (r->n + n > r->cap) r->cap = r->cap ? r->cap * 2 : 64;
    r->v = df_xrealloc(r->v, (size_t)r->cap * sizeof *r->v);
  }
  for (int k = 0; k < n; k++) insert_sorted(r, &v[k]);
  pthread_mutex_unlock(&r->mu);
  return 0;
}

int df_ranges_refresh(df_ranges *r, df_err *e) {
  pthread_mutex_lock(&r->mu);
  struct stat st;
  if (fstat(r->fd, &st)) {
    pthread_mutex_unlock(&r->mu);
    return df_err_errno(e, "%s", r->path);
  }
  if ((uint64_t)st.st_size <= r->seen) {
    pthread_mutex_unlock(&r->mu);
    return 0;
  }
  size_t len = (size_t)((uint64_t)st.st_size - r->seen), got = 0;
  char *buf = df_xmalloc(len);
  while (got < len) {
    ssize_t k = pread(r->fd, buf + got, len - got, (off_t)(r->seen + got));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    got += (size_t)k;
  }
  char label[1100];
  snprintf(label, sizeof label, "%s (lines after byte %llu)", r->path, (unsigned long long)r->seen);
  df_range *v = NULL;
  int n = 0;
  size_t good = 0;
  /* a torn last line is an append still being written (or a killed one):
   * left for the next refresh; damage before it is an error */
  int rc = df_ranges_parse(buf, got, label, &v, &n, &good, e);
  free(buf);
  if (!rc) {
    for (int k = 0; k < n; k++) {
      if (find_exact(r, v[k].begin, v[k].end) < 0) insert_sorted(r, &v[k]);
    }
    r->seen += good;
  }
  free(v);
  pthread_mutex_unlock(&r->mu);
  return rc;
}

int df_ranges_add(df_ranges *r, uint64_t begin, uint64_t end, uint64_t hash, df_err *e) {
  df_range x = {begin, end, hash};
  return df_ranges_add_many(r, &x, 1, e);
}

int df_ranges_covered(df_ranges *r, uint64_t begin, uint64_t end) {
  pthread_mutex_lock(&r->mu);
  uint64_t cur = begin;
  for (int i = 0; i < r->n && cur < end; i++) {
    if (r->v[i].begin > cur) break;
    if (r->v[i].end > cur) cur = r->v[i].end;
  }
  pthread_mutex_unlock(&r->mu);
  return cur >= end;
}

int df_ranges_lookup(df_ranges *r, uint64_t begin, uint64_t end, uint64_t *hash) {
  pthread_mutex_lock(&r->mu);
  int i = find_exact(r, begin, end);
  if (i >= 0) *hash = r->v[i].hash;
  pthread_mutex_unlock(&r->mu);
  return i >= 0 ? 0 : -1;
}

uint64_t df_ranges_bytes(df_ranges *r) {
  pthread_mutex_lock(&r->mu);
  uint64_t total = 0, cur = 0;
  for (int i = 0; i < r->n; i++) {
    uint64_t b = r->v[i].begin > cur ? r->v[i].begin : cur;
    if (r->v[i].end > b) total += r->v[i].end - b;
    if (r->v[i].end > cur) cur = r->v[i].end;
  }
  pthread_mutex_unlock(&r->mu);
  return total;
}

int df_ranges_count(df_ranges *r) {
  pthread_mutex_lock(&r->mu);
  int n = r->n;
  pthread_mutex_unlock(&r->mu);
  return n;
}

void df_ranges_gaps(df_ranges *r, uint64_t begin, uint64_t end,
                    void (*fn)(void *ud, uint64_t b, uint64_t e), void *ud) {
  pthread_mutex_lock(&r->mu);
  int n = r->n;
  df_range *v = df_xmalloc((size_t)(n ? n : 1) * sizeof *v);
  memcpy(v, r->v, (size_t)n * sizeof *v);
  pthread_mutex_unlock(&r->mu);
  uint64_t cur = begin;
  for (int i = 0; i < n && cur < end; i++) {
    if (v[i].end <= cur) continue;
    if (v[i].begin > cur) fn(ud, cur, v[i].begin < end ? v[i].begin : end);
    if (v[i].end > cur) cur = v[i].end;
  }
  if (cur < end) fn(ud, cur, end);
  free(v);
}
