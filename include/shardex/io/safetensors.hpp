// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief Sharded checkpoints in one standard file: `save(path, tensors)`
/// writes the logical value of every tensor into a safetensors file, each
/// rank writing its own piece at its place with MPI-IO (collective writes;
/// a piece strided in the file, sharded along an inner dim, is one subarray
/// view); `load<T, Layout>(comm, path, name, lengths)` reads back any tensor
/// into any layout, any lengths, any world size, each rank reading only its
/// piece. `list_tensors` and `read_metadata` read the header. Mesh tensors
/// (mesh/) are saved and loaded the same way, a box per rank.
///
/// @code
/// save("ckpt.safetensors", TensorList().add("A", A).add("b", b, StoredAs::bf16).metadata("step", "5"));
/// auto A2 = load<float, Sharded<1>>(comm, "ckpt.safetensors", "A", {3, 0, 5, 2});
/// @endcode
///
/// Elements are stored as the tensor holds them (F32, F64) or, if asked,
/// converted (BF16, F16, ...: io/stored_dtype.hpp); a load converts from any
/// stored float dtype that holds the asked type's values exactly.
///
/// Invariant and Replicated tensors are written once (by rank 0). A Partial
/// tensor is refused at compile time: it is a pending sum, not a value, and
/// reducing it is a collective the caller should choose (all_reduce, or
/// reduce_scatter to keep it sharded). The file appears atomically: written
/// under a temporary name and renamed once every rank is done, so a failed
/// or interrupted save never leaves a half-written file under `path`, and
/// an earlier file there stays as it was. Every error is thrown on every
/// rank, naming the file and the tensor.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <typeinfo>
#include <string>
#include <utility>
#include <vector>

#include "shardex/core/agree.hpp"
#include "shardex/core/compile_errors.hpp"
#include "shardex/core/error.hpp"
#include "shardex/io/file.hpp"
#include "shardex/io/safetensors_header.hpp"
#include "shardex/io/stored_dtype.hpp"
#include "shardex/layout/mapping.hpp"
#include "shardex/mesh/mesh_tensor.hpp"
#include "shardex/tensor/tensor.hpp"
#include "shardex/tensor/transfer.hpp"

namespace shardex {

/// The safetensors dtype of an element type.
template <Scalar T>
constexpr const char* safetensors_dtype() {
  return std::same_as<T, float> ? "F32" : "F64";
}

namespace detail {
/// The box of the global array a mesh tensor's local part is: every dim a
/// sharded axis cuts starts at this rank's offset on that axis.
template <class X>
io::FileBox mesh_box(const X& t) {
  io::FileBox b;
  b.elem_bytes = sizeof(typename X::value_type);
  b.extents = {t.shape().extents().begin(), t.shape().extents().end()};
  b.start.assign(b.extents.size(), 0);
  b.count = b.extents;
  for_each_axis<X::axis_count>([&](auto k) {
    constexpr std::size_t i = decltype(k)::value;
    using L = typename X::template layout_at<i>;
    if constexpr (is_sharded_v<L>) {
      const auto ls = t.template mapping<i>().lengths();
      std::int64_t off = 0;
      for (int r = 0; r < t.mesh().coord(i); ++r) off += ls[static_cast<std::size_t>(r)];
      b.start[L::dim] = off;
      b.count[L::dim] = ls[static_cast<std::size_t>(t.mesh().coord(i))];
    }
  });
  return b;
}
}  // namespace detail

/// The tensors of one save, by name, with the file's metadata.
class TensorList {
public:
  /// Adds `t` under `name` (its logical value is what the file holds),
  /// its elements stored `as` (the tensor's own dtype, or converted to the
  /// nearest value of another).
  template <Scalar T, LayoutTag L, class Dev>
  TensorList& add(std::string name, const Tensor<T, L, Dev>& t, StoredAs as = StoredAs::native) {
    static_assert(!std::same_as<L, Partial>, SHARDEX_ERR_SAVE_PARTIAL);
    return recording([&] { add_tensor(std::move(name), t, as); });
  }
  /// Adds the mesh tensor `t` under `name`: each rank writes its box (the
  /// dims its sharded axes cut), once per group of the whole axes (the ranks
  /// at coordinate 0 of every Invariant or Replicated axis write).
  template <Scalar T, MeshType M, PerAxisLayouts Ls>
  TensorList& add(std::string name, const MeshTensor<T, M, Ls>& t, StoredAs as = StoredAs::native) {
    static_assert(!partial_on_an_axis<Ls>, SHARDEX_ERR_SAVE_PARTIAL);
    return recording([&] { add_mesh_tensor(std::move(name), t, as); });
  }

