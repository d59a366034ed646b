// Replacing a file whole: the new bytes go to PATH.tmp, which is renamed
// over PATH, so a reader sees the old file or the new one, never a part.
#pragma once

#include <string>

#include "common/status.h"

namespace tessera {

// Writes `bytes` to `path` by way of `path`.tmp. A path that exists and is
// not a regular file (a device, a link, a folder) is refused: the rename
// would replace it (as root, --endpoint_file /dev/stdout would have left a
// regular file there for every later process). Failures are ErrnoStatus's.
Status ReplaceFile(const std::string& path, const std::string& bytes);

}  // namespace tessera
