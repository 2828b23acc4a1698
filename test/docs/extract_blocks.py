#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Turn every ```cpp block of README.md and docs/**/*.md into compiled code.

usage:
  extract_blocks.py SRC_ROOT --pages                      list the pages scanned (for Meson's depend_files)
  extract_blocks.py SRC_ROOT --runs                       list the blocks with a shown output: "ID NP"
  extract_blocks.py SRC_ROOT --generate OUT_DIR CHUNKS    write docs_blocks_main.cpp, docs_blocks_0..CHUNKS-1.cpp
                                                          and docs_blocks_gpu.cpp into OUT_DIR
  extract_blocks.py SRC_ROOT --single PAGE OUT.cpp        one translation unit of PAGE's blocks (the fixture test)

The conventions a page follows (docs/building-and-testing.md, "The docs test", says the same):
- Only blocks fenced as ```cpp are compiled; ```sh, ```text, ```console, ```meson, ```cmake are not.
- A block with `int main(` is a whole program. Its `#include` lines go to the top of the generated
  file, the rest into a namespace of its own, `main` renamed; `docs_blocks ID` runs it.
- Any other block is a fragment: the body of a function `void run(const mpi::Communicator& comm)`
  with `using namespace shardex;`, so `comm` (the world) is in scope. Its output, when run, is rank 0's.
- An HTML comment right before a block (blank lines allowed between) sets it up, unseen on the page:
      <!-- docs-test [namespace]
      code placed before the block (declarations of the tensors it uses, say)
      // after the block
      code placed after it (that line separates the two; both parts are optional)
      -->
  `namespace` makes the block declarations at namespace scope (compiled, never run).
  `same-as=PATH` says the block is a verbatim part of the repository's file PATH (an example
  shown on a page): the test `docs blocks compiled` fails when the two differ.
- A block including <shardex/cuda.hpp> goes into docs_blocks_gpu.cpp, compiled where the GPU
  backend is built.
- `<!-- output of the block above [np=N] [mask=REGEX] -->` right after a block (blank lines allowed)
  and a fenced block after it: the test runs the block on N ranks (default 2) and compares what
  it prints with that fenced block, line by line, after trailing blanks are dropped. A first line
  starting with "$ " is the command shown, not output. Text matching REGEX (a Python regular
  expression) is replaced by "#" on both sides before the comparison, for numbers that vary.
