// The process-wide numeric settings (core/settings.h).
#include <catch2/catch.hpp>

#include <string>
#include <thread>

#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;

TEST_CASE("float32 matmul precision takes torch's three values", "[settings]") {
  REQUIRE(get_float32_matmul_precision() == "highest");  // the default
  CHECK(float32_matmul_precision() == Float32MatmulPrecision::Highest);
  CHECK_FALSE(float32_matmul_allows_tf32());
  for (const char* precision : {"high", "medium", "highest"}) {
    set_float32_matmul_precision(precision);
    CHECK(get_float32_matmul_precision() == precision);
    CHECK(float32_matmul_allows_tf32() == (std::string(precision) != "highest"));
  }
  // One setting for the process: another thread sees it.
  set_float32_matmul_precision("high");
  std::string seen;
  std::thread([&] { seen = get_float32_matmul_precision(); }).join();
  CHECK(seen == "high");
  set_float32_matmul_precision("highest");
  CHECK_THROWS_WITH(set_float32_matmul_precision("fast"),
                    Contains("expected \"highest\", \"high\" or \"medium\", got \"fast\""));
  CHECK(get_float32_matmul_precision() == "highest");  // a refused value changes nothing
}
