// main() of every GoogleTest binary (cmake/TesseraHelpers.cmake,
// tessera_add_test): as gtest_main, except that a binary whose every test
// skipped itself (GTEST_SKIP: no CUDA device, no ../shared data) exits 77,
// which CTest shows as "Skipped" (SKIP_RETURN_CODE) instead of "Passed". A
// binary where any test ran, or failed, exits as gtest_main would.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const ::testing::UnitTest& run = *::testing::UnitTest::GetInstance();
  if (rc == 0 && run.test_to_run_count() > 0 && run.failed_test_count() == 0 &&
      run.skipped_test_count() == run.test_to_run_count()) {
    return 77;
  }
  return rc;
}
