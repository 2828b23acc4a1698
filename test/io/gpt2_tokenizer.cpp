// SPDX-License-Identifier: MIT
// The C++ side of the comparison with Hugging Face's GPT2Tokenizer
// (check_gpt2_tokenizer.py):
//   gpt2_tokenizer DIR encode FILE...      prints each FILE's ids on a line, space-separated
//   gpt2_tokenizer DIR decode FILE_OF_IDS  prints the bytes of the ids (white-space separated in the file)
//   gpt2_tokenizer DIR split FILE...       prints the byte lengths of each FILE's words (the pre-tokenization)
// DIR holds vocab.json + merges.txt or encoder.json + vocab.bpe. Several FILEs
// save loading the tokenizer for each. Bad input (files, ids) exits 1 with the
// message on stderr.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "../../examples/gpt2/tokenizer.hpp"

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw shardex::invalid_argument("gpt2_tokenizer: cannot open \"" + path + "\"");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::int64_t> parse_ids(const std::string& text, const std::string& path) {
  std::vector<std::int64_t> ids;
  std::size_t i = 0;
  const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
  while (i < text.size()) {
    while (i < text.size() && space(text[i])) ++i;
    if (i == text.size()) break;
    const std::size_t start = i;
    while (i < text.size() && !space(text[i])) ++i;
    const std::string item = text.substr(start, i - start);
    std::size_t used = 0;
    std::int64_t id = 0;
    try {
      id = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size())
      throw shardex::invalid_argument("gpt2_tokenizer: \"" + path + "\": \"" + item + "\" is not an integer id");
    ids.push_back(id);
  }
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 2 ? argv[2] : "";
  if (argc < 4 || (mode != "encode" && mode != "decode" && mode != "split") || (mode == "decode" && argc != 4)) {
    std::cerr << "usage: gpt2_tokenizer DIR encode FILE... | gpt2_tokenizer DIR decode FILE_OF_IDS"
                 " | gpt2_tokenizer DIR split FILE...\n";
    return 2;
  }
  try {
    const auto tok = gpt2::Tokenizer::load(argv[1]);
    if (mode == "encode" || mode == "split") {
      for (int f = 3; f < argc; ++f) {
        const std::string text = read_all(argv[f]);
        std::vector<std::int64_t> out;
        if (mode == "encode") {
          out = tok.encode(text);
        } else {
          // The words GPT-2's pattern cuts the text into (what encode BPEs one by one).
          for (std::size_t i = 0; i < text.size();) {
            const std::size_t end = gpt2::detail::bpe::word_end(text, i);
            out.push_back(static_cast<std::int64_t>(end - i));
            i = end;
          }
        }
        std::string line;
        for (std::size_t i = 0; i < out.size(); ++i) {
          if (i > 0) line += ' ';
          line += std::to_string(out[i]);
        }
        line += '\n';
        std::fwrite(line.data(), 1, line.size(), stdout);
      }
    } else {
      const std::string text = tok.decode(parse_ids(read_all(argv[3]), argv[3]));
      std::fwrite(text.data(), 1, text.size(), stdout);
    }
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
