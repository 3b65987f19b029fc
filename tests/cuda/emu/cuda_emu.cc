/* The emulator's scheduler, barriers and the one built-in with a body
 * (cuda_emu.h). A block's threads are coroutines on stacks of their own;
 * each runs until it waits at a barrier or returns. One warp at a time runs
 * as far as it can: its threads in thread order, its own barriers released
 * as soon as its live threads have all reached them, until they all wait
 * at the block's barrier or are done; then the next warp (odd blocks: the
 * warps and their threads in reverse order). So a warp runs ahead of the
 * others as far as the barriers let it, the order that shows a block
 * barrier missing between two warps' use of shared memory. */
#include "cuda_emu.h"

#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

#include <deque>
#include <vector>

struct emu_copy {
  void *dst;
  unsigned char src[16]; /* read at issue */
  int bytes;
};
/* per thread: copies issued since the last commit, then committed groups
 * oldest first */
struct emu_async {
  std::vector<emu_copy> open;
  std::deque<std::vector<emu_copy>> groups;
};

enum { EMU_RUN = -2, EMU_DONE = -3, EMU_BLOCK = -1 };
enum { EMU_STACK = 64 * 1024 };

static struct {
  int n, live;
  const std::function<void()> *body;
  ucontext_t sched;
  std::vector<ucontext_t> ctx;
  std::vector<char> stacks;
  std::vector<int> wait; /* per thread: EMU_RUN, EMU_DONE, EMU_BLOCK or its warp */
  std::vector<int> parity; /* per thread: its shuffles so far, mod 2 */
  /* per thread: its votes so far, and its last two (by their count's
   * parity: a thread reaches the vote after next only once every other
   * has read this one's) */
  std::vector<long> votes;
  std::vector<long> vote[2];
  std::vector<emu_async> async;
  int pdl_waited; /* a thread of this block has reached pdl_wait */
  uint32_t slot[2][32][32];
} B;

void emu_barrier(int w) {
  int t = (int)threadIdx.x;
  B.wait[t] = w < 0 ? EMU_BLOCK : w;
  swapcontext(&B.ctx[t], &B.sched);
}

uint32_t *emu_slot(int parity, int lane) {
  return &B.slot[parity][threadIdx.x / 32][lane];
}
int emu_shfl_parity(void) { return B.parity[threadIdx.x] ^= 1; }

int emu_vote_all(int pred, int w) {
  int t = (int)threadIdx.x;
  long n = ++B.votes[(size_t)t];
  /* the vote's count and its value in one: count * 2 + (pred != 0) */
  B.vote[n & 1][(size_t)t] = n * 2 + (pred != 0);
  emu_barrier(w);
  int lo = w < 0 ? 0 : w * 32, hi = w < 0 || (w + 1) * 32 > B.n ? B.n : (w + 1) * 32;
  for (int i = lo; i < hi; i++) {
    long v = B.vote[n & 1][(size_t)i];
    /* a thread that returned before this vote has an older count: not counted */
    if (v / 2 == n && !(v & 1)) return 0;
  }
  return 1;
}

static void emu_entry(void) {
  (*B.body)();
  B.wait[threadIdx.x] = EMU_DONE;
  B.live--;
} /* uc_link returns to the scheduler */

/* warp w's own barrier, once all its live threads wait at it: released
 * (how many threads) */
static int emu_release_warp(int w) {
  int end = (w + 1) * 32 < B.n ? (w + 1) * 32 : B.n, n = 0;
  for (int t = w * 32; t < end; t++)
    if (B.wait[t] != EMU_DONE && B.wait[t] != w) return 0;
  for (int t = w * 32; t < end; t++)
    if (B.wait[t] == w) B.wait[t] = EMU_RUN, n++;
  return n;
}
/* the block's barrier, once all its live threads wait at it; 0 when they
 * do not (the block is stuck: every warp has run as far as it can) */
