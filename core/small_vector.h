// SmallVector: a vector of trivially copyable values that keeps up to N of them inline.
// Tensor sizes and strides live in these, so making a tensor of up to N dims allocates
// nothing for its shape.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <span>
#include <type_traits>

namespace hg {

template <class T, size_t N>
class SmallVector {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  using value_type = T;
  using iterator = T*;
  using const_iterator = const T*;

  SmallVector() = default;
  SmallVector(std::initializer_list<T> values) { assign(values.begin(), values.size()); }
  explicit SmallVector(std::span<const T> values) { assign(values.data(), values.size()); }
  SmallVector(size_t count, T value) {
    resize(count);
    std::fill(begin(), end(), value);
  }
  SmallVector(const SmallVector& other) { assign(other.data(), other.size()); }
  SmallVector(SmallVector&& other) noexcept { take(other); }
  SmallVector& operator=(const SmallVector& other) {
    if (this != &other) assign(other.data(), other.size());
    return *this;
  }
  SmallVector& operator=(SmallVector&& other) noexcept {
    if (this != &other) take(other);
    return *this;
  }
  ~SmallVector() = default;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* data() { return heap_ ? heap_.get() : inline_; }
  const T* data() const { return heap_ ? heap_.get() : inline_; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  T& back() { return data()[size_ - 1]; }
  const T& back() const { return data()[size_ - 1]; }
  operator std::span<const T>() const { return {data(), size_}; }

  void resize(size_t count, T value = T{}) {
    reserve(count);
    for (size_t i = size_; i < count; ++i) data()[i] = value;
    size_ = count;
  }
  void push_back(T value) {
    reserve(size_ + 1);
    data()[size_++] = value;
  }
  void insert(size_t position, T value) {
    reserve(size_ + 1);
    T* d = data();
    std::memmove(d + position + 1, d + position, (size_ - position) * sizeof(T));
    d[position] = value;
    ++size_;
  }
  void erase(size_t position) {
    T* d = data();
    std::memmove(d + position, d + position + 1, (size_ - position - 1) * sizeof(T));
    --size_;
  }
  void clear() { size_ = 0; }

  // A plain loop: std::equal on integers becomes a call to memcmp, which costs more than
  // comparing a shape's few elements (shapes are compared in many ops' checks).
  friend bool operator==(const SmallVector& a, const SmallVector& b) {
    if (a.size_ != b.size_) return false;
    for (size_t i = 0; i < a.size_; ++i) {
      if (!(a.data()[i] == b.data()[i])) return false;
    }
    return true;
  }

 private:
  void reserve(size_t count) {
    if (count <= capacity_) return;
    const size_t capacity = std::max(count, 2 * capacity_);
    std::unique_ptr<T[]> grown(new T[capacity]);
    std::memcpy(grown.get(), data(), size_ * sizeof(T));
    heap_ = std::move(grown);
    capacity_ = capacity;
  }
  void assign(const T* values, size_t count) {
    size_ = 0;
    reserve(count);
    if (count) std::memcpy(data(), values, count * sizeof(T));
    size_ = count;
  }
  void take(SmallVector& other) {
    if (other.heap_) {
      heap_ = std::move(other.heap_);
      capacity_ = other.capacity_;
      size_ = other.size_;
    } else {
      heap_.reset();
      capacity_ = N;
      assign(other.inline_, other.size_);
    }
    other.capacity_ = N;
    other.size_ = 0;
  }

  T inline_[N];
  std::unique_ptr<T[]> heap_;
  size_t size_ = 0;
  size_t capacity_ = N;
};

}  // namespace hg