The generated code carries #line directives, so a compile error names the page and its line.
"""
import os, re, sys

FENCE = re.compile(r"^(\s*)```+\s*([A-Za-z0-9_+-]*)\s*$")
SETUP = re.compile(r"^\s*<!--\s*docs-test\b(.*)$")
OUTPUT = re.compile(r"^\s*<!--\s*output of the block above\b(.*?)-->\s*$")
MAIN = re.compile(r"\bint\s+main\s*\(")
AFTER = "// after the block"
INCLUDE = re.compile(r"^\s*#\s*include\b")


class Block:
    def __init__(self, page, line, code):
        self.page, self.line, self.code = page, line, code  # line: 1-based line of the block's first code line
        self.setup, self.setup_line, self.scope = [], 0, "function"
        self.after, self.after_line = [], 0
        self.same_as = None
        self.output, self.np, self.mask = None, 2, None
        self.program = any(MAIN.search(l) for l in code)
        self.gpu = any(INCLUDE.match(l) and "shardex/cuda.hpp" in l for l in code)

    @property
    def id(self):
        return f"{self.page}:{self.line}"

    @property
    def kind(self):
        return "program" if self.program else ("declarations" if self.scope == "namespace" else "fragment")


def pages(root):
    out = ["README.md"] if os.path.exists(os.path.join(root, "README.md")) else []
    for d, subdirs, files in os.walk(os.path.join(root, "docs")):
        subdirs.sort()
        for f in sorted(files):
            if f.endswith(".md"):
                out.append(os.path.relpath(os.path.join(d, f), root))
    return out


def parse(root, page):
    """The page's ```cpp blocks, each with its set-up comment and its shown output."""
    lines = open(os.path.join(root, page), encoding="utf-8").read().split("\n")
    blocks, i, pending = [], 0, None  # pending: (options, code lines, first line) of a docs-test comment
    last = None  # the last cpp block, while only blank lines follow it
    while i < len(lines):
        l = lines[i]
        m = SETUP.match(l)
        if m:
            rest, body, start = m.group(1), [], i + 2
            if "-->" in rest:
                opts = rest.split("-->")[0]
            else:
                opts = rest
                i += 1
                while i < len(lines) and "-->" not in lines[i]:
                    body.append(lines[i])
                    i += 1
                if i == len(lines):
                    sys.exit(f"{page}:{start - 1}: docs-test comment without its closing -->")
            pending = (opts.split(), body, start)
            i += 1
            continue
        m = OUTPUT.match(l)
        if m:
            if last is None:
                sys.exit(f"{page}:{i + 1}: 'output of the block above' follows no ```cpp block")
            opts = m.group(1)
            np = re.search(r"\bnp=(\d+)", opts)
            mask = re.search(r"\bmask=(.*)$", opts.strip())
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j == len(lines) or not FENCE.match(lines[j]):
                sys.exit(f"{page}:{i + 1}: 'output of the block above' is not followed by a fenced block")
            k = j + 1
            while k < len(lines) and not FENCE.match(lines[k]):
                k += 1
            last.output = lines[j + 1:k]
            last.np = int(np.group(1)) if np else 2
            last.mask = mask.group(1).strip() if mask else None
            last, i = None, k + 1
            continue
        m = FENCE.match(l)
        if m:
            lang, j = m.group(2), i + 1
            while j < len(lines) and not FENCE.match(lines[j]):
                j += 1
            if j == len(lines):
                sys.exit(f"{page}:{i + 1}: a code block that is never closed")
            indent = len(m.group(1))
            code = [c[indent:] if c[:indent].strip() == "" else c for c in lines[i + 1:j]]
            if lang in ("cpp", "c++"):
                b = Block(page, i + 2, code)
                if pending:
                    opts, body, b.setup_line = pending
                    cut = next((n for n, c in enumerate(body) if c.strip() == AFTER), len(body))
                    b.setup, b.after, b.after_line = body[:cut], body[cut + 1:], b.setup_line + cut + 1
                    b.scope = "namespace" if "namespace" in opts else "function"
                    b.same_as = next((o.split("=", 1)[1] for o in opts if o.startswith("same-as=")), None)
                blocks.append(b)
                last = b
            else:
                last = None
            pending, i = None, j + 1
            continue
        if l.strip():  # a set-up comment or an output marker applies only across blank lines
            pending, last = None, None
        i += 1
    return blocks


def scan(root, page_list=None):
    out = []
    for p in page_list or pages(root):
        out += parse(root, p)
    return out


HEADER = """// Generated by test/docs/extract_blocks.py from the ```cpp blocks of README.md and docs/: do not edit.
// The pages show fragments, so variables they declare and never use are no error here.
#pragma GCC diagnostic ignored "-Wunused-variable"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wunused-local-typedefs"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <iostream>
#include "docs_block.hpp"
"""


