#include "kernels/blas_core.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

// OpenBLAS's own; declared here as Debian's cblas.h may come from another
// BLAS.
extern "C" char* openblas_get_corename(void);

namespace tessera::kernels {
namespace {

// Set by the first run for the second, so that it says why it was started
// again (and never loops).
constexpr const char* kFellBackFrom = "TESSERA_OPENBLAS_FELL_BACK_FROM";

}  // namespace

CpuVectorFeatures DetectCpuVectorFeatures() {
  __builtin_cpu_init();
  CpuVectorFeatures f;
  // libgcc also checks that the OS saves the wider registers (XGETBV).
  f.avx = __builtin_cpu_supports("avx");
  f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512_skx = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                 __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                 __builtin_cpu_supports("avx512vl");
  return f;
}

std::string BetterBlasCore(const std::string& chosen, const CpuVectorFeatures& cpu) {
  if (chosen != "Prescott") return "";
  if (cpu.avx512_skx) return "SkylakeX";
  if (cpu.avx2_fma) return "Haswell";
  if (cpu.avx) return "Sandybridge";
  return "";
}

std::string BlasCoreName() {
  const char* name = openblas_get_corename();
  return name == nullptr ? std::string() : std::string(name);
}

std::string BetterBlasCoreHere() { return BetterBlasCore(BlasCoreName(), DetectCpuVectorFeatures()); }

std::string RunOnBetterBlasCore(char** argv) {
  const std::string chosen = BlasCoreName();
  if (const char* from = std::getenv(kFellBackFrom)) {
    const std::string note = std::string("OpenBLAS chose its ") + from +
                             " kernels, its fallback for a CPU it does not know; running on its " + chosen +
                             " kernels instead (OPENBLAS_CORETYPE; set it yourself to choose)";
    // Not handed on to whatever this process starts.
    unsetenv(kFellBackFrom);
    return note;
  }
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return "";
  const std::string better = BetterBlasCoreHere();
  if (better.empty()) return "";
  if (setenv("OPENBLAS_CORETYPE", better.c_str(), 1) != 0 || setenv(kFellBackFrom, chosen.c_str(), 1) != 0) {
    return std::string("OpenBLAS runs its generic ") + chosen +
           " kernels on this CPU; could not set OPENBLAS_CORETYPE=" + better + ": " + std::strerror(errno);
  }
  // By its own path, not /proc/self/exe: the process's name (what ps and
  // pgrep see) is taken from the path it was started by.
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  int err = errno;
  if (n > 0) {
    self[n] = '\0';
    execv(self, argv);
    err = errno;
  }
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kFellBackFrom);
  return std::string("OpenBLAS runs its generic ") + chosen + " kernels on this CPU (" + better +
         "'s would be faster); could not start again with OPENBLAS_CORETYPE=" + better + ": " + std::strerror(err);
}

}  // namespace tessera::kernels
