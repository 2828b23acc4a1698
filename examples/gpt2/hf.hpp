// SPDX-License-Identifier: MIT
// Hugging Face's GPT-2 files: config.json, and model.safetensors read into a
// Model's layouts and lengths (any world size, any split) or written from
// them. Hugging Face names the tensors "transformer.h.0.attn.c_attn.weight"
// (save_pretrained) or without the "transformer." prefix (the hub's files),
// stores Conv1D weights (in, out) as x W uses them, fuses q, k and v into
// c_attn's column blocks (split here: each rank reads c_attn whole and keeps
// its heads' columns),
// and ties lm_head to wte (not stored). Both files are untrusted input: a
// missing tensor, a wrong shape or a config that does not fit is an error on
// every rank naming it.
#pragma once

#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>
#include <shardex.hpp>
#include <shardex/io/safetensors.hpp>

#include "model.hpp"

namespace gpt2 {

namespace detail {

/// The sizes of config.json's text `text` (read from `path`), or why not.
inline Config parse_config(const std::string& text, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw shardex::invalid_argument("gpt2: the config \"" + path + "\" is not JSON: " + e.what());
  }
  if (!j.is_object()) throw shardex::invalid_argument("gpt2: the config \"" + path + "\" is not a JSON object");
  const auto size = [&](std::initializer_list<const char*> keys) -> std::int64_t {
    for (const char* k : keys) {
      if (!j.contains(k)) continue;
      const auto& v = j[k];
      if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > (std::int64_t(1) << 31))
        throw shardex::invalid_argument("gpt2: \"" + std::string(k) + "\" in \"" + path +
                                        "\" must be a positive integer, not " + v.dump());
      return v.get<std::int64_t>();
    }
    throw shardex::invalid_argument("gpt2: the config \"" + path + "\" has no \"" + *keys.begin() + "\"");
  };
  Config c;
  c.layers = size({"n_layer"}), c.heads = size({"n_head"}), c.width = size({"n_embd"});
  c.context = size({"n_positions", "n_ctx"}), c.vocab = size({"vocab_size"});
  if (j.contains("layer_norm_epsilon")) {
    if (!j["layer_norm_epsilon"].is_number())
      throw shardex::invalid_argument("gpt2: \"layer_norm_epsilon\" in \"" + path + "\" must be a number");
    c.eps = j["layer_norm_epsilon"].get<double>();
  }
  // Options of GPT2Config that change the model's math: only GPT-2's own values are built.
  const auto refuse = [&](const char* key, bool differs, const std::string& want) {
    if (j.contains(key) && differs)
      throw shardex::invalid_argument("gpt2: \"" + path + "\" sets " + key + " to " + j[key].dump() +
                                      "; only GPT-2's " + want + " is built");
  };
  refuse("activation_function", j.contains("activation_function") && j["activation_function"] != "gelu_new",
         "\"gelu_new\" (GeLU with tanh)");
  refuse("tie_word_embeddings", j.contains("tie_word_embeddings") && j["tie_word_embeddings"] != true,
         "true (lm_head is wte)");
  refuse("scale_attn_weights", j.contains("scale_attn_weights") && j["scale_attn_weights"] != true,
         "true (scores scaled by 1/sqrt(head_dim))");
  refuse("scale_attn_by_inverse_layer_idx",
         j.contains("scale_attn_by_inverse_layer_idx") && j["scale_attn_by_inverse_layer_idx"] != false, "false");
  refuse("n_inner",
         j.contains("n_inner") && !j["n_inner"].is_null() &&
             !(j["n_inner"].is_number_integer() && j["n_inner"].get<std::int64_t>() == 4 * c.width),
         "null (an MLP 4 x n_embd wide)");
  c.check();
  return c;
}

}  // namespace detail

/// The sizes in a Hugging Face GPT-2 config.json. Collective over `comm`:
/// rank 0 reads the file and every rank parses the same text, so that a
/// missing or bad file is the same error on every rank.
/// @throws shardex::invalid_argument for a file that cannot be read or parsed,
/// a size missing, not a positive integer or beyond Config::check's bounds, or
/// a GPT2Config option that changes the math from GPT-2's (another activation,
/// untied embeddings, unscaled or layer-scaled attention, another MLP width).
inline Config read_config(const shardex::mpi::Communicator& comm, const std::string& path) {
  std::string text;
  std::int64_t size = -1;  // -1: unreadable
  if (comm.rank() == 0) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream all;
    all << in.rdbuf();
    if (in && all.str().size() <= (1u << 20)) text = all.str(), size = static_cast<std::int64_t>(text.size());
  }
  comm.broadcast(&size, 1, 0);
  if (size < 0) throw shardex::invalid_argument("gpt2: cannot read the config \"" + path + "\" (or it is over 1 MiB)");
  text.resize(static_cast<std::size_t>(size));
  if (size > 0) comm.broadcast(text.data(), size, 0);
  return detail::parse_config(text, path);
}

/// config.json as Hugging Face's GPT2Config writes it (no dropout: shardex has none).
inline std::string config_json(const Config& c) {
  nlohmann::json j = {{"architectures", {"GPT2LMHeadModel"}},
                      {"model_type", "gpt2"},
                      {"n_layer", c.layers},
                      {"n_head", c.heads},
                      {"n_embd", c.width},
                      {"n_positions", c.context},
                      {"n_ctx", c.context},
                      {"vocab_size", c.vocab},
                      {"layer_norm_epsilon", c.eps},
                      {"activation_function", "gelu_new"},
                      {"resid_pdrop", 0.0},
                      {"embd_pdrop", 0.0},
                      {"attn_pdrop", 0.0},
                      {"tie_word_embeddings", true}};
  return j.dump(2) + "\n";
}

