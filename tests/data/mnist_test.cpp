// data::MNIST against small IDX folders in the layout of the MNIST distribution
// (tests/data/fixtures/make_mnist_fixtures.py): values, plain and gzipped files, the
// DataLoader, and the errors for files that do not fit.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "halfgrad/data/dataloader.h"
#include "halfgrad/data/mnist.h"
#include "halfgrad/halfgrad.h"
#include "test_util.h"

using namespace hg;
using namespace hg::testing;

namespace {

const std::string kFixtures = std::string(HG_TESTS_SOURCE_DIR) + "/data/fixtures/";

uint8_t pixel(int64_t n, int64_t r, int64_t c) { return uint8_t((31 * n + 7 * r + 3 * c) % 256); }
int64_t label(int64_t n) { return (3 * n + 1) % 10; }

void check_examples(const data::MNIST& mnist, int64_t count) {
  REQUIRE(mnist.size() == count);
  REQUIRE(mnist.images().sizes() == Shape{count, 1, 28, 28});
  REQUIRE(mnist.images().dtype() == kFloat32);
  REQUIRE(mnist.targets().sizes() == Shape{count});
  REQUIRE(mnist.targets().dtype() == kInt64);
  const float* images = mnist.images().data_ptr<float>();
  const int64_t* targets = mnist.targets().data_ptr<int64_t>();
  int64_t mismatches = 0;
  for (int64_t n = 0; n < count; ++n) {
    CHECK(targets[n] == label(n));
    for (int64_t r = 0; r < 28; ++r) {
      for (int64_t c = 0; c < 28; ++c) {
        // libtorch: the byte converted to float32, then divided by 255 in float32.
        mismatches += images[(n * 28 + r) * 28 + c] != float(pixel(n, r, c)) / 255.0f;
      }
    }
  }
  CHECK(mismatches == 0);
}

std::string be32(uint32_t v) {
  return {char(v >> 24), char((v >> 16) & 0xff), char((v >> 8) & 0xff), char(v & 0xff)};
}

}  // namespace

TEST_CASE("MNIST reads the training and test files value by value", "[data][mnist]") {
  const data::MNIST train(kFixtures + "mnist", data::MNIST::Mode::kTrain);
  CHECK(train.is_train());
  check_examples(train, 5);
  // The test files are gzipped only.
  const data::datasets::MNIST test(kFixtures + "mnist", data::datasets::MNIST::Mode::kTest);
  CHECK_FALSE(test.is_train());
  check_examples(test, 3);
  // The same training files gzipped give the same tensors.
  const data::MNIST gzipped(kFixtures + "mnist_gz");
  CHECK(bit_identical(gzipped.images(), train.images()));
  CHECK(bit_identical(gzipped.targets(), train.targets()));
  // Pixel 255 would be exactly 1: the range is [0, 1].
  CHECK(train.images().max().item<float>() <= 1.0f);
  CHECK(train.images().min().item<float>() >= 0.0f);
}

TEST_CASE("MNIST plugs into the DataLoader", "[data][mnist]") {
  auto mnist = std::make_shared<data::MNIST>(kFixtures + "mnist");
  const data::Example example = mnist->get(3);
  CHECK(example[0].sizes() == Shape{1, 28, 28});
  CHECK(example[1].dim() == 0);
  CHECK(example[1].item<int64_t>() == label(3));
  CHECK(example[0].contiguous().data_ptr<float>()[28 * 2 + 5] == float(pixel(3, 2, 5)) / 255.0f);
  CHECK_THAT(error_message([&] { mnist->get(5); }),
             Catch::Contains("index 5 is out of range [0, 5)"));

  data::DataLoader loader(mnist, {.batch_size = 2});
  std::vector<int64_t> batch_sizes;
  int64_t seen = 0;
  for (const data::Batch& batch : loader) {
    REQUIRE(batch.size() == 2);
    batch_sizes.push_back(batch[0].size(0));
    CHECK(batch[0].sizes() == Shape{batch[0].size(0), 1, 28, 28});
    CHECK(bit_identical(batch[1], mnist->targets().narrow(0, seen, batch[0].size(0)).contiguous()));
    seen += batch[0].size(0);
  }
  CHECK(batch_sizes == std::vector<int64_t>{2, 2, 1});
}

TEST_CASE("MNIST explains files that do not fit", "[data][mnist]") {
  TempFolder folder;
  auto write_images = [&](uint32_t count, uint32_t rows, uint32_t columns, uint8_t type = 0x08) {
    std::string bytes =
        std::string("\x00\x00", 2) + char(type) + '\x03' + be32(count) + be32(rows) + be32(columns);
    bytes.append(size_t(count) * rows * columns * (type == 0x08 ? 1 : 4), '\x07');
    write_file(folder.file("train-images-idx3-ubyte"), bytes);
  };
  auto write_labels = [&](uint32_t count) {
    write_file(folder.file("train-labels-idx1-ubyte"),
               std::string("\x00\x00\x08\x01", 4) + be32(count) + std::string(count, '\x01'));
  };
  const std::string root = folder.path.string();

  CHECK_THAT(error_message([&] { data::MNIST{root}; }),
             Catch::Contains("train-images-idx3-ubyte\" or \"") &&
                 Catch::Contains("train-images-idx3-ubyte.gz\", found neither"));
  write_images(4, 28, 28);
  write_labels(3);
  CHECK_THAT(
      error_message([&] { data::MNIST{root}; }),
      Catch::Contains("as many labels as images, got 4 images") && Catch::Contains("and 3 labels"));
  write_images(4, 27, 28);
  write_labels(4);
  CHECK_THAT(
      error_message([&] { data::MNIST{root}; }),
      Catch::Contains("shape [N, 28, 28]") && Catch::Contains("got uint8 of shape [4, 27, 28]"));
  write_images(4, 28, 28, 0x0D);
  CHECK_THAT(error_message([&] { data::MNIST{root}; }), Catch::Contains("got float32"));
  write_images(4, 28, 28);
  CHECK(data::MNIST(root).size() == 4);
  write_file(folder.file("train-labels-idx1-ubyte"), std::string("\x00\x01\x08\x01", 4) + be32(4));
  CHECK_THAT(error_message([&] { data::MNIST{root}; }),
             Catch::Contains("train-labels-idx1-ubyte") && Catch::Contains("got 00 01 08 01"));
  CHECK_THROWS_AS(data::MNIST(root, data::MNIST::Mode::kTest), Error);
}
