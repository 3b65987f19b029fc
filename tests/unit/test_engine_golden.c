/* The engine against the independent float64 PyTorch reference
 * (tools/reference/k3_ref.py): run live on a fresh tiny model and prompt,
 * and against the committed goldens in tests/fixtures/golden/ when present.
 *
 * What is compared, with which tolerance (the engine computes in fp32 with
 * bf16/MXFP4 weights read exactly; the reference in float64 on the same
 * weights, so the only differences are fp32 rounding):
 *   - final logits of the last prompt position: max |engine - ref| <=
 *     LOGIT_TOL x max |ref| (relative to the logit scale);
 *   - every layer's output hidden states h for every prompt position: max
 *     |engine - ref| <= (l + 1) x HIDDEN_TOL_PER_LAYER x max |ref h| of layer
 *     l (rounding differences grow with depth in a random-weight network);
 *   - greedy ids: identical, for every step whose reference top-1/top-2
 *     margin is above MARGIN_MIN (below it fp32 rounding may legitimately
 *     flip the choice; the test reports where it stopped comparing).
 * Measured on the tiny preset over 18 seeds/prompts: logits 0.7e-6 .. 5.8e-6
 * of the largest |logit|; hidden 0.4e-6 at layer 0 growing to at most
 * 2.4e-5 at layer 7 (of 8). The tolerances leave >= 3x headroom at the
 * worst layer and ~9x on the logits.
 *
 * --precision f64 is compared too, with the tolerances of float64: its
 * only difference from the reference is the fp32 the API hands out (a
 * rounding of at most 2^-24 of each value), so logits and every layer's h
 * must agree to F64_TOL of their scale at every depth, and greedy ids for
 * every step down to a margin of F64_MARGIN_MIN. An fp32 step left inside the
 * float64 path (an fp32 constant, a narrowed buffer) is ~1e-6 and fails. */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "base/util.h"
#include "engine/engine.h"

#define LOGIT_TOL 5e-5
#define HIDDEN_TOL_PER_LAYER 1e-5
#define MARGIN_MIN 1e-3
#define F64_TOL 2e-7
#define F64_MARGIN_MIN 1e-6

static char tmpdir[256];

static char *make_model(const char *name, unsigned long long seed, const char *preset) {
  if (!tmpdir[0]) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/df_test_golden_XXXXXX");
    if (!mkdtemp(tmpdir)) fail_msg("mkdtemp failed");
  }
  const char *bin = getenv("DF_BIN");
  if (!bin) fail_msg("DF_BIN is not set (run through ctest)");
  char *dir = df_path_join(tmpdir, name);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "'%s' make-model --preset %s --seed %llu --out '%s' >/dev/null", bin,
           preset, seed, dir);
  if (system(cmd) != 0) fail_msg("failed: %s", cmd);
  return dir;
}

static df_engine *open_engine(const char *dir, int threads, int f64) {
  df_engine_opts o;
  df_engine_opts_default(&o);
  o.model_dir = dir;
  o.threads = threads;
  o.kernels_scalar = 1;
  o.f64 = f64;
  df_engine *en;
  df_err e;
  if (df_engine_open(&en, &o, &e)) fail_msg("engine open: %s", e.msg);
  return en;
}

typedef struct {
  float *h; /* layers x T x H */
  int T, H, nl;
} hid;

static void hook(void *ud, int layer, const float *h, int T, int H) {
  hid *x = ud;
  memcpy(x->h + ((size_t)layer * x->T) * x->H, h, sizeof(float) * (size_t)T * H);
}

static double jnum(const json_t *v) { return json_number_value(v); }

