#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Interop of shardex's safetensors files with Python (issue #14).

    check_interop.py INTEROP_EXE MPIRUN [MPIRUN_ARGS...]

1. shardex writes a file on 2 ranks; Python reads it with a ten-line NumPy
   reader (and with the `safetensors` package where it is installed) and
   checks every value.
2. Python writes a file (with `safetensors.numpy.save_file` where installed,
   else with a NumPy writer of the format); shardex loads it on 3 ranks and
   checks every value.
3. shardex saves float32 and float64 tensors as F16 and BF16 on 3 ranks;
   the bits must be NumPy's own rounding to float16 and PyTorch's to
   bfloat16 (where torch is installed).
4. Python writes F16 (and, with torch, BF16) tensors next to its own
   widening of them to float32; shardex loads both as float and as double
   on 2 ranks and compares the bits.
Needs a Python with NumPy: this one, or /usr/bin/python3; exits 77 (SKIP)
saying so where there is none. The parts that need the safetensors package or
torch print "SKIP (part) ..." with the reason where those are not installed
(Debian 12 packages neither); the NumPy parts run either way.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_peers import peers_hint  # noqa: E402

try:
    import numpy as np
except ImportError:
    for other in ("/usr/bin/python3",):
        if os.path.realpath(other) != os.path.realpath(sys.executable) and os.path.exists(other):
            if subprocess.run([other, "-c", "import numpy"], capture_output=True).returncode == 0:
                os.execv(other, [other] + sys.argv)
    print("SKIP: no Python with NumPy here (tried " + sys.executable + " and /usr/bin/python3); pip install numpy")
    sys.exit(77)

try:
    import safetensors.numpy as st
except ImportError:
    st = None

try:
    import torch
except ImportError:
    torch = None


