// Which of OpenBLAS's kernels the dense layers run on.
//
// OpenBLAS picks its kernels for the CPU once, as the library loads. A CPU
// newer than the OpenBLAS build gets its generic "Prescott" (SSE3) kernels:
// Debian 12's OpenBLAS 0.3.21 does so on Intel's Emerald Rapids (family 6,
// model 207), where sgemm then runs at a quarter of the speed its AVX-512
// kernels reach (bench/README.md). The only way to choose other kernels is
// OPENBLAS_CORETYPE in the environment before the library loads, so a
// process that finds the fallback runs itself again with it set.
#pragma once

#include <string>

namespace tessera::kernels {

// What the CPU can run, as far as OpenBLAS's kernels care.
struct CpuVectorFeatures {
  bool avx = false;
  bool avx2_fma = false;     // AVX2 and FMA
  bool avx512_skx = false;   // AVX-512 F, CD, BW, DQ and VL (Skylake-X's set)
};

CpuVectorFeatures DetectCpuVectorFeatures();

// The OpenBLAS core to ask for instead of `chosen`, or "" to keep it. Only
// OpenBLAS's fallback for a CPU it does not know ("Prescott") is replaced,
// by the best core `cpu` runs; a core OpenBLAS chose knowingly is kept.
std::string BetterBlasCore(const std::string& chosen, const CpuVectorFeatures& cpu);
// BetterBlasCore for this process's OpenBLAS on this CPU.
std::string BetterBlasCoreHere();

// The core OpenBLAS runs in this process ("Prescott", "SkylakeX", ...).
std::string BlasCoreName();

// Call first in main(), before any thread starts. Where OpenBLAS fell back
// and OPENBLAS_CORETYPE is not set, runs this program again (the same pid
// and arguments, the binary /proc/self/exe names) with OPENBLAS_CORETYPE
// set to the better core; it does not return then. Otherwise returns a line for the log once
// logging is up: what was chosen and why, or "" where there is nothing to
// say (or why it could not run itself again).
std::string RunOnBetterBlasCore(char** argv);

}  // namespace tessera::kernels
