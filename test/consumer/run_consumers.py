#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The consumers test (issue #11): shardex used from other builds.

    run_consumers.py BUILD_DIR SOURCE_ROOT MPIRUN [MPIRUN_ARGS...]

Installs BUILD_DIR into a temporary prefix (meson install --destdir) and checks
what was installed (a versioned soname, the multiarch libdir where the
compiler has one, shardex.pc and the CMake package, only the built backends'
headers), then builds app.cpp three ways and runs each on 2 ranks:
  1. Meson, finding the installed shardex by pkg-config;
  2. CMake, by find_package(shardex);
  3. Meson with shardex as a subproject, using the snippet of docs/building-and-testing.md verbatim
     (compiled with clang where it is installed, g++ otherwise).
And a translation unit below C++20 must stop with shardex's one #error.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, env, cwd=None, what=""):
    p = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        print(f"FAIL {what}: {' '.join(cmd)} exited {p.returncode}\n" + "\n".join(p.stdout.splitlines()[-40:]))
        raise SystemExit(1)
    return p.stdout


def readme_snippet(root):
    """The meson block of docs/building-and-testing.md's 'Using shardex from another build'."""
    text = open(os.path.join(root, "docs", "building-and-testing.md")).read()
    m = re.search(r"under your `subprojects/shardex`, then:\s*```meson\n(.*?)```", text, re.S)
    if not m:
        print("FAIL: docs/building-and-testing.md has no subproject snippet under 'Using shardex from another build'")
        raise SystemExit(1)
    return m.group(1)


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    build, root, mpirun, mpirun_args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    # Nothing of the build tree may leak in: the programs must find the installed library by themselves.
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "PKG_CONFIG_PATH", "CMAKE_PREFIX_PATH")}
    tmp = tempfile.mkdtemp(prefix="shardex-consumers-")
    ok = True
    skipped = []  # consumers that could not be tried here, with the reason
    try:
        dest = os.path.join(tmp, "root")
        start = time.monotonic()
        run(["meson", "install", "-C", build, "--destdir", dest, "--no-rebuild", "--quiet"], env, what="meson install")
        print(f"installed in {time.monotonic() - start:.1f} s")
        pcs = glob.glob(os.path.join(dest, "**", "pkgconfig", "shardex.pc"), recursive=True)
        if len(pcs) != 1:
            print(f"FAIL install: expected one shardex.pc, found {pcs}")
            return 1
        pcdir = os.path.dirname(pcs[0])
        libdir = os.path.dirname(pcdir)
        prefix = libdir
        while not os.path.isdir(os.path.join(prefix, "include", "shardex")) and prefix != dest:
            prefix = os.path.dirname(prefix)
        print(f"installed: prefix {os.path.relpath(prefix, dest)}, libdir {os.path.relpath(libdir, prefix)}")

        # What was installed.
        problems = []
        multiarch = subprocess.run(["c++", "-print-multiarch"], stdout=subprocess.PIPE, text=True).stdout.strip()
        if multiarch and os.path.isdir(f"/usr/lib/{multiarch}") and not libdir.endswith(f"lib/{multiarch}"):
            problems.append(f"the library folder is {libdir}, not lib/{multiarch} (the loader's)")
        libs = sorted(glob.glob(os.path.join(libdir, "libshardex.so*")))
        real = [l for l in libs if not os.path.islink(l)]
        soname = ""
        if real:
            dyn = subprocess.run(["readelf", "-d", real[0]], stdout=subprocess.PIPE, text=True).stdout
            m = re.search(r"SONAME\)\s+Library soname: \[(.*?)\]", dyn)
            soname = m.group(1) if m else ""
        if not re.fullmatch(r"libshardex\.so\.\d+(\.\d+)?", soname):
            problems.append(f"libshardex has no versioned soname ({soname or 'none'}; files {[os.path.basename(l) for l in libs]})")
        if not os.path.isfile(os.path.join(libdir, "cmake", "shardex", "shardexConfig.cmake")):
            problems.append("no cmake/shardex/shardexConfig.cmake")
        gpu = os.path.exists(os.path.join(build, "src", "cuda"))  and glob.glob(os.path.join(build, "src", "cuda", "libshardex_cuda.so*"))
        has_gpu_headers = os.path.isdir(os.path.join(prefix, "include", "shardex", "backend", "nccl"))
        if bool(gpu) != has_gpu_headers:
            problems.append(f"GPU backend built: {bool(gpu)}, but its headers installed: {has_gpu_headers}")
        if bool(gpu) != os.path.isfile(os.path.join(pcdir, "shardex-cuda.pc")):
            problems.append(f"GPU backend built: {bool(gpu)}, but shardex-cuda.pc installed: {not bool(gpu)}")
        for p in problems:
            print(f"FAIL install: {p}")
        ok = ok and not problems
        if not problems:
            print(f"ok   install: {soname}, shardex.pc, shardexConfig.cmake, GPU headers {'in' if gpu else 'left out'}")

        def build_and_run(name, src_dir, configure, build_cmd, exe, extra_env):
            e = dict(env, **extra_env)
            start = time.monotonic()
            run(configure, e, what=f"{name}: configure")
            run(build_cmd, e, what=f"{name}: build")
            built = time.monotonic()
            out = run([mpirun] + mpirun_args + ["-n", "2", exe], e, what=f"{name}: run on 2 ranks")
            line = next((l for l in out.splitlines() if l.startswith("consumer:")), "")
            if not line.endswith("ok"):
                print(f"FAIL {name}: {out[-2000:]}")
                return False
            print(f"ok   {name}: {line} (configured and built in {built - start:.1f} s, ran in {time.monotonic() - built:.1f} s)")
            return True

        def project(name, files):
            d = os.path.join(tmp, name)
            os.makedirs(d)
            shutil.copy(os.path.join(HERE, "app.cpp"), d)
            for fname, text in files.items():
                with open(os.path.join(d, fname), "w") as f:
                    f.write(text)
            return d

        # 1. Meson + pkg-config.
        d = project("pkgconfig", {"meson.build": open(os.path.join(HERE, "pkgconfig", "meson.build")).read()})
        ok &= build_and_run("meson via pkg-config", d, ["meson", "setup", os.path.join(d, "b"), d],
                            ["meson", "compile", "-C", os.path.join(d, "b")], os.path.join(d, "b", "app"),
                            {"PKG_CONFIG_PATH": pcdir})
        # 2. CMake + find_package, with the Ninja generator (ninja is there for Meson; make may not be).
        d = project("cmake", {"CMakeLists.txt": open(os.path.join(HERE, "cmake", "CMakeLists.txt")).read()})
        if shutil.which("cmake") is None:
            skipped.append("cmake via find_package: cmake is not installed (apt-get install cmake)")
            print("SKIP " + skipped[-1])
        else:
          ok &= build_and_run("cmake via find_package", d,
                              ["cmake", "-G", "Ninja", "-S", d, "-B", os.path.join(d, "b"), f"-DCMAKE_PREFIX_PATH={prefix}"],
                              ["cmake", "--build", os.path.join(d, "b")], os.path.join(d, "b", "app"), {})
        # 3. Meson subproject, the docs' snippet verbatim, in a project without cpp_std.
        d = project("subproject", {"meson.build": "project('app', 'cpp')\n" + readme_snippet(root)})
        os.makedirs(os.path.join(d, "subprojects"))
        os.symlink(os.path.abspath(root), os.path.join(d, "subprojects", "shardex"))
        # (the GPU backend is left out, and debug information, only to save CI time:
        # nvcc takes minutes, and the library's compile at -O0 -g 110 s). With clang where
        # there is one: the library from source with a second compiler, in about 60 % of g++'s time.
        clang = {"CC": "clang", "CXX": "clang++"} if shutil.which("clang++") and shutil.which("clang") else {}
        ok &= build_and_run("meson subproject (docs snippet" + (", clang)" if clang else ")"), d,
                            ["meson", "setup", os.path.join(d, "b"), d, "-Dshardex:cuda=disabled", "-Ddebug=false"],
                            ["meson", "compile", "-C", os.path.join(d, "b")], os.path.join(d, "b", "app"), clang)

        # Below C++20: one clear #error, and the compilation stops there.
        p = subprocess.run(["c++", "-std=gnu++17", "-fsyntax-only", "-I" + os.path.join(prefix, "include"),
                            os.path.join(HERE, "app.cpp")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=env)
        errors = [l for l in p.stdout.splitlines() if re.search(r"\berror\b", l) and "^" not in l and not l.lstrip().startswith("|")]
        errors = [l for l in errors if re.match(r"^\S+:\d+:\d+: (fatal )?error", l)]
        if p.returncode != 0 and len(errors) <= 2 and any("shardex needs C++20" in l for l in errors):
            print(f"ok   below C++20: {len(errors)} diagnostics, the first: {errors[0][:140]}")
        else:
            ok = False
            print(f"FAIL below C++20: exit {p.returncode}, {len(errors)} errors:\n" + "\n".join(errors[:8]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if ok and skipped:  # the rest passed, but not every consumer was tried: SKIP, not OK
        print("consumers: SKIP (the others found shardex and ran): " + "; ".join(skipped))
        return 77
    print("consumers: " + ("every build found shardex and ran" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