  /// A string stored in the header's "__metadata__".
  TensorList& metadata(std::string key, std::string value) {
    metadata_[std::move(key)] = std::move(value);
    return *this;
  }

private:
  template <Scalar T, LayoutTag L, class Dev>
  void add_tensor(std::string name, const Tensor<T, L, Dev>& t, StoredAs as) {
    t.require_valid("shardex::TensorList::add");
    io::FileBox box;
    box.extents = {t.shape().extents().begin(), t.shape().extents().end()};
    box.start.assign(box.extents.size(), 0);
    box.count = box.extents;
    if constexpr (is_sharded_v<L>) {
      box.start[L::dim] = t.global_offset();
      box.count[L::dim] = t.local_shape()[L::dim];
    }
    // A whole tensor is written once, by rank 0.
    push(std::move(name), std::move(box), is_sharded_v<L> || t.rank() == 0, t, detail::control_of(t.comm()), as);
  }
  template <Scalar T, MeshType M, PerAxisLayouts Ls>
  void add_mesh_tensor(std::string name, const MeshTensor<T, M, Ls>& t, StoredAs as) {
    t.require_valid("shardex::TensorList::add");
    push(std::move(name), detail::mesh_box(t), t.first_copy(), t.inner(), t.mesh().world(), as);
  }
  /// The item of a tensor whose local part `local` is `box` of the global
  /// array (written by this rank if `writes`), kept on the host, converted
  /// to the stored dtype if that is not T's.
  template <Scalar T, LayoutTag L, class Dev>
  void push(std::string name, io::FileBox box, bool writes, const Tensor<T, L, Dev>& local, mpi::Communicator comm,
            StoredAs as) {
    Item item;
    item.entry.name = std::move(name);
    item.entry.dtype = io::stored_dtype(as, safetensors_dtype<T>());
    item.entry.shape = box.extents;
    box.elem_bytes = io::dtype_bytes(item.entry.dtype);
    if (!writes) box.count.assign(box.count.size(), 0);
    if (box.extents.empty())
      box.extents = {1}, box.start = {0}, box.count = {writes ? 1 : 0};  // a 0-d tensor: one element
    item.box = std::move(box);
    // The tensor itself on the host (a handle, no copy); a host copy of a device tensor.
    const Tensor<T, L, Host> host = [&] {
      if constexpr (std::same_as<Dev, Host>)
        return local.detach();
      else
        return to<Host>(local.detach());
    }();
    if (item.entry.dtype == safetensors_dtype<T>() || !writes) {
      item.data = host.data();
      item.keep = std::shared_ptr<const void>(std::make_shared<Tensor<T, L, Host>>(host), host.data());
    } else {
      auto stored =
          std::make_shared<std::vector<unsigned char>>(static_cast<std::size_t>(host.size() * box.elem_bytes));
      io::encode(host.data(), item.entry.dtype, stored->data(), host.size());
      item.data = stored->data();
      item.keep = std::shared_ptr<const void>(stored, stored->data());
    }
    item.comm = std::move(comm);
    items_.push_back(std::move(item));
  }

private:
  struct Item {
    io::TensorEntry entry;
    io::FileBox box;
    const void* data = nullptr;
    std::shared_ptr<const void> keep;  ///< keeps the host copy alive
    mpi::Communicator comm;
  };
  /// Runs `f` (an add); a failure is kept for save's agreement, so that a
  /// tensor bad on one rank throws on every rank there, not here alone.
  template <class F>
  TensorList& recording(F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      if (error_.empty()) error_ = e.what();
    }
    return *this;
  }
  std::vector<Item> items_;
  std::map<std::string, std::string> metadata_;
  std::string error_;
  friend void save(const std::string& path, TensorList list);
};

