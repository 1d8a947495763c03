#!/usr/bin/env python3
"""The module graph of every crate under crates/, file by file.

A node is a module file of a crate's src/ (lib.rs, a.rs, dir/mod.rs,
dir/b.rs), found by following the `mod` declarations from the crate's roots
(lib.rs, main.rs, bin/*.rs). There is an edge X -> Y when X's code names Y:
through a `crate::`, `super::` or `self::` path, a path that starts with a
submodule declared in scope (`child::f`), or a `use` tree of these
(`use crate::a::{b, c::d}`). A path is resolved to the deepest module file
it reaches, so `crate::a::b::C` is a/b.rs when that file exists and a.rs
otherwise. Comments (doc comments with their examples too), strings and
`#[cfg(test)]` items are left out; a `mod b;` declaration is no edge.

A type whose inherent `impl` blocks are spread over several files (the
core's `CtxState`, one stage of the pipeline per file) makes edges too: a
call `.m(` (or `Self::m(`, `T::m(`) in X is an edge to the file that
defines `m`, when `m` is a method of such a type `T`, defined in one
file, no other method of the crate (of another type, or of a trait impl)
has its name, and std's types have no method of that name
(COMMON_METHODS: `.sum()`, `.len()`). So "each stage file calls only the
files below it" is checked like the paths: a call back up makes a
circle.

Prints each crate's graph (`file: deps...`) and the strongly connected
components with more than one file, each with the lines that make its
edges. Exits 1 if any crate has a circle.

Usage: scripts/module_graph.py [CRATE...]   (default: every crate under
crates/ with a src/, found anew at each run)
"""

import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The start of a string literal: "", b"", c"", r#""#, br"", cr#""#.
STRING_START = re.compile(r"(b|c)?(r)?(#*)\"")
NUMBER = re.compile(r"[0-9][0-9A-Za-z_.]*")


def tokens(text):
    """Rust tokens of `text` with their line numbers: identifiers and
    punctuation (`::` as one token). Comments, string, byte-string and char
    literals are dropped, and so are numbers; lifetimes become `'`."""
    out = []
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    line += text[i] == "\n"
                    i += 1
        elif c == '"' or (c in "bcr" and STRING_START.match(text, i)):
            # A string: "...", b"...", c"...", r#"..."#, br"...", cr#"..."#.
            m = STRING_START.match(text, i)
            raw, hashes = m.group(2), m.group(3)
            i = m.end()
            if raw:
                end = text.find('"' + hashes, i)
                end = n if end < 0 else end
                line += text.count("\n", i, end)
                i = end + 1 + len(hashes)
            else:
                while i < n and text[i] != '"':
                    if text[i] == "\\":
                        i += 1
                    line += text[i] == "\n" if i < n else 0
                    i += 1
                i += 1
        elif c == "'" or (c == "b" and text.startswith("b'", i)):
            # A char literal ('x', '\n', b'x') or a lifetime ('a).
            j = i + 1 if c == "'" else i + 2
            if j < n and text[j] == "\\":
                k = j + 2
                while k < n and text[k] != "'":
                    k += 1
                i = k + 1
            elif j + 1 < n and text[j + 1] == "'":
                i = j + 2
            elif c == "b":
                out.append(("b", line))
                i += 1
            else:
                out.append(("'", line))
                i += 1
        elif c.isalpha() or c == "_":
            m = IDENT.match(text, i)
            word = m.group(0)
            i = m.end()
            if word == "r" and text.startswith("#", i) and IDENT.match(text, i + 1):
                m = IDENT.match(text, i + 1)
                word, i = m.group(0), m.end()
            out.append((word, line))
        elif c.isdigit():
            m = NUMBER.match(text, i)
            # 1..2 is two numbers and a range: stop a number at `..`.
            num = m.group(0).split("..")[0]
            i += max(len(num), 1)
        elif text.startswith("::", i):
            out.append(("::", line))
            i += 2
        else:
            out.append((c, line))
            i += 1
    return out


