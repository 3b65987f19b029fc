/* What memory this process may use, read from the machine: MemAvailable and
 * the cgroup limit (v2: memory.max along this cgroup's path; v1:
 * memory.limit_in_bytes). The cgroup's headroom is its limit minus what it
 * already uses besides this process (other members may be using some). */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"

static int read_u64(const char *path, uint64_t *v) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char buf[64];
  int ok = fgets(buf, sizeof buf, f) != NULL;
  fclose(f);
  if (!ok || !isdigit((unsigned char)buf[0])) return -1; /* "max" = no limit */
  *v = strtoull(buf, NULL, 10);
  return 0;
}

static uint64_t meminfo(const char *key) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  uint64_t v = 0;
  size_t n = strlen(key);
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, key, n) && line[n] == ':') {
      v = strtoull(line + n + 1, NULL, 10) * 1024;
      break;
    }
  fclose(f);
  return v;
}

static uint64_t self_rss(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, res = 0;
  int n = fscanf(f, "%llu %llu", &size, &res);
  fclose(f);
  return n == 2 ? res * 4096ull : 0;
}

/* Lowest headroom over the v2 cgroup path; 0 when no limit was found. */
static int cgroup_v2(uint64_t *head, char *path_out, size_t n) {
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (!f) return 0;
  char line[4096], rel[4096] = "";
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "0::", 3)) {
      snprintf(rel, sizeof rel, "%s", line + 3);
      rel[strcspn(rel, "\n")] = 0;
    }
  fclose(f);
  if (!rel[0]) return 0;
  int found = 0;
  uint64_t best = 0;
  char dir[4200];
  for (;;) {
    uint64_t max, cur;
    snprintf(dir, sizeof dir, "/sys/fs/cgroup%s/memory.max", rel);
    if (read_u64(dir, &max) == 0) {
      snprintf(dir, sizeof dir, "/sys/fs/cgroup%s/memory.current", rel);
      if (read_u64(dir, &cur)) cur = 0;
      uint64_t rss = self_rss(), others = cur > rss ? cur - rss : 0;
      uint64_t h = max > others ? max - others : 0;
      if (!found || h < best) {
        best = h;
        snprintf(path_out, n, "cgroup %s memory.max", rel[0] ? rel : "/");
      }
      found = 1;
    }
    if (!rel[0] || !strcmp(rel, "/")) break;
    char *s = strrchr(rel, '/');
    if (!s) break;
    *s = 0; /* "/a/b" -> "/a" -> "" (the root, which has no memory.max) */
  }
  if (found) *head = best;
  return found;
}

static int cgroup_v1(uint64_t *lim) {
  uint64_t v;
  if (read_u64("/sys/fs/cgroup/memory/memory.limit_in_bytes", &v)) return 0;
  if (v >= (1ull << 60)) return 0; /* "unlimited" is a huge number in v1 */
  *lim = v;
  return 1;
}

int df_plan_mem_detect(uint64_t *bytes, char *why, size_t whylen, df_err *e) {
  uint64_t avail = meminfo("MemAvailable");
  if (!avail) return df_err_set(e, "/proc/meminfo: no MemAvailable; give --mem-limit SIZE");
  /* what this process already holds is ours to plan with too */
  avail += self_rss();
  snprintf(why, whylen, "MemAvailable");
  uint64_t h;
  char cg[256];
  if (cgroup_v2(&h, cg, sizeof cg) && h < avail) {
    avail = h;
    snprintf(why, whylen, "%s", cg);
  } else if (cgroup_v1(&h) && h < avail) {
    avail = h;
    snprintf(why, whylen, "cgroup v1 memory.limit_in_bytes");
  }
  *bytes = avail;
  return 0;
}

int df_plan_parse_size(const char *s, uint64_t *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || !(v >= 0) || !isfinite(v)) return -1;
  static const struct {
    const char *u;
    double m;
  } units[] = {{"", 1},          {"B", 1},      {"K", 1e3},    {"KB", 1e3},
               {"KiB", 1024.0},  {"M", 1e6},    {"MB", 1e6},   {"MiB", 1048576.0},
               {"G", 1e9},       {"GB", 1e9},   {"GiB", 1073741824.0},
               {"T", 1e12},      {"TB", 1e12},  {"TiB", 1099511627776.0}};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (!strcmp(end, units[i].u)) {
      double b = v * units[i].m;
      if (b > 1.8e19) return -1;
      *out = (uint64_t)b;
      return 0;
    }
  return -1;
}
