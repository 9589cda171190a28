// core/durable_file: a file written in parts is the parts one after the other, with the checksum
// of the whole, and a write that cannot happen is an error naming the path.
#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <vector>

#include "core/durable_file.hpp"
#include "core/error.hpp"
#include "tests/temp_dir.hpp"

using namespace geotrain;

TEST_CASE("a file written in parts holds the parts in order, and its checksum is the whole's") {
  test::TempDir tmp("durable-parts");
  const std::string big(1 << 20, 'x');
  const std::vector<std::string_view> parts{"head", "", big, "tail"};
  const auto file = tmp.path() / "parts.bin";
  const uint64_t checksum = write_parts_synced(file, parts);
  const std::string whole = "head" + big + "tail";
  CHECK(read_binary_file(file) == whole);
  CHECK(checksum == checksum_xxh3(whole));
  CHECK(write_parts_synced(tmp.path() / "empty.bin", {}) == checksum_xxh3(""));
  CHECK(read_binary_file(tmp.path() / "empty.bin").empty());
  CHECK_THROWS_WITH_AS(write_parts_synced(tmp.path() / "no-such-folder" / "f.bin", parts),
                       doctest::Contains("no-such-folder"), SystemError);
}