def matching(toks, i):
    """Index just past the bracket group opening at toks[i]."""
    pairs = {"{": "}", "(": ")", "[": "]"}
    stack = []
    while i < len(toks):
        t = toks[i][0]
        if t in pairs:
            stack.append(pairs[t])
        elif stack and t == stack[-1]:
            stack.pop()
            if not stack:
                return i + 1
        i += 1
    return i


def test_only(attr):
    """True for the tokens of `#[cfg(test)]` or `#[cfg(all(.., test, ..))]`."""
    words = [t for t, _ in attr]
    if words[:4] != ["#", "[", "cfg", "("] or "not" in words or "any" in words:
        return False
    return "test" in words


def strip_test_items(toks):
    """`toks` without the items under a test-only cfg attribute."""
    out, i = [], 0
    while i < len(toks):
        if toks[i][0] == "#" and i + 1 < len(toks) and toks[i + 1][0] == "[":
            end = matching(toks, i + 1)
            if test_only(toks[i:end]):
                i = skip_item(toks, end)
                continue
            out.extend(toks[i:end])
            i = end
            continue
        out.append(toks[i])
        i += 1
    return out


def skip_item(toks, i):
    """Index past the item starting at toks[i] (after its attributes)."""
    while i + 1 < len(toks) and toks[i][0] == "#" and toks[i + 1][0] == "[":
        i = matching(toks, i + 1)
    words = [t for t, _ in toks[i : i + 4]]
    is_use = "use" in words
    # A field or a variant ends at a comma; an item's commas are inside it.
    is_item = bool(ITEM_WORDS.intersection(words))
    while i < len(toks):
        t = toks[i][0]
        if t == ";":
            return i + 1
        if t == "," and not is_item:
            return i + 1
        if t == "}":
            return i
        if t in "([":
            i = matching(toks, i)
            continue
        if t == "{":
            end = matching(toks, i)
            if is_use:
                i = end
                continue
            return end
        i += 1
    return i


ITEM_WORDS = {
    "fn", "mod", "use", "impl", "struct", "enum", "union", "trait", "type",
    "const", "static", "extern", "macro_rules", "let",
}