/// Collective over the tensors' communicator: writes every tensor of `list`
/// into the safetensors file `path` (in name order; the same bytes whatever
/// the world size, layouts and lengths that hold them).
inline void save(const std::string& path, TensorList list) {
  if (list.items_.empty()) throw invalid_argument("shardex::save(\"" + path + "\"): no tensors to save");
  const mpi::Communicator comm = list.items_.front().comm;
  std::sort(list.items_.begin(), list.items_.end(),
            [](const auto& a, const auto& b) { return a.entry.name < b.entry.name; });
  std::string err;
  detail::Signature sig;
  sig.add("shardex::save").add(path);
  for (std::size_t k = 0; k < list.items_.size(); ++k) {
    const auto& it = list.items_[k];
    if (err.empty() && (it.comm.size() != comm.size() || it.comm.rank() != comm.rank()))
      err = "tensor \"" + it.entry.name + "\" lives on another communicator than \"" + list.items_.front().entry.name +
            "\"";
    if (err.empty() && k > 0 && it.entry.name == list.items_[k - 1].entry.name)
      err = "the name \"" + it.entry.name + "\" is given twice";
    if (err.empty() && (it.entry.name.empty() || it.entry.name == "__metadata__"))
      err = "\"" + it.entry.name + "\" is not a tensor name";
    sig.add(it.entry.name).add(it.entry.dtype);
    for (auto e : it.entry.shape) sig.add(e);
  }
  for (const auto& [k, v] : list.metadata_) sig.add(k).add(v);
  // Every rank must be saving the same tensors: a different list would interleave two files.
  if (err.empty() && !list.error_.empty()) err = list.error_;
  io::agree_always(
      comm, err.empty() ? err : "shardex::save(\"" + path + "\") on rank " + std::to_string(comm.rank()) + ": " + err,
      sig.value(),
      "shardex::save(\"" + path + "\") on rank " + std::to_string(comm.rank()) + " (" +
          std::to_string(list.items_.size()) + " tensors)");
  std::vector<io::TensorEntry> entries;
  for (const auto& it : list.items_) entries.push_back(it.entry);
  const std::string header = io::make_header(entries, list.metadata_);
  std::vector<io::FileBox> boxes;
  std::vector<const void*> data;
  std::int64_t total = static_cast<std::int64_t>(header.size());
  for (std::size_t k = 0; k < list.items_.size(); ++k) {
    io::FileBox b = list.items_[k].box;
    b.offset = static_cast<std::int64_t>(header.size()) + entries[k].begin;
    total = std::max(total, static_cast<std::int64_t>(header.size()) + entries[k].end);
    boxes.push_back(std::move(b));
    data.push_back(list.items_[k].data);
  }
  io::write_boxes(comm, path, header, total, boxes, data);
}

/// A tensor of a file: its name, dtype and shape.
struct TensorInfo {
  /// The tensor's name in the file.
  std::string name;
  /// Its safetensors dtype ("F32", "BF16", ...).
  std::string dtype;
  /// Its shape.
  Shape shape;
};

namespace detail {
/// The validated header of `path`, the same on every rank (rank 0 reads it).
inline io::SafetensorsHeader read_header(const mpi::Communicator& comm, const std::string& path) {
  const io::FileHead first = io::read_head(comm, path, 8);
  const std::int64_t n = io::header_length(first.bytes, first.size, path);
  const io::FileHead head = io::read_head(comm, path, 8 + n);
  return io::parse_header(head.bytes, head.size, path);
}
}  // namespace detail

