#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the fuzzer's seed corpus (test/fuzz/corpus/*.safetensors): small valid files of every
dtype, and the malformed cases of docs/guides/untrusted-files.md. Run it again after changing it
(python3 test/fuzz/make_corpus.py); the files are committed, so the fuzzer does not need it."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")
SIZES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
         "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


def file_of(header_text, data=b"", length=None):
    h = header_text.encode() if isinstance(header_text, str) else header_text
    h += b" " * (-(8 + len(h)) % 8)
    return struct.pack("<Q", len(h) if length is None else length) + h + data


def tensors(*specs, metadata=None):
    """specs: (name, dtype, shape); laid out in order, as shardex writes them."""
    parts, at = [], 0
    if metadata:
        parts.append('"__metadata__":{' + ",".join('"%s":"%s"' % kv for kv in metadata.items()) + "}")
    for name, dtype, shape in specs:
        n = SIZES[dtype]
        for e in shape:
            n *= e
        parts.append('"%s":{"dtype":"%s","shape":[%s],"data_offsets":[%d,%d]}' %
                     (name, dtype, ",".join(map(str, shape)), at, at + n))
        at += n
    return "{" + ",".join(parts) + "}", at


def valid(*specs, metadata=None):
    text, n = tensors(*specs, metadata=metadata)
    return file_of(text, bytes((7 * i + 3) & 0xFF for i in range(n)))


def main():
    os.makedirs(OUT, exist_ok=True)
    cases = {}
    for dtype in SIZES:
        cases["valid_" + dtype.lower()] = valid(("t", dtype, [2, 3]))
    cases["valid_metadata"] = valid(("a", "F32", [4]), ("b", "BF16", [2, 2]), metadata={"step": "5", "format": "pt"})
    cases["valid_0d_and_empty"] = valid(("scalar", "F64", []), ("empty", "F32", [0, 3]), ("z", "F16", [0]))
    cases["valid_escapes"] = valid(('q\\"\\\\\\n\\t\\u0001\\u00e9\\ud83d\\ude00', "F32", [1]))
    cases["valid_many"] = valid(*[("w%d" % k, ["F32", "F64", "BF16", "F16"][k % 4], [k % 3 + 1, 2]) for k in range(12)])
    text, n = tensors(("t", "F32", [2]))
    good = text
    cases["bad_short"] = b"\x10\x00\x00"
    cases["bad_length_huge"] = struct.pack("<Q", 100_000_001) + b"{}"
    cases["bad_length_past_end"] = file_of(good, b"\0" * 8, length=4096)
    cases["bad_not_json"] = file_of("{@}")
    cases["bad_number_1.2.3"] = file_of('{"t":{"dtype":"F32","shape":[1.2.3],"data_offsets":[0,4]}}', b"\0" * 4)
    cases["bad_leading_zero"] = file_of('{"t":{"dtype":"F32","shape":[01],"data_offsets":[0,4]}}', b"\0" * 4)
    cases["bad_lone_surrogate"] = file_of('{"\\ud800":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4)
    cases["bad_utf8"] = file_of(b'{"\xff":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4)
    cases["bad_duplicate_tensor"] = file_of('{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                                            '"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', b"\0" * 8)
    cases["bad_duplicate_key"] = file_of('{"t":{"dtype":"F32","dtype":"F64","shape":[1],"data_offsets":[0,4]}}',
                                         b"\0" * 4)
    cases["bad_duplicate_metadata"] = file_of('{"__metadata__":{"k":"a","k":"b"}}')
    cases["bad_not_object"] = file_of("[1,2]")
    cases["bad_trailing"] = file_of('{} {}')
    cases["bad_deep"] = file_of('{"t":' + "[" * 40 + "]" * 40 + "}")
    cases["bad_dtype"] = file_of('{"t":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4)
    cases["bad_dtype_number"] = file_of('{"t":{"dtype":4,"shape":[1],"data_offsets":[0,4]}}', b"\0" * 4)
    cases["bad_no_shape"] = file_of('{"t":{"dtype":"F32","data_offsets":[0,4]}}', b"\0" * 4)
    cases["bad_shape_negative"] = file_of('{"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}', b"\0" * 4)
    cases["bad_shape_float"] = file_of('{"t":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}}', b"\0" * 4)
    cases["bad_shape_overflow"] = file_of('{"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}')
    cases["bad_shape_zero_overflow"] = file_of(
        '{"t":{"dtype":"U8","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}}')
    cases["bad_offsets_one"] = file_of('{"t":{"dtype":"F32","shape":[1],"data_offsets":[0]}}', b"\0" * 4)
    cases["bad_offsets_reversed"] = file_of('{"t":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}', b"\0" * 4)
    cases["bad_offsets_2p63"] = file_of('{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,9223372036854775808]}}')
    cases["bad_offsets_size"] = file_of('{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}', b"\0" * 4)
    cases["bad_offsets_past_end"] = file_of('{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', b"\0" * 4)
    cases["bad_overlap"] = file_of('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                                   '"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', b"\0" * 8)
    cases["bad_hole"] = file_of('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                                '"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}', b"\0" * 12)
    cases["bad_extra_bytes"] = file_of(good, b"\0" * 12)
    cases["bad_metadata_array"] = file_of('{"__metadata__":["a"]}')
    cases["bad_metadata_value"] = file_of('{"__metadata__":{"step":5}}')
    cases["bad_tensor_string"] = file_of('{"t":"F32"}')
    cases["bad_comment"] = file_of('{/* x */}')
    for name, data in cases.items():
        with open(os.path.join(OUT, name + ".safetensors"), "wb") as f:
            f.write(data)
    print("%d files in %s" % (len(cases), OUT))


if __name__ == "__main__":
    main()
