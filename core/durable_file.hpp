// Durable files: what checkpoints (server/checkpoint.hpp, worker/run/worker_checkpoint.hpp) need
// to leave either the old state or the new one on disk after a crash, never a mix.
//
// write_file_synced() writes and fsyncs one file; commit_folder() renames a fully written
// temporary folder into place and fsyncs the parent, so that a reader sees the whole folder or
// none of it. read_binary_file() reads a whole file. Blocking file I/O; no shared state.
// Errors: a file that cannot be read is an InputError naming it; a failing write, fsync or
// rename is a SystemError naming the path and errno's text.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace geotrain {

// Writes `bytes` to `path` (created or truncated) and fsyncs it.
void write_file_synced(const std::filesystem::path& path, std::string_view bytes);
// The same for a file made of `parts`, one after the other, without gathering them in memory
// first (a snapshot's sections are gigabytes); returns checksum_xxh3 of the whole file.
uint64_t write_parts_synced(const std::filesystem::path& path,
                            std::span<const std::string_view> parts);
// fsync of a folder, so that the names created or renamed in it are durable.
void fsync_dir(const std::filesystem::path& dir);
// Replaces `final_dir` (if any) by `tmp_dir`, which must hold everything already synced, and
// fsyncs the parent folder.
void commit_folder(const std::filesystem::path& tmp_dir, const std::filesystem::path& final_dir);
// The whole file; InputError "file '<path>' cannot be read" when it cannot.
std::string read_binary_file(const std::filesystem::path& path);
// The xxh3-64 checksum checkpoints record per file.
uint64_t checksum_xxh3(std::string_view bytes);

}  // namespace geotrain
