/* What memory this process may use, read from the machine: MemAvailable and
 * the cgroup limit (v2: memory.max along this cgroup's path; v1:
 * memory.limit_in_bytes along the memory controller's path). The cgroup's headroom is its limit minus what it
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

/* Lowest headroom (limit minus what others in the cgroup use) over a cgroup
 * path and its ancestors under root; 0 when no limit was found. */
static int walk(const char *root, const char *path, const char *limf, const char *usef,
                uint64_t *head, char *why, size_t n) {
  char rel[4096], f[4400];
  snprintf(rel, sizeof rel, "%s", path);
  int found = 0;
  for (;;) {
    uint64_t lim, cur;
    snprintf(f, sizeof f, "%s%s/%s", root, rel, limf);
    if (read_u64(f, &lim) == 0 && lim < (1ull << 60)) { /* v1 "unlimited" is ~2^63 */
      snprintf(f, sizeof f, "%s%s/%s", root, rel, usef);
      if (read_u64(f, &cur)) cur = 0;
      uint64_t rss = self_rss(), others = cur > rss ? cur - rss : 0;
      uint64_t h = lim > others ? lim - others : 0;
      if (!found || h < *head) {
        *head = h;
        snprintf(why, n, "cgroup %.200s %s", rel[0] ? rel : "/", limf);
      }
      found = 1;
    }
    if (!rel[0] || !strcmp(rel, "/")) break;
    char *s = strrchr(rel, '/');
    if (!s) break;
    *s = 0; /* "/a/b" -> "/a" -> "" (the root) */
  }
  return found;
}

static int cgroup_limit(uint64_t *head, char *why, size_t n) {
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (!f) return 0;
  char line[4096];
  int found = 0;
  uint64_t best = 0;
  char w[512] = "";
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2) continue;
    *c2 = 0;
    const char *ctl = c1 + 1, *path = c2 + 1;
    uint64_t h;
    int got = 0;
    if (!*ctl) { /* v2, mounted alone or next to v1 ("unified") */
      got = walk("/sys/fs/cgroup", path, "memory.max", "memory.current", &h, w, sizeof w) ||
            walk("/sys/fs/cgroup/unified", path, "memory.max", "memory.current", &h, w, sizeof w);
    } else if (strstr(ctl, "memory")) {
      got = walk("/sys/fs/cgroup/memory", path, "memory.limit_in_bytes", "memory.usage_in_bytes",
                 &h, w, sizeof w);
    }
    if (got && (!found || h < best)) {
      best = h;
      snprintf(why, n, "%s", w);
      found = 1;
    }
  }
  fclose(f);
  if (found) *head = best;
  return found;
}

int df_plan_mem_detect(uint64_t *bytes, char *why, size_t whylen, df_err *e) {
  uint64_t avail = meminfo("MemAvailable");
  if (!avail) return df_err_set(e, "/proc/meminfo: no MemAvailable; give --mem-limit SIZE");
  /* what this process already holds is ours to plan with too */
  avail += self_rss();
  snprintf(why, whylen, "MemAvailable");
  uint64_t h;
  char cg[512];
  if (cgroup_limit(&h, cg, sizeof cg) && h < avail) {
    avail = h;
    snprintf(why, whylen, "%s", cg);
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
