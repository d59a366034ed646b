#include "kernels/blas_core.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace tessera::kernels {
namespace {

TEST(BlasCoreTest, OnlyTheFallbackIsReplacedAndByWhatTheCpuRuns) {
  CpuVectorFeatures skx{true, true, true}, haswell{true, true, false}, sandy{true, false, false}, old{};
  EXPECT_EQ(BetterBlasCore("Prescott", skx), "SkylakeX");
  EXPECT_EQ(BetterBlasCore("Prescott", haswell), "Haswell");
  EXPECT_EQ(BetterBlasCore("Prescott", sandy), "Sandybridge");
  EXPECT_EQ(BetterBlasCore("Prescott", old), "");
  // Chosen knowingly: kept, even where the CPU could run more.
  EXPECT_EQ(BetterBlasCore("Zen", skx), "");
  EXPECT_EQ(BetterBlasCore("Haswell", skx), "");
  EXPECT_EQ(BetterBlasCore("", skx), "");
}

struct Probe {
  std::string core, note, name;
};

// Runs blas_core_probe with OPENBLAS_CORETYPE set to `coretype` ("": unset).
Probe RunProbe(const std::string& coretype) {
  std::string cmd = "env -u TESSERA_OPENBLAS_FELL_BACK_FROM ";
  cmd += coretype.empty() ? "-u OPENBLAS_CORETYPE " : "OPENBLAS_CORETYPE=" + coretype + " ";
  cmd += TESSERA_BLAS_CORE_PROBE;
  Probe p;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return p;
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), f) != nullptr) out += buf;
  EXPECT_EQ(pclose(f), 0) << out;
  std::string* fields[] = {&p.core, &p.note, &p.name};
  size_t at = 0;
  for (std::string* field : fields) {
    const size_t nl = out.find('\n', at);
    *field = out.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  return p;
}

TEST(BlasCoreTest, AProgramEndsOnKernelsThatSuitTheCpu) {
  const Probe p = RunProbe("");
  ASSERT_FALSE(p.core.empty());
  EXPECT_EQ(BetterBlasCore(p.core, DetectCpuVectorFeatures()), "") << "still on OpenBLAS's " << p.core;
  std::cout << "OpenBLAS core: " << p.core << (p.note.empty() ? "" : " (" + p.note + ")") << "\n";
  // Started again under its own name (ps and pgrep find it as before).
  EXPECT_EQ(p.name.rfind("kernels_blas", 0), 0u) << p.name;
  // Started again only from the fallback, and then it says so.
  if (!p.note.empty()) {
    EXPECT_NE(p.note.find("Prescott"), std::string::npos) << p.note;
    EXPECT_NE(p.note.find(p.core), std::string::npos) << p.note;
  }
}

TEST(BlasCoreTest, AUsersChoiceIsKept) {
  // Prescott runs everywhere; asked for, it is what runs, without a word.
  const Probe p = RunProbe("Prescott");
  EXPECT_EQ(p.core, "Prescott");
  EXPECT_EQ(p.note, "");
}

}  // namespace
}  // namespace tessera::kernels