def quote(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def unit(blocks, name, first_index):
    """One translation unit: hoisted includes, one namespace per block, a registration function."""
    includes, bodies, entries = [], [], []
    for n, b in enumerate(blocks, first_index):
        ns = f"docs_block_{n}"
        code = []
        for l in b.code:
            if INCLUDE.match(l):
                if l.strip() not in includes:
                    includes.append(l.strip())
                code.append("")  # keeps the #line numbering
            else:
                code.append(MAIN.sub("auto block_main(", l) if b.program else l)
        src = [f"namespace {ns} {{"]
        if b.program:
            src += [f'#line {b.line} {quote(b.page)}'] + code
        else:
            src.append("using namespace shardex;")
            if b.scope == "function":
                src.append("[[maybe_unused]] void run([[maybe_unused]] const shardex::mpi::Communicator& comm) {")
            if b.setup:
                src += [f'#line {b.setup_line} {quote(b.page)}'] + b.setup
            src += [f'#line {b.line} {quote(b.page)}'] + code
            if b.after:
                src += [f'#line {b.after_line} {quote(b.page)}'] + b.after
            if b.scope == "function":
                src.append("}")
        src.append(f"}}  // namespace {ns}")
        bodies.append("\n".join(src))
        if b.program:
            entries.append(f'  out.push_back({{{quote(b.id)}, "program", &docs::call_main<&{ns}::block_main>, nullptr}});')
        elif b.scope == "function":
            entries.append(f'  out.push_back({{{quote(b.id)}, "fragment", nullptr, &{ns}::run}});')
        else:
            entries.append(f'  out.push_back({{{quote(b.id)}, "declarations", nullptr, nullptr}});')
    text = HEADER + "\n".join(includes) + "\n\n" + "\n\n".join(bodies) + "\n\n"
    text += '#line 1 "generated"\n'
    text += f"void {name}(std::vector<docs::Entry>& out) {{\n" + "\n".join(entries) + "\n}\n"
    return text


def write_if_changed(path, text):
    if os.path.exists(path) and open(path, encoding="utf-8").read() == text:
        return  # an unchanged file keeps its time stamp, so ninja recompiles only what changed
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def generate(root, out_dir, chunks):
    blocks = scan(root)
    host = [b for b in blocks if not b.gpu]
    gpu = [b for b in blocks if b.gpu]
    # Pages go to the chunk with the fewest blocks so far, in reading order, so that an edit of
    # one page recompiles one chunk and the chunks compile side by side.
    by_page = {}
    for b in host:
        by_page.setdefault(b.page, []).append(b)
    groups = [[] for _ in range(chunks)]
    for page in sorted(by_page, key=lambda p: -len(by_page[p])):
        min(groups, key=len).extend(by_page[page])
    index = 0
    for k, g in enumerate(groups):
        write_if_changed(os.path.join(out_dir, f"docs_blocks_{k}.cpp"), unit(g, f"docs_register_{k}", index))
        index += len(g)
    write_if_changed(os.path.join(out_dir, "docs_blocks_gpu.cpp"), unit(gpu, "docs_register_gpu", index))
    decls = "".join(f"void docs_register_{k}(std::vector<docs::Entry>&);\n" for k in range(chunks))
    calls = "".join(f"  docs_register_{k}(out);\n" for k in range(chunks))
    main = ('// Generated by test/docs/extract_blocks.py: do not edit.\n#include "docs_block.hpp"\n\n' + decls +
            "#ifdef DOCS_BLOCKS_GPU\nvoid docs_register_gpu(std::vector<docs::Entry>&);\n#endif\n\n"
            "std::vector<docs::Entry> docs::all_blocks() {\n  std::vector<docs::Entry> out;\n" + calls +
            "#ifdef DOCS_BLOCKS_GPU\n  docs_register_gpu(out);\n#endif\n  return out;\n}\n")
    write_if_changed(os.path.join(out_dir, "docs_blocks_main.cpp"), main)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    root, mode = sys.argv[1], sys.argv[2]
    if mode == "--pages":
        print("\n".join(pages(root)))
    elif mode == "--runs":
        for b in scan(root):
            if b.output is not None:
                if b.scope == "namespace":
                    sys.exit(f"{b.id}: a block of declarations has nothing to run, but an output follows it")
                print(f"{b.id} {b.np}{' gpu' if b.gpu else ''}")
    elif mode == "--generate":
        generate(root, sys.argv[3], int(sys.argv[4]))
    elif mode == "--single":
        write_if_changed(sys.argv[4], unit(parse(root, sys.argv[3]), "docs_register_single", 0))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