class Crate:
    def __init__(self, src):
        self.src = src
        # module path (tuple) -> node (file path under src/)
        self.modules = {}
        # node -> token list (test items stripped)
        self.code = {}
        # node -> its module path
        self.path_of = {}
        # method name -> the one file defining it in a split impl (lazy)
        self._split = None

    def load(self):
        for root in ("lib.rs", "main.rs"):
            if os.path.exists(os.path.join(self.src, root)):
                self.add_file(root, ())
        bins = os.path.join(self.src, "bin")
        if os.path.isdir(bins):
            for f in sorted(os.listdir(bins)):
                if f.endswith(".rs"):
                    self.add_file("bin/" + f, ())
                elif os.path.exists(os.path.join(bins, f, "main.rs")):
                    self.add_file("bin/%s/main.rs" % f, ())

    def add_file(self, rel, modpath):
        with open(os.path.join(self.src, rel), encoding="utf-8") as fh:
            toks = strip_test_items(tokens(fh.read()))
        self.code[rel] = toks
        self.path_of[rel] = modpath
        self.modules[modpath] = rel
        base = os.path.basename(rel)
        if base in ("lib.rs", "main.rs", "mod.rs"):
            moddir = os.path.dirname(rel)
        else:
            moddir = rel[: -len(".rs")]
        self.declarations(rel, toks, modpath, moddir)

    def declarations(self, rel, toks, modpath, moddir):
        """Follow `mod x;` and inline `mod x { ... }` in a file's tokens."""
        scopes = []  # (brace depth at which the inline module closes, path, dir)
        depth, i = 0, 0
        path_attr = None
        while i < len(toks):
            t = toks[i][0]
            if t == "#" and i + 1 < len(toks) and toks[i + 1][0] == "[":
                end = matching(toks, i + 1)
                words = [w for w, _ in toks[i + 2 : end - 1]]
                if words[:1] == ["path"]:
                    # The literal was dropped with the strings: read it again.
                    path_attr = self.path_literal(rel, toks[i][1])
                i = end
                continue
            if t == "{":
                depth += 1
            elif t == "}":
                depth -= 1
                while scopes and scopes[-1][0] > depth:
                    scopes.pop()
            elif (
                t == "mod"
                and i + 2 < len(toks)
                and IDENT.fullmatch(toks[i + 1][0])
                and toks[i + 2][0] in (";", "{")
            ):
                name = toks[i + 1][0]
                cur_path = scopes[-1][1] if scopes else modpath
                cur_dir = scopes[-1][2] if scopes else moddir
                child = cur_path + (name,)
                if toks[i + 2][0] == "{":
                    self.modules.setdefault(child, rel)
                    scopes.append((depth + 1, child, os.path.join(cur_dir, name)))
                else:
                    if path_attr:
                        f = os.path.normpath(os.path.join(os.path.dirname(rel), path_attr))
                    else:
                        f = os.path.join(cur_dir, name + ".rs")
                        if not os.path.exists(os.path.join(self.src, f)):
                            f = os.path.join(cur_dir, name, "mod.rs")
                    if os.path.exists(os.path.join(self.src, f)) and f not in self.code:
                        self.add_file(f, child)
                path_attr = None
                i += 2
                continue
            elif t in (";", "}"):
                path_attr = None
            i += 1

    def path_literal(self, rel, line):
        with open(os.path.join(self.src, rel), encoding="utf-8") as fh:
            text = fh.read().split("\n")[line - 1]
        m = re.search(r'path\s*=\s*"([^"]+)"', text)
        return m.group(1) if m else None

    def resolve(self, path):
        """The file of the deepest known module on `path`."""
        for k in range(len(path), -1, -1):
            if path[:k] in self.modules:
                return self.modules[path[:k]]
        return None

    def split_methods(self):
        """{method name: (file, type)} of the methods that a call resolves
        to one file by name: methods of a type whose inherent impls are in
        more than one file, defined once, and no other method of the crate
        with that name. Cached."""
        if self._split is not None:
            return self._split
        defs = {}  # name -> [(type or None for a trait impl, file)]
        impl_files = {}  # type -> files with an inherent impl of it
        for rel, toks in self.code.items():
            for ty, names in impl_blocks(toks):
                if ty is not None:
                    impl_files.setdefault(ty, set()).add(rel)
                for n in names:
                    defs.setdefault(n, []).append((ty, rel))
        out = {}
        for name, where in defs.items():
            if len(where) != 1 or name in COMMON_METHODS:
                continue
            ty, rel = where[0]
            if ty is not None and len(impl_files.get(ty, ())) > 1:
                out[name] = (rel, ty)
        self._split = out
        return out

    def method_edges(self, rel, found):
        """Add to `found` the files whose split-impl methods `rel` calls:
        as a method (`x.m(`) or through its type (`Self::m(`, `T::m(`)."""
        methods = self.split_methods()
        toks = self.code[rel]
        for i in range(1, len(toks) - 1):
            name = toks[i][0]
            if toks[i + 1][0] != "(" or name not in methods:
                continue
            dep, ty = methods[name]
            prev = toks[i - 1][0]
            if prev == ".":
                shown = "." + name + "("
            elif prev == "::" and i >= 2 and toks[i - 2][0] in ("Self", ty):
                shown = toks[i - 2][0] + "::" + name + "("
            else:
                continue
            if dep != rel and dep not in found:
                found[dep] = (toks[i][1], shown)

    def edges(self, rel):
        """{dep file: (line, path text)} of one file."""
        found = self.path_edges(rel)
        self.method_edges(rel, found)
        return found

    def path_edges(self, rel):
        """{dep file: (line, path text)} of one file's paths."""
        toks = self.code[rel]
        modpath = self.path_of[rel]
        found = {}
        scopes = []  # (closing depth, module path) of inline modules
        depth, i = 0, 0

        def add(path, line, text):
            dep = self.resolve(path)
            if dep is not None and dep != rel and dep not in found:
                found[dep] = (line, text)

        while i < len(toks):
            t, line = toks[i]
            prev = toks[i - 1][0] if i else ""
            if t == "{":
                depth += 1
            elif t == "}":
                depth -= 1
                while scopes and scopes[-1][0] > depth:
                    scopes.pop()
            elif t == "mod" and i + 2 < len(toks) and toks[i + 2][0] in (";", "{"):
                # A declaration is no edge.
                if toks[i + 2][0] == "{":
                    cur = scopes[-1][1] if scopes else modpath
                    scopes.append((depth + 1, cur + (toks[i + 1][0],)))
                i += 2
                continue
            elif t == "::" and i + 1 < len(toks) and toks[i + 1][0] == "{":
                # The use tree of a path that names no module of this crate
                # (`std::{..}`): its parts start no path of ours.
                i = matching(toks, i + 1)
                continue
            cur = scopes[-1][1] if scopes else modpath
            starts = prev not in ("::", ".", "'") and i + 1 < len(toks)
            if starts and toks[i + 1][0] == "::" and not (
                prev == "in" and i >= 2 and toks[i - 2][0] == "("
            ):
                base = self.base(t, cur)
                if base is not None:
                    j, paths = self.path_tree(toks, i + 1, base)
                    for p, shown in paths:
                        add(p, line, t + shown)
                    i = j
                    continue
            elif starts and prev == "use" and t in self.children(cur):
                # `use child;` names the child module itself.
                add(cur + (t,), line, t)
            i += 1
        return found

    def children(self, cur):
        return {p[-1] for p in self.modules if len(p) == len(cur) + 1 and p[:-1] == cur}

    def base(self, t, cur):
        """The module path a path starting with the word `t` starts from."""
        if t == "crate":
            return ()
        if t == "self":
            return cur
        if t == "super":
            return cur[:-1]
        if t in self.children(cur):
            return cur + (t,)
        return None

    def path_tree(self, toks, i, base):
        """Read `::a::b`, `::{a, b::c}` or `::*` from toks[i] (at `::`).
        Returns the index past it and [(module path, text shown)]."""
        path, shown = list(base), ""
        while i + 1 < len(toks) and toks[i][0] == "::":
            nxt = toks[i + 1][0]
            if nxt == "super":
                path = path[:-1]
                shown += "::super"
                i += 2
            elif IDENT.fullmatch(nxt):
                path.append(nxt)
                shown += "::" + nxt
                i += 2
            elif nxt == "{":
                end = matching(toks, i + 1)
                out = []
                for part in split_commas(toks[i + 2 : end - 1]):
                    if not part:
                        continue
                    first = part[0][0]
                    if first == "self":
                        out.append((tuple(path), shown))
                        continue
                    if not IDENT.fullmatch(first):
                        continue
                    _, sub = self.path_tree(
                        [("::", 0)] + part, 0, tuple(path)
                    )
                    out.extend((p, shown + s) for p, s in sub)
                return end, out or [(tuple(path), shown)]
            else:
                break
        return i, [(tuple(path), shown)]


