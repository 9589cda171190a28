// ParamTable's layout queries.
#include <doctest/doctest.h>

#include "core/error.hpp"
#include "core/param_table.hpp"

using namespace geotrain;

TEST_CASE("a range's pieces: one per tensor, a matrix where they are whole rows of one") {
  // m: 4 x 8 (cols 8), v: 10, n: 3 x 5 (cols 5).
  const ParamTable table({{"m", 32, 8}, {"v", 10, 0}, {"n", 15, 5}}, {"v"});
  const auto all = table.pieces(0, 57);
  REQUIRE(all.size() == 3);
  CHECK(all[0].offset == 0);
  CHECK(all[0].rows() == 4);
  CHECK(all[0].cols == 8);
  CHECK(all[1].offset == 32);
  CHECK(all[1].cols == 0);
  CHECK(all[1].critical);
  CHECK(all[2].rows() == 3);
  // From row 1 of m to the middle of n's row 1: m's rows 1-3, v, then n's row 0 (a 1 x 5
  // matrix) and 2 elements of its row 1 (not a matrix).
  const auto part = table.pieces(8, 49);
  REQUIRE(part.size() == 4);
  CHECK(part[0].offset == 0);
  CHECK(part[0].rows() == 3);
  CHECK(part[2].offset == 34);
  CHECK(part[2].count == 5);
  CHECK(part[2].rows() == 1);
  CHECK(part[3].offset == 39);
  CHECK(part[3].count == 2);
  CHECK(part[3].cols == 0);
  // Inside m, from the middle of row 0 to the middle of row 3: 5 elements, rows 1-2, 3 elements.
  const auto cut = table.pieces(3, 27);
  REQUIRE(cut.size() == 3);
  CHECK(cut[0].count == 5);
  CHECK(cut[0].cols == 0);
  CHECK(cut[1].offset == 5);
  CHECK(cut[1].rows() == 2);
  CHECK(cut[2].count == 3);
  CHECK(cut[2].cols == 0);
  // Inside one row: no whole row, one piece.
  const auto inside = table.pieces(1, 6);
  REQUIRE(inside.size() == 1);
  CHECK(inside[0].cols == 0);
  CHECK(table.pieces(5, 5).empty());
  CHECK_THROWS_WITH_AS(table.pieces(0, 58), doctest::Contains("lies outside the 57 parameters"),
                       InputError);
  CHECK_THROWS_WITH_AS(ParamTable({{"m", 32, 7}}, {}),
                       doctest::Contains("'m' of 32 elements is not a matrix of 7 columns"),
                       InputError);
}