namespace detail {
/// Every rank asks for the same tensor, of a type that holds the file's
/// dtype exactly, and the file has it: checked on every rank together,
/// whatever the check level (a rank asking for another name would read
/// another tensor, a rank failing alone would leave the others waiting).
template <class T, class Layout>
void check_request(const mpi::Communicator& comm, const io::SafetensorsHeader& h, const std::string& path,
                   const std::string& name, const std::string& what) {
  const io::TensorEntry* e = h.find(name);
  std::string err;
  if (!e)
    err = what + ": the file has no tensor \"" + name + "\" (it has: " + h.names() + ")";
  else if (!io::is_float_dtype(e->dtype))
    err = what + ": the tensor is " + e->dtype + " in the file but " + dtype_name<T>() + " (" + safetensors_dtype<T>() +
          ") was asked for; shardex loads F64, F32, BF16 and F16 tensors";
  else if (!io::holds_exactly(e->dtype, safetensors_dtype<T>()))
    err = what + ": the tensor is " + e->dtype + " in the file but " + dtype_name<T>() + " (" + safetensors_dtype<T>() +
          ") was asked for, which would round its values; load it as float64";
  else if (e->shape.size() > 6)
    err = what + ": the tensor has " + std::to_string(e->shape.size()) + " dims; shardex's tensors have at most 6";
  Signature sig;
  sig.add("shardex::load").add(path).add(name).add(dtype_name<T>()).add(typeid(Layout).name());
  io::agree_always(comm, err, sig.value(), what);
}
/// Collective: every rank reads its box `b` of a tensor stored as `dtype`
/// into `out` (b's elements of T), converting if the file's dtype is not T's.
template <Scalar T>
void read_box(const mpi::Communicator& comm, const std::string& path, io::FileBox b, const std::string& dtype, T* out) {
  if (b.extents.empty()) b.extents = b.count = {1}, b.start = {0};  // a 0-d tensor: one element
  b.elem_bytes = io::dtype_bytes(dtype);
  const bool as_is = dtype == safetensors_dtype<T>();
  std::vector<unsigned char> stored(as_is ? 0 : static_cast<std::size_t>(b.elements() * b.elem_bytes));
  void* data = as_is ? static_cast<void*>(out) : stored.data();
  io::read_boxes(comm, path, std::span<const io::FileBox>(&b, 1), std::span<void* const>(&data, 1));
  if (!as_is) io::decode(dtype, stored.data(), out, b.elements());
}
}  // namespace detail

/// The tensors of a safetensors file, in the order of their data. Collective.
inline std::vector<TensorInfo> list_tensors(const mpi::Communicator& comm, const std::string& path) {
  std::vector<TensorInfo> out;
  for (const auto& t : detail::read_header(comm, path).tensors) {
    if (t.shape.size() > 6)
      throw error("shardex::list_tensors(\"" + path + "\"): tensor \"" + t.name + "\" has " +
                  std::to_string(t.shape.size()) + " dims; shardex's shapes have at most 6");
    out.push_back({t.name, t.dtype, Shape(t.shape)});
  }
  return out;
}

/// The "__metadata__" strings of a safetensors file. Collective.
inline std::map<std::string, std::string> read_metadata(const mpi::Communicator& comm, const std::string& path) {
  return detail::read_header(comm, path).metadata;
}

