// --help for the roles' mains: their own flags, not every library's.
// RocksDB's tools, glog and gflags define about 150 flags of their own, and
// gflags' --help lists them all (390 lines for tessera_ps, its own flags
// last). --helpfull still does.
#pragma once

namespace tessera {

// Call after gflags::SetUsageMessage and before ParseCommandLineFlags. With
// --help, -help or -h among the arguments: prints the usage message and the
// flags defined in this project's sources (by file), then exits 0.
void ShowOwnFlagsIfAsked(int argc, char** argv);

}  // namespace tessera
