#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void oom(size_t n) {
  fprintf(stderr, "deltafin: out of memory allocating %zu bytes\n", n);
  abort();
}

void *df_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) oom(n);
  return p;
}

void *df_xcalloc(size_t n, size_t sz) {
  void *p = calloc(n ? n : 1, sz ? sz : 1);
  if (!p) oom(n * sz);
  return p;
}

void *df_xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) oom(n);
  return q;
}

char *df_xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = df_xmalloc(n);
  memcpy(d, s, n);
  return d;
}

void *df_xaligned(size_t align, size_t n) {
  void *p = NULL;
  size_t rounded = (n + align - 1) / align * align;
  if (posix_memalign(&p, align, rounded ? rounded : align)) oom(n);
  return p;
}

int df_stream_read(FILE *f, const char *label, char **out, size_t *len, df_err *e) {
  size_t cap = 1 << 16, n = 0;
  char *buf = df_xmalloc(cap);
  for (;;) {
    if (n + 1 >= cap) buf = df_xrealloc(buf, cap *= 2);
    size_t got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0) break;
  }
  if (ferror(f)) {
    free(buf);
    return df_err_set(e, "%s: read error", label);
  }
  buf[n] = 0;
  *out = buf;
  if (len) *len = n;
  return 0;
}

int df_file_read(const char *path, char **out, size_t *len, df_err *e) {
  FILE *f = fopen(path, "rb");
  if (!f) return df_err_errno(e, "%s", path);
  int rc = df_stream_read(f, path, out, len, e);
  fclose(f);
  return rc;
}

int df_file_write_atomic(const char *path, const void *data, size_t len, df_err *e) {
  size_t pl = strlen(path) + 32;
  char *tmp = df_xmalloc(pl);
  snprintf(tmp, pl, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    df_err_errno(e, "%s", tmp);
    free(tmp);
    return -1;
  }
  const char *p = data;
  size_t left = len;
  while (left) {
    ssize_t w = write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR) continue;
      df_err_errno(e, "writing %s", tmp);
      goto fail;
    }
    p += w;
    left -= (size_t)w;
  }
  if (fsync(fd) != 0) {
    df_err_errno(e, "fsync %s", tmp);
    goto fail;
  }
  close(fd);
  fd = -1;
  if (rename(tmp, path) != 0) {
    df_err_errno(e, "rename %s -> %s", tmp, path);
    goto fail;
  }
  free(tmp);
  return 0;
fail:
  if (fd >= 0) close(fd);
  unlink(tmp);
  free(tmp);
  return -1;
}

int df_open_direct(const char *path, int writable, int *direct) {
  int fl = (writable ? O_RDWR | O_CREAT : O_RDONLY) | O_CLOEXEC;
  int fd = open(path, fl | O_DIRECT, 0644);
  if (fd < 0 && errno == EINVAL) {
    fd = open(path, fl, 0644);
    if (fd >= 0 && direct) *direct = 0;
  }
#ifdef F_NOCACHE
  if (fd >= 0) fcntl(fd, F_NOCACHE, 1);
#endif
  return fd;
}

int df_pwrite_all(int fd, const void *buf, size_t n, uint64_t off) {
  const char *p = buf;
  while (n) {
    ssize_t w = pwrite(fd, p, n, (off_t)off);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
    off += (uint64_t)w;
  }
  return 0;
}

int64_t df_pread_all(int fd, void *buf, size_t n, uint64_t off) {
  char *p = buf;
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, p + got, n - got, (off_t)(off + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  return (int64_t)got;
}

int df_file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

int df_mkdir_p(const char *path, df_err *e) {
  char *p = df_xstrdup(path);
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = 0;
    if (mkdir(p, 0755) != 0 && errno != EEXIST) {
      df_err_errno(e, "mkdir %s", p);
      free(p);
      return -1;
    }
    *s = '/';
  }
  int rc = 0;
  if (mkdir(p, 0755) != 0 && errno != EEXIST) rc = df_err_errno(e, "mkdir %s", p);
  free(p);
  return rc;
}

int df_mkdir_last(const char *path, const char *what, df_err *e) {
  struct stat st;
  if (stat(path, &st) == 0) {
    if (!S_ISDIR(st.st_mode)) return df_err_set(e, "%s %s is not a directory", what, path);
    return 0;
  }
  char *parent = df_xstrdup(path);
  size_t n = strlen(parent);
  while (n > 1 && parent[n - 1] == '/') parent[--n] = 0; /* "d0/" */
  char *slash = strrchr(parent, '/');
  if (slash) *(slash == parent ? slash + 1 : slash) = 0;
  else strcpy(parent, ".");
  int rc = 0;
  if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode))
    rc = df_err_set(e,
                    "%s %s: its parent folder %s does not exist (is the drive mounted? "
                    "only the last folder of the path is created)",
                    what, path, parent);
  else if (mkdir(path, 0755) != 0 && errno != EEXIST)
    rc = df_err_errno(e, "%s %s: mkdir", what, path);
  free(parent);
  return rc;
}

char *df_path_join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *s = df_xmalloc(n);
  snprintf(s, n, "%s/%s", dir, name);
  return s;
}

double df_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int df_utf8_valid(const char *s, size_t len) {
  const unsigned char *p = (const unsigned char *)s, *end = p + len;
  while (p < end) {
    unsigned c = *p;
    if (c < 0x80) {
      p++;
      continue;
    }
    int n;
    unsigned cp;
    if (c >= 0xC2 && c <= 0xDF) n = 1, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) n = 2, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) n = 3, cp = c & 0x07;
    else return 0;
    if (end - p <= n) return 0;
    for (int i = 1; i <= n; i++) {
      if ((p[i] & 0xC0) != 0x80) return 0;
      cp = (cp << 6) | (p[i] & 0x3F);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return 0;
    p += n + 1;
  }
  return 1;
}

int df_argmax(const float *x, int n) {
  int b = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[b]) b = i;
  return b;
}
