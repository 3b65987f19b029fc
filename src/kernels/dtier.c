/* The device weight tier's bookkeeping (dtier.h): an open-addressed table
 * of keys and a doubly linked recency list per class through it, and a
 * second table of use counts for the admission of LRU entries. */
#include "kernels/dtier.h"

#include <stdlib.h>

#include "base/util.h"

typedef struct ent {
  uint64_t key;
  void *p;
  size_t bytes;
  int prev, next; /* its class's recency list: prev is more recent; -1 ends */
  int used;       /* 1 live, 2 a tombstone left by an eviction */
  int cls;        /* df_dtier_class */
} ent;

/* a key's uses (gets, resident or not), halved every aging period */
typedef struct use {
  uint64_t key;
  uint32_t n;
  int used;
} use;

struct df_dtier {
  df_dtier_mem mem;
  ent *e;
  int cap_slots, live, dead;
  int head[2], tail[2]; /* per class: most and least recent */
  use *u;
  int u_slots, u_live;
  uint64_t u_since; /* gets since the last aging */
  uint64_t made;    /* the budget df_dtier_new was given: a grow stops there */
  df_dtier_stats st;
};

static uint64_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  return k;
}

df_dtier *df_dtier_new(uint64_t cap_bytes, df_dtier_mem mem) {
  df_dtier *t = df_xcalloc(1, sizeof *t);
  t->mem = mem;
  t->cap_slots = 64;
  t->e = df_xcalloc((size_t)t->cap_slots, sizeof *t->e);
  t->u_slots = 64;
  t->u = df_xcalloc((size_t)t->u_slots, sizeof *t->u);
  t->head[0] = t->head[1] = t->tail[0] = t->tail[1] = -1;
  t->st.cap = t->made = cap_bytes;
  t->st.keep_cap = UINT64_MAX;
  return t;
}

void df_dtier_free(df_dtier *t) {
  if (!t) return;
  for (int i = 0; i < t->cap_slots; i++)
    if (t->e[i].used == 1) t->mem.free(t->mem.ud, t->e[i].p);
  free(t->e);
  free(t->u);
  free(t);
}

static int find(const df_dtier *t, uint64_t key) {
  int m = t->cap_slots - 1;
  for (int i = (int)(mix(key) & (uint64_t)m), n = 0; n < t->cap_slots; i = (i + 1) & m, n++) {
    if (!t->e[i].used) return -1;
    if (t->e[i].used == 1 && t->e[i].key == key) return i;
  }
  return -1;
}

static void unlink_ent(df_dtier *t, int i) {
  ent *x = &t->e[i];
  if (x->prev >= 0) t->e[x->prev].next = x->next;
  else t->head[x->cls] = x->next;
  if (x->next >= 0) t->e[x->next].prev = x->prev;
  else t->tail[x->cls] = x->prev;
}

static void push_front(df_dtier *t, int i) {
  int c = t->e[i].cls;
  t->e[i].prev = -1;
  t->e[i].next = t->head[c];
  if (t->head[c] >= 0) t->e[t->head[c]].prev = i;
  t->head[c] = i;
  if (t->tail[c] < 0) t->tail[c] = i;
}

/* The slot of key's count in a table of `slots` (a power of two), or the
 * empty slot where it goes; the table is never full (kept under half). */
static int use_slot(const use *u, int slots, uint64_t key) {
  int m = slots - 1, i = (int)(mix(key) & (uint64_t)m);
  while (u[i].used && u[i].key != key) i = (i + 1) & m;
  return i;
}

static uint32_t uses_of(const df_dtier *t, uint64_t key) {
  int i = use_slot(t->u, t->u_slots, key);
  return t->u[i].used ? t->u[i].n : 0;
}

/* The table again, each count halved (those that reach 0 dropped), in
 * enough slots for the live keys and as many more. */
static void use_rebuild(df_dtier *t, int halve) {
  int ns = 64;
  while (ns < 4 * (t->u_live + 1)) ns *= 2;
  use *nu = df_xcalloc((size_t)ns, sizeof *nu);
  int live = 0;
  for (int i = 0; i < t->u_slots; i++) {
    if (!t->u[i].used) continue;
    uint32_t n = halve ? t->u[i].n / 2 : t->u[i].n;
    if (!n) continue;
    nu[use_slot(nu, ns, t->u[i].key)] = (use){.key = t->u[i].key, .n = n, .used = 1};
    live++;
  }
  free(t->u);
  t->u = nu;
  t->u_slots = ns;
  t->u_live = live;
}

/* One use of key; every DF_DTIER_AGE_USES uses per counted key (at least
 * DF_DTIER_AGE_MIN), every count is halved, so the counts follow what is
 * used lately. */
static void count_use(df_dtier *t, uint64_t key) {
  int i = use_slot(t->u, t->u_slots, key);
  if (!t->u[i].used) {
    t->u[i] = (use){.key = key, .n = 1, .used = 1};
    if (++t->u_live * 2 >= t->u_slots) use_rebuild(t, 0);
  } else if (t->u[i].n < UINT32_MAX) {
    t->u[i].n++;
  }
  uint64_t period = (uint64_t)t->u_live * DF_DTIER_AGE_USES;
  if (++t->u_since >= (period > DF_DTIER_AGE_MIN ? period : DF_DTIER_AGE_MIN)) {
    use_rebuild(t, 1);
    t->u_since = 0;
  }
}

uint32_t df_dtier_uses(const df_dtier *t, uint64_t key) { return uses_of(t, key); }

void *df_dtier_get(df_dtier *t, uint64_t key) {
  count_use(t, key);
  int i = find(t, key);
  if (i < 0) {
    t->st.misses++;
    return NULL;
  }
  t->st.hits++;
  unlink_ent(t, i);
  push_front(t, i);
  return t->e[i].p;
}

