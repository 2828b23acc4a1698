// SPDX-License-Identifier: MIT
// The C++ side of the comparison with Hugging Face's GPT2Tokenizer
// (check_gpt2_tokenizer.py):
//   gpt2_tokenizer DIR encode FILE         prints FILE's ids on one line, space-separated
//   gpt2_tokenizer DIR decode FILE_OF_IDS  prints the bytes of the ids (white-space separated in the file)
// DIR holds vocab.json + merges.txt or encoder.json + vocab.bpe. Bad input
// (files, ids) exits 1 with the message on stderr.
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
  if (argc != 4 || (std::string(argv[2]) != "encode" && std::string(argv[2]) != "decode")) {
    std::cerr << "usage: gpt2_tokenizer DIR encode FILE | gpt2_tokenizer DIR decode FILE_OF_IDS\n";
    return 2;
  }
  try {
    const auto tok = gpt2::Tokenizer::load(argv[1]);
    const std::string input = read_all(argv[3]);
    if (std::string(argv[2]) == "encode") {
      const auto ids = tok.encode(input);
      std::string line;
      for (std::size_t i = 0; i < ids.size(); ++i) {
        if (i > 0) line += ' ';
        line += std::to_string(ids[i]);
      }
      line += '\n';
      std::fwrite(line.data(), 1, line.size(), stdout);
    } else {
      const std::string text = tok.decode(parse_ids(input, argv[3]));
      std::fwrite(text.data(), 1, text.size(), stdout);
    }
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
