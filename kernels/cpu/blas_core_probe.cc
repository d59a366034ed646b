// For blas_core_cpu_test: runs RunOnBetterBlasCore as a program's main()
// does, then prints the OpenBLAS core it ended on, the note and its process
// name (/proc/self/comm), a line each.
#include <cstdio>
#include <string>

#include "kernels/blas_core.h"

int main(int, char** argv) {
  const std::string note = tessera::kernels::RunOnBetterBlasCore(argv);
  char comm[64] = "";
  if (FILE* f = std::fopen("/proc/self/comm", "r")) {
    if (std::fgets(comm, sizeof(comm), f) == nullptr) comm[0] = '\0';
    std::fclose(f);
  }
  std::printf("%s\n%s\n%s", tessera::kernels::BlasCoreName().c_str(), note.c_str(), comm);
  return 0;
}
