/* The spellings --emulate-drives and --max-rate accept (store/io.c):
 * decimal and binary units, the SI "kB/s", and what is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "store/io.h"

static void test_rates(void **st) {
  (void)st;
  static const struct {
    const char *s;
    double want;
  } ok[] = {{"800MB/s", 800e6}, {"1GB/s", 1e9},      {"1.5GiB/s", 1.5 * 1073741824.0},
            {"300KB/s", 300e3}, {"300kB/s", 300e3},  {"64KiB/s", 65536.0},
            {"10B/s", 10},      {"2G", 2e9},         {"5M", 5e6},
            {"7K", 7e3},        {"7k", 7e3},         {"123", 123}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    double v = -1;
    assert_int_equal(df_io_parse_rate(ok[i].s, &v), 0);
    assert_true(v == ok[i].want);
  }
  static const char *bad[] = {"", "MB/s", "0MB/s", "-1MB/s", "1 MB/s", "1mb/s", "1Mb/s", "1TB/s", "inf", "nanMB/s"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    double v = 0;
    assert_int_equal(df_io_parse_rate(bad[i], &v), -1);
  }
}

static void test_emulation(void **st) {
  (void)st;
  df_io_emu emu;
  df_err e;
  assert_int_equal(df_io_parse_emu("1GB/s,0.2ms", &emu, &e), 0);
  assert_true(emu.bw == 1e9 && emu.latency > 1.99e-4 && emu.latency < 2.01e-4);
  assert_int_equal(df_io_parse_emu("400kB/s", &emu, &e), 0);
  assert_true(emu.bw == 4e5 && emu.latency == 0);
  assert_int_equal(df_io_parse_emu("1GB/s,2", &emu, &e), -1);
  assert_int_equal(df_io_parse_emu("fast", &emu, &e), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rates),
      cmocka_unit_test(test_emulation),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