/// Collective over `comm`: tensor `name` of the safetensors file `path`, in
/// layout L with lengths `m` (one per rank of comm, summing to the extent
/// of the sharded dim): every rank reads only its piece. On a device, the
/// piece is read to the host and uploaded.
template <Scalar T, LayoutTag L, class Dev = Host>
Tensor<T, L, Dev> load(const typename Dev::communicator& comm, const std::string& path, const std::string& name,
                       layout_mapping<L> m = lengths_from_type<L>()) {
  static_assert(!std::same_as<L, Partial>, SHARDEX_ERR_LOAD_PARTIAL);
  const mpi::Communicator& control = detail::control_of(comm);
  const io::SafetensorsHeader h = detail::read_header(control, path);
  const io::TensorEntry* e = h.find(name);
  const std::string what = "shardex::load(\"" + path + "\", \"" + name + "\") on rank " +
                           std::to_string(control.rank()) + " of " + std::to_string(control.size());
  detail::check_request<T, L>(control, h, path, name, what);
  const Shape global(e->shape);
  // A bad lengths list throws on every rank here (the factory agrees on it).
  auto t = Tensor<T, L, Host>::zeros(control, global, std::move(m));
  io::FileBox b;
  b.offset = h.data_begin + e->begin;
  b.extents = e->shape;
  b.start.assign(e->shape.size(), 0);
  b.count = e->shape;
  if constexpr (is_sharded_v<L>) {
    b.start[L::dim] = t.global_offset();
    b.count[L::dim] = t.local_shape()[L::dim];
  }
  detail::read_box(control, path, std::move(b), e->dtype, t.data());
  if constexpr (std::same_as<Dev, Host>)
    return t;
  else
    return to<Dev>(t, comm);
}

/// Reads tensor `name` of `path` into `t` (its layout and lengths), which
/// must have the file's shape: the resume of a model whose parameters exist.
template <Scalar T, LayoutTag L, class Dev>
void load_into(Tensor<T, L, Dev>& t, const std::string& path, const std::string& name) {
  t.require_valid("shardex::load_into");
  const auto shape = [&]() -> std::optional<Shape> {
    for (const auto& e : detail::read_header(detail::control_of(t.comm()), path).tensors)
      if (e.name == name) return e.shape.size() <= 6 ? std::optional<Shape>(Shape(e.shape)) : std::nullopt;
    return std::nullopt;
  }();
  if (!shape) {
    (void)load<T, L, Dev>(t.comm(), path, name, t.mapping());  // throws on every rank, saying why
    return;
  }
  if (*shape != t.shape())
    throw error("shardex::load_into(\"" + path + "\", \"" + name + "\") on rank " + std::to_string(t.rank()) +
                ": the file's tensor has shape " + shape->str() + " but the tensor to fill is " + t.describe());
  const auto loaded = load<T, L, Dev>(t.comm(), path, name, t.mapping());
  copy_elements<Dev>(loaded.data(), t.data(), t.size());
}

/// Collective over the mesh: tensor `name` of `path` as a mesh tensor with
/// layouts Ls and the lengths `ms` of its sharded axes; every rank reads its
/// box only (on a device mesh: to the host, then uploaded).
template <Scalar T, PerAxisLayouts Ls, MeshType M>
MeshTensor<T, M, Ls> load(const M& mesh, const std::string& path, const std::string& name,
                          typename Ls::mappings ms = {}) {
  static_assert(!partial_on_an_axis<Ls>, SHARDEX_ERR_LOAD_PARTIAL);
  const io::SafetensorsHeader h = detail::read_header(mesh.world(), path);
  const io::TensorEntry* e = h.find(name);
  const std::string what =
      "shardex::load(\"" + path + "\", \"" + name + "\") on world rank " + std::to_string(mesh.world().rank());
  detail::check_request<T, Ls>(mesh.world(), h, path, name, what);
  static_assert(std::same_as<typename M::device_type, Host>, SHARDEX_ERR_LOAD_MESH_HOST_ONLY);
  auto t = MeshTensor<T, M, Ls>::zeros(mesh, Shape(e->shape), std::move(ms));  // lengths agreed over the mesh
  io::FileBox b = detail::mesh_box(t);
  b.offset = h.data_begin + e->begin;
  detail::read_box(mesh.world(), path, std::move(b), e->dtype, t.data());
  return t;
}

}  // namespace shardex