/* Compares one reference result (k3_ref.py's JSON) with the engine. */
static void compare1(const char *label0, const char *model, const json_t *ref, int f64) {
  char label[300];
  snprintf(label, sizeof label, "%s%s", label0, f64 ? " f64" : "");
  double logit_tol = f64 ? F64_TOL : LOGIT_TOL, margin_min = f64 ? F64_MARGIN_MIN : MARGIN_MIN;
  df_engine *en = open_engine(model, 2, f64);
  const df_config *c = df_engine_config(en);
  const json_t *jp = json_object_get(ref, "prompt_ids");
  assert_true(json_is_array(jp));
  int T = (int)json_array_size(jp), V = c->vocab, H = c->hidden;
  int *ids = malloc(sizeof(int) * T);
  for (int i = 0; i < T; i++) ids[i] = (int)json_integer_value(json_array_get(jp, i));

  /* logits and hidden states, whole prompt in one batch */
  df_session *s = df_session_new(en);
  hid hx = {.h = malloc(sizeof(float) * (size_t)c->n_layers * T * H), .T = T, .H = H,
            .nl = c->n_layers};
  df_session_set_layer_hook(s, hook, &hx);
  float *lg = malloc(sizeof(float) * V);
  df_err e;
  if (df_session_forward(s, ids, T, lg, NULL, &e)) fail_msg("%s: forward: %s", label, e.msg);
  const json_t *jl = json_object_get(ref, "logits");
  assert_int_equal(json_array_size(jl), V);
  double scale = 0, maxabs = 0, maxrel = 0;
  for (int i = 0; i < V; i++) scale = fmax(scale, fabs(jnum(json_array_get(jl, i))));
  for (int i = 0; i < V; i++) {
    double r = jnum(json_array_get(jl, i)), d = fabs(lg[i] - r);
    maxabs = fmax(maxabs, d);
    maxrel = fmax(maxrel, d / fmax(fabs(r), 1e-2 * scale));
  }
  printf("[ %s ] logits: max abs err %.3g (max |logit| %.3g, %.3g of it), max rel err %.3g "
         "(elements below 1%% of the scale measured against 1%% of it)\n",
         label, maxabs, scale, maxabs / scale, maxrel);
  if (maxabs > logit_tol * scale)
    fail_msg("%s: logits max abs err %.3g > %.3g x %.3g", label, maxabs, logit_tol, scale);

  const json_t *jh = json_object_get(ref, "hidden");
  if (jh) {
    assert_int_equal(json_array_size(jh), c->n_layers);
    double worst = 0;
    int worst_l = -1;
    for (int l = 0; l < c->n_layers; l++) {
      const json_t *rows = json_object_get(json_array_get(jh, l), "h");
      assert_int_equal(json_array_size(rows), T);
      double m = 0, d = 0;
      for (int t = 0; t < T; t++) {
        const json_t *row = json_array_get(rows, t);
        for (int i = 0; i < H; i++) {
          double r = jnum(json_array_get(row, i));
          m = fmax(m, fabs(r));
          d = fmax(d, fabs(hx.h[((size_t)l * T + t) * H + i] - r));
        }
      }
      if (d / m > worst) worst = d / m, worst_l = l;
      double tol = f64 ? F64_TOL : (l + 1) * HIDDEN_TOL_PER_LAYER;
      if (d > tol * m)
        fail_msg("%s: layer %d hidden max abs err %.3g > %.3g x max |h| %.3g", label, l, d, tol, m);
    }
    printf("[ %s ] hidden states: worst layer %d, max abs err %.3g of that layer's max |h|\n",
           label, worst_l, worst);
  }

  /* greedy continuation from a fresh session */
  const json_t *jg = json_object_get(ref, "greedy_ids"), *jm = json_object_get(ref, "margins");
  int ng = (int)json_array_size(jg);
  if (ng > 0) {
    df_session_reset(s);
    df_session_set_layer_hook(s, NULL, NULL);
    df_gen_opts go;
    df_gen_opts_default(&go);
    go.max_new = ng;
    go.prefill_chunk = 3;
    int *out, nout;
    if (df_generate(s, ids, T, &go, &out, &nout, NULL, &e)) fail_msg("%s: generate: %s", label, e.msg);
    assert_int_equal(nout, ng);
    int checked = 0;
    for (int i = 0; i < ng; i++) {
      assert_int_equal(out[i], (int)json_integer_value(json_array_get(jg, i)));
      checked++;
      if (jm && jnum(json_array_get(jm, i)) < margin_min) {
        printf("[ %s ] step %d: reference margin %.3g < %.0e, later steps not compared\n", label,
               i, jnum(json_array_get(jm, i)), margin_min);
        break;
      }
    }
    printf("[ %s ] greedy ids identical for %d of %d steps\n", label, checked, ng);
    free(out);
  }
  free(hx.h);
  free(lg);
  free(ids);
  df_session_free(s);
  df_engine_close(en);
}

/* fp32 with its tolerances, then float64 with its own. */
static void compare(const char *label, const char *model, const json_t *ref) {
  compare1(label, model, ref, 0);
  compare1(label, model, ref, 1);
}

