// CRC-32C (Castagnoli), the checksum of the training-state MANIFEST: the one
// LevelDB, ext4 metadata and iSCSI use (RFC 3720). Torch-free.
#pragma once

#include <cstdint>
#include <string_view>

namespace headroom::executor {

uint32_t crc32c(std::string_view data);

}  // namespace headroom::executor