int df_dtier_has(const df_dtier *t, uint64_t key) { return find(t, key) >= 0; }

/* The least recent entry of class c out. */
static void evict_from(df_dtier *t, int c) {
  int i = t->tail[c];
  if (c == DF_DTIER_KEEP) t->st.keep_bytes -= t->e[i].bytes;
  unlink_ent(t, i);
  t->mem.free(t->mem.ud, t->e[i].p);
  t->st.bytes -= t->e[i].bytes;
  t->st.evictions++;
  t->e[i].used = 2;
  t->live--;
  t->dead++;
}

/* The least recent LRU entry out (KEEP entries leave only by a shrink). */
static void evict_tail(df_dtier *t) { evict_from(t, DF_DTIER_LRU); }

void df_dtier_shrink(df_dtier *t, uint64_t bytes) {
  uint64_t held = t->st.bytes < t->st.cap ? t->st.bytes : t->st.cap;
  t->st.cap = bytes < held ? held - bytes : 0;
  for (int c = DF_DTIER_LRU; c >= DF_DTIER_KEEP; c--)
    while (t->st.bytes > t->st.cap && t->tail[c] >= 0) evict_from(t, c);
}

void df_dtier_grow(df_dtier *t, uint64_t bytes) {
  /* the budget only ever falls below made (a shrink, a failed allocation) */
  uint64_t room = t->st.cap < t->made ? t->made - t->st.cap : 0;
  t->st.cap += bytes < room ? bytes : room;
}

void df_dtier_keep_cap(df_dtier *t, uint64_t bytes) { t->st.keep_cap = bytes; }

/* Rebuilt when live + tombstones pass 3/4 of the slots, doubled when live
 * alone passes half, so probes stay short. */
static void rehash(df_dtier *t) {
  int ns = t->cap_slots;
  while (t->live * 2 >= ns) ns *= 2;
  ent *old = t->e;
  int ohead[2] = {t->head[0], t->head[1]};
  t->e = df_xcalloc((size_t)ns, sizeof *t->e);
  t->cap_slots = ns;
  t->dead = 0;
  t->head[0] = t->head[1] = t->tail[0] = t->tail[1] = -1;
  /* re-insert from least to most recent so each push_front keeps the order */
  int *order = df_xmalloc(sizeof(int) * (size_t)(t->live ? t->live : 1));
  for (int c = 0; c < 2; c++) {
    int n = 0;
    for (int i = ohead[c]; i >= 0; i = old[i].next) order[n++] = i;
    for (int k = n - 1; k >= 0; k--) {
      ent *o = &old[order[k]];
      int m = ns - 1, j = (int)(mix(o->key) & (uint64_t)m);
      while (t->e[j].used) j = (j + 1) & m;
      t->e[j] = *o;
      t->e[j].used = 1;
      push_front(t, j);
    }
  }
  free(order);
  free(old);
}

/* 1 when an LRU entry of key may take the room that evicting the least
 * recent LRU entries would give it: each of those victims must have been
 * used at least DF_DTIER_ADMIT_MARGIN times fewer than key (dtier.h says
 * why). No victim needed: admitted. */
static int admit(const df_dtier *t, uint64_t key, size_t bytes) {
  uint64_t need = t->st.bytes + bytes, cand = uses_of(t, key);
  for (int i = t->tail[DF_DTIER_LRU]; need > t->st.cap && i >= 0; i = t->e[i].prev) {
    if ((uint64_t)uses_of(t, t->e[i].key) + DF_DTIER_ADMIT_MARGIN > cand) return 0;
    need -= t->e[i].bytes;
  }
  return 1;
}

void *df_dtier_put(df_dtier *t, uint64_t key, size_t bytes, df_dtier_class cls) {
  /* a cap set below what is kept already leaves no room, not a wrap-around */
  uint64_t kept = t->st.keep_bytes < t->st.keep_cap ? t->st.keep_bytes : t->st.keep_cap;
  if (cls == DF_DTIER_KEEP && bytes > t->st.keep_cap - kept) {
    t->st.refused++;
    return NULL;
  }
  void *p;
  for (;;) {
    /* what the KEEP entries leave is all an entry can ever have */
    if (bytes > t->st.cap - t->st.keep_bytes || (cls == DF_DTIER_LRU && !admit(t, key, bytes))) {
      t->st.refused++;
      return NULL;
    }
    while (t->st.bytes + bytes > t->st.cap && t->tail[DF_DTIER_LRU] >= 0) evict_tail(t);
    if ((p = t->mem.alloc(t->mem.ud, bytes))) break;
    if (t->tail[DF_DTIER_LRU] < 0) {
      t->st.refused++;
      return NULL;
    }
    /* the device holds no more than the entries now: the budget becomes
     * that, and the entry is tried again under it (evicting to fit
     * needs the admission again, else an LRU entry missing every pass
     * would take each held one in turn) */
    t->st.cap = t->st.bytes;
  }
  if ((t->live + 1 + t->dead) * 4 >= t->cap_slots * 3) rehash(t);
  int m = t->cap_slots - 1, j = (int)(mix(key) & (uint64_t)m);
  while (t->e[j].used == 1) j = (j + 1) & m;
  if (t->e[j].used == 2) t->dead--;
  t->e[j] = (ent){.key = key, .p = p, .bytes = bytes, .used = 1, .cls = cls};
  push_front(t, j);
  t->live++;
  t->st.bytes += bytes;
  if (cls == DF_DTIER_KEEP) t->st.keep_bytes += bytes;
  return p;
}

void df_dtier_stats_get(const df_dtier *t, df_dtier_stats *st) {
  *st = t->st;
  st->entries = t->live;
}