def numpy_read(path):
    """The ten-line reader: the format is 8 bytes of length, JSON, raw data."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    kinds = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "BF16": "<u2"}  # BF16: its bits
    out = {}
    for name, t in header.items():
        if name != "__metadata__":
            b, e = t["data_offsets"]
            out[name] = np.frombuffer(raw[8 + n + b:8 + n + e], dtype=kinds[t["dtype"]]).reshape(t["shape"])
    return out, header.get("__metadata__", {})


def numpy_write(path, tensors, dtypes=None):
    """The format by hand; `dtypes` names a dtype NumPy lacks (BF16: uint16 bits)."""
    kinds = {np.dtype("float32"): "F32", np.dtype("float64"): "F64", np.dtype("float16"): "F16"}
    header, data, at = {}, b"", 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        header[name] = {"dtype": (dtypes or {}).get(name) or kinds[a.dtype], "shape": list(a.shape), "data_offsets": [at, at + a.nbytes]}
        data += a.astype(a.dtype.newbyteorder("<")).tobytes()
        at += a.nbytes
    text = json.dumps(header).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + data)


def main():
    exe, mpirun, mpirun_args = sys.argv[1], sys.argv[2], sys.argv[3:]
    with tempfile.TemporaryDirectory() as d:
        # 1. shardex -> Python
        path = os.path.join(d, "from_shardex.safetensors")
        subprocess.run([mpirun] + mpirun_args + ["-n", "2", exe, "write", path], check=True)
        a_expected = (np.arange(3)[:, None] * 10 + np.arange(5)[None, :] + 0.5).astype(np.float32)
        b_expected = -1.25 * np.arange(4, dtype=np.float64)
        got, meta = numpy_read(path)
        assert got["a"].dtype == np.float32 and np.array_equal(got["a"], a_expected), got["a"]
        assert got["b"].dtype == np.float64 and np.array_equal(got["b"], b_expected), got["b"]
        assert meta == {"written_by": "shardex"}, meta
        print("NumPy reader: shardex's file holds the expected a (float32 3x5) and b (float64 4)")
        if st is not None:
            lib = st.load_file(path)
            assert np.array_equal(lib["a"], a_expected) and np.array_equal(lib["b"], b_expected)
            print("safetensors.numpy.load_file: the same")
        else:
            print(f"SKIP (part) safetensors.numpy.load_file: the safetensors package is not installed for {sys.executable}"
                  f" ({peers_hint()}); read with the NumPy reader only")
        # 2. Python -> shardex
        path = os.path.join(d, "from_python.safetensors")
        i, j, k = np.meshgrid(np.arange(2), np.arange(3), np.arange(4), indexing="ij")
        tensors = {"x": (i * 100 + j * 10 + k + 0.25).astype(np.float32), "y": (np.arange(5) ** 2 / 8).astype(np.float64)}
        if st is not None:
            st.save_file(tensors, path)
            print("written by safetensors.numpy.save_file")
        else:
            numpy_write(path, tensors)
            print(f"SKIP (part) safetensors.numpy.save_file: the safetensors package is not installed ({peers_hint()});"
                  " written by the NumPy writer of the format instead")
        subprocess.run([mpirun] + mpirun_args + ["-n", "3", exe, "read", path], check=True)
        narrowing(d, exe, mpirun, mpirun_args)
        widening(d, exe, mpirun, mpirun_args)
    print("interop: both directions agree")


def bits16(a):
    return np.ascontiguousarray(a).view(np.uint16)


def narrowing(d, exe, mpirun, mpirun_args):
    """3. shardex's F16 and BF16 against NumPy's and PyTorch's rounding."""
    path = os.path.join(d, "narrow.safetensors")
    subprocess.run([mpirun] + mpirun_args + ["-n", "3", exe, "narrow", path], check=True)
    got, _ = numpy_read(path)
    v32, v64 = got["v32"], got["v64"]
    assert v32.shape == (97,) and np.array_equal(v32, v64.astype(np.float32))
    assert np.isinf(v64.astype(np.float16)).any() and (np.abs(v64.astype(np.float16)) < 6.1e-5).any()  # past the top, subnormals
    assert np.array_equal(bits16(got["v32_f16"]), bits16(v32.astype(np.float16))), "float32 -> F16 differs from NumPy"
    assert np.array_equal(bits16(got["v64_f16"]), bits16(v64.astype(np.float16))), "float64 -> F16 differs from NumPy"
    print("F16: shardex's rounding of float32 and float64 is NumPy's, bit for bit (97 values, subnormal to inf)")
    if torch is not None:
        expected = torch.from_numpy(v32.copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        assert np.array_equal(got["v32_bf16"], expected), "float32 -> BF16 differs from PyTorch"
        print("BF16: shardex's rounding of float32 is PyTorch's, bit for bit")
    else:
        print(f"SKIP (part) BF16 against PyTorch's rounding: torch is not installed for {sys.executable}")


def widening(d, exe, mpirun, mpirun_args):
    """4. Python's F16 (and BF16) tensors loaded by shardex as float and double."""
    path = os.path.join(d, "widen.safetensors")
    rng = np.random.default_rng(5)
    values = np.ldexp(rng.uniform(1, 2, 200), rng.integers(-26, 20, 200)) * rng.choice([-1.0, 1.0], 200)
    values[:4] = [np.inf, -np.inf, np.nan, -0.0]
    h = values.astype(np.float16)
    tensors, dtypes = {"h": h, "h_f32": h.astype(np.float32)}, {}
    if torch is not None:
        bf = torch.from_numpy(values.astype(np.float32)).to(torch.bfloat16)
        tensors["bf"] = bf.view(torch.int16).numpy().view(np.uint16)
        tensors["bf_f32"] = bf.float().numpy()
        dtypes["bf"] = "BF16"
    if torch is not None and st is not None:
        import safetensors.torch
        as_torch = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in tensors.items() if k != "bf"}
        safetensors.torch.save_file(dict(as_torch, bf=bf), path)
        print("F16 and BF16 written by safetensors.torch.save_file")
    else:
        numpy_write(path, tensors, dtypes)
    subprocess.run([mpirun] + mpirun_args + ["-n", "2", exe, "widen", path], check=True)
    print("shardex loads Python's F16" + (" and BF16" if torch is not None else "") + " exactly as float and as double")


if __name__ == "__main__":
    main()
