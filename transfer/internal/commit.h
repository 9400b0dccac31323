#pragma once

// Putting a verified partial file in place so that it survives a crash or power loss:
// create the missing parent directories, rename the file into place (optionally refusing to
// replace an existing file), then fsync the final directory and the parent of every
// directory created, so each new directory entry is on disk. Every return value is checked;
// any failure fails the commit.
//
// Thread safety: blocking file-system calls; run on a blocking-work thread.

#include <filesystem>
#include <vector>

#include "absl/status/statusor.h"

namespace gfrep::transfer::internal {

// Creates the missing directories of `dir` (like mkdir -p) and returns those it created,
// outermost first. kFailedPrecondition if a component exists and is not a directory.
absl::StatusOr<std::vector<std::filesystem::path>> CreateParents(const std::filesystem::path& dir);

// fsyncs each directory. The first failure (open or fsync) is returned.
absl::Status SyncDirectories(const std::vector<std::filesystem::path>& dirs);

// Renames `part` to `final_path` (see the file comment). With `create_only`, an existing
// final file is never replaced: kAlreadyExists, and `part` is removed.
absl::Status CommitFile(const std::filesystem::path& part, const std::filesystem::path& final_path,
                        bool create_only);

}  // namespace gfrep::transfer::internal