# Method names that std's types also have (iterators, options, results,
# slices, strings, collections, atomics, locks, I/O, formatting): a call
# `.sum()` or `.len()` is as likely std's as ours, so such a name makes no
# edge even when a split impl defines it. A split-impl method should be
# named for its stage (`accept_all`, `arm_completion_fds`), not like these.
COMMON_METHODS = set(
    """
    new default clone drop fmt from into try_from try_into as_ref as_mut
    borrow borrow_mut deref deref_mut eq ne cmp partial_cmp hash to_owned
    to_string len is_empty push pop get get_mut insert remove clear iter
    iter_mut into_iter next next_back take skip drain extend contains map
    filter filter_map flat_map flatten fold sum product count min max min_by
    max_by min_by_key max_by_key any all find find_map position rev zip
    chain enumerate collect last nth step_by peekable cloned copied inspect
    for_each try_for_each partition chunks windows split split_at join
    first sort sort_by sort_by_key sort_unstable dedup retain truncate
    resize reserve with_capacity capacity swap replace fill copy_from_slice
    clone_from_slice starts_with ends_with trim parse lines bytes chars
    keys values entry or_insert or_default and_then or_else ok err ok_or
    ok_or_else unwrap unwrap_or unwrap_or_else unwrap_or_default expect
    map_err map_or map_or_else is_some is_none is_ok is_err as_deref
    as_slice as_ptr as_mut_ptr lock try_lock read write flush send recv
    try_recv wait notify_one notify_all poll run start stop close open set
    reset into_inner load store fetch_add fetch_sub fetch_or fetch_and
    compare_exchange swap update add sub mul div rem shl shr not neg
    complete end submit name info id kind status result error size offset
    duration_since elapsed as_secs as_millis as_nanos checked_add
    checked_sub saturating_add saturating_sub wrapping_add wrapping_sub
    div_ceil abs pow
    """.split()
)


