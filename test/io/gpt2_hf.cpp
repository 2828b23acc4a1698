// SPDX-License-Identifier: MIT
// The C++ side of the comparison with Hugging Face's GPT2LMHeadModel
// (check_gpt2_hf.py):
//   gpt2_hf DIR INPUTS OUT BATCH SEQ HEADS FFN VOCAB [double|float]
// loads DIR/config.json and DIR/model.safetensors (written by transformers'
// save_pretrained) onto this run's ranks split as the comma lists HEADS, FFN
// and VOCAB say (zeros allowed), runs the ids of INPUTS (float64 "ids" and
// "targets", BATCH x SEQ) forward and backward in double (or float), and saves into OUT
// the logits (gathered), the loss and every gradient under Hugging Face's
// names; then the parameters themselves the same way into OUT's sibling
// "saved/model.safetensors" with "saved/config.json", for from_pretrained.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <shardex.hpp>
#include <shardex/io/safetensors.hpp>

#include "../../examples/gpt2/hf.hpp"

using namespace shardex;

namespace {

std::vector<std::int64_t> csv_lengths(const std::string& csv) {
  std::vector<std::int64_t> out;
  std::stringstream in(csv);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoll(item));
  return out;
}

Tensor<std::int64_t, Invariant> ids_of(const mpi::Communicator& comm, const std::string& path,
                                       const std::string& name) {
  const auto f = load<double, Invariant>(comm, path, name);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(f.shape().numel()));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(f.data()[i]);
  return Tensor<std::int64_t, Invariant>::from_local(comm, {f.shape().numel()}, std::span<const std::int64_t>(ids));
}

}  // namespace

// The model in T from DIR, the ids forward and backward, the results saved (as the comment above).
template <class T>
void compare(const mpi::Communicator& world, char** argv) {
  const std::string dir = argv[1], inputs = argv[2], out = argv[3];
  const std::int64_t batch = std::stoll(argv[4]), seq = std::stoll(argv[5]);
  const gpt2::Config config = gpt2::read_config(world, dir + "/config.json");
  const gpt2::Split split{csv_lengths(argv[6]), csv_lengths(argv[7]), csv_lengths(argv[8])};
  gpt2::Model<T> model(world, config, split, 0);
  gpt2::load_hf(model, dir + "/model.safetensors");
  model.trainable();
  Tensor<T, Sharded<1>> logits = model.logits(ids_of(world, inputs, "ids"), batch, seq);
  Tensor<T, Invariant> loss = cross_entropy(logits, ids_of(world, inputs, "targets"));
  backward(loss);
  TensorList results = gpt2::hf_tensors(model, true);
  results.add("logits", logits).add("loss", loss);
  save(out, std::move(results));
  const std::string saved = (std::filesystem::path(out).parent_path() / "saved").string();
  std::filesystem::create_directories(saved);  // on every rank: an error here is every rank's
  if (world.rank() == 0) std::ofstream(saved + "/config.json") << gpt2::config_json(config);
  world.barrier();
  save(saved + "/model.safetensors", gpt2::hf_tensors(model, false));
}

int main(int argc, char** argv) {
  mpi::Environment env(argc, argv);
  const mpi::Communicator world = mpi::Communicator::world();
  const std::string dtype = argc == 10 ? argv[9] : "double";
  if ((argc != 9 && argc != 10) || (dtype != "double" && dtype != "float")) {
    if (world.rank() == 0) std::cerr << "usage: gpt2_hf DIR INPUTS OUT BATCH SEQ HEADS FFN VOCAB [double|float]\n";
    return 2;
  }
  try {
    if (dtype == "double")
      compare<double>(world, argv);
    else
      compare<float>(world, argv);
  } catch (const std::exception& e) {
    std::cerr << "gpt2_hf on rank " << world.rank() << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}