static int emu_release_block(void) {
  int n = 0;
  for (int t = 0; t < B.n; t++)
    if (B.wait[t] != EMU_DONE && B.wait[t] != EMU_BLOCK) return 0;
  for (int t = 0; t < B.n; t++)
    if (B.wait[t] == EMU_BLOCK) B.wait[t] = EMU_RUN, n++;
  return n;
}

void emu_run_block(const std::function<void()> &body) {
  int n = (int)blockDim.x;
  B.n = n, B.live = n, B.body = &body;
  B.ctx.resize((size_t)n);
  B.stacks.resize((size_t)n * EMU_STACK);
  B.wait.assign((size_t)n, EMU_RUN);
  B.parity.assign((size_t)n, 0);
  B.votes.assign((size_t)n, 0);
  B.vote[0].assign((size_t)n, 0), B.vote[1].assign((size_t)n, 0);
  B.async.assign((size_t)n, emu_async());
  B.pdl_waited = 0;
  for (int t = 0; t < n; t++) {
    getcontext(&B.ctx[t]);
    B.ctx[t].uc_stack.ss_sp = &B.stacks[(size_t)t * EMU_STACK];
    B.ctx[t].uc_stack.ss_size = EMU_STACK;
    B.ctx[t].uc_link = &B.sched;
    makecontext(&B.ctx[t], emu_entry, 0);
  }
  /* odd blocks run their threads last to first: two orders of the same
   * kernel, so a missing barrier that one order hides the other may show */
  int rev = (blockIdx.x + blockIdx.y + blockIdx.z) & 1, nw = (n + 31) / 32;
  while (B.live > 0) {
    for (int j = 0; j < nw; j++) {
      int w = rev ? nw - 1 - j : j, lo = w * 32, hi = lo + 32 < n ? lo + 32 : n;
      do {
        for (int i = lo; i < hi; i++) {
          int t = rev ? hi - 1 - (i - lo) : i;
          if (B.wait[t] != EMU_RUN) continue;
          threadIdx = uint3{(unsigned)t, 0, 0};
          swapcontext(&B.sched, &B.ctx[t]);
        }
      } while (emu_release_warp(w));
    }
    if (B.live > 0 && !emu_release_block()) {
      fprintf(stderr, "emu: block (%u, %u, %u) stuck: its live threads wait at different barriers\n",
              blockIdx.x, blockIdx.y, blockIdx.z);
      abort();
    }
  }
}

void emu_cp_async(void *dst, const void *src, int bytes) {
  emu_copy c;
  if (bytes < 1 || bytes > (int)sizeof c.src) abort();
  c.dst = dst, c.bytes = bytes;
  memcpy(c.src, src, (size_t)bytes);
  B.async[threadIdx.x].open.push_back(c);
}
void emu_cp_commit(void) {
  emu_async &a = B.async[threadIdx.x];
  a.groups.push_back(std::move(a.open));
  a.open.clear();
}
void emu_cp_wait(int n) {
  emu_async &a = B.async[threadIdx.x];
  while ((int)a.groups.size() > n) {
    for (const emu_copy &c : a.groups.front()) memcpy(c.dst, c.src, (size_t)c.bytes);
    a.groups.pop_front();
  }
}

void emu_pdl_wait(void) {
  if (!B.pdl_waited && emu_on_pdl_wait) emu_on_pdl_wait();
  B.pdl_waited = 1;
  emu_pdl_waits++;
}

static std::vector<float4> dyn_shared;
void emu_set_dyn_shared(size_t bytes) { dyn_shared.assign((bytes + 15) / 16, float4{}); }
void *emu_dyn_shared(void) { return dyn_shared.data(); }

uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
  uint64_t v = (uint64_t)y << 32 | x;
  uint32_t r = 0;
  for (int n = 0; n < 4; n++) {
    uint32_t sel = (s >> (4 * n)) & 15u;
    if (sel & 8u) __builtin_trap(); /* sign replication: no kernel asks for it */
    r |= (uint32_t)((v >> (8 * sel)) & 0xffu) << (8 * n);
  }
  return r;
}
