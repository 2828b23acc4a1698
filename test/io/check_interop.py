#!/usr/bin/env python3
"""Interop of shardex's safetensors files with Python (issue #14).

    check_interop.py INTEROP_EXE MPIRUN [MPIRUN_ARGS...]

1. shardex writes a file on 2 ranks; Python reads it with a ten-line NumPy
   reader (and with the `safetensors` package where it is installed) and
   checks every value.
2. Python writes a file (with `safetensors.numpy.save_file` where installed,
   else with a NumPy writer of the format); shardex loads it on 3 ranks and
   checks every value.
Needs a Python with NumPy: this one, or /usr/bin/python3; exits 77 (SKIP)
saying so where there is none.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

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


def numpy_read(path):
    """The ten-line reader: the format is 8 bytes of length, JSON, raw data."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    kinds = {"F32": "<f4", "F64": "<f8"}
    out = {}
    for name, t in header.items():
        if name != "__metadata__":
            b, e = t["data_offsets"]
            out[name] = np.frombuffer(raw[8 + n + b:8 + n + e], dtype=kinds[t["dtype"]]).reshape(t["shape"])
    return out, header.get("__metadata__", {})


def numpy_write(path, tensors):
    kinds = {np.dtype("float32"): "F32", np.dtype("float64"): "F64"}
    header, data, at = {}, b"", 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        header[name] = {"dtype": kinds[a.dtype], "shape": list(a.shape), "data_offsets": [at, at + a.nbytes]}
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
            print("safetensors package not installed: read with the NumPy reader only")
        # 2. Python -> shardex
        path = os.path.join(d, "from_python.safetensors")
        i, j, k = np.meshgrid(np.arange(2), np.arange(3), np.arange(4), indexing="ij")
        tensors = {"x": (i * 100 + j * 10 + k + 0.25).astype(np.float32), "y": (np.arange(5) ** 2 / 8).astype(np.float64)}
        if st is not None:
            st.save_file(tensors, path)
            print("written by safetensors.numpy.save_file")
        else:
            numpy_write(path, tensors)
            print("written by the NumPy writer (safetensors package not installed)")
        subprocess.run([mpirun] + mpirun_args + ["-n", "3", exe, "read", path], check=True)
    print("interop: both directions agree")


if __name__ == "__main__":
    main()
