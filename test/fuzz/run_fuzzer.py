#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Builds the safetensors libFuzzer target with clang++ and runs it for a bounded time.

    run_fuzzer.py SOURCE_ROOT BUILD_DIR [SECONDS]

The target (safetensors_fuzzer.cpp) is compiled with -fsanitize=fuzzer,address,undefined
from the parser's own sources only (src/safetensors.cpp, src/stored_dtype.cpp: no MPI) into
BUILD_DIR/safetensors_fuzzer, rebuilt only when a source is newer. It runs from the committed
seed corpus (test/fuzz/corpus, read only) plus a working corpus in BUILD_DIR/fuzz-corpus, where
the inputs it finds accumulate between runs, for SECONDS (default: $SHARDEX_FUZZ_SECONDS, else 60).
Exit 0: no crash; 1: a crash, a leak, a timeout or a sanitizer report (the input is kept in
BUILD_DIR/fuzz-artifacts and named); 77 (SKIP): no clang++ or no libFuzzer runtime.
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

SKIP = 77


def find_clang():
    for name in [os.environ.get("SHARDEX_FUZZ_CXX", ""), "clang++", "clang++-16", "clang++-15", "clang++-14"]:
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__)
        return 2
    src, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    seconds = int(sys.argv[3] if len(sys.argv) == 4 else os.environ.get("SHARDEX_FUZZ_SECONDS", "60"))
    here = os.path.join(src, "test", "fuzz")
    clang = find_clang()
    if not clang:
        print("SKIP: no clang++ on PATH (Debian: apt-get install clang libclang-rt-14-dev); set SHARDEX_FUZZ_CXX to use another")
        return SKIP
    # -gline-tables-only: a report's frames keep their file and line, in
    # four fifths of -g's compile time (17.8 s against 22.8 s).
    flags = ["-std=c++20", "-O1", "-gline-tables-only", "-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=all",
             "-I" + os.path.join(src, "include")]
    # The runtime is there if a one-line target links.
    with tempfile.TemporaryDirectory() as tmp:
        probe = os.path.join(tmp, "probe.cpp")
        with open(probe, "w") as f:
            f.write('#include <cstdint>\n#include <cstddef>\n'
                    'extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t*, std::size_t) { return 0; }\n')
        r = subprocess.run([clang] + flags + [probe, "-o", os.path.join(tmp, "probe")], capture_output=True, text=True)
        if r.returncode != 0:
            print("SKIP: " + clang + " cannot link a libFuzzer target (Debian: apt-get install libclang-rt-14-dev):\n"
                  + r.stderr[-2000:])
            return SKIP
    sources = [os.path.join(here, "safetensors_fuzzer.cpp"), os.path.join(src, "src", "safetensors.cpp"),
               os.path.join(src, "src", "stored_dtype.cpp")]
    inputs = sources + [os.path.join(src, "src", "json_text.hpp"), __file__] + \
        glob.glob(os.path.join(src, "include", "shardex", "io", "*.hpp")) + \
        [os.path.join(src, "include", "shardex", "core", "error.hpp")]
    exe = os.path.join(build, "safetensors_fuzzer")
    os.makedirs(build, exist_ok=True)
    if not os.path.exists(exe) or os.path.getmtime(exe) < max(os.path.getmtime(p) for p in inputs):
        print("building " + exe + " with " + clang, flush=True)
        r = subprocess.run([clang] + flags + sources + ["-o", exe + ".tmp"])
        if r.returncode != 0:
            print("FAIL: the fuzz target does not compile")
            return 1
        os.replace(exe + ".tmp", exe)
    work = os.path.join(build, "fuzz-corpus")
    artifacts = os.path.join(build, "fuzz-artifacts")
    os.makedirs(work, exist_ok=True)
    os.makedirs(artifacts, exist_ok=True)
    seeds = os.path.join(here, "corpus")
    cmd = [exe, "-max_total_time=%d" % seconds, "-max_len=65536", "-timeout=10", "-rss_limit_mb=2048",
           "-print_final_stats=1", "-dict=" + os.path.join(here, "safetensors.dict"),
           "-artifact_prefix=" + artifacts + "/", work, seeds]
    print(" ".join(cmd), flush=True)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:halt_on_error=1", UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    r = subprocess.run(cmd, env=env)
    if r.returncode != 0:
        found = sorted(glob.glob(os.path.join(artifacts, "*")), key=os.path.getmtime)
        print("FAIL: the fuzzer stopped with exit code %d%s" % (r.returncode, (": the input is " + found[-1]) if found else ""))
        return 1
    print("OK: %d s of fuzzing, no crash (working corpus: %d inputs in %s)" % (seconds, len(os.listdir(work)), work))
    return 0


if __name__ == "__main__":
    sys.exit(main())