def impl_blocks(toks):
    """[(type name, or None for a trait impl, [method names])] of the impl
    blocks in `toks`, at any depth."""
    out = []
    i = 0
    while i < len(toks):
        if toks[i][0] != "impl" or (i and toks[i - 1][0] in (".", "::")):
            i += 1
            continue
        j, angle = i + 1, 0
        ty, trait_impl = None, False
        while j < len(toks):
            t = toks[j][0]
            if t == "<":
                angle += 1
            elif t == ">":
                angle -= 1
            elif angle == 0 and t == "for":
                trait_impl = True
            elif angle == 0 and t in ("{", ";", "where"):
                break
            elif angle == 0 and IDENT.fullmatch(t) and t not in ("dyn", "mut", "const", "unsafe"):
                ty = t
            j += 1
        while j < len(toks) and toks[j][0] != "{":
            if toks[j][0] == ";":
                break
            j += 1
        if j >= len(toks) or toks[j][0] != "{":
            i = j + 1
            continue
        end = matching(toks, j)
        names, depth, k = [], 0, j
        while k < end:
            t = toks[k][0]
            if t == "{":
                depth += 1
            elif t == "}":
                depth -= 1
            elif t == "fn" and depth == 1 and k + 1 < end and IDENT.fullmatch(toks[k + 1][0]):
                names.append(toks[k + 1][0])
            k += 1
        out.append((None if trait_impl else ty, names))
        i = j + 1
    return out


def split_commas(toks):
    """The top-level comma-separated parts of a use tree's braces."""
    parts, cur, depth = [], [], 0
    for tok in toks:
        if tok[0] in "{([":
            depth += 1
        elif tok[0] in "})]":
            depth -= 1
        if tok[0] == "," and depth == 0:
            parts.append(cur)
            cur = []
        else:
            cur.append(tok)
    parts.append(cur)
    return parts


def components(graph):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def main(argv, root=ROOT):
    crates_dir = os.path.join(root, "crates")
    names = argv or sorted(
        d for d in os.listdir(crates_dir) if os.path.isdir(os.path.join(crates_dir, d, "src"))
    )
    circles, crates = 0, 0
    for name in names:
        src = os.path.join(crates_dir, name, "src")
        if not os.path.isdir(src):
            print("module-graph: no crate %s" % name, file=sys.stderr)
            return 2
        crate = Crate(src)
        crate.load()
        graph, why = {}, {}
        for rel in sorted(crate.code):
            found = crate.edges(rel)
            graph[rel] = sorted(found)
            for dep, ev in found.items():
                why[(rel, dep)] = ev
        print("== %s (crates/%s/src)" % (name, name))
        for rel in sorted(graph):
            print(("%s: %s" % (rel, " ".join(graph[rel]))).rstrip())
        comps = components(graph)
        if not comps:
            print("circles: none")
        else:
            crates += 1
        for comp in comps:
            circles += 1
            print("circle: %s" % " ".join(comp))
            for a in comp:
                for b in graph[a]:
                    if b in comp:
                        line, text = why[(a, b)]
                        print("  %s -> %s  (%s:%d %s)" % (a, b, a, line, text))
        print()
    if circles:
        print("%d circle(s) in %d crate(s)" % (circles, crates))
    else:
        print("no circles")
    return 1 if circles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
