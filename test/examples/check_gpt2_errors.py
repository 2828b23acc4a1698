#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Bad input to examples/gpt2 is a clear error, never a hang or a crash (issue #26).

    check_gpt2_errors.py GPT2 MPIRUN [MPIRUN_ARGS...]

Each case runs gpt2 on 2 ranks with one bad input (a config whose heads do not
divide the width, a checkpoint whose tensors do not match its config, token
ids beyond the vocabulary, a --seq longer than the context, truncated and
corrupt files) and must exit with its code (1: an error; 64: a bad command
line) within a deadline, printing the phrase that names the problem on whole
lines: by each rank that met it, or once by rank 0 where every rank met it
alike, never interleaved with another rank's message.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

SMALL = ["--layers", "1", "--heads", "2", "--width", "8", "--context", "16", "--batch", "2", "--seq", "8",
         "--eval-every", "0"]


def main():
    gpt2, mpirun, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    failures = []

    def gpt2_run(flags, timeout=60):
        """gpt2 on 2 ranks with the small model and FLAGS; its output undecodable bytes escaped."""
        return subprocess.run([mpirun] + args + ["-n", "2", gpt2] + SMALL + flags, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, errors="backslashreplace", timeout=timeout)

    with tempfile.TemporaryDirectory() as d:
        text = os.path.join(d, "text.txt")
        with open(text, "w") as f:
            f.write("the quick brown fox jumps over the lazy dog. " * 40)
        # A checkpoint to spoil: one step of the small model.
        good = os.path.join(d, "good")
        p = gpt2_run(["--data", text, "--steps", "1", "--save", good], timeout=120)
        if p.returncode != 0:
            sys.exit("check_gpt2_errors: the good run failed:\n" + p.stdout)
        config = json.load(open(os.path.join(good, "config.json")))
        weights = open(os.path.join(good, "model.safetensors"), "rb").read()

        def checkpoint(name, config_changes=None, weights_bytes=None, config_text=None):
            path = os.path.join(d, name)
            os.makedirs(path)
            with open(os.path.join(path, "config.json"), "w") as f:
                f.write(config_text if config_text is not None else json.dumps(dict(config, **(config_changes or {}))))
            open(os.path.join(path, "model.safetensors"), "wb").write(weights if weights_bytes is None else weights_bytes)
            return path

        def data_file(name, content):
            path = os.path.join(d, name)
            open(path, "wb").write(content)
            return path

        def misshapen_c_attn():
            """The checkpoint with c_attn's weight one column short, or None without the safetensors package."""
            try:
                import numpy
                from safetensors.numpy import load_file, save_file
            except ImportError:
                return None
            path = checkpoint("c_attn")
            tensors = load_file(os.path.join(good, "model.safetensors"))
            name = "transformer.h.0.attn.c_attn.weight"
            tensors[name] = numpy.ascontiguousarray(tensors[name][:, :-1])
            save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
            return path

        header_length = int.from_bytes(weights[:8], "little")

        def with_dtype(dtype):
            """The good weights with their first tensor's dtype replaced in the header."""
            header = json.loads(weights[8:8 + header_length])
            first = next(k for k in header if k != "__metadata__")
            header[first]["dtype"] = dtype
            text = json.dumps(header).encode()
            text += b" " * (-len(text) % 8)
            return len(text).to_bytes(8, "little") + text + weights[8 + header_length:]

        ids = b"".join(i.to_bytes(2, "little") for i in [1, 2, 3, 300, 4] * 40)
        cases = [
            ("heads that do not divide the width", ["--heads", "5", "--width", "8"], "error",
             "the heads (5) must divide the width (8)"),
            ("config.json: heads that do not divide the width", ["--load", checkpoint("heads", {"n_head": 3})],
             "error", "the heads (3) must divide the width (8)"),
            ("config.json: a layer more than the weights", ["--load", checkpoint("layers", {"n_layer": 2})],
             "error", "transformer.h.1.ln_1.weight"),
            ("config.json: another vocabulary", ["--load", checkpoint("vocab", {"vocab_size": 300})],
             "error", "transformer.wte.weight"),
            ("config.json: not JSON", ["--load", checkpoint("notjson", config_text="{")], "error", "is not JSON"),
            ("no config.json", ["--load", os.path.join(d, "nothing")], "error", "cannot read the config"),
            ("truncated weights", ["--load", checkpoint("truncated", weights_bytes=weights[: len(weights) // 2])],
             "error", "but the file's data section has " + str(len(weights) // 2 - 8 - header_length) +
             " bytes (a truncated file, or offsets that lie)"),
            ("weights cut inside the header", ["--load", checkpoint("cut", weights_bytes=weights[:100])],
             "error", "is not a safetensors file (or is truncated): its header length is " + str(header_length) +
             " bytes but the file has 100 bytes"),
            ("corrupt weights header", ["--load", checkpoint("corrupt", weights_bytes=b"\xff" * 64)],
             "error", "its header length is 18446744073709551615 bytes, more than the 100000000"),
            ("an unknown dtype in the header", ["--load", checkpoint("dtype", weights_bytes=with_dtype("Q9"))],
             "error", "has an unknown dtype \"Q9\""),
            ("token ids beyond the vocabulary", ["--data", data_file("ids.bin", ids)], "error",
             "token 3 of " + os.path.join(d, "ids.bin") + " (uint16 token ids) is 300, beyond the model's vocabulary of 257"),
            ("truncated token file", ["--data", data_file("odd.bin", ids[:-1])], "error", "an odd number"),
            ("too few tokens", ["--data", data_file("short.txt", b"abc")], "error", "fewer than the 17 needed"),
            ("a missing data file", ["--data", os.path.join(d, "nothing.txt")], "error", "cannot open"),
            ("--seq longer than the context", ["--seq", "17"], "usage",
             "--seq 17 is longer than the model's context of 16"),
            ("a resumed run given another seed", ["--resume", good, "--seed", "5"], "usage",
             "--seed 5: the run resumed from " + good + " has the seed 1; leave --seed out"),
        ]
        c_attn = misshapen_c_attn()
        if c_attn is None:
            print("SKIP (one case) a misshapen c_attn: the safetensors package is not importable")
        else:
            cases.append(("c_attn one column short", ["--load", c_attn], "error",
                          "tensor \"transformer.h.0.attn.c_attn.weight\" has shape (8, 23) but the config asks for (8, 24)"))
        codes = {"error": 1, "usage": 64}
        for what, extra, code, phrase in cases:
            try:
                p = gpt2_run(["--data", text, "--steps", "2"] + extra)
            except subprocess.TimeoutExpired:
                failures.append(f"{what}: no end within 60 s (a hang)")
                continue
            # The phrase on whole lines, none cut into by another rank's message: "gpt2 (rank N): ..."
            # from each rank that met it, or once where the ranks agreed on it (shardex's agreed errors
            # name the rank, "on rank N": the others' copies are not printed), or "gpt2: ..." once from
            # rank 0 where every rank met it alike (a bad command line).
            named = [l for l in p.stdout.splitlines() if phrase in l]
            whole = all(re.match(r"gpt2( \(rank \d+\))?: ", l) for l in named)
            ranks = {int(m.group(1)) for l in named for m in [re.match(r"gpt2 \(rank (\d+)\): ", l)] if m}
            every_rank = ranks == {0, 1} or (len(named) == 1 and re.search(r" on rank \d", named[0]))
            ok = (p.returncode == codes[code] and bool(named) and whole
                  and (every_rank if code == "error" else named[0].startswith("gpt2: ")))
            print(f"{'ok  ' if ok else 'FAIL'} {what}: exit {p.returncode}; "
                  f"{next((l for l in p.stdout.splitlines() if phrase in l), p.stdout.strip()[-300:])}")
            if not ok:
                failures.append(f"{what}: exit {p.returncode} (want {codes[code]}), phrase {phrase!r}:\n{p.stdout}")
        # Not an error: --generate alone reads no sequences of --seq tokens, so a --seq
        # beyond the context does not stop it (it crops its window to the context).
        p = gpt2_run(["--steps", "0", "--seq", "17", "--generate", "ab", "--tokens", "3"])
        ok = p.returncode == 0 and "generated (greedy):" in p.stdout
        print(f"{'ok  ' if ok else 'FAIL'} --generate alone with --seq beyond the context: exit {p.returncode}")
        if not ok:
            failures.append("--generate alone with --seq 17 and context 16 did not generate:\n" + p.stdout)
    if failures:
        sys.exit("check_gpt2_errors:\n" + "\n".join(failures))
    print("gpt2: every bad input is a named error")


if __name__ == "__main__":
    main()