namespace detail {

/// Which of c_attn's column blocks a parameter name is (q 0, k 1, v 2), or -1.
inline int qkv_block(const std::string& name) {
  for (int b = 0; b < 3; ++b) {
    const std::string part = std::string(".attn.") + "qkv"[b] + ".";
    if (name.find(part) != std::string::npos) return b;
  }
  return -1;
}

/// "h.3.attn.q.weight" -> "h.3.attn.c_attn.weight".
inline std::string c_attn_name(const std::string& name) {
  const auto at = name.find(".attn.");
  return name.substr(0, at) + ".attn.c_attn" + name.substr(at + 7);
}

}  // namespace detail

/// Fills every parameter of `model` from a Hugging Face GPT-2 model.safetensors
/// (with or without the "transformer." prefix), each rank reading its pieces
/// (c_attn whole, of which it keeps its heads' columns).
/// Collective. @throws shardex::error naming the tensor that is missing or
/// whose shape does not match the model's config.
template <class T, class Dev>
void load_hf(Model<T, Dev>& model, const std::string& path) {
  const auto& control = shardex::detail::control_of(model.comm());
  bool prefixed = false, bare = false;
  for (const auto& t : shardex::list_tensors(control, path)) {
    prefixed = prefixed || t.name == "transformer.wte.weight";
    bare = bare || t.name == "wte.weight";
  }
  if (!prefixed && !bare)
    throw shardex::invalid_argument("gpt2: \"" + path +
                                    "\" holds no GPT-2 token embedding (transformer.wte.weight or wte.weight)");
  const std::string prefix = prefixed ? "transformer." : "";
  const std::int64_t w = model.config().width;
  std::string fused_read;  // the c_attn tensor in `fused` (for_each_parameter gives q, k, v one after another)
  Tensor<T, Invariant> fused;
  model.for_each_parameter([&](const std::string& name, auto& p) {
    using P = std::remove_cvref_t<decltype(p)>;
    const int block = detail::qkv_block(name);
    if (block < 0) {
      shardex::load_into(p, path, prefix + name);
      return;
    }
    // q, k or v: its block of c_attn's columns (weight (w, 3w), bias (3w)), read whole once, the rank's part kept.
    const bool weight = p.shape().rank() == 2;
    if (const std::string c_attn = prefix + detail::c_attn_name(name); c_attn != fused_read) {
      fused = shardex::load<T, Invariant>(control, path, c_attn);
      fused_read = c_attn;
      const shardex::Shape want = weight ? shardex::Shape{w, 3 * w} : shardex::Shape{3 * w};
      if (fused.shape() != want)
        throw shardex::error("gpt2: \"" + path + "\" tensor \"" + c_attn + "\" has shape " + fused.shape().str() +
                             " but the config asks for " + want.str());
    }
    const T* src = fused.data();
    auto mine = Tensor<T, typename P::layout_type>::from_function(
        control, p.shape(),
        [&](std::span<const std::int64_t> i) {
          return weight ? src[i[0] * 3 * w + block * w + i[1]] : src[block * w + i[0]];
        },
        p.mapping());
    const auto on_dev = on_device<Dev>(std::move(mine), model.comm());
    shardex::copy_elements<Dev>(on_dev.data(), p.data(), p.size());
  });
}

/// Hugging Face's tensors of `model` ("transformer."-prefixed, c_attn fused,
/// lm_head left to the tie, the metadata "format": "pt"), from each parameter
/// or from its gradient, each sharded one written by its ranks. Collective.
template <class T, class Dev>
shardex::TensorList hf_tensors(Model<T, Dev>& model, bool gradients) {
  shardex::TensorList list;
  list.metadata("format", "pt");  // transformers' from_pretrained refuses a file without it
  const std::int64_t w = model.config().width;
  std::vector<Tensor<T, Invariant>> qkv;  // a layer's q, k, v weights (or biases), whole
  model.for_each_parameter([&](const std::string& name, auto& p) {
    auto value = [&] {
      if constexpr (std::same_as<Dev, shardex::Host>)
        return gradients ? p.grad() : p.detach();
      else
        return shardex::to<shardex::Host>(gradients ? p.grad() : p.detach());
    }();
    const int block = detail::qkv_block(name);
    if (block < 0) {
      list.add("transformer." + name, value);
      return;
    }
    if constexpr (shardex::is_sharded_v<typename decltype(value)::layout_type>)
      qkv.push_back(shardex::eager::all_gather<Invariant>(value));
    if (block < 2) return;
    const bool weight = qkv[0].shape().rank() == 2;
    const auto& control = shardex::detail::control_of(model.comm());
    list.add("transformer." + detail::c_attn_name(name),
             Tensor<T, Invariant>::from_function(control, weight ? shardex::Shape{w, 3 * w} : shardex::Shape{3 * w},
                                                 [&](std::span<const std::int64_t> i) {
                                                   const std::int64_t col = weight ? i[1] : i[0];
                                                   const T* part = qkv[static_cast<std::size_t>(col / w)].data();
                                                   return weight ? part[i[0] * w + col % w] : part[col % w];
                                                 }));
    qkv.clear();
  });
  return list;
}

}  // namespace gpt2
