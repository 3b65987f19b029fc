/* kcuda_host.cu's policy: a program that links the CUDA host helpers asks
 * the runtime, before main, to load every kernel when the context is made
 * (CUDA_MODULE_LOADING=EAGER), and keeps a value the user set. ctest runs it
 * twice: without the variable (EAGER expected) and with LAZY set (LAZY
 * expected). No GPU needed: nothing here calls the runtime. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/kcuda_host.h"

int main(int argc, char **argv) {
  /* a reference, so the helpers' object (and its constructor) is linked
   * from the static library as deltafin links it */
  int (*volatile helper)(int, size_t *, size_t *) = df_cuda_mem_info;
  const char *want = argc > 1 ? argv[1] : "EAGER", *got = getenv("CUDA_MODULE_LOADING");
  if (!helper || !got || strcmp(got, want)) {
    fprintf(stderr, "FAIL: CUDA_MODULE_LOADING is %s at main, not %s\n", got ? got : "unset", want);
    return 1;
  }
  printf("ok   CUDA_MODULE_LOADING=%s at main\n", got);
  return 0;
}
