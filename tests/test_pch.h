// The precompiled header of the test programs (tests/CMakeLists.txt, HALFGRAD_TEST_PCH): what
// almost every *_test.cpp includes, parsed once per build instead of once per test program.
// CMake puts it in front of each test file (-include), so a test still includes what it uses
// itself and builds the same with HALFGRAD_TEST_PCH=OFF. Only headers whose content does not
// depend on a macro a test defines first belong here (not catch_main.cpp's CATCH_CONFIG_MAIN).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "halfgrad/halfgrad.h"
