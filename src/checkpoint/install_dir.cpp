#include "checkpoint/install_dir.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc >= 2.28)

#include <cerrno>

#include "util/error.h"
#include "util/fs.h"

namespace keel {

std::string install_directory(const std::string& src, const std::string& dst, const std::string& aside,
                              InstallMode mode) {
  if (!path_exists(dst)) {
    rename_path(src, dst);
    return "";
  }
  if (mode == InstallMode::exchange_if_supported) {
    if (::renameat2(AT_FDCWD, src.c_str(), AT_FDCWD, dst.c_str(), RENAME_EXCHANGE) == 0) return src;
    // EINVAL / ENOSYS / ENOTSUP: this file system cannot exchange; anything
    // else is a real error.
    const int err = errno;
    if (err != EINVAL && err != ENOSYS && err != ENOTSUP)
      throw checkpoint_error(src, "cannot exchange with " + dst + ": " + errno_text(err));
  }
  rename_path(dst, aside);
  try {
    rename_path(src, dst);
  } catch (...) {
    try {
      rename_path(aside, dst);  // put the old checkpoint back
    } catch (...) {
    }
    throw;
  }
  return aside;
}

}  // namespace keel