/* A fresh model and prompt through the reference, live. */
static void test_live_reference(void **st) {
  (void)st;
  const char *src = getenv("DF_SRC");
  if (!src) fail_msg("DF_SRC is not set (run through ctest)");
  char *model = make_model("live", 424242, "tiny");
  /* a prompt no golden uses: ids from a fixed LCG over the vocabulary */
  df_engine *en = open_engine(model, 1, 0);
  int V = df_engine_config(en)->vocab;
  df_engine_close(en);
  char ids[256] = "";
  unsigned x = 2024;
  for (int i = 0; i < 11; i++) {
    x = x * 1103515245u + 12345u;
    snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%u", i ? "," : "", (x >> 8) % (unsigned)V);
  }
  char *out = df_path_join(tmpdir, "live.json");
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 '%s/tools/reference/k3_ref.py' --model '%s' --prompt-ids %s "
           "--new 8 --hidden --out '%s'",
           src, model, ids, out);
  if (system(cmd) != 0) fail_msg("reference failed: %s", cmd);
  json_error_t je;
  json_t *ref = json_load_file(out, 0, &je);
  if (!ref) fail_msg("%s: %s", out, je.text);
  compare("live", model, ref);
  json_decref(ref);
  free(out);
  free(model);
}

/* sha256 of a file, hex. */
static void sha256_file(const char *path, char hex[65]) {
  char *buf;
  size_t len;
  df_err e;
  if (df_file_read(path, &buf, &len, &e)) fail_msg("%s", e.msg);
  unsigned char md[32];
  unsigned int mdlen = 0;
  EVP_Digest(buf, len, md, &mdlen, EVP_sha256(), NULL);
  free(buf);
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

/* Committed goldens: the .json files of tests/fixtures/golden, written by the
 * reference; "model" names the preset and seed and the sha256 of every file
 * of the generated model, so a generator change shows up as a stale golden
 * instead of a numerical mismatch. */
static void test_goldens(void **st) {
  (void)st;
  const char *src = getenv("DF_SRC");
  if (!src) fail_msg("DF_SRC is not set (run through ctest)");
  char *gdir = df_path_join(src, "tests/fixtures/golden");
  DIR *d = opendir(gdir);
  int n = 0;
  if (!d) fail_msg("%s: cannot open the golden folder (%s)", gdir, strerror(errno));
  if (d) {
    struct dirent *de;
    while ((de = readdir(d))) {
      size_t l = strlen(de->d_name);
      if (l < 6 || strcmp(de->d_name + l - 5, ".json")) continue;
      char *p = df_path_join(gdir, de->d_name);
      json_error_t je;
      json_t *g = json_load_file(p, 0, &je);
      if (!g) fail_msg("%s: %s", p, je.text);
      const json_t *jm = json_object_get(g, "model");
      const json_t *jpre = json_object_get(jm, "preset"), *jseed = json_object_get(jm, "seed");
      if (!json_is_string(jpre) || !json_is_integer(jseed))
        fail_msg("%s: no model.preset / model.seed", p);
      char name[300];
      snprintf(name, sizeof name, "g-%s-%lld", json_string_value(jpre),
               (long long)json_integer_value(jseed));
      char *model = df_path_join(tmpdir[0] ? tmpdir : "/nonexistent", name);
      if (!tmpdir[0] || !df_file_exists(model)) {
        free(model);
        model = make_model(name, (unsigned long long)json_integer_value(jseed),
                           json_string_value(jpre));
      }
      const char *fn;
      const json_t *hv;
      json_object_foreach((json_t *)json_object_get(jm, "sha256"), fn, hv) {
        char *fp = df_path_join(model, fn), hex[65];
        sha256_file(fp, hex);
        if (strcmp(hex, json_string_value(hv)))
          fail_msg("%s: %s of the generated model differs from the golden's (generator changed? "
                   "regenerate the goldens)", de->d_name, fn);
        free(fp);
      }
      compare(de->d_name, model, g);
      free(model);
      n++;
      json_decref(g);
      free(p);
    }
    closedir(d);
  }
  /* no golden compared is a failure, never a silent pass */
  if (n == 0) fail_msg("%s: no golden files (*.json) found; regenerate them (see its README.md)", gdir);
  printf("[ golden ] %d golden files compared from %s\n", n, gdir);
  free(gdir);
}

static int teardown(void **st) {
  (void)st;
  if (tmpdir[0]) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) return -1;
  }
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_live_reference),
      cmocka_unit_test(test_goldens),
  };
  return cmocka_run_group_tests(tests, NULL, teardown);
}
