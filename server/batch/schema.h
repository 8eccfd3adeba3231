// The schema of the data directory's database, DIR/batch.db: the Files
// API's files and the Batch API's batches and their lines, one database so
// that a batch's result files and its state change commit together.
//
// A list of migrations, oldest first (storage::Database applies those a
// database lacks): never edit one that has shipped, add another.
#pragma once

#include <span>

namespace ropeserve::batch {

std::span<const char* const> BatchSchema();

}  // namespace ropeserve::batch
